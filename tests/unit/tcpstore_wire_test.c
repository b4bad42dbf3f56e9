/* The TCPStore codec (store/tcpstore_wire.h) against the bytes that real
 * torch 1.13 (legacy) and 2.6 (v2) clients send, as recorded from them
 * (store/wire/tcpstore_wire.h gives the layouts): each request whole, byte
 * by byte (every proper prefix asks for more), back to back in one read,
 * and the malformed cases that must close the connection; and the layouts
 * of the opcodes of later releases (queues, LIST_KEYS, BARRIER), from
 * PyTorch's sources. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "store/wire/tcpstore_wire.h"

#define CAP 8
static const struct rdzv_ts_limits lim = {64, 64, CAP};

/* u64 little-endian length prefix of n (< 256) */
#define L(n) (n), 0, 0, 0, 0, 0, 0, 0

struct parsed {
  int rc;
  size_t used;
  struct rdzv_ts_req req;
  struct rdzv_slice keys[CAP], vals[CAP];
};

static void parse(struct rdzv_ts_parser *ps, const uint8_t *p, size_t n,
                  struct parsed *out) {
  out->rc = rdzv_ts_parse(ps, p, n, &lim, out->keys, out->vals, CAP, &out->req,
                          &out->used);
}

/* Parses p whole with a fresh copy of ps, and checks that every proper
 * prefix asks for more bytes (fed to copies of the same state). */
static void parse_whole(struct rdzv_ts_parser *ps, const uint8_t *p, size_t n,
                        struct parsed *out) {
  for (size_t k = 0; k < n; k++) {
    struct rdzv_ts_parser copy = *ps;
    struct parsed tmp;
    parse(&copy, p, k, &tmp);
    if (tmp.rc != 0)
      fail_msg("prefix of %zu of %zu bytes: rc %d, want 0", k, n, tmp.rc);
  }
  parse(ps, p, n, out);
  assert_int_equal(out->rc, 1);
  assert_int_equal(out->used, n);
}

