/* tests/fake_nccl/fake_nccl.c: a FAKE NCCL library. TEST DOUBLE ONLY.
 *
 * Built as libfake_nccl.so (and two variants, see BUILD), it exports the
 * NCCL entry points comm/ uses, with NCCL's C ABI (declared through the
 * mirrored types of comm/nccl_api.h), so that tests load it through the
 * production seam, rdzv_nccl_load(), exactly as they would load libnccl.
 * It needs no GPU and does no communication: a communicator here is a small
 * heap object that records its size and rank.
 *
 * Behaviour, from environment variables. They are read when the library is
 * loaded and again at every ncclGetVersion call. rdzv_nccl_load() calls
 * ncclGetVersion once per load and opens libraries with RTLD_NODELETE (so a
 * second load does not rerun the constructor): re-reading there gives each
 * load the environment of that moment.
 *   FAKE_NCCL_VERSION=N     the code ncclGetVersion reports (default
 *                           FAKE_NCCL_DEFAULT_VERSION, set at compile time).
 *   FAKE_NCCL_INIT_POLLS=N  with config->blocking == 0, ncclCommInitRank*
 *                           and ncclCommSplit return ncclInProgress, and
 *                           ncclCommGetAsyncError on the new comm reports
 *                           ncclInProgress N times before the final result.
 *                           With N == 0 (default), or a blocking config,
 *                           init finishes inside the call.
 *   FAKE_NCCL_FAIL_INIT=1   init fails with ncclInternalError: returned at
 *                           once (and *comm = NULL) when init finishes
 *                           inside the call, else reported by
 *                           ncclCommGetAsyncError after the N polls (the
 *                           comm must then be aborted or destroyed).
 *   FAKE_NCCL_LOG=PATH      every call appends one line to PATH, so that
 *                           tests can assert what was called, in which
 *                           order, with which ids. Lines (ids are the first
 *                           8 bytes of each unique id, in hex):
 *                             getVersion version=22809
 *                             getUniqueId id=0123456789abcdef
 *                             initRankConfig comm=1 nranks=8 rank=3
 *                               blocking=0 id=0123456789abcdef -> 7
 *                               ctx=0x1003
 *                             initScalable comm=2 nranks=8 rank=3 nId=2
 *                               blocking=1 ids=0123...,4567... -> 0
 *                               ctx=0x0
 *                             asyncError comm=1 -> 7
 *                             split comm=1 color=0 key=3 child=3 -> 0
 *                               ctx=0x0
 *                             finalize comm=1 / destroy comm=1 /
 *                             abort comm=1
 *                             allReduce comm=1 count=4 type=7 op=0 -> 0
 *                             commCount comm=1 -> 0
 *                             userRank comm=1 -> 0
 *                             shrink comm=1 exclude=3,5 flags=1 child=4
 *                               nranks=6 rank=2 -> 0 ctx=0x0
 *                             commGetUniqueId comm=1 id=0123456789abcdef
 *                             grow comm=1 nranks=8 id=0123456789abcdef
 *                               rank=-1 child=5 newrank=3 -> 0 ctx=0x0
 *                               (id=none for a NULL id; comm=0 for a new
 *                               member, whose rank= is its new rank)
 *                             getErrorString result=3
 *                             getLastError
 *                           (each on one line; "comm=0" is a NULL comm, and
 *                           a failed init logs comm=0; ctx= is the calling
 *                           thread's current fake CUDA context, see below,
 *                           as NCCL's init uses the caller's device).
 *
 * A FAKE CUDA driver too (so that tests can point rdzv's
 * RDZV_CUDA_DRIVER_LIBRARY here, comm/cuda_ctx.h): it exports
 * cuCtxGetCurrent and cuCtxSetCurrent under the names libcuda.so.1 exports,
 * with the driver's ABI (CUresult as int, CUcontext as a pointer), backed
 * by one thread-local "current context" pointer per thread (NULL on a new
 * thread). Contexts are any non-NULL pointer values the test picks; none
 * is ever dereferenced. One extra entry point that no real driver has:
 *   fake_cuCtxDestroy(ctx)  marks ctx destroyed (and makes no context
 *                           current if it was current on the calling
 *                           thread); cuCtxSetCurrent(ctx) then fails with
 *                           CUDA_ERROR_INVALID_CONTEXT (201).
 * Results: CUDA_SUCCESS 0, CUDA_ERROR_INVALID_VALUE 1 (a NULL out
 * pointer), 201 as above, CUDA_ERROR_OUT_OF_MEMORY 2 (more than
 * FAKE_CUDA_MAX_DESTROYED destroyed contexts).
 *
 * Compile-time variants (BUILD):
 *   FAKE_NCCL_DEFAULT_VERSION  the version reported without the variable
 *                              (libfake_nccl_old.so: 2.18.5).
 *   FAKE_NCCL_NO_SPLIT         ncclCommSplit is not exported
 *                              (libfake_nccl_nosplit.so).
 *   FAKE_NCCL_NO_SHRINK_GROW   ncclCommShrink, ncclCommGetUniqueId and
 *                              ncclCommGrow are not exported
 *                              (libfake_nccl_noshrink.so, which reports
 *                              2.29.0: a library new enough whose symbols
 *                              are missing). With them exported, the fake
 *                              answers them whatever version it reports:
 *                              set FAKE_NCCL_VERSION below 2.27 / 2.29 to
 *                              test rdzv's version check.
 *
 * Deliberate differences from NCCL, all stricter:
 *   - A comm whose init has not finished or has failed answers every call
 *     but GetAsyncError, GetLastError, Finalize, Destroy and Abort with
 *     ncclInvalidUsage.
 *   - ncclCommSplit cannot know the other members, so a child comm reports
 *     the parent's size and rank.
 *   - ncclAllReduce treats the buffers as host memory and copies sendbuf to
 *     recvbuf, as a sum over one rank would.
 *   - ncclGetUniqueId returns 128 bytes that are unique per call and per
 *     process (bytes 0-7: a bijective mix of a random seed, the pid and a
 *     call counter; then "FAKENCCL", pid, counter and random bytes). They
 *     mean nothing to anyone: no root thread is started.
 *     ncclCommGetUniqueId makes its ids the same way.
 *   - ncclCommShrink checks the exclude list against the comm (ranks in
 *     range, distinct, not the caller's own rank, fewer than all) and
 *     gives the child nranks - count and the caller's rank renumbered
 *     (its rank minus the excluded ranks below it), as NCCL does; a comm
 *     not initialized is refused unless flags has NCCL_SHRINK_ABORT.
 *   - ncclCommGrow checks the call's shape (an existing member: rank -1
 *     and nranks above its comm's size; a new member: an id and a rank in
 *     0 .. nranks-1) and gives the child nranks and the caller's rank
 *     (its old one, or the one passed). It cannot see the other members,
 *     so it cannot tell that the id is spent; tests compare the logs.
 *
 * Thread-safe: one mutex guards the settings, the id counter, the comms'
 * progress, the destroyed contexts and the log. ncclGetLastError's text
 * and the current CUDA context are per thread. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "comm/nccl_api.h"

#ifndef FAKE_NCCL_DEFAULT_VERSION
#define FAKE_NCCL_DEFAULT_VERSION RDZV_NCCL_VERSION(2, 28, 9)
#endif

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_COMM_MAGIC 0xfa4ec033u

struct fake_comm {
  uint32_t magic;
  int serial; /* Numbered from 1 in creation order; logged as comm=N. */
  int nranks;
  int rank;
  int blocking;           /* 0 or 1, from the config (inherited by split). */
  int polls_left;         /* GetAsyncError answers left before `final`. */
  rdzv_nccl_result final; /* Result once polls_left reaches 0. */
};

