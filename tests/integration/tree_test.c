/* Integration test with real processes: a root, 4 nodes under it and 16
 * nodes under those (fan-out 4, two levels of nodes), and 1,000 clients in
 * 4 rdzv-swarm processes on the 16 leaf nodes' Unix sockets. Checks what
 * the store promises: one key set once reaches every waiter while the root
 * sees at most fan-out waits; 1,000 combined adds give exactly 1..1,000;
 * barrier and gather complete with O(fan-out) messages at the root; a
 * barrier or gather that times out names exactly the members missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

#define FANOUT 4
#define NL1 FANOUT
#define NL2 (FANOUT * FANOUT)
#define NCLIENTS 1000
#define NSWARMS 4
#define RDZVD "tools/rdzvd"
#define SWARM "tools/rdzv-swarm"

struct tree {
  char dir[64];
  struct proc root, l1[NL1], l2[NL2];
  char root_addr[64];
  char l1_addr[NL1][64];
  char leaf_addrs[NL2 * 96];
  int fds_before;
};

static struct tree T;

static int start_daemon(struct proc *p, const char *name, const char *parent,
                        char *addr_out) {
  char port_file[128], unix_path[128], pf_arg[160], un_arg[160];
  snprintf(port_file, sizeof(port_file), "%s/%s.port", T.dir, name);
  snprintf(unix_path, sizeof(unix_path), "%s/%s.sock", T.dir, name);
  snprintf(pf_arg, sizeof(pf_arg), "--port-file=%s", port_file);
  snprintf(un_arg, sizeof(un_arg), "--unix=%s", unix_path);
  char parent_arg[96], name_arg[64];
  snprintf(parent_arg, sizeof(parent_arg), "--parent=%s", parent ? parent : "");
  snprintf(name_arg, sizeof(name_arg), "--name=%s", name);
  char *argv[] = {RDZVD,
                  parent ? "--role=node" : "--role=root",
                  "--listen=127.0.0.1:0",
                  pf_arg,
                  un_arg,
                  name_arg,
                  "--flush-ms=5",
                  "--flush-max-ms=50",
                  "--log-level=0",
                  "--hello-timeout-ms=500",
                  parent ? parent_arg : NULL,
                  NULL};
  if (proc_start(p, argv, 0) < 0)
    return -1;
  int port = wait_port_file(port_file, 30);
  if (port < 0)
    return -1;
  snprintf(addr_out, 64, "127.0.0.1:%d", port);
  return 0;
}

static int setup_tree(void **state) {
  (void)state;
  T.fds_before = count_open_fds();
  snprintf(T.dir, sizeof(T.dir), "/tmp/rdzv-tree-XXXXXX");
  if (mkdtemp(T.dir) == NULL)
    return -1;
  if (start_daemon(&T.root, "root", NULL, T.root_addr) < 0)
    return -1;
  for (int i = 0; i < NL1; i++) {
    char name[16];
    snprintf(name, sizeof(name), "n1-%d", i);
    if (start_daemon(&T.l1[i], name, T.root_addr, T.l1_addr[i]) < 0)
      return -1;
  }
  size_t off = 0;
  for (int i = 0; i < NL2; i++) {
    char name[16], addr[64];
    snprintf(name, sizeof(name), "n2-%d", i);
    if (start_daemon(&T.l2[i], name, T.l1_addr[i / FANOUT], addr) < 0)
      return -1;
    off += (size_t)snprintf(T.leaf_addrs + off, sizeof(T.leaf_addrs) - off,
                            "%sunix:%s/%s.sock", i ? "," : "", T.dir, name);
  }
  return 0;
}

static int teardown_tree(void **state) {
  (void)state;
  int bad = 0;
  /* Every daemon must stop cleanly on SIGTERM: exit status 0 (under ASan,
   * a leak makes it non-zero). */
  for (int i = 0; i < NL2; i++)
    bad |= proc_stop(&T.l2[i]) != 0;
  for (int i = 0; i < NL1; i++)
    bad |= proc_stop(&T.l1[i]) != 0;
  bad |= proc_stop(&T.root) != 0;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", T.dir);
  bad |= system(cmd) != 0;
  bad |= count_open_fds() != T.fds_before;
  return bad ? -1 : 0;
}

