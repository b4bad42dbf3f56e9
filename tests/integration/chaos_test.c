/* A bounded chaos run with real daemons: a root, 8 interior nodes and 24
 * leaf nodes (3 under each interior one), 96 ranks (4 per leaf, clients
 * in this process). Each of ROUNDS rounds, every rank adds 1 to a shared
 * counter, writes a key of its own and enters a barrier of the round,
 * while the driver kills (-9) one interior node that still runs, or
 * stops one (SIGSTOP) for two liveness timeouts and lets it go on; at
 * most one interior node is touched at a time, and leaves are never
 * touched (a rank's membership is its connection to its leaf).
 *
 * Invariants checked after every round: every request completed
 * successfully (the leaves reattach to the root and send again what was
 * in flight); the counter equals the number of acknowledged adds, so no
 * add was applied twice or lost; every acknowledged write reads back at
 * the root; every daemon not killed still runs; the root's open files and
 * RSS after the last round are within bounds of those after the first. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

#define MIDS 8
#define LEAVES_PER_MID 3
#define LEAVES (MIDS * LEAVES_PER_MID)
#define RANKS_PER_LEAF 4
#define RANKS (LEAVES * RANKS_PER_LEAF)
#define ROUNDS 10

static const char *const beat[] = {"--heartbeat-ms=100",
                                   "--liveness-timeout-ms=600", NULL};

static char dir[64];
static struct proc root, mids[MIDS], leaves[LEAVES];
static bool mid_dead[MIDS];
static char root_tcp[64], root_addr[160];
static rdzv_client_t *ranks[RANKS];

struct reply {
  int done, status;
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/rdzv-chaos-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, beat, root_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  for (int m = 0; m < MIDS; m++) {
    char name[32], tcp[64];
    snprintf(name, sizeof(name), "mid%d", m);
    if (daemon_start(&mids[m], dir, name, root_tcp, beat, tcp) < 0)
      return -1;
    /* The launcher gives each leaf its chain: its interior node, then the
     * root (a leaf may lose its parent before it ever heard from it). */
    char chain[140];
    snprintf(chain, sizeof(chain), "%s,%s", tcp, root_tcp);
    for (int l = 0; l < LEAVES_PER_MID; l++) {
      char lname[32], ltcp[64];
      snprintf(lname, sizeof(lname), "leaf%d", m * LEAVES_PER_MID + l);
      if (daemon_start(&leaves[m * LEAVES_PER_MID + l], dir, lname, chain, beat,
                       ltcp) < 0)
        return -1;
    }
  }
  for (int i = 0; i < RANKS; i++) {
    char lname[32], addr[160];
    snprintf(lname, sizeof(lname), "leaf%d", i / RANKS_PER_LEAF);
    daemon_unix_addr(dir, lname, addr, sizeof(addr));
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = addr;
    o.job_id = "chaos";
    if (rdzv_client_create(&o, &ranks[i]) != 0 ||
        rdzv_client_connect(ranks[i], 30) != 0)
      return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < RANKS; i++)
    rdzv_client_destroy(ranks[i]);
  int bad = 0;
  for (int l = 0; l < LEAVES; l++)
    bad |= proc_stop(&leaves[l]) != 0;
  for (int m = 0; m < MIDS; m++) {
    if (mid_dead[m])
      continue;
    kill(mids[m].pid, SIGCONT);
    bad |= proc_stop(&mids[m]) != 0;
  }
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  return bad ? -1 : 0;
}

/* Drives every rank's handle until all replies of the round came (at
 * most about 60 s). */
static void drive(struct reply (*rs)[3]) {
  for (int tries = 0; tries < 60000; tries++) {
    int left = 0;
    for (int i = 0; i < RANKS; i++) {
      rdzv_client_run(ranks[i], 0);
      for (int k = 0; k < 3; k++)
        left += !rs[i][k].done;
    }
    if (left == 0)
      return;
    usleep(1000);
  }
}

