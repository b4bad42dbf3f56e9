/* No waiting on the critical path, with real processes.
 *
 * 1. The join and the collectives. A root, two nodes under it and two leaf
 *    nodes under each (fan-out 2, each node told its --children; the
 *    middle ones, which only relay, --local-ranks 0), two ranks per leaf
 *    (8 forked ranks, rdzv/rendezvous.h). The nodes' quiet interval is
 *    5 ms and their guard (--flush-max-ms) 10 minutes. On each
 *    host one rank comes 300 ms after the other to the join and to every
 *    collective: a world barrier, the world's unique ids (one per rank: an
 *    8-member gather), a barrier of the group {7,6,...,0} (named member by
 *    member) and a group's unique ids with its check-in. Each node must
 *    forward the join and every collective exactly once
 *    (ops.<op>.forwarded): it goes up when its subtree is complete (the
 *    join: its host's local size and each child's RDZV_F_COMPLETE; a
 *    collective: the ranks below it, known from the join). A node that
 *    waited for quiet instead would forward the early rank's part, then
 *    the late one's (twice); one that waited for its guard would not
 *    finish within the ranks' 60 s deadlines. Every rank must get the same
 *    ids, the makers' own.
 * 2. A lone add. A root, a node and a leaf node with a quiet interval and
 *    guard of 10 minutes: 20 sequential adds through both nodes each come
 *    back (1..20) within the client's 60 s deadline, so no add waited for
 *    an interval at either node. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/topo.h"

#define NMID 2
#define NLEAF 4
#define PER_HOST 2
#define WORLD (NLEAF * PER_HOST)
#define LATE_US (300 * 1000)

static char dir[64];
static struct proc root, mid[NMID], leaf[NLEAF];
static char root_tcp[64], mid_tcp[NMID][64], leaf_tcp[NLEAF][64];
static int fds_before;

static const char *const mid_opts[] = {"--flush-ms=5", "--flush-max-ms=600000",
                                       "--children=2", "--local-ranks=0", NULL};
static const char *const leaf_opts[] = {"--flush-ms=5", "--flush-max-ms=600000",
                                        "--children=0", NULL};

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-nowait-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0)
    return -1;
  for (int i = 0; i < NMID; i++) {
    char name[16];
    snprintf(name, sizeof(name), "mid%d", i);
    if (daemon_start(&mid[i], dir, name, root_tcp, mid_opts, mid_tcp[i]) < 0)
      return -1;
  }
  for (int i = 0; i < NLEAF; i++) {
    char name[16];
    snprintf(name, sizeof(name), "leaf%d", i);
    if (daemon_start(&leaf[i], dir, name, mid_tcp[i / 2], leaf_opts,
                     leaf_tcp[i]) < 0)
      return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int i = NLEAF - 1; i >= 0; i--)
    bad |= proc_stop(&leaf[i]) != 0;
  for (int i = NMID - 1; i >= 0; i--)
    bad |= proc_stop(&mid[i]) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* A test id: every byte is the maker's rank. */
static int make_id(void *arg, uint8_t *id) {
  memset(id, rdzv_rendezvous_rank(arg), RDZV_UNIQUE_ID_BYTES);
  return 0;
}

/* ids[b] must be the id of rank members[first member index of block b]. */
static int ids_ok(const uint8_t *ids, int64_t nids, const int32_t *members,
                  int64_t n) {
  for (int64_t b = 0; b < nids; b++) {
    int64_t first = rdzv_nccl_block_first(b, n, nids);
    int32_t maker = members ? members[first] : (int32_t)first;
    for (int k = 0; k < RDZV_UNIQUE_ID_BYTES; k++)
      if (ids[b * RDZV_UNIQUE_ID_BYTES + k] != (uint8_t)maker)
        return 0;
  }
  return 1;
}

/* One rank: every collective, the host's second rank late to each.
 * Exit status 0 when all succeeded. */
static int rank_main(int host, int local_rank) {
  char addr[128], hname[16], err[1024] = "";
  snprintf(hname, sizeof(hname), "leaf%d", host);
  daemon_unix_addr(dir, hname, addr, sizeof(addr));
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "nowait";
  o.host = hname;
  o.local_rank = local_rank;
  o.local_size = PER_HOST;
  o.world_size = WORLD;
  o.timeout_s = 60;
  o.topology = "gpu_pci=none\n";
  rdzv_rendezvous_t *r = NULL;
  int late = local_rank == 1, rc;
  if (late)
    usleep(LATE_US);
  if (rdzv_rendezvous_join(&o, &r, err, sizeof(err)) < 0) {
    fprintf(stderr, "join: %s\n", err);
    return 1;
  }
  uint8_t *ids = NULL;
  int64_t nids = 0;
  int32_t rev[WORLD], odd[WORLD / 2];
  for (int i = 0; i < WORLD; i++)
    rev[i] = WORLD - 1 - i;
  for (int i = 0; i < WORLD / 2; i++)
    odd[i] = 2 * i + 1;
  int32_t me = rdzv_rendezvous_rank(r);
  if (late)
    usleep(LATE_US);
  rc = rdzv_rendezvous_barrier(r, "b", 60);
  if (rc == 0 && late)
    usleep(LATE_US);
  if (rc == 0) {
    rc = rdzv_rendezvous_unique_ids(r, "world", 1, make_id, r, &ids, &nids, 60);
    if (rc == 0 && (nids != WORLD || !ids_ok(ids, nids, NULL, WORLD)))
      rc = -1;
    rdzv_free(ids);
    ids = NULL;
  }
  if (rc == 0 && late)
    usleep(LATE_US);
  if (rc == 0)
    rc = rdzv_rendezvous_group_barrier(r, "rev", rev, WORLD, 60);
  if (rc == 0 && late)
    usleep(LATE_US);
  if (rc == 0 && me % 2 == 1) {
    rc = rdzv_rendezvous_group_unique_ids(r, "odd", odd, WORLD / 2, 2, make_id,
                                          r, &ids, &nids, 60);
    if (rc == 0 && (nids != 2 || !ids_ok(ids, nids, odd, WORLD / 2)))
      rc = -1;
    rdzv_free(ids);
  }
  if (rc != 0)
    fprintf(stderr, "rank %d: %d %s\n", me, rc, rdzv_rendezvous_last_error(r));
  rdzv_rendezvous_destroy(r);
  return rc == 0 ? 0 : 1;
}

