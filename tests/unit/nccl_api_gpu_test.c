/* GPU test of comm/nccl_api: real communicators through the loaded table.
 *
 * Tagged requires-gpu. Where there is no NVIDIA device (/dev/nvidiactl) or
 * no loadable libnccl.so.2, every test prints a SKIP line and is skipped.
 * Where there is, it creates one-rank communicators on device 0 through
 * rdzv_nccl_load()'s table, which checks on the real library what the
 * layout test checks on nccl.h: the unique id passed by value
 * (ncclCommInitRankConfig), the config struct read at our offsets
 * (blocking, commName, magic), non-blocking init polled with
 * ncclCommGetAsyncError, ncclCommInitRankScalable and ncclCommSplit.
 * Nothing here links CUDA or NCCL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/nccl_api.h"
#include "rdzv/error.h"

/* How long a non-blocking init or finalize may take before we call it
 * hung. First init on a GPU loads kernels and can take seconds. */
#define POLL_LIMIT_S 120

static struct rdzv_nccl_api *api;

static int group_setup(void **state) {
  char err[1024];
  int rc;

  (void)state;
  if (access("/dev/nvidiactl", F_OK) != 0) {
    printf("SKIP: no NVIDIA device (/dev/nvidiactl); GPU tests NOT run\n");
    return 0;
  }
  rc = rdzv_nccl_load(rdzv_nccl_default_path(), &api, err, sizeof(err));
  if (rc != 0)
    printf("SKIP: %s: %s; GPU tests NOT run\n", rdzv_err_name(rc), err);
  else
    printf("NCCL %s, version code %d\n", api->path, api->version);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  rdzv_nccl_unload(api);
  api = NULL;
  return 0;
}

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Polls ncclCommGetAsyncError until the comm leaves ncclInProgress, and
 * returns the final state. Fails the test past POLL_LIMIT_S. */
static rdzv_nccl_result wait_ready(rdzv_nccl_comm_t comm) {
  double deadline = now_s() + POLL_LIMIT_S;
  rdzv_nccl_result async = RDZV_NCCL_IN_PROGRESS;
  struct timespec pause = {0, 1000000};
  long polls = 0;

  while (async == RDZV_NCCL_IN_PROGRESS) {
    assert_int_equal(api->comm_get_async_error(comm, &async),
                     RDZV_NCCL_SUCCESS);
    polls++;
    if (async == RDZV_NCCL_IN_PROGRESS && now_s() > deadline)
      fail_msg("comm still in progress after %d s", POLL_LIMIT_S);
    if (async == RDZV_NCCL_IN_PROGRESS)
      nanosleep(&pause, NULL);
  }
  printf("  async state %d after %ld poll(s)\n", (int)async, polls);
  return async;
}

static void expect_ok(rdzv_nccl_comm_t comm, rdzv_nccl_result res,
                      const char *what) {
  char err[512];

  if (rdzv_nccl_check(api, comm, res, what, err, sizeof(err)) != 0)
    fail_msg("%s", err);
}

#define NEED_GPU()                                                             \
  do {                                                                         \
    if (api == NULL)                                                           \
      skip();                                                                  \
  } while (0)

static void test_nonblocking_init_rank_config(void **state) {
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t comm = NULL;
  rdzv_nccl_unique_id id;
  rdzv_nccl_result res;
  int n = -1, r = -1;

  (void)state;
  NEED_GPU();
  expect_ok(NULL, api->get_unique_id(&id), "ncclGetUniqueId");
  rdzv_nccl_config_init(&cfg);
  cfg.blocking = 0;
  cfg.commName = "rdzv-gpu-test";
  res = api->comm_init_rank_config(&comm, 1, id, 0, &cfg);
  printf("  ncclCommInitRankConfig(blocking=0) returned %d\n", (int)res);
  if (res != RDZV_NCCL_IN_PROGRESS)
    expect_ok(comm, res, "ncclCommInitRankConfig");
  assert_non_null(comm);
  expect_ok(comm, wait_ready(comm), "non-blocking init");
  expect_ok(comm, api->comm_count(comm, &n), "ncclCommCount");
  expect_ok(comm, api->comm_user_rank(comm, &r), "ncclCommUserRank");
  assert_int_equal(n, 1);
  assert_int_equal(r, 0);
  res = api->comm_finalize(comm);
  if (res != RDZV_NCCL_IN_PROGRESS)
    expect_ok(comm, res, "ncclCommFinalize");
  expect_ok(comm, wait_ready(comm), "non-blocking finalize");
  expect_ok(NULL, api->comm_destroy(comm), "ncclCommDestroy");
}

static void test_scalable_init_and_split(void **state) {
  rdzv_nccl_comm_t world = NULL, child = NULL, none = NULL;
  struct rdzv_nccl_config cfg;
  rdzv_nccl_unique_id ids[1];
  int n = -1;

  (void)state;
  NEED_GPU();
  expect_ok(NULL, api->get_unique_id(&ids[0]), "ncclGetUniqueId");
  rdzv_nccl_config_init(&cfg);
  cfg.blocking = 1;
  expect_ok(NULL, api->comm_init_rank_scalable(&world, 1, 0, 1, ids, &cfg),
            "ncclCommInitRankScalable");
  expect_ok(world, api->comm_count(world, &n), "ncclCommCount");
  assert_int_equal(n, 1);
  expect_ok(world, api->comm_split(world, 0, 0, &child, NULL), "ncclCommSplit");
  assert_non_null(child);
  expect_ok(child, api->comm_count(child, &n), "ncclCommCount(child)");
  assert_int_equal(n, 1);
  expect_ok(world,
            api->comm_split(world, RDZV_NCCL_SPLIT_NOCOLOR, 0, &none, NULL),
            "ncclCommSplit(NOCOLOR)");
  assert_null(none);
  expect_ok(NULL, api->comm_destroy(child), "ncclCommDestroy(child)");
  expect_ok(NULL, api->comm_destroy(world), "ncclCommDestroy");
}

/* NCCL finds the magic where we put it: a zeroed config is refused. */
static void test_config_magic_is_checked(void **state) {
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t comm = NULL;
  rdzv_nccl_unique_id id;
  rdzv_nccl_result res;

  (void)state;
  NEED_GPU();
  expect_ok(NULL, api->get_unique_id(&id), "ncclGetUniqueId");
  memset(&cfg, 0, sizeof(cfg));
  cfg.size = sizeof(cfg);
  res = api->comm_init_rank_config(&comm, 1, id, 0, &cfg);
  assert_int_equal(res, RDZV_NCCL_INVALID_ARGUMENT);
  if (comm != NULL)
    api->comm_destroy(comm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nonblocking_init_rank_config),
      cmocka_unit_test(test_scalable_init_and_split),
      cmocka_unit_test(test_config_magic_is_checked),
  };

  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
