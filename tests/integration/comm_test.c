/* Communicators (rdzv/comm.h) over a real rendezvous: a root and two node
 * daemons (hostA, hostB) as processes, ranks as forked children
 * (comm_harness.h). NCCL is the FAKE library tests/fake_nccl/libfake_nccl.so
 * (a test double) loaded through the production dlopen seam; each rank's
 * FAKE_NCCL_LOG shows what was called with which ids. Where the real
 * libnccl.so.2 is installed, the unique ids come from its ncclGetUniqueId
 * (works without a GPU) while init goes to the fake. No assertion depends
 * on wall-clock time. Background init (rdzv_comm_prefetch's worker) has
 * its own tests in comm_prefetch_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/nccl_api.h"
#include "comm_harness.h"
#include "rdzv/comm.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

/* ---- lazy init: unused sub-groups are never initialized ------------------ */

static void scen_lazy(struct rank_ctx *k) {
  rdzv_comm_t *tp = NULL, *dp = NULL, *unused = NULL;
  struct ncclComm *wc = NULL, *tc = NULL;
  const int32_t dims[2] = {2, 2}, all[4] = {3, 2, 1, 0};
  check(k, rdzv_comm_split_mesh(k->world, "tp", 2, dims, 1u << 1, &tp) == 0,
        "tp");
  check(k, rdzv_comm_split_mesh(k->world, "dp", 2, dims, 1u << 0, &dp) == 0,
        "dp");
  check(k, rdzv_comm_group(k->world, "unused", all, 4, &unused) == 0, "unused");
  if (k->failed)
    return;
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_IDLE, "world idle");
  check(k, rdzv_comm_size(tp) == 2 && rdzv_comm_size(dp) == 2, "sizes");
  check(k, rdzv_comm_world_rank(tp, 0) == k->rank / 2 * 2, "tp members");
  check(k, rdzv_comm_world_rank(dp, 1) == k->rank % 2 + 2, "dp members");
  check(k, rdzv_comm_rank(unused) == 3 - k->rank, "unused order");
  made_label = "world";
  check(k, rdzv_comm_nccl(k->world, &wc, 30) == 0 && wc != NULL, "world");
  made_label = "tp";
  check(k, rdzv_comm_nccl(tp, &tc, 30) == 0 && tc != NULL && tc != wc, "tp");
  check(k, rdzv_comm_state(dp) == RDZV_COMM_IDLE, "dp idle");
  check(k, rdzv_comm_state(unused) == RDZV_COMM_IDLE, "unused idle");
  check(k, rdzv_comm_init_path(dp) == NULL, "dp path");
  const char *p = rdzv_comm_init_path(tp);
  check(k, p != NULL && strcmp(p, "config") == 0, "tp path");
  struct rdzv_comm_timings t;
  check(k,
        rdzv_comm_timings(tp, &t) == 0 && t.nids == 1 && t.ids_s >= 0 &&
            t.init_s >= 0,
        "timings");
  say(k, "tp=%s", rdzv_comm_name(tp));
  rdzv_comm_destroy(unused);
  rdzv_comm_destroy(dp);
  rdzv_comm_destroy(tp);
}

