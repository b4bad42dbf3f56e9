/* Tree repair with real daemons (root <- mid <- leaf): a node learns its
 * ancestors from its parent's hello reply, reattaches to the nearest live
 * one when its parent is lost, and sends again what the lost connection
 * carried; mutations carry op ids, so each is applied once.
 *
 * Invariants checked after each scenario: every request through the leaf
 * completes; each counter equals the number of adds acknowledged; a wait
 * and a barrier pending across the loss complete; the root applied a
 * re-sent add once (dedup_hits). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

static const char *const beat[] = {"--heartbeat-ms=100",
                                   "--liveness-timeout-ms=800",
                                   "--session-grace-ms=1500", NULL};

static char dir[64];
static struct proc root, mid, leaf;
static char root_tcp[64], mid_tcp[64], leaf_tcp[64];
static char root_addr[160], leaf_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-reattach-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, beat, root_tcp) < 0 ||
      daemon_start(&mid, dir, "mid", root_tcp, beat, mid_tcp) < 0 ||
      daemon_start(&leaf, dir, "leaf", mid_tcp, beat, leaf_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  daemon_unix_addr(dir, "leaf", leaf_addr, sizeof(leaf_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kill(root.pid, SIGCONT);
  if (mid.pid != 0)
    kill(mid.pid, SIGCONT);
  int bad = leaf.pid != 0 && proc_stop(&leaf) != 0;
  bad |= mid.pid != 0 && proc_stop(&mid) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static rdzv_client_t *client_of(const char *addr, const char *job) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

struct reply {
  int done, status;
  int64_t a;
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
  r->a = res->a;
}

static void submit(rdzv_client_t *c, enum rdzv_op op, const char *key,
                   int64_t a, int64_t b, const void *val, size_t vlen,
                   struct reply *r) {
  struct rdzv_bytes k = {key, strlen(key)}, v = {val, vlen};
  struct rdzv_request req = {.op = op,
                             .a = a,
                             .b = b,
                             .nkeys = 1,
                             .keys = &k,
                             .nvals = val ? 1 : 0,
                             .vals = val ? &v : NULL};
  assert_int_equal(rdzv_client_submit(c, &req, 60, on_reply, r), 0);
}

/* The counter's value at the root (read there, not through the tree). */
static int64_t counter_at_root(const char *job, const char *key) {
  rdzv_client_t *c = client_of(root_addr, job);
  void *v = NULL;
  size_t n = 0;
  int64_t x = -1;
  if (rdzv_store_get(c, key, &v, &n, 20) == 0)
    x = strtoll(v, NULL, 10);
  rdzv_free(v);
  rdzv_client_destroy(c);
  return x;
}

#define ADDS 50

/* kill -9 of mid: the leaf reattaches to the root (learned from mid's
 * hello reply) and what was pending goes on there. */
static void test_interior_node_killed(void **state) {
  (void)state;
  rdzv_client_t *c = client_of(leaf_addr, "repair");
  assert_int_equal(rdzv_store_set(c, "warm", "1", 1, 0, 20), 0);
  char *json = NULL;
  assert_int_equal(rdzv_store_stats(c, &json, 20), 0);
  char want[100];
  snprintf(want, sizeof(want), "\"ancestors\":[\"%s\"]", root_tcp);
  if (strstr(json, want) == NULL)
    fail_msg("the leaf does not know the root as its ancestor: %s", json);
  rdzv_free(json);

  /* Pending through the leaf: a wait, a barrier member, and adds. */
  static struct reply w, bar, adds[ADDS];
  memset(&w, 0, sizeof(w));
  memset(&bar, 0, sizeof(bar));
  memset(adds, 0, sizeof(adds));
  submit(c, RDZV_OP_WAIT, "later", 0, 0, NULL, 0, &w);
  uint8_t member[8] = {0};
  submit(c, RDZV_OP_BARRIER, "b", 0, 2, member, 8, &bar);
  for (int i = 0; i < ADDS / 2; i++)
    submit(c, RDZV_OP_ADD, "ctr", 1, 0, NULL, 0, &adds[i]);
  rdzv_client_run(c, 0.05);
  kill(mid.pid, SIGKILL);
  int st;
  waitpid(mid.pid, &st, 0);
  mid.pid = 0;
  for (int i = ADDS / 2; i < ADDS; i++)
    submit(c, RDZV_OP_ADD, "ctr", 1, 0, NULL, 0, &adds[i]);
  /* The rest of the world, straight at the root. */
  rdzv_client_t *r = client_of(root_addr, "repair");
  assert_int_equal(rdzv_store_set(r, "later", "here", 4, 0, 20), 0);
  uint8_t m1[8] = {1};
  struct reply bar1 = {0};
  submit(r, RDZV_OP_BARRIER, "b", 0, 2, m1, 8, &bar1);
  assert_int_equal(rdzv_client_run(r, 30), 0);
  assert_int_equal(rdzv_client_run(c, 30), 0);
  assert_true(w.done && bar.done && bar1.done);
  assert_int_equal(w.status, 0);
  assert_int_equal(bar.status, 0);
  assert_int_equal(bar1.status, 0);
  int acked = 0;
  for (int i = 0; i < ADDS; i++)
    if (adds[i].done && adds[i].status == 0)
      acked++;
  assert_int_equal(acked, ADDS);
  assert_int_equal(counter_at_root("repair", "ctr"), ADDS);
  assert_true(stats_at(leaf_addr, "reattached") >= 1);
  rdzv_client_destroy(r);
  rdzv_client_destroy(c);
}