struct swarms {
  struct proc p[NSWARMS];
};

/* Starts NSWARMS swarms of NCLIENTS/NSWARMS clients each (members
 * 0..NCLIENTS-1 in all, spread over the 16 leaf nodes). With --sync each
 * swarm connects all its clients, says "connected N" and waits for a line
 * on stdin; only when every swarm has connected are they all let go, so
 * that the 1,000 submissions reach the leaf nodes as one burst (swarms
 * started one after another would otherwise submit seconds apart on a
 * loaded machine, and the nodes would rightly forward each trickle on
 * its own, which is not what the combining bounds below are about). */
static void start_swarms(struct swarms *sw, const char *scenario,
                         const char *arg, const char *count) {
  char nper[24];
  int in_fd[NSWARMS];
  snprintf(nper, sizeof(nper), "%d", NCLIENTS / NSWARMS);
  for (int i = 0; i < NSWARMS; i++) {
    char base[24];
    snprintf(base, sizeof(base), "%d", i * (NCLIENTS / NSWARMS));
    char *argv[] = {
        SWARM,       "--addrs", T.leaf_addrs,     "--job",     "tree-job",
        "--clients", nper,      "--member-base",  base,        "--timeout",
        "120",       "--sync",  (char *)scenario, (char *)arg, (char *)count,
        NULL};
    assert_int_equal(proc_start_stdin(&sw->p[i], argv, &in_fd[i]), 0);
  }
  for (int i = 0; i < NSWARMS; i++) {
    char line[64];
    assert_true(proc_read_line(&sw->p[i], line, sizeof(line)) > 0);
    assert_true(strncmp(line, "connected ", 10) == 0);
  }
  for (int i = 0; i < NSWARMS; i++) {
    assert_int_equal(write(in_fd[i], "go\n", 3), 3);
    close(in_fd[i]);
  }
}

/* Returns the swarms' concatenated stdout; asserts they all exited 0. */
static char *finish_swarms(struct swarms *sw) {
  size_t cap = 1 << 16, len = 0;
  char *all = calloc(1, cap);
  assert_non_null(all);
  for (int i = 0; i < NSWARMS; i++) {
    char *out = proc_read_all(&sw->p[i]);
    assert_non_null(out);
    size_t n = strlen(out);
    while (len + n + 1 > cap) {
      cap *= 2;
      all = realloc(all, cap);
      assert_non_null(all);
    }
    memcpy(all + len, out, n + 1);
    len += n;
    free(out);
    assert_int_equal(proc_wait(&sw->p[i]), 0);
  }
  return all;
}

static char *run_swarms(const char *scenario, const char *arg,
                        const char *count) {
  struct swarms sw;
  start_swarms(&sw, scenario, arg, count);
  return finish_swarms(&sw);
}

/* Counts lines of out equal to line. */
static int count_lines(const char *out, const char *line) {
  int n = 0;
  size_t ll = strlen(line);
  for (const char *p = out; (p = strstr(p, line)) != NULL; p += ll)
    if ((p == out || p[-1] == '\n') && (p[ll] == '\n' || p[ll] == '\0'))
      n++;
  return n;
}

static int64_t leaf_sum(const char *path) {
  int64_t sum = 0;
  for (int i = 0; i < NL2; i++) {
    char addr[128];
    snprintf(addr, sizeof(addr), "unix:%s/n2-%d.sock", T.dir, i);
    int64_t v = stats_at(addr, path);
    if (v < 0)
      return -1;
    sum += v;
  }
  return sum;
}

static rdzv_client_t *connect_to(const char *addr) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "tree-job";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

