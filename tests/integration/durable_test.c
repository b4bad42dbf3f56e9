/* The etcd-backed root (rdzvd --role root --etcd), with a real etcd (the
 * harness's throwaway member on loopback) and real daemons and ranks.
 *
 * Invariants checked:
 *  - kill -9 of the only root, started again on its port: every
 *    acknowledged write is there (mutable, write-once, a counter equal to
 *    the adds acknowledged) and the nodes see no restart (the incarnation
 *    is etcd's);
 *  - kill -9 of the leader among three roots in the middle of a
 *    1,000-rank rendezvous (8 hosts of 125 ranks, 8 nodes given the roots'
 *    list): a standby takes over and every rank gets the assignment a run
 *    without the kill gives, each rank once; then kill -9 of the new
 *    leader while every rank adds: the counter equals the adds
 *    acknowledged (applied once across the failover);
 *  - a deposed leader (the leader key deleted behind its back, another
 *    root elected) sees it at once and stands down: a read through it
 *    gives the new leader's value, and the client's add lands once there;
 *  - a job loaded at a failover and left alone past its etcd job TTL
 *    still takes writes (its lease was kept alive), and a job id of 252
 *    bytes of UTF-8 with '%', '/' and ' ' is served and read back;
 *  - etcd stopped (SIGSTOP) for 10 s under a root whose lease outlives
 *    that: the write issued meanwhile completes once etcd runs, the root
 *    never stood down;
 *  - a leader stopped (SIGSTOP) past its lease: the standby leads, and
 *    the stopped one, running again, acknowledges nothing (an add sent to
 *    it meanwhile is applied once, by the new leader);
 *  - etcd stopped past the lease: a waiting caller is told "etcd lease
 *    lost" (RDZV_ELEASE_LOST), and the root is elected again after;
 *  - a job that ended leaves nothing in etcd;
 *  - under etcd's --max-txn-ops 8 a 300-key batch goes as many
 *    transactions with no failed request, values over half the request
 *    limit go in parts (a rewritten one leaves none of its old parts),
 *    and all of it is read back after a restart.
 *  - with auth on, a root given the credentials of a user whose role
 *    covers only its prefix persists and reads back its state.
 * The 1,000-rank case runs against a 3-member etcd cluster.
 * Times are printed for the record; none is asserted. */
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
#include <time.h>
#include <unistd.h>

#include "hosts.h"
#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "tests/etcd/etcd_harness.h"

static struct etcdh eh;
static char dir[64];
static int fds_before;

#define NROOTS 3
static struct proc roots[NROOTS];
static int root_port[NROOTS];
static char root_tcp[NROOTS][64];
static char ttl_arg[64] = "--etcd-lease-ttl-s=2";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* etcd flags of the next setup (NULL: none), and its members (1 or 3). */
static const char *const *etcd_extra;
static int etcd_members = 1;
/* Extra flags for the roots of the next setup (NULL-terminated). */
static const char *root_extra[4];

static int start_root(int i) {
  char name[16], listen[64], etcd[600];
  snprintf(name, sizeof(name), "r%d", i + 1);
  snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", root_port[i]);
  snprintf(etcd, sizeof(etcd), "--etcd=%s", etcdh_endpoints(&eh));
  const char *extra[] = {listen,
                         etcd,
                         ttl_arg,
                         "--heartbeat-ms=100",
                         "--liveness-timeout-ms=1000",
                         root_extra[0],
                         root_extra[0] ? root_extra[1] : NULL,
                         root_extra[1] ? root_extra[2] : NULL,
                         NULL};
  char tcp[64];
  return daemon_start(&roots[i], dir, name, NULL, extra, tcp);
}

static int setup_etcd(void) {
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-durable-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      (etcd_members == 1
           ? etcdh_start(&eh, etcd_extra, NULL)
           : etcdh_start_cluster(&eh, etcd_members, etcd_extra, NULL)) < 0)
    return -1;
  for (int i = 0; i < NROOTS; i++) {
    if ((root_port[i] = free_port()) < 0)
      return -1;
    snprintf(root_tcp[i], sizeof(root_tcp[i]), "127.0.0.1:%d", root_port[i]);
  }
  return 0;
}

