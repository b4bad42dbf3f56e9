/* A node splits what it combines to fit its parent's frame limit (the
 * parent gives it in its hello reply): under --max-frame-bytes 4096 at
 * root and node, a 512-member barrier (6 KB combined), a 512-member
 * gather and a 200-rank join through the node each complete for every
 * member, the root drops nobody (proto_errors 0), and the node counts the
 * extra requests (split_frames). A contribution that cannot fit alone is
 * refused with a text naming the parent and both sizes. Real daemons. */
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
#include "store/wire/wire.h"

#define MEMBERS 512
#define RANKS 200

static const char *const small[] = {"--max-frame-bytes=4096", NULL};
/* The node also holds what it combines long enough to gather every join
 * of the test into one batch. */
static const char *const small_node[] = {
    "--max-frame-bytes=4096", "--flush-ms=300", "--flush-max-ms=3000", NULL};
static char dir[64];
static struct proc root, node;
static char root_tcp[64], node_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-split-XXXXXX");
  char node_tcp[64];
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, small, root_tcp) < 0 ||
      daemon_start(&node, dir, "node", root_tcp, small_node, node_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
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

struct reply {
  int done, status;
  int64_t a, b;
  size_t nvals;
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
  r->a = res->a;
  r->b = res->b;
  r->nvals = res->nvals;
}

static rdzv_client_t *client(void) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = node_addr;
  o.job_id = "split";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

/* MEMBERS members of one collective on one connection (a client may
 * contribute several), each with dlen bytes of data (gather). */
static void collective(enum rdzv_op op, const char *name, size_t dlen) {
  static struct reply rs[MEMBERS];
  static uint8_t vals[MEMBERS][8 + 16];
  struct rdzv_bytes key = {name, strlen(name)};
  struct rdzv_bytes v[MEMBERS];
  rdzv_client_t *c = client();
  memset(rs, 0, sizeof(rs));
  for (int i = 0; i < MEMBERS; i++) {
    rdzv_store_u64le(vals[i], (uint64_t)i);
    memset(vals[i] + 8, 'a' + i % 26, 16);
    v[i] = (struct rdzv_bytes){vals[i], 8 + dlen};
    struct rdzv_request req = {.op = op,
                               .b = MEMBERS,
                               .nkeys = 1,
                               .keys = &key,
                               .nvals = 1,
                               .vals = &v[i]};
    assert_int_equal(rdzv_client_submit(c, &req, 60, on_reply, &rs[i]), 0);
  }
  assert_int_equal(rdzv_client_run(c, 60), 0);
  for (int i = 0; i < MEMBERS; i++) {
    if (!rs[i].done || rs[i].status != 0)
      fail_msg("%s member %d: %s", name, i, rdzv_strerror(rs[i].status));
    assert_int_equal(rs[i].a, MEMBERS);
    if (op == RDZV_OP_GATHER)
      assert_int_equal(rs[i].nvals, MEMBERS);
  }
  rdzv_client_destroy(c);
}

static void check_clean(int64_t min_splits) {
  assert_int_equal(stats_at(root_tcp, "proto_errors"), 0);
  int64_t splits = stats_at(node_addr, "split_frames");
  printf("split_frames at the node: %lld\n", (long long)splits);
  assert_true(splits >= min_splits);
}

static void test_barrier(void **state) {
  (void)state;
  collective(RDZV_OP_BARRIER, "b512", 0);
  check_clean(1);
}

static void test_gather(void **state) {
  (void)state;
  collective(RDZV_OP_GATHER, "g512", 16);
  check_clean(2); /* 512 x 28 bytes: at least 4 requests */
}

static void test_join(void **state) {
  (void)state;
  static rdzv_client_t *cs[RANKS];
  static struct reply rs[RANKS];
  uint8_t params[RDZV_JOIN_PARAMS_BYTES], rec[RANKS][128];
  struct rdzv_join_params jp = {
      .min_size = RANKS, .max_size = RANKS, .timeout_ms = 60 * 1000};
  rdzv_join_params_encode(&jp, params);
  struct rdzv_bytes key = {"world", 5};
  struct rdzv_bytes jv[RANKS][2];
  char host[RANKS][48];
  memset(rs, 0, sizeof(rs));
  for (int i = 0; i < RANKS; i++) {
    snprintf(host[i], sizeof(host[i]), "host-with-a-long-name-%03d", i);
    struct rdzv_join_full jf = {.rec = {.host = (const uint8_t *)host[i],
                                        .host_len = (uint32_t)strlen(host[i]),
                                        .location = (const uint8_t *)"",
                                        .local_rank = 0,
                                        .claim = (uint64_t)i + 1},
                                .local_size = 1};
    assert_int_equal(rdzv_join_rec_encode(&jf, rec[i]), 0);
    jv[i][0] = (struct rdzv_bytes){params, sizeof(params)};
    jv[i][1] = (struct rdzv_bytes){rec[i], rdzv_join_rec_size(&jf)};
    struct rdzv_request req = {.op = RDZV_OP_JOIN,
                               .nkeys = 1,
                               .keys = &key,
                               .nvals = 2,
                               .vals = jv[i]};
    cs[i] = client();
    assert_int_equal(rdzv_client_submit(cs[i], &req, 60, on_reply, &rs[i]), 0);
    rdzv_client_run(cs[i], 0.001);
  }
  /* Drive every connection until all are answered (at most ~60 s). */
  for (int round = 0, left = RANKS; left > 0 && round < 60000; round++) {
    left = 0;
    for (int i = 0; i < RANKS; i++) {
      rdzv_client_run(cs[i], 0);
      left += !rs[i].done;
    }
    if (left > 0)
      usleep(1000);
  }
  for (int i = 0; i < RANKS; i++) {
    if (!rs[i].done || rs[i].status != 0)
      fail_msg("join of rank on %s: %s", host[i], rdzv_strerror(rs[i].status));
    assert_int_equal(rs[i].a, 1);     /* generation 1 */
    assert_int_equal(rs[i].b, RANKS); /* world size */
    assert_int_equal(rs[i].nvals, 1); /* its own assignment */
  }
  for (int i = 0; i < RANKS; i++)
    rdzv_client_destroy(cs[i]);
  check_clean(1);
}

/* One gather contribution of 5,000 bytes cannot go up whole under the
 * parent's 4096-byte limit: refused with a text naming the parent. The
 * node's own limit is larger here, so the refusal comes from the split. */
static void test_item_too_big(void **state) {
  (void)state;
  assert_int_equal(proc_stop(&node), 0);
  const char *big[] = {"--max-frame-bytes=65536", NULL};
  char node_tcp[64];
  assert_int_equal(daemon_start(&node, dir, "node2", root_tcp, big, node_tcp),
                   0);
  char addr[160];
  daemon_unix_addr(dir, "node2", addr, sizeof(addr));
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "split";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  /* The node learns the parent's limit in its hello. */
  assert_int_equal(rdzv_store_set(c, "warm", "1", 1, 0, 20), 0);
  static char data[5000];
  memset(data, 'x', sizeof(data));
  struct rdzv_value *out = NULL;
  assert_int_equal(
      rdzv_store_gather(c, "huge", 0, 2, data, sizeof(data), &out, 20),
      RDZV_EFRAME_TOO_BIG);
  char want[200];
  snprintf(want, sizeof(want), "its parent %s takes frames of at most 4096",
           root_tcp);
  if (strstr(rdzv_client_last_error(c), want) == NULL)
    fail_msg("the refusal does not say why: %s", rdzv_client_last_error(c));
  rdzv_client_destroy(c);
  assert_int_equal(stats_at(root_tcp, "proto_errors"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
      cmocka_unit_test_setup_teardown(test_join, setup, teardown),
      cmocka_unit_test_setup_teardown(test_item_too_big, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
