/* Linearizability of the tree's store with copies of mutable keys, checked
 * on histories recorded by real clients through real daemons with faults
 * injected (tests/lin/lincheck.h is the checker).
 *
 * The tree: a root R on a fixed port; an interior node I under it (fixed
 * port); leaf nodes A and B under I (told the chain I,R); leaf C under R.
 * Daemons run with --liveness-timeout-ms 2000, --heartbeat-ms 200 and
 * --copy-lease-ms 500. Six client threads, two on each leaf's Unix socket,
 * run random sets, gets, checks, compare-and-sets, deletes and adds on
 * four keys of a fresh job per round, each recording when it called,
 * when it returned and what it got (an operation that failed has an
 * unknown outcome). Each round injects one fault a second in:
 *   none; B killed (-9) and restarted; I stopped (SIGSTOP) for 1.5 s
 *   (past its lease, and A's and B's liveness of it: they reattach to R);
 *   I killed (-9) for good (A and B reattach to R); the in-memory root
 *   killed and restarted on its port (its state is lost: the history
 *   before and the history after are each checked, an operation running
 *   across it counted as of unknown outcome in the second); and with an
 *   etcd-backed root (a real etcd member, the leader R and a standby R2
 *   that every node is told of), the leader killed (-9): one history.
 * Invariants after every round: each history is linearizable (else the
 * smallest failing window is printed), every daemon still runs (but the
 * one killed), and the clients completed operations after the fault.
 *
 * The mutant: a node started with RDZVD_TEST_MUTANT=serve-expired answers
 * from copies past their lease. A deterministic history catches it: A
 * reads k (its copy), I is stopped, past the lease a write through C
 * completes, then A reads k: the mutant answers the old value (not
 * linearizable: caught), a correct A waits until it reattached to R. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
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
#include "tests/etcd/etcd_harness.h"
#include "tests/lin/lincheck.h"

static const char *const OPTS[] = {"--liveness-timeout-ms=2000",
                                   "--heartbeat-ms=200", "--copy-lease-ms=500",
                                   "--copy-cooldown-ms=100", NULL};

enum { R, I, A, B, C, R2, NDAEMONS };
static const char *const NAMES[NDAEMONS] = {"R", "I", "A", "B", "C", "R2"};

struct tree {
  char dir[64];
  struct proc p[NDAEMONS];
  bool up[NDAEMONS];
  int port_r, port_i, port_r2;
  char tcp[NDAEMONS][64];
  /* Set: R and R2 are etcd-backed roots (R leads, R2 stands by) on
   * eh's member, and every node is told both. */
  bool etcd;
  struct etcdh eh;
};

static struct tree T;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Starts daemon i with its fixed port (R, I, R2) and parent chain. */
static int start(int i, bool mutant) {
  char listen[64], parent[160], roots[80], etcd[160];
  const char *extra[12];
  int n = 0;
  for (const char *const *o = OPTS; *o != NULL; o++)
    extra[n++] = *o;
  if (i == R || i == I || i == R2) {
    snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d",
             i == R   ? T.port_r
             : i == I ? T.port_i
                      : T.port_r2);
    extra[n++] = listen;
  }
  if (T.etcd && (i == R || i == R2)) {
    snprintf(etcd, sizeof(etcd), "--etcd=%s", etcdh_endpoints(&T.eh));
    extra[n++] = etcd;
    extra[n++] = "--etcd-lease-ttl-s=2";
  }
  extra[n] = NULL;
  if (T.etcd)
    snprintf(roots, sizeof(roots), "127.0.0.1:%d,127.0.0.1:%d", T.port_r,
             T.port_r2);
  else
    snprintf(roots, sizeof(roots), "127.0.0.1:%d", T.port_r);
  const char *par = NULL;
  if (i == I || i == C) {
    par = roots;
  } else if (i == A || i == B) {
    snprintf(parent, sizeof(parent), "127.0.0.1:%d,%s", T.port_i, roots);
    par = parent;
  }
  if (mutant)
    setenv("RDZVD_TEST_MUTANT", "serve-expired", 1);
  int rc = daemon_start(&T.p[i], T.dir, NAMES[i], par, extra, T.tcp[i]);
  unsetenv("RDZVD_TEST_MUTANT");
  T.up[i] = rc == 0;
  return rc;
}

