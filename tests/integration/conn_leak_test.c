/* Connections that hang up with requests in flight cost a node nothing
 * once they are gone: N clients each connect to a node, send 5 requests
 * of one kind that cannot be answered at once (a wait on a missing key, a
 * barrier and a gather short of members, a join short of ranks, adds and
 * reads that go to the root, statistics) and close at once. The node's
 * RSS after many such connections stays where it was after a warm-up
 * round, and it still serves. Real daemons (root + node), this process as
 * the clients. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rendezvous/join_wire.h"

#define WARMUP 400
#define ROUNDS 10000
/* Ten kinds (seven at the node, three at the root) of WARMUP + ROUNDS
 * connections each: 104,000 connections in all. Allowed growth of the
 * daemon's RSS over ROUNDS connections (each with 5 requests in flight),
 * about 100 bytes a connection: a connection kept
 * alive by what it left behind costs about 5 KB (before this was fixed:
 * +26 MB for waits, +21 MB for barriers and gathers). */
#define MAX_GROWTH_KB 1024

/* A rank that hangs up keeps its session (its place in a join) for
 * --session-grace-ms: short here, so that what the storm leaves behind
 * is gone by the time RSS is read (200 ms after the last connection). */
static const char *const grace[] = {"--session-grace-ms=100", NULL};

static char dir[64];
static struct proc root, node;
static char node_addr[160], root_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-leak-XXXXXX");
  char root_tcp[64], node_tcp[64];
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0 ||
      daemon_start(&node, dir, "node", root_tcp, grace, node_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

enum kind { K_WAIT, K_BARRIER, K_GATHER, K_JOIN, K_ADD, K_GET, K_STATS };
static const char *const kind_names[] = {"wait", "barrier", "gather", "join",
                                         "add",  "get",     "stats"};

static void ignore(rdzv_client_t *c, const struct rdzv_result *res, void *arg) {
  (void)c;
  (void)res;
  (void)arg;
}

/* One request of kind k (the i-th connection's j-th). */
static void submit(rdzv_client_t *c, enum kind k, int i, int j) {
  uint8_t member[9] = {0}, params[RDZV_JOIN_PARAMS_BYTES], rec[128];
  struct rdzv_bytes key = {"k", 1}, val = {member, 8};
  struct rdzv_request req = {.nkeys = 1, .keys = &key};
  struct rdzv_bytes jvals[2];
  switch (k) {
  case K_WAIT:
    req.op = RDZV_OP_WAIT;
    key = (struct rdzv_bytes){"never", 5};
    break;
  case K_BARRIER:
  case K_GATHER:
    req.op = k == K_BARRIER ? RDZV_OP_BARRIER : RDZV_OP_GATHER;
    key = (struct rdzv_bytes){k == K_BARRIER ? "b" : "g", 1};
    member[0] = (uint8_t)j; /* members 0..4 of 100: never complete */
    member[8] = 'x';
    val.len = k == K_GATHER ? 9 : 8;
    req.b = 100;
    req.nvals = 1;
    req.vals = &val;
    break;
  case K_JOIN: {
    struct rdzv_join_params jp = {
        .min_size = 100000, .max_size = 100000, .timeout_ms = 3600 * 1000};
    char host[32];
    snprintf(host, sizeof(host), "h%d", i);
    struct rdzv_join_full jf = {
        .rec = {.host = (const uint8_t *)host,
                .host_len = (uint32_t)strlen(host),
                .location = (const uint8_t *)"",
                .local_rank = j,
                .claim = (uint64_t)i * 8 + (uint64_t)j + 1},
        .local_size = 5};
    rdzv_join_params_encode(&jp, params);
    assert_int_equal(rdzv_join_rec_encode(&jf, rec), 0);
    jvals[0] = (struct rdzv_bytes){params, sizeof(params)};
    jvals[1] = (struct rdzv_bytes){rec, rdzv_join_rec_size(&jf)};
    req.op = RDZV_OP_JOIN;
    key = (struct rdzv_bytes){"world", 5};
    req.nvals = 2;
    req.vals = jvals;
    break;
  }
  case K_ADD:
    req.op = RDZV_OP_ADD;
    req.a = 1;
    key = (struct rdzv_bytes){"ctr", 3};
    break;
  case K_GET:
    req.op = RDZV_OP_GET;
    key = (struct rdzv_bytes){"absent", 6};
    break;
  case K_STATS:
    req.op = RDZV_OP_STATS;
    req.nkeys = 0;
    break;
  }
  assert_int_equal(rdzv_client_submit(c, &req, 3600, ignore, NULL), 0);
}

/* n connections to addr, each sending 5 requests of kind k and hanging
 * up. */
static void storm(const char *addr, enum kind k, int n) {
  static int serial;
  for (int i = 0; i < n; i++) {
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = addr;
    o.job_id = "leak-job";
    rdzv_client_t *c = NULL;
    assert_int_equal(rdzv_client_create(&o, &c), 0);
    assert_int_equal(rdzv_client_connect(c, 20), 0);
    int id = serial++;
    for (int j = 0; j < 5; j++)
      submit(c, k, id, j);
    /* Long enough to write the requests, too short for most answers. */
    rdzv_client_run(c, 0.001);
    rdzv_client_destroy(c);
  }
}

/* The storm at the daemon of addr (process pid, called who). */
static void check_kind_at(enum kind k, const char *addr, pid_t pid,
                          const char *who) {
  storm(addr, k, WARMUP);
  usleep(200 * 1000); /* closes and late answers settle */
  long before = rss_kb(pid);
  storm(addr, k, ROUNDS);
  usleep(200 * 1000);
  long after = rss_kb(pid);
  printf("%-8s %s RSS %ld KB after %d connections, %ld KB after %d more "
         "(%+ld KB)\n",
         kind_names[k], who, before, WARMUP, after, ROUNDS, after - before);
  assert_true(before > 0 && after > 0);
  assert_true(after - before < MAX_GROWTH_KB);
  /* The node still answers. */
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "leak-job";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_client_connect(c, 20), 0);
  assert_int_equal(rdzv_store_set(c, "alive", "1", 1, 0, 20), 0);
  rdzv_client_destroy(c);
}

