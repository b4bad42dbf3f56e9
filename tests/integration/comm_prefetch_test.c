/* rdzv_comm_prefetch's background init (rdzv/comm.h): one worker thread
 * per world runs the id exchange and the start of NCCL's non-blocking
 * init, so prefetch returns at once. Same rig as comm_test.c
 * (comm_harness.h): a real root and two nodes, forked ranks, the FAKE
 * NCCL library (a test double) through the dlopen seam.
 *
 * Each scenario makes the blocking prefetch of the past fail: rank 1 does
 * not begin its part until rank 0 signals (a pipe from the test parent)
 * that its prefetch calls returned, and rank 0's first prefetched group
 * needs rank 1 (rank 1 makes its id, or both do). A prefetch that blocked
 * in the exchange would wait for its deadline and fail. Loops that wait
 * for the background never assert on time; they end when the state
 * changes (at the latest at an init's deadline). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_harness.h"
#include "rdzv/comm.h"
#include "rdzv/rdzv.h"

/* Generous deadlines: a background init here takes milliseconds. */
#define LONG_S 20.0

static const int32_t rank1_first[2] = {1, 0}; /* world rank 1 makes the id */
static const int32_t rank0_first[2] = {0, 1}; /* world rank 0 makes it */

static void pause_ms(void) {
  const struct timespec ms = {0, 1000 * 1000};
  nanosleep(&ms, NULL);
}

/* Waits, calling nothing that drives an init (rdzv_comm_state is an
 * atomic read), until none of c[0 .. n) is PENDING. */
static void wait_settled(rdzv_comm_t **c, int n) {
  for (int i = 0; i < n; i++)
    while (rdzv_comm_state(c[i]) == RDZV_COMM_PENDING)
      pause_ms();
}

static int has(const char *text, const char *needle) {
  return text != NULL && strstr(text, needle) != NULL;
}

/* Launches a world whose ranks signal each other through sig_pipe, and
 * collects every rank's report; all must succeed. The parent keeps no
 * write end, so a rank that waits for a signal sees EOF (and fails its
 * check) if the sender died without sending. */
static void run_signalled(const struct world_spec *w, char rep[][REPORT_MAX]) {
  struct rank_proc rp[MAX_RANKS];
  sig_open();
  launch(w, rp);
  sig_close();
  for (int i = 0; i < w->n; i++) {
    int st = finish(&rp[i], rep[i], REPORT_MAX);
    if (st != 0)
      fail_msg("%s rank %d: %s", w->job, i, rep[i]);
  }
  for (int i = 0; i < w->n; i++)
    printf("%s rank %d:%s\n", w->job, i, strchr(strchr(rep[i], ' ') + 1, ' '));
}

/* The NCCL init calls in a fake log. */
static int inits(const char *log) {
  return count(log, "initRankConfig") + count(log, "initScalable");
}

/* ---- 1. prefetch returns before the exchange can complete ---------------- */

static void scen_returns_at_once(struct rank_ctx *k) {
  rdzv_comm_t *g = NULL;
  struct ncclComm *nc = NULL;
  const char *p;
  int rc, again = 0;
  made_label = "late";
  check(k, rdzv_comm_group(k->world, "late", rank1_first, 2, &g) == 0, "group");
  if (k->failed)
    return;
  if (k->rank == 0) {
    /* Rank 1 has not begun: the exchange cannot have completed. */
    check(k, rdzv_comm_prefetch(g, LONG_S) == 0, "prefetch returns 0");
    check(k, rdzv_comm_state(g) == RDZV_COMM_PENDING, "pending");
    check(k, rdzv_comm_poll(g) == -EAGAIN, "poll says EAGAIN");
    check(k, rdzv_comm_prefetch(g, LONG_S) == 0, "prefetch again");
    sig_send();
    while ((rc = rdzv_comm_poll(g)) == -EAGAIN) {
      again++;
      pause_ms();
    }
    check(k, rc == 0, "polled to ready");
    check(k, rdzv_comm_state(g) == RDZV_COMM_READY, "ready");
    check(k, rdzv_comm_nccl(g, &nc, LONG_S) == 0 && nc != NULL, "nccl");
    check(k, rdzv_comm_prefetch(g, LONG_S) == 0, "prefetch when ready");
    say(k, "again=%d", again);
  } else {
    check(k, sig_wait(), "rank 0 prefetched");
    check(k, rdzv_comm_nccl(g, &nc, LONG_S) == 0 && nc != NULL, "nccl");
  }
  p = rdzv_comm_init_path(g);
  check(k, p != NULL && strcmp(p, "config") == 0, "path");
  struct rdzv_comm_timings t;
  check(k, rdzv_comm_timings(g, &t) == 0 && t.nids == 1 && t.ids_s >= 0,
        "timings");
  rdzv_comm_destroy(g);
}