static int stop_if(struct proc *p) {
  if (p->pid == 0)
    return 0;
  int rc = proc_stop(p);
  p->pid = 0;
  return rc;
}

static void kill_root(int i) {
  kill(roots[i].pid, SIGKILL);
  proc_wait(&roots[i]);
  roots[i].pid = 0;
}

/* The root that leads now, as the leader key in etcd names it (polled,
 * among the roots alive); -1 after about 30 s. */
static int leader_of(const bool *alive) {
  char *k = etcdh_b64("rdzv/leader", 11);
  char body[200];
  snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
  free(k);
  for (int tries = 0; tries < 600; tries++) {
    char *resp = NULL;
    if (etcdh_post(&eh, 0, "/v3/kv/range", body, NULL, &resp) == 200 &&
        resp != NULL) {
      for (int i = 0; i < NROOTS; i++) {
        char *v = etcdh_b64(root_tcp[i], strlen(root_tcp[i]));
        bool named = strstr(resp, v) != NULL;
        free(v);
        if (named && alive[i]) {
          free(resp);
          return i;
        }
      }
    }
    free(resp);
    usleep(50 * 1000);
  }
  return -1;
}

/* How many keys etcd holds that start with prefix (0 when none), or -1
 * when etcd did not answer. */
static long long etcd_count(const char *prefix) {
  size_t n = strlen(prefix);
  char *end = strdup(prefix);
  if (end == NULL || n == 0)
    return -1;
  end[n - 1] = (char)(end[n - 1] + 1);
  char *k = etcdh_b64(prefix, n), *e = etcdh_b64(end, n);
  free(end);
  char body[400], *resp = NULL;
  snprintf(body, sizeof(body),
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", k, e);
  free(k);
  free(e);
  long long count = -1;
  if (etcdh_post(&eh, 0, "/v3/kv/range", body, NULL, &resp) == 200 &&
      resp != NULL) {
    const char *c = strstr(resp, "\"count\":\"");
    count = c != NULL ? atoll(c + 9) : 0;
  }
  free(resp);
  return count;
}

static rdzv_client_t *client(const char *addr, const char *job) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

static void assert_get(rdzv_client_t *c, const char *key, const char *want) {
  void *v = NULL;
  size_t n = 0;
  int rc = rdzv_store_get(c, key, &v, &n, 30);
  if (rc != 0)
    fail_msg("get %s: %s (%s)", key, rdzv_strerror(rc),
             rdzv_client_last_error(c));
  if (n != strlen(want) || memcmp(v, want, n) != 0)
    fail_msg("get %s: '%.*s', want '%s'", key, (int)n, (char *)v, want);
  rdzv_free(v);
}

/* ---- one root, restarted ---------------------------------------------------- */

static struct proc node1;
static char node1_tcp[64], node1_addr[160];

static int teardown_all(void **state);

static const char *node1_extra[3];

static int setup_one(void **state) {
  if (setup_etcd() < 0 || start_root(0) < 0 ||
      daemon_start(&node1, dir, "n1", root_tcp[0], node1_extra, node1_tcp) <
          0) {
    teardown_all(state); /* cmocka runs no teardown after a failed setup */
    return -1;
  }
  daemon_unix_addr(dir, "n1", node1_addr, sizeof(node1_addr));
  return 0;
}

static int teardown_all(void **state) {
  (void)state;
  int bad = stop_if(&node1) != 0;
  for (int i = 0; i < NROOTS; i++)
    bad |= stop_if(&roots[i]) != 0;
  etcdh_stop_all(&eh);
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static void test_restart_keeps_acknowledged(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "dur");
  assert_int_equal(rdzv_store_set(c, "m", "mutable", 7, 0, 30), 0);
  assert_int_equal(rdzv_store_set(c, "w", "once", 4, RDZV_STORE_WRITE_ONCE, 30),
                   0);
  int acked = 0;
  for (int i = 0; i < 200; i++) {
    int64_t v;
    if (rdzv_store_add(c, "ctr", 1, &v, 30) == 0)
      acked++;
  }
  assert_int_equal(acked, 200);
  double t_kill = now_s();
  kill_root(0);
  assert_int_equal(start_root(0), 0);
  /* Through the node, which reconnects to the new process. */
  assert_get(c, "m", "mutable");
  assert_get(c, "w", "once");
  assert_get(c, "ctr", "200");
  printf("root killed and restarted: state read back %.3f s after the "
         "kill\n",
         now_s() - t_kill);
  /* A write-once key keeps its value. */
  assert_int_equal(
      rdzv_store_set(c, "w", "other", 5, RDZV_STORE_WRITE_ONCE, 30),
      RDZV_EWRITE_ONCE);
  /* The node saw the same incarnation: no restart, nothing dropped. */
  assert_int_equal(stats_at(node1_tcp, "parent_restarts"), 0);
  rdzv_client_destroy(c);
}

/* ---- three roots, 1,000 ranks --------------------------------------------------- */

#define HOSTS 8
#define PER_HOST 125
static struct proc nodes[HOSTS];
static char node_tcp[HOSTS][64];

static int teardown_three(void **state);

static int setup_three(void **state) {
  etcd_members = 3; /* the election on a 3-member etcd cluster */
  if (setup_etcd() < 0) {
    teardown_three(state);
    return -1;
  }
  for (int i = 0; i < NROOTS; i++)
    if (start_root(i) < 0) {
      teardown_three(state);
      return -1;
    }
  /* The launcher gives each node the roots' list: the leader first. */
  char chain[300];
  snprintf(chain, sizeof(chain), "%s,%s,%s", root_tcp[0], root_tcp[1],
           root_tcp[2]);
  const char *beat[] = {"--heartbeat-ms=100", "--liveness-timeout-ms=1000",
                        NULL};
  for (int i = 0; i < HOSTS; i++) {
    char name[16];
    snprintf(name, sizeof(name), "n%d", i);
    if (daemon_start(&nodes[i], dir, name, chain, beat, node_tcp[i]) < 0) {
      teardown_three(state);
      return -1;
    }
  }
  return 0;
}

static int teardown_three(void **state) {
  int bad = 0;
  for (int i = 0; i < HOSTS; i++)
    bad |= stop_if(&nodes[i]) != 0;
  etcd_members = 1;
  return teardown_all(state) | bad;
}

static void test_failover_mid_rendezvous(void **state) {
  (void)state;
  bool alive[NROOTS] = {true, true, true};
  int lead = leader_of(alive);
  assert_true(lead >= 0);
  char addrs[HOSTS][160];
  for (int i = 0; i < HOSTS; i++) {
    char name[16];
    snprintf(name, sizeof(name), "n%d", i);
    daemon_unix_addr(dir, name, addrs[i], sizeof(addrs[i]));
  }
  struct hostproc hp[HOSTS];
  double t0 = now_s();
  for (int i = 0; i < HOSTS - 1; i++)
    hp[i] = host_start(addrs[i], "big", NULL, i, PER_HOST, HOSTS * PER_HOST);
  /* Joins have reached the leader; h7 has not joined: the round is open. */
  assert_true(stats_reach(root_tcp[lead], "ops.join.received", 2) >= 2);
  double t_kill = now_s();
  kill_root(lead);
  alive[lead] = false;
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
      /* What a run without the kill gives: hosts in name order, ranks by
       * local rank. */
      assert_int_equal(rp.rank, rp.host * PER_HOST + rp.local_rank);
      assert_false(seen[rp.rank]);
      seen[rp.rank] = true;
      assert_true(gen == 0 || rp.gen == gen);
      gen = rp.gen;
    }
  }
  double t_done = now_s();
  int lead2 = leader_of(alive);
  assert_true(lead2 >= 0 && lead2 != lead);
  printf("1,000 ranks: leader r%d killed %.3f s into the join; all ranks "
         "had their assignment %.3f s after the kill (lease TTL 2 s)\n",
         lead + 1, t_kill - t0, t_done - t_kill);

  /* Every rank adds while the new leader is killed too. */
  for (int h = 0; h < HOSTS; h++)
    host_cmd(&hp[h], 'a');
  usleep(20 * 1000);
  kill_root(lead2);
  alive[lead2] = false;
  assert_int_equal(start_root(lead), 0); /* back, as a standby or leader */
  alive[lead] = true;
  int64_t acked = 0;
  for (int h = 0; h < HOSTS; h++) {
    for (int k = 0; k < PER_HOST; k++) {
      struct report rp;
      host_read(&hp[h], &rp);
      if (rp.status != 0)
        fail_msg("h%d local rank %d add: %s", rp.host, rp.local_rank, rp.text);
      acked += rp.count;
    }
  }
  assert_int_equal(acked, (int64_t)HOSTS * PER_HOST * hosts_adds_per_cmd);
  rdzv_client_t *c = client(addrs[0], "big");
  char want[32];
  snprintf(want, sizeof(want), "%lld", (long long)acked);
  assert_get(c, "ctr", want);
  rdzv_client_destroy(c);
  printf("1,000 ranks adding across a second leader kill: %lld adds "
         "acknowledged, the counter says %s\n",
         (long long)acked, want);
  for (int h = 0; h < HOSTS; h++)
    assert_int_equal(host_end(&hp[h]), 0);
}

