/* The world kept across a root restart: an etcd-backed root (a real etcd,
 * the harness's throwaway member) killed (-9) and started again on its
 * port places the next generation with the last complete world's node
 * ranks, as the root that made it would have.
 *   1. hosts h0..h3 (1 rank each, threads of this process, real librdzv
 *      clients straight to the root) make generation 1 in natural order;
 *   2. h1 leaves and spare s0 (domain d1, like h1) takes its place: node
 *      rank 1, rank 1 (natural order would put it last);
 *   3. kill -9 of the root, started again on its port;
 *   4. h0, h2, h3 and s0 join again: s0 keeps node rank 1 and every other
 *      host its node rank, and the generation counts on (3), and its
 *      domains are those of the world it kept.
 * And the first launch of 4 rdzv-example ranks through two nodes after
 * such a restart completes (test_first_launch_after_restart).
 * No assertion depends on wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "tests/etcd/etcd_harness.h"

static struct etcdh eh;
static char dir[64], root_tcp[64], addr[80];
static struct proc root, nodes[2]; /* nodes: test_first_launch_after_restart */
static int root_port;

static int start_root(void) {
  char listen[64], etcd[600], tcp[64];
  snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", root_port);
  snprintf(etcd, sizeof(etcd), "--etcd=%s", etcdh_endpoints(&eh));
  const char *extra[] = {listen, etcd, "--etcd-lease-ttl-s=2",
                         "--spare-wait-ms=300", NULL};
  return daemon_start(&root, dir, "root", NULL, extra, tcp);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/rdzv-dworld-XXXXXX");
  if (mkdtemp(dir) == NULL || etcdh_start(&eh, NULL, NULL) < 0 ||
      (root_port = free_port()) < 0)
    return -1;
  snprintf(root_tcp, sizeof(root_tcp), "127.0.0.1:%d", root_port);
  snprintf(addr, sizeof(addr), "%s", root_tcp);
  return start_root();
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int i = 0; i < 2; i++)
    if (nodes[i].pid != 0) {
      bad |= proc_stop(&nodes[i]) != 0;
      nodes[i].pid = 0;
    }
  bad |= root.pid != 0 && proc_stop(&root) != 0;
  etcdh_stop_all(&eh);
  bad |= rm_rf(dir) != 0;
  return bad ? -1 : 0;
}

struct joiner {
  const char *host;
  bool spare;
  int status;
  int32_t rank, node_rank;
  int64_t gen;
  rdzv_rendezvous_t *r; /* kept until the test lets it go */
  char text[600];
  pthread_t t;
};

static void *join_main(void *arg) {
  struct joiner *j = arg;
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "dworld";
  o.host = j->host;
  o.domain = j->host[0] == 's' ? "d1" : j->host[1] == '1' ? "d1" : "d0";
  o.role = j->spare ? RDZV_MEMBER_SPARE : RDZV_MEMBER_ACTIVE;
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 4;
  o.timeout_s = 60;
  j->status = rdzv_rendezvous_join(&o, &j->r, j->text, sizeof(j->text));
  if (j->status == 0) {
    j->rank = rdzv_rendezvous_rank(j->r);
    j->node_rank = rdzv_rendezvous_node_rank(j->r);
    j->gen = rdzv_rendezvous_generation(j->r);
  }
  return NULL;
}

/* Joins hosts (n) at once; each must be placed. */
static void join_all(struct joiner *js, int n) {
  for (int i = 0; i < n; i++)
    assert_int_equal(pthread_create(&js[i].t, NULL, join_main, &js[i]), 0);
  for (int i = 0; i < n; i++) {
    pthread_join(js[i].t, NULL);
    printf("%s: %s, rank %d node rank %d generation %lld %s\n", js[i].host,
           rdzv_err_name(js[i].status), js[i].rank, js[i].node_rank,
           (long long)js[i].gen, js[i].text);
    assert_int_equal(js[i].status, 0);
  }
}

static void leave_all(struct joiner *js, int n) {
  for (int i = 0; i < n; i++) {
    rdzv_rendezvous_destroy(js[i].r);
    js[i].r = NULL;
  }
}

static char *get(rdzv_rendezvous_t *r, const char *key) {
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(rdzv_rendezvous_client(r), key, &v, &n, 30),
                   0);
  return v;
}

static void test_world_kept_across_restart(void **state) {
  (void)state;
  struct joiner g1[4] = {
      {.host = "h0"}, {.host = "h1"}, {.host = "h2"}, {.host = "h3"}};
  join_all(g1, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(g1[i].node_rank, i);
  /* h1 leaves; the spare of its domain takes its place. */
  rdzv_rendezvous_destroy(g1[1].r);
  g1[1].r = NULL;
  struct joiner g2[4] = {{.host = "h0"},
                         {.host = "s0", .spare = true},
                         {.host = "h2"},
                         {.host = "h3"}};
  leave_all(g1, 4);
  join_all(g2, 4);
  int64_t gen2 = g2[0].gen;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(g2[i].node_rank, i);
    assert_int_equal(g2[i].gen, gen2);
  }
  /* The root dies with the generation standing; its state is etcd's. */
  kill(root.pid, SIGKILL);
  proc_wait(&root);
  root.pid = 0;
  assert_int_equal(start_root(), 0);
  leave_all(g2, 4);
  struct joiner g3[4] = {
      {.host = "s0"}, {.host = "h3"}, {.host = "h0"}, {.host = "h2"}};
  join_all(g3, 4);
  const int want_node[4] = {1, 3, 0, 2}; /* s0 kept h1's place */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(g3[i].node_rank, want_node[i]);
    assert_int_equal(g3[i].rank, want_node[i]);
    assert_true(g3[i].gen > gen2);
  }
  char key[64];
  snprintf(key, sizeof(key), "rdzv/world/g%lld/domains", (long long)g3[0].gen);
  char *doms = get(g3[0].r, key);
  printf("domains of generation %lld: %s", (long long)g3[0].gen, doms);
  assert_string_equal(doms, "0 1 0 1 d0\n1 1 1 1 d1\n2 2 2 2 d0\n");
  rdzv_free(doms);
  leave_all(g3, 4);
}

/* The first launch of a job through two nodes after its etcd-backed root
 * was killed (-9) and started again on its port: every rank of it
 * completes, in a generation after the one before the restart (as for
 * an in-memory root: restart_test). */
static void test_first_launch_after_restart(void **state) {
  (void)state;
  char tcp[2][64], ua[2][160];
  const char *addrs[2] = {ua[0], ua[1]};
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof(name), "n%d", i);
    assert_int_equal(daemon_start(&nodes[i], dir, name, root_tcp, NULL, tcp[i]),
                     0);
    daemon_unix_addr(dir, name, ua[i], sizeof(ua[i]));
  }
  char err[1024] = "";
  int64_t g1 = example_launch(addrs, "relaunch", err, sizeof(err));
  if (g1 < 0)
    fail_msg("launch 1: %s", err);
  kill(root.pid, SIGKILL);
  proc_wait(&root);
  root.pid = 0;
  assert_int_equal(start_root(), 0);
  int64_t g2 = example_launch(addrs, "relaunch", err, sizeof(err));
  if (g2 < 0)
    fail_msg("launch 2, the first after the restart: %s", err);
  assert_true(g2 > g1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_world_kept_across_restart, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_first_launch_after_restart, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