static void test_prefetch_returns_before_exchange(void **state) {
  (void)state;
  struct world_spec w = {
      "at-once", 2, 1, 0, 0, "3", NULL, 0, scen_returns_at_once, 0};
  char rep[2][REPORT_MAX], id0[17], id1[17], want[17];
  run_signalled(&w, rep);
  assert_true(has(rep[0], "again="));
  assert_int_equal(count(rep[0], "made="), 0); /* rank 1 made the id */
  assert_int_equal(made_id(rep[1], "late", want, sizeof(want)), 0);
  char *l0 = fake_log("at-once", 0), *l1 = fake_log("at-once", 1);
  /* One init each, with rank 1's id; rank 0's non-blocking, polled 3
   * times in progress, then ready. */
  assert_int_equal(count(l0, "initRankConfig comm=1 nranks=2 rank=1 "
                             "blocking=0"),
                   1);
  assert_int_equal(count(l1, "initRankConfig comm=1 nranks=2 rank=0 "
                             "blocking=1"),
                   1);
  assert_int_equal(inits(l0) + inits(l1), 2);
  assert_int_equal(field(l0, "initRankConfig", "id=", id0, sizeof(id0)), 0);
  assert_int_equal(field(l1, "initRankConfig", "id=", id1, sizeof(id1)), 0);
  assert_string_equal(id0, want);
  assert_string_equal(id1, want);
  assert_int_equal(count(l0, "asyncError comm=1 -> 7"), 3);
  assert_int_equal(count(l0, "asyncError comm=1 -> 0"), 1);
  assert_int_equal(count(l0, "finalize comm=1"), 1);
  free(l0);
  free(l1);
}

/* ---- 2. several groups complete while the caller calls nothing ----------- */

#define NBG 3

static void scen_background(struct rank_ctx *k) {
  rdzv_comm_t *g[NBG] = {NULL, NULL, k->world};
  struct ncclComm *nc[NBG] = {NULL};
  made_label = "bg";
  check(k, rdzv_comm_group(k->world, "a", rank1_first, 2, &g[0]) == 0, "a");
  check(k, rdzv_comm_group(k->world, "b", rank1_first, 2, &g[1]) == 0, "b");
  if (k->failed)
    return;
  if (k->rank == 1)
    check(k, sig_wait(), "rank 0 prefetched");
  /* Same order on both ranks: a, b, world. */
  for (int i = 0; i < NBG; i++)
    check(k, rdzv_comm_prefetch(g[i], LONG_S) == 0, "prefetch");
  if (k->rank == 0) {
    for (int i = 0; i < NBG; i++)
      check(k, rdzv_comm_state(g[i]) == RDZV_COMM_PENDING, "pending");
    sig_send();
  }
  wait_settled(g, NBG);
  for (int i = 0; i < NBG; i++) {
    check(k, rdzv_comm_state(g[i]) == RDZV_COMM_READY, "ready unpolled");
    const char *p = rdzv_comm_init_path(g[i]);
    check(k, p != NULL && strcmp(p, "config") == 0, "path");
    check(k, rdzv_comm_nccl(g[i], &nc[i], LONG_S) == 0 && nc[i] != NULL,
          "nccl");
    struct rdzv_comm_timings t;
    check(k, rdzv_comm_timings(g[i], &t) == 0 && t.nids == 1, "timings");
  }
  check(k, nc[0] != nc[1] && nc[1] != nc[2] && nc[0] != nc[2], "distinct");
  rdzv_comm_destroy(g[0]);
  rdzv_comm_destroy(g[1]);
}