/* ---- a deposed leader is fenced ---------------------------------------------- */

static int setup_two(void **state) {
  bool alive[NROOTS] = {true, false, false};
  if (setup_etcd() < 0 || start_root(0) < 0 || leader_of(alive) != 0 ||
      start_root(1) < 0) {
    teardown_all(state);
    return -1;
  }
  return 0;
}

/* A deposed leader, stopped past its lease: r2 takes over; when r1 runs
 * again it acknowledges nothing (the add sent to it meanwhile is applied
 * once, by r2), and r2 stays the one leader. */
static void test_stopped_leader_deposed(void **state) {
  (void)state;
  rdzv_client_t *c1 = client(root_tcp[0], "depose");
  int64_t v = 0;
  assert_int_equal(rdzv_store_add(c1, "ctr", 1, &v, 30), 0);
  assert_int_equal(v, 1);
  kill(roots[0].pid, SIGSTOP);
  bool only2[NROOTS] = {false, true, false};
  double t0 = now_s();
  assert_int_equal(leader_of(only2), 1);
  double took = now_s() - t0;
  rdzv_client_t *c2 = client(root_tcp[1], "depose");
  assert_int_equal(rdzv_store_add(c2, "ctr", 10, &v, 30), 0);
  assert_int_equal(v, 11);
  /* r1 runs again half a second after c1's add is on its socket. */
  pid_t p = fork();
  if (p == 0) {
    usleep(500 * 1000);
    kill(roots[0].pid, SIGCONT);
    _exit(0);
  }
  int rc = rdzv_store_add(c1, "ctr", 100, &v, 30);
  waitpid(p, NULL, 0);
  if (rc != 0)
    fail_msg("add through the stopped leader: %s (%s)", rdzv_strerror(rc),
             rdzv_client_last_error(c1));
  /* r1's stale state said 1: 101 would be its answer; 111 is r2's. */
  assert_int_equal(v, 111);
  assert_get(c2, "ctr", "111");
  assert_int_equal(leader_of(only2), 1);
  assert_int_equal(stats_at(root_tcp[1], "etcd.elections_won"), 1);
  assert_int_equal(stats_at(root_tcp[1], "etcd.stand_downs"), 0);
  printf("leader stopped past its 2 s lease: the standby led after %.3f s; "
         "the stopped one acknowledged nothing when it ran again\n",
         took);
  rdzv_client_destroy(c2);
  rdzv_client_destroy(c1);
}