static void kill9(int i) {
  kill(T.p[i].pid, SIGKILL);
  proc_wait(&T.p[i]);
  T.up[i] = false;
}

static int setup(void **state) {
  (void)state;
  snprintf(T.dir, sizeof(T.dir), "/tmp/rdzv-lin-XXXXXX");
  if (mkdtemp(T.dir) == NULL)
    return -1;
  T.port_r = free_port();
  T.port_i = free_port();
  while (T.port_i == T.port_r)
    T.port_i = free_port();
  T.port_r2 = free_port();
  while (T.port_r2 == T.port_r || T.port_r2 == T.port_i)
    T.port_r2 = free_port();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rm_rf(T.dir);
  return 0;
}

static void start_all(bool mutant_a) {
  for (int i = 0; i < NDAEMONS; i++) {
    if (i == R2 && !T.etcd)
      continue;
    /* R leads before R2 starts: the nodes' first choice is the leader. */
    if (i == R2)
      assert_true(stats_reach(T.tcp[R], "etcd.elections_won", 1) >= 1);
    assert_int_equal(start(i, i == A && mutant_a), 0);
  }
}

static void stop_all(void) {
  for (int i = 0; i < NDAEMONS; i++)
    if (T.up[i]) {
      kill(T.p[i].pid, SIGCONT);
      proc_stop(&T.p[i]);
      T.up[i] = false;
    }
}

/* Each test's teardown, also after a failed assertion. */
static int stop_all_td(void **state) {
  (void)state;
  stop_all();
  return 0;
}

/* ---- recording clients ------------------------------------------------------ */

#define MAX_OPS 20000
#define NWORKERS 6

static struct lin_op ops[MAX_OPS];
static size_t nops;
static pthread_mutex_t ops_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool stop_flag;
static atomic_uint_fast64_t after_fault; /* ops completed after the fault */
static atomic_uint_fast64_t fault_ns;

static void record(const struct lin_op *op) {
  pthread_mutex_lock(&ops_mu);
  bool kept = nops < MAX_OPS;
  if (kept)
    ops[nops++] = *op;
  pthread_mutex_unlock(&ops_mu);
  uint64_t f = atomic_load(&fault_ns);
  if (kept && f != 0 && op->call_ns > f && op->ret_ns != LIN_NO_RETURN)
    atomic_fetch_add(&after_fault, 1);
}

