/* rdzv_comm_shrink and rdzv_comm_grow (rdzv/comm.h) over a real
 * rendezvous: a root and two node daemons as processes, ranks as forked
 * children (comm_harness.h), NCCL the FAKE library
 * tests/fake_nccl/libfake_nccl.so (a test double, loaded through the
 * production dlopen seam), whose log shows what each rank passed to
 * ncclCommShrink, ncclCommGetUniqueId and ncclCommGrow.
 *   - shrink: 6 ranks, rank 5 lost (joined, initialized, then killed
 *     with SIGKILL: its generation aborts); once rank 1 sees the abort
 *     (a key of the generation refused) it proposes {3,5} first, the
 *     others propose {5}, {5,4} or nothing after it: every survivor gets the
 * one agreed list {3,5}, rank 3 (on it) fails with RDZV_EEXCLUDED, ranks
 * 0,1,2,4 become 0..3 of 4, and each passed NCCL the same list;
 *   - grow: the 4-rank group "world.train" grows by world ranks 5 and 4
 *     (new ranks 4 and 5), non-blocking: one id, made once by rank 0,
 *     reaches both new members; every rank ends with the same world;
 *   - grow into a later generation: 4 ranks, rank 3 killed in generation
 *     1; the survivors shrink "world" to "world.shrink1" (under w1's
 *     keys), a replacement takes launch index 3, everyone joins
 *     generation 2 (the survivors keep ranks 0-2, the replacement gets 3),
 *     and rdzv_comm_grow_in / rdzv_comm_grow_join grow "world.shrink1"
 *     back to 4 under w2's keys, with one id made once; a world of another
 *     round, an older generation or a sub-group is refused, saying why;
 *   - an NCCL too old for either call: a clear error, nothing exchanged.
 * No assertion depends on wall-clock time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include "comm_harness.h"
#include "rdzv/comm.h"
#include "rdzv/rdzv.h"

/* "a,b,c" of n ints into out. */
static void ints(const int32_t *v, int32_t n, char *out, size_t len) {
  size_t used = 0;
  out[0] = '\0';
  for (int32_t i = 0; i < n && used + 12 < len; i++)
    used += (size_t)snprintf(out + used, len - used, "%s%d", i ? "," : "",
                             (int)v[i]);
}

/* Reports a handle's view: its rank, size, members' world ranks and the
 * exclude list it was shrunk with. */
static void report(struct rank_ctx *k, rdzv_comm_t *c) {
  int32_t w[MAX_RANKS];
  const int32_t *ex = NULL;
  char ws[256], es[256];
  int32_t n = rdzv_comm_excluded(c, &ex);
  for (int32_t i = 0; i < rdzv_comm_size(c) && i < MAX_RANKS; i++)
    w[i] = rdzv_comm_world_rank(c, i);
  ints(w, rdzv_comm_size(c), ws, sizeof(ws));
  ints(ex, n, es, sizeof(es));
  say(k, "name=%s rank=%d size=%d world=%s excluded=%s path=%s",
      rdzv_comm_name(c), (int)rdzv_comm_rank(c), (int)rdzv_comm_size(c), ws,
      es[0] ? es : "-", rdzv_comm_init_path(c));
}

/* Whether r's generation was aborted: writes a key of it until the root
 * refuses it (a write reaches the root; a node may answer a read): as
 * aborted, or as stale once a later generation opened (stale_ok).
 * Bounded by count, not time. */
static int ended(struct rank_ctx *k, int stale_ok) {
  char probe[160];
  snprintf(probe, sizeof(probe), "rdzv/%s/g%lld/probe",
           rdzv_rendezvous_round(k->r),
           (long long)rdzv_rendezvous_generation(k->r));
  int prc = 0;
#define ENDED(rc)                                                              \
  ((rc) == RDZV_EABORTED || (stale_ok && (rc) == RDZV_ESTALE_GENERATION))
  for (int i = 0; i < 3000 && !ENDED(prc); i++) {
    prc = rdzv_store_set(rdzv_rendezvous_client(k->r), probe, "x", 1, 0, 5);
    if (!ENDED(prc))
      usleep(10000);
  }
  if (!ENDED(prc))
    say(k, "probe=%s", rdzv_err_name(prc));
  return ENDED(prc);
#undef ENDED
}

static int aborted(struct rank_ctx *k) { return ended(k, 0); }

/* ---- shrink: one agreed exclude list ------------------------------------- */