/* A job that ends (--job-linger-ms after its last connection) leaves
 * nothing in etcd. */
static void test_finished_job_removed(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "gone");
  assert_int_equal(rdzv_store_set(c, "a", "1", 1, 0, 30), 0);
  assert_int_equal(rdzv_store_set(c, "b", "2", 1, RDZV_STORE_WRITE_ONCE, 30),
                   0);
  assert_true(etcd_count("rdzv/j/gone/") >= 3); /* a, b, the lease */
  rdzv_client_destroy(c);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; i++) {
    gone = etcd_count("rdzv/j/gone/") == 0;
    if (!gone)
      usleep(50 * 1000);
  }
  assert_true(gone);
}

static int setup_linger(void **state) {
  root_extra[0] = "--job-linger-ms=200";
  node1_extra[0] = "--job-linger-ms=200";
  return setup_one(state);
}

static int teardown_linger(void **state) {
  root_extra[0] = NULL;
  node1_extra[0] = NULL;
  return teardown_all(state);
}

/* Transactions below a small server limit: a batch of 300 keys goes as
 * many transactions, none refused, and all of it is there after a
 * restart. */
static const char *const small_txn[] = {"--max-txn-ops", "8", NULL};

static void test_batch_chunked(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "chunk");
  enum { N = 300 };
  const char *keys[N];
  struct rdzv_value vals[N];
  static char kb[N][16];
  memset(vals, 0, sizeof(vals));
  for (int i = 0; i < N; i++) {
    snprintf(kb[i], sizeof(kb[i]), "k%03d", i);
    keys[i] = kb[i];
    vals[i].data = kb[i];
    vals[i].len = strlen(kb[i]);
  }
  int rc = rdzv_store_mset(c, keys, vals, N, 0, 30);
  if (rc != 0)
    fail_msg("mset: %s (%s)", rdzv_strerror(rc), rdzv_client_last_error(c));
  int64_t txns = stats_at(root_tcp[0], "etcd.txns");
  int64_t errors = stats_at(root_tcp[0], "etcd.errors");
  printf("300 keys in one mset under --max-txn-ops 8: %lld transactions, "
         "%lld failed requests\n",
         (long long)txns, (long long)errors);
  assert_true(txns >= N / 7);
  assert_int_equal(errors, 0);
  /* Values over half of --etcd-max-request-bytes (64 KiB here) go in
   * parts: one of 300,000 bytes, and one written large then small (its
   * parts go). */
  enum { BIG = 300000 };
  char *big = malloc(BIG + 1);
  assert_non_null(big);
  for (int i = 0; i < BIG; i++)
    big[i] = (char)('a' + ((unsigned)i * 7919u + (unsigned)i / 26u) % 26u);
  big[BIG] = '\0';
  assert_int_equal(rdzv_store_set(c, "big", big, BIG, 0, 30), 0);
  assert_int_equal(rdzv_store_set(c, "big2", big, BIG / 2, 0, 30), 0);
  assert_int_equal(rdzv_store_set(c, "big2", "small", 5, 0, 30), 0);
  assert_int_equal(stats_at(root_tcp[0], "etcd.errors"), 0);
  assert_int_equal(stop_if(&roots[0]), 0);
  assert_int_equal(start_root(0), 0);
  for (int i = 0; i < N; i += 37)
    assert_get(c, kb[i], kb[i]);
  assert_get(c, kb[N - 1], kb[N - 1]);
  assert_get(c, "big", big);
  assert_get(c, "big2", "small");
  /* Only big's parts are left in etcd: ceil(300,001 / 32,768) = 10. */
  assert_int_equal(etcd_count("rdzv/j/chunk/p/"), 10);
  free(big);
  rdzv_client_destroy(c);
}