static void test_unused_groups_never_initialized(void **state) {
  (void)state;
  struct world_spec w = {"lazy", 4, 2, 0, 0, NULL, NULL, 0, scen_lazy, 0};
  char rep[4][2300], id[17], want[17];
  run_world(&w, rep);
  for (int i = 0; i < 4; i++) {
    char *log = fake_log("lazy", i);
    /* Two inits (world and this rank's tp), nothing else. */
    assert_int_equal(count(log, "initRankConfig"), 2);
    assert_int_equal(count(log, "initScalable"), 0);
    assert_int_equal(count(log, "split "), 0);
    /* The first init is the world's, with rank 0's id. */
    assert_int_equal(field(log, "initRankConfig", "id=", id, sizeof(id)), 0);
    assert_int_equal(made_id(rep[0], "world", want, sizeof(want)), 0);
    assert_string_equal(id, want);
    /* The tp id comes from the first rank of this rank's tp group. */
    const char *second =
        strstr(strstr(log, "initRankConfig") + 1, "initRankConfig");
    assert_non_null(second);
    assert_int_equal(field(second, "initRankConfig", "id=", id, sizeof(id)), 0);
    assert_int_equal(made_id(rep[i / 2 * 2], "tp", want, sizeof(want)), 0);
    assert_string_equal(id, want);
    /* Both destroyed, each finalized first. */
    assert_int_equal(count(log, "finalize comm="), 2);
    assert_int_equal(count(log, "destroy comm="), 2);
    assert_non_null(strstr(rep[i], i < 2 ? "tp=world.tp.0" : "tp=world.tp.1"));
    free(log);
  }
  /* Nothing about the unused groups ever reached the store. */
  assert_true(key_exists("lazy", "rdzv/world/g1/uid/world"));
  assert_true(key_exists("lazy", "rdzv/world/g1/uid/world.tp.0"));
  assert_true(key_exists("lazy", "rdzv/world/g1/uid/world.tp.1"));
  assert_false(key_exists("lazy", "rdzv/world/g1/uid/world.dp.0"));
  assert_false(key_exists("lazy", "rdzv/world/g1/uid/world.dp.1"));
  assert_false(key_exists("lazy", "rdzv/world/g1/uid/world.unused"));
}

/* ---- only members take part; non-members get an error -------------------- */

static void scen_members(struct rank_ctx *k) {
  const int32_t odd[2] = {3, 1};
  rdzv_comm_t *g = NULL;
  struct ncclComm *nc = NULL;
  check(k, rdzv_comm_group(k->world, "odd", odd, 2, &g) == 0, "group");
  if (k->failed)
    return;
  if (k->rank % 2 == 0) {
    check(k, rdzv_comm_rank(g) == -1, "non-member rank");
    check(k, rdzv_comm_nccl(g, &nc, 30) == RDZV_ENOT_MEMBER, "nccl");
    check(k, rdzv_comm_prefetch(g, 30) == RDZV_ENOT_MEMBER, "prefetch");
    check(k, rdzv_comm_poll(g) == RDZV_ENOT_MEMBER, "poll");
    check(k, strstr(rdzv_comm_last_error(g), "world.odd") != NULL, "text");
    say(k, "non-member");
    /* Stays joined, taking no part, while the members initialize. */
    hold();
  } else {
    made_label = "odd";
    check(k, rdzv_comm_nccl(g, &nc, 30) == 0 && nc != NULL, "member init");
    check(k, rdzv_comm_rank(g) == (k->rank == 3 ? 0 : 1), "member rank");
  }
  rdzv_comm_destroy(g);
}

static void test_only_members_take_part(void **state) {
  (void)state;
  struct world_spec w = {"members", 4, 2, 0, 0, NULL, NULL, 0, scen_members, 0};
  struct rank_proc rp[4];
  char rep[4][2300], id[17], want[17];
  assert_int_equal(pipe(go_pipe), 0);
  launch(&w, rp);
  close(go_pipe[1]);
  go_pipe[1] = -1;
  for (int i = 1; i < 4; i += 2)
    assert_int_equal(finish(&rp[i], rep[i], sizeof(rep[i])), 0);
  close(go_pipe[0]); /* the members are done: release the others */
  go_pipe[0] = -1;
  for (int i = 0; i < 4; i += 2)
    assert_int_equal(finish(&rp[i], rep[i], sizeof(rep[i])), 0);
  assert_int_equal(made_id(rep[3], "odd", want, sizeof(want)), 0);
  for (int i = 0; i < 4; i++) {
    char *log = fake_log("members", i);
    if (i % 2 == 0) {
      /* A non-member never even loaded NCCL. */
      assert_string_equal(log, "");
      assert_non_null(strstr(rep[i], "non-member"));
    } else {
      assert_int_equal(count(log, "initRankConfig comm=1 nranks=2"), 1);
      assert_int_equal(field(log, "initRankConfig", "id=", id, sizeof(id)), 0);
      assert_string_equal(id, want);
    }
    free(log);
  }
}