static void test_chaos(void **state) {
  (void)state;
  static struct reply rs[RANKS][3];
  long rss_first = -1;
  int fds_first = -1;
  int64_t acked = 0;
  srand(12345);
  for (int round = 0; round < ROUNDS; round++) {
    memset(rs, 0, sizeof(rs));
    char bname[32];
    snprintf(bname, sizeof(bname), "b%d", round);
    for (int i = 0; i < RANKS; i++) {
      struct rdzv_bytes ck = {"ctr", 3};
      struct rdzv_request add = {
          .op = RDZV_OP_ADD, .a = 1, .nkeys = 1, .keys = &ck};
      char key[32], val[32];
      snprintf(key, sizeof(key), "r%d/%d", round, i);
      snprintf(val, sizeof(val), "v%d", i);
      struct rdzv_bytes sk = {key, strlen(key)}, sv = {val, strlen(val)};
      struct rdzv_request set = {
          .op = RDZV_OP_SET, .nkeys = 1, .keys = &sk, .nvals = 1, .vals = &sv};
      uint8_t member[8];
      for (int b = 0; b < 8; b++)
        member[b] = (uint8_t)((uint64_t)i >> (8 * b));
      struct rdzv_bytes bk = {bname, strlen(bname)}, bv = {member, 8};
      struct rdzv_request bar = {.op = RDZV_OP_BARRIER,
                                 .b = RANKS,
                                 .nkeys = 1,
                                 .keys = &bk,
                                 .nvals = 1,
                                 .vals = &bv};
      assert_int_equal(
          rdzv_client_submit(ranks[i], &add, 60, on_reply, &rs[i][0]), 0);
      assert_int_equal(
          rdzv_client_submit(ranks[i], &set, 60, on_reply, &rs[i][1]), 0);
      assert_int_equal(
          rdzv_client_submit(ranks[i], &bar, 60, on_reply, &rs[i][2]), 0);
      /* Half the ranks are in when the driver strikes. */
      if (i == RANKS / 2) {
        for (int k = 0; k < RANKS; k++)
          rdzv_client_run(ranks[k], 0);
        int m = rand() % MIDS;
        while (mid_dead[m])
          m = (m + 1) % MIDS;
        if (round % 2 == 0 && round < 2 * (MIDS - 2)) {
          kill(mids[m].pid, SIGKILL);
          waitpid(mids[m].pid, NULL, 0);
          mid_dead[m] = true;
          printf("round %d: killed mid%d\n", round, m);
        } else {
          kill(mids[m].pid, SIGSTOP);
          usleep(1200 * 1000);
          kill(mids[m].pid, SIGCONT);
          printf("round %d: stopped mid%d for 1.2 s\n", round, m);
        }
      }
    }
    drive(rs);
    for (int i = 0; i < RANKS; i++)
      for (int k = 0; k < 3; k++) {
        if (!rs[i][k].done || rs[i][k].status != 0)
          fail_msg("round %d rank %d request %d: %s (%s)", round, i, k,
                   rs[i][k].done ? rdzv_strerror(rs[i][k].status) : "no answer",
                   rdzv_client_last_error(ranks[i]));
      }
    acked += RANKS;
    /* At the root: the counter, and every write of the round. */
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = root_addr;
    o.job_id = "chaos";
    rdzv_client_t *c = NULL;
    assert_int_equal(rdzv_client_create(&o, &c), 0);
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(rdzv_store_get(c, "ctr", &v, &n, 20), 0);
    if (strtoll(v, NULL, 10) != acked)
      fail_msg("round %d: counter %s, acknowledged adds %lld", round, (char *)v,
               (long long)acked);
    rdzv_free(v);
    for (int i = 0; i < RANKS; i++) {
      char key[32], want[32];
      snprintf(key, sizeof(key), "r%d/%d", round, i);
      snprintf(want, sizeof(want), "v%d", i);
      assert_int_equal(rdzv_store_get(c, key, &v, &n, 20), 0);
      assert_int_equal(n, strlen(want));
      assert_memory_equal(v, want, n);
      rdzv_free(v);
    }
    rdzv_client_destroy(c);
    /* No daemon died that was not killed. */
    assert_int_equal(kill(root.pid, 0), 0);
    for (int m = 0; m < MIDS; m++)
      if (!mid_dead[m])
        assert_int_equal(waitpid(mids[m].pid, NULL, WNOHANG), 0);
    for (int l = 0; l < LEAVES; l++)
      assert_int_equal(waitpid(leaves[l].pid, NULL, WNOHANG), 0);
    long rss = rss_kb(root.pid);
    int fds = fds_of(root.pid);
    printf("round %d: counter %lld, root %d fds, %ld KB\n", round,
           (long long)acked, fds, rss);
    if (round == 0) {
      rss_first = rss;
      fds_first = fds;
    }
  }
  /* The leaves that lost their interior node now talk to the root: a
   * connection each, so up to LEAVES more files; memory within 2 MB. */
  int fds_last = fds_of(root.pid);
  assert_true(fds_last <= fds_first + LEAVES);
  long rss_last = rss_kb(root.pid);
  printf("root RSS %ld KB after the first round, %ld KB after the last\n",
         rss_first, rss_last);
#ifndef __SANITIZE_ADDRESS__ /* ASan keeps freed memory in quarantine */
  assert_true(rss_last - rss_first < 2048);
#endif
  int64_t re = 0;
  for (int l = 0; l < LEAVES; l++) {
    char lname[32], addr[160];
    snprintf(lname, sizeof(lname), "leaf%d", l);
    daemon_unix_addr(dir, lname, addr, sizeof(addr));
    re += stats_at(addr, "reattached");
  }
  printf("reattachments %lld, root dedup_hits %lld, resent at the root's "
         "children: see their stats\n",
         (long long)re, (long long)stats_at(root_addr, "dedup_hits"));
  /* Every leaf under a killed interior node reattached at least once. */
  int orphaned = 0;
  for (int m = 0; m < MIDS; m++)
    orphaned += mid_dead[m] ? LEAVES_PER_MID : 0;
  assert_true(re >= orphaned);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_chaos, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