static int setup_chunked(void **state) {
  etcd_extra = small_txn;
  root_extra[0] = "--etcd-max-txn-ops=8";
  root_extra[1] = "--etcd-max-request-bytes=65536";
  return setup_one(state);
}

static int teardown_chunked(void **state) {
  etcd_extra = NULL;
  root_extra[0] = root_extra[1] = NULL;
  return teardown_all(state);
}

static void test_deposed_leader_fenced(void **state) {
  (void)state;
  rdzv_client_t *c = client(root_tcp[0], "fence");
  assert_int_equal(rdzv_store_set(c, "before", "1", 1, 0, 30), 0);
  /* The leader key goes behind r1's back (its lease still holds): r2,
   * watching, is elected. */
  char *k = etcdh_b64("rdzv/leader", 11);
  char body[200];
  snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
  free(k);
  assert_int_equal(etcdh_post(&eh, 0, "/v3/kv/deleterange", body, NULL, NULL),
                   200);
  bool only2[NROOTS] = {false, true, false};
  assert_int_equal(leader_of(only2), 1);
  assert_true(stats_reach(root_tcp[1], "etcd.elections_won", 1) >= 1);
  /* r1 watches its own key: it stands down as soon as the deletion
   * reaches it (before, it found out only at its next write's fence), so
   * a read through r1's address soon gives r2's value; the client's add
   * (sent again with its op id) is applied once, at r2. */
  rdzv_client_t *c3 = client(root_tcp[1], "fence");
  assert_int_equal(rdzv_store_set(c3, "before", "2", 1, 0, 30), 0);
  rdzv_client_destroy(c3);
  double t0 = now_s();
  bool fresh = false;
  for (int i = 0; i < 600 && !fresh; i++) {
    void *bv = NULL;
    size_t bn = 0;
    if (rdzv_store_get(c, "before", &bv, &bn, 30) == 0 && bn == 1 &&
        ((char *)bv)[0] == '2')
      fresh = true;
    rdzv_free(bv);
    if (!fresh)
      usleep(20 * 1000);
  }
  assert_true(fresh);
  printf("deposed by a deleted key: reads through it gave the new leader's "
         "value %.3f s after that value was set\n",
         now_s() - t0);
  int64_t v = 0;
  int rc = rdzv_store_add(c, "ctr", 1, &v, 30);
  if (rc != 0)
    fail_msg("add through the deposed leader: %s (%s)", rdzv_strerror(rc),
             rdzv_client_last_error(c));
  assert_int_equal(v, 1);
  rdzv_client_t *c2 = client(root_tcp[1], "fence");
  assert_get(c2, "ctr", "1");
  assert_get(c2, "before", "2");
  rdzv_client_destroy(c2);
  rdzv_client_destroy(c);
  /* Exactly one leader: r2 holds the key; r1 refuses hellos naming it. */
  assert_int_equal(leader_of(only2), 1);
  assert_int_equal(stats_at(root_tcp[1], "etcd.stand_downs"), 0);
}