static void scen_shrink(struct rank_ctx *k) {
  static const int32_t first[2] = {5, 3}, five[1] = {5}, four[2] = {5, 4};
  struct ncclComm *nc = NULL;
  rdzv_comm_t *s = NULL;
  int rc;
  if (!check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "world init"))
    return;
  if (k->rank == 5) /* lost: joined, initialized, now dead */
    raise(SIGKILL);
  if (k->rank == 1) {
    /* The node saw rank 5's process go: the generation is aborted (its
     * keys refused) before anyone shrinks. */
    check(k, aborted(k), "the generation aborted");
    rc = rdzv_comm_shrink(k->world, first, 2, RDZV_COMM_SHRINK_ABORT, &s, 30);
    for (int i = 0; i < 4; i++)
      sig_send(); /* one byte for each other survivor */
  } else {
    check(k, sig_wait(), "rank 1 proposed");
    if (k->rank == 4) /* no proposal: takes the agreed one */
      rc = rdzv_comm_shrink(k->world, NULL, 0, RDZV_COMM_SHRINK_ABORT, &s, 30);
    else
      rc = rdzv_comm_shrink(k->world, k->rank == 2 ? four : five,
                            k->rank == 2 ? 2 : 1, RDZV_COMM_SHRINK_ABORT, &s,
                            30);
  }
  say(k, "shrink=%s", rdzv_err_name(rc));
  if (k->rank == 3) {
    check(k, rc == RDZV_EEXCLUDED, "rank 3 excluded");
    check(k, s == NULL, "no handle");
    check(k,
          strstr(rdzv_comm_last_error(k->world),
                 "this rank (3) is on the agreed exclude list {3,5}") != NULL,
          "excluded text");
    return;
  }
  if (!check(k, rc == 0 && s != NULL, "shrink")) {
    say(k, "err=%s", rdzv_comm_last_error(k->world));
    return;
  }
  struct ncclComm *sc = NULL;
  check(k, rdzv_comm_state(s) == RDZV_COMM_READY, "ready");
  check(k, rdzv_comm_nccl(s, &sc, 30) == 0 && sc != NULL && sc != nc, "comm");
  report(k, s);
  rdzv_comm_destroy(s);
}

static void test_shrink_agrees_on_one_list(void **state) {
  (void)state;
  struct world_spec w = {"shrink", 6, 3, 0, 0, NULL, NULL, 0, scen_shrink, 0};
  struct rank_proc rp[6];
  char rep[6][REPORT_MAX];
  assert_int_equal(pipe(go_pipe), 0);
  sig_open();
  launch(&w, rp);
  sig_close();
  close(go_pipe[1]);
  go_pipe[1] = -1;
  for (int i = 0; i < 5; i++)
    if (finish(&rp[i], rep[i], sizeof(rep[i])) != 0)
      fail_msg("rank %d: %s", i, rep[i]);
  close(go_pipe[0]);
  go_pipe[0] = -1;
  int st = 0;
  close(rp[5].fd);
  assert_int_equal(waitpid(rp[5].pid, &st, 0), rp[5].pid);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  assert_non_null(strstr(rep[3], "shrink=RDZV_EEXCLUDED"));
  /* Every survivor: the same list, the same world, its rank renumbered. */
  static const int survivors[4] = {0, 1, 2, 4};
  for (int j = 0; j < 4; j++) {
    int i = survivors[j];
    char want[200];
    snprintf(want, sizeof(want),
             "name=world.shrink1 rank=%d size=4 world=0,1,2,4 excluded=3,5 "
             "path=shrink",
             j);
    if (strstr(rep[i], want) == NULL)
      fail_msg("rank %d: want '%s' in: %s", i, want, rep[i]);
    /* What it passed NCCL: the agreed list, with NCCL_SHRINK_ABORT; and
     * its world communicator aborted, not finalized, at destroy. */
    char *log = fake_log("shrink", i);
    snprintf(want, sizeof(want),
             "shrink comm=1 exclude=3,5 flags=1 child=2 "
             "nranks=4 rank=%d -> 0",
             j);
    if (count(log, "shrink comm=") != 1 || strstr(log, want) == NULL)
      fail_msg("rank %d's fake NCCL log lacks '%s':\n%s", i, want, log);
    assert_int_equal(count(log, "abort comm=1"), 1);
    assert_int_equal(count(log, "finalize comm=1"), 0);
    free(log);
  }
  /* The excluded rank made no NCCL shrink call. */
  char *log = fake_log("shrink", 3);
  assert_int_equal(count(log, "shrink comm="), 0);
  free(log);
  assert_true(key_exists("shrink", "rdzv/world/w1/shrink/world/1"));
  assert_false(key_exists("shrink", "rdzv/world/w1/shrink/world/2"));
}