/* A lost acknowledgement: mid's add reaches the stopped root; mid,
 * hearing nothing, drops that connection and sends the add again on a
 * new one; the root, resumed, reads both. The add is applied once. */
static void test_lost_ack_applied_once(void **state) {
  (void)state;
  rdzv_client_t *c = client_of(leaf_addr, "once");
  assert_int_equal(rdzv_store_set(c, "warm", "1", 1, 0, 20), 0);
  kill(root.pid, SIGSTOP);
  struct reply a = {0}, s = {0};
  submit(c, RDZV_OP_ADD, "ctr", 5, 0, NULL, 0, &a);
  submit(c, RDZV_OP_APPEND, "log", 0, 0, "x", 1, &s);
  /* mid declares the root lost (0.8 s) and keeps both to send again. */
  int64_t lost = -1;
  for (int tries = 0; tries < 600 && lost < 1; tries++) {
    rdzv_client_run(c, 0.05);
    lost = stats_at(mid_tcp, "parent_silent");
  }
  assert_true(lost >= 1);
  kill(root.pid, SIGCONT);
  assert_int_equal(rdzv_client_run(c, 30), 0);
  assert_true(a.done && s.done);
  assert_int_equal(a.status, 0);
  assert_int_equal(a.a, 5);
  assert_int_equal(s.status, 0);
  assert_int_equal(counter_at_root("once", "ctr"), 5);
  rdzv_client_t *r = client_of(root_addr, "once");
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(r, "log", &v, &n, 20), 0);
  assert_int_equal(n, 1); /* "x", not "xx" */
  rdzv_free(v);
  rdzv_client_destroy(r);
  assert_true(stats_at(root_tcp, "dedup_hits") >= 1);
  rdzv_client_destroy(c);
}

/* A rank of job "sessions", world 2, joining through addr as host. */
static int join_as(const char *addr, const char *host, rdzv_rendezvous_t **out,
                   char *err, size_t errlen) {
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "sessions";
  o.round = "world";
  o.host = host;
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 2;
  o.timeout_s = 30;
  o.topology = "gpu=test\n";
  return rdzv_rendezvous_join(&o, out, err, errlen);
}

/* A forked rank on hostA through the leaf: joins, writes its generation,
 * waits for a byte on go, then a barrier "after" (20 s), writes its
 * status, and waits for go to close. */
static pid_t rank_through_leaf(int res_fd, int go_fd, int go_w, int res_r) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  /* Only the test holds go's write end, so its close ends the wait. */
  close(go_w);
  close(res_r);
  rdzv_rendezvous_t *r = NULL;
  char err[512];
  int64_t gen = -1;
  if (join_as(leaf_addr, "hostA", &r, err, sizeof(err)) == 0)
    gen = rdzv_rendezvous_generation(r);
  if (write(res_fd, &gen, sizeof(gen)) != sizeof(gen))
    _exit(2);
  char b;
  if (read(go_fd, &b, 1) == 1) {
    int64_t st = r != NULL ? rdzv_rendezvous_barrier(r, "after", 20) : -1;
    if (write(res_fd, &st, sizeof(st)) != sizeof(st))
      _exit(2);
    while (read(go_fd, &b, 1) > 0)
      ;
  }
  rdzv_rendezvous_destroy(r);
  _exit(0);
}

/* A completed generation outlives an interior node: mid is killed, the
 * leaf reattaches to the root and sends its members again, the root binds
 * them to the new path within --session-grace-ms, and a barrier of the
 * generation then completes on both ranks (before, mid's death aborted
 * the generation). */
static void test_generation_survives_interior_death(void **state) {
  (void)state;
  int res[2], go[2];
  assert_int_equal(pipe(res), 0);
  assert_int_equal(pipe(go), 0);
  pid_t a = rank_through_leaf(res[1], go[0], go[1], res[0]);
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = join_as(root_addr, "hostB", &r, err, sizeof(err));
  if (rc != 0)
    fail_msg("join at the root: %s (%s)", rdzv_strerror(rc), err);
  int64_t ga = 0;
  assert_int_equal(read(res[0], &ga, sizeof(ga)), sizeof(ga));
  assert_int_equal(ga, 1);
  assert_int_equal(rdzv_rendezvous_generation(r), 1);
  kill(mid.pid, SIGKILL);
  int st;
  waitpid(mid.pid, &st, 0);
  mid.pid = 0;
  /* The leaf reattaches; then the grace passes. */
  assert_true(stats_reach(leaf_addr, "reattached", 1) >= 1);
  usleep(2500 * 1000); /* past the 1.5 s grace */
  assert_int_equal(write(go[1], "g", 1), 1);
  rc = rdzv_rendezvous_barrier(r, "after", 20);
  if (rc != 0)
    fail_msg("barrier at the root: %s (%s)", rdzv_strerror(rc),
             rdzv_rendezvous_last_error(r));
  int64_t sa = -1;
  assert_int_equal(read(res[0], &sa, sizeof(sa)), sizeof(sa));
  assert_int_equal(sa, 0);
  close(go[1]);
  waitpid(a, &st, 0);
  close(go[0]);
  close(res[0]);
  close(res[1]);
  rdzv_rendezvous_destroy(r);
}

