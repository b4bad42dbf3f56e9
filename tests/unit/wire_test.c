/* Unit tests for the wire codec (store/wire/wire.c) and the error space
 * (store/wire/error.c); request validation is in wire_validate_test.c.
 *
 * Every valid frame in the table is fed whole, byte by byte and split at
 * every position; a malformed-input corpus and seeded random inputs check
 * that the decoder rejects bad bytes with a documented code and never
 * reads outside its input (each input lives in an exact-size heap block,
 * so ASan builds catch any over-read). */
#include <errno.h>
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

/* ---- a table of valid messages ------------------------------------------ */

struct tcase {
  const char *name;
  uint8_t type;
  uint16_t flags;
  uint32_t req_id;
  int32_t status;
  int64_t a, b;
  uint32_t nkeys;
  struct rdzv_slice keys[4];
  uint32_t nvals;
  struct rdzv_slice vals[4];
};

/* clang-format off */
static const struct tcase cases[] = {
    {"hello", RDZV_MSG_HELLO, 0, 1, 0, RDZV_ROLE_NODE, 0, 2,
     {S("job-42"), S("node07")}, 0, {{0}}},
    {"hello-reply", RDZV_MSG_HELLO, RDZV_F_REPLY, 1, RDZV_EJOB_MISMATCH, 0, 0,
     0, {{0}}, 0, {{0}}},
    {"set", RDZV_MSG_SET, RDZV_F_WRITE_ONCE, 0xFFFFFFFFu, 0, 0, 0, 1,
     {S("key")}, 1, {S("val\0with\xffzero")}},
    {"set-empty-val", RDZV_MSG_SET, 0, 7, 0, 0, 0, 1, {S("k")}, 1, {S("")}},
    {"get", RDZV_MSG_GET, 0, 3, 0, 0, 0, 1, {S("k")}, 0, {{0}}},
    {"get-reply", RDZV_MSG_GET, RDZV_F_REPLY, 3, 0, 1, 0, 0, {{0}}, 1,
     {S("value")}},
    {"wait", RDZV_MSG_WAIT, 0, 9, 0, 30000, 0, 3, {S("a"), S("bb"), S("ccc")},
     0, {{0}}},
    {"wait-deadline", RDZV_MSG_WAIT, RDZV_F_REPLY, 9, RDZV_EDEADLINE, 0, 0, 1,
     {S("ccc")}, 0, {{0}}},
    {"add", RDZV_MSG_ADD, 0, 11, 0, -5, 0, 1, {S("counter")}, 0, {{0}}},
    {"add-extremes", RDZV_MSG_ADD, RDZV_F_REPLY, 11, 0, INT64_MIN, INT64_MAX,
     0, {{0}}, 0, {{0}}},
    {"cas", RDZV_MSG_CAS, 0, 12, 0, 0, 0, 1, {S("lock")}, 2,
     {S(""), S("owner")}},
    {"delete", RDZV_MSG_DELETE, 0, 13, 0, 0, 0, 1, {S("gone")}, 0, {{0}}},
    {"mget", RDZV_MSG_MGET, 0, 14, 0, 0, 0, 4,
     {S("k0"), S("k1"), S("k2"), S("k3")}, 0, {{0}}},
    {"mset", RDZV_MSG_MSET, RDZV_F_WRITE_ONCE, 15, 0, 0, 0, 2,
     {S("x"), S("y")}, 2, {S("1"), S("2")}},
    {"append", RDZV_MSG_APPEND, 0, 16, 0, 0, 0, 1, {S("log")}, 1,
     {S("line\n")}},
    {"nkeys", RDZV_MSG_NKEYS, 0, 17, 0, 0, 0, 0, {{0}}, 0, {{0}}},
    {"barrier", RDZV_MSG_BARRIER, 0, 18, 0, 0, 8, 1, {S("init")}, 2,
     {C("\x01", ""), C("\x02", "")}},
    {"gather", RDZV_MSG_GATHER, 0, 19, 0, 0, 4, 1, {S("ids")}, 3,
     {C("\x00", "abc"), C("\x01", ""), C("\x03", "uid")}},
    {"gather-superseded", RDZV_MSG_GATHER, RDZV_F_REPLY | RDZV_F_SUPERSEDED,
     19, 0, 4, 4, 0, {{0}}, 0, {{0}}},
    {"stats", RDZV_MSG_STATS, 0, 20, 0, 0, 0, 0, {{0}}, 0, {{0}}},
    {"stats-reply", RDZV_MSG_STATS, RDZV_F_REPLY, 20, 0, 0, 0, 0, {{0}}, 1,
     {S("{\"keys\":3}")}},
    {"error", RDZV_MSG_ERROR, RDZV_F_REPLY, 0, RDZV_EHELLO, 0, 0, 1,
     {S("first frame was not a hello")}, 0, {{0}}},
};
/* clang-format on */
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static struct rdzv_msg case_msg(const struct tcase *tc) {
  struct rdzv_msg m;

  memset(&m, 0, sizeof(m));
  m.type = tc->type;
  m.flags = tc->flags;
  m.req_id = tc->req_id;
  m.status = tc->status;
  m.a = tc->a;
  m.b = tc->b;
  m.keys.n = tc->nkeys;
  m.keys.v = tc->nkeys != 0 ? tc->keys : NULL;
  m.vals.n = tc->nvals;
  m.vals.v = tc->nvals != 0 ? tc->vals : NULL;
  return m;
}

