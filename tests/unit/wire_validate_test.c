/* Unit tests for the wire codec's request validation
 * (rdzv_msg_validate_request in store/wire/wire.c): a table of request
 * shapes, each with the code it must get, checked directly and after an
 * encode/decode round trip; and the configurable key and value limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/wire/wire.h"

#define NO_LIMIT ((size_t)UINT32_MAX)
#define S(str)                                                                 \
  { (const uint8_t *)(str), (uint32_t)(sizeof(str) - 1) }
/* A contribution: u64 member id (LE, one byte used here) then data. */
#define C(id, data) S(id "\0\0\0\0\0\0\0" data)

struct vcase {
  const char *name;
  uint8_t type;
  uint16_t flags;
  int64_t a, b;
  uint32_t nkeys;
  struct rdzv_slice keys[3];
  uint32_t nvals;
  struct rdzv_slice vals[3];
  int want;
};

#define OK 0
#define EP RDZV_EPROTO
#define EK RDZV_EKEY_TOO_LONG
#define EV RDZV_EVALUE_TOO_BIG
#define K0                                                                     \
  0, {                                                                         \
    { 0 }                                                                      \
  }
#define V0                                                                     \
  0, {                                                                         \
    { 0 }                                                                      \
  }

/* Limits: keys up to 8 bytes, values up to 4 bytes. */
/* clang-format off */
static const struct vcase vcases[] = {
    {"hello", 1, 0, 0, 0, 1, {S("job")}, V0, OK},
    {"hello-name", 1, 0, 1, 0, 2, {S("job"), S("peer")}, V0, OK},
    {"hello-no-job", 1, 0, 0, 0, K0, V0, EP},
    {"hello-empty-job", 1, 0, 0, 0, 1, {S("")}, V0, EP},
    {"hello-3-keys", 1, 0, 0, 0, 3, {S("j"), S("p"), S("x")}, V0, EP},
    {"hello-nonce", 1, 0, 0, 0, 1, {S("j")}, 1, {S("v")}, OK},
    {"hello-2-vals", 1, 0, 0, 0, 1, {S("j")}, 2, {S("v"), S("w")}, EP},
    {"auth", RDZV_MSG_AUTH, 0, 0, 0, K0, 1, {S("pf")}, OK},
    {"auth-no-proof", RDZV_MSG_AUTH, 0, 0, 0, K0, V0, EP},
    {"auth-2-vals", RDZV_MSG_AUTH, 0, 0, 0, K0, 2, {S("p"), S("q")}, EP},
    {"auth-key", RDZV_MSG_AUTH, 0, 0, 0, 1, {S("k")}, 1, {S("p")}, EP},
    {"inval", RDZV_MSG_INVAL, 0, 0, 0, K0, V0, OK},
    {"inval-ack", RDZV_MSG_INVAL, 0, 0, 7, K0, V0, OK},
    {"inval-negative-ack", RDZV_MSG_INVAL, 0, 0, -1, K0, V0, EP},
    {"inval-key", RDZV_MSG_INVAL, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"inval-val", RDZV_MSG_INVAL, 0, 0, 0, K0, 1, {S("v")}, EP},
    {"hello-long-job", 1, 0, 0, 0, 1, {S("123456789")}, V0, EK},
    {"hello-reply-flag", 1, RDZV_F_REPLY, 0, 0, 1, {S("j")}, V0, EP},
    {"set", 2, 0, 0, 0, 1, {S("k")}, 1, {S("v")}, OK},
    {"set-write-once", 2, RDZV_F_WRITE_ONCE, 0, 0, 1, {S("k")}, 1, {S("")}, OK},
    {"set-limits", 2, 0, 0, 0, 1, {S("12345678")}, 1, {S("1234")}, OK},
    {"set-no-val", 2, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"set-2-keys", 2, 0, 0, 0, 2, {S("k"), S("l")}, 1, {S("v")}, EP},
    {"set-empty-key", 2, 0, 0, 0, 1, {S("")}, 1, {S("v")}, EP},
    {"set-long-key", 2, 0, 0, 0, 1, {S("123456789")}, 1, {S("v")}, EK},
    {"set-big-val", 2, 0, 0, 0, 1, {S("k")}, 1, {S("12345")}, EV},
    {"set-reply", 2, RDZV_F_REPLY, 0, 0, 1, {S("k")}, 1, {S("v")}, EP},
    {"get", 3, 0, 0, 0, 1, {S("k")}, V0, OK},
    {"get-val", 3, 0, 0, 0, 1, {S("k")}, 1, {S("v")}, EP},
    {"get-no-key", 3, 0, 0, 0, K0, V0, EP},
    {"get-long-key", 3, 0, 0, 0, 1, {S("123456789")}, V0, EK},
    {"wait", 4, 0, 100, 0, 3, {S("a"), S("b"), S("c")}, V0, OK},
    {"wait-zero-timeout", 4, 0, 0, 0, 1, {S("a")}, V0, OK},
    {"wait-neg-timeout", 4, 0, -1, 0, 1, {S("a")}, V0, EP},
    {"wait-no-key", 4, 0, 0, 0, K0, V0, EP},
    {"wait-empty-2nd", 4, 0, 0, 0, 2, {S("a"), S("")}, V0, EP},
    {"wait-long-3rd", 4, 0, 0, 0, 3, {S("a"), S("b"), S("123456789")}, V0, EK},
    {"wait-val", 4, 0, 0, 0, 1, {S("a")}, 1, {S("v")}, EP},
    {"add", 5, 0, -7, 0, 1, {S("n")}, V0, OK},
    {"add-2-keys", 5, 0, 1, 0, 2, {S("n"), S("m")}, V0, EP},
    {"add-val", 5, 0, 1, 0, 1, {S("n")}, 1, {S("1")}, EP},
    {"add-parts", 5, RDZV_F_OPID, 0, 0, 1, {S("n")}, 2,
     {S("12345678abcdefgh"), S("87654321hgfedcba")}, OK},
    {"add-parts-none", 5, RDZV_F_OPID, 0, 0, 1, {S("n")}, V0, EP},
    {"add-part-short", 5, RDZV_F_OPID, 0, 0, 1, {S("n")}, 1,
     {S("12345678abcdefg")}, EP},
    {"cas", 6, 0, 0, 0, 1, {S("k")}, 2, {S(""), S("new")}, OK},
    {"cas-1-val", 6, 0, 0, 0, 1, {S("k")}, 1, {S("")}, EP},
    {"cas-3-vals", 6, 0, 0, 0, 1, {S("k")}, 3, {S(""), S(""), S("")}, EP},
    {"cas-big-expected", 6, 0, 0, 0, 1, {S("k")}, 2, {S("12345"), S("")}, EV},
    {"cas-big-desired", 6, 0, 0, 0, 1, {S("k")}, 2, {S(""), S("12345")}, EV},
    {"delete", 7, 0, 0, 0, 1, {S("k")}, V0, OK},
    {"delete-no-key", 7, 0, 0, 0, K0, V0, EP},
    {"delete-val", 7, 0, 0, 0, 1, {S("k")}, 1, {S("v")}, EP},
    {"mget", 8, 0, 0, 0, 3, {S("a"), S("b"), S("c")}, V0, OK},
    {"mget-no-key", 8, 0, 0, 0, K0, V0, EP},
    {"mget-val", 8, 0, 0, 0, 1, {S("a")}, 1, {S("v")}, EP},
    {"mget-empty-key", 8, 0, 0, 0, 2, {S("a"), S("")}, V0, EP},
    {"mset", 9, 0, 0, 0, 2, {S("a"), S("b")}, 2, {S("1"), S("2")}, OK},
    {"mset-write-once", 9, RDZV_F_WRITE_ONCE, 0, 0, 1, {S("a")}, 1, {S("1")},
     OK},
    {"mset-empty", 9, 0, 0, 0, K0, V0, EP},
    {"mset-more-keys", 9, 0, 0, 0, 2, {S("a"), S("b")}, 1, {S("1")}, EP},
    {"mset-more-vals", 9, 0, 0, 0, 1, {S("a")}, 2, {S("1"), S("2")}, EP},
    {"mset-big-2nd-val", 9, 0, 0, 0, 2, {S("a"), S("b")}, 2, {S("1"),
     S("12345")}, EV},
    {"append", 10, 0, 0, 0, 1, {S("k")}, 1, {S("more")}, OK},
    {"append-no-val", 10, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"append-big", 10, 0, 0, 0, 1, {S("k")}, 1, {S("12345")}, EV},
    {"nkeys", 11, 0, 0, 0, K0, V0, OK},
    {"nkeys-key", 11, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"nkeys-val", 11, 0, 0, 0, K0, 1, {S("v")}, EP},
    {"barrier", 12, 0, 0, 4, 1, {S("b")}, 1, {C("\x02", "")}, OK},
    {"barrier-node", 12, 0, 0, 2, 1, {S("b")}, 2,
     {C("\x00", ""), C("\x01", "")}, OK},
    {"barrier-b0", 12, 0, 0, 0, 1, {S("b")}, 1, {C("\x00", "")}, EP},
    {"barrier-b-neg", 12, 0, 0, -1, 1, {S("b")}, 1, {C("\x00", "")}, EP},
    {"barrier-more-than-b", 12, 0, 0, 1, 1, {S("b")}, 2,
     {C("\x00", ""), C("\x01", "")}, EP},
    {"barrier-no-vals", 12, 0, 0, 4, 1, {S("b")}, V0, EP},
    {"barrier-no-name", 12, 0, 0, 4, K0, 1, {C("\x00", "")}, EP},
    {"barrier-empty-name", 12, 0, 0, 4, 1, {S("")}, 1, {C("\x00", "")}, EP},
    {"barrier-short-id", 12, 0, 0, 4, 1, {S("b")}, 1, {S("1234567")}, EP},
    {"barrier-data", 12, 0, 0, 4, 1, {S("b")}, 1, {C("\x00", "x")}, EP},
    {"gather", 13, 0, 0, 3, 1, {S("g")}, 3,
     {C("\x00", "abcd"), C("\x01", ""), C("\x02", "xy")}, OK},
    {"gather-b0", 13, 0, 0, 0, 1, {S("g")}, 1, {C("\x00", "")}, EP},
    {"gather-short-id", 13, 0, 0, 2, 1, {S("g")}, 1, {S("1234")}, EP},
    {"gather-big-data", 13, 0, 0, 2, 1, {S("g")}, 1, {C("\x00", "12345")}, EV},
    /* keys[1]: who the members are (rendezvous/members.h), opaque here. */
    {"gather-members", 13, 0, 0, 2, 2, {S("g"), S("h")}, 1, {C("\x00", "")},
     OK},
    /* A members spec is no key: a valid one (up to 777 bytes) passes
     * whatever --max-key-bytes (here 8); keys[0] and other types' second
     * keys still obey it. */
    {"barrier-long-members", 12, 0, 0, 4, 2,
     {S("b"), S("123456789012345678901")}, 1, {C("\x00", "")}, OK},
    {"gather-long-members", 13, 0, 0, 2, 2,
     {S("g"), S("123456789012345678901")}, 1, {C("\x00", "")}, OK},
    {"hello-long-name", 1, 0, 1, 0, 2, {S("job"), S("123456789")}, V0, EK},
    {"gather-3-keys", 13, 0, 0, 2, 3, {S("g"), S("h"), S("i")}, 1,
     {C("\x00", "")}, EP},
    {"gather-long-name", 13, 0, 0, 2, 1, {S("123456789")}, 1, {C("\x00", "")},
     EK},
    {"stats", 14, 0, 0, 0, K0, V0, OK},
    {"stats-key", 14, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"stats-reply", 14, RDZV_F_REPLY, 0, 0, K0, V0, EP},
    {"error-request", 15, 0, 0, 0, K0, V0, EP},
    {"error-reply", 15, RDZV_F_REPLY, 0, 0, K0, V0, EP},
    {"type-0", 0, 0, 0, 0, K0, V0, EP},
    {"coll-status", 18, 0, 12, 16, 1, {S("b")}, V0, OK},
    {"coll-status-gather", 18, 0, 13, 4096, 1, {S("g")}, V0, OK},
    {"coll-status-bad-type", 18, 0, 4, 16, 1, {S("b")}, V0, EP},
    {"coll-status-b0", 18, 0, 12, 0, 1, {S("b")}, V0, EP},
    {"coll-status-too-many", 18, 0, 12, 4097, 1, {S("b")}, V0, EP},
    {"coll-status-no-name", 18, 0, 12, 16, K0, V0, EP},
    {"coll-status-val", 18, 0, 12, 16, 1, {S("b")}, 1, {S("v")}, EP},
    {"coll-status-give-up", 18, RDZV_F_GIVE_UP, 12, 1, 2, {S("b"), S("why")},
     V0, OK},
    {"coll-status-3-keys", 18, 0, 12, 1, 3, {S("b"), S("c"), S("d")}, V0, EP},
    /* A reason (keys[1]) is no key: over the 8-byte key limit, it passes. */
    {"coll-status-long-why", 18, RDZV_F_GIVE_UP, 12, 1, 2,
     {S("b"), S("a rank gave up at its deadline")}, V0, OK},
    {"abort-long-why", 17, 0, 1, 0, 2, {S("r"), S("the launcher killed it")},
     V0, OK},
    {"abort-long-name", 17, 0, 1, 0, 2, {S("round-too-long"), S("why")}, V0,
     EK},
    {"ping", 19, 0, 0, 0, K0, V0, OK},
    {"ping-key", 19, 0, 0, 0, 1, {S("k")}, V0, EP},
    {"ping-val", 19, 0, 0, 0, K0, 1, {S("v")}, EP},
    {"ping-reply", 19, RDZV_F_REPLY, 0, 0, K0, V0, EP},
    {"keys", 20, 0, 0, 0, K0, V0, OK},
    {"keys-prefix", 20, 0, 0, 0, 1, {S("/p")}, V0, OK},
    {"keys-empty-prefix", 20, 0, 0, 0, 1, {S("")}, V0, EP},
    {"keys-2-prefixes", 20, 0, 0, 0, 2, {S("a"), S("b")}, V0, EP},
    {"keys-val", 20, 0, 0, 0, K0, 1, {S("v")}, EP},
    {"type-21", 21, 0, 0, 0, K0, V0, EP},
};
/* clang-format on */
#define NVCASES (sizeof(vcases) / sizeof(vcases[0]))