static void check_kind(enum kind k) {
  check_kind_at(k, node_addr, node.pid, "node");
}

#define KIND_TEST(name, k)                                                     \
  static void test_##name(void **state) {                                      \
    (void)state;                                                               \
    check_kind(k);                                                             \
  }
KIND_TEST(wait, K_WAIT)
KIND_TEST(barrier, K_BARRIER)
KIND_TEST(gather, K_GATHER)
KIND_TEST(join, K_JOIN)
KIND_TEST(add, K_ADD)
KIND_TEST(get, K_GET)
KIND_TEST(stats, K_STATS)

/* The root itself: its collectives' waiters of closed connections go
 * (before, each kept its connection alive until the job ended: +20 MB
 * over 4,000 connections), as do its waits. */
#define ROOT_KIND_TEST(name, k)                                                \
  static void test_root_##name(void **state) {                                 \
    (void)state;                                                               \
    check_kind_at(k, root_addr, root.pid, "root");                             \
  }
ROOT_KIND_TEST(wait, K_WAIT)
ROOT_KIND_TEST(barrier, K_BARRIER)
ROOT_KIND_TEST(gather, K_GATHER)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_wait, setup, teardown),
      cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
      cmocka_unit_test_setup_teardown(test_join, setup, teardown),
      cmocka_unit_test_setup_teardown(test_add, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_root_wait, setup, teardown),
      cmocka_unit_test_setup_teardown(test_root_barrier, setup, teardown),
      cmocka_unit_test_setup_teardown(test_root_gather, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
