/* Liveness with real daemons and SIGSTOP (a stopped or wedged daemon
 * keeps its TCP connections open, so only silence tells): heartbeats
 * between a node and its parent and between a waiting rank and its node.
 *
 * Invariants checked:
 *  - a request through a node whose parent is stopped fails with
 *    RDZV_ESILENT, naming that parent, before the caller's own deadline
 *    (60 s); the node serves again once the parent runs;
 *  - a stopped host (its leaf node and its rank) is declared lost by the
 *    leaf's parent, which withdraws its pending join after
 *    --session-grace-ms (generation 1 aborts), so ranks launched
 *    elsewhere complete generation 2; when the host runs again its stale
 *    join completes neither generation 1 nor 2;
 *  - a rank waiting on a stopped node fails with RDZV_ESILENT naming the
 *    node's address;
 *  - a daemon that was itself stopped does not blame its healthy peers on
 *    waking (their heartbeats wait unread in its socket). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

/* Short enough for a quick test, long enough for a loaded machine. */
static const char *const beat[] = {"--heartbeat-ms=100",
                                   "--liveness-timeout-ms=800",
                                   "--upstream-timeout-ms=2000", NULL};

static char dir[64];
static struct proc root, mid, leaf;
static char root_tcp[64], mid_tcp[64], leaf_tcp[64];
static char mid_addr[160], leaf_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-live-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, beat, root_tcp) < 0 ||
      daemon_start(&mid, dir, "mid", root_tcp, beat, mid_tcp) < 0 ||
      daemon_start(&leaf, dir, "leaf", mid_tcp, beat, leaf_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "mid", mid_addr, sizeof(mid_addr));
  daemon_unix_addr(dir, "leaf", leaf_addr, sizeof(leaf_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  /* Whatever a failed test left stopped runs again to be stopped. */
  kill(root.pid, SIGCONT);
  kill(mid.pid, SIGCONT);
  kill(leaf.pid, SIGCONT);
  int bad = proc_stop(&leaf) != 0;
  bad |= proc_stop(&mid) != 0;
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

/* A set through addr, retried while the tree reconnects (at most about
 * 30 s). Returns the last status. */
static int set_eventually(rdzv_client_t *c, const char *key) {
  int rc = -1;
  for (int tries = 0; tries < 300 && rc != 0; tries++) {
    rc = rdzv_store_set(c, key, "1", 1, 0, 5);
    if (rc != 0)
      usleep(100 * 1000);
  }
  return rc;
}

static void test_stopped_parent_named(void **state) {
  (void)state;
  rdzv_client_t *c = client_of(mid_addr, "live");
  assert_int_equal(set_eventually(c, "warm"), 0);
  kill(root.pid, SIGSTOP);
  char want[100];
  snprintf(want, sizeof(want), "parent %s", root_tcp);
  /* Sent to the stopped parent before mid noticed: mid declares the
   * parent lost and keeps it to send again; no ancestor is left to try,
   * so it fails at --upstream-timeout-ms, saying its outcome is unknown. */
  int64_t out = 0;
  assert_int_equal(rdzv_store_add(c, "n", 1, &out, 60), RDZV_ESILENT);
  const char *e = rdzv_client_last_error(c);
  if (strstr(e, want) == NULL || strstr(e, "nothing heard for") == NULL ||
      strstr(e, "outcome is unknown") == NULL)
    fail_msg("add: the error does not name the silent parent %s: %s", root_tcp,
             e);
  assert_true(stats_at(mid_addr, "parent_silent") >= 1);
  /* Asked while mid tries again (the stopped parent's kernel still
   * accepts, its hello is never answered): named too. */
  const char *keys[] = {"never-set"};
  int rc = rdzv_store_wait(c, keys, 1, 60);
  e = rdzv_client_last_error(c);
  if ((rc != RDZV_ESILENT && rc != RDZV_EUNREACHABLE) ||
      strstr(e, want) == NULL || strstr(e, "nothing heard for") == NULL)
    fail_msg("wait: %s: the error does not name the silent parent %s: %s",
             rdzv_strerror(rc), root_tcp, e);
  kill(root.pid, SIGCONT);
  assert_int_equal(set_eventually(c, "after"), 0);
  rdzv_client_destroy(c);
}

/* A forked rank of job "fence" (host, world 2) joining through addr:
 * writes its generation, or -1 when the join failed, to fd. */
static pid_t rank_child(const char *addr, const char *host, int fd) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "fence";
  o.round = "world";
  o.host = host;
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 2;
  o.timeout_s = 30;
  o.topology = "gpu=test\n";
  rdzv_rendezvous_t *r = NULL;
  char err[256];
  int64_t gen = -1;
  if (rdzv_rendezvous_join(&o, &r, err, sizeof(err)) == 0)
    gen = rdzv_rendezvous_generation(r);
  if (write(fd, &gen, sizeof(gen)) != sizeof(gen))
    _exit(2);
  /* The peer of a completed round must see this rank's join too. */
  sleep(1);
  rdzv_rendezvous_destroy(r);
  _exit(0);
}

static void test_stopped_leaf_fenced(void **state) {
  (void)state;
  int stale[2], res[2];
  assert_int_equal(pipe(stale), 0);
  assert_int_equal(pipe(res), 0);
  /* Rank on hostB through the leaf: its join reaches the root and waits
   * for a second rank. */
  pid_t r1 = rank_child(leaf_addr, "hostB", stale[1]);
  assert_true(stats_reach(root_tcp, "ops.join.received", 1) >= 1);
  /* The whole host stops (a rank alone would go on through its node's
   * parent: sessions, see session_test). */
  kill(r1, SIGSTOP);
  kill(leaf.pid, SIGSTOP);
  /* mid hears nothing from the leaf and drops it: after
   * --session-grace-ms its join is withdrawn and generation 1 aborts at
   * the root. */
  assert_true(stats_reach(mid_addr, "children_silent", 1) >= 1);
  assert_true(stats_reach(root_tcp, "ops.abort.received", 1) >= 1);
  /* Two ranks launched through mid complete generation 2 together. */
  pid_t a = rank_child(mid_addr, "hostA", res[1]);
  pid_t b = rank_child(mid_addr, "hostC", res[1]);
  int64_t ga = 0, gb = 0;
  assert_int_equal(read(res[0], &ga, sizeof(ga)), sizeof(ga));
  assert_int_equal(read(res[0], &gb, sizeof(gb)), sizeof(gb));
  assert_int_equal(ga, 2);
  assert_int_equal(gb, 2);
  /* The host runs again: its join went with generation 1; sent again, it
   * can only open a later one (alone, it fails at its deadline). */
  kill(leaf.pid, SIGCONT);
  kill(r1, SIGCONT);
  int64_t g1 = 0;
  assert_int_equal(read(stale[0], &g1, sizeof(g1)), sizeof(g1));
  if (g1 == 1 || g1 == 2)
    fail_msg("the stopped host's rank completed generation %lld",
             (long long)g1);
  int st;
  waitpid(r1, &st, 0);
  waitpid(a, &st, 0);
  waitpid(b, &st, 0);
  close(stale[0]);
  close(stale[1]);
  close(res[0]);
  close(res[1]);
  /* And the leaf serves again. */
  rdzv_client_t *c = client_of(leaf_addr, "after-fence");
  assert_int_equal(set_eventually(c, "k"), 0);
  rdzv_client_destroy(c);
}

static void test_rank_detects_stopped_node(void **state) {
  (void)state;
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = leaf_addr;
  o.job_id = "rank-live";
  o.heartbeat_s = 0.1;
  o.liveness_timeout_s = 0.8;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(set_eventually(c, "warm"), 0);
  kill(leaf.pid, SIGSTOP);
  const char *keys[] = {"never-set"};
  assert_int_equal(rdzv_store_wait(c, keys, 1, 60), RDZV_ESILENT);
  const char *e = rdzv_client_last_error(c);
  if (strstr(e, leaf_addr) == NULL || strstr(e, "sent nothing for") == NULL)
    fail_msg("the error does not name the silent node %s: %s", leaf_addr, e);
  kill(leaf.pid, SIGCONT);
  assert_int_equal(set_eventually(c, "after"), 0);
  rdzv_client_destroy(c);

  /* Bad liveness options are refused. */
  rdzv_client_opts_init(&o);
  o.addr = leaf_addr;
  o.job_id = "x";
  o.heartbeat_s = 2;
  o.liveness_timeout_s = 1;
  assert_int_equal(rdzv_client_create(&o, &c), -EINVAL);
}

/* A daemon stopped for several liveness timeouts, then resumed: it does
 * not declare its running peers lost on waking (their frames are unread in
 * its sockets); they, having heard nothing, did declare it lost. */
static void test_own_stall_blames_nobody(void **state) {
  (void)state;
  rdzv_client_t *c = client_of(leaf_addr, "stall");
  assert_int_equal(set_eventually(c, "warm"), 0);
  /* mid stops: the leaf (its child) loses it; the root (its parent)
   * drops it. Neither is mid's fault to report. */
  kill(mid.pid, SIGSTOP);
  assert_true(stats_reach(leaf_addr, "parent_silent", 1) >= 1);
  assert_true(stats_reach(root_tcp, "children_silent", 1) >= 1);
  kill(mid.pid, SIGCONT);
  assert_int_equal(set_eventually(c, "after"), 0);
  assert_int_equal(stats_at(mid_addr, "parent_silent"), 0);
  assert_int_equal(stats_at(mid_addr, "children_silent"), 0);
  rdzv_client_destroy(c);
}

/* A parent with a shorter liveness timeout than its child's heartbeat
 * (0.5 s against the default 1 s): the child learns it in the hello reply
 * and pings often enough, so the parent never drops it. */
static void test_parent_liveness_adopted(void **state) {
  (void)state;
  struct proc r2, n2;
  char r2tcp[64], n2tcp[64], n2addr[160];
  const char *fast[] = {"--heartbeat-ms=100", "--liveness-timeout-ms=500",
                        NULL};
  assert_int_equal(daemon_start(&r2, dir, "r2", NULL, fast, r2tcp), 0);
  assert_int_equal(daemon_start(&n2, dir, "n2", r2tcp, NULL, n2tcp), 0);
  daemon_unix_addr(dir, "n2", n2addr, sizeof(n2addr));
  rdzv_client_t *c = client_of(n2addr, "mismatch");
  const char *keys[] = {"never"};
  assert_int_equal(rdzv_store_wait(c, keys, 1, 3), RDZV_EDEADLINE);
  assert_int_equal(stats_at(r2tcp, "children_silent"), 0);
  assert_int_equal(stats_at(n2addr, "parent_silent"), 0);
  rdzv_client_destroy(c);
  assert_int_equal(proc_stop(&n2), 0);
  assert_int_equal(proc_stop(&r2), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_stopped_parent_named, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stopped_leaf_fenced, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rank_detects_stopped_node, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_own_stall_blames_nobody, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_parent_liveness_adopted, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