static struct rdzv_msg vcase_msg(const struct vcase *vc) {
  struct rdzv_msg m;

  memset(&m, 0, sizeof(m));
  m.type = vc->type;
  m.flags = vc->flags;
  m.a = vc->a;
  m.b = vc->b;
  m.keys.n = vc->nkeys;
  m.keys.v = vc->nkeys != 0 ? vc->keys : NULL;
  m.vals.n = vc->nvals;
  m.vals.v = vc->nvals != 0 ? vc->vals : NULL;
  return m;
}

static void test_validate(void **state) {
  const struct rdzv_wire_limits lim = {8, 4};
  size_t i;

  for (i = 0; i < NVCASES; i++) {
    const struct vcase *vc = &vcases[i];
    struct rdzv_msg m = vcase_msg(vc);
    struct rdzv_msg d;
    struct rdzv_buf b = {0};
    size_t used;

    print_message("validate %s\n", vc->name);
    assert_int_equal(rdzv_msg_validate_request(&m, &lim), vc->want);
    /* The same request after a trip over the wire (raw item lists). */
    if (vc->type < 1 || vc->type > RDZV_MSG_TYPE_MAX)
      continue;
    assert_int_equal(rdzv_msg_encode(&m, &b), 0);
    assert_int_equal(rdzv_msg_decode(b.data, b.len, NO_LIMIT, &d, &used), 0);
    assert_int_equal(rdzv_msg_validate_request(&d, &lim), vc->want);
    rdzv_buf_free(&b);
  }
}