/* ---- grow: one id, made once, reaches every new member ------------------- */

static void scen_grow(struct rank_ctx *k) {
  static const int32_t train[4] = {0, 1, 2, 3}, added[2] = {5, 4};
  rdzv_comm_t *t = NULL, *g = NULL;
  struct ncclComm *nc = NULL;
  int rc;
  if (!check(k, rdzv_comm_group(k->world, "train", train, 4, &t) == 0, "group"))
    return;
  if (k->rank < 4) {
    made_label = "train";
    if (check(k, rdzv_comm_nccl(t, &nc, 30) == 0, "train init"))
      rc = rdzv_comm_grow(t, added, 2, &g, 30);
    else
      rc = -1;
  } else {
    rc = rdzv_comm_grow_join(k->world, "world.train", 1, &g, 30);
  }
  say(k, "grow=%s", rdzv_err_name(rc));
  if (check(k, rc == 0 && g != NULL, "grow")) {
    check(k, rdzv_comm_state(g) == RDZV_COMM_READY, "ready");
    report(k, g);
  } else {
    say(k, "err=%s / %s", rdzv_comm_last_error(t),
        rdzv_comm_last_error(k->world));
  }
  rdzv_comm_destroy(g);
  rdzv_comm_destroy(t);
}

static void test_grow_one_id_reaches_new_members(void **state) {
  (void)state;
  /* Non-blocking: the fake answers each init and grow in progress twice. */
  struct world_spec w = {"grow", 6, 3, 0, 1, "2", NULL, 0, scen_grow, 0};
  char rep[6][REPORT_MAX], id[17], hex[17];
  setenv("FAKE_NCCL_VERSION", "22900", 1); /* an NCCL with ncclCommGrow */
  run_world(&w, rep);
  unsetenv("FAKE_NCCL_VERSION");
  static const int new_rank[6] = {0, 1, 2, 3, 5, 4};
  for (int i = 0; i < 6; i++) {
    char want[200];
    snprintf(want, sizeof(want),
             "name=world.train.grow1 rank=%d size=6 world=0,1,2,3,5,4 "
             "excluded=- path=grow",
             new_rank[i]);
    if (strstr(rep[i], want) == NULL)
      fail_msg("rank %d: want '%s' in: %s", i, want, rep[i]);
  }
  /* Rank 0 made the id once and passed it; ranks 1-3 passed none. */
  char *log = fake_log("grow", 0);
  assert_int_equal(count(log, "commGetUniqueId"), 1);
  assert_int_equal(field(log, "commGetUniqueId", "id=", id, sizeof(id)), 0);
  assert_int_equal(field(log, "grow comm=", "id=", hex, sizeof(hex)), 0);
  assert_string_equal(hex, id);
  assert_non_null(strstr(log, " nranks=6 id="));
  assert_non_null(strstr(log, " rank=-1 "));
  free(log);
  for (int i = 1; i < 6; i++) {
    char want[200];
    log = fake_log("grow", i);
    assert_int_equal(count(log, "commGetUniqueId"), 0);
    assert_int_equal(count(log, "grow comm="), 1);
    if (i < 4)
      snprintf(want, sizeof(want), "nranks=6 id=none rank=-1 ");
    else /* a new member: no parent comm, the id, its new rank */
      snprintf(want, sizeof(want), "grow comm=0 nranks=6 id=%s rank=%d ", id,
               new_rank[i]);
    if (strstr(log, want) == NULL)
      fail_msg("rank %d's fake NCCL log lacks '%s':\n%s", i, want, log);
    /* Polled to its end: in progress twice, then done (the grown comm is
     * the first a new member made, the second an existing one made). */
    const char *c = i >= 4 ? "asyncError comm=1 " : "asyncError comm=2 ";
    snprintf(want, sizeof(want), "%s-> 7", c);
    assert_int_equal(count(log, want), 2);
    snprintf(want, sizeof(want), "%s-> 0", c);
    assert_int_equal(count(log, want), 1);
    free(log);
  }
  assert_true(key_exists("grow", "rdzv/world/w1/grow/world.train/1"));
}

/* ---- grow into a later generation: a replacement's ranks ----------------- */