/* A job loaded at a failover that nobody reopens keeps its etcd lease
 * while the new leader holds it (a write to it later must not find its
 * lease expired: the root hung on that), and a job id whose encoded form
 * is long (255 bytes of UTF-8) is served like any other. */
static void test_loaded_job_and_long_id(void **state) {
  (void)state;
  char longid[256];
  longid[0] = '\0';
  for (int i = 0; i < 28; i++) /* 28 x 9 bytes of UTF-8: 252 */
    strcat(longid, "\xe4\xbd\x9c\xe4\xb8\x9a\x25\x2f\x20");
  rdzv_client_t *c = client(root_tcp[0], "loaded");
  assert_int_equal(rdzv_store_set(c, "k", "v1", 2, 0, 30), 0);
  rdzv_client_t *cl = client(root_tcp[0], longid);
  assert_int_equal(rdzv_store_set(cl, "k", "long", 4, 0, 30), 0);
  rdzv_client_destroy(cl);
  rdzv_client_destroy(c);
  kill_root(0);
  bool only2[NROOTS] = {false, true, false};
  assert_int_equal(leader_of(only2), 1);
  sleep(5); /* past --etcd-job-ttl-s 3, nobody on the jobs */
  c = client(root_tcp[1], "loaded");
  assert_get(c, "k", "v1");
  int rc = rdzv_store_set(c, "k", "v2", 2, 0, 30);
  if (rc != 0)
    fail_msg("set to a loaded job: %s (%s)", rdzv_strerror(rc),
             rdzv_client_last_error(c));
  assert_get(c, "k", "v2");
  cl = client(root_tcp[1], longid);
  assert_get(cl, "k", "long");
  assert_int_equal(stats_at(root_tcp[1], "etcd.stand_downs"), 0);
  rdzv_client_destroy(cl);
  rdzv_client_destroy(c);
}