/* ---- first use initializes once, under concurrency ----------------------- */

#define NTHREADS 8

struct racer {
  rdzv_comm_t *c;
  pthread_barrier_t *start;
  struct ncclComm *got;
  int rc;
};

static void *race(void *arg) {
  struct racer *r = arg;
  pthread_barrier_wait(r->start);
  r->rc = rdzv_comm_nccl(r->c, &r->got, 30);
  return NULL;
}

static void scen_threads(struct rank_ctx *k) {
  pthread_t th[NTHREADS];
  struct racer rc[NTHREADS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NTHREADS);
  made_label = "world";
  for (int i = 0; i < NTHREADS; i++) {
    rc[i] = (struct racer){k->world, &start, NULL, -1};
    pthread_create(&th[i], NULL, race, &rc[i]);
  }
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < NTHREADS; i++) {
    check(k, rc[i].rc == 0, "thread init");
    check(k, rc[i].got != NULL && rc[i].got == rc[0].got, "same comm");
  }
}

static void test_first_use_once_under_threads(void **state) {
  (void)state;
  /* Blocking init, then non-blocking init polled by all 8 threads. */
  struct world_spec a = {"threads", 2, 1, 0, 0, NULL, NULL, 0, scen_threads, 0};
  struct world_spec b = {"threads-nb", 2, 1, 0, 1, "3", NULL, 0,
                         scen_threads, 0};
  char rep[2][2300];
  run_world(&a, rep);
  run_world(&b, rep);
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("threads", i);
    assert_int_equal(count(log, "initRankConfig"), 1);
    assert_int_equal(count(log, "blocking=1"), 1);
    free(log);
    log = fake_log("threads-nb", i);
    assert_int_equal(count(log, "initRankConfig"), 1);
    assert_int_equal(count(log, "blocking=0"), 1);
    /* Three polls in progress, one success, then no more polls. */
    assert_int_equal(count(log, "asyncError comm=1 -> 7"), 3);
    assert_int_equal(count(log, "asyncError comm=1 -> 0"), 1);
    free(log);
  }
}

/* ---- prefetch: non-blocking init polled to completion -------------------- */

/* Waits (without driving it) until the world's worker has exchanged c's
 * ids and started NCCL's init, or the init ended. */
static void wait_started(rdzv_comm_t *c) {
  struct rdzv_comm_timings t = {0};
  const struct timespec ms = {0, 1000 * 1000};
  while (rdzv_comm_timings(c, &t) == 0 && t.nids == 0 &&
         rdzv_comm_state(c) == RDZV_COMM_PENDING)
    nanosleep(&ms, NULL);
}

static void scen_prefetch(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  int again = 0, rc;
  check(k, rdzv_comm_poll(k->world) == -EINVAL, "poll before start");
  check(k, rdzv_comm_prefetch(k->world, 30) == 0, "prefetch");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_PENDING, "pending");
  check(k, rdzv_comm_prefetch(k->world, 30) == 0, "prefetch again");
  while ((rc = rdzv_comm_poll(k->world)) == -EAGAIN)
    again++;
  check(k, rc == 0, "poll result");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_READY, "ready");
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0 && nc != NULL, "nccl");
  check(k, rdzv_comm_poll(k->world) == 0, "poll when ready");
  say(k, "again=%d", again);
}

static void test_prefetch_polled_to_completion(void **state) {
  (void)state;
  struct world_spec w = {"prefetch",    2, 1, 0, 0, "5", NULL, 0,
                         scen_prefetch, 0};
  char rep[2][2300];
  run_world(&w, rep);
  for (int i = 0; i < 2; i++) {
    /* -EAGAIN also while the worker exchanged the ids; NCCL itself said
     * "in progress" exactly 5 times (below). */
    const char *a = strstr(rep[i], "again=");
    assert_non_null(a);
    assert_true(atoi(a + strlen("again=")) >= 5);
    char *log = fake_log("prefetch", i);
    assert_int_equal(count(log, "initRankConfig comm=1 nranks=2"), 1);
    assert_non_null(strstr(log, "blocking=0"));
    assert_non_null(strstr(log, "-> 7")); /* ncclInProgress */
    assert_int_equal(count(log, "asyncError comm=1 -> 7"), 5);
    assert_int_equal(count(log, "asyncError comm=1 -> 0"), 1);
    free(log);
  }
}