static rdzv_client_t *client(const char *job, int node) {
  char addr[128];
  daemon_unix_addr(T.dir, NAMES[node], addr, sizeof(addr));
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

/* An answer that says what happened (the rest: outcome unknown). */
static bool definite(int rc) {
  return rc == 0 || rc == RDZV_ENOKEY || rc == RDZV_ECAS_FAILED;
}

/* One operation: fills op's results and times; returns its status. */
static int run_op(rdzv_client_t *c, struct lin_op *op) {
  const double to = 2.5;
  void *v = NULL;
  size_t len = 0;
  int rc = 0;
  op->call_ns = now_ns();
  switch (op->kind) {
  case LIN_SET:
    rc = rdzv_store_set(c, op->key, op->arg, strlen(op->arg), 0, to);
    break;
  case LIN_GET:
    rc = rdzv_store_get(c, op->key, &v, &len, to);
    op->found = rc == 0;
    break;
  case LIN_CHECK: {
    const char *k[1] = {op->key};
    struct rdzv_value *vals = NULL;
    rc = rdzv_store_mget(c, k, 1, &vals, to);
    op->found = rc == 0;
    if (rc == 0)
      rdzv_values_free(vals, 1);
    break;
  }
  case LIN_CAS:
    rc = rdzv_store_cas(c, op->key, op->arg, strlen(op->arg), op->arg2,
                        strlen(op->arg2), &v, &len, to);
    op->found = rc == 0;
    break;
  case LIN_DELETE: {
    int del = 0;
    rc = rdzv_store_delete(c, op->key, &del, to);
    op->found = del != 0;
    break;
  }
  case LIN_ADD:
    rc = rdzv_store_add(c, op->key, op->delta, &op->num, to);
    break;
  default:
    rc = -EINVAL;
  }
  op->ret_ns = definite(rc) ? now_ns() : LIN_NO_RETURN;
  if (v != NULL)
    snprintf(op->out, sizeof(op->out), "%.*s", (int)len, (const char *)v);
  rdzv_free(v);
  return rc;
}

struct worker {
  pthread_t t;
  int id, node;
  const char *job;
};

static uint64_t xs(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  rdzv_client_t *c = client(w->job, w->node);
  uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
  char last[LIN_VAL_MAX] = "";
  for (int seq = 0; !atomic_load(&stop_flag); seq++) {
    struct lin_op op;
    memset(&op, 0, sizeof(op));
    op.client = w->id;
    /* k0 is written often (its copies rarely live), k1 and k2 mostly
     * read (answered from copies, now and then invalidated), n is a
     * counter. */
    uint64_t r = xs(&rng) % 100, which = xs(&rng) % 10;
    bool counter = which == 0, cold = which >= 4;
    if (counter)
      snprintf(op.key, sizeof(op.key), "n");
    else
      snprintf(op.key, sizeof(op.key), "k%d", cold ? 1 + (int)(which % 2) : 0);
    if (cold && r >= 6)
      r = 30 + r % 50; /* a read: get or check */
    if (counter) {
      op.kind = r < 40 ? LIN_ADD : r < 75 ? LIN_GET : LIN_CHECK;
      op.delta = 1 + (int64_t)(xs(&rng) % 3);
    } else if (r < 25) {
      op.kind = LIN_SET;
      snprintf(op.arg, sizeof(op.arg), "c%d-%d", w->id, seq);
    } else if (r < 55) {
      op.kind = LIN_GET;
    } else if (r < 80) {
      op.kind = LIN_CHECK;
    } else if (r < 93) {
      op.kind = LIN_CAS;
      snprintf(op.arg, sizeof(op.arg), "%s", last);
      snprintf(op.arg2, sizeof(op.arg2), "c%d-%d", w->id, seq);
    } else {
      op.kind = LIN_DELETE;
    }
    int rc = run_op(c, &op);
    if (op.kind == LIN_GET && rc == 0)
      snprintf(last, sizeof(last), "%s", op.out);
    record(&op);
    if (!definite(rc)) {
      /* A fresh connection (its node may be back, or another way). */
      rdzv_client_destroy(c);
      sleep_ms(20);
      c = client(w->job, w->node);
    }
    /* A pause of 1-4 ms: each key's history stays within what the
     * checker searches (LIN_MAX_OPS). */
    struct timespec ts = {0, (long)(1000 + xs(&rng) % 3000) * 1000L};
    nanosleep(&ts, NULL);
  }
  rdzv_client_destroy(c);
  return NULL;
}

static void run_workers(const char *job, void (*fault)(void), int before_ms,
                        int after_ms) {
  struct worker w[NWORKERS];
  nops = 0;
  atomic_store(&stop_flag, false);
  atomic_store(&after_fault, 0);
  atomic_store(&fault_ns, 0);
  static const int nodes[NWORKERS] = {A, A, B, B, C, C};
  for (int i = 0; i < NWORKERS; i++) {
    w[i].id = i;
    w[i].node = nodes[i];
    w[i].job = job;
    assert_int_equal(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
  }
  sleep_ms(before_ms);
  atomic_store(&fault_ns, now_ns());
  if (fault != NULL)
    fault();
  sleep_ms(after_ms);
  atomic_store(&stop_flag, true);
  for (int i = 0; i < NWORKERS; i++)
    pthread_join(w[i].t, NULL);
}

/* Checks ops[0..n): prints the verdict and the window when it fails. */
static int verdict(const char *what, struct lin_op *h, size_t n) {
  size_t known = 0;
  for (size_t i = 0; i < n; i++)
    known += h[i].ret_ns != LIN_NO_RETURN;
  int rc = lin_check(h, n, stdout);
  printf("%s: %zu operations (%zu completed, %" PRIuFAST64
         " after the fault): %s\n",
         what, n, known, atomic_load(&after_fault),
         rc == 1   ? "linearizable"
         : rc == 0 ? "NOT linearizable"
                   : "not checked");
  fflush(stdout);
  return rc;
}

static void check_alive(void) {
  for (int i = 0; i < NDAEMONS; i++) {
    if (!T.up[i])
      continue;
    int st;
    pid_t p = waitpid(T.p[i].pid, &st, WNOHANG);
    if (p != 0)
      printf("daemon %s ended (status %d)\n", NAMES[i], st);
    assert_int_equal(p, 0);
  }
}

/* ---- faults ---------------------------------------------------------------- */

static void fault_kill_b(void) {
  kill9(B);
  sleep_ms(300);
  assert_int_equal(start(B, false), 0);
}

static void fault_stop_i(void) {
  kill(T.p[I].pid, SIGSTOP);
  sleep_ms(1500);
  kill(T.p[I].pid, SIGCONT);
}

static void fault_kill_i(void) { kill9(I); }

static uint64_t root_down_ns, root_up_ns;
static void fault_restart_root(void) {
  root_down_ns = now_ns();
  kill9(R);
  sleep_ms(200);
  root_up_ns = now_ns();
  assert_int_equal(start(R, false), 0);
}

/* Reads answered from copies, and invalidations applied, at the leaves
 * that run (daemon-wide counters). */
static int64_t leaves_stat(const char *path) {
  int64_t sum = 0;
  for (int i = A; i <= C; i++)
    if (T.up[i]) {
      int64_t v = stats_at(T.tcp[i], path);
      sum += v > 0 ? v : 0;
    }
  return sum;
}

static void round_of(const char *name, void (*fault)(void), int after_ms) {
  char job[64];
  snprintf(job, sizeof(job), "lin-%s", name);
  int64_t hits = leaves_stat("copies.hits");
  int64_t invs = leaves_stat("copies.invalidations_received");
  run_workers(job, fault, 1000, after_ms);
  check_alive();
  assert_true(atomic_load(&after_fault) > 0);
  /* Copies were served and invalidated during the round (counters of a
   * restarted leaf start again: a lower bound). */
  hits = leaves_stat("copies.hits") - hits;
  invs = leaves_stat("copies.invalidations_received") - invs;
  printf("round '%s': %" PRId64 " reads from copies, %" PRId64
         " invalidations at the leaves\n",
         name, hits, invs);
  assert_true(hits > 0);
  assert_true(invs > 0);
  char what[96];
  snprintf(what, sizeof(what), "round '%s'", name);
  assert_int_equal(verdict(what, ops, nops), 1);
}

static void test_rounds(void **state) {
  (void)state;
  start_all(false);
  round_of("none", NULL, 2500);
  round_of("kill-leaf", fault_kill_b, 2500);
  round_of("stop-interior", fault_stop_i, 2500);
  round_of("kill-interior", fault_kill_i, 2500);
  stop_all();
}

/* The in-memory root's state dies with it: the history before the kill
 * and the one after the restart are checked apart. */
static void test_root_restart(void **state) {
  (void)state;
  start_all(false);
  run_workers("lin-root", fault_restart_root, 1000, 2500);
  check_alive();
  assert_true(atomic_load(&after_fault) > 0);
  static struct lin_op before[MAX_OPS], after[MAX_OPS];
  size_t nb = 0, na = 0;
  for (size_t i = 0; i < nops; i++) {
    struct lin_op o = ops[i];
    bool read = o.kind == LIN_GET || o.kind == LIN_CHECK;
    if (o.call_ns < root_down_ns) {
      struct lin_op b = o;
      if (b.ret_ns != LIN_NO_RETURN && b.ret_ns > root_down_ns)
        b.ret_ns = LIN_NO_RETURN; /* what it saw may be the new root's */
      before[nb++] = b;
    }
    if (o.ret_ns == LIN_NO_RETURN || o.ret_ns > root_up_ns) {
      if (o.call_ns < root_up_ns) {
        if (read)
          continue; /* it may have read the old root */
        o.call_ns = root_up_ns;
        o.ret_ns = LIN_NO_RETURN; /* applied to the new root, or not */
      }
      after[na++] = o;
    }
  }
  assert_int_equal(verdict("before the root's restart", before, nb), 1);
  assert_int_equal(verdict("after the root's restart", after, na), 1);
  stop_all();
}

/* The etcd-backed root: R leads, R2 stands by; R is killed (-9) a second
 * into the round. The state is etcd's, so the whole history is checked
 * as one: nothing acknowledged by R is lost, and no node serves a copy R
 * granted once R2 leads (R2 holds writes for a lease after it won; nodes
 * that lost their parent drop their copies and invalidate their
 * children's). */
static void fault_kill_leader(void) { kill9(R); }

static void test_etcd_leader_killed(void **state) {
  (void)state;
  T.etcd = true;
  assert_int_equal(etcdh_start(&T.eh, NULL, NULL), 0);
  start_all(false);
  round_of("etcd-leader-killed", fault_kill_leader, 6000);
  int64_t won = stats_at(T.tcp[R2], "etcd.elections_won");
  printf("R2 elections won after the leader's kill: %" PRId64 "\n", won);
  assert_true(won >= 1);
  stop_all();
}

static int stop_etcd_td(void **state) {
  stop_all_td(state);
  if (T.etcd)
    etcdh_stop_all(&T.eh);
  T.etcd = false;
  return 0;
}

/* ---- the mutant --------------------------------------------------------------- */

static int mutant_history(bool mutant) {
  start_all(mutant);
  const char *job = mutant ? "lin-mutant" : "lin-correct";
  rdzv_client_t *ca = client(job, A), *cc = client(job, C);
  struct lin_op h[5];
  memset(h, 0, sizeof(h));
  for (int i = 0; i < 5; i++) {
    snprintf(h[i].key, sizeof(h[i].key), "k");
    h[i].client = i == 3 ? 1 : 0;
  }
  h[0].kind = LIN_SET;
  snprintf(h[0].arg, sizeof(h[0].arg), "v1");
  h[1].kind = h[2].kind = h[4].kind = LIN_GET;
  h[3].kind = LIN_SET;
  snprintf(h[3].arg, sizeof(h[3].arg), "v2");
  assert_int_equal(run_op(ca, &h[0]), 0);
  assert_int_equal(run_op(ca, &h[1]), 0);
  /* A's lease comes with the ping its copy's grant prompted (through
   * I, whose own lease comes the same way): a heartbeat or two. */
  sleep_ms(500);
  assert_int_equal(run_op(ca, &h[2]), 0); /* from A's copy */
  int64_t hits = stats_at(T.tcp[A], "copies.hits");
  assert_true(hits >= 1);
  /* I stops; past the lease (500 ms) the root no longer waits for it. */
  kill(T.p[I].pid, SIGSTOP);
  sleep_ms(700);
  assert_int_equal(run_op(cc, &h[3]), 0);
  int rc = run_op(ca, &h[4]);
  kill(T.p[I].pid, SIGCONT);
  printf("%s A read '%s' (status %d) after v2 was set\n",
         mutant ? "the mutant" : "a correct", h[4].out, rc);
  rdzv_client_destroy(ca);
  rdzv_client_destroy(cc);
  int v = verdict(mutant ? "mutant" : "correct", h, 5);
  stop_all();
  return v;
}

static void test_mutant_caught(void **state) {
  (void)state;
  assert_int_equal(mutant_history(false), 1);
  assert_int_equal(mutant_history(true), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_mutant_caught, stop_all_td),
      cmocka_unit_test_teardown(test_rounds, stop_all_td),
      cmocka_unit_test_teardown(test_root_restart, stop_all_td),
      cmocka_unit_test_teardown(test_etcd_leader_killed, stop_etcd_td),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