static size_t list_bytes(uint32_t n, const struct rdzv_slice *v) {
  size_t total = 4;
  uint32_t i;

  for (i = 0; i < n; i++)
    total += 4 + v[i].n;
  return total;
}

static void encode_case(const struct tcase *tc, struct rdzv_buf *b) {
  struct rdzv_msg m = case_msg(tc);

  assert_int_equal(rdzv_msg_encode(&m, b), 0);
}

/* Copies n bytes into an exact-size heap block (ASan sees any over-read). */
static uint8_t *dup_exact(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n != 0 ? n : 1);

  assert_non_null(q);
  if (n != 0)
    memcpy(q, p, n);
  return q;
}

/* Decodes from an exact-size copy of p. The decoded message points into
 * the copy: pass `keep` to receive it (the caller frees it), or NULL when
 * only the result code matters. */
static int decode_copy(const uint8_t *p, size_t n, size_t max_body,
                       struct rdzv_msg *m, size_t *used, uint8_t **keep) {
  uint8_t *q = dup_exact(p, n);
  int rc = rdzv_msg_decode(q, n, max_body, m, used);

  if (keep != NULL)
    *keep = q;
  else
    free(q);
  return rc;
}

static int decode_exact(const uint8_t *p, size_t n, size_t max_body,
                        struct rdzv_msg *m, size_t *used) {
  return decode_copy(p, n, max_body, m, used, NULL);
}

static void assert_list_eq(const struct rdzv_items *got, uint32_t n,
                           const struct rdzv_slice *want) {
  struct rdzv_slice s;
  size_t pos = 0;
  uint32_t i;

  assert_int_equal(got->n, n);
  for (i = 0; i < n; i++) {
    assert_int_equal(rdzv_items_next(got, &pos, &s), 1);
    assert_int_equal(s.n, want[i].n);
    if (s.n != 0)
      assert_memory_equal(s.p, want[i].p, s.n);
    assert_int_equal(rdzv_items_get(got, i, &s), 0);
    assert_int_equal(s.n, want[i].n);
    if (s.n != 0)
      assert_memory_equal(s.p, want[i].p, s.n);
  }
  assert_int_equal(rdzv_items_next(got, &pos, &s), 0);
  assert_int_equal(rdzv_items_get(got, n, &s), RDZV_EPROTO);
}

static void assert_msg_eq(const struct rdzv_msg *m, const struct tcase *tc) {
  assert_int_equal(m->type, tc->type);
  assert_int_equal(m->flags, tc->flags);
  assert_int_equal(m->req_id, tc->req_id);
  assert_int_equal(m->status, tc->status);
  assert_true(m->a == tc->a);
  assert_true(m->b == tc->b);
  assert_null(m->keys.v);
  assert_null(m->vals.v);
  assert_list_eq(&m->keys, tc->nkeys, tc->keys);
  assert_list_eq(&m->vals, tc->nvals, tc->vals);
}

/* ---- round trips and framing -------------------------------------------- */

