/* Sessions of ranks, with real daemons and real rank processes: a rank's
 * membership outlives its node. Trees: root <- mid <- leafA, leafB (hosts
 * hostA and hostB, two ranks each, world 4), and for the large case root
 * <- m1, m2 <- six leaves (eight hosts of 128 ranks: 1,024 ranks, three
 * levels).
 *
 * Invariants checked:
 *  - kill -9 of a node whose host lives: its ranks resume their sessions
 *    through its parent (their fallback), the generation stands (a
 *    barrier of all ranks completes), and adds in flight across the kill
 *    are applied exactly once (counter == acknowledged adds);
 *  - kill -9 of a node with its host's ranks: every other rank is told,
 *    naming the host and its ranks, after --session-grace-ms; relaunched
 *    ranks complete the next generation;
 *  - a node that listens but never answers (wedged) while its ranks are
 *    away on its parent: their probes of it never hold a call into the
 *    handle (rdzv_client_process), and they stay on the parent;
 *  - SIGSTOP of a node for three liveness timeouts: its ranks resume
 *    through its parent, the generation stands; when the node runs again
 *    its stale word (aborts about ranks that moved on) is refused
 *    (fenced), and the generation still stands;
 *  - kill -9 of an interior node in the middle of a 1,024-rank join: the
 *    rendezvous completes on every rank with the assignment a run without
 *    the kill gives (hosts in name order, ranks by local rank), each rank
 *    once.
 * Times are printed for the record; none is asserted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hosts.h"
#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/join_wire.h"

static const char *const beat[] = {"--heartbeat-ms=100",
                                   "--liveness-timeout-ms=800",
                                   "--session-grace-ms=2000", NULL};
#define LIVENESS_MS 800
#define GRACE_MS 2000

static char dir[64];
static int fds_before;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the small tree ---------------------------------------------------------- */

static struct proc root, mid, leaf_a, leaf_b;
static char root_tcp[64], mid_tcp[64], a_tcp[64], b_tcp[64];
static char root_addr[160], mid_addr[160], a_addr[160], b_addr[160];

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-session-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, beat, root_tcp) < 0 ||
      daemon_start(&mid, dir, "mid", root_tcp, beat, mid_tcp) < 0 ||
      daemon_start(&leaf_a, dir, "leafA", mid_tcp, beat, a_tcp) < 0 ||
      daemon_start(&leaf_b, dir, "leafB", mid_tcp, beat, b_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  daemon_unix_addr(dir, "mid", mid_addr, sizeof(mid_addr));
  daemon_unix_addr(dir, "leafA", a_addr, sizeof(a_addr));
  daemon_unix_addr(dir, "leafB", b_addr, sizeof(b_addr));
  return 0;
}

static int stop_if(struct proc *p) {
  if (p->pid == 0)
    return 0;
  kill(p->pid, SIGCONT);
  int st = proc_stop(p);
  p->pid = 0;
  return st;
}