#define FAKE_CUDA_MAX_DESTROYED 64

/* Everything mutable, under `lock`. */
static struct {
  pthread_mutex_t lock;
  int version;
  int init_polls;
  int fail_init;
  char log_path[PATH_MAX];
  uint64_t seed;
  uint64_t ids_made;
  int comms_made;
  void *destroyed_ctx[FAKE_CUDA_MAX_DESTROYED];
  int ndestroyed;
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define FAKE_CUDA_SUCCESS 0
#define FAKE_CUDA_ERROR_INVALID_VALUE 1
#define FAKE_CUDA_ERROR_OUT_OF_MEMORY 2
#define FAKE_CUDA_ERROR_INVALID_CONTEXT 201

static _Thread_local char last_error[256];
/* The fake CUDA driver's current context of this thread. */
static _Thread_local void *cuda_current;

/* ---- Settings and log. ---- */

/* The variable as a non-negative int, or `def` when unset or malformed. */
static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  char *end;
  long n;

  if (v == NULL || v[0] == '\0')
    return def;
  errno = 0;
  n = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > INT_MAX)
    return def;
  return (int)n;
}

/* Caller holds fake.lock. */
static void read_env_locked(void) {
  const char *log = getenv("FAKE_NCCL_LOG");

  fake.version = env_int("FAKE_NCCL_VERSION", FAKE_NCCL_DEFAULT_VERSION);
  fake.init_polls = env_int("FAKE_NCCL_INIT_POLLS", 0);
  fake.fail_init = env_int("FAKE_NCCL_FAIL_INIT", 0) != 0;
  snprintf(fake.log_path, sizeof(fake.log_path), "%s", log != NULL ? log : "");
}