static void test_roundtrip(void **state) {
  size_t i;

  for (i = 0; i < NCASES; i++) {
    const struct tcase *tc = &cases[i];
    struct rdzv_buf b = {0}, again = {0};
    struct rdzv_msg m;
    size_t used = 0;
    size_t body =
        20 + list_bytes(tc->nkeys, tc->keys) + list_bytes(tc->nvals, tc->vals);
    uint8_t *copy;

    encode_case(tc, &b);
    assert_int_equal(b.len, RDZV_WIRE_HEADER_BYTES + body);
    assert_int_equal(decode_copy(b.data, b.len, NO_LIMIT, &m, &used, &copy), 0);
    assert_int_equal(used, b.len);
    assert_msg_eq(&m, tc);
    free(copy);
    /* The decoded (raw) form re-encodes to the same bytes. */
    assert_int_equal(rdzv_msg_decode(b.data, b.len, body, &m, &used), 0);
    assert_int_equal(rdzv_msg_encode(&m, &again), 0);
    assert_int_equal(again.len, b.len);
    assert_memory_equal(again.data, b.data, b.len);
    /* One byte under the body length is too big. */
    assert_int_equal(rdzv_msg_decode(b.data, b.len, body - 1, &m, &used),
                     RDZV_EFRAME_TOO_BIG);
    rdzv_buf_free(&b);
    rdzv_buf_free(&again);
  }
}

/* The exact bytes of one frame, against the layout in wire.h. */
static void test_golden_bytes(void **state) {
  static const uint8_t want[] = {
      0x52, 0x44, 0x5A, 0x56, /* magic */
      0x01, 0x02, 0x03, 0x00, /* version, SET, flags 0x0003 */
      0x04, 0x03, 0x02, 0x01, /* req_id */
      38,   0,    0,    0,    /* body_len */
      0xFE, 0xFF, 0xFF, 0xFF, /* status -2 */
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,      /* a */
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,      /* b = -1 */
      1,    0,    0,    0,    1,    0,    0,    0,    'k', /* keys */
      1,    0,    0,    0,    1,    0,    0,    0,    'v', /* vals */
  };
  const struct rdzv_slice k = S("k"), v = S("v");
  struct rdzv_msg m = {0};
  struct rdzv_buf b = {0};

  m.type = RDZV_MSG_SET;
  m.flags = RDZV_F_REPLY | RDZV_F_WRITE_ONCE;
  m.req_id = 0x01020304u;
  m.status = -2;
  m.a = 0x1122334455667788;
  m.b = -1;
  m.keys.n = 1;
  m.keys.v = &k;
  m.vals.n = 1;
  m.vals.v = &v;
  assert_int_equal(rdzv_msg_encode(&m, &b), 0);
  assert_int_equal(b.len, sizeof(want));
  assert_memory_equal(b.data, want, sizeof(want));
  rdzv_buf_free(&b);
}

static void test_bytewise(void **state) {
  size_t i, k;

  for (i = 0; i < NCASES; i++) {
    struct rdzv_buf b = {0};
    struct rdzv_msg m;
    size_t used = 0;
    uint8_t *copy;

    encode_case(&cases[i], &b);
    for (k = 0; k < b.len; k++)
      assert_int_equal(decode_exact(b.data, k, NO_LIMIT, &m, &used),
                       RDZV_ENEEDMORE);
    assert_int_equal(decode_copy(b.data, b.len, NO_LIMIT, &m, &used, &copy), 0);
    assert_int_equal(used, b.len);
    assert_msg_eq(&m, &cases[i]);
    free(copy);
    rdzv_buf_free(&b);
  }
}

/* Prefix then rest, appended to a growing buffer, at every split point;
 * a second frame follows the first, so `used` must stop at the boundary. */
static void test_split(void **state) {
  size_t i, s;

  for (i = 0; i < NCASES; i++) {
    const struct tcase *next = &cases[(i + 1) % NCASES];
    struct rdzv_buf frame = {0};
    struct rdzv_msg m;
    size_t used;

    encode_case(&cases[i], &frame);
    encode_case(next, &frame);
    for (s = 1; s < frame.len; s++) {
      struct rdzv_buf in = {0};
      size_t first = frame.len - (list_bytes(next->nkeys, next->keys) +
                                  list_bytes(next->nvals, next->vals) + 36);
      int rc;

      assert_int_equal(rdzv_buf_append(&in, frame.data, s), 0);
      rc = rdzv_msg_decode(in.data, in.len, NO_LIMIT, &m, &used);
      assert_int_equal(rc, s < first ? RDZV_ENEEDMORE : 0);
      assert_int_equal(rdzv_buf_append(&in, frame.data + s, frame.len - s), 0);
      assert_int_equal(rdzv_msg_decode(in.data, in.len, NO_LIMIT, &m, &used),
                       0);
      assert_int_equal(used, first);
      assert_msg_eq(&m, &cases[i]);
      rdzv_buf_consume(&in, used);
      assert_int_equal(rdzv_msg_decode(in.data, in.len, NO_LIMIT, &m, &used),
                       0);
      assert_int_equal(used, in.len);
      assert_msg_eq(&m, next);
      rdzv_buf_free(&in);
    }
    rdzv_buf_free(&frame);
  }
}