static const int32_t lost3[1] = {3};

/* Rank 0: a world of another round (a one-rank round "side" of the same
 * job) is refused before anything is exchanged. */
static void grow_in_other_round(struct rank_ctx *k, rdzv_comm_t *s,
                                const struct rdzv_comm_opts *co) {
  struct rdzv_rendezvous_opts o = *k->opts;
  rdzv_rendezvous_t *r = NULL;
  rdzv_comm_t *w = NULL, *g = NULL;
  char err[1024] = "";
  o.round = "side";
  o.world_size = 1;
  o.local_size = 1;
  if (!check(k, rdzv_rendezvous_join(&o, &r, err, sizeof(err)) == 0,
             "join side")) {
    say(k, "side: %s", err);
    return;
  }
  if (check(k, rdzv_comm_world(r, co, &w) == 0, "side world")) {
    int rc = rdzv_comm_grow_in(s, w, lost3, 1, &g, 30);
    check(k, rc == -EINVAL && g == NULL, "other round refused");
    say(k, "side-err=[%s]", rdzv_comm_last_error(s));
  }
  rdzv_comm_destroy(g);
  rdzv_comm_destroy(w);
  rdzv_rendezvous_destroy(r);
}

static void scen_grow_in(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  rdzv_comm_t *s = NULL, *w2 = NULL, *g = NULL;
  rdzv_rendezvous_t *r2 = NULL;
  struct rdzv_comm_opts co;
  char err[1024] = "";
  int rc;
  if (!check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "world init"))
    return;
  if (k->rank == 3) /* lost: joined, initialized, now dead */
    raise(SIGKILL);
  /* Generation 1 aborted, or already stale: a survivor that saw the
   * abort first may have shrunk and joined again (the survivors do not
   * wait for each other), opening generation 2, before another probes.
   * Either way rank 3 is gone and its place open: rank 0 then has the
   * replacement started. */
  if (!check(k, ended(k, 1), "generation 1 ended"))
    return;
  if (k->rank == 0)
    sig_send(); /* the test parent starts the replacement */
  rc = rdzv_comm_shrink(k->world, lost3, 1, RDZV_COMM_SHRINK_ABORT, &s, 30);
  if (!check(k, rc == 0 && s != NULL, "shrink")) {
    say(k, "err=%s", rdzv_comm_last_error(k->world));
    return;
  }
  /* Generation 2, with generation 1's handles kept. */
  rc = rdzv_rendezvous_join(k->opts, &r2, err, sizeof(err));
  if (!check(k, rc == 0, "join again")) {
    say(k, "join2: %s", err);
    rdzv_comm_destroy(s);
    return;
  }
  say(k, "gen2=%lld rank2=%d", (long long)rdzv_rendezvous_generation(r2),
      (int)rdzv_rendezvous_rank(r2));
  rdzv_comm_opts_init(&co);
  co.nccl_path = FAKE;
  if (check(k, rdzv_comm_world(r2, &co, &w2) == 0, "world2")) {
    if (k->rank == 0)
      grow_in_other_round(k, s, &co);
    if (k->rank == 2) { /* a sub-group is not a world */
      rc = rdzv_comm_grow_in(s, s, lost3, 1, &g, 30);
      check(k, rc == -EINVAL && g == NULL, "sub-group refused");
      say(k, "sub-err=[%s]", rdzv_comm_last_error(s));
    }
    rc = rdzv_comm_grow_in(s, w2, lost3, 1, &g, 30);
    say(k, "grow_in=%s", rdzv_err_name(rc));
    if (check(k, rc == 0 && g != NULL, "grow_in")) {
      check(k, rdzv_comm_state(g) == RDZV_COMM_READY, "ready");
      check(k, rdzv_comm_generation(g) == 2, "in generation 2");
      report(k, g);
    } else {
      say(k, "err=%s", rdzv_comm_last_error(s));
    }
    if (k->rank == 1 && g != NULL) { /* an older world than the handle's */
      rdzv_comm_t *g2 = NULL;
      rc = rdzv_comm_grow_in(g, k->world, lost3, 1, &g2, 30);
      check(k, rc == -EINVAL && g2 == NULL, "older world refused");
      say(k, "old-err=[%s]", rdzv_comm_last_error(g));
    }
  }
  rdzv_comm_destroy(g);
  rdzv_comm_destroy(w2);
  rdzv_comm_destroy(s);
  /* The rank reports (and then destroys) generation 2's handle. */
  rdzv_comm_destroy(k->world);
  k->world = NULL;
  rdzv_rendezvous_destroy(k->r);
  k->r = r2;
}