static void test_groups_complete_in_background(void **state) {
  (void)state;
  /* No FAKE_NCCL_INIT_POLLS: NCCL's non-blocking init finishes inside
   * the call the worker makes, so each handle becomes READY without any
   * poll. */
  struct world_spec w = {"background",    2, 1, 0, 0, NULL, NULL, 0,
                         scen_background, 0};
  char rep[2][REPORT_MAX], a[17], b[17], wl[17];
  run_signalled(&w, rep);
  /* Rank 1 made a's and b's ids, rank 0 the world's, all on the worker. */
  assert_int_equal(count(rep[1], "made=bg:"), 2);
  assert_int_equal(count(rep[1], "made-bg=bg"), 2);
  assert_int_equal(count(rep[0], "made=bg:"), 1);
  assert_int_equal(count(rep[0], "made-bg=bg"), 1);
  assert_int_equal(made_id(rep[0], "bg", wl, sizeof(wl)), 0);
  char *log[2] = {fake_log("background", 0), fake_log("background", 1)};
  for (int i = 0; i < 2; i++) {
    char line[64];
    /* One non-blocking init per group, in prefetch order; nobody polled
     * NCCL (it was ready inside the call). */
    assert_int_equal(inits(log[i]), NBG);
    assert_int_equal(count(log[i], "blocking=0"), NBG);
    assert_int_equal(count(log[i], "asyncError"), 0);
    snprintf(line, sizeof(line), "initRankConfig comm=1 nranks=2 rank=%d",
             1 - i);
    assert_int_equal(field(log[i], line, "id=", a, sizeof(a)), 0);
    snprintf(line, sizeof(line), "initRankConfig comm=2 nranks=2 rank=%d",
             1 - i);
    assert_int_equal(field(log[i], line, "id=", b, sizeof(b)), 0);
    snprintf(line, sizeof(line), "initRankConfig comm=3 nranks=2 rank=%d", i);
    assert_int_equal(field(log[i], line, "id=", wl, sizeof(wl)), 0);
    assert_int_equal(made_id(rep[0], "bg", line, sizeof(line)), 0);
    assert_string_equal(wl, line);
    assert_false(strcmp(a, b) == 0);
    assert_int_equal(count(log[i], "finalize comm="), NBG);
    assert_int_equal(count(log[i], "destroy comm="), NBG);
  }
  /* Both ranks used the same ids for a and b. */
  char a1[17], b1[17];
  assert_int_equal(field(log[0], "initRankConfig comm=1", "id=", a, sizeof(a)),
                   0);
  assert_int_equal(
      field(log[1], "initRankConfig comm=1", "id=", a1, sizeof(a1)), 0);
  assert_string_equal(a, a1);
  assert_int_equal(field(log[0], "initRankConfig comm=2", "id=", b, sizeof(b)),
                   0);
  assert_int_equal(
      field(log[1], "initRankConfig comm=2", "id=", b1, sizeof(b1)), 0);
  assert_string_equal(b, b1);
  free(log[0]);
  free(log[1]);
}

/* ---- 3. abort and destroy of queued and running background inits -------- */