/* Every frame in one stream, delivered in chunks of 1..7 bytes. */
static void test_stream_chunks(void **state) {
  struct rdzv_buf all = {0}, in = {0};
  struct rdzv_msg m;
  size_t i, off = 0, ndone = 0, used;

  for (i = 0; i < NCASES; i++)
    encode_case(&cases[i], &all);
  for (i = 0; off < all.len; i++) {
    size_t chunk = 1 + i % 7;
    int rc;

    if (chunk > all.len - off)
      chunk = all.len - off;
    assert_int_equal(rdzv_buf_append(&in, all.data + off, chunk), 0);
    off += chunk;
    for (;;) {
      rc = rdzv_msg_decode(in.data, in.len, NO_LIMIT, &m, &used);
      if (rc == RDZV_ENEEDMORE)
        break;
      assert_int_equal(rc, 0);
      assert_msg_eq(&m, &cases[ndone]);
      ndone++;
      rdzv_buf_consume(&in, used);
    }
  }
  assert_int_equal(ndone, NCASES);
  assert_int_equal(in.len, 0);
  rdzv_buf_free(&all);
  rdzv_buf_free(&in);
}

/* ---- malformed input ---------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* Builds a frame: header (body_len as given) then the body words. Each
 * body word is a u32; `nbytes` of them (rounded up) are emitted, and the
 * frame is cut at 16 + nbytes. */
struct bad {
  const char *name;
  uint8_t head[16];
  size_t head_len;
  uint32_t body_len;
  uint32_t body[16];
  size_t body_bytes;
  int want;
};

#define HDR(type)                                                              \
  { 0x52, 0x44, 0x5A, 0x56, 1, (type), 0, 0, 1, 0, 0, 0 }
/* status, a (2 words), b (2 words). */
#define FIX 0, 0, 0, 0, 0

/* clang-format off */
static const struct bad bads[] = {
    {"magic-1-byte", {0x53}, 1, 0, {0}, 0, RDZV_EPROTO},
    {"magic-last-byte", {0x52, 0x44, 0x5A, 0x57}, 4, 0, {0}, 0, RDZV_EPROTO},
    {"magic-before-version", {0x52, 0x44, 0x5A, 0x00, 9}, 5, 0, {0}, 0,
     RDZV_EPROTO},
    {"version-0", {0x52, 0x44, 0x5A, 0x56, 0}, 5, 0, {0}, 0,
     RDZV_EPROTO_VERSION},
    {"version-2-full", {0x52, 0x44, 0x5A, 0x56, 2, 3}, 12, 28, {FIX, 0, 0},
     28, RDZV_EPROTO_VERSION},
    {"type-0", HDR(0), 6, 0, {0}, 0, RDZV_EPROTO},
    {"type-24", HDR(24), 12, 28, {FIX, 0, 0}, 28, RDZV_EPROTO},
    {"type-255", HDR(255), 12, 28, {FIX, 0, 0}, 28, RDZV_EPROTO},
    {"body-over-max-header-only", HDR(2), 12, 1025, {0}, 0,
     RDZV_EFRAME_TOO_BIG},
    {"body-ffffffff-header-only", HDR(2), 12, 0xFFFFFFFFu, {0}, 0,
     RDZV_EFRAME_TOO_BIG},
    {"body-0", HDR(2), 12, 0, {0}, 0, RDZV_EPROTO},
    {"body-27", HDR(2), 12, 27, {FIX, 0, 0}, 27, RDZV_EPROTO},
    {"body-27-header-only", HDR(2), 12, 27, {0}, 0, RDZV_EPROTO},
    {"missing-nvals", HDR(3), 12, 28, {FIX, 1, 0}, 28, RDZV_EPROTO},
    {"truncated-item-len", HDR(3), 12, 34, {FIX, 2, 4, 0x64636261, 0}, 34,
     RDZV_EPROTO},
    {"item-past-body", HDR(3), 12, 36, {FIX, 1, 100, 0x64636261, 0}, 36,
     RDZV_EPROTO},
    {"item-one-past-body", HDR(3), 12, 28, {FIX, 1, 1}, 28, RDZV_EPROTO},
    {"item-len-ffffffff", HDR(3), 12, 36, {FIX, 1, 0xFFFFFFFFu, 0, 0}, 36,
     RDZV_EPROTO},
    {"nkeys-huge", HDR(3), 12, 32, {FIX, 0xFFFFFFFFu, 0, 0}, 32, RDZV_EPROTO},
    {"nvals-huge", HDR(3), 12, 28, {FIX, 0, 0xFFFFFFFFu}, 28, RDZV_EPROTO},
    {"nvals-one-too-many", HDR(3), 12, 32, {FIX, 0, 2, 0}, 32, RDZV_EPROTO},
    {"trailing-byte", HDR(3), 12, 29, {FIX, 0, 0, 0}, 29, RDZV_EPROTO},
    {"trailing-word", HDR(3), 12, 32, {FIX, 0, 0, 7}, 32, RDZV_EPROTO},
};
/* clang-format on */
#define NBADS (sizeof(bads) / sizeof(bads[0]))