static int setup_two_short(void **state) {
  root_extra[0] = "--etcd-job-ttl-s=3";
  return setup_two(state);
}

static int teardown_two_short(void **state) {
  root_extra[0] = NULL;
  return teardown_all(state);
}

/* ---- etcd stopped ------------------------------------------------------------- */

/* A child that stops etcd, waits secs, and lets it run again. */
static pid_t pause_etcd(double secs) {
  pid_t etcd = etcdh_pid(&eh, 0);
  kill(etcd, SIGSTOP);
  pid_t p = fork();
  if (p == 0) {
    usleep((useconds_t)(secs * 1e6));
    kill(etcd, SIGCONT);
    _exit(0);
  }
  return p;
}

static void test_etcd_paused_within_lease(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "pause");
  assert_int_equal(rdzv_store_set(c, "a", "1", 1, 0, 30), 0);
  double t0 = now_s();
  pid_t p = pause_etcd(10);
  /* Issued while etcd is stopped: acknowledged only once it is
   * persisted, after etcd runs again. */
  int rc = rdzv_store_set(c, "b", "2", 1, 0, 60);
  if (rc != 0)
    fail_msg("set during the pause: %s (%s)", rdzv_strerror(rc),
             rdzv_client_last_error(c));
  double took = now_s() - t0;
  waitpid(p, NULL, 0);
  assert_get(c, "b", "2");
  assert_int_equal(stats_at(node1_tcp, "parent_restarts"), 0);
  printf("etcd stopped 10 s: a set issued then was acknowledged after "
         "%.3f s; the root never stood down\n",
         took);
  rdzv_client_destroy(c);
  /* Stopped (it resigns: its lease is revoked) and started again, the
   * root finds b: it was persisted. */
  assert_int_equal(stop_if(&roots[0]), 0);
  assert_int_equal(start_root(0), 0);
  rdzv_client_t *c2 = client(node1_addr, "pause");
  assert_get(c2, "b", "2");
  rdzv_client_destroy(c2);
}

static int setup_one_long(void **state) {
  snprintf(ttl_arg, sizeof(ttl_arg), "--etcd-lease-ttl-s=15");
  return setup_one(state);
}

static int teardown_long(void **state) {
  snprintf(ttl_arg, sizeof(ttl_arg), "--etcd-lease-ttl-s=2");
  return teardown_all(state);
}

static void test_lease_lost_told(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "lost");
  assert_int_equal(rdzv_store_set(c, "a", "1", 1, 0, 30), 0);
  pid_t p = pause_etcd(6); /* three lease TTLs */
  const char *keys[] = {"never"};
  double t0 = now_s();
  int rc = rdzv_store_wait(c, keys, 1, 60);
  double took = now_s() - t0;
  assert_int_equal(rc, RDZV_ELEASE_LOST);
  assert_non_null(strstr(rdzv_client_last_error(c), "etcd lease lost"));
  printf("etcd stopped past the 2 s lease: the waiting caller was told "
         "after %.3f s: %s\n",
         took, rdzv_client_last_error(c));
  waitpid(p, NULL, 0);
  /* Elected again once etcd runs: the state is there. */
  assert_get(c, "a", "1");
  rdzv_client_destroy(c);
}

/* ---- etcd with auth: a user whose role covers only the prefix ------------------ */

static void post_ok(const char *path, const char *body) {
  char *resp = NULL;
  int code = etcdh_post(&eh, 0, path, body, NULL, &resp);
  if (code != 200)
    fail_msg("%s %s -> %d %s", path, body, code, resp != NULL ? resp : "");
  free(resp);
}