static void scen_abort_destroy(struct rank_ctx *k) {
  rdzv_comm_t *v = NULL, *y = NULL, *z = NULL;
  struct ncclComm *nc = NULL;
  /* ranks_per_root 1: every group of two has two ids, one made by each
   * rank, so rank 0's worker makes v's id and then waits for rank 1's. */
  check(k, rdzv_comm_group(k->world, "v", rank0_first, 2, &v) == 0, "v");
  check(k, rdzv_comm_group(k->world, "y", rank0_first, 2, &y) == 0, "y");
  check(k, rdzv_comm_group(k->world, "z", rank0_first, 2, &z) == 0, "z");
  if (k->failed)
    return;
  if (k->rank == 0) {
    made_label = "v";
    check(k, rdzv_comm_prefetch(v, 2.0) == 0, "prefetch v");
    check(k, rdzv_comm_prefetch(y, LONG_S) == 0, "prefetch y");
    check(k, rdzv_comm_prefetch(z, LONG_S) == 0, "prefetch z");
    /* Once v's id is made, the worker is inside v's exchange, which
     * cannot complete before rank 1 begins: y and z are still queued. */
    while (atomic_load(&ids_made) == 0 &&
           rdzv_comm_state(v) == RDZV_COMM_PENDING)
      pause_ms();
    check(k, atomic_load(&ids_made) == 1, "worker in v's exchange");
    check(k, rdzv_comm_poll(y) == -EAGAIN, "y queued");
    check(k, rdzv_comm_poll(v) == -EAGAIN, "v running");
    /* Abort of a queued handle: out of the queue, at once. */
    check(k, rdzv_comm_abort(y) == 0, "abort y");
    check(k, rdzv_comm_state(y) == RDZV_COMM_ABORTED, "y aborted");
    check(k, rdzv_comm_poll(y) == RDZV_EABORTED, "poll y");
    check(k, rdzv_comm_prefetch(y, LONG_S) == RDZV_EABORTED, "prefetch y");
    check(k, rdzv_comm_nccl(y, &nc, LONG_S) == RDZV_EABORTED, "nccl y");
    check(k, has(rdzv_comm_last_error(y), "aborted"), "y text");
    /* Destroy of a queued handle, then of the one the worker is on
     * (waits for its exchange to end: at v's deadline). */
    rdzv_comm_destroy(z);
    z = NULL;
    rdzv_comm_destroy(v);
    v = NULL;
    say(k, "destroyed");
    sig_send();
    check(k, atomic_load(&ids_made) == 1, "only v's id was made");
  } else {
    made_label = "yz";
    check(k, sig_wait(), "rank 0 done");
    /* Rank 0 never published y's or z's id: a deadline, not a hang. */
    check(k, rdzv_comm_nccl(y, &nc, 1.0) == RDZV_EDEADLINE, "y deadline");
    check(k, has(rdzv_comm_last_error(y), "missing: rank 0"), "y names 0");
    check(k, rdzv_comm_prefetch(z, 1.0) == 0, "prefetch z");
    int rc;
    while ((rc = rdzv_comm_poll(z)) == -EAGAIN)
      pause_ms();
    check(k, rc == RDZV_EDEADLINE, "z deadline");
    check(k, has(rdzv_comm_last_error(z), "missing: rank 0"), "z names 0");
    say(k, "y=[%s]", rdzv_comm_last_error(y));
  }
  rdzv_comm_destroy(v);
  rdzv_comm_destroy(y);
  rdzv_comm_destroy(z);
}

static void test_abort_and_destroy_background(void **state) {
  (void)state;
  struct world_spec w = {"abort-bg",         2, 1, 1, 0, NULL, NULL, 0,
                         scen_abort_destroy, 0};
  char rep[2][REPORT_MAX];
  run_signalled(&w, rep);
  assert_int_equal(count(rep[0], "made=v:"), 1);
  assert_int_equal(count(rep[0], "made-bg=v"), 1);
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("abort-bg", i);
    assert_int_equal(inits(log), 0); /* no exchange completed */
    free(log);
  }
}

/* ---- 4. a queued init whose deadline passes ------------------------------ */