static size_t bad_build(const struct bad *bd, uint8_t *out) {
  uint8_t body[64];
  size_t i;

  memset(out, 0, 16);
  memcpy(out, bd->head, bd->head_len);
  if (bd->head_len < 16 && bd->head_len > 6) {
    put32(out + 12, bd->body_len);
  } else if (bd->head_len <= 6) {
    return bd->head_len;
  }
  for (i = 0; i < 16; i++)
    put32(body + 4 * i, bd->body[i]);
  memcpy(out + 16, body, bd->body_bytes);
  return 16 + bd->body_bytes;
}

static void test_malformed(void **state) {
  uint8_t frame[128];
  size_t i, n, used;
  struct rdzv_msg m;

  for (i = 0; i < NBADS; i++) {
    n = bad_build(&bads[i], frame);
    print_message("malformed %s (%zu bytes)\n", bads[i].name, n);
    assert_int_equal(decode_exact(frame, n, 1024, &m, &used), bads[i].want);
  }
}

/* A header with an oversized body_len is refused before any body byte. */
static void test_too_big_header_only(void **state) {
  uint8_t h[16] = {0x52, 0x44, 0x5A, 0x56, 1, 2, 0, 0, 0, 0, 0, 0};
  struct rdzv_msg m;
  size_t used;
  size_t k;

  put32(h + 12, 65);
  for (k = 0; k < 16; k++)
    assert_int_equal(decode_exact(h, k, 64, &m, &used), RDZV_ENEEDMORE);
  assert_int_equal(decode_exact(h, 16, 64, &m, &used), RDZV_EFRAME_TOO_BIG);
  assert_int_equal(decode_exact(h, 16, 65, &m, &used), RDZV_ENEEDMORE);
  /* A limit below the minimum body refuses even the smallest frame. */
  put32(h + 12, RDZV_WIRE_MIN_BODY_BYTES);
  assert_int_equal(decode_exact(h, 16, 0, &m, &used), RDZV_EFRAME_TOO_BIG);
}

/* ---- random input ------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;

  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static int documented_decode_rc(int rc) {
  return rc == 0 || rc == RDZV_ENEEDMORE || rc == RDZV_EPROTO ||
         rc == RDZV_EPROTO_VERSION || rc == RDZV_EFRAME_TOO_BIG;
}

/* Fills p with one random input of one of three kinds: pure noise, a valid
 * header prefix then noise, or a valid frame with a few bytes changed. */
static size_t random_input(uint64_t *rng, uint8_t *p, size_t cap) {
  unsigned kind = (unsigned)(rng_next(rng) % 3);
  struct rdzv_buf b = {0};
  size_t n, i, flips;

  if (kind == 2) {
    encode_case(&cases[rng_next(rng) % NCASES], &b);
    n = b.len < cap ? b.len : cap;
    memcpy(p, b.data, n);
    rdzv_buf_free(&b);
    flips = 1 + rng_next(rng) % 3;
    for (i = 0; i < flips; i++)
      p[rng_next(rng) % n] ^= (uint8_t)(1 + rng_next(rng) % 255);
    return n;
  }
  n = rng_next(rng) % cap;
  for (i = 0; i < n; i++)
    p[i] = (uint8_t)rng_next(rng);
  if (kind == 1 && n >= 16) {
    put32(p, RDZV_WIRE_MAGIC);
    p[4] = RDZV_WIRE_VERSION;
    p[5] = (uint8_t)(1 + rng_next(rng) % RDZV_MSG_TYPE_MAX);
    put32(p + 12, (uint32_t)(rng_next(rng) % (n - 15)));
  }
  return n;
}