/* ---- errors propagate; abort; a deadline inside NCCL's init -------------- */

static void scen_fail(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  const int32_t both[2] = {0, 1};
  rdzv_comm_t *g = NULL;
  int rc = rdzv_comm_nccl(k->world, &nc, 30);
  check(k, rc == RDZV_ENCCL, "blocking init fails");
  const char *e = rdzv_comm_last_error(k->world);
  check(k, strstr(e, "ncclCommInitRankConfig") != NULL, "names the call");
  check(k, strstr(e, "internal error (fake NCCL)") != NULL, "NCCL's text");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_FAILED, "failed");
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == RDZV_ENCCL, "final");
  /* The same failure reported by a polled, non-blocking init. */
  check(k, rdzv_comm_group(k->world, "both", both, 2, &g) == 0, "group");
  check(k, rdzv_comm_prefetch(g, 30) == 0, "prefetch");
  int again = 0;
  while ((rc = rdzv_comm_poll(g)) == -EAGAIN)
    again++;
  check(k, rc == RDZV_ENCCL && again >= 2, "polled failure");
  check(k, rdzv_comm_poll(g) == RDZV_ENCCL, "poll is final");
  rdzv_comm_destroy(g);
}

static void test_fail_init_propagates(void **state) {
  (void)state;
  struct world_spec w = {"fail", 2, 1, 0, 0, "2", "1", 0, scen_fail, 0};
  char rep[2][2300];
  run_world(&w, rep);
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("fail", i);
    /* One blocking attempt (failed in the call: no comm), one
     * non-blocking whose comm was aborted after the failure. */
    assert_int_equal(count(log, "initRankConfig comm=0"), 1);
    assert_int_equal(count(log, "initRankConfig comm=1"), 1);
    assert_int_equal(count(log, "asyncError comm=1 -> 3"), 1);
    assert_int_equal(count(log, "abort comm=1"), 1);
    assert_int_equal(count(log, "destroy comm="), 0);
    free(log);
  }
}

static void scen_abort(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  const int32_t both[2] = {0, 1};
  rdzv_comm_t *g = NULL, *slow = NULL;
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "init");
  check(k, rdzv_comm_abort(k->world) == 0, "abort");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_ABORTED, "aborted");
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == RDZV_EABORTED, "after");
  /* Aborting an init in progress. */
  check(k, rdzv_comm_group(k->world, "both", both, 2, &g) == 0, "group");
  check(k, rdzv_comm_prefetch(g, 30) == 0, "prefetch");
  wait_started(g); /* NCCL's init in progress, not the exchange */
  check(k, rdzv_comm_abort(g) == 0, "abort pending");
  check(k, rdzv_comm_poll(g) == RDZV_EABORTED, "poll after abort");
  rdzv_comm_destroy(g);
  /* NCCL's init never finishes: the deadline aborts it (non-blocking). */
  check(k, rdzv_comm_group(k->world, "slow", both, 2, &slow) == 0, "slow");
  check(k, rdzv_comm_prefetch(slow, 3.0) == 0, "prefetch slow");
  check(k, rdzv_comm_nccl(slow, &nc, 30) == RDZV_EDEADLINE, "deadline");
  check(k, strstr(rdzv_comm_last_error(slow), "did not finish") != NULL,
        "deadline text");
  rdzv_comm_destroy(slow);
}