static void scen_queued_deadline(struct rank_ctx *k) {
  rdzv_comm_t *a = NULL, *b = NULL, *c = NULL;
  struct ncclComm *nc = NULL;
  int rc;
  made_label = "q";
  check(k, rdzv_comm_group(k->world, "a", rank1_first, 2, &a) == 0, "a");
  check(k, rdzv_comm_group(k->world, "b", rank0_first, 2, &b) == 0, "b");
  check(k, rdzv_comm_group(k->world, "c", rank0_first, 2, &c) == 0, "c");
  if (k->failed)
    return;
  if (k->rank == 0) {
    /* a holds the worker until rank 1 comes; c's deadline is before
     * b's. */
    check(k, rdzv_comm_prefetch(a, LONG_S) == 0, "prefetch a");
    check(k, rdzv_comm_prefetch(c, 0.5) == 0, "prefetch c");
    check(k, rdzv_comm_prefetch(b, 0.5) == 0, "prefetch b");
    /* A poll finds b's deadline passed while queued. */
    while ((rc = rdzv_comm_poll(b)) == -EAGAIN)
      pause_ms();
    check(k, rc == RDZV_EDEADLINE, "b deadline");
    check(k, has(rdzv_comm_last_error(b), "still queued"), "b says queued");
    check(k, has(rdzv_comm_last_error(b), "world.b"), "b named");
    check(k, rdzv_comm_state(b) == RDZV_COMM_FAILED, "b failed");
    check(k, rdzv_comm_poll(b) == RDZV_EDEADLINE, "b final");
    check(k, rdzv_comm_prefetch(b, LONG_S) == RDZV_EDEADLINE, "b prefetch");
    check(k, rdzv_comm_init_path(b) == NULL, "b never started");
    say(k, "b=[%s]", rdzv_comm_last_error(b));
    sig_send();
    check(k, rdzv_comm_nccl(a, &nc, LONG_S) == 0 && nc != NULL, "a");
    /* The worker reaches c only after a, past c's deadline. */
    rdzv_comm_t *cs[1] = {c};
    wait_settled(cs, 1);
    check(k, rdzv_comm_state(c) == RDZV_COMM_FAILED, "c failed");
    check(k, rdzv_comm_poll(c) == RDZV_EDEADLINE, "c deadline");
    check(k, has(rdzv_comm_last_error(c), "still queued"), "c says queued");
    check(k, rdzv_comm_nccl(c, &nc, LONG_S) == RDZV_EDEADLINE, "c final");
  } else {
    check(k, sig_wait(), "rank 0 saw b fail");
    check(k, rdzv_comm_nccl(a, &nc, LONG_S) == 0 && nc != NULL, "a");
    /* Rank 0 never published b's id. */
    check(k, rdzv_comm_nccl(b, &nc, 1.0) == RDZV_EDEADLINE, "b deadline");
    check(k, has(rdzv_comm_last_error(b), "missing: rank 0"), "b names 0");
  }
  rdzv_comm_destroy(a);
  rdzv_comm_destroy(b);
  rdzv_comm_destroy(c);
}

static void test_queued_deadline(void **state) {
  (void)state;
  struct world_spec w = {
      "queued", 2, 1, 0, 0, NULL, NULL, 0, scen_queued_deadline, 0};
  char rep[2][REPORT_MAX];
  run_signalled(&w, rep);
  assert_int_equal(count(rep[0], "made="), 0); /* b's and c's never made */
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("queued", i);
    assert_int_equal(inits(log), 1); /* a's only */
    assert_int_equal(count(log, "initRankConfig comm=1 nranks=2"), 1);
    free(log);
  }
}

/* ---- 5. first use takes a queued handle over -------------------------- */