/* The spare in rank 3's place: a new member of generation 2. */
static void scen_replacement(struct rank_ctx *k) {
  rdzv_comm_t *g = NULL;
  say(k, "gen2=%lld rank2=%d", (long long)rdzv_rendezvous_generation(k->r),
      (int)k->rank);
  int rc = rdzv_comm_grow_join(k->world, "world.shrink1", 1, &g, 30);
  say(k, "grow_join=%s", rdzv_err_name(rc));
  if (check(k, rc == 0 && g != NULL, "grow_join")) {
    check(k, rdzv_comm_state(g) == RDZV_COMM_READY, "ready");
    check(k, rdzv_comm_generation(g) == 2, "in generation 2");
    report(k, g);
  } else {
    say(k, "err=%s", rdzv_comm_last_error(k->world));
  }
  rdzv_comm_destroy(g);
}

static void test_grow_into_a_later_generation(void **state) {
  (void)state;
  struct world_spec w = {"growin", 4, 2, 0, 0, NULL, NULL, 0, scen_grow_in, 0};
  struct world_spec spare = w;
  struct rank_proc rp[4];
  char rep[4][REPORT_MAX], id[17], hex[17], want[200];
  int st = 0;
  spare.fn = scen_replacement;
  setenv("FAKE_NCCL_VERSION", "22900", 1); /* an NCCL with ncclCommGrow */
  sig_open();
  launch(&w, rp);
  /* Rank 0 saw generation 1 abort: rank 3 is dead; start its replacement
   * (launch index 3: hostB, local rank 1). */
  int seen = sig_wait();
  sig_close();
  close(rp[3].fd);
  assert_int_equal(waitpid(rp[3].pid, &st, 0), rp[3].pid);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  launch_one(&spare, 3, &rp[3]);
  unsetenv("FAKE_NCCL_VERSION");
  int bad = 0;
  for (int i = 0; i < 4; i++)
    bad |= finish(&rp[i], rep[i], sizeof(rep[i])) != 0;
  if (bad || !seen)
    fail_msg("ranks:\n0: %s\n1: %s\n2: %s\n3: %s", rep[0], rep[1], rep[2],
             rep[3]);
  for (int i = 0; i < 4; i++) {
    int rank = -1;
    long long gen = 0;
    assert_int_equal(sscanf(rep[i], "%*d %d %lld", &rank, &gen), 2);
    assert_int_equal(rank, i);
    assert_int_equal(gen, 2);
    /* Ranks kept in generation 2; the grown handle, the same on all. */
    snprintf(want, sizeof(want), "gen2=2 rank2=%d ", i);
    if (strstr(rep[i], want) == NULL)
      fail_msg("rank %d: want '%s' in: %s", i, want, rep[i]);
    snprintf(want, sizeof(want),
             "name=world.shrink1.grow1 rank=%d size=4 world=0,1,2,3 "
             "excluded=- path=grow",
             i);
    if (strstr(rep[i], want) == NULL)
      fail_msg("rank %d: want '%s' in: %s", i, want, rep[i]);
  }
  /* Refused, saying why, with nothing exchanged. */
  if (strstr(rep[0], "side-err=[world.shrink1: grow 1: the world handle is "
                     "of round 'side', this communicator of round "
                     "'world']") == NULL)
    fail_msg("rank 0: %s", rep[0]);
  if (strstr(rep[1], "old-err=[world.shrink1.grow1: grow 1: the world handle "
                     "is of generation 1, older than this communicator's "
                     "2]") == NULL)
    fail_msg("rank 1: %s", rep[1]);
  if (strstr(rep[2], "sub-err=[world.shrink1: rdzv_comm_grow_in: "
                     "'world.shrink1' is not a world handle") == NULL)
    fail_msg("rank 2: %s", rep[2]);
  /* Rank 0 made one id, on its shrunk communicator (comm 2), and passed
   * it; ranks 1 and 2 passed none; the replacement got it. */
  char *log = fake_log("growin", 0);
  assert_int_equal(count(log, "commGetUniqueId"), 1);
  assert_int_equal(field(log, "commGetUniqueId comm=2", "id=", id, sizeof(id)),
                   0);
  assert_int_equal(field(log, "grow comm=2", "id=", hex, sizeof(hex)), 0);
  assert_string_equal(hex, id);
  free(log);
  for (int i = 1; i < 4; i++) {
    log = fake_log("growin", i);
    assert_int_equal(count(log, "commGetUniqueId"), 0);
    assert_int_equal(count(log, "grow comm="), 1);
    if (i < 3)
      snprintf(want, sizeof(want), "grow comm=2 nranks=4 id=none rank=-1 ");
    else
      snprintf(want, sizeof(want), "grow comm=0 nranks=4 id=%s rank=3 ", id);
    if (strstr(log, want) == NULL)
      fail_msg("rank %d's fake NCCL log lacks '%s':\n%s", i, want, log);
    free(log);
  }
  /* Agreed under generation 2's keys, not generation 1's. */
  assert_true(key_exists("growin", "rdzv/world/w2/grow/world.shrink1/1"));
  assert_false(key_exists("growin", "rdzv/world/w1/grow/world.shrink1/1"));
}