static int teardown(void **state) {
  (void)state;
  int bad = stop_if(&leaf_a) != 0;
  bad |= stop_if(&leaf_b) != 0;
  bad |= stop_if(&mid) != 0;
  bad |= stop_if(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* hostA (ranks via leafA) and hostB (via leafB), two ranks each, world 4:
 * every join succeeds in one generation, returned. */
static int64_t join_two_hosts(const char *job, struct hostproc *ha,
                              struct hostproc *hb) {
  *ha = host_start(a_addr, job, "hostA", 0, 2, 4);
  *hb = host_start(b_addr, job, "hostB", 1, 2, 4);
  int64_t gen = 0;
  for (int i = 0; i < 4; i++) {
    struct report rp;
    host_read(i < 2 ? ha : hb, &rp);
    if (rp.status != 0)
      fail_msg("join: %s", rp.text);
    assert_int_equal(rp.world, 4);
    assert_true(gen == 0 || rp.gen == gen);
    gen = rp.gen;
  }
  return gen;
}

/* A barrier of all four ranks; each must report want. */
static void barrier_all(struct hostproc *ha, struct hostproc *hb, int want,
                        const char *must_name) {
  host_cmd(ha, 'b');
  host_cmd(hb, 'b');
  for (int i = 0; i < 4; i++) {
    struct report rp;
    host_read(i < 2 ? ha : hb, &rp);
    assert_int_equal(rp.cmd, 'b');
    if (rp.status != want)
      fail_msg("barrier on host %d: %s (%s), wanted %s", rp.host,
               rdzv_strerror(rp.status), rp.text, rdzv_strerror(want));
    if (must_name != NULL && strstr(rp.text, must_name) == NULL)
      fail_msg("barrier: the error does not name '%s': %s", must_name, rp.text);
  }
}

static void on_status(rdzv_client_t *c, const struct rdzv_result *res,
                      void *arg) {
  (void)c;
  *(int *)arg = res->status;
}

/* A barrier of one host's two ranks; each must report want, naming
 * must_name. */
static void barrier_all_of(struct hostproc *h, int want,
                           const char *must_name) {
  host_cmd(h, 'b');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(h, &rp);
    if (rp.status != want || strstr(rp.text, must_name) == NULL)
      fail_msg("barrier on host %d: %s (%s), wanted %s naming '%s'", rp.host,
               rdzv_strerror(rp.status), rp.text, rdzv_strerror(want),
               must_name);
  }
}

static int64_t counter_at_root(const char *job, const char *key) {
  rdzv_client_t *c = NULL;
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = root_addr;
  o.job_id = job;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  void *v = NULL;
  size_t n = 0;
  int64_t out = -1;
  if (rdzv_store_get(c, key, &v, &n, 10) == 0) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.*s", (int)n, (const char *)v);
    out = strtoll(buf, NULL, 10);
  }
  rdzv_free(v);
  rdzv_client_destroy(c);
  return out;
}

/* kill -9 of leafA while its ranks add: they resume through mid, every
 * acknowledged add counted once, and the generation stands. */