static void scen_take_over(struct rank_ctx *k) {
  rdzv_comm_t *a = NULL, *d = NULL;
  struct ncclComm *nc = NULL;
  check(k, rdzv_comm_group(k->world, "a", rank1_first, 2, &a) == 0, "a");
  check(k, rdzv_comm_group(k->world, "d", rank0_first, 2, &d) == 0, "d");
  if (k->failed)
    return;
  made_label = "d";
  if (k->rank == 0) {
    /* a holds the worker (rank 1 never takes part in a) until a's
     * deadline; d is queued behind it. Rank 0's first use of d takes d out
     * of the queue and runs its init here, after a's exchange lets go of
     * the store lock: the wait behind another group that comm.h
     * describes. Rank 1 is in d's exchange meanwhile. */
    check(k, rdzv_comm_prefetch(a, 1.0) == 0, "prefetch a");
    check(k, rdzv_comm_prefetch(d, LONG_S) == 0, "prefetch d");
    check(k, rdzv_comm_nccl(d, &nc, LONG_S) == 0 && nc != NULL, "nccl d");
    check(k, rdzv_comm_state(d) == RDZV_COMM_READY, "d ready");
    int rc;
    while ((rc = rdzv_comm_poll(a)) == -EAGAIN) /* if d went first */
      pause_ms();
    check(k, rc == RDZV_EDEADLINE, "a deadline");
    check(k, has(rdzv_comm_last_error(a), "missing: rank 1"), "a names 1");
    sig_send();
  } else {
    check(k, rdzv_comm_nccl(d, &nc, LONG_S) == 0 && nc != NULL, "nccl d");
    check(k, sig_wait(), "rank 0 done");
  }
  rdzv_comm_destroy(a);
  rdzv_comm_destroy(d);
}

static void test_first_use_takes_over_queued(void **state) {
  (void)state;
  struct world_spec w = {"take-over",    2, 1, 0, 0, NULL, NULL, 0,
                         scen_take_over, 0};
  char rep[2][REPORT_MAX], want[17], got[17];
  run_signalled(&w, rep);
  /* d's id was made on rank 0's own thread, not the worker. */
  assert_int_equal(count(rep[0], "made=d:"), 1);
  assert_int_equal(count(rep[0], "made-bg="), 0);
  assert_int_equal(made_id(rep[0], "d", want, sizeof(want)), 0);
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("take-over", i);
    assert_int_equal(inits(log), 1);
    /* Rank 0's is the prefetch's non-blocking init. */
    assert_int_equal(count(log, i == 0 ? "blocking=0" : "blocking=1"), 1);
    assert_int_equal(field(log, "initRankConfig", "id=", got, sizeof(got)), 0);
    assert_string_equal(got, want);
    free(log);
  }
}

/* ---- 6. the prefetching thread's CUDA context goes to the worker -------- */

/* The FAKE library's CUDA driver stand-in (tests/fake_nccl/fake_nccl.c):
 * a rank dlopens it the way an application's CUDA runtime loads
 * libcuda.so.1, and points RDZV_CUDA_DRIVER_LIBRARY at it. */
struct fake_cuda {
  void *dl;
  int (*set)(void *ctx);
  int (*destroy)(void *ctx);
};

static int fake_cuda_open(struct rank_ctx *k, struct fake_cuda *f) {
  void *s, *d;
  f->dl = dlopen(FAKE, RTLD_NOW);
  if (!check(k, f->dl != NULL, "dlopen fake driver"))
    return 0;
  s = dlsym(f->dl, "cuCtxSetCurrent");
  d = dlsym(f->dl, "fake_cuCtxDestroy");
  if (!check(k, s != NULL && d != NULL, "fake driver symbols"))
    return 0;
  memcpy(&f->set, &s, sizeof(s));
  memcpy(&f->destroy, &d, sizeof(d));
  return 1;
}

/* A distinctive context per rank and round; 0x9000 + rank is the one the
 * rank's own thread holds while the worker inits (so an init on the
 * rank's thread, or a context read at init time, would log it). */
#define CTX(base, rank) ((void *)(uintptr_t)((base) + (rank)))