static void test_abort(void **state) {
  (void)state;
  struct world_spec w = {"abort",      2,    1, 0,          0,
                         "1000000000", NULL, 0, scen_abort, 0};
  char rep[2][2300];
  run_world(&w, rep);
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("abort", i);
    /* The world (blocking), the aborted prefetch, the one past its
     * deadline: each aborted exactly once, none finalized or destroyed. */
    assert_int_equal(count(log, "abort comm=1"), 1);
    assert_int_equal(count(log, "abort comm=2"), 1);
    assert_int_equal(count(log, "abort comm=3"), 1);
    assert_int_equal(count(log, "finalize"), 0);
    assert_int_equal(count(log, "destroy comm="), 0);
    free(log);
  }
}

/* ---- the scalable path gets the right ids in the right order ------------- */

static void scen_scalable(struct rank_ctx *k) {
  const int32_t rev[5] = {5, 4, 3, 2, 1};
  rdzv_comm_t *g = NULL;
  struct ncclComm *nc = NULL;
  made_label = "world";
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "world");
  const char *p = rdzv_comm_init_path(k->world);
  check(k, p != NULL && strcmp(p, "scalable") == 0, "world path");
  struct rdzv_comm_timings t;
  check(k, rdzv_comm_timings(k->world, &t) == 0 && t.nids == 3, "nids");
  check(k, rdzv_comm_group(k->world, "rev", rev, 5, &g) == 0, "group");
  made_label = "rev";
  int rc = rdzv_comm_nccl(g, &nc, 30);
  if (k->rank == 0) {
    check(k, rc == RDZV_ENOT_MEMBER, "non-member");
  } else {
    check(k, rc == 0, "rev");
    p = rdzv_comm_init_path(g);
    check(k, p != NULL && strcmp(p, "scalable") == 0, "rev path");
  }
  rdzv_comm_destroy(g);
}

static void test_scalable_ids_in_order(void **state) {
  (void)state;
  /* 6 ranks, 2 per root: blocks {0,1} {2,3} {4,5}, ids by 0, 2, 4. The
   * group (5, 4, 3, 2, 1): blocks {5,4} {3,2} {1}, ids by 5, 3, 1. */
  struct world_spec w = {"scalable",    6, 3, 2, 0, NULL, NULL, 1,
                         scen_scalable, 0};
  char rep[6][2300], want_w[64] = "", want_r[64] = "", got[256], id[17];
  run_world(&w, rep);
  printf("ids from %s\n", strstr(rep[0], "ids-from=real")
                              ? "the real "
                                "libnccl (ncclGetUniqueId), init by the fake"
                              : "random bytes");
  for (int b = 0; b < 3; b++) {
    assert_int_equal(made_id(rep[2 * b], "world", id, sizeof(id)), 0);
    snprintf(want_w + strlen(want_w), sizeof(want_w) - strlen(want_w), "%s%s",
             b ? "," : "", id);
    assert_int_equal(made_id(rep[5 - 2 * b], "rev", id, sizeof(id)), 0);
    snprintf(want_r + strlen(want_r), sizeof(want_r) - strlen(want_r), "%s%s",
             b ? "," : "", id);
  }
  for (int i = 0; i < 6; i++) {
    /* Only block-first ranks made ids. */
    assert_int_equal(count(rep[i], "made=world:"), i % 2 == 0);
    assert_int_equal(count(rep[i], "made=rev:"), i % 2 == 1);
    char *log = fake_log("scalable", i);
    char line[64];
    snprintf(line, sizeof(line), "initScalable comm=1 nranks=6 rank=%d nId=3",
             i);
    assert_int_equal(field(log, line, "ids=", got, sizeof(got)), 0);
    assert_string_equal(got, want_w);
    if (i > 0) {
      snprintf(line, sizeof(line), "initScalable comm=2 nranks=5 rank=%d nId=3",
               5 - i);
      assert_int_equal(field(log, line, "ids=", got, sizeof(got)), 0);
      assert_string_equal(got, want_r);
    } else {
      assert_int_equal(count(log, "comm=2"), 0);
    }
    free(log);
  }
}

/* One rank through the scalable path with one id (what tests/gpu/run.sh
 * does on a GPU), then an all-reduce through the same library. */