static int slice_is(struct rdzv_slice s, const char *want) {
  return s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

static void test_legacy_client_bytes(void **state) {
  (void)state;
  struct rdzv_ts_parser ps = {0};
  struct parsed r;
  /* ADD "init/" +1, the 1.13 constructor's first request. */
  const uint8_t add[] = {3, L(5), 'i', 'n', 'i', 't', '/', 1,
                         0, 0,    0,   0,   0,   0,   0};
  parse_whole(&ps, add, sizeof(add), &r);
  assert_int_equal(ps.dialect, RDZV_TS_LEGACY);
  assert_int_equal(r.req.op, RDZV_TS_ADD);
  assert_true(slice_is(r.keys[0], "init/"));
  assert_int_equal(r.req.delta, 1);
  /* SET "/k1" "v1": its first byte is 00, like v2's VALIDATE. */
  const uint8_t set[] = {0, L(3), '/', 'k', '1', L(2), 'v', '1'};
  struct rdzv_ts_parser fresh = {0};
  parse_whole(&fresh, set, sizeof(set), &r);
  assert_int_equal(fresh.dialect, RDZV_TS_LEGACY);
  assert_int_equal(r.req.op, RDZV_TS_SET);
  assert_true(slice_is(r.keys[0], "/k1") && slice_is(r.vals[0], "v1"));
  /* WAIT ["/k1"] then GET "/k1", back to back in one read. */
  const uint8_t wg[] = {5, L(1), L(3), '/', 'k', '1', 2, L(3), '/', 'k', '1'};
  parse(&ps, wg, sizeof(wg), &r);
  assert_int_equal(r.rc, 1);
  assert_int_equal(r.req.op, RDZV_TS_WAIT);
  assert_int_equal(r.req.nkeys, 1);
  parse(&ps, wg + r.used, sizeof(wg) - r.used, &r);
  assert_int_equal(r.rc, 1);
  assert_int_equal(r.req.op, RDZV_TS_GET);
  /* ADD "/cnt" -2 (two's complement). */
  const uint8_t neg[] = {3,    L(4), '/',  'c',  'n',  't',  0xfe,
                         0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  parse_whole(&ps, neg, sizeof(neg), &r);
  assert_int_equal(r.req.delta, -2);
  /* COMPARE_SET "/k1" "v1" "v2", GETNUMKEYS, DELETE_KEY "/k1". */
  const uint8_t cas[] = {1,   L(3), '/',  'k', '1', L(2),
                         'v', '1',  L(2), 'v', '2'};
  parse_whole(&ps, cas, sizeof(cas), &r);
  assert_int_equal(r.req.op, RDZV_TS_COMPARE_SET);
  assert_true(slice_is(r.vals[0], "v1") && slice_is(r.vals[1], "v2"));
  const uint8_t nk[] = {6};
  parse_whole(&ps, nk, 1, &r);
  assert_int_equal(r.req.op, RDZV_TS_GETNUMKEYS);
  const uint8_t del[] = {8, L(3), '/', 'k', '1'};
  parse_whole(&ps, del, sizeof(del), &r);
  assert_int_equal(r.req.op, RDZV_TS_DELETE_KEY);
  /* WATCH_KEY (C++ only) and codes past 8 close the connection. */
  const uint8_t watch[] = {7, L(2), '/', 'w'};
  parse(&ps, watch, sizeof(watch), &r);
  assert_int_equal(r.rc, RDZV_EPROTO);
  const uint8_t nine[] = {9};
  parse(&ps, nine, 1, &r);
  assert_int_equal(r.rc, RDZV_EPROTO);
}

static void test_legacy_numkeys_first(void **state) {
  (void)state;
  /* A 1-byte first request must not wait for 5 bytes. */
  struct rdzv_ts_parser ps = {0};
  struct parsed r;
  const uint8_t nk[] = {6};
  parse(&ps, nk, 1, &r);
  assert_int_equal(r.rc, 1);
  assert_int_equal(r.req.op, RDZV_TS_GETNUMKEYS);
}

static void test_v2_client_bytes(void **state) {
  (void)state;
  struct rdzv_ts_parser ps = {0};
  struct parsed r;
  const uint8_t validate[] = {0, 0xce, 0xf7, 0x85, 0x3c};
  parse_whole(&ps, validate, sizeof(validate), &r);
  assert_int_equal(ps.dialect, RDZV_TS_V2);
  assert_int_equal(r.req.op, RDZV_TS_VALIDATE);
  const uint8_t ping[] = {0x0d, 0xd3, 0x7b, 0, 0};
  parse_whole(&ps, ping, sizeof(ping), &r);
  assert_int_equal(r.req.op, RDZV_TS_PING);
  assert_int_equal(r.req.u32, 0x7bd3);
  const uint8_t set[] = {1, L(3), '/', 'k', '1', L(2), 'v', '1'};
  parse_whole(&ps, set, sizeof(set), &r);
  assert_int_equal(r.req.op, RDZV_TS_SET);
  const uint8_t check[] = {5,   L(2), L(3), '/', 'k', '1', L(6),
                           '/', 'n',  'o',  'k', 'e', 'y'};
  parse_whole(&ps, check, sizeof(check), &r);
  assert_int_equal(r.req.op, RDZV_TS_CHECK);
  assert_int_equal(r.req.nkeys, 2);
  assert_true(slice_is(r.keys[1], "/nokey"));
  const uint8_t mset[] = {0x0b, L(2), L(3), '/', 'm',  '1', L(1), 'a',
                          L(3), '/',  'm',  '2', L(2), 'b', 'b'};
  parse_whole(&ps, mset, sizeof(mset), &r);
  assert_int_equal(r.req.op, RDZV_TS_MULTI_SET);
  assert_int_equal(r.req.nkeys, 2);
  assert_int_equal(r.req.nvals, 2);
  assert_true(slice_is(r.keys[1], "/m2") && slice_is(r.vals[1], "bb"));
  const uint8_t mget[] = {0x0a, L(1), L(3), '/', 'm', '1'};
  parse_whole(&ps, mget, sizeof(mget), &r);
  assert_int_equal(r.req.op, RDZV_TS_MULTI_GET);
  const uint8_t app[] = {9, L(3), '/', 'a', 'p', L(2), 'x', 'y'};
  parse_whole(&ps, app, sizeof(app), &r);
  assert_int_equal(r.req.op, RDZV_TS_APPEND);
  const uint8_t cancel[] = {0x0c};
  parse_whole(&ps, cancel, 1, &r);
  assert_int_equal(r.req.op, RDZV_TS_CANCEL_WAIT);
  /* A second VALIDATE, and an opcode past the last known (18), close. */
  parse(&ps, validate, sizeof(validate), &r);
  assert_int_equal(r.rc, RDZV_EPROTO);
  const uint8_t nineteen[] = {19, L(1), 'q'};
  parse(&ps, nineteen, sizeof(nineteen), &r);
  assert_int_equal(r.rc, RDZV_EPROTO);
}

/* The opcodes of releases after 2.6, in the layouts of PyTorch's sources
 * (notes section 3; no client of this machine sends them): each whole,
 * byte by byte, and back to back. */
static void test_v2_later_opcodes(void **state) {
  (void)state;
  struct rdzv_ts_parser ps = {RDZV_TS_V2, 1};
  struct parsed r;
  const uint8_t push[] = {14, L(2), '/', 'q', L(3), 'a', 'b', 'c'};
  parse_whole(&ps, push, sizeof(push), &r);
  assert_int_equal(r.req.op, RDZV_TS_QUEUE_PUSH);
  assert_int_equal(r.req.nkeys, 1);
  assert_int_equal(r.req.nvals, 1);
  assert_true(slice_is(r.keys[0], "/q") && slice_is(r.vals[0], "abc"));
  const uint8_t pop[] = {15, L(2), '/', 'q'};
  parse_whole(&ps, pop, sizeof(pop), &r);
  assert_int_equal(r.req.op, RDZV_TS_QUEUE_POP);
  assert_true(r.req.nkeys == 1 && slice_is(r.keys[0], "/q"));
  const uint8_t len[] = {16, L(2), '/', 'q'};
  parse_whole(&ps, len, sizeof(len), &r);
  assert_int_equal(r.req.op, RDZV_TS_QUEUE_LEN);
  const uint8_t list[] = {17};
  parse_whole(&ps, list, sizeof(list), &r);
  assert_int_equal(r.req.op, RDZV_TS_LIST_KEYS);
  assert_int_equal(r.req.nkeys, 0);
  /* BARRIER "/b" world size 4; and a world size of -1 as it comes. */
  const uint8_t bar[] = {18, L(2), '/', 'b', 4, 0, 0, 0, 0, 0, 0, 0};
  parse_whole(&ps, bar, sizeof(bar), &r);
  assert_int_equal(r.req.op, RDZV_TS_BARRIER);
  assert_true(r.req.nkeys == 1 && slice_is(r.keys[0], "/b"));
  assert_int_equal(r.req.delta, 4);
  const uint8_t neg[] = {18,   L(1), 'b',  0xff, 0xff, 0xff,
                         0xff, 0xff, 0xff, 0xff, 0xff};
  parse_whole(&ps, neg, sizeof(neg), &r);
  assert_int_equal(r.req.delta, -1);
  /* All five back to back in one read. */
  uint8_t all[sizeof(push) + sizeof(pop) + sizeof(len) + sizeof(list) +
              sizeof(bar)];
  size_t n = 0;
  memcpy(all + n, push, sizeof(push)), n += sizeof(push);
  memcpy(all + n, pop, sizeof(pop)), n += sizeof(pop);
  memcpy(all + n, len, sizeof(len)), n += sizeof(len);
  memcpy(all + n, list, sizeof(list)), n += sizeof(list);
  memcpy(all + n, bar, sizeof(bar)), n += sizeof(bar);
  const enum rdzv_ts_op want[] = {RDZV_TS_QUEUE_PUSH, RDZV_TS_QUEUE_POP,
                                  RDZV_TS_QUEUE_LEN, RDZV_TS_LIST_KEYS,
                                  RDZV_TS_BARRIER};
  size_t off = 0;
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    parse(&ps, all + off, n - off, &r);
    assert_int_equal(r.rc, 1);
    assert_int_equal(r.req.op, want[i]);
    off += r.used;
  }
  assert_int_equal(off, n);
  /* Limits hold for them too; in the legacy dialect 14-18 are unknown. */
  uint8_t bigv[100] = {14, L(1), 'q', L(65)};
  parse(&ps, bigv, sizeof(bigv), &r);
  assert_int_equal(r.rc, RDZV_EVALUE_TOO_BIG);
  struct rdzv_ts_parser leg = {RDZV_TS_LEGACY, 0};
  parse(&leg, bar, sizeof(bar), &r);
  assert_int_equal(r.rc, RDZV_EPROTO);
  assert_string_equal(rdzv_ts_op_name(RDZV_TS_QUEUE_PUSH), "queue_push");
  assert_string_equal(rdzv_ts_op_name(RDZV_TS_LIST_KEYS), "list_keys");
  assert_string_equal(rdzv_ts_op_name(RDZV_TS_BARRIER), "barrier");
}

static void test_v2_needs_validate_first_and_right_magic(void **state) {
  (void)state;
  struct rdzv_ts_parser ps = {0};
  struct parsed r;
  const uint8_t bad[] = {0, 0xce, 0xf7, 0x85, 0x3c};
  parse(&ps, bad, sizeof(bad), &r); /* v2 now, validated */
  assert_int_equal(r.rc, 1);
  /* A connection that is v2 only by a forged first byte cannot happen: a
   * magic mismatch makes it legacy SET with a huge key length. */
  struct rdzv_ts_parser ps2 = {0};
  const uint8_t wrong[] = {0, 0xcf, 0xf7, 0x85, 0x3c, 0, 0, 0, 0};
  parse(&ps2, wrong, sizeof(wrong), &r);
  assert_int_equal(ps2.dialect, RDZV_TS_LEGACY);
  assert_int_equal(r.rc, RDZV_EKEY_TOO_LONG);
}

static void test_limits(void **state) {
  (void)state;
  struct rdzv_ts_parser ps = {RDZV_TS_LEGACY, 0};
  struct parsed r;
  uint8_t big[200] = {0, L(65)};
  parse(&ps, big, sizeof(big), &r);
  assert_int_equal(r.rc, RDZV_EKEY_TOO_LONG);
  uint8_t bigv[200] = {0, L(1), 'k', L(65)};
  parse(&ps, bigv, sizeof(bigv), &r);
  assert_int_equal(r.rc, RDZV_EVALUE_TOO_BIG);
  /* More keys than the limit: refused from the count, before the keys. */
  const uint8_t many[] = {5, L(CAP + 1)};
  parse(&ps, many, sizeof(many), &r);
  assert_int_equal(r.rc, RDZV_EFRAME_TOO_BIG);
  /* A huge length never reads past the buffer. */
  const uint8_t huge[] = {2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  parse(&ps, huge, sizeof(huge), &r);
  assert_int_equal(r.rc, RDZV_EKEY_TOO_LONG);
}

static void test_random_bytes_never_crash(void **state) {
  (void)state;
  uint8_t buf[64];
  srand(7);
  for (int i = 0; i < 20000; i++) {
    struct rdzv_ts_parser ps = {0};
    size_t n = (size_t)(rand() % (int)sizeof(buf));
    for (size_t k = 0; k < n; k++)
      buf[k] = (uint8_t)(rand() % 16 < 12 ? rand() % 16 : rand());
    size_t off = 0;
    struct parsed r;
    for (;;) {
      parse(&ps, buf + off, n - off, &r);
      if (r.rc != 1)
        break;
      assert_true(r.used >= 1 && r.used <= n - off);
      off += r.used;
    }
    assert_true(r.rc <= 1);
  }
}

static void test_encoders(void **state) {
  (void)state;
  struct rdzv_buf b = {0};
  assert_int_equal(rdzv_ts_put_blob(&b, "v1", 2), 0);
  assert_int_equal(rdzv_ts_put_i64(&b, -2), 0);
  assert_int_equal(rdzv_ts_put_u8(&b, RDZV_TS_STOP_WAITING), 0);
  assert_int_equal(rdzv_ts_put_u32(&b, 0x7bd3), 0);
  const uint8_t want[] = {L(2), 'v',  '1',  0xfe, 0xff, 0xff, 0xff, 0xff,
                          0xff, 0xff, 0xff, 0,    0xd3, 0x7b, 0,    0};
  assert_int_equal(b.len, sizeof(want));
  assert_memory_equal(b.data, want, sizeof(want));
  rdzv_buf_free(&b);
  assert_string_equal(rdzv_ts_op_name(RDZV_TS_COMPARE_SET), "compare_set");
}

/* The client side: requests encode to the bytes the real 1.13 and 2.6
 * clients send (the notes' §3.1-3.2), ops of the other dialect are
 * refused, and the servers' replies parse, byte by byte. */
static void expect_bytes(enum rdzv_ts_dialect d, const struct rdzv_ts_req *q,
                         const uint8_t *want, size_t n) {
  struct rdzv_buf b = {0};
  assert_int_equal(rdzv_ts_encode(d, q, &b), 0);
  assert_int_equal(b.len, n);
  assert_memory_equal(b.data, want, n);
  rdzv_buf_free(&b);
}

static void test_client_encode(void **state) {
  (void)state;
  struct rdzv_slice k = {(const uint8_t *)"init/", 5};
  struct rdzv_ts_req q = {
      .op = RDZV_TS_ADD, .nkeys = 1, .keys = &k, .delta = 1};
  const uint8_t add[] = {3, L(5), 'i', 'n', 'i', 't', '/', 1,
                         0, 0,    0,   0,   0,   0,   0};
  expect_bytes(RDZV_TS_LEGACY, &q, add, sizeof(add));
  const uint8_t add2[] = {4, L(5), 'i', 'n', 'i', 't', '/', 1,
                          0, 0,    0,   0,   0,   0,   0};
  expect_bytes(RDZV_TS_V2, &q, add2, sizeof(add2));
  struct rdzv_slice kv[3] = {{(const uint8_t *)"/k1", 3},
                             {(const uint8_t *)"v1", 2},
                             {(const uint8_t *)"v2", 2}};
  struct rdzv_ts_req set = {
      .op = RDZV_TS_SET, .nkeys = 1, .keys = kv, .nvals = 1, .vals = kv + 1};
  const uint8_t set1[] = {0, L(3), '/', 'k', '1', L(2), 'v', '1'};
  expect_bytes(RDZV_TS_LEGACY, &set, set1, sizeof(set1));
  struct rdzv_ts_req wait = {.op = RDZV_TS_WAIT, .nkeys = 1, .keys = kv};
  const uint8_t w1[] = {5, L(1), L(3), '/', 'k', '1'};
  expect_bytes(RDZV_TS_LEGACY, &wait, w1, sizeof(w1));
  struct rdzv_ts_req cas = {.op = RDZV_TS_COMPARE_SET,
                            .nkeys = 1,
                            .keys = kv,
                            .nvals = 2,
                            .vals = kv + 1};
  const uint8_t c1[] = {1, L(3), '/', 'k', '1', L(2), 'v', '1', L(2), 'v', '2'};
  expect_bytes(RDZV_TS_LEGACY, &cas, c1, sizeof(c1));
  struct rdzv_ts_req val = {.op = RDZV_TS_VALIDATE, .u32 = RDZV_TS_MAGIC};
  const uint8_t v[] = {0, 0xce, 0xf7, 0x85, 0x3c};
  expect_bytes(RDZV_TS_V2, &val, v, sizeof(v));
  struct rdzv_ts_req ms = {.op = RDZV_TS_MULTI_SET,
                           .nkeys = 1,
                           .keys = kv,
                           .nvals = 1,
                           .vals = kv + 1};
  const uint8_t m2[] = {11, L(1), L(3), '/', 'k', '1', L(2), 'v', '1'};
  expect_bytes(RDZV_TS_V2, &ms, m2, sizeof(m2));
  /* Not in the dialect, or the wrong shape: refused, b untouched. */
  struct rdzv_buf b = {0};
  assert_int_equal(rdzv_ts_encode(RDZV_TS_LEGACY, &val, &b), RDZV_EPROTO);
  assert_int_equal(rdzv_ts_encode(RDZV_TS_LEGACY, &ms, &b), RDZV_EPROTO);
  struct rdzv_ts_req w = {.op = RDZV_TS_WATCH_KEY, .nkeys = 1, .keys = kv};
  assert_int_equal(rdzv_ts_encode(RDZV_TS_V2, &w, &b), RDZV_EPROTO);
  set.nvals = 0;
  assert_int_equal(rdzv_ts_encode(RDZV_TS_LEGACY, &set, &b), RDZV_EPROTO);
  assert_int_equal(rdzv_ts_encode(RDZV_TS_UNKNOWN, &q, &b), RDZV_EPROTO);
  assert_int_equal(b.len, 0);
  rdzv_buf_free(&b);
}

static void test_client_replies(void **state) {
  (void)state;
  struct rdzv_slice blobs[CAP];
  struct rdzv_ts_reply r;
  size_t used = 0;
  /* GET's blob, each proper prefix asking for more. */
  const uint8_t get[] = {L(2), 'v', '2', 0x55};
  for (size_t k = 0; k < 10; k++)
    assert_int_equal(
        rdzv_ts_parse_reply(RDZV_TS_GET, 1, get, k, 64, blobs, CAP, &r, &used),
        0);
  assert_int_equal(rdzv_ts_parse_reply(RDZV_TS_GET, 1, get, sizeof(get), 64,
                                       blobs, CAP, &r, &used),
                   1);
  assert_int_equal(used, 10);
  assert_int_equal(r.nblobs, 1);
  assert_true(slice_is(r.blobs[0], "v2"));
  const uint8_t add[] = {3, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(
      rdzv_ts_parse_reply(RDZV_TS_ADD, 1, add, 8, 64, blobs, CAP, &r, &used),
      1);
  assert_int_equal(r.i64, 3);
  const uint8_t stop[] = {0};
  assert_int_equal(
      rdzv_ts_parse_reply(RDZV_TS_WAIT, 1, stop, 1, 64, blobs, CAP, &r, &used),
      1);
  assert_int_equal(r.u8, RDZV_TS_STOP_WAITING);
  assert_int_equal(used, 1);
  const uint8_t mg[] = {L(1), 'a', L(2), 'b', 'b'};
  assert_int_equal(rdzv_ts_parse_reply(RDZV_TS_MULTI_GET, 2, mg, sizeof(mg), 64,
                                       blobs, CAP, &r, &used),
                   1);
  assert_true(r.nblobs == 2 && slice_is(r.blobs[1], "bb"));
  assert_int_equal(rdzv_ts_parse_reply(RDZV_TS_MULTI_GET, CAP + 1, mg,
                                       sizeof(mg), 64, blobs, CAP, &r, &used),
                   RDZV_EFRAME_TOO_BIG);
  const uint8_t big[] = {L(65)};
  assert_int_equal(
      rdzv_ts_parse_reply(RDZV_TS_GET, 1, big, 8, 64, blobs, CAP, &r, &used),
      RDZV_EVALUE_TOO_BIG);
  const uint8_t ping[] = {0xd3, 0x7b, 0, 0};
  assert_int_equal(
      rdzv_ts_parse_reply(RDZV_TS_PING, 0, ping, 4, 64, blobs, CAP, &r, &used),
      1);
  assert_int_equal(r.u32, 31699);
  assert_int_equal(
      rdzv_ts_parse_reply(RDZV_TS_SET, 1, stop, 1, 64, blobs, CAP, &r, &used),
      RDZV_EPROTO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_legacy_client_bytes),
      cmocka_unit_test(test_legacy_numkeys_first),
      cmocka_unit_test(test_v2_client_bytes),
      cmocka_unit_test(test_v2_later_opcodes),
      cmocka_unit_test(test_v2_needs_validate_first_and_right_magic),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_random_bytes_never_crash),
      cmocka_unit_test(test_encoders),
      cmocka_unit_test(test_client_encode),
      cmocka_unit_test(test_client_replies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