/* 1,000 clients wait on one key; one client sets it later. */
static void test_wait_one_key(void **state) {
  (void)state;
  int64_t root_waits = stats_at(T.root_addr, "ops.wait.received");
  int64_t leaf_waits = leaf_sum("ops.wait.received");
  struct swarms sw;
  start_swarms(&sw, "wait", "the/key", NULL);
  /* Set the key only once every wait has reached its leaf node. */
  struct timespec ts = {0, 20 * 1000 * 1000};
  while (leaf_sum("ops.wait.received") - leaf_waits < NCLIENTS)
    nanosleep(&ts, NULL);
  rdzv_client_t *c = connect_to(T.l1_addr[2]);
  assert_int_equal(rdzv_store_set(c, "the/key", "v", 1, 0, 30), 0);
  rdzv_client_destroy(c);
  char *out = finish_swarms(&sw);
  char line[32];
  snprintf(line, sizeof(line), "wait ok %d", NCLIENTS / NSWARMS);
  assert_int_equal(count_lines(out, line), NSWARMS);
  free(out);
  int64_t got = stats_at(T.root_addr, "ops.wait.received") - root_waits;
  printf("root received %" PRId64 " waits for %d waiting clients\n", got,
         NCLIENTS);
  assert_true(got >= 1 && got <= FANOUT);
}

/* A write-once key read by 1,000 clients: each node forwards one read
 * (the others join it), and a second round is served from the nodes'
 * caches without reaching the root. */
static void test_write_once_cached(void **state) {
  (void)state;
  rdzv_client_t *c = connect_to(T.root_addr);
  assert_int_equal(rdzv_store_set(c, "uid/world/1", "id-bytes", 8,
                                  RDZV_STORE_WRITE_ONCE, 30),
                   0);
  assert_int_equal(
      rdzv_store_set(c, "uid/world/1", "other", 5, RDZV_STORE_WRITE_ONCE, 30),
      RDZV_EWRITE_ONCE);
  rdzv_client_destroy(c);
  int64_t root_gets = stats_at(T.root_addr, "ops.get.received");
  int64_t hits = leaf_sum("cache_hits");
  char line[32];
  snprintf(line, sizeof(line), "get ok %d", NCLIENTS / NSWARMS);
  char *out = run_swarms("get", "uid/world/1", NULL);
  assert_int_equal(count_lines(out, line), NSWARMS);
  free(out);
  int64_t first = stats_at(T.root_addr, "ops.get.received") - root_gets;
  printf("root received %" PRId64 " reads for %d readers\n", first, NCLIENTS);
  assert_true(first >= 1 && first <= FANOUT);
  out = run_swarms("get", "uid/world/1", NULL);
  assert_int_equal(count_lines(out, line), NSWARMS);
  free(out);
  int64_t second = stats_at(T.root_addr, "ops.get.received") - root_gets;
  assert_int_equal(second, first); /* all from the leaves' caches */
  assert_true(leaf_sum("cache_hits") - hits >= NCLIENTS);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* 1,000 clients add 1 to one counter through the tree. */
static void test_add_combined(void **state) {
  (void)state;
  int64_t root_adds = stats_at(T.root_addr, "ops.add.received");
  char *out = run_swarms("add", "the/counter", NULL);
  int64_t vals[NCLIENTS + 1];
  int n = 0;
  for (char *save = NULL, *l = strtok_r(out, "\n", &save); l != NULL;
       l = strtok_r(NULL, "\n", &save)) {
    if (strncmp(l, "connected", 9) == 0)
      continue;
    assert_true(n < NCLIENTS);
    vals[n++] = strtoll(l, NULL, 10);
  }
  free(out);
  assert_int_equal(n, NCLIENTS);
  qsort(vals, (size_t)n, sizeof(vals[0]), cmp_i64);
  for (int i = 0; i < n; i++)
    assert_int_equal(vals[i], i + 1); /* exactly 1..1000, once each */
  rdzv_client_t *c = connect_to(T.root_addr);
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, "the/counter", &v, &len, 30), 0);
  assert_string_equal((char *)v, "1000");
  rdzv_free(v);
  rdzv_client_destroy(c);
  int64_t got = stats_at(T.root_addr, "ops.add.received") - root_adds;
  printf("root received %" PRId64 " adds for %d adding clients\n", got,
         NCLIENTS);
  /* Each node sends an idle counter's first add up at once (a lone add
   * waits for nothing), then combines the burst behind it over quiet
   * intervals: a few adds per child, against 1,000 without the tree. */
  assert_true(got >= 1 && got <= 16 * FANOUT);
}

