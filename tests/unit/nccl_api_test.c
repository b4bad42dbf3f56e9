/* Unit tests of comm/nccl_api: the NCCL loader and its mirrored ABI.
 *
 * Most tests load the FAKE NCCL library (tests/fake_nccl) through
 * rdzv_nccl_load(), the seam production uses for libnccl.so.2, and check
 * what the fake recorded in its call log (FAKE_NCCL_LOG). The fakes are
 * `data` dependencies, found relative to the test's working directory (the
 * runfiles root under `bazel test`).
 *
 * Two tests use the real NCCL when it is installed and are skipped, loudly,
 * when it is not:
 *   - the layout test compiles against /usr/local/cuda/include/nccl.h
 *     (added with -isystem by BUILD) and static-asserts that our mirror of
 *     NCCL's types matches it;
 *   - the real-library test dlopens libnccl.so.2 and makes the one call
 *     that works without a GPU, ncclGetUniqueId. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/nccl_api.h"
#include "rdzv/error.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
/* nccl.h declares a few functions as `f()`, which -Wstrict-prototypes
 * (an error here) rejects. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#define HAVE_NCCL_H 1
#endif
#if __has_include(<cuda.h>)
#include <cuda.h>
#define HAVE_CUDA_H 1
#endif
#endif

#define FAKE "tests/fake_nccl/libfake_nccl.so"
#define FAKE_OLD "tests/fake_nccl/libfake_nccl_old.so"
#define FAKE_NOSPLIT "tests/fake_nccl/libfake_nccl_nosplit.so"
#define REAL_NCCL RDZV_NCCL_DEFAULT_CUDA_PATH

/* ---- Layout: our mirror against the real nccl.h, at compile time. ---- */

#ifdef HAVE_NCCL_H
#define SAME_FIELD_(f)                                                         \
  _Static_assert(offsetof(struct rdzv_nccl_config, f) ==                       \
                         offsetof(ncclConfig_t, f) &&                          \
                     sizeof(((struct rdzv_nccl_config *)0)->f) ==              \
                         sizeof(((ncclConfig_t *)0)->f),                       \
                 "ncclConfig_t." #f " differs from comm/nccl_api.h")
SAME_FIELD_(size);
SAME_FIELD_(magic);
SAME_FIELD_(version);
SAME_FIELD_(blocking);
SAME_FIELD_(cgaClusterSize);
SAME_FIELD_(minCTAs);
SAME_FIELD_(maxCTAs);
SAME_FIELD_(netName);
SAME_FIELD_(splitShare);
SAME_FIELD_(trafficClass);
SAME_FIELD_(commName);
SAME_FIELD_(collnetEnable);
SAME_FIELD_(CTAPolicy);
SAME_FIELD_(shrinkShare);
SAME_FIELD_(nvlsCTAs);
SAME_FIELD_(nChannelsPerNetPeer);
SAME_FIELD_(nvlinkCentricSched);
#undef SAME_FIELD_
/* Equal sizes with every field at the same offset: no field was added. */
_Static_assert(sizeof(struct rdzv_nccl_config) == sizeof(ncclConfig_t),
               "sizeof(ncclConfig_t) differs from comm/nccl_api.h: a field "
               "was added or removed");
_Static_assert(_Alignof(struct rdzv_nccl_config) == _Alignof(ncclConfig_t),
               "ncclConfig_t alignment");
_Static_assert(RDZV_NCCL_CONFIG_VERSION == NCCL_VERSION_CODE,
               "nccl.h is not the 2.28.9 header the mirror was copied from: "
               "re-check comm/nccl_api.h against it, then update "
               "RDZV_NCCL_CONFIG_VERSION");
_Static_assert(RDZV_NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) ==
                   NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),
               "NCCL_VERSION encoding");
_Static_assert(RDZV_NCCL_MIN_VERSION == NCCL_VERSION(2, 23, 0),
               "NCCL_VERSION encoding of 2.23.0");
_Static_assert(RDZV_NCCL_CONFIG_UNDEF_INT == NCCL_CONFIG_UNDEF_INT,
               "NCCL_CONFIG_UNDEF_INT");
_Static_assert(RDZV_NCCL_SPLIT_NOCOLOR == NCCL_SPLIT_NOCOLOR,
               "NCCL_SPLIT_NOCOLOR");