static void test_random(void **state) {
  uint64_t rng = 0x9E3779B97F4A7C15u;
  int counts[4] = {0};
  uint8_t p[256];
  int iter;

  for (iter = 0; iter < 10000; iter++) {
    size_t n = random_input(&rng, p, sizeof(p));
    struct rdzv_msg m;
    size_t used = 0;
    uint8_t *copy;
    int rc = decode_copy(p, n, 4096, &m, &used, &copy);

    assert_true(documented_decode_rc(rc));
    if (rc == 0) {
      struct rdzv_buf b = {0};

      assert_true(used <= n);
      assert_int_equal(rdzv_msg_encode(&m, &b), 0);
      assert_int_equal(b.len, used);
      assert_memory_equal(b.data, p, used);
      rdzv_buf_free(&b);
      counts[0]++;
    } else {
      counts[rc == RDZV_ENEEDMORE ? 1 : rc == RDZV_EPROTO ? 2 : 3]++;
    }
    free(copy);
  }
  /* The generator must reach both acceptance and the main rejections. */
  assert_true(counts[0] > 0);
  assert_true(counts[1] > 0);
  assert_true(counts[2] > 0);
  assert_true(counts[3] > 0);
}

/* ---- items, buffers, helpers, names ------------------------------------- */

static void test_items(void **state) {
  static const uint8_t raw[] = {2, 0, 0, 0, 'h', 'i', 0,  0,
                                0, 0, 1, 0, 0,   0,   'x'};
  const struct rdzv_slice v[3] = {S("hi"), S(""), S("x")};
  const struct rdzv_items rl = {3, NULL, raw, sizeof(raw)};
  const struct rdzv_items vl = {3, v, NULL, 0};
  const struct rdzv_items empty = {0, NULL, NULL, 0};
  struct rdzv_slice s;
  size_t pos = 0;
  struct rdzv_msg m = {0};
  struct rdzv_buf b1 = {0}, b2 = {0};

  assert_list_eq(&rl, 3, v);
  assert_list_eq(&vl, 3, v);
  assert_int_equal(rdzv_items_next(&empty, &pos, &s), 0);
  assert_int_equal(rdzv_items_get(&empty, 0, &s), RDZV_EPROTO);
  /* Both forms encode to the same bytes. */
  m.type = RDZV_MSG_MGET;
  m.keys = rl;
  assert_int_equal(rdzv_msg_encode(&m, &b1), 0);
  m.keys = vl;
  assert_int_equal(rdzv_msg_encode(&m, &b2), 0);
  assert_int_equal(b1.len, b2.len);
  assert_memory_equal(b1.data, b2.data, b1.len);
  rdzv_buf_free(&b1);
  rdzv_buf_free(&b2);
}

static void test_encode_errors(void **state) {
  static const uint8_t tiny[1] = {0};
  static const uint8_t bad_raw[] = {5, 0, 0, 0, 'a'};
  const struct rdzv_slice huge[2] = {{tiny, 0x80000000u}, {tiny, 0x7FFFFFF0u}};
  struct rdzv_msg m = {0};
  struct rdzv_buf b = {0};

  assert_int_equal(rdzv_buf_append(&b, "x", 1), 0);
  m.type = RDZV_MSG_MGET;
  /* Sizes are summed before any item byte is read. */
  m.keys.n = 2;
  m.keys.v = huge;
  assert_int_equal(rdzv_msg_encode(&m, &b), RDZV_EFRAME_TOO_BIG);
  m.keys.v = NULL;
  m.keys.raw = tiny;
  m.keys.raw_len = (size_t)UINT32_MAX;
  assert_int_equal(rdzv_msg_encode(&m, &b), RDZV_EFRAME_TOO_BIG);
  /* A raw list whose items do not match its count or length. */
  m.keys.n = 1;
  m.keys.raw = bad_raw;
  m.keys.raw_len = sizeof(bad_raw);
  assert_int_equal(rdzv_msg_encode(&m, &b), RDZV_EPROTO);
  m.keys.n = 1;
  m.keys.raw = NULL;
  m.keys.raw_len = 0;
  assert_int_equal(rdzv_msg_encode(&m, &b), RDZV_EPROTO);
  /* Failed encodes leave the buffer as it was. */
  assert_int_equal(b.len, 1);
  assert_int_equal(b.data[0], 'x');
  rdzv_buf_free(&b);
}