static void run_collective(const char *kind, const char *name) {
  char path[64], count[16], line[32];
  snprintf(path, sizeof(path), "ops.%s.received", kind);
  snprintf(count, sizeof(count), "%d", NCLIENTS);
  int64_t before = stats_at(T.root_addr, path);
  char *out = run_swarms(kind, name, count);
  snprintf(line, sizeof(line), "%s ok %d", kind, NCLIENTS / NSWARMS);
  assert_int_equal(count_lines(out, line), NSWARMS);
  free(out);
  int64_t got = stats_at(T.root_addr, path) - before;
  printf("root received %" PRId64 " %s messages for %d members\n", got, kind,
         NCLIENTS);
  assert_true(got >= 1 && got <= 8 * FANOUT);
}

static void test_barrier(void **state) {
  (void)state;
  run_collective("barrier", "the/barrier");
  /* A member that gives up after completion learns it had completed, and
   * the barrier stays completed for everyone. */
  rdzv_client_t *c = connect_to(T.l1_addr[1]);
  int done = 0;
  assert_int_equal(rdzv_store_collective_give_up(c, "the/barrier", 0,
                                                 "late give-up", &done, 30),
                   0);
  assert_int_equal(done, 1);
  assert_int_equal(rdzv_store_barrier(c, "the/barrier", 7, NCLIENTS, 30), 0);
  rdzv_client_destroy(c);
}

/* Each swarm client checks that its result holds all 1,000 contributions
 * in member order ("m0".."m999"). */
static void test_gather(void **state) {
  (void)state;
  run_collective("gather", "the/gather");
}

/* ---- missing members named ------------------------------------------------ */

#define SHORT_COUNT 12
struct member_run {
  int member;
  int gather;
  int rc;
  char err[512];
  uint64_t count;   /* 0: SHORT_COUNT */
  const char *name; /* NULL: "short/barrier" or "short/gather" */
  double timeout_s; /* 0: 1.5 */
};

/* One member on leaf node (member % 16), through two levels of nodes. */
static void *run_member(void *arg) {
  struct member_run *m = arg;
  char addr[128];
  snprintf(addr, sizeof(addr), "unix:%s/n2-%d.sock", T.dir, m->member % NL2);
  rdzv_client_t *c = connect_to(addr);
  if (m->name != NULL) {
    m->rc = rdzv_store_barrier(c, m->name, (uint64_t)m->member, m->count,
                               m->timeout_s);
  } else if (m->gather) {
    struct rdzv_value *vals = NULL;
    char data[16];
    snprintf(data, sizeof(data), "m%d", m->member);
    m->rc = rdzv_store_gather(c, "short/gather", (uint64_t)m->member,
                              SHORT_COUNT, data, strlen(data), &vals, 1.5);
    rdzv_values_free(vals, SHORT_COUNT);
  } else {
    m->rc = rdzv_store_barrier(c, "short/barrier", (uint64_t)m->member,
                               SHORT_COUNT, 1.5);
  }
  snprintf(m->err, sizeof(m->err), "%s", rdzv_client_last_error(c));
  rdzv_client_destroy(c);
  return NULL;
}

/* Runs the members listed (-1 ends) at once and waits for all of them. */
static void run_members(const int *ids, int gather, struct member_run *out) {
  pthread_t th[SHORT_COUNT];
  int n = 0;
  for (; ids[n] >= 0; n++) {
    out[n] = (struct member_run){.member = ids[n], .gather = gather};
    assert_int_equal(pthread_create(&th[n], NULL, run_member, &out[n]), 0);
  }
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
}