static void scen_cuda_ctx(struct rank_ctx *k) {
  static const int32_t all[4] = {0, 1, 2, 3};
  struct fake_cuda f = {NULL, NULL, NULL};
  rdzv_comm_t *g[2] = {k->world, NULL};
  struct ncclComm *nc = NULL;
  /* Rank 3 is an application that never made a CUDA context: it never
   * loads the driver itself (only rdzv's NCCL load maps the fake, after
   * its world prefetch). */
  int app = k->rank != 3;
  made_label = "ctx";
  setenv("RDZV_CUDA_DRIVER_LIBRARY", FAKE, 1);
  check(k, rdzv_comm_group(k->world, "all", all, 4, &g[1]) == 0, "group");
  if (k->failed || (app && !fake_cuda_open(k, &f)))
    return;
  for (int i = 0; i < 2; i++) {
    void *mine = CTX(i == 0 ? 0x1000 : 0x2000, k->rank);
    /* Rank 2 has no context current for its second prefetch: its init
     * must not run in the context of the handle before it. */
    if (i == 1 && k->rank == 2)
      mine = NULL;
    if (app)
      check(k, f.set(mine) == 0, "set");
    check(k, rdzv_comm_prefetch(g[i], LONG_S) == 0, "prefetch");
    if (app)
      check(k, f.set(CTX(0x9000, k->rank)) == 0, "set other");
    wait_settled(&g[i], 1);
    check(k, rdzv_comm_state(g[i]) == RDZV_COMM_READY, "ready");
    /* (not poll: the worker may still hold the handle for a moment) */
    check(k, rdzv_comm_nccl(g[i], &nc, LONG_S) == 0 && nc != NULL, "nccl");
    say(k, "err%d=[%s]", i, rdzv_comm_last_error(g[i]));
  }
  rdzv_comm_destroy(g[1]);
  if (f.dl != NULL) {
    f.set(NULL);
    dlclose(f.dl);
  }
}

static void test_prefetch_carries_cuda_context(void **state) {
  (void)state;
  struct world_spec w = {"cuda-ctx",    4, 2, 0, 0, NULL, NULL, 0,
                         scen_cuda_ctx, 0};
  char rep[4][REPORT_MAX];
  run_world(&w, rep);
  /* Both ids (world's, all's) were made on rank 0's worker, whose inits
   * ran there too; no init ran in a context the ranks' own threads held
   * at init time (0x9000 + rank). */
  assert_int_equal(count(rep[0], "made-bg=ctx"), 2);
  for (int i = 0; i < 4; i++) {
    char *log = fake_log("cuda-ctx", i), line[128];
    printf("cuda-ctx rank %d:\n%s", i, log);
    assert_int_equal(inits(log), 2);
    for (int r = 0; r < 2; r++) {
      /* world (comm=1), then all (comm=2): rank i, non-blocking, in the
       * context the rank's thread had when it prefetched; rank 3 had
       * none (first with no driver loaded, then with no context), nor
       * had rank 2 for all. */
      snprintf(line, sizeof(line),
               "initRankConfig comm=%d nranks=4 rank=%d blocking=0 id=", r + 1,
               i);
      assert_int_equal(count(log, line), 1);
      if (i == 3 || (i == 2 && r == 1))
        snprintf(line, sizeof(line), " -> 0 ctx=0x0\n");
      else
        snprintf(line, sizeof(line), " -> 0 ctx=%p\n",
                 CTX(r == 0 ? 0x1000 : 0x2000, i));
      const char *at = strstr(log, "initRankConfig comm=");
      if (r == 1 && at != NULL)
        at = strstr(at + 1, "initRankConfig comm=");
      assert_non_null(at);
      assert_true(strncmp(strstr(at, " -> "), line, strlen(line)) == 0);
    }
    assert_int_equal(count(log, "ctx=0x900"), 0);
    free(log);
  }
}

/* ---- 7. a context the worker cannot make current fails that init -------- */

