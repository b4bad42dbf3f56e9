/* Back home after repair (issue 33, rdzvd --home-after-ms): a node whose
 * parent was lost reattaches to an ancestor, and returns to its own
 * parent once that one is back and has answered its probes for
 * --home-after-ms, sending again what was in flight (mutations applied
 * once by op id), without failing a request.
 *
 * Real daemons: root R; interior nodes M0 and M1 under R on fixed ports;
 * leaves L0, L1 under M0 and L2, L3 under M1 (--home-after-ms 600). A
 * client on each leaf adds 1 to one counter in a loop, and another waits
 * through each leaf for a key written only once the round's checks
 * passed. ROUNDS
 * seeded rounds (RDZV_TEST_SEED replays the choices): a random interior
 * node is killed (-9) while the adds run; both its leaves reattach to R
 * (their link's "hops" 1 in stats); it is started again on its port; both
 * leaves return to it ("hops" 0, "returned_home" up by one each).
 * Invariants after every round: every leaf's link goes to its own parent
 * again; no add failed; the counter at the root equals the adds
 * acknowledged; the waits, pending across the kill and the move back,
 * complete; no daemon died. (A request survives 3 losses of its link,
 * upstream.c's MAX_RESENDS; a move back home costs it none.) No
 * assertion depends on wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

#define JOB "home"
#define ROUNDS 4
#define MIDS 2
#define LEAVES 4

static const char *const opts[] = {
    "--heartbeat-ms=100", "--liveness-timeout-ms=800",
    "--session-grace-ms=5000", "--home-after-ms=600", NULL};

static char dir[64];
static struct proc root, mid[MIDS], leaf[LEAVES];
static char root_tcp[64], mid_tcp[MIDS][64], leaf_tcp[LEAVES][64];
static char leaf_unix[LEAVES][160], root_unix[160];
static int mid_port[MIDS];

static int start_mid(int m) {
  char name[16], listen[64], tcp[64];
  snprintf(name, sizeof(name), "m%d", m);
  snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", mid_port[m]);
  const char *o[] = {opts[0], opts[1], opts[2], opts[3], listen, NULL};
  if (daemon_start(&mid[m], dir, name, root_tcp, o, tcp) < 0)
    return -1;
  return strcmp(tcp, mid_tcp[m]) == 0 ? 0 : -1;
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/rdzv-home-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "r", NULL, opts, root_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "r", root_unix, sizeof(root_unix));
  for (int m = 0; m < MIDS; m++) {
    if ((mid_port[m] = free_port()) < 0)
      return -1;
    snprintf(mid_tcp[m], sizeof(mid_tcp[m]), "127.0.0.1:%d", mid_port[m]);
    if (start_mid(m) < 0)
      return -1;
  }
  for (int l = 0; l < LEAVES; l++) {
    char name[16];
    snprintf(name, sizeof(name), "l%d", l);
    if (daemon_start(&leaf[l], dir, name, mid_tcp[l / 2], opts,
                     leaf_tcp[l]) < 0)
      return -1;
    daemon_unix_addr(dir, name, leaf_unix[l], sizeof(leaf_unix[l]));
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int l = 0; l < LEAVES; l++)
    bad |= proc_stop(&leaf[l]) != 0;
  for (int m = 0; m < MIDS; m++)
    bad |= proc_stop(&mid[m]) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  return bad ? -1 : 0;
}

static rdzv_client_t *client_at(const char *addr) {
  struct rdzv_client_opts co;
  rdzv_client_t *c = NULL;
  rdzv_client_opts_init(&co);
  co.addr = addr;
  co.job_id = JOB;
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  return c;
}

/* ---- the load: adds through every leaf, a wait through every leaf ---------- */

static atomic_int running;
static atomic_long acked, failed;
static char fail_text[LEAVES][600];

static void *adder(void *arg) {
  int l = (int)(intptr_t)arg;
  rdzv_client_t *c = client_at(leaf_unix[l]);
  while (atomic_load(&running)) {
    int64_t v = 0;
    int rc = rdzv_store_add(c, "counter", 1, &v, 60);
    if (rc == 0) {
      atomic_fetch_add(&acked, 1);
    } else {
      atomic_fetch_add(&failed, 1);
      snprintf(fail_text[l], sizeof(fail_text[l]), "%s: %s",
               rdzv_err_name(rc), rdzv_client_last_error(c));
    }
    usleep(2000);
  }
  rdzv_client_destroy(c);
  return NULL;
}

static int wait_rc[LEAVES];
static char release_key[32]; /* "release/<round>" */