/* Encoding by reference: a big value inside a span is referred to, a
 * small one, one outside every span, and one past the cap are copied, and
 * the bytes put back are exactly the plain encoding. */
static void test_encode_refs(void **state) {
  (void)state;
  static uint8_t big[4000], outside[3000], raw[2000];
  for (size_t i = 0; i < sizeof(big); i++)
    big[i] = (uint8_t)(i * 7);
  memset(outside, 'o', sizeof(outside));
  struct rdzv_buf rl = {0};
  for (int i = 0; i < 10; i++) /* a raw list of 10 items of 100 bytes */
    assert_int_equal(rdzv_items_append(&rl, big + 100 * i, 100), 0);
  assert_true(rl.len <= sizeof(raw));
  memcpy(raw, rl.data, rl.len);
  struct rdzv_slice spans[2] = {{big, sizeof(big)}, {raw, (uint32_t)rl.len}};
  struct rdzv_slice vals[4] = {{big + 10, 1000},   /* in span 0: by reference */
                               {big, 16},          /* small: copied */
                               {outside, 3000},    /* no span: copied */
                               {big + 2000, 600}}; /* in span 0 */
  struct rdzv_slice key = {(const uint8_t *)"k", 1};
  struct rdzv_msg m = {.type = RDZV_MSG_GET,
                       .flags = RDZV_F_REPLY,
                       .req_id = 9,
                       .keys = {1, &key, NULL, 0},
                       .vals = {4, vals, NULL, 0}};
  struct rdzv_buf plain = {0}, out = {0};
  assert_int_equal(rdzv_msg_encode(&m, &plain), 0);
  struct rdzv_wire_ref refs[4];
  uint32_t nrefs = 0;
  assert_int_equal(
      rdzv_msg_encode_refs(&m, &out, spans, 2, 512, refs, 4, &nrefs), 0);
  assert_int_equal(nrefs, 2);
  assert_ptr_equal(refs[0].p, big + 10);
  assert_int_equal(refs[0].n, 1000);
  assert_ptr_equal(refs[1].p, big + 2000);
  assert_int_equal(refs[0].span, 0);
  assert_int_equal(out.len + 1600, plain.len);
  /* Put back: the written bytes with the references' bytes in place. */
  struct rdzv_buf back = {0};
  size_t pos = 0;
  for (uint32_t i = 0; i < nrefs; i++) {
    rdzv_buf_append(&back, out.data + pos, refs[i].at - pos);
    rdzv_buf_append(&back, refs[i].p, refs[i].n);
    pos = refs[i].at;
  }
  rdzv_buf_append(&back, out.data + pos, out.len - pos);
  assert_int_equal(back.len, plain.len);
  assert_memory_equal(back.data, plain.data, plain.len);
  /* The cap: one reference at most, the second big value copied. */
  out.len = 0;
  assert_int_equal(
      rdzv_msg_encode_refs(&m, &out, spans, 2, 512, refs, 1, &nrefs), 0);
  assert_int_equal(nrefs, 1);
  assert_int_equal(out.len + 1000, plain.len);
  /* A raw list's body inside a span goes whole, after its count. */
  m.vals = (struct rdzv_items){10, NULL, raw, rl.len};
  plain.len = out.len = 0;
  assert_int_equal(rdzv_msg_encode(&m, &plain), 0);
  assert_int_equal(
      rdzv_msg_encode_refs(&m, &out, spans, 2, 512, refs, 4, &nrefs), 0);
  assert_int_equal(nrefs, 1);
  assert_int_equal(refs[0].span, 1);
  assert_int_equal(refs[0].at, out.len); /* the frame's last bytes */
  assert_int_equal(out.len + rl.len, plain.len);
  assert_memory_equal(out.data, plain.data, out.len);
  /* Under the minimum, or with no spans: the plain bytes. */
  out.len = 0;
  assert_int_equal(
      rdzv_msg_encode_refs(&m, &out, spans, 2, 4096, refs, 4, &nrefs), 0);
  assert_int_equal(nrefs, 0);
  assert_int_equal(out.len, plain.len);
  assert_memory_equal(out.data, plain.data, plain.len);
  rdzv_buf_free(&rl);
  rdzv_buf_free(&plain);
  rdzv_buf_free(&out);
  rdzv_buf_free(&back);
}

