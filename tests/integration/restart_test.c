/* A root that restarts (kill -9, started again on its port) has lost
 * every job's state; the nodes below notice (the root's hello carries a
 * new incarnation), two levels down too: they drop write-once values
 * cached from the old root, so a value written to the new root is what
 * every node answers (not the old one from a cache), and a rank's request
 * for a generation of the old root fails at once with RDZV_EABORTED
 * saying the root restarted. Real daemons (root <- mid <- leaf). */
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

static char dir[64];
static struct proc root, mid, leaf;
static int root_port;
static char root_arg[64], mid_tcp[64], leaf_tcp[64];
static char leaf_addr[160], mid_addr[160];
static int fds_before;

static int start_root(void) {
  char tcp[64];
  const char *extra[] = {root_arg, NULL};
  return daemon_start(&root, dir, "root", NULL, extra, tcp);
}

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-restart-XXXXXX");
  if (mkdtemp(dir) == NULL || (root_port = free_port()) < 0)
    return -1;
  snprintf(root_arg, sizeof(root_arg), "--listen=127.0.0.1:%d", root_port);
  char root_tcp[64];
  snprintf(root_tcp, sizeof(root_tcp), "127.0.0.1:%d", root_port);
  if (start_root() < 0 ||
      daemon_start(&mid, dir, "mid", root_tcp, NULL, mid_tcp) < 0 ||
      daemon_start(&leaf, dir, "leaf", mid_tcp, NULL, leaf_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "leaf", leaf_addr, sizeof(leaf_addr));
  daemon_unix_addr(dir, "mid", mid_addr, sizeof(mid_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
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

static rdzv_client_t *client(const char *addr) {
  return client_of(addr, "restart-job");
}

static void assert_get(rdzv_client_t *c, const char *key, const char *want) {
  void *v = NULL;
  size_t n = 0;
  int rc = rdzv_store_get(c, key, &v, &n, 20);
  if (rc != 0)
    fail_msg("get %s: %s (%s)", key, rdzv_strerror(rc),
             rdzv_client_last_error(c));
  if (n != strlen(want) || memcmp(v, want, n) != 0)
    fail_msg("get %s: '%.*s', want '%s'", key, (int)n, (char *)v, want);
  rdzv_free(v);
}

/* Writes a probe key through c (a write makes a link that has not met
 * the restarted root yet come back to it) until both nodes have counted
 * the root's restart. */
static void restart_seen(rdzv_client_t *c) {
  int64_t m = 0, l = 0;
  for (int tries = 0; tries < 300 && (m < 1 || l < 1); tries++) {
    rdzv_store_set(c, "probe", "1", 1, 0, 5);
    m = stats_at(mid_tcp, "parent_restarts");
    l = stats_at(leaf_tcp, "parent_restarts");
    if (m < 1 || l < 1)
      usleep(100 * 1000);
  }
  assert_true(m >= 1 && l >= 1);
}

static void test_root_restart(void **state) {
  (void)state;
  /* A rank of a world of 1 through leaf: generation 1 of the old root. */
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = leaf_addr;
  o.job_id = "restart-job";
  o.host = "hostR";
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 1;
  o.timeout_s = 20;
  o.topology = "gpu=test\n";
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  assert_int_equal(rdzv_rendezvous_join(&o, &r, err, sizeof(err)), 0);
  assert_int_equal(rdzv_rendezvous_generation(r), 1);

  /* A write-once value, read back through both nodes (cached there). */
  rdzv_client_t *cl = client(leaf_addr), *cm = client(mid_addr);
  assert_int_equal(
      rdzv_store_set(cl, "id", "old", 3, RDZV_STORE_WRITE_ONCE, 20), 0);
  assert_get(cl, "id", "old");
  assert_get(cm, "id", "old");

  /* The root dies and comes back on its port, empty. */
  kill(root.pid, SIGKILL);
  int st;
  waitpid(root.pid, &st, 0);
  assert_int_equal(start_root(), 0);
  /* Until the restart reached leaf (mid sees the new incarnation and
   * disconnects leaf, which meets a new one of mid's). */
  restart_seen(cm);
  assert_int_equal(stats_at(mid_tcp, "parent_restarts"), 1);

  /* The new root holds no "id": a new write-once value is accepted, and
   * every node answers it, none the old one. */
  assert_int_equal(
      rdzv_store_set(cl, "id", "new", 3, RDZV_STORE_WRITE_ONCE, 20), 0);
  assert_get(cl, "id", "new");
  assert_get(cm, "id", "new");

  /* The rank's generation died with the old root: said at once. */
  int rc = rdzv_rendezvous_barrier(r, "after", 20);
  assert_int_equal(rc, RDZV_EABORTED);
  if (strstr(rdzv_rendezvous_last_error(r), "root restarted") == NULL)
    fail_msg("the error does not say why: %s", rdzv_rendezvous_last_error(r));
  rdzv_rendezvous_destroy(r);

  /* Rejoining works, in a generation numbered above the one the nodes
   * knew (leaf said 1 in its join): generation 1's keys name one world. */
  assert_int_equal(rdzv_rendezvous_join(&o, &r, err, sizeof(err)), 0);
  assert_int_equal(rdzv_rendezvous_generation(r), 2);
  assert_int_equal(rdzv_rendezvous_barrier(r, "again", 20), 0);
  rdzv_rendezvous_destroy(r);
  rdzv_client_destroy(cl);
  rdzv_client_destroy(cm);
}

/* One launch of job "relaunch" (example_launch): must succeed. */
static int64_t launch(int which) {
  char err[1024] = "";
  const char *addrs[2] = {mid_addr, leaf_addr};
  int64_t gen = example_launch(addrs, "relaunch", err, sizeof(err));
  if (gen < 0)
    fail_msg("launch %d: %s", which, err);
  return gen;
}

/* The first launch of a job after its root restarted without its state
 * (kill -9, started again on its port, the nodes told by its hello): the
 * nodes still know generation 1 of the round, and the new root would
 * have numbered its first generation 1 too, so that the old generation's
 * gathered digests, cached at a node, answered the new one and the ids
 * never reached the others (3 of 4 ranks waited out their deadline). */
static void test_first_launch_after_restart(void **state) {
  (void)state;
  int64_t g1 = launch(1);
  assert_int_equal(g1, 1);
  kill(root.pid, SIGKILL);
  int st;
  waitpid(root.pid, &st, 0);
  assert_int_equal(start_root(), 0);
  /* Until both nodes have seen the new root's incarnation. */
  rdzv_client_t *probe = client_of(leaf_addr, "relaunch");
  restart_seen(probe);
  rdzv_client_destroy(probe);
  int64_t g2 = launch(2);
  assert_true(g2 > g1);
  assert_true(launch(3) > g2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_root_restart, setup, teardown),
      cmocka_unit_test_setup_teardown(test_first_launch_after_restart, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