static void missing_named(int gather) {
  const char *name = gather ? "short/gather" : "short/barrier";
  const char *kind = gather ? "gather" : "barrier";
  /* 10 of 12 members come, spread over the leaves; 3 and 11 do not. */
  static const int early[] = {0, 1, 2, 4, 5, 6, 7, 8, 9, 10, -1};
  static const int late[] = {3, 11, -1};
  struct member_run runs[SHORT_COUNT];
  char want[128];
  run_members(early, gather, runs);
  /* Each member either hit its own deadline and gave up (it asks the root
   * who is missing), or was told by the root that another member gave up
   * first: the same members are named either way. */
  snprintf(want, sizeof(want), "%s '%s'", kind, name);
  for (int i = 0; i < 10; i++) {
    print_message("member %d: %s\n", runs[i].member, runs[i].err);
    assert_int_equal(runs[i].rc, RDZV_EDEADLINE);
    assert_non_null(strstr(runs[i].err, want));
    assert_non_null(strstr(runs[i].err, "2 of 12 members missing: 3, 11"));
  }
  /* The same answer from the root directly. */
  rdzv_client_t *c = connect_to(T.root_addr);
  uint64_t ids[4], arrived = 0, count = 0;
  size_t n = 0;
  assert_int_equal(rdzv_store_collective_missing(c, name, gather, ids, 4, &n,
                                                 &arrived, &count, 30),
                   0);
  assert_int_equal(n, 2);
  assert_int_equal(ids[0], 3);
  assert_int_equal(ids[1], 11);
  assert_int_equal(arrived, 10);
  assert_int_equal(count, 12);
  /* At most the number asked for. */
  assert_int_equal(rdzv_store_collective_missing(c, name, gather, ids, 1, &n,
                                                 NULL, NULL, 30),
                   0);
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], 3);
  /* It failed for good: the late two are told at once (they must not go
   * on while the others gave up), and are not counted. */
  run_members(late, gather, runs);
  for (int i = 0; i < 2; i++) {
    print_message("late member %d: %s\n", runs[i].member, runs[i].err);
    assert_int_equal(runs[i].rc, RDZV_EDEADLINE);
    assert_non_null(strstr(runs[i].err, "failed: member "));
    assert_non_null(strstr(runs[i].err, "gave up at its deadline"));
  }
  assert_int_equal(rdzv_store_collective_missing(c, name, gather, ids, 4, &n,
                                                 &arrived, &count, 30),
                   0);
  assert_int_equal(n, 2);
  assert_int_equal(arrived, 10);
  assert_int_equal(count, 12);
  /* A name nobody used: count unknown; the other kind is another name. */
  assert_int_equal(rdzv_store_collective_missing(c, name, !gather, ids, 4, &n,
                                                 &arrived, &count, 30),
                   0);
  assert_int_equal(n, 0);
  assert_int_equal(count, 0);
  assert_int_equal(rdzv_store_collective_missing(c, name, gather, ids, 0, &n,
                                                 NULL, NULL, 30),
                   -EINVAL);
  rdzv_client_destroy(c);
}

/* Members that disagree on the count: every one of them fails at once
 * with both counts, not only the odd one out (members 0 and 1 say 4 and
 * come first, through two different leaves; member 2 says 5). */
static void test_count_mismatch_fails_all(void **state) {
  (void)state;
  struct member_run runs[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    runs[i] = (struct member_run){.member = i,
                                  .count = i < 2 ? 4 : 5,
                                  .name = "odd/count",
                                  .timeout_s = 60};
    assert_int_equal(pthread_create(&th[i], NULL, run_member, &runs[i]), 0);
    if (i == 1) { /* 0 and 1 are in before 2 comes */
      rdzv_client_t *c = connect_to(T.root_addr);
      uint64_t ids[4], arrived = 0;
      size_t n = 0;
      for (int tries = 0; arrived < 2 && tries < 3000; tries++) {
        assert_int_equal(rdzv_store_collective_missing(
                             c, "odd/count", 0, ids, 4, &n, &arrived, NULL, 30),
                         0);
        if (arrived < 2) {
          struct timespec ts = {0, 10 * 1000 * 1000};
          nanosleep(&ts, NULL);
        }
      }
      assert_int_equal(arrived, 2);
      rdzv_client_destroy(c);
    }
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    print_message("member %d: %s\n", i, runs[i].err);
    assert_int_equal(runs[i].rc, RDZV_ECOUNT_MISMATCH);
    assert_non_null(strstr(runs[i].err, "disagree on the member count: 4 "
                                        "(the first to come) and 5 (member "
                                        "2)"));
  }
}

static void test_barrier_names_missing(void **state) {
  (void)state;
  missing_named(0);
}

static void test_gather_names_missing(void **state) {
  (void)state;
  missing_named(1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wait_one_key),
      cmocka_unit_test(test_add_combined),
      cmocka_unit_test(test_write_once_cached),
      cmocka_unit_test(test_barrier),
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_barrier_names_missing),
      cmocka_unit_test(test_gather_names_missing),
      cmocka_unit_test(test_count_mismatch_fails_all),
  };
  return cmocka_run_group_tests(tests, setup_tree, teardown_tree);
}