/* Raising the limits clears EKEY_TOO_LONG/EVALUE_TOO_BIG and nothing
 * else; a NULL limit struct means "no limits". */
static void test_validate_limits(void **state) {
  const struct rdzv_wire_limits big = {UINT32_MAX, UINT32_MAX};
  size_t i;

  for (i = 0; i < NVCASES; i++) {
    struct rdzv_msg m = vcase_msg(&vcases[i]);
    int want = vcases[i].want;

    if (want == EK || want == EV)
      want = OK;
    assert_int_equal(rdzv_msg_validate_request(&m, &big), want);
    assert_int_equal(rdzv_msg_validate_request(&m, NULL), want);
  }
}

/* A members spec (keys[1] of a collective) of RDZV_WIRE_MEMBERS_MAX_BYTES
 * passes under any key limit; one byte more obeys the key limit. */
static void test_validate_members_limit(void **state) {
  static uint8_t spec[RDZV_WIRE_REASON_MAX_BYTES + 1];
  const struct rdzv_wire_limits small = {8, 4}, big = {4096, 4};
  struct rdzv_slice keys[2] = {{(const uint8_t *)"b", 1}, {spec, 0}};
  struct rdzv_slice val = {(const uint8_t *)"\0\0\0\0\0\0\0\0", 8};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  memset(spec, 1, sizeof(spec));
  m.type = RDZV_MSG_BARRIER;
  m.b = 1;
  m.keys.n = 2;
  m.keys.v = keys;
  m.vals.n = 1;
  m.vals.v = &val;
  keys[1].n = RDZV_WIRE_MEMBERS_MAX_BYTES;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), 0);
  keys[1].n = RDZV_WIRE_MEMBERS_MAX_BYTES + 1;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), EK);
  assert_int_equal(rdzv_msg_validate_request(&m, &big), 0);
  keys[0].n = 1;
  /* COLL_STATUS's and ABORT's keys[1]: a reason, free text up to
   * RDZV_WIRE_REASON_MAX_BYTES whatever the key limit. */
  m.type = RDZV_MSG_COLL_STATUS;
  m.a = RDZV_MSG_BARRIER;
  m.vals.n = 0;
  m.vals.v = NULL;
  keys[1].n = RDZV_WIRE_REASON_MAX_BYTES;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), 0);
  keys[1].n = RDZV_WIRE_REASON_MAX_BYTES + 1;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), EK);
  m.type = RDZV_MSG_ABORT;
  m.a = 1;
  keys[1].n = RDZV_WIRE_REASON_MAX_BYTES;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), 0);
  keys[1].n = RDZV_WIRE_REASON_MAX_BYTES + 1;
  assert_int_equal(rdzv_msg_validate_request(&m, &small), EK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_validate),
      cmocka_unit_test(test_validate_limits),
      cmocka_unit_test(test_validate_members_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