static void scen_cuda_ctx_gone(struct rank_ctx *k) {
  static const int32_t only0[1] = {0};
  struct fake_cuda f = {NULL, NULL, NULL};
  rdzv_comm_t *a = NULL, *solo = NULL;
  struct ncclComm *nc = NULL;
  made_label = "gone";
  check(k, rdzv_comm_group(k->world, "a", rank1_first, 2, &a) == 0, "a");
  if (k->failed)
    return;
  if (k->rank == 0) {
    setenv("RDZV_CUDA_DRIVER_LIBRARY", FAKE, 1);
    check(k, rdzv_comm_group(k->world, "solo", only0, 1, &solo) == 0, "solo");
    if (k->failed || !fake_cuda_open(k, &f))
      return;
    /* a holds the worker until rank 1 begins (after the signal), so solo
     * is still queued when its context is destroyed (as an application
     * might, with cuCtxDestroy, between prefetch and init). */
    check(k, f.set(CTX(0x3100, 0)) == 0, "set a");
    check(k, rdzv_comm_prefetch(a, LONG_S) == 0, "prefetch a");
    check(k, f.set(CTX(0x3000, 0)) == 0, "set solo");
    check(k, rdzv_comm_prefetch(solo, LONG_S) == 0, "prefetch solo");
    check(k, rdzv_comm_poll(solo) == -EAGAIN, "solo queued");
    check(k, f.destroy(CTX(0x3000, 0)) == 0, "destroy ctx");
    sig_send();
    rdzv_comm_t *both[2] = {a, solo};
    wait_settled(both, 2);
    check(k, rdzv_comm_state(a) == RDZV_COMM_READY, "a ready");
    check(k, rdzv_comm_state(solo) == RDZV_COMM_FAILED, "solo failed");
    int rc;
    while ((rc = rdzv_comm_poll(solo)) == -EAGAIN) /* the worker lets go */
      pause_ms();
    check(k, rc == -ENODEV, "solo -ENODEV");
    check(k, rdzv_comm_nccl(solo, &nc, LONG_S) == -ENODEV, "nccl solo");
    check(k, rdzv_comm_init_path(solo) == NULL, "solo never started");
    const char *e = rdzv_comm_last_error(solo);
    check(k,
          has(e, "world.solo") && has(e, "cuCtxSetCurrent") &&
              has(e, "CUresult 201") && has(e, "rdzv_comm_prefetch"),
          "solo text");
    say(k, "solo=[%s]", e);
    f.set(NULL);
    dlclose(f.dl);
  } else {
    check(k, sig_wait(), "rank 0 prefetched");
    check(k, rdzv_comm_nccl(a, &nc, LONG_S) == 0 && nc != NULL, "nccl a");
  }
  rdzv_comm_destroy(a);
  rdzv_comm_destroy(solo);
}

static void test_prefetch_cuda_context_gone(void **state) {
  (void)state;
  struct world_spec w = {"cuda-gone",        2, 1, 0, 0, NULL, NULL, 0,
                         scen_cuda_ctx_gone, 0};
  char rep[2][REPORT_MAX];
  run_signalled(&w, rep);
  char *log = fake_log("cuda-gone", 0);
  printf("cuda-gone rank 0:\n%s", log);
  /* a's init, in a's own context; solo's never started. */
  assert_int_equal(inits(log), 1);
  assert_int_equal(count(log, "initRankConfig comm=1 nranks=2 rank=1 "
                              "blocking=0"),
                   1);
  assert_int_equal(count(log, " -> 0 ctx=0x3100\n"), 1);
  free(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prefetch_returns_before_exchange),
      cmocka_unit_test(test_groups_complete_in_background),
      cmocka_unit_test(test_abort_and_destroy_background),
      cmocka_unit_test(test_queued_deadline),
      cmocka_unit_test(test_first_use_takes_over_queued),
      cmocka_unit_test(test_prefetch_carries_cuda_context),
      cmocka_unit_test(test_prefetch_cuda_context_gone),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