static void scen_one_rank(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  struct rdzv_nccl_api *api = NULL;
  char err[256];
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  made_label = "world";
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "init");
  const char *p = rdzv_comm_init_path(k->world);
  check(k, p != NULL && strcmp(p, "scalable") == 0, "path");
  check(k, rdzv_nccl_load(FAKE, &api, err, sizeof(err)) == 0, "load");
  if (k->failed)
    return;
  check(k,
        api->all_reduce(in, out, 4, RDZV_NCCL_FLOAT32, RDZV_NCCL_SUM,
                        (rdzv_nccl_comm_t)nc, NULL) == RDZV_NCCL_SUCCESS &&
            out[3] == 4,
        "all-reduce");
  rdzv_nccl_unload(api);
}

static void test_one_rank_scalable(void **state) {
  (void)state;
  struct world_spec w = {"one", 1, 1, 0, 0, NULL, NULL, 0, scen_one_rank, 1};
  char rep[1][2300], want[17];
  run_world(&w, rep);
  char *log = fake_log("one", 0);
  char line[128];
  assert_int_equal(made_id(rep[0], "world", want, sizeof(want)), 0);
  snprintf(line, sizeof(line),
           "initScalable comm=1 nranks=1 rank=0 nId=1 blocking=1 ids=%s -> 0",
           want);
  assert_non_null(strstr(log, line));
  assert_non_null(strstr(log, "allReduce comm=1 count=4 type=7 op=0 -> 0"));
  free(log);
}

/* ---- a member that never comes: the others fail at their deadline -------- */

/* Every member checks in before ids are exchanged, so a missing member is
 * named whether or not it would have made an id, and NCCL's init never
 * starts: rank 2 makes block 1's id of the world (2 ranks per root) and the
 * id of "pair" {2, 3}, but makes none in "late" {3, 2}, whose only id
 * comes from rank 3: without the check-in, "late" would exchange its ids
 * and start NCCL's init with a member missing. */
static void scen_missing(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  const int32_t pair[2] = {2, 3}, late[2] = {3, 2};
  rdzv_comm_t *g = NULL;
  if (k->rank == 2) {
    say(k, "stays away");
    hold();
    return;
  }
  int rc = rdzv_comm_nccl(k->world, &nc, 1.0);
  check(k, rc == RDZV_EDEADLINE, "deadline");
  check(k,
        strstr(rdzv_comm_last_error(k->world),
               "1 of 4 missing: rank 2 (host ") != NULL,
        "names rank 2 and its host");
  check(k, strstr(rdzv_comm_last_error(k->world), "rank 0") == NULL,
        "only rank 2");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_FAILED, "failed");
  if (k->rank == 3) {
    check(k, rdzv_comm_group(k->world, "pair", pair, 2, &g) == 0, "pair");
    check(k, rdzv_comm_nccl(g, &nc, 1.0) == RDZV_EDEADLINE, "pair deadline");
    check(k,
          strstr(rdzv_comm_last_error(g), "1 of 2 missing: rank 2 (host ") !=
              NULL,
          "pair names");
    rdzv_comm_destroy(g);
    check(k, rdzv_comm_group(k->world, "late", late, 2, &g) == 0, "late");
    check(k, rdzv_comm_nccl(g, &nc, 1.0) == RDZV_EDEADLINE, "late deadline");
    check(k,
          strstr(rdzv_comm_last_error(g), "1 of 2 missing: rank 2 (host ") !=
              NULL,
          "late names the non-publisher");
    say(k, "late=[%s]", rdzv_comm_last_error(g));
    rdzv_comm_destroy(g);
  }
  say(k, "error=[%s]", rdzv_comm_last_error(k->world));
}