static int64_t at(const char *tcp, const char *path) {
  return stats_at(tcp, path);
}

static void test_collectives_at_last_contribution(void **state) {
  (void)state;
  pid_t pids[WORLD];
  for (int i = 0; i < WORLD; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0)
      _exit(rank_main(i / PER_HOST, i % PER_HOST));
  }
  for (int i = 0; i < WORLD; i++) {
    int st = 0;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
  /* Ranks are assigned in host order: leaf h holds ranks 2h and 2h+1,
   * mid m the ranks of leaves 2m and 2m+1. The odd group {1,3,5,7} has
   * one member per leaf; its ids (2 blocks) come from ranks 1 and 5
   * (leaves 0 and 2). */
  for (int i = 0; i < NLEAF; i++) {
    assert_int_equal(at(leaf_tcp[i], "ops.join.forwarded"), 1);
    assert_int_equal(at(leaf_tcp[i], "join_subtree_flushes"), 1);
    int64_t bar = at(leaf_tcp[i], "ops.barrier.forwarded");
    int64_t gat = at(leaf_tcp[i], "ops.gather.forwarded");
    int64_t sub = at(leaf_tcp[i], "coll_subtree_flushes");
    printf("leaf%d: %" PRId64 " barriers, %" PRId64 " gathers forwarded, "
           "%" PRId64 " at the subtree's last contribution\n",
           i, bar, gat, sub);
    assert_int_equal(bar, 3); /* b, rev, odd's check-in */
    assert_int_equal(gat, i % 2 == 0 ? 2 : 1);
    assert_true(sub >= 3);
  }
  for (int i = 0; i < NMID; i++) {
    assert_int_equal(at(mid_tcp[i], "ops.join.forwarded"), 1);
    assert_int_equal(at(mid_tcp[i], "join_subtree_flushes"), 1);
    int64_t bar = at(mid_tcp[i], "ops.barrier.forwarded");
    int64_t gat = at(mid_tcp[i], "ops.gather.forwarded");
    int64_t sub = at(mid_tcp[i], "coll_subtree_flushes");
    printf("mid%d: %" PRId64 " barriers, %" PRId64 " gathers forwarded, "
           "%" PRId64 " at the subtree's last contribution\n",
           i, bar, gat, sub);
    assert_int_equal(bar, 3);
    assert_int_equal(gat, 2);
    assert_true(sub >= 4);
  }
  /* The root: one message per mid node and collective. */
  assert_int_equal(at(root_tcp, "ops.join.received"), NMID);
  assert_int_equal(at(root_tcp, "ops.barrier.received"), 3 * NMID);
  assert_int_equal(at(root_tcp, "ops.gather.received"), 2 * NMID);
}

static void test_lone_add_waits_for_nothing(void **state) {
  (void)state;
  static const char *const never[] = {"--flush-ms=600000",
                                      "--flush-max-ms=600000", NULL};
  struct proc r2, n2, l2;
  char r2_tcp[64], n2_tcp[64], l2_tcp[64], addr[128];
  assert_int_equal(daemon_start(&r2, dir, "r2", NULL, NULL, r2_tcp), 0);
  assert_int_equal(daemon_start(&n2, dir, "n2", r2_tcp, never, n2_tcp), 0);
  assert_int_equal(daemon_start(&l2, dir, "l2", n2_tcp, never, l2_tcp), 0);
  daemon_unix_addr(dir, "l2", addr, sizeof(addr));
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "lone";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  for (int i = 1; i <= 20; i++) {
    int64_t v = 0;
    int rc = rdzv_store_add(c, "ctr", 1, &v, 60);
    if (rc != 0)
      fail_msg("add %d: %s (%s)", i, rdzv_strerror(rc),
               rdzv_client_last_error(c));
    assert_int_equal(v, i);
  }
  rdzv_client_destroy(c);
  /* Each went up alone: the root applied 20 adds. */
  assert_int_equal(at(r2_tcp, "ops.add.received"), 20);
  assert_int_equal(proc_stop(&l2), 0);
  assert_int_equal(proc_stop(&n2), 0);
  assert_int_equal(proc_stop(&r2), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_at_last_contribution),
      cmocka_unit_test(test_lone_add_waits_for_nothing),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