static void test_node_killed_ranks_resume(void **state) {
  (void)state;
  struct hostproc ha, hb;
  join_two_hosts("resume", &ha, &hb);
  host_cmd(&ha, 'a');
  host_cmd(&hb, 'a');
  usleep(30 * 1000); /* adds in flight */
  double t0 = now_s();
  kill(leaf_a.pid, SIGKILL);
  proc_wait(&leaf_a);
  leaf_a.pid = 0;
  int64_t acked = 0;
  for (int i = 0; i < 4; i++) {
    struct report rp;
    host_read(i < 2 ? &ha : &hb, &rp);
    assert_int_equal(rp.cmd, 'a');
    if (rp.status != 0)
      fail_msg("adds on host %d: %s (%s)", rp.host, rdzv_strerror(rp.status),
               rp.text);
    acked += rp.count;
  }
  assert_true(stats_reach(mid_tcp, "sessions_resumed", 2) >= 2);
  double t_resumed = now_s() - t0;
  assert_int_equal(acked, 400);
  assert_int_equal(counter_at_root("resume", "ctr"), acked);
  barrier_all(&ha, &hb, 0, NULL);
  printf("node killed: its 2 ranks resumed through its parent within "
         "%.3f s; 400 adds across the kill, counter %lld\n",
         t_resumed, (long long)acked);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* Back home, the rank's side: kill -9 of leafA, its ranks resume through
 * mid (adds across the kill); leafA started again on its socket: each of
 * its ranks, driving its handle, probes it, comes back after
 * RDZV_HOME_AFTER_MS of ready answers and resumes its session there (its
 * count of resumes goes 1 -> 2, leafA's sessions_resumed reaches 2); a
 * barrier of all four then completes and the counter equals the adds
 * acknowledged. */
static void test_ranks_return_home(void **state) {
  (void)state;
  struct hostproc ha, hb;
  setenv("RDZV_HOME_AFTER_MS", "400", 1); /* the host processes' */
  join_two_hosts("home", &ha, &hb);
  unsetenv("RDZV_HOME_AFTER_MS");
  int64_t m0 = stats_at(mid_tcp, "sessions_resumed");
  kill(leaf_a.pid, SIGKILL);
  proc_wait(&leaf_a);
  leaf_a.pid = 0;
  host_cmd(&ha, 'a');
  int64_t acked = 0;
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    if (rp.status != 0)
      fail_msg("adds on hostA: %s (%s)", rdzv_strerror(rp.status), rp.text);
    acked += rp.count;
  }
  assert_true(stats_reach(mid_tcp, "sessions_resumed", m0 + 2) >= m0 + 2);
  assert_int_equal(daemon_start(&leaf_a, dir, "leafA", mid_tcp, beat, a_tcp),
                   0);
  /* Idle rounds of 3 s, each rank driving its handle; a bounded count of
   * them, not a time: the return needs a few probes of 100 ms apart. */
  int rounds = 0;
  int32_t resumes[2] = {0, 0};
  while (stats_at(a_tcp, "sessions_resumed") < 2 && rounds++ < 10) {
    host_cmd(&ha, 'i');
    for (int i = 0; i < 2; i++) {
      struct report rp;
      host_read(&ha, &rp);
      resumes[i] = rp.count;
    }
  }
  if (stats_at(a_tcp, "sessions_resumed") < 2)
    fail_msg("hostA's ranks did not come back to leafA (%d idle rounds; "
             "resumes %d and %d)",
             rounds, resumes[0], resumes[1]);
  assert_true(resumes[0] >= 2 && resumes[1] >= 2);
  host_cmd(&ha, 'a');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    if (rp.status != 0)
      fail_msg("adds at home: %s (%s)", rdzv_strerror(rp.status), rp.text);
    acked += rp.count;
  }
  assert_int_equal(counter_at_root("home", "ctr"), acked);
  /* A barrier's key is its host's command count: hostB catches up. */
  for (int k = 0; k < rounds + 2; k++) {
    host_cmd(&hb, 's');
    for (int i = 0; i < 2; i++) {
      struct report rp;
      host_read(&hb, &rp);
      assert_int_equal(rp.status, 0);
    }
  }
  barrier_all(&ha, &hb, 0, NULL);
  printf("ranks back home after %d idle round(s) of 3 s; %lld adds counted "
         "once\n",
         rounds, (long long)acked);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* A node that is there but does not answer (a listening socket nobody
 * accepts on: a wedged node) while hostA's ranks are away on mid: their
 * probes of it never hold the caller (one that waited for the answer
 * held each call into the handle 100 ms, which a process driving many
 * handles from one loop pays once per handle), and they stay on mid. */
static void test_probe_of_wedged_node_never_blocks(void **state) {
  (void)state;
  struct hostproc ha, hb;
  setenv("RDZV_HOME_AFTER_MS", "400", 1); /* the host processes' */
  join_two_hosts("wedged", &ha, &hb);
  unsetenv("RDZV_HOME_AFTER_MS");
  int64_t m0 = stats_at(mid_tcp, "sessions_resumed");
  kill(leaf_a.pid, SIGKILL);
  proc_wait(&leaf_a);
  leaf_a.pid = 0;
  host_cmd(&ha, 'a');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    if (rp.status != 0)
      fail_msg("adds on hostA: %s (%s)", rdzv_strerror(rp.status), rp.text);
  }
  assert_true(stats_reach(mid_tcp, "sessions_resumed", m0 + 2) >= m0 + 2);
  /* leafA's path, listened on and never accepted from. */
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/leafA.sock", dir);
  unlink(sun.sun_path);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(lfd >= 0);
  assert_int_equal(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
  assert_int_equal(listen(lfd, 64), 0);
  host_cmd(&ha, 'i');
  int slow = 0;
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    assert_int_equal(rp.status, 0);
    assert_int_equal(rp.count, 1); /* still on mid: resumed once */
    slow += rp.slow;
  }
  printf("probes of a wedged node: %d call(s) of 50 ms or more in two "
         "ranks' 3 s idle rounds\n",
         slow);
  /* Not a timing bound: a probe that waits gives one slow call per
   * probe (about 30 here); a scheduler's hiccup gives a few at most. */
  assert_true(slow <= 3);
  close(lfd);
  unlink(sun.sun_path);
  /* A barrier's key is its host's command count: hostB catches up. */
  for (int k = 0; k < 2; k++) {
    host_cmd(&hb, 's');
    for (int i = 0; i < 2; i++) {
      struct report rp;
      host_read(&hb, &rp);
      assert_int_equal(rp.status, 0);
    }
  }
  barrier_all(&ha, &hb, 0, NULL);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* kill -9 of leafB with hostB's ranks: hostA's ranks are told, naming
 * hostB and its ranks; relaunched, all four complete the next
 * generation. */
static void test_host_lost_named(void **state) {
  (void)state;
  struct hostproc ha, hb;
  int64_t gen = join_two_hosts("lost", &ha, &hb);
  /* The node first: once it is gone nothing on that host can speak. */
  double t0 = now_s();
  kill(leaf_b.pid, SIGKILL);
  host_kill(&hb);
  proc_wait(&leaf_b);
  leaf_b.pid = 0;
  host_cmd(&ha, 'b');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    assert_int_equal(rp.status, RDZV_EABORTED);
    if (strstr(rp.text, "host hostB (ranks 2-3) lost") == NULL ||
        strstr(rp.text, "node leafB") == NULL)
      fail_msg("the abort does not name the lost host: %s", rp.text);
  }
  printf("host lost: the other ranks were told %.3f s after the kill "
         "(--session-grace-ms %d)\n",
         now_s() - t0, GRACE_MS);
  assert_int_equal(host_end(&ha), 0);
  /* The host comes back: its node, then all ranks join again. */
  assert_int_equal(daemon_start(&leaf_b, dir, "leafB", mid_tcp, beat, b_tcp),
                   0);
  int64_t gen2 = join_two_hosts("lost", &ha, &hb);
  assert_true(gen2 > gen);
  barrier_all(&ha, &hb, 0, NULL);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* SIGSTOP of leafA for three liveness timeouts: its ranks resume through
 * mid and a barrier completes meanwhile; SIGCONT: leafA's stale aborts
 * about them are refused, and the generation still stands. */
static void test_stopped_node_fenced(void **state) {
  (void)state;
  struct hostproc ha, hb;
  join_two_hosts("fence", &ha, &hb);
  double t0 = now_s();
  kill(leaf_a.pid, SIGSTOP);
  barrier_all(&ha, &hb, 0, NULL);
  double t_barrier = now_s() - t0;
  double left = 3.0 * LIVENESS_MS / 1000.0 - (now_s() - t0);
  if (left > 0)
    usleep((useconds_t)(left * 1e6));
  kill(leaf_a.pid, SIGCONT);
  /* Its lost ranks' grace runs out there; what it says about them is
   * stale. */
  /* Refused as stale by mid, or by the root above it (where mid passes
   * it on when the ranks' sessions were resumed there: under load a rank
   * may go past mid). */
  int64_t fenced = 0;
  for (int i = 0; i < 600 && fenced < 1; i++) {
    int64_t fm = stats_at(mid_tcp, "fenced"), fr = stats_at(root_tcp, "fenced");
    fenced = (fm > 0 ? fm : 0) + (fr > 0 ? fr : 0);
    if (fenced < 1)
      usleep(100 * 1000);
  }
  if (fenced < 1)
    fail_msg("no stale abort of leafA was fenced (mid: %lld, root: %lld; "
             "leafA's sessions_lost %lld)",
             (long long)stats_at(mid_tcp, "fenced"),
             (long long)stats_at(root_tcp, "fenced"),
             (long long)stats_at(a_tcp, "sessions_lost"));
  printf("stale aborts fenced: at mid %lld, at the root %lld\n",
         (long long)stats_at(mid_tcp, "fenced"),
         (long long)stats_at(root_tcp, "fenced"));
  assert_true(stats_at(a_tcp, "sessions_lost") >= 1);
  barrier_all(&ha, &hb, 0, NULL);
  printf("node stopped: a barrier of all ranks completed %.3f s after the "
         "stop (its ranks through its parent); the node's stale aborts "
         "were fenced\n",
         t_barrier);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* SIGSTOP of a whole host (its node and its ranks) during a barrier:
 * the others' barrier fails, naming the host and its ranks, once the
 * node's parent has declared it lost and the grace has passed; when the
 * host runs again, its requests are refused by generation. */
static void test_stopped_host_named(void **state) {
  (void)state;
  struct hostproc ha, hb;
  join_two_hosts("frozen", &ha, &hb);
  double t0 = now_s();
  kill(hb.pid, SIGSTOP);
  kill(leaf_b.pid, SIGSTOP);
  barrier_all_of(&ha, RDZV_EABORTED, "host hostB (ranks 2-3) lost");
  double told = now_s() - t0;
  kill(leaf_b.pid, SIGCONT);
  kill(hb.pid, SIGCONT);
  host_cmd(&hb, 'b');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&hb, &rp);
    if (rp.status != RDZV_EABORTED)
      fail_msg("the stopped host's barrier after it ran again: %s (%s)",
               rdzv_strerror(rp.status), rp.text);
  }
  printf("host stopped: the other ranks were told %.3f s after the stop "
         "(liveness %d ms + grace %d ms); its own requests then refused "
         "by generation\n",
         told, LIVENESS_MS, GRACE_MS);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* Idle ranks that drive their handles ping their node: when it stops they
 * notice within the liveness timeout and resume through its parent
 * before they make any request. */
static void test_idle_ranks_leave_a_stopped_node(void **state) {
  (void)state;
  struct hostproc ha, hb;
  join_two_hosts("idle", &ha, &hb);
  host_cmd(&ha, 'i');
  host_cmd(&hb, 'i'); /* so that both hosts number their barriers alike */
  usleep(300 * 1000);
  kill(leaf_a.pid, SIGSTOP);
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    assert_int_equal(rp.cmd, 'i');
    if (rp.count < 1)
      fail_msg("an idle rank did not resume while its node was stopped");
  }
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&hb, &rp);
    assert_int_equal(rp.status, 0);
  }
  assert_true(stats_at(mid_tcp, "sessions_resumed") >= 2);
  kill(leaf_a.pid, SIGCONT);
  barrier_all(&ha, &hb, 0, NULL);
  assert_int_equal(host_end(&ha), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* A JOIN of a generation the node has not seen (a bogus or stale
 * re-send) changes nothing of its sessions: the root refuses it, and a
 * rank dying afterwards is still noticed at once. */
static void test_bogus_resume_changes_nothing(void **state) {
  (void)state;
  struct hostproc ha, hb;
  join_two_hosts("bogus", &ha, &hb);
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = b_addr;
  o.job_id = "bogus";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  uint8_t params[RDZV_JOIN_PARAMS_BYTES];
  struct rdzv_join_params jp = {
      .min_size = 4, .max_size = 4, .timeout_ms = 10000};
  rdzv_join_params_encode(&jp, params);
  struct rdzv_join_full j = {
      .rec = {.host = (const uint8_t *)"hostZ", .host_len = 5, .claim = 77},
      .local_size = 1};
  uint8_t rec[256];
  assert_true(rdzv_join_rec_size(&j) <= sizeof(rec));
  assert_int_equal(rdzv_join_rec_encode(&j, rec), 0);
  struct rdzv_bytes key = {"world", 5};
  struct rdzv_bytes vals[2] = {{params, sizeof(params)},
                               {rec, rdzv_join_rec_size(&j)}};
  struct rdzv_request req = {.op = RDZV_OP_JOIN,
                             .a = 99,
                             .nkeys = 1,
                             .keys = &key,
                             .nvals = 2,
                             .vals = vals};
  int st = 1;
  assert_int_equal(rdzv_client_submit(c, &req, 10, on_status, &st), 0);
  assert_int_equal(rdzv_client_run(c, 20), 0);
  assert_int_equal(st, RDZV_EABORTED);
  rdzv_client_destroy(c);
  double t0 = now_s();
  host_kill(&hb);
  host_cmd(&ha, 'b');
  for (int i = 0; i < 2; i++) {
    struct report rp;
    host_read(&ha, &rp);
    if (rp.status != RDZV_EABORTED ||
        strstr(rp.text, "the process exited") == NULL)
      fail_msg("after a bogus re-send, a dead host went unnoticed: %s (%s)",
               rdzv_strerror(rp.status), rp.text);
  }
  printf("rank processes killed: the others told %.3f s later (their "
         "node saw them exit)\n",
         now_s() - t0);
  assert_int_equal(host_end(&ha), 0);
}

/* Ranks on mid's own host: mid is killed, they resume at the root (their
 * fallback) and leave cleanly from there, so the job's relaunch gets
 * generation 2 (before, the root kept their slots as live). */
static void test_leave_after_resuming_at_root(void **state) {
  (void)state;
  struct hostproc hm = host_start(mid_addr, "leave", "hostM", 0, 2, 4);
  struct hostproc hb = host_start(b_addr, "leave", "hostB", 1, 2, 4);
  int64_t gen = 0;
  for (int i = 0; i < 4; i++) {
    struct report rp;
    host_read(i < 2 ? &hm : &hb, &rp);
    assert_int_equal(rp.status, 0);
    gen = rp.gen;
  }
  kill(mid.pid, SIGKILL);
  proc_wait(&mid);
  mid.pid = 0;
  barrier_all(&hm, &hb, 0, NULL);
  assert_true(stats_at(root_tcp, "sessions_resumed") >= 2);
  assert_int_equal(host_end(&hm), 0);
  assert_int_equal(host_end(&hb), 0);
  assert_int_equal(daemon_start(&mid, dir, "mid", root_tcp, beat, mid_tcp), 0);
  hm = host_start(mid_addr, "leave", "hostM", 0, 2, 4);
  hb = host_start(b_addr, "leave", "hostB", 1, 2, 4);
  for (int i = 0; i < 4; i++) {
    struct report rp;
    host_read(i < 2 ? &hm : &hb, &rp);
    if (rp.status != 0)
      fail_msg("relaunch: %s", rp.text);
    assert_true(rp.gen > gen);
  }
  assert_int_equal(host_end(&hm), 0);
  assert_int_equal(host_end(&hb), 0);
}

/* ---- 1,024 ranks through three levels ---------------------------------------- */

#define HOSTS 8
#define PER_HOST 128

static struct proc big_root, m[2], leaves[6];
static char big_root_tcp[64], m_tcp[2][64], leaf_tcp[6][64];

static int setup_big(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-session-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&big_root, dir, "root", NULL, beat, big_root_tcp) < 0)
    return -1;
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof(name), "m%d", i + 1);
    if (daemon_start(&m[i], dir, name, big_root_tcp, beat, m_tcp[i]) < 0)
      return -1;
  }
  for (int i = 0; i < 6; i++) {
    /* Each leaf is given its chain, as the launchers do (deploy/): a
     * leaf whose parent dies before their first hello would know no
     * ancestor otherwise. */
    char name[16], chain[160];
    snprintf(name, sizeof(name), "l%d", i + 1);
    snprintf(chain, sizeof(chain), "%s,%s", m_tcp[i / 3], big_root_tcp);
    if (daemon_start(&leaves[i], dir, name, chain, beat, leaf_tcp[i]) < 0)
      return -1;
  }
  return 0;
}