/* Waits through leaf l for this round's key, written once the round's
 * checks passed: pending across the kill and the move back. */
static void *waiter(void *arg) {
  int l = (int)(intptr_t)arg;
  rdzv_client_t *c = client_at(leaf_unix[l]);
  const char *keys[1] = {release_key};
  wait_rc[l] = rdzv_store_wait(c, keys, 1, 600);
  rdzv_client_destroy(c);
  return NULL;
}

/* Leaf l's link for the job: its hops (0: on its parent), -1 if none. */
static int64_t hops(int l) {
  return stats_at_job(leaf_tcp[l], JOB, "links." JOB ".hops");
}

static void check_alive(void) {
  int st;
  assert_int_equal(waitpid(root.pid, &st, WNOHANG), 0);
  for (int m = 0; m < MIDS; m++)
    assert_int_equal(waitpid(mid[m].pid, &st, WNOHANG), 0);
  for (int l = 0; l < LEAVES; l++)
    assert_int_equal(waitpid(leaf[l].pid, &st, WNOHANG), 0);
}

static void test_interior_nodes_killed_and_back(void **state) {
  (void)state;
  test_seed();
  pthread_t wt[LEAVES], at[LEAVES];
  rdzv_client_t *rc = client_at(root_unix);
  for (int round = 1; round <= ROUNDS; round++) {
    int m = rand() % MIDS;
    snprintf(release_key, sizeof(release_key), "release/%d", round);
    for (int l = 0; l < LEAVES; l++)
      assert_int_equal(
          pthread_create(&wt[l], NULL, waiter, (void *)(intptr_t)l), 0);
    /* Every leaf's link is up on its own parent. */
    for (int l = 0; l < LEAVES; l++)
      while (hops(l) != 0)
        usleep(20 * 1000);
    int64_t home_before[2];
    for (int k = 0; k < 2; k++)
      home_before[k] = stats_at(leaf_tcp[2 * m + k], "returned_home");
    atomic_store(&running, 1);
    for (int l = 0; l < LEAVES; l++)
      assert_int_equal(
          pthread_create(&at[l], NULL, adder, (void *)(intptr_t)l), 0);
    while (atomic_load(&acked) < 40L * round) /* adds in flight */
      usleep(5 * 1000);
    printf("round %d: killing m%d\n", round, m);
    fflush(stdout);
    kill(mid[m].pid, SIGKILL);
    int st;
    waitpid(mid[m].pid, &st, 0);
    for (int k = 0; k < 2; k++) /* both leaves on the root now */
      while (hops(2 * m + k) != 1)
        usleep(20 * 1000);
    assert_int_equal(start_mid(m), 0);
    for (int k = 0; k < 2; k++) { /* and back on m, once each */
      while (hops(2 * m + k) != 0 ||
             stats_at(leaf_tcp[2 * m + k], "returned_home") <=
                 home_before[k])
        usleep(20 * 1000);
      assert_int_equal(stats_at(leaf_tcp[2 * m + k], "returned_home"),
                       home_before[k] + 1);
    }
    atomic_store(&running, 0);
    for (int l = 0; l < LEAVES; l++)
      assert_int_equal(pthread_join(at[l], NULL), 0);
    for (int l = 0; l < LEAVES; l++) {
      if (hops(l) != 0)
        fail_msg("leaf l%d is not on its own parent: hops %lld", l,
                 (long long)hops(l));
      if (fail_text[l][0] != '\0')
        fail_msg("an add through l%d failed: %s", l, fail_text[l]);
    }
    int64_t v = -1;
    assert_int_equal(rdzv_store_add(rc, "counter", 0, &v, 30), 0);
    printf("round %d: m%d back; %ld adds acknowledged, counter %lld, "
           "returned home: l%d %lld, l%d %lld\n",
           round, m, atomic_load(&acked), (long long)v, 2 * m,
           (long long)stats_at(leaf_tcp[2 * m], "returned_home"), 2 * m + 1,
           (long long)stats_at(leaf_tcp[2 * m + 1], "returned_home"));
    fflush(stdout);
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(v, atomic_load(&acked));
    /* The waits, pending across the kill and the move back, complete. */
    assert_int_equal(rdzv_store_set(rc, release_key, "x", 1, 0, 30), 0);
    for (int l = 0; l < LEAVES; l++) {
      assert_int_equal(pthread_join(wt[l], NULL), 0);
      if (wait_rc[l] != 0)
        fail_msg("round %d: the wait through l%d: %s", round, l,
                 rdzv_err_name(wait_rc[l]));
    }
    check_alive();
  }
  rdzv_client_destroy(rc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_interior_nodes_killed_and_back,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