/* A host lost for good (its node and its rank killed): the generation
 * aborts when the grace ends, and the surviving rank's barrier says which
 * host and rank were lost, well before its own 20 s deadline. */
static void test_lost_host_named(void **state) {
  (void)state;
  int res[2], go[2];
  assert_int_equal(pipe(res), 0);
  assert_int_equal(pipe(go), 0);
  pid_t a = rank_through_leaf(res[1], go[0], go[1], res[0]);
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = join_as(root_addr, "hostB", &r, err, sizeof(err));
  if (rc != 0)
    fail_msg("join at the root: %s (%s)", rdzv_strerror(rc), err);
  int64_t ga = 0;
  assert_int_equal(read(res[0], &ga, sizeof(ga)), sizeof(ga));
  kill(leaf.pid, SIGKILL);
  kill(a, SIGKILL);
  int st;
  waitpid(leaf.pid, &st, 0);
  waitpid(a, &st, 0);
  leaf.pid = 0;
  rc = rdzv_rendezvous_barrier(r, "after", 20);
  assert_int_equal(rc, RDZV_EABORTED);
  const char *e = rdzv_rendezvous_last_error(r);
  if (strstr(e, "node leaf") == NULL || strstr(e, "host hostA") == NULL ||
      strstr(e, "--session-grace-ms") == NULL)
    fail_msg("the abort does not name the lost host: %s", e);
  close(go[1]);
  close(go[0]);
  close(res[0]);
  close(res[1]);
  rdzv_rendezvous_destroy(r);
}

/* Members re-sent for a generation that is gone never start a new one:
 * generation 1 completes (hostA through the leaf, hostB at the root), mid
 * stops, hostB aborts generation 1, the leaf reattaches and sends its
 * member again (refused: that generation is gone); two new ranks then
 * make generation 2 by themselves. */
static void test_resend_of_a_gone_generation(void **state) {
  (void)state;
  int res[2], go[2];
  assert_int_equal(pipe(res), 0);
  assert_int_equal(pipe(go), 0);
  pid_t a = rank_through_leaf(res[1], go[0], go[1], res[0]);
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  assert_int_equal(join_as(root_addr, "hostB", &r, err, sizeof(err)), 0);
  int64_t ga = 0;
  assert_int_equal(read(res[0], &ga, sizeof(ga)), sizeof(ga));
  assert_int_equal(ga, 1);
  kill(mid.pid, SIGSTOP);
  assert_int_equal(rdzv_rendezvous_abort(r, "test: generation 1 ends", 20), 0);
  rdzv_rendezvous_destroy(r);
  assert_true(stats_reach(leaf_addr, "reattached", 1) >= 1);
  usleep(500 * 1000); /* its re-send has reached the root */
  /* Two new ranks: generation 2, the two of them. */
  int res2[2];
  assert_int_equal(pipe(res2), 0);
  pid_t c = fork();
  if (c == 0) {
    rdzv_rendezvous_t *rc = NULL;
    char e[256];
    int64_t g = -1;
    if (join_as(root_addr, "hostC", &rc, e, sizeof(e)) == 0)
      g = rdzv_rendezvous_generation(rc);
    if (write(res2[1], &g, sizeof(g)) != sizeof(g))
      _exit(2);
    sleep(1);
    rdzv_rendezvous_destroy(rc);
    _exit(0);
  }
  rdzv_rendezvous_t *d = NULL;
  int rc = join_as(root_addr, "hostD", &d, err, sizeof(err));
  if (rc != 0)
    fail_msg("hostD: %s (%s)", rdzv_strerror(rc), err);
  int64_t gc = 0;
  assert_int_equal(read(res2[0], &gc, sizeof(gc)), sizeof(gc));
  assert_int_equal(rdzv_rendezvous_generation(d), 2);
  assert_int_equal(gc, 2);
  rdzv_rendezvous_destroy(d);
  kill(mid.pid, SIGCONT);
  close(go[1]);
  int st;
  waitpid(c, &st, 0);
  kill(a, SIGKILL);
  waitpid(a, &st, 0);
  close(go[0]);
  close(res[0]);
  close(res[1]);
  close(res2[0]);
  close(res2[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_interior_node_killed, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_lost_ack_applied_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_generation_survives_interior_death,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_lost_host_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resend_of_a_gone_generation, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