static int teardown_big(void **state) {
  (void)state;
  int bad = 0;
  for (int i = 0; i < 6; i++)
    bad |= stop_if(&leaves[i]) != 0;
  for (int i = 0; i < 2; i++)
    bad |= stop_if(&m[i]) != 0;
  bad |= stop_if(&big_root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static void test_interior_death_mid_rendezvous(void **state) {
  (void)state;
  /* Host h0 is m1's own, h1 m2's, h2..h7 the leaves'. */
  char addrs[HOSTS][160];
  daemon_unix_addr(dir, "m1", addrs[0], sizeof(addrs[0]));
  daemon_unix_addr(dir, "m2", addrs[1], sizeof(addrs[1]));
  for (int i = 0; i < 6; i++) {
    char name[16];
    snprintf(name, sizeof(name), "l%d", i + 1);
    daemon_unix_addr(dir, name, addrs[2 + i], sizeof(addrs[2]));
  }
  struct hostproc hp[HOSTS];
  double t0 = now_s();
  /* m1's own host first, until m1 has all its joins (so every one of
   * those ranks has had m1's hello reply, which names their fallback: a
   * rank cut off before it would wait for m1 to come back). */
  hp[0] = host_start(addrs[0], "big", NULL, 0, PER_HOST, HOSTS * PER_HOST);
  assert_true(stats_reach(m_tcp[0], "ops.join.received", PER_HOST) >= PER_HOST);
  for (int i = 1; i < HOSTS - 1; i++)
    hp[i] = host_start(addrs[i], "big", NULL, i, PER_HOST, HOSTS * PER_HOST);
  /* Joins have reached the root; h7 has not joined, so the round is
   * still open. */
  assert_true(stats_reach(big_root_tcp, "ops.join.received", 2) >= 2);
  double t_kill = now_s();
  kill(m[0].pid, SIGKILL);
  proc_wait(&m[0]);
  m[0].pid = 0;
  hp[HOSTS - 1] = host_start(addrs[HOSTS - 1], "big", NULL, HOSTS - 1, PER_HOST,
                             HOSTS * PER_HOST);
  static bool seen[HOSTS * PER_HOST];
  memset(seen, 0, sizeof(seen));
  int64_t gen = 0;
  for (int h = 0; h < HOSTS; h++) {
    for (int k = 0; k < PER_HOST; k++) {
      struct report rp;
      host_read(&hp[h], &rp);
      if (rp.status != 0)
        fail_msg("h%d local rank %d: %s", rp.host, rp.local_rank, rp.text);
      assert_int_equal(rp.world, HOSTS * PER_HOST);
      /* What a run without the kill gives: hosts in name order (h0..h7),
       * ranks contiguous per host by local rank. */
      assert_int_equal(rp.rank, rp.host * PER_HOST + rp.local_rank);
      assert_false(seen[rp.rank]);
      seen[rp.rank] = true;
      assert_true(gen == 0 || rp.gen == gen);
      gen = rp.gen;
    }
  }
  printf("1,024 ranks, 3 levels: m1 killed %.3f s into the join; all "
         "ranks had their assignment %.3f s after the kill\n",
         t_kill - t0, now_s() - t_kill);
  for (int i = 0; i < 3; i++)
    assert_true(stats_at(leaf_tcp[i], "reattached") >= 1);
  for (int h = 0; h < HOSTS; h++)
    assert_int_equal(host_end(&hp[h]), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_node_killed_ranks_resume, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_ranks_return_home, setup, teardown),
      cmocka_unit_test_setup_teardown(test_probe_of_wedged_node_never_blocks,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_host_lost_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stopped_node_fenced, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bogus_resume_changes_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stopped_host_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_ranks_leave_a_stopped_node,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_leave_after_resuming_at_root, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_interior_death_mid_rendezvous,
                                      setup_big, teardown_big),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