static uint64_t mix64(uint64_t x) {
  /* splitmix64's finalizer: a bijection on 64-bit values. */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

__attribute__((constructor)) static void fake_load(void) {
  uint64_t seed = 0;

  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
    seed = mix64((uint64_t)getpid() ^ (uint64_t)(uintptr_t)&seed);
  pthread_mutex_lock(&fake.lock);
  fake.seed = seed;
  read_env_locked();
  pthread_mutex_unlock(&fake.lock);
}

/* Appends one line to FAKE_NCCL_LOG. Caller holds fake.lock, which keeps
 * lines whole and in call order. */
static void log_locked(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void log_locked(const char *fmt, ...) {
  char line[2048];
  va_list ap;
  int n, fd;

  if (fake.log_path[0] == '\0')
    return;
  va_start(ap, fmt);
  n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof(line) - 2)
    n = (int)(sizeof(line) - 2);
  line[n++] = '\n';
  fd = open(fake.log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  if (write(fd, line, (size_t)n) != n)
    fprintf(stderr, "fake NCCL: short write to %s\n", fake.log_path);
  close(fd);
}

static void set_last_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void set_last_error(const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
}

/* The first 8 bytes of an id as 16 hex digits, into out[17]. */
static void id_hex(const rdzv_nccl_unique_id *id, char *out) {
  static const char digits[] = "0123456789abcdef";
  int i;

  for (i = 0; i < 8; i++) {
    unsigned char b = (unsigned char)id->internal[i];
    out[2 * i] = digits[b >> 4];
    out[2 * i + 1] = digits[b & 15];
  }
  out[16] = '\0';
}

static void put_le(char *p, uint64_t v, int bytes) {
  int i;

  for (i = 0; i < bytes; i++)
    p[i] = (char)(v >> (8 * i));
}

/* ---- Communicators. ---- */

/* Returns `c` if it is a live fake comm, else NULL (with the last error
 * set). */
static struct fake_comm *comm_check(const void *p, const char *fn) {
  const struct fake_comm *c = p;

  if (c == NULL || c->magic != FAKE_COMM_MAGIC) {
    set_last_error("fake NCCL: %s: not a communicator", fn);
    return NULL;
  }
  return (struct fake_comm *)c;
}

/* Like comm_check, and the comm's init must have succeeded. Caller holds
 * fake.lock. Returns the result to give the caller. */
static rdzv_nccl_result comm_ready_locked(const struct fake_comm *c,
                                          const char *fn) {
  if (c == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  if (c->polls_left > 0 || c->final != RDZV_NCCL_SUCCESS) {
    set_last_error("fake NCCL: %s: comm %d is not initialized", fn, c->serial);
    return RDZV_NCCL_INVALID_USAGE;
  }
  return RDZV_NCCL_SUCCESS;
}

/* 1 for a blocking config, 0 for non-blocking; `inherit` when cfg is NULL
 * or leaves blocking undefined. Sets *bad for a config not made by the
 * initializer (NCCL checks the magic the same way). */
static int config_blocking(const struct rdzv_nccl_config *cfg, int inherit,
                           int *bad) {
  *bad = 0;
  if (cfg == NULL)
    return inherit;
  if (cfg->magic != RDZV_NCCL_CONFIG_MAGIC) {
    *bad = 1;
    set_last_error("fake NCCL: config not initialized (magic %#x)", cfg->magic);
    return inherit;
  }
  if (cfg->blocking == RDZV_NCCL_CONFIG_UNDEF_INT)
    return inherit;
  return cfg->blocking != 0;
}

/* Starts a comm's init according to the settings. Caller holds fake.lock.
 * Returns the init call's result; *out is the comm, or NULL when init
 * failed within the call. */
static rdzv_nccl_result comm_start_locked(struct fake_comm **out, int nranks,
                                          int rank, int blocking) {
  rdzv_nccl_result final;
  struct fake_comm *c;

  *out = NULL;
  final = fake.fail_init ? RDZV_NCCL_INTERNAL_ERROR : RDZV_NCCL_SUCCESS;
  if (final != RDZV_NCCL_SUCCESS)
    set_last_error("fake NCCL: init failed (FAKE_NCCL_FAIL_INIT=1)");
  if ((blocking || fake.init_polls == 0) && final != RDZV_NCCL_SUCCESS)
    return final;
  c = calloc(1, sizeof(*c));
  if (c == NULL) {
    set_last_error("fake NCCL: out of memory");
    return RDZV_NCCL_SYSTEM_ERROR;
  }
  c->magic = FAKE_COMM_MAGIC;
  c->serial = ++fake.comms_made;
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = blocking;
  c->final = final;
  *out = c;
  if (blocking || fake.init_polls == 0)
    return RDZV_NCCL_SUCCESS;
  c->polls_left = fake.init_polls;
  return RDZV_NCCL_IN_PROGRESS;
}

static void comm_free(struct fake_comm *c) {
  c->magic = 0;
  free(c);
}

/* ---- The exported NCCL entry points. ---- */

FAKE_EXPORT rdzv_nccl_result ncclGetVersion(int *version) {
  if (version == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  read_env_locked();
  *version = fake.version;
  log_locked("getVersion version=%d", fake.version);
  pthread_mutex_unlock(&fake.lock);
  return RDZV_NCCL_SUCCESS;
}

/* A new unique id (see the header comment) into *id, its first 8 bytes
 * in hex into hex[17]. Caller holds fake.lock. */
static void make_id_locked(rdzv_nccl_unique_id *id, char *hex) {
  uint64_t pid = (uint64_t)getpid();
  uint64_t count;
  size_t got = 0;
  ssize_t n;

  memset(id, 0, sizeof(*id));
  count = ++fake.ids_made;
  put_le(id->internal, mix64(fake.seed ^ (pid << 32) ^ count), 8);
  memcpy(id->internal + 8, "FAKENCCL", 8);
  put_le(id->internal + 16, pid, 4);
  put_le(id->internal + 20, count, 8);
  while (got < sizeof(id->internal) - 28) {
    n = getrandom(id->internal + 28 + got, sizeof(id->internal) - 28 - got,
                  GRND_NONBLOCK);
    if (n <= 0)
      break; /* The first 28 bytes are unique already. */
    got += (size_t)n;
  }
  id_hex(id, hex);
}

FAKE_EXPORT rdzv_nccl_result ncclGetUniqueId(rdzv_nccl_unique_id *id) {
  char hex[17];

  if (id == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  make_id_locked(id, hex);
  log_locked("getUniqueId id=%s", hex);
  pthread_mutex_unlock(&fake.lock);
  return RDZV_NCCL_SUCCESS;
}

FAKE_EXPORT rdzv_nccl_result ncclCommInitRankConfig(
    rdzv_nccl_comm_t *comm, int nranks, rdzv_nccl_unique_id id, int rank,
    struct rdzv_nccl_config *config) {
  struct fake_comm *c = NULL;
  rdzv_nccl_result res;
  int blocking, bad;
  char hex[17];

  if (comm == NULL || nranks < 1 || rank < 0 || rank >= nranks)
    return RDZV_NCCL_INVALID_ARGUMENT;
  *comm = NULL;
  blocking = config_blocking(config, 1, &bad);
  pthread_mutex_lock(&fake.lock);
  res = bad ? RDZV_NCCL_INVALID_ARGUMENT
            : comm_start_locked(&c, nranks, rank, blocking);
  id_hex(&id, hex);
  log_locked("initRankConfig comm=%d nranks=%d rank=%d blocking=%d id=%s -> %d"
             " ctx=0x%" PRIxPTR,
             c != NULL ? c->serial : 0, nranks, rank, blocking, hex, (int)res,
             (uintptr_t)cuda_current);
  pthread_mutex_unlock(&fake.lock);
  *comm = (rdzv_nccl_comm_t)c;
  return res;
}

FAKE_EXPORT rdzv_nccl_result ncclCommInitRankScalable(
    rdzv_nccl_comm_t *comm, int nranks, int rank, int n_ids,
    rdzv_nccl_unique_id *ids, struct rdzv_nccl_config *config) {
  char list[1024], hex[17];
  struct fake_comm *c = NULL;
  rdzv_nccl_result res;
  int blocking, bad, i;
  size_t len = 0;

  if (comm == NULL || nranks < 1 || rank < 0 || rank >= nranks || n_ids < 1 ||
      n_ids > nranks || ids == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  *comm = NULL;
  list[0] = '\0';
  for (i = 0; i < n_ids && len + 18 < sizeof(list); i++) {
    id_hex(&ids[i], hex);
    len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
                            i == 0 ? "" : ",", hex);
  }
  blocking = config_blocking(config, 1, &bad);
  pthread_mutex_lock(&fake.lock);
  res = bad ? RDZV_NCCL_INVALID_ARGUMENT
            : comm_start_locked(&c, nranks, rank, blocking);
  log_locked("initScalable comm=%d nranks=%d rank=%d nId=%d blocking=%d "
             "ids=%s -> %d ctx=0x%" PRIxPTR,
             c != NULL ? c->serial : 0, nranks, rank, n_ids, blocking, list,
             (int)res, (uintptr_t)cuda_current);
  pthread_mutex_unlock(&fake.lock);
  *comm = (rdzv_nccl_comm_t)c;
  return res;
}

#ifndef FAKE_NCCL_NO_SPLIT
FAKE_EXPORT rdzv_nccl_result ncclCommSplit(rdzv_nccl_comm_t comm, int color,
                                           int key, rdzv_nccl_comm_t *child,
                                           struct rdzv_nccl_config *config) {
  struct fake_comm *p = comm_check(comm, "ncclCommSplit");
  struct fake_comm *c = NULL;
  rdzv_nccl_result res;
  int blocking, bad;

  if (p == NULL || child == NULL || (color < 0 && color != -1))
    return RDZV_NCCL_INVALID_ARGUMENT;
  *child = NULL;
  blocking = config_blocking(config, p->blocking, &bad);
  pthread_mutex_lock(&fake.lock);
  res = bad ? RDZV_NCCL_INVALID_ARGUMENT : comm_ready_locked(p, "split");
  if (res == RDZV_NCCL_SUCCESS && color != RDZV_NCCL_SPLIT_NOCOLOR)
    res = comm_start_locked(&c, p->nranks, p->rank, blocking);
  log_locked("split comm=%d color=%d key=%d child=%d -> %d ctx=0x%" PRIxPTR,
             p->serial, color, key, c != NULL ? c->serial : 0, (int)res,
             (uintptr_t)cuda_current);
  pthread_mutex_unlock(&fake.lock);
  *child = (rdzv_nccl_comm_t)c;
  return res;
}
#endif

#ifndef FAKE_NCCL_NO_SHRINK_GROW
/* Checks a shrink's exclude list against p; writes it to list[n] as
 * "3,5". Returns the caller's renumbered rank, or -1 (last error set). */
static int shrink_rank(const struct fake_comm *p, const int *ex, int count,
                       char *list, size_t n) {
  size_t len = 0;
  int below = 0, i, j;

  list[0] = '\0';
  if (count < 0 || count >= p->nranks || (count > 0 && ex == NULL)) {
    set_last_error("fake NCCL: ncclCommShrink: %d of %d ranks excluded", count,
                   p->nranks);
    return -1;
  }
  for (i = 0; i < count; i++) {
    if (len + 12 < n)
      len += (size_t)snprintf(list + len, n - len, "%s%d", i ? "," : "", ex[i]);
    if (ex[i] < 0 || ex[i] >= p->nranks || ex[i] == p->rank) {
      set_last_error("fake NCCL: ncclCommShrink: rank %d excluded by rank %d "
                     "of %d (out of range or itself)",
                     ex[i], p->rank, p->nranks);
      return -1;
    }
    for (j = 0; j < i; j++)
      if (ex[j] == ex[i]) {
        set_last_error("fake NCCL: ncclCommShrink: rank %d excluded twice",
                       ex[i]);
        return -1;
      }
    below += ex[i] < p->rank;
  }
  return p->rank - below;
}

FAKE_EXPORT rdzv_nccl_result ncclCommShrink(
    rdzv_nccl_comm_t comm, int *exclude_ranks, int exclude_count,
    rdzv_nccl_comm_t *newcomm, struct rdzv_nccl_config *config, int flags) {
  struct fake_comm *p = comm_check(comm, "ncclCommShrink");
  struct fake_comm *c = NULL;
  rdzv_nccl_result res = RDZV_NCCL_SUCCESS;
  int blocking, bad, rank;
  char list[1024];

  if (p == NULL || newcomm == NULL || (flags & ~RDZV_NCCL_SHRINK_ABORT) != 0)
    return RDZV_NCCL_INVALID_ARGUMENT;
  *newcomm = NULL;
  blocking = config_blocking(config, p->blocking, &bad);
  pthread_mutex_lock(&fake.lock);
  rank = shrink_rank(p, exclude_ranks, exclude_count, list, sizeof(list));
  if (bad || rank < 0)
    res = RDZV_NCCL_INVALID_ARGUMENT;
  else if (!(flags & RDZV_NCCL_SHRINK_ABORT))
    res = comm_ready_locked(p, "shrink");
  if (res == RDZV_NCCL_SUCCESS)
    res = comm_start_locked(&c, p->nranks - exclude_count, rank, blocking);
  log_locked("shrink comm=%d exclude=%s flags=%d child=%d nranks=%d rank=%d "
             "-> %d ctx=0x%" PRIxPTR,
             p->serial, list, flags, c != NULL ? c->serial : 0,
             p->nranks - exclude_count, rank, (int)res,
             (uintptr_t)cuda_current);
  pthread_mutex_unlock(&fake.lock);
  *newcomm = (rdzv_nccl_comm_t)c;
  return res;
}

FAKE_EXPORT rdzv_nccl_result ncclCommGetUniqueId(rdzv_nccl_comm_t comm,
                                                 rdzv_nccl_unique_id *id) {
  struct fake_comm *p = comm_check(comm, "ncclCommGetUniqueId");
  rdzv_nccl_result res;
  char hex[17] = "none";

  if (p == NULL || id == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  res = comm_ready_locked(p, "commGetUniqueId");
  if (res == RDZV_NCCL_SUCCESS)
    make_id_locked(id, hex);
  log_locked("commGetUniqueId comm=%d id=%s -> %d", p->serial, hex, (int)res);
  pthread_mutex_unlock(&fake.lock);
  return res;
}

FAKE_EXPORT rdzv_nccl_result ncclCommGrow(rdzv_nccl_comm_t comm, int nranks,
                                          const rdzv_nccl_unique_id *id,
                                          int rank, rdzv_nccl_comm_t *newcomm,
                                          struct rdzv_nccl_config *config) {
  struct fake_comm *p = NULL, *c = NULL;
  rdzv_nccl_result res = RDZV_NCCL_SUCCESS;
  int blocking, bad, newrank = rank;
  char hex[17] = "none";

  if (newcomm == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  *newcomm = NULL;
  if (comm != NULL && (p = comm_check(comm, "ncclCommGrow")) == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  if (id != NULL)
    id_hex(id, hex);
  blocking = config_blocking(config, p != NULL ? p->blocking : 1, &bad);
  pthread_mutex_lock(&fake.lock);
  if (p != NULL) { /* an existing member */
    newrank = p->rank;
    if (rank != -1 || nranks <= p->nranks) {
      set_last_error("fake NCCL: ncclCommGrow: an existing member passes "
                     "rank -1 (got %d) and more than its %d ranks (got %d)",
                     rank, p->nranks, nranks);
      res = RDZV_NCCL_INVALID_ARGUMENT;
    } else {
      res = comm_ready_locked(p, "grow");
    }
  } else if (id == NULL || rank < 0 || rank >= nranks) {
    set_last_error("fake NCCL: ncclCommGrow: a new member needs the id and a "
                   "rank in 0 .. %d (got %d)",
                   nranks - 1, rank);
    res = RDZV_NCCL_INVALID_ARGUMENT;
  }
  if (bad)
    res = RDZV_NCCL_INVALID_ARGUMENT;
  if (res == RDZV_NCCL_SUCCESS)
    res = comm_start_locked(&c, nranks, newrank, blocking);
  log_locked("grow comm=%d nranks=%d id=%s rank=%d child=%d newrank=%d -> %d "
             "ctx=0x%" PRIxPTR,
             p != NULL ? p->serial : 0, nranks, hex, rank,
             c != NULL ? c->serial : 0, newrank, (int)res,
             (uintptr_t)cuda_current);
  pthread_mutex_unlock(&fake.lock);
  *newcomm = (rdzv_nccl_comm_t)c;
  return res;
}
#endif

FAKE_EXPORT rdzv_nccl_result
ncclCommGetAsyncError(rdzv_nccl_comm_t comm, rdzv_nccl_result *async_error) {
  struct fake_comm *c = comm_check(comm, "ncclCommGetAsyncError");

  if (c == NULL || async_error == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  if (c->polls_left > 0) {
    c->polls_left--;
    *async_error = RDZV_NCCL_IN_PROGRESS;
  } else {
    *async_error = c->final;
  }
  log_locked("asyncError comm=%d -> %d", c->serial, (int)*async_error);
  pthread_mutex_unlock(&fake.lock);
  return RDZV_NCCL_SUCCESS;
}

FAKE_EXPORT rdzv_nccl_result ncclCommFinalize(rdzv_nccl_comm_t comm) {
  struct fake_comm *c = comm_check(comm, "ncclCommFinalize");

  if (c == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  log_locked("finalize comm=%d", c->serial);
  pthread_mutex_unlock(&fake.lock);
  return RDZV_NCCL_SUCCESS;
}

/* Destroy and abort share this: NULL is accepted, as NCCL does. */
static rdzv_nccl_result comm_release(rdzv_nccl_comm_t comm, const char *what) {
  struct fake_comm *c;

  if (comm == NULL) {
    pthread_mutex_lock(&fake.lock);
    log_locked("%s comm=0", what);
    pthread_mutex_unlock(&fake.lock);
    return RDZV_NCCL_SUCCESS;
  }
  c = comm_check(comm, what);
  if (c == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  log_locked("%s comm=%d", what, c->serial);
  pthread_mutex_unlock(&fake.lock);
  comm_free(c);
  return RDZV_NCCL_SUCCESS;
}

FAKE_EXPORT rdzv_nccl_result ncclCommDestroy(rdzv_nccl_comm_t comm) {
  return comm_release(comm, "destroy");
}

FAKE_EXPORT rdzv_nccl_result ncclCommAbort(rdzv_nccl_comm_t comm) {
  return comm_release(comm, "abort");
}

FAKE_EXPORT const char *ncclGetErrorString(rdzv_nccl_result result) {
  static const char *const text[] = {
      "no error",
      "unhandled cuda error (fake NCCL)",
      "unhandled system error (fake NCCL)",
      "internal error (fake NCCL)",
      "invalid argument (fake NCCL)",
      "invalid usage (fake NCCL)",
      "remote process exited or there was a network error (fake NCCL)",
      "NCCL operation in progress (fake NCCL)",
  };

  pthread_mutex_lock(&fake.lock);
  log_locked("getErrorString result=%d", (int)result);
  pthread_mutex_unlock(&fake.lock);
  if ((unsigned)result < sizeof(text) / sizeof(text[0]))
    return text[result];
  return "unknown result code (fake NCCL)";
}

FAKE_EXPORT const char *ncclGetLastError(rdzv_nccl_comm_t comm) {
  (void)comm; /* NCCL's last error is not per comm either. */
  pthread_mutex_lock(&fake.lock);
  log_locked("getLastError");
  pthread_mutex_unlock(&fake.lock);
  return last_error;
}

/* Bytes per element of an ncclDataType_t, 0 for an unknown type. */
static size_t type_size(rdzv_nccl_datatype t) {
  static const unsigned char size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

  if (t < 0 || (size_t)t >= sizeof(size))
    return 0;
  return size[t];
}

FAKE_EXPORT rdzv_nccl_result ncclAllReduce(const void *sendbuf, void *recvbuf,
                                           size_t count,
                                           rdzv_nccl_datatype datatype,
                                           rdzv_nccl_redop op,
                                           rdzv_nccl_comm_t comm,
                                           rdzv_cuda_stream_t stream) {
  struct fake_comm *c = comm_check(comm, "ncclAllReduce");
  size_t esize = type_size(datatype);
  rdzv_nccl_result res;

  (void)stream;
  if (c == NULL || esize == 0 || op < 0 ||
      (count > 0 && (sendbuf == NULL || recvbuf == NULL)))
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  res = comm_ready_locked(c, "allReduce");
  log_locked("allReduce comm=%d count=%zu type=%d op=%d -> %d", c->serial,
             count, datatype, op, (int)res);
  pthread_mutex_unlock(&fake.lock);
  if (res == RDZV_NCCL_SUCCESS && count > 0 && sendbuf != recvbuf)
    memmove(recvbuf, sendbuf, count * esize);
  return res;
}

/* CommCount and UserRank share this: reports the rank when `want_rank`,
 * else the size. */
static rdzv_nccl_result comm_query(const void *comm, int *out, const char *what,
                                   int want_rank) {
  struct fake_comm *c = comm_check(comm, what);
  rdzv_nccl_result res;

  if (c == NULL || out == NULL)
    return RDZV_NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake.lock);
  res = comm_ready_locked(c, what);
  log_locked("%s comm=%d -> %d", what, c->serial, (int)res);
  pthread_mutex_unlock(&fake.lock);
  if (res == RDZV_NCCL_SUCCESS)
    *out = want_rank ? c->rank : c->nranks;
  return res;
}

FAKE_EXPORT rdzv_nccl_result ncclCommCount(const rdzv_nccl_comm_t comm,
                                           int *count) {
  return comm_query(comm, count, "commCount", 0);
}

FAKE_EXPORT rdzv_nccl_result ncclCommUserRank(const rdzv_nccl_comm_t comm,
                                              int *rank) {
  return comm_query(comm, rank, "userRank", 1);
}

/* ---- The FAKE CUDA driver entry points (see the header comment). ---- */

/* Caller holds fake.lock. */
static int ctx_destroyed_locked(const void *ctx) {
  int i;

  for (i = 0; i < fake.ndestroyed; i++)
    if (fake.destroyed_ctx[i] == ctx)
      return 1;
  return 0;
}

/* CUresult cuCtxGetCurrent(CUcontext *pctx) */
FAKE_EXPORT int cuCtxGetCurrent(void **pctx) {
  if (pctx == NULL)
    return FAKE_CUDA_ERROR_INVALID_VALUE;
  *pctx = cuda_current;
  return FAKE_CUDA_SUCCESS;
}

/* CUresult cuCtxSetCurrent(CUcontext ctx) */
FAKE_EXPORT int cuCtxSetCurrent(void *ctx) {
  int bad;

  if (ctx == NULL) {
    cuda_current = NULL;
    return FAKE_CUDA_SUCCESS;
  }
  pthread_mutex_lock(&fake.lock);
  bad = ctx_destroyed_locked(ctx);
  pthread_mutex_unlock(&fake.lock);
  if (bad)
    return FAKE_CUDA_ERROR_INVALID_CONTEXT;
  cuda_current = ctx;
  return FAKE_CUDA_SUCCESS;
}

/* Test-only: no real driver has this symbol. */
FAKE_EXPORT int fake_cuCtxDestroy(void *ctx) {
  int res = FAKE_CUDA_SUCCESS;

  if (ctx == NULL)
    return FAKE_CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fake.lock);
  if (!ctx_destroyed_locked(ctx)) {
    if (fake.ndestroyed < FAKE_CUDA_MAX_DESTROYED)
      fake.destroyed_ctx[fake.ndestroyed++] = ctx;
    else
      res = FAKE_CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&fake.lock);
  if (res == FAKE_CUDA_SUCCESS && cuda_current == ctx)
    cuda_current = NULL;
  return res;
}