static char cred_arg[200];

static int setup_auth(void **state) {
  if (setup_etcd() < 0) {
    teardown_all(state);
    return -1;
  }
  /* root (role root) and rdzv (read-write on "rdzv/" only), then auth. */
  char body[256];
  char *k = etcdh_b64("rdzv/", 5), *e = etcdh_b64("rdzv0", 5);
  post_ok("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"rootpw\"}");
  post_ok("/v3/auth/role/add", "{\"name\":\"root\"}");
  post_ok("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}");
  post_ok("/v3/auth/user/add", "{\"name\":\"rdzv\",\"password\":\"s3cret\"}");
  post_ok("/v3/auth/role/add", "{\"name\":\"rdzvrole\"}");
  snprintf(body, sizeof(body),
           "{\"name\":\"rdzvrole\",\"perm\":{\"permType\":\"READWRITE\","
           "\"key\":\"%s\",\"range_end\":\"%s\"}}",
           k, e);
  free(k);
  free(e);
  post_ok("/v3/auth/role/grant", body);
  post_ok("/v3/auth/user/grant", "{\"user\":\"rdzv\",\"role\":\"rdzvrole\"}");
  post_ok("/v3/auth/enable", "{}");
  char path[128];
  snprintf(path, sizeof(path), "%s/etcd.cred", dir);
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return -1;
  fprintf(f, "rdzv:s3cret\n");
  fclose(f);
  snprintf(cred_arg, sizeof(cred_arg), "--etcd-credentials=%s", path);
  root_extra[0] = cred_arg;
  if (start_root(0) < 0 ||
      daemon_start(&node1, dir, "n1", root_tcp[0], NULL, node1_tcp) < 0) {
    teardown_all(state);
    return -1;
  }
  daemon_unix_addr(dir, "n1", node1_addr, sizeof(node1_addr));
  return 0;
}

static int teardown_auth(void **state) {
  root_extra[0] = NULL;
  return teardown_all(state);
}

static void test_auth_prefix_only(void **state) {
  (void)state;
  rdzv_client_t *c = client(node1_addr, "auth");
  assert_int_equal(rdzv_store_set(c, "w", "once", 4, RDZV_STORE_WRITE_ONCE, 30),
                   0);
  int64_t v = 0;
  assert_int_equal(rdzv_store_add(c, "ctr", 5, &v, 30), 0);
  assert_int_equal(stats_at(root_tcp[0], "etcd.errors"), 0);
  assert_int_equal(stop_if(&roots[0]), 0);
  assert_int_equal(start_root(0), 0);
  assert_get(c, "w", "once");
  assert_get(c, "ctr", "5");
  rdzv_client_destroy(c);
  /* Without a token etcd refuses a read of the prefix: the state is only
   * reachable with the credentials the root was given. */
  char *k = etcdh_b64("rdzv/leader", 11), body[200], *resp = NULL;
  snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
  free(k);
  assert_int_not_equal(etcdh_post(&eh, 0, "/v3/kv/range", body, NULL, &resp),
                       200);
  free(resp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_restart_keeps_acknowledged,
                                      setup_one, teardown_all),
      cmocka_unit_test_setup_teardown(test_deposed_leader_fenced, setup_two,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_stopped_leader_deposed, setup_two,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_loaded_job_and_long_id,
                                      setup_two_short, teardown_two_short),
      cmocka_unit_test_setup_teardown(test_finished_job_removed, setup_linger,
                                      teardown_linger),
      cmocka_unit_test_setup_teardown(test_batch_chunked, setup_chunked,
                                      teardown_chunked),
      cmocka_unit_test_setup_teardown(test_lease_lost_told, setup_one,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_etcd_paused_within_lease,
                                      setup_one_long, teardown_long),
      cmocka_unit_test_setup_teardown(test_auth_prefix_only, setup_auth,
                                      teardown_auth),
      cmocka_unit_test_setup_teardown(test_failover_mid_rendezvous, setup_three,
                                      teardown_three),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