#ifdef NCCL_SHRINK_ABORT
_Static_assert(RDZV_NCCL_SHRINK_DEFAULT == NCCL_SHRINK_DEFAULT,
               "NCCL_SHRINK_DEFAULT");
_Static_assert(RDZV_NCCL_SHRINK_ABORT == NCCL_SHRINK_ABORT,
               "NCCL_SHRINK_ABORT");
#endif

_Static_assert(RDZV_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES,
               "NCCL_UNIQUE_ID_BYTES");
_Static_assert(sizeof(rdzv_nccl_unique_id) == sizeof(ncclUniqueId),
               "ncclUniqueId size");
_Static_assert(_Alignof(rdzv_nccl_unique_id) == _Alignof(ncclUniqueId),
               "ncclUniqueId alignment (it is passed by value)");
_Static_assert(sizeof(rdzv_nccl_comm_t) == sizeof(ncclComm_t), "ncclComm_t");
_Static_assert(sizeof(rdzv_cuda_stream_t) == sizeof(cudaStream_t),
               "cudaStream_t");

_Static_assert(sizeof(rdzv_nccl_result) == sizeof(ncclResult_t),
               "ncclResult_t size");
/* Enumerators of two enum types: compare as int (-Wenum-compare). */
#define SAME_VALUE_(ours, theirs)                                              \
  _Static_assert((int)(ours) == (int)(theirs), #theirs " differs")
SAME_VALUE_(RDZV_NCCL_SUCCESS, ncclSuccess);
SAME_VALUE_(RDZV_NCCL_UNHANDLED_CUDA_ERROR, ncclUnhandledCudaError);
SAME_VALUE_(RDZV_NCCL_SYSTEM_ERROR, ncclSystemError);
SAME_VALUE_(RDZV_NCCL_INTERNAL_ERROR, ncclInternalError);
SAME_VALUE_(RDZV_NCCL_INVALID_ARGUMENT, ncclInvalidArgument);
SAME_VALUE_(RDZV_NCCL_INVALID_USAGE, ncclInvalidUsage);
SAME_VALUE_(RDZV_NCCL_REMOTE_ERROR, ncclRemoteError);
SAME_VALUE_(RDZV_NCCL_IN_PROGRESS, ncclInProgress);
SAME_VALUE_(RDZV_NCCL_NUM_RESULTS, ncclNumResults);
SAME_VALUE_(RDZV_NCCL_INT32, ncclInt32);
SAME_VALUE_(RDZV_NCCL_INT64, ncclInt64);
SAME_VALUE_(RDZV_NCCL_FLOAT32, ncclFloat32);
SAME_VALUE_(RDZV_NCCL_SUM, ncclSum);
SAME_VALUE_(RDZV_NCCL_MAX, ncclMax);
#undef SAME_VALUE_
_Static_assert(sizeof(rdzv_nccl_datatype) == sizeof(ncclDataType_t),
               "ncclDataType_t size");
_Static_assert(sizeof(rdzv_nccl_redop) == sizeof(ncclRedOp_t),
               "ncclRedOp_t size");
#endif /* HAVE_NCCL_H */

/* The CUDA driver ABI that comm/cuda_ctx.c assumes (CUresult as int,
 * CUcontext as a pointer, the exported names not renamed to _v2 variants)
 * and that the fake's stand-in exports, against the real cuda.h. */
#ifdef HAVE_CUDA_H
#if defined(cuCtxGetCurrent) || defined(cuCtxSetCurrent)
#error "cuda.h renames cuCtxGetCurrent/cuCtxSetCurrent: update comm/cuda_ctx.c"
#endif
_Static_assert(sizeof(CUresult) == sizeof(int), "CUresult is int-sized");
_Static_assert(sizeof(CUcontext) == sizeof(void *), "CUcontext is a pointer");
_Static_assert(CUDA_SUCCESS == 0, "CUDA_SUCCESS");
_Static_assert(CUDA_ERROR_INVALID_VALUE == 1, "CUDA_ERROR_INVALID_VALUE");
_Static_assert(CUDA_ERROR_INVALID_CONTEXT == 201, "CUDA_ERROR_INVALID_CONTEXT");
_Static_assert(_Generic(&cuCtxGetCurrent, CUresult (*)(CUcontext *) : 1,
                        default : 0),
               "cuCtxGetCurrent(CUcontext *)");
_Static_assert(_Generic(&cuCtxSetCurrent, CUresult (*)(CUcontext) : 1,
                        default : 0),
               "cuCtxSetCurrent(CUcontext)");
#endif /* HAVE_CUDA_H */

/* The parts of the layout check that need values, not types: our
 * initializer writes what NCCL_CONFIG_INITIALIZER writes. */
static void test_config_matches_nccl_initializer(void **state) {
  struct rdzv_nccl_config ours;

  (void)state;
  rdzv_nccl_config_init(&ours);
  assert_int_equal(ours.size, sizeof(ours));
  assert_int_equal(ours.magic, 0xcafebeefu);
  assert_int_equal(ours.version, RDZV_NCCL_CONFIG_VERSION);
  assert_int_equal(ours.blocking, RDZV_NCCL_CONFIG_UNDEF_INT);
  assert_null(ours.netName);
  assert_null(ours.commName);
  assert_int_equal(ours.nvlinkCentricSched, RDZV_NCCL_CONFIG_UNDEF_INT);
#ifdef HAVE_NCCL_H
  {
    ncclConfig_t ref = NCCL_CONFIG_INITIALIZER;

    assert_int_equal(ours.size, ref.size);
    assert_int_equal(ours.magic, ref.magic);
    assert_int_equal(ours.version, ref.version);
#define SAME_(f) assert_int_equal(ours.f, ref.f)
    SAME_(blocking);
    SAME_(cgaClusterSize);
    SAME_(minCTAs);
    SAME_(maxCTAs);
    SAME_(splitShare);
    SAME_(trafficClass);
    SAME_(collnetEnable);
    SAME_(CTAPolicy);
    SAME_(shrinkShare);
    SAME_(nvlsCTAs);
    SAME_(nChannelsPerNetPeer);
    SAME_(nvlinkCentricSched);
#undef SAME_
    assert_ptr_equal(ours.netName, ref.netName);
    assert_ptr_equal(ours.commName, ref.commName);
  }
#else
  printf("SKIP: nccl.h not found (looked in /usr/local/cuda/include); the "
         "mirror of NCCL's ABI was NOT checked against it\n");
  skip();
#endif
}

/* ---- Helpers. ---- */

static char log_path[4096];

/* Unsets every FAKE_NCCL_* variable and points FAKE_NCCL_LOG at a fresh,
 * empty file for the test. */
static int setup(void **state) {
  const char *dir = getenv("TEST_TMPDIR");

  (void)state;
  unsetenv("FAKE_NCCL_VERSION");
  unsetenv("FAKE_NCCL_INIT_POLLS");
  unsetenv("FAKE_NCCL_FAIL_INIT");
  snprintf(log_path, sizeof(log_path), "%s/fake_nccl.%ld.log",
           dir != NULL ? dir : "/tmp", (long)getpid());
  unlink(log_path);
  setenv("FAKE_NCCL_LOG", log_path, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(log_path);
  unsetenv("FAKE_NCCL_LOG");
  unsetenv("FAKE_NCCL_VERSION");
  unsetenv("FAKE_NCCL_INIT_POLLS");
  unsetenv("FAKE_NCCL_FAIL_INIT");
  return 0;
}

/* The fake's call log so far, NUL-terminated, in a static buffer. */
static const char *fake_log(void) {
  static char buf[16384];
  size_t n = 0;
  FILE *f = fopen(log_path, "r");

  buf[0] = '\0';
  if (f == NULL)
    return buf;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Truncates the log, so a test can assert on the calls that follow. */
static void fake_log_clear(void) {
  FILE *f = fopen(log_path, "w");

  if (f != NULL)
    fclose(f);
}

static void hex8(const rdzv_nccl_unique_id *id, char out[17]) {
  int i;

  for (i = 0; i < 8; i++)
    snprintf(out + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
}

static struct rdzv_nccl_api *load_ok(const char *path) {
  struct rdzv_nccl_api *api = NULL;
  char err[512];
  int rc = rdzv_nccl_load(path, &api, err, sizeof(err));

  if (rc != 0)
    fail_msg("loading %s: %s: %s", path, rdzv_err_name(rc), err);
  assert_non_null(api);
  return api;
}

/* ---- Plain functions. ---- */

static void test_error_codes(void **state) {
  (void)state;
  assert_int_equal(RDZV_ENCCL_MISSING, -1026);
  assert_int_equal(RDZV_ENCCL_SYMBOL, -1027);
  assert_int_equal(RDZV_ENCCL_VERSION, -1028);
  assert_int_equal(RDZV_ENCCL, -1029);
  assert_string_equal(rdzv_err_name(RDZV_ENCCL_MISSING), "RDZV_ENCCL_MISSING");
  assert_string_equal(rdzv_err_name(RDZV_ENCCL_SYMBOL), "RDZV_ENCCL_SYMBOL");
  assert_string_equal(rdzv_err_name(RDZV_ENCCL_VERSION), "RDZV_ENCCL_VERSION");
  assert_string_equal(rdzv_err_name(RDZV_ENCCL), "RDZV_ENCCL");
  assert_string_equal(rdzv_strerror(RDZV_ENCCL), "an NCCL call failed");
}

static void test_version_format(void **state) {
  static const struct {
    int code;
    const char *text;
  } cases[] = {
      {22809, "2.28.9"}, {22300, "2.23.0"}, {22299, "2.22.99"},
      {21805, "2.18.5"}, {20903, "2.9.3"},  {2804, "2.8.4"},
      {2406, "2.4.6"},   {30000, "3.0.0"},  {-1, "unknown"},
  };
  char buf[32];
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    assert_string_equal(
        rdzv_nccl_version_format(cases[i].code, buf, sizeof(buf)),
        cases[i].text);
  /* Truncates, and stays terminated. */
  assert_string_equal(rdzv_nccl_version_format(22809, buf, 4), "2.2");
}

static void test_default_path(void **state) {
  (void)state;
  unsetenv("RDZV_NCCL_LIBRARY");
  assert_null(rdzv_nccl_default_path());
  setenv("RDZV_NCCL_LIBRARY", "", 1);
  assert_null(rdzv_nccl_default_path());
  setenv("RDZV_NCCL_LIBRARY", FAKE, 1);
  assert_string_equal(rdzv_nccl_default_path(), FAKE);
  unsetenv("RDZV_NCCL_LIBRARY");
}

/* ---- Loading the fake: calls go through, in order, with their ids. ---- */

static void test_load_fake_calls_go_through(void **state) {
  struct rdzv_nccl_api *api = load_ok(FAKE);
  rdzv_nccl_unique_id a, b;
  rdzv_nccl_comm_t comm = NULL;
  struct rdzv_nccl_config cfg;
  float send[4] = {1, 2, 3, 4}, recv[4] = {0};
  char want[1024], ha[17], hb[17];
  const char *log, *p;
  int n = -1, r = -1, c = -1;

  (void)state;
  assert_int_equal(api->version, 22809);
  assert_string_equal(api->path, FAKE);
  assert_int_equal(api->get_unique_id(&a), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->get_unique_id(&b), RDZV_NCCL_SUCCESS);
  assert_memory_not_equal(&a, &b, sizeof(a));
  assert_memory_equal(a.internal + 8, "FAKENCCL", 8);
  rdzv_nccl_config_init(&cfg);
  assert_int_equal(api->comm_init_rank_config(&comm, 4, b, 1, &cfg),
                   RDZV_NCCL_SUCCESS);
  assert_non_null(comm);
  assert_int_equal(api->comm_count(comm, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_user_rank(comm, &r), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 4);
  assert_int_equal(r, 1);
  assert_int_equal(api->all_reduce(send, recv, 4, RDZV_NCCL_FLOAT32,
                                   RDZV_NCCL_SUM, comm, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_memory_equal(send, recv, sizeof(send));
  assert_int_equal(api->comm_finalize(comm), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_destroy(comm), RDZV_NCCL_SUCCESS);

  /* Comm serials count across tests: read this one's from the log. */
  log = fake_log();
  p = strstr(log, "initRankConfig comm=");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "initRankConfig comm=%d", &c), 1);
  hex8(&a, ha);
  hex8(&b, hb);
  snprintf(
      want, sizeof(want),
      "getVersion version=22809\n"
      "getUniqueId id=%s\n"
      "getUniqueId id=%s\n"
      "initRankConfig comm=%d nranks=4 rank=1 blocking=1 id=%s -> 0 ctx=0x0\n"
      "commCount comm=%d -> 0\n"
      "userRank comm=%d -> 0\n"
      "allReduce comm=%d count=4 type=7 op=0 -> 0\n"
      "finalize comm=%d\n"
      "destroy comm=%d\n",
      ha, hb, c, hb, c, c, c, c, c);
  assert_string_equal(log, want);
  rdzv_nccl_unload(api);
}

/* Non-blocking scalable init: ncclInProgress, N polls, then success. */
static void test_nonblocking_scalable_init(void **state) {
  struct rdzv_nccl_api *api;
  rdzv_nccl_unique_id ids[2];
  rdzv_nccl_comm_t comm = NULL;
  struct rdzv_nccl_config cfg;
  rdzv_nccl_result async;
  char h0[17], h1[17], want[256];
  int i, n = -1;

  (void)state;
  setenv("FAKE_NCCL_INIT_POLLS", "3", 1);
  api = load_ok(FAKE);
  assert_int_equal(api->get_unique_id(&ids[0]), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->get_unique_id(&ids[1]), RDZV_NCCL_SUCCESS);
  fake_log_clear();
  rdzv_nccl_config_init(&cfg);
  cfg.blocking = 0;
  assert_int_equal(api->comm_init_rank_scalable(&comm, 8, 3, 2, ids, &cfg),
                   RDZV_NCCL_IN_PROGRESS);
  assert_non_null(comm);
  /* Not usable before init completes (the fake is strict about this). */
  assert_int_equal(api->comm_count(comm, &n), RDZV_NCCL_INVALID_USAGE);
  for (i = 0; i < 3; i++) {
    assert_int_equal(api->comm_get_async_error(comm, &async),
                     RDZV_NCCL_SUCCESS);
    assert_int_equal(async, RDZV_NCCL_IN_PROGRESS);
  }
  assert_int_equal(api->comm_get_async_error(comm, &async), RDZV_NCCL_SUCCESS);
  assert_int_equal(async, RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_count(comm, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 8);

  hex8(&ids[0], h0);
  hex8(&ids[1], h1);
  snprintf(want, sizeof(want),
           " nranks=8 rank=3 nId=2 blocking=0 ids=%s,%s -> 7 ctx=0x0\n", h0,
           h1);
  assert_non_null(strstr(fake_log(), want));
  assert_true(strncmp(fake_log(), "initScalable comm=", 18) == 0);
  assert_int_equal(api->comm_destroy(comm), RDZV_NCCL_SUCCESS);
  rdzv_nccl_unload(api);
}

/* FAKE_NCCL_FAIL_INIT: blocking init fails at once; non-blocking init
 * fails through the async error; rdzv_nccl_check explains both. */
static void test_failed_init(void **state) {
  struct rdzv_nccl_api *api;
  rdzv_nccl_unique_id id;
  rdzv_nccl_comm_t comm = (rdzv_nccl_comm_t)&id;
  struct rdzv_nccl_config cfg;
  rdzv_nccl_result res, async;
  char err[512];

  (void)state;
  setenv("FAKE_NCCL_FAIL_INIT", "1", 1);
  setenv("FAKE_NCCL_INIT_POLLS", "2", 1);
  api = load_ok(FAKE);
  assert_int_equal(api->get_unique_id(&id), RDZV_NCCL_SUCCESS);
  res = api->comm_init_rank_config(&comm, 2, id, 0, NULL);
  assert_int_equal(res, RDZV_NCCL_INTERNAL_ERROR);
  assert_null(comm);
  assert_int_equal(rdzv_nccl_check(api, NULL, res, "ncclCommInitRankConfig",
                                   err, sizeof(err)),
                   RDZV_ENCCL);
  assert_non_null(strstr(err, "ncclCommInitRankConfig: internal error"));
  assert_non_null(strstr(err, "(ncclResult 3)"));

  rdzv_nccl_config_init(&cfg);
  cfg.blocking = 0;
  res = api->comm_init_rank_config(&comm, 2, id, 1, &cfg);
  assert_int_equal(res, RDZV_NCCL_IN_PROGRESS);
  assert_non_null(comm);
  do {
    assert_int_equal(api->comm_get_async_error(comm, &async),
                     RDZV_NCCL_SUCCESS);
  } while (async == RDZV_NCCL_IN_PROGRESS);
  assert_int_equal(async, RDZV_NCCL_INTERNAL_ERROR);
  assert_int_equal(
      rdzv_nccl_check(api, comm, async, "async init", err, sizeof(err)),
      RDZV_ENCCL);
  assert_non_null(strstr(err, "last error: fake NCCL: init failed"));
  assert_int_equal(api->comm_abort(comm), RDZV_NCCL_SUCCESS);
  assert_int_equal(
      rdzv_nccl_check(api, NULL, RDZV_NCCL_SUCCESS, "x", err, sizeof(err)), 0);
  rdzv_nccl_unload(api);
}

static void test_split(void **state) {
  struct rdzv_nccl_api *api = load_ok(FAKE);
  rdzv_nccl_comm_t world = NULL, child = NULL, none = (rdzv_nccl_comm_t)&api;
  rdzv_nccl_unique_id id;
  int n = -1;

  (void)state;
  assert_int_equal(api->get_unique_id(&id), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_init_rank_config(&world, 4, id, 2, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_split(world, 1, 2, &child, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_non_null(child);
  assert_int_equal(api->comm_count(child, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 4); /* The fake's child keeps the parent's size. */
  assert_int_equal(
      api->comm_split(world, RDZV_NCCL_SPLIT_NOCOLOR, 0, &none, NULL),
      RDZV_NCCL_SUCCESS);
  assert_null(none);
  assert_non_null(strstr(fake_log(), " color=-1 key=0 child=0 -> 0 ctx=0x0\n"));
  assert_int_equal(api->comm_destroy(child), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_destroy(world), RDZV_NCCL_SUCCESS);
  rdzv_nccl_unload(api);
}

/* A config not made by rdzv_nccl_config_init is refused, as NCCL does. */
static void test_config_without_magic_is_refused(void **state) {
  struct rdzv_nccl_api *api = load_ok(FAKE);
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t comm = NULL;
  rdzv_nccl_unique_id id;

  (void)state;
  memset(&cfg, 0, sizeof(cfg));
  assert_int_equal(api->get_unique_id(&id), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_init_rank_config(&comm, 1, id, 0, &cfg),
                   RDZV_NCCL_INVALID_ARGUMENT);
  assert_null(comm);
  rdzv_nccl_unload(api);
}

/* ---- The fake's CUDA driver stand-in (comm/cuda_ctx.h's seam). ---- */

typedef int (*cu_get_fn)(void **);
typedef int (*cu_set_fn)(void *);

struct other_thread {
  cu_get_fn get;
  void *seen;
  int res;
};

static void *read_ctx_elsewhere(void *arg) {
  struct other_thread *t = arg;

  t->seen = (void *)1;
  t->res = t->get(&t->seen);
  return NULL;
}

/* cuCtxGetCurrent/cuCtxSetCurrent are per thread; every init line logs the
 * calling thread's context; a destroyed context cannot be made current. */
static void test_fake_cuda_context(void **state) {
  struct rdzv_nccl_api *api = load_ok(FAKE);
  void *dl = dlopen(FAKE, RTLD_NOW | RTLD_NOLOAD);
  void *ctx = (void *)1, *g, *s, *d;
  int (*destroy)(void *);
  struct other_thread t = {0};
  rdzv_nccl_comm_t comm = NULL, child = NULL, scal = NULL;
  rdzv_nccl_unique_id id;
  cu_get_fn get;
  cu_set_fn set;
  pthread_t th;

  (void)state;
  assert_non_null(dl); /* rdzv_nccl_load mapped it: RTLD_NOLOAD finds it */
  g = dlsym(dl, "cuCtxGetCurrent");
  s = dlsym(dl, "cuCtxSetCurrent");
  d = dlsym(dl, "fake_cuCtxDestroy");
  assert_non_null(g);
  assert_non_null(s);
  assert_non_null(d);
  memcpy(&get, &g, sizeof(g));
  memcpy(&set, &s, sizeof(s));
  memcpy(&destroy, &d, sizeof(d));

  assert_int_equal(get(&ctx), 0);
  assert_null(ctx); /* none current on a thread at first */
  assert_int_equal(get(NULL), 1);
  assert_int_equal(set((void *)0x1234), 0);
  assert_int_equal(get(&ctx), 0);
  assert_ptr_equal(ctx, (void *)0x1234);
  t.get = get;
  assert_int_equal(pthread_create(&th, NULL, read_ctx_elsewhere, &t), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(t.res, 0);
  assert_null(t.seen); /* another thread has its own */

  assert_int_equal(api->get_unique_id(&id), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_init_rank_config(&comm, 2, id, 1, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_non_null(strstr(fake_log(), " -> 0 ctx=0x1234\n"));
  assert_int_equal(set((void *)0xabc0), 0);
  assert_int_equal(api->comm_split(comm, 0, 0, &child, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_non_null(strstr(fake_log(), "split comm="));
  assert_non_null(strstr(fake_log(), " color=0 key=0 child="));
  assert_non_null(strstr(fake_log(), " -> 0 ctx=0xabc0\n"));
  fake_log_clear();
  assert_int_equal(api->comm_init_rank_scalable(&scal, 2, 0, 1, &id, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_true(strncmp(fake_log(), "initScalable comm=", 18) == 0);
  assert_non_null(strstr(fake_log(), " -> 0 ctx=0xabc0\n"));

  /* Destroyed: no longer current here, and refused on every thread. */
  assert_int_equal(destroy((void *)0xabc0), 0);
  assert_int_equal(get(&ctx), 0);
  assert_null(ctx);
  assert_int_equal(set((void *)0xabc0), 201);
  assert_int_equal(set((void *)0x1234), 0);
  assert_int_equal(set(NULL), 0);
  assert_int_equal(get(&ctx), 0);
  assert_null(ctx);
  assert_int_equal(api->comm_destroy(scal), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_destroy(child), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_destroy(comm), RDZV_NCCL_SUCCESS);
  dlclose(dl);
  rdzv_nccl_unload(api);
}

/* ---- Load failures: each code, each message. ---- */

static void test_missing_library(void **state) {
  static const char *const two[] = {"tests/fake_nccl/libnot_here_1.so",
                                    "libnot_here_2.so.9"};
  struct rdzv_nccl_api *api = (struct rdzv_nccl_api *)&api;
  char err[1024], small[24];
  int rc;

  (void)state;
  rc = rdzv_nccl_load("tests/fake_nccl/libnot_here_1.so", &api, err,
                      sizeof(err));
  assert_int_equal(rc, RDZV_ENCCL_MISSING);
  assert_null(api);
  assert_non_null(strstr(err, "NCCL library not found; tried:"));
  assert_non_null(strstr(err, "'tests/fake_nccl/libnot_here_1.so' ("));
  assert_non_null(strstr(err, "No such file"));

  rc = rdzv_nccl_load_first(two, 2, &api, err, sizeof(err));
  assert_int_equal(rc, RDZV_ENCCL_MISSING);
  assert_non_null(strstr(err, "'tests/fake_nccl/libnot_here_1.so' ("));
  assert_non_null(strstr(err, "; 'libnot_here_2.so.9' ("));

  /* A short buffer gets a truncated, terminated message. */
  rc = rdzv_nccl_load_first(two, 2, &api, small, sizeof(small));
  assert_int_equal(rc, RDZV_ENCCL_MISSING);
  assert_int_equal(strlen(small), sizeof(small) - 1);
  /* And no buffer at all is fine. */
  assert_int_equal(rdzv_nccl_load_first(two, 2, &api, NULL, 0),
                   RDZV_ENCCL_MISSING);
  assert_int_equal(rdzv_nccl_load_first(NULL, 0, &api, err, sizeof(err)),
                   RDZV_ENCCL_MISSING);
  assert_non_null(strstr(err, "no path to try"));
  assert_int_equal(rdzv_nccl_load(FAKE, NULL, err, sizeof(err)), -EINVAL);
}

/* The first candidate that opens wins; failures before it are forgotten. */
static void test_first_candidate_that_opens_wins(void **state) {
  static const char *const list[] = {"libnot_here.so", FAKE, FAKE_OLD};
  struct rdzv_nccl_api *api = NULL;
  char err[512] = "junk";

  (void)state;
  assert_int_equal(rdzv_nccl_load_first(list, 3, &api, err, sizeof(err)), 0);
  assert_string_equal(api->path, FAKE);
  assert_string_equal(err, "");
  rdzv_nccl_unload(api);
  rdzv_nccl_unload(NULL);
}

static void test_missing_symbol(void **state) {
  struct rdzv_nccl_api *api = (struct rdzv_nccl_api *)&api;
  char err[512];

  (void)state;
  assert_int_equal(rdzv_nccl_load(FAKE_NOSPLIT, &api, err, sizeof(err)),
                   RDZV_ENCCL_SYMBOL);
  assert_null(api);
  assert_string_equal(err, "NCCL library '" FAKE_NOSPLIT "' (version 2.28.9) "
                           "lacks required symbol(s): ncclCommSplit");
}

static void test_old_version(void **state) {
  struct rdzv_nccl_api *api = (struct rdzv_nccl_api *)&api;
  char err[512];

  (void)state;
  assert_int_equal(rdzv_nccl_load(FAKE_OLD, &api, err, sizeof(err)),
                   RDZV_ENCCL_VERSION);
  assert_null(api);
  assert_non_null(strstr(err, "'" FAKE_OLD "' is version 2.18.5 (code 21805)"));
  assert_non_null(strstr(err, "rdzv needs 2.23.0 (code 22300) or newer"));

  /* The boundary, through the fake's FAKE_NCCL_VERSION. */
  setenv("FAKE_NCCL_VERSION", "22299", 1);
  assert_int_equal(rdzv_nccl_load(FAKE, &api, err, sizeof(err)),
                   RDZV_ENCCL_VERSION);
  assert_non_null(strstr(err, "is version 2.22.99 (code 22299)"));
  setenv("FAKE_NCCL_VERSION", "22300", 1);
  api = load_ok(FAKE);
  assert_int_equal(api->version, 22300);
  rdzv_nccl_unload(api);
  /* The pre-2.9 encoding is older still. */
  setenv("FAKE_NCCL_VERSION", "2804", 1);
  assert_int_equal(rdzv_nccl_load(FAKE, &api, err, sizeof(err)),
                   RDZV_ENCCL_VERSION);
  assert_non_null(strstr(err, "is version 2.8.4 (code 2804)"));
}

/* ---- The real NCCL, where installed. ---- */

static void test_real_nccl(void **state) {
  struct rdzv_nccl_api *api;
  rdzv_nccl_unique_id a, b, zero;
  char version[32];
  int v = -1;

  (void)state;
  if (access(REAL_NCCL, R_OK) != 0) {
    printf("SKIP: %s not present; the real NCCL was NOT tested\n", REAL_NCCL);
    skip();
    return;
  }
  /* The default search (no path): libnccl.so.2, then the CUDA path. */
  api = load_ok(NULL);
  printf("real NCCL: %s, version %s (code %d)\n", api->path,
         rdzv_nccl_version_format(api->version, version, sizeof(version)),
         api->version);
  assert_true(api->version >= RDZV_NCCL_MIN_VERSION);
  assert_int_equal(api->get_version(&v), RDZV_NCCL_SUCCESS);
  assert_int_equal(v, api->version);
  memset(&zero, 0, sizeof(zero));
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  assert_int_equal(sizeof(a), 128);
  assert_int_equal(api->get_unique_id(&a), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->get_unique_id(&b), RDZV_NCCL_SUCCESS);
  assert_memory_not_equal(&a, &zero, sizeof(a));
  assert_memory_not_equal(&b, &zero, sizeof(b));
  assert_memory_not_equal(&a, &b, sizeof(a));
  assert_non_null(api->get_error_string(RDZV_NCCL_INTERNAL_ERROR));
  rdzv_nccl_unload(api);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_matches_nccl_initializer),
      cmocka_unit_test(test_error_codes),
      cmocka_unit_test(test_version_format),
      cmocka_unit_test(test_default_path),
      cmocka_unit_test_setup_teardown(test_load_fake_calls_go_through, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_nonblocking_scalable_init, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_failed_init, setup, teardown),
      cmocka_unit_test_setup_teardown(test_split, setup, teardown),
      cmocka_unit_test_setup_teardown(test_config_without_magic_is_refused,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_fake_cuda_context, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_library, setup, teardown),
      cmocka_unit_test_setup_teardown(test_first_candidate_that_opens_wins,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_symbol, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_version, setup, teardown),
      cmocka_unit_test(test_real_nccl),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