static void test_buf(void **state) {
  struct rdzv_buf b = {0};
  size_t i;

  assert_int_equal(rdzv_buf_reserve(&b, 10), 0);
  assert_true(b.cap >= 10);
  assert_int_equal(b.len, 0);
  for (i = 0; i < 1000; i++)
    assert_int_equal(rdzv_buf_append(&b, &(uint8_t){(uint8_t)i}, 1), 0);
  assert_int_equal(b.len, 1000);
  assert_true(b.cap >= 1000);
  rdzv_buf_consume(&b, 998);
  assert_int_equal(b.len, 2);
  assert_int_equal(b.data[0], (uint8_t)998);
  assert_int_equal(b.data[1], (uint8_t)999);
  assert_int_equal(rdzv_buf_append(&b, NULL, 0), 0);
  assert_int_equal(b.len, 2);
  assert_int_equal(rdzv_buf_reserve(&b, SIZE_MAX), RDZV_ENOMEM);
  rdzv_buf_consume(&b, 2);
  assert_int_equal(b.len, 0);
  rdzv_buf_free(&b);
  assert_null(b.data);
  assert_int_equal(b.cap, 0);
  rdzv_buf_free(NULL);
}

static void test_u64le(void **state) {
  uint8_t p[9] = {0};

  rdzv_store_u64le(p + 1, 0x0102030405060708u);
  assert_int_equal(p[0], 0);
  assert_int_equal(p[1], 0x08);
  assert_int_equal(p[8], 0x01);
  assert_true(rdzv_load_u64le(p + 1) == 0x0102030405060708u);
  rdzv_store_u64le(p, UINT64_MAX);
  assert_true(rdzv_load_u64le(p) == UINT64_MAX);
}

static void test_type_names(void **state) {
  static const char *const want[] = {
      "unknown", "hello", "set",     "get",         "wait",
      "add",     "cas",   "delete",  "mget",        "mset",
      "append",  "nkeys", "barrier", "gather",      "stats",
      "error",   "join",  "abort",   "coll_status", "ping",
      "keys",    "auth",  "inval",   "ts_space",    "unknown"};
  int t;

  for (t = 0; t <= RDZV_MSG_TYPE_MAX + 1; t++)
    assert_string_equal(rdzv_msg_type_name(t), want[t]);
  assert_string_equal(rdzv_msg_type_name(-1), "unknown");
  assert_string_equal(rdzv_msg_type_name(255), "unknown");
}

static void test_errors(void **state) {
  assert_string_equal(rdzv_strerror(0), "success");
  assert_string_equal(rdzv_err_name(0), "OK");
  assert_string_equal(rdzv_strerror(RDZV_EDEADLINE), "deadline passed");
  assert_string_equal(rdzv_err_name(RDZV_EDEADLINE), "RDZV_EDEADLINE");
  assert_string_equal(rdzv_err_name(RDZV_EPROTO), "RDZV_EPROTO");
  assert_string_equal(rdzv_err_name(RDZV_ENOMEM), "RDZV_ENOMEM");
  assert_string_equal(rdzv_strerror(RDZV_ENOMEM), "out of memory");
  assert_string_equal(rdzv_err_name(-ECONNREFUSED), "ECONNREFUSED");
  assert_string_equal(rdzv_strerror(-ECONNREFUSED), "Connection refused");
  assert_string_equal(rdzv_err_name(-ENOENT), "ENOENT");
  /* Unknown codes in either range, positive values and INT_MIN. */
  assert_string_equal(rdzv_err_name(-1999), "UNKNOWN");
  assert_string_equal(rdzv_strerror(-1999), "unknown error");
  assert_string_equal(rdzv_err_name(5), "UNKNOWN");
  assert_string_equal(rdzv_strerror(5), "unknown error");
  assert_string_equal(rdzv_err_name(-2147483647 - 1), "UNKNOWN");
  assert_non_null(rdzv_strerror(-2147483647 - 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_golden_bytes),
      cmocka_unit_test(test_bytewise),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_stream_chunks),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_too_big_header_only),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_items),
      cmocka_unit_test(test_encode_errors),
      cmocka_unit_test(test_encode_refs),
      cmocka_unit_test(test_buf),
      cmocka_unit_test(test_u64le),
      cmocka_unit_test(test_type_names),
      cmocka_unit_test(test_errors),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
