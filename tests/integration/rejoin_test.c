/* A re-sent join after its round completed, against a real root (and
 * through a node): the same processes (claims) asking again get the
 * assignments they got the first time, byte for byte, and the same
 * generation, now answered from the root's record of the generation's
 * assignments (store/daemon/root: RDZV_STATE_REC_ASSIGN). A re-send of
 * part of the joins gets just those; a join mixing a known claim with an
 * unknown one for a taken slot is refused, naming the duplicate. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rendezvous/join_wire.h"

static char dir[64];
static struct proc root, node;
static char root_addr[64], node_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-rejoin-XXXXXX");
  char root_tcp[64], node_tcp[64];
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0 ||
      daemon_start(&node, dir, "node", root_tcp, NULL, node_tcp) < 0)
    return -1;
  snprintf(root_addr, sizeof(root_addr), "%s", root_tcp);
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

/* The reply of one request, copied out of the callback. */
struct reply {
  int done;
  int status;
  int64_t a, b;
  size_t nvals;
  uint8_t vals[8][64];
  size_t lens[8];
  char text[512];
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
  r->a = res->a;
  r->b = res->b;
  r->nvals = res->nvals < 8 ? res->nvals : 8;
  for (size_t i = 0; i < r->nvals; i++) {
    r->lens[i] = res->vals[i].len < 64 ? res->vals[i].len : 64;
    memcpy(r->vals[i], res->vals[i].data, r->lens[i]);
  }
  if (res->nkeys > 0)
    snprintf(r->text, sizeof(r->text), "%.*s", (int)res->keys[0].len,
             (const char *)res->keys[0].data);
}

static rdzv_client_t *connect_to(const char *addr) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "rejoin-job";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_client_connect(c, 20), 0);
  return c;
}

/* Sends a JOIN of round "world" (world size 2) with one record per claim
 * (host "hostA", local ranks as given) and waits for its reply. */
static void join(rdzv_client_t *c, size_t n, const uint64_t *claims,
                 const int32_t *local_ranks, struct reply *out) {
  struct rdzv_join_params jp = {
      .min_size = 2, .max_size = 2, .timeout_ms = 20000};
  uint8_t params[RDZV_JOIN_PARAMS_BYTES], recs[4][128];
  struct rdzv_bytes vals[5];
  rdzv_join_params_encode(&jp, params);
  vals[0] = (struct rdzv_bytes){params, sizeof(params)};
  assert_true(n <= 4);
  for (size_t i = 0; i < n; i++) {
    struct rdzv_join_full j = {.rec = {.host = (const uint8_t *)"hostA",
                                       .host_len = 5,
                                       .location = (const uint8_t *)"",
                                       .local_rank = local_ranks[i],
                                       .claim = claims[i]},
                               .local_size = 2,
                               .topo = (const uint8_t *)"gpu=test\n",
                               .topo_len = 9};
    assert_true(rdzv_join_rec_size(&j) <= sizeof(recs[i]));
    assert_int_equal(rdzv_join_rec_encode(&j, recs[i]), 0);
    vals[i + 1] = (struct rdzv_bytes){recs[i], rdzv_join_rec_size(&j)};
  }
  struct rdzv_bytes key = {"world", 5};
  struct rdzv_request req = {.op = RDZV_OP_JOIN,
                             .nkeys = 1,
                             .keys = &key,
                             .nvals = n + 1,
                             .vals = vals};
  memset(out, 0, sizeof(*out));
  assert_int_equal(rdzv_client_submit(c, &req, 20, on_reply, out), 0);
  assert_int_equal(rdzv_client_run(c, 30), 0);
  assert_true(out->done);
}

/* The assignment for claim in r (fails the test if absent). */
static struct rdzv_assignment
assignment_of(const struct reply *r, uint64_t claim, const uint8_t **bytes) {
  for (size_t i = 0; i < r->nvals; i++) {
    uint64_t cl = 0;
    struct rdzv_assignment a;
    if (rdzv_join_assign_decode(r->vals[i], r->lens[i], &cl, &a) == 0 &&
        cl == claim) {
      *bytes = r->vals[i];
      return a;
    }
  }
  fail_msg("no assignment for claim %llu", (unsigned long long)claim);
  struct rdzv_assignment none = {0};
  return none;
}

static void check_resend(const char *addr) {
  rdzv_client_t *c = connect_to(addr);
  uint64_t claims[2] = {0x1111, 0x2222};
  int32_t lrs[2] = {0, 1};
  struct reply first, again, part;
  join(c, 2, claims, lrs, &first);
  assert_int_equal(first.status, 0);
  assert_int_equal(first.nvals, 2);
  int64_t gen = first.a;
  assert_true(gen >= 1);
  const uint8_t *b0, *b1, *x;
  struct rdzv_assignment a0 = assignment_of(&first, 0x1111, &b0);
  struct rdzv_assignment a1 = assignment_of(&first, 0x2222, &b1);
  assert_int_equal(a0.rank + a1.rank, 1); /* ranks 0 and 1 */
  assert_int_equal(a0.world_size, 2);

  /* The same joins again: the same bytes and generation. */
  join(c, 2, claims, lrs, &again);
  assert_int_equal(again.status, 0);
  assert_int_equal(again.a, gen);
  assert_int_equal(again.b, 2);
  assert_int_equal(again.nvals, 2);
  assignment_of(&again, 0x1111, &x);
  assert_memory_equal(x, b0, RDZV_JOIN_ASSIGN_BYTES);
  assignment_of(&again, 0x2222, &x);
  assert_memory_equal(x, b1, RDZV_JOIN_ASSIGN_BYTES);

  /* Part of them: just that one. */
  join(c, 1, &claims[1], &lrs[1], &part);
  assert_int_equal(part.status, 0);
  assert_int_equal(part.a, gen);
  assert_int_equal(part.nvals, 1);
  assignment_of(&part, 0x2222, &x);
  assert_memory_equal(x, b1, RDZV_JOIN_ASSIGN_BYTES);

  /* A known claim with a stranger for a taken slot: refused while the
   * generation is live, the stranger named as a duplicate. */
  uint64_t mixed[2] = {0x1111, 0x9999};
  struct reply refused;
  join(c, 2, mixed, lrs, &refused);
  assert_int_equal(refused.status, RDZV_EDUPLICATE_CLAIM);
  assert_non_null(strstr(refused.text, "hostA"));
  rdzv_client_destroy(c);
}

static void test_resend_at_root(void **state) {
  (void)state;
  check_resend(root_addr);
}

static void test_resend_through_node(void **state) {
  (void)state;
  check_resend(node_addr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_resend_at_root, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resend_through_node, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
