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
 * complete; no daemon died. (A mutation survives 3 losses of its link,
 * upstream_int.h's MAX_RESENDS; a move back home happens only while
 * nothing but reads and waits is in flight.)
 *
 * Then a chain R - A - M - L (test_parent_not_ready, test_parent_refuses):
 * a parent back but unable to reach the root is not returned to; a
 * barrier in flight puts the return off; a parent that refuses the job's
 * hello (another secret) makes each failed return back off; a wait
 * survives more than 3 losses and moves. No assertion depends on
 * wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    if (daemon_start(&leaf[l], dir, name, mid_tcp[l / 2], opts, leaf_tcp[l]) <
        0)
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
      snprintf(fail_text[l], sizeof(fail_text[l]), "%s: %s", rdzv_err_name(rc),
               rdzv_client_last_error(c));
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
      assert_int_equal(pthread_create(&at[l], NULL, adder, (void *)(intptr_t)l),
                       0);
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
             stats_at(leaf_tcp[2 * m + k], "returned_home") <= home_before[k])
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

/* ---- a chain R - A - M - L: a parent that is not ready, one that refuses -- */

static struct proc ca, cm, cl;
static char a_tcp[64], m_tcp[64], l_tcp[64], l_unix[160], l_log[160];
static char good_file[160], bad_file[160];
static int a_port, m_port;
static bool chain_secret;

/* Starts daemon name (A or M) of the chain on its fixed port under
 * parent, with the job secret in file (none when the chain has none). */
static int start_fixed(struct proc *p, const char *name, int port,
                       const char *parent, const char *file, char *tcp) {
  char listen[64], sec[200], got[64];
  snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
  snprintf(sec, sizeof(sec), "--secret-file=%s", file);
  const char *o[] = {opts[0], opts[1], opts[2],
                     opts[3], listen,  chain_secret ? sec : NULL,
                     NULL};
  if (daemon_start(p, dir, name, parent, o, got) < 0)
    return -1;
  snprintf(tcp, 64, "127.0.0.1:%d", port);
  return strcmp(got, tcp) == 0 ? 0 : -1;
}

static void write_secret(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  chmod(path, 0600);
}

/* R, then A under R and M under A on fixed ports, then L under M, its
 * log (level 1) in l_log; with secret, every daemon (and this process's
 * clients, through RDZV_SECRET_FILE) holds the job's secret. */