static void test_missing_member_named(void **state) {
  (void)state;
  struct world_spec w = {"missing", 4, 2, 2, 0, NULL, NULL, 0, scen_missing, 0};
  struct rank_proc rp[4];
  char rep[4][2300];
  assert_int_equal(pipe(go_pipe), 0);
  launch(&w, rp);
  close(go_pipe[1]);
  go_pipe[1] = -1;
  for (int i = 0; i < 4; i++) {
    if (i == 2)
      continue;
    int st = finish(&rp[i], rep[i], sizeof(rep[i]));
    if (st != 0)
      fail_msg("rank %d: %s", i, rep[i]);
  }
  printf("rank 1 saw:%s\n", strchr(strchr(rep[1], ' ') + 1, ' '));
  printf("rank 3 saw:%s\n", strchr(strchr(rep[3], ' ') + 1, ' '));
  close(go_pipe[0]);
  go_pipe[0] = -1;
  assert_int_equal(finish(&rp[2], rep[2], sizeof(rep[2])), 0);
  for (int i = 0; i < 4; i++) {
    char *log = fake_log("missing", i);
    assert_int_equal(count(log, "init"), 0); /* NCCL's init never ran */
    free(log);
  }
}

/* ---- the split path ------------------------------------------------------ */

static void scen_split(struct rank_ctx *k) {
  const int32_t dims[2] = {2, 2}, solo[1] = {0};
  rdzv_comm_t *tp = NULL, *one = NULL;
  struct ncclComm *nc = NULL;
  made_label = "world";
  check(k, rdzv_comm_split_mesh(k->world, "tp", 2, dims, 1u << 1, &tp) == 0,
        "tp");
  check(k, rdzv_comm_group(k->world, "solo", solo, 1, &one) == 0, "solo");
  if (k->failed)
    return;
  check(k, rdzv_comm_init_split(k->world, 30) == -EINVAL, "world has none");
  /* Initializes the world first (its own path), then splits it. */
  check(k, rdzv_comm_init_split(tp, 30) == 0, "split tp");
  const char *p = rdzv_comm_init_path(tp);
  check(k, p != NULL && strcmp(p, "split") == 0, "tp path");
  p = rdzv_comm_init_path(k->world);
  check(k, p != NULL && strcmp(p, "config") == 0, "world path");
  check(k, rdzv_comm_nccl(tp, &nc, 30) == 0 && nc != NULL, "tp comm");
  struct rdzv_comm_timings t;
  check(k, rdzv_comm_timings(tp, &t) == 0 && t.nids == 0 && t.ids_s == 0,
        "no ids");
  /* Every rank joins the split of a one-rank group; only rank 0 gets it. */
  check(k, rdzv_comm_init_split(one, 30) == 0, "split solo");
  if (k->rank == 0)
    check(k, rdzv_comm_state(one) == RDZV_COMM_READY, "solo ready");
  else
    check(k, rdzv_comm_state(one) == RDZV_COMM_IDLE, "solo idle");
  rdzv_comm_destroy(one);
  rdzv_comm_destroy(tp);
}

static void test_split_path(void **state) {
  (void)state;
  struct world_spec w = {"split", 4, 2, 0, 0, NULL, NULL, 0, scen_split, 0};
  char rep[4][2300];
  run_world(&w, rep);
  for (int i = 0; i < 4; i++) {
    char *log = fake_log("split", i);
    char want[80];
    assert_int_equal(count(log, "initRankConfig"), 1);
    snprintf(want, sizeof(want), "split comm=1 color=%d key=%d child=2 -> 0",
             i / 2, i % 2);
    assert_non_null(strstr(log, want));
    snprintf(want, sizeof(want), "split comm=1 color=%d key=0 child=%d -> 0",
             i == 0 ? 0 : -1, i == 0 ? 3 : 0);
    assert_non_null(strstr(log, want));
    free(log);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unused_groups_never_initialized),
      cmocka_unit_test(test_only_members_take_part),
      cmocka_unit_test(test_first_use_once_under_threads),
      cmocka_unit_test(test_prefetch_polled_to_completion),
      cmocka_unit_test(test_fail_init_propagates),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_scalable_ids_in_order),
      cmocka_unit_test(test_one_rank_scalable),
      cmocka_unit_test(test_missing_member_named),
      cmocka_unit_test(test_split_path),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