/* ---- an NCCL without shrink or grow -------------------------------------- */

static void scen_old(struct rank_ctx *k) {
  static const int32_t lost[1] = {1}, added[1] = {1};
  struct ncclComm *nc = NULL;
  rdzv_comm_t *s = NULL, *t = NULL, *g = NULL;
  const int32_t zero[1] = {0};
  check(k, rdzv_comm_nccl(k->world, &nc, 30) == 0, "world init");
  if (k->rank == 0) {
    int rc = rdzv_comm_shrink(k->world, lost, 1, 0, &s, 30);
    check(k, rc == RDZV_ENCCL_VERSION, "shrink refused");
    say(k, "shrink-err=[%s]", rdzv_comm_last_error(k->world));
    check(k, rdzv_comm_group(k->world, "one", zero, 1, &t) == 0, "group");
    check(k, rdzv_comm_nccl(t, &nc, 30) == 0, "one init");
    rc = rdzv_comm_grow(t, added, 1, &g, 30);
    check(k, rc == RDZV_ENCCL_VERSION, "grow refused");
    say(k, "grow-err=[%s]", rdzv_comm_last_error(t));
  } else {
    int rc = rdzv_comm_grow_join(k->world, "world.one", 1, &g, 30);
    check(k, rc == RDZV_ENCCL_VERSION, "grow_join refused");
    say(k, "join-err=[%s]", rdzv_comm_last_error(k->world));
    check(k, rdzv_comm_group(k->world, "one", zero, 1, &t) == 0, "group");
  }
  check(k, s == NULL && g == NULL, "no handles");
  rdzv_comm_destroy(t);
}

static void test_old_nccl_is_refused_clearly(void **state) {
  (void)state;
  struct world_spec w = {"old", 2, 1, 0, 0, NULL, NULL, 0, scen_old, 0};
  char rep[2][REPORT_MAX];
  setenv("FAKE_NCCL_VERSION", "22605", 1); /* 2.26.5: neither call */
  run_world(&w, rep);
  unsetenv("FAKE_NCCL_VERSION");
  const char *lib = "NCCL library '" FAKE "' is version 2.26.5 (code 22605)";
  if (strstr(rep[0], "shrink-err=[world: rdzv_comm_shrink: ncclCommShrink "
                     "needs NCCL 2.27.0 (code 22700) or newer; ") == NULL ||
      strstr(rep[0], "grow-err=[world.one: rdzv_comm_grow: ncclCommGrow "
                     "needs NCCL 2.29.0 (code 22900) or newer; ") == NULL ||
      strstr(rep[0], lib) == NULL)
    fail_msg("rank 0: %s", rep[0]);
  if (strstr(rep[1], "join-err=[world: rdzv_comm_grow_join: ncclCommGrow "
                     "needs NCCL 2.29.0") == NULL)
    fail_msg("rank 1: %s", rep[1]);
  /* Nothing was exchanged, and NCCL was never asked. */
  assert_false(key_exists("old", "rdzv/world/w1/shrink/world/1"));
  assert_false(key_exists("old", "rdzv/world/w1/grow/world.one/1"));
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("old", i);
    assert_int_equal(count(log, "shrink comm="), 0);
    assert_int_equal(count(log, "grow comm="), 0);
    assert_int_equal(count(log, "commGetUniqueId"), 0);
    free(log);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shrink_agrees_on_one_list),
      cmocka_unit_test(test_grow_one_id_reaches_new_members),
      cmocka_unit_test(test_grow_into_a_later_generation),
      cmocka_unit_test(test_old_nccl_is_refused_clearly),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