static int chain_setup(bool secret) {
  chain_secret = secret;
  snprintf(dir, sizeof(dir), "/tmp/rdzv-home-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  snprintf(good_file, sizeof(good_file), "%s/good", dir);
  snprintf(bad_file, sizeof(bad_file), "%s/bad", dir);
  write_secret(good_file, "home-job-secret-0123456789abcdef-0123");
  write_secret(bad_file, "another-secret-fedcba9876543210-98765");
  if (secret)
    setenv("RDZV_SECRET_FILE", good_file, 1);
  char sec[200];
  snprintf(sec, sizeof(sec), "--secret-file=%s", good_file);
  const char *ro[] = {opts[0], opts[1], opts[2], opts[3], secret ? sec : NULL,
                      NULL};
  if (daemon_start(&root, dir, "r", NULL, ro, root_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "r", root_unix, sizeof(root_unix));
  if ((a_port = free_port()) < 0 || (m_port = free_port()) < 0 ||
      start_fixed(&ca, "a", a_port, root_tcp, good_file, a_tcp) < 0 ||
      start_fixed(&cm, "m", m_port, a_tcp, good_file, m_tcp) < 0)
    return -1;
  /* L logs at level 1 to l_log: what it says of a failed return. */
  snprintf(l_log, sizeof(l_log), "%s/l.log", dir);
  int fd = open(l_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  int saved = dup(2);
  dup2(fd, 2);
  const char *lo[] = {opts[0], opts[1],         opts[2],
                      opts[3], "--log-level=1", secret ? sec : NULL,
                      NULL};
  int rc = daemon_start(&cl, dir, "l", m_tcp, lo, l_tcp);
  dup2(saved, 2);
  close(saved);
  close(fd);
  daemon_unix_addr(dir, "l", l_unix, sizeof(l_unix));
  return rc;
}

static int chain_setup_plain(void **state) {
  (void)state;
  return chain_setup(false);
}

static int chain_setup_secret(void **state) {
  (void)state;
  return chain_setup(true);
}

static int chain_teardown(void **state) {
  (void)state;
  int bad = proc_stop(&cl) != 0;
  bad |= proc_stop(&cm) != 0;
  bad |= proc_stop(&ca) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  unsetenv("RDZV_SECRET_FILE");
  return bad ? -1 : 0;
}

/* L's link for the job: field (of "links.home"), -1 if none. */
static int64_t link_of(const char *field) {
  char path[80];
  snprintf(path, sizeof(path), "links." JOB ".%s", field);
  return stats_at_job(l_tcp, JOB, path);
}

/* Waits until L's link's field is want (at_least: want or more), then
 * says what happened (say; NULL: nothing). */
static void await_link(const char *field, int64_t want, bool at_least,
                       const char *say) {
  for (;;) {
    int64_t v = link_of(field);
    if (v == want || (at_least && v > want))
      break;
    usleep(20 * 1000);
  }
  if (say != NULL) {
    printf("%s\n", say);
    fflush(stdout);
  }
}

static void kill9(struct proc *p) {
  int st;
  kill(p->pid, SIGKILL);
  waitpid(p->pid, &st, 0);
}

static int l_wait_rc;

/* Waits through L for key "release": pending across every loss and move. */
static void *l_waiter(void *arg) {
  (void)arg;
  rdzv_client_t *c = client_at(l_unix);
  const char *keys[1] = {"release"};
  l_wait_rc = rdzv_store_wait(c, keys, 1, 600);
  rdzv_client_destroy(c);
  return NULL;
}

static int l_barrier_rc;

/* Member 0 of a barrier of two through L: in flight on L's link until
 * member 1 comes to R. */
static void *l_barrier(void *arg) {
  (void)arg;
  rdzv_client_t *c = client_at(l_unix);
  l_barrier_rc = rdzv_store_barrier(c, "held", 0, 2, 600);
  rdzv_client_destroy(c);
  return NULL;
}

/* M and A killed: L reattaches to R. M comes back under A still dead: it
 * answers L's probes, but says its own link toward the root is down
 * (RDZV_F_ROOT_AWAY), so L stays on R however long. A barrier of L's is
 * then in flight at R; A comes back: M is ready, but L puts off its
 * return while the barrier is in flight, and goes home once it
 * completed. A wait through L, pending all along, completes. */
static void test_parent_not_ready(void **state) {
  (void)state;
  pthread_t wt, bt;
  assert_int_equal(pthread_create(&wt, NULL, l_waiter, NULL), 0);
  await_link("hops", 0, false, NULL); /* the wait made L's link */
  kill9(&cm);
  kill9(&ca);
  await_link("hops", 2, false, "l on r, past m and a (killed)");
  int64_t home0 = stats_at(l_tcp, "returned_home");
  assert_int_equal(start_fixed(&cm, "m", m_port, a_tcp, good_file, m_tcp), 0);
  /* Answers for over twice --home-after-ms (600 ms; a probe every 150),
   * each one "not ready": L stays. */
  await_link("home_not_ready", 10, true, "m answers not ready");
  assert_int_equal(link_of("hops"), 2);
  assert_int_equal(stats_at(l_tcp, "returned_home"), home0);
  /* A barrier in flight on L's link at R (after L's --flush-ms). */
  assert_int_equal(pthread_create(&bt, NULL, l_barrier, NULL), 0);
  while (stats_at(root_tcp, "ops.barrier.received") < 1)
    usleep(20 * 1000);
  printf("a barrier in flight at r\n");
  fflush(stdout);
  assert_int_equal(start_fixed(&ca, "a", a_port, root_tcp, good_file, a_tcp),
                   0);
  /* M ready now, but the barrier holds L on R. */
  await_link("home_deferred", 1, true, "the return put off");
  assert_int_equal(link_of("hops"), 2);
  assert_int_equal(stats_at(l_tcp, "returned_home"), home0);
  rdzv_client_t *rc = client_at(root_unix);
  assert_int_equal(rdzv_store_barrier(rc, "held", 1, 2, 600), 0);
  assert_int_equal(pthread_join(bt, NULL), 0);
  assert_int_equal(l_barrier_rc, 0);
  while (link_of("hops") != 0 || stats_at(l_tcp, "returned_home") <= home0)
    usleep(20 * 1000);
  assert_int_equal(stats_at(l_tcp, "returned_home"), home0 + 1);
  assert_int_equal(link_of("home_failed"), 0);
  assert_int_equal(rdzv_store_set(rc, "release", "x", 1, 0, 30), 0);
  assert_int_equal(pthread_join(wt, NULL), 0);
  assert_int_equal(l_wait_rc, 0);
  rdzv_client_destroy(rc);
}

/* M killed: L reattaches to A. M comes back with another secret: it
 * answers the probes (they need none) and is ready, but refuses L's
 * hello. Each failed return is logged naming M and the job, and doubles
 * the time before the next (home_wait_ms); L stays on A between them. M
 * restarted with the job's secret (a new incarnation) is taken back at
 * once. A wait through L, pending across the loss, three failed moves
 * and the return (5 resends, more than MAX_RESENDS), completes. */
static void test_parent_refuses(void **state) {
  (void)state;
  pthread_t wt;
  assert_int_equal(pthread_create(&wt, NULL, l_waiter, NULL), 0);
  await_link("hops", 0, false, NULL); /* the wait made L's link */
  kill9(&cm);
  await_link("hops", 1, false, "l on a (m killed)");
  int64_t home0 = stats_at(l_tcp, "returned_home");
  assert_int_equal(start_fixed(&cm, "m", m_port, a_tcp, bad_file, m_tcp), 0);
  await_link("home_failed", 3, true, "three returns failed");
  /* Each move home failed (one may be under way between the reads). */
  int64_t moved = stats_at(l_tcp, "returned_home") - home0;
  assert_true(link_of("home_wait_ms") >= 600 << 3);
  assert_true(moved >= 3 && moved <= link_of("home_failed") + 1);
  char want[200], buf[1 << 16];
  snprintf(want, sizeof(want),
           "the return of job " JOB " to its parent %s failed", m_tcp);
  FILE *f = fopen(l_log, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  if (strstr(buf, want) == NULL)
    fail_msg("l's log does not say \"%s\"", want);
  /* M with the job's secret: a new incarnation, the wait starts afresh. */
  kill9(&cm);
  assert_int_equal(start_fixed(&cm, "m", m_port, a_tcp, good_file, m_tcp), 0);
  await_link("hops", 0, false, NULL);
  assert_int_equal(link_of("home_wait_ms"), 600);
  rdzv_client_t *rc = client_at(root_unix);
  assert_int_equal(rdzv_store_set(rc, "release", "x", 1, 0, 30), 0);
  assert_int_equal(pthread_join(wt, NULL), 0);
  if (l_wait_rc != 0)
    fail_msg("the wait through l: %s", rdzv_err_name(l_wait_rc));
  rdzv_client_destroy(rc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_interior_nodes_killed_and_back,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_parent_not_ready, chain_setup_plain,
                                      chain_teardown),
      cmocka_unit_test_setup_teardown(test_parent_refuses, chain_setup_secret,
                                      chain_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
