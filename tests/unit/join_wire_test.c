/* Unit tests for the JOIN value encodings (rendezvous/join_wire.c): round
 * params, join records, assignments and refusals.
 *
 * Valid values round-trip and match golden bytes; every truncation, every
 * extension and a corpus of malformed values are RDZV_EPROTO; seeded
 * random and mutated byte strings never crash and, when accepted, encode
 * back to the same bytes. Every input to a decoder lives in an exact-size
 * heap block, so ASan builds catch any read past its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv/error.h"
#include "rendezvous/join_wire.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A copy of p[0..n) in a heap block of exactly n bytes (1 if n is 0, with
 * the pointer still only read for n bytes). */
static uint8_t *dup_exact(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  assert_non_null(q);
  if (n)
    memcpy(q, p, n);
  return q;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static int rec_decode_exact(const uint8_t *p, size_t n,
                            struct rdzv_join_full *out) {
  uint8_t *q = dup_exact(p, n);
  int rc = rdzv_join_rec_decode(q, n, out);
  /* On success the decoded strings point into the input. */
  if (rc == 0) {
    assert_true(out->rec.host >= q &&
                out->rec.host + out->rec.host_len <= q + n);
    assert_true(out->rec.location >= q &&
                out->rec.location + out->rec.location_len <= q + n);
    assert_true(out->topo >= q && out->topo + out->topo_len <= q + n);
  }
  free(q);
  return rc;
}

static int params_decode_exact(const uint8_t *p, size_t n,
                               struct rdzv_join_params *out) {
  uint8_t *q = dup_exact(p, n);
  int rc = rdzv_join_params_decode(q, n, out);
  free(q);
  return rc;
}

static int assign_decode_exact(const uint8_t *p, size_t n, uint64_t *claim,
                               struct rdzv_assignment *out) {
  uint8_t *q = dup_exact(p, n);
  int rc = rdzv_join_assign_decode(q, n, claim, out);
  free(q);
  return rc;
}

/* ---- params ------------------------------------------------------------- */

/* clang-format off */
static const struct rdzv_join_params params_cases[] = {
    {1, 1, 0, 0, 0},
    {1, 8, 500, 60000, 0},
    {8, 8, 0, 300000, 0},
    {4096, 100000, 30000, 600000, 0},
    {1, 2147483647u, UINT32_MAX, UINT32_MAX, 0},
    {2147483647u, 2147483647u, 1, 1, 0},
    {16, 16, 0, 60000, 4},          /* whole domains: segments of 4 hosts */
    {1, 1, 0, 0, 1},
    {8, 72, 500, 60000, 2147483647u},
};
/* clang-format on */

static void test_params_roundtrip(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(params_cases) / sizeof(params_cases[0]); k++) {
    const struct rdzv_join_params *p = &params_cases[k];
    uint8_t buf[RDZV_JOIN_PARAMS_MAX_BYTES];
    size_t size = rdzv_join_params_size(p);
    assert_int_equal(size, p->segment_hosts > 0 ? RDZV_JOIN_PARAMS_MAX_BYTES
                                                : RDZV_JOIN_PARAMS_BYTES);
    struct rdzv_join_params got;
    memset(&got, 0xEE, sizeof(got));
    rdzv_join_params_encode(p, buf);
    assert_int_equal(params_decode_exact(buf, size, &got), 0);
    assert_memory_equal(&got, p, sizeof(got));
    /* Every truncation and an extra byte are refused, but the 16 bytes
     * before a segment size: those are params without one. */
    for (size_t n = 0; n < size; n++) {
      int rc = params_decode_exact(buf, n, &got);
      if (n == RDZV_JOIN_PARAMS_BYTES) {
        assert_int_equal(rc, 0);
        assert_int_equal(got.segment_hosts, 0);
      } else {
        assert_int_equal(rc, RDZV_EPROTO);
      }
    }
    uint8_t longer[RDZV_JOIN_PARAMS_MAX_BYTES + 1];
    memcpy(longer, buf, size);
    memset(longer + size, 0, sizeof(longer) - size);
    assert_int_equal(params_decode_exact(longer, size + 1, &got), RDZV_EPROTO);
  }
}

static void test_params_golden(void **state) {
  (void)state;
  static const struct rdzv_join_params p = {0x04030201u, 0x08070605u,
                                            0x0C0B0A09u, 0x100F0E0Du, 0};
  static const uint8_t want[RDZV_JOIN_PARAMS_BYTES] = {
      1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  uint8_t buf[RDZV_JOIN_PARAMS_MAX_BYTES];
  rdzv_join_params_encode(&p, buf);
  assert_memory_equal(buf, want, sizeof(want));
  /* With a segment size: four more bytes, nothing before them changed. */
  static const struct rdzv_join_params ps = {
      0x04030201u, 0x08070605u, 0x0C0B0A09u, 0x100F0E0Du, 0x14131211u};
  static const uint8_t want_s[RDZV_JOIN_PARAMS_MAX_BYTES] = {
      1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  assert_int_equal(rdzv_join_params_size(&ps), sizeof(want_s));
  rdzv_join_params_encode(&ps, buf);
  assert_memory_equal(buf, want_s, sizeof(want_s));
}

struct bad_params {
  const char *name;
  uint32_t min, max;
};

/* clang-format off */
static const struct bad_params bad_params[] = {
    {"min 0", 0, 8},
    {"min 0, max 0", 0, 0},
    {"min > max", 9, 8},
    {"min > max by one at the top", 2147483647u, 2147483646u},
    {"min huge", UINT32_MAX, 1},
};
/* clang-format on */

static void test_params_malformed(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(bad_params) / sizeof(bad_params[0]); k++) {
    uint8_t buf[RDZV_JOIN_PARAMS_BYTES] = {0};
    struct rdzv_join_params got;
    put32(buf, bad_params[k].min);
    put32(buf + 4, bad_params[k].max);
    put32(buf + 8, 100);
    put32(buf + 12, 1000);
    if (params_decode_exact(buf, sizeof(buf), &got) != RDZV_EPROTO)
      fail_msg("params %s accepted", bad_params[k].name);
  }
  /* A segment size written out must be 1 .. INT32_MAX. */
  static const uint32_t bad_segments[] = {0, 2147483648u, UINT32_MAX};
  for (size_t k = 0; k < sizeof(bad_segments) / sizeof(bad_segments[0]); k++) {
    uint8_t buf[RDZV_JOIN_PARAMS_MAX_BYTES] = {0};
    struct rdzv_join_params got;
    put32(buf, 4);
    put32(buf + 4, 8);
    put32(buf + 16, bad_segments[k]);
    if (params_decode_exact(buf, sizeof(buf), &got) != RDZV_EPROTO)
      fail_msg("params with segment_hosts %u accepted", bad_segments[k]);
  }
}

/* ---- records ------------------------------------------------------------ */

static uint8_t long_a[255], long_b[255], long_topo[RDZV_JOIN_MAX_TOPO];

struct rec_case {
  const char *name;
  uint64_t claim;
  int32_t local_rank, local_size;
  const uint8_t *host;
  uint32_t host_len;
  const uint8_t *loc;
  uint32_t loc_len;
  const uint8_t *topo;
  uint32_t topo_len;
};

#define T(s) (const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)

/* clang-format off */
static const struct rec_case rec_cases[] = {
    {"minimal", 0, 0, 0, T("h"), T(""), T("")},
    {"no location, no topology", 0x0123456789ABCDEFull, 3, 8, T("node07"),
     T(""), T("")},
    {"location only", 42, 7, 8, T("node07"), T("pod2/rack7/sw1"), T("")},
    {"topology only", 43, 0, 1, T("n"), T(""),
     T("gpu=0000:1b:00.0\nnuma=0\nnic=mlx5_0\n")},
    {"everything", UINT64_MAX, INT32_MAX, INT32_MAX, T("gpu-host-12"),
     T("pod1/rack3"), T("gpu=0\n")},
    {"binary bytes", 1, 1, 2, T("h\0\xff"), T("\0"), T("\0\0\xff\n")},
    {"max lengths", 7, 5, 8, long_a, 255, long_b, 255, long_topo,
     RDZV_JOIN_MAX_TOPO},
    {"max host only", 7, 5, 8, long_a, 255, T(""), T("")},
    {"max topology only", 7, 5, 8, T("h"), T(""), long_topo,
     RDZV_JOIN_MAX_TOPO},
};
/* clang-format on */
#define NREC (sizeof(rec_cases) / sizeof(rec_cases[0]))

static void fill_long(void) {
  for (size_t i = 0; i < sizeof(long_a); i++) {
    long_a[i] = (uint8_t)('a' + i % 26);
    long_b[i] = (uint8_t)(255 - i);
  }
  for (size_t i = 0; i < sizeof(long_topo); i++)
    long_topo[i] = (uint8_t)(i * 7 + 1);
}

static void rec_full(const struct rec_case *tc, struct rdzv_join_full *j) {
  memset(j, 0, sizeof(*j));
  j->rec.claim = tc->claim;
  j->rec.local_rank = tc->local_rank;
  j->local_size = tc->local_size;
  j->rec.host = tc->host;
  j->rec.host_len = tc->host_len;
  j->rec.location = tc->loc;
  j->rec.location_len = tc->loc_len;
  j->topo = tc->topo;
  j->topo_len = tc->topo_len;
}

/* Encodes a case into a fresh exact-size block; *n gets its size. */
static uint8_t *rec_encode_alloc(const struct rec_case *tc, size_t *n) {
  struct rdzv_join_full j;
  rec_full(tc, &j);
  *n = rdzv_join_rec_size(&j);
  assert_int_equal(*n, 8 + 4 + 4 + 2 + tc->host_len + 2 + tc->loc_len + 4 +
                           tc->topo_len);
  uint8_t *buf = malloc(*n);
  assert_non_null(buf);
  assert_int_equal(rdzv_join_rec_encode(&j, buf), 0);
  return buf;
}

static void assert_full_eq(const struct rdzv_join_full *got,
                           const struct rec_case *tc) {
  assert_int_equal(got->rec.claim, tc->claim);
  assert_int_equal(got->rec.local_rank, tc->local_rank);
  assert_int_equal(got->local_size, tc->local_size);
  assert_int_equal(got->rec.host_len, tc->host_len);
  assert_memory_equal(got->rec.host, tc->host, tc->host_len);
  assert_int_equal(got->rec.location_len, tc->loc_len);
  if (tc->loc_len)
    assert_memory_equal(got->rec.location, tc->loc, tc->loc_len);
  assert_int_equal(got->topo_len, tc->topo_len);
  if (tc->topo_len)
    assert_memory_equal(got->topo, tc->topo, tc->topo_len);
}

static void test_rec_roundtrip(void **state) {
  (void)state;
  fill_long();
  for (size_t k = 0; k < NREC; k++) {
    size_t n;
    uint8_t *buf = rec_encode_alloc(&rec_cases[k], &n);
    struct rdzv_join_full got;
    assert_int_equal(rdzv_join_rec_decode(buf, n, &got), 0);
    assert_full_eq(&got, &rec_cases[k]);
    /* Decoded strings point into the input, not into a copy. */
    assert_ptr_equal(got.rec.host, buf + 18);
    assert_ptr_equal(got.rec.location, buf + 20 + rec_cases[k].host_len);
    assert_ptr_equal(got.topo, buf + n - rec_cases[k].topo_len);
    free(buf);
  }
}

static void test_rec_golden(void **state) {
  (void)state;
  static const struct rec_case tc = {"golden",   0x0807060504030201ull,
                                     0x0C0B0A09, 0x100F0E0D,
                                     T("ab"),    T("xyz"),
                                     T("t\n")};
  static const uint8_t want[] = {
      1,  2,  3,   4,   5,   6,    7, 8, /* claim */
      9,  10, 11,  12,                   /* local_rank */
      13, 14, 15,  16,                   /* local_size */
      2,  0,  'a', 'b',                  /* host */
      3,  0,  'x', 'y', 'z',             /* location */
      2,  0,  0,   0,   't', '\n',       /* topology */
  };
  size_t n;
  uint8_t *buf = rec_encode_alloc(&tc, &n);
  assert_int_equal(n, sizeof(want));
  assert_memory_equal(buf, want, sizeof(want));
  free(buf);
}

/* Every proper prefix of every valid record is refused, and so is the
 * record with one more byte (of any value) at the end. */
static void test_rec_truncated_and_trailing(void **state) {
  (void)state;
  fill_long();
  for (size_t k = 0; k < NREC; k++) {
    size_t n;
    uint8_t *buf = rec_encode_alloc(&rec_cases[k], &n);
    struct rdzv_join_full got;
    for (size_t m = 0; m < n; m++) {
      /* The long cases would be slow prefix by prefix through malloc;
       * their prefixes are read in place (ASan still sees the whole
       * block, but the codec reads only m bytes by contract and the short
       * cases check that in exact blocks). */
      int rc = n > 1024 ? rdzv_join_rec_decode(buf, m, &got)
                        : rec_decode_exact(buf, m, &got);
      if (rc != RDZV_EPROTO)
        fail_msg("%s: prefix of %zu of %zu bytes gave %d", rec_cases[k].name, m,
                 n, rc);
    }
    uint8_t *longer = malloc(n + 3);
    assert_non_null(longer);
    memcpy(longer, buf, n);
    static const uint8_t tails[] = {0, 1, 0xFF};
    for (size_t t = 0; t < sizeof(tails); t++) {
      longer[n] = tails[t];
      longer[n + 1] = tails[t];
      longer[n + 2] = tails[t];
      for (size_t extra = 1; extra <= 3; extra++) {
        int rc = rec_decode_exact(longer, n + extra, &got);
        if (rc != RDZV_EPROTO)
          fail_msg("%s: %zu trailing bytes 0x%02x gave %d", rec_cases[k].name,
                   extra, tails[t], rc);
      }
    }
    free(longer);
    free(buf);
  }
}

/* The optional tail: a spare with a domain, an active with a domain;
 * golden bytes, round trip, and its own refusals (role 2, an active tail
 * without a domain, a domain over 255 bytes, a byte after the domain, a
 * cut domain). */
static void test_rec_role_domain_tail(void **state) {
  (void)state;
  struct rdzv_join_full j;
  memset(&j, 0, sizeof(j));
  j.rec.claim = 1;
  j.rec.host = (const uint8_t *)"h";
  j.rec.host_len = 1;
  j.role = RDZV_JOIN_SPARE;
  j.rec.domain = (const uint8_t *)"nv1";
  j.rec.domain_len = 3;
  static const uint8_t want[] = {1, 0, 0, 0, 0, 0, 0,   0,   0,  0, 0,
                                 0, 0, 0, 0, 0, 1, 0,   'h', 0,  0, 0,
                                 0, 0, 0, 1, 3, 0, 'n', 'v', '1'};
  uint8_t buf[64];
  assert_int_equal(rdzv_join_rec_size(&j), sizeof(want));
  assert_int_equal(rdzv_join_rec_encode(&j, buf), 0);
  assert_memory_equal(buf, want, sizeof(want));
  struct rdzv_join_full got;
  assert_int_equal(rec_decode_exact(buf, sizeof(want), &got), 0);
  assert_int_equal(got.role, RDZV_JOIN_SPARE);
  assert_int_equal(got.rec.domain_len, 3);
  assert_memory_equal(got.rec.domain, "nv1", 3);
  assert_int_equal(got.topo_len, 0);
  j.role = RDZV_JOIN_ACTIVE; /* an active host with a domain */
  assert_int_equal(rdzv_join_rec_encode(&j, buf), 0);
  assert_int_equal(rec_decode_exact(buf, sizeof(want), &got), 0);
  assert_int_equal(got.role, RDZV_JOIN_ACTIVE);
  assert_int_equal(got.rec.domain_len, 3);
  j.rec.domain_len = 0; /* no tail at all */
  assert_int_equal(rdzv_join_rec_size(&j), sizeof(want) - 6);
  uint8_t bad[64];
  memcpy(bad, want, sizeof(want));
  bad[25] = 2; /* role 2 */
  assert_int_equal(rec_decode_exact(bad, sizeof(want), &got), RDZV_EPROTO);
  memcpy(bad, want, sizeof(want));
  bad[25] = 0;
  bad[26] = 0; /* active, no domain: never written */
  assert_int_equal(rec_decode_exact(bad, 28, &got), RDZV_EPROTO);
  memcpy(bad, want, sizeof(want));
  bad[27] = 1; /* domain length 259 */
  assert_int_equal(rec_decode_exact(bad, sizeof(want), &got), RDZV_EPROTO);
  memcpy(bad, want, sizeof(want));
  bad[sizeof(want)] = 'x'; /* a byte after the domain */
  assert_int_equal(rec_decode_exact(bad, sizeof(want) + 1, &got), RDZV_EPROTO);
  assert_int_equal(rec_decode_exact(want, sizeof(want) - 1, &got), RDZV_EPROTO);
  j.role = 3;
  assert_int_equal(rdzv_join_rec_encode(&j, buf), RDZV_EPROTO);
}

/* The tail's health failure: an active host with no domain whose node's
 * check failed; golden bytes, round trip, and refusals (an empty reason,
 * a byte after it, a cut reason, a reason over 255 bytes). */
static void test_rec_unhealthy_tail(void **state) {
  (void)state;
  struct rdzv_join_full j;
  memset(&j, 0, sizeof(j));
  j.rec.claim = 1;
  j.rec.host = (const uint8_t *)"h";
  j.rec.host_len = 1;
  j.unhealthy = (const uint8_t *)"ECC";
  j.unhealthy_len = 3;
  static const uint8_t want[] = {1, 0, 0, 0, 0, 0, 0, 0,   0,   0,   0,
                                 0, 0, 0, 0, 0, 1, 0, 'h', 0,   0,   0,
                                 0, 0, 0, 0, 0, 0, 3, 0,   'E', 'C', 'C'};
  uint8_t buf[64];
  assert_int_equal(rdzv_join_rec_size(&j), sizeof(want));
  assert_int_equal(rdzv_join_rec_encode(&j, buf), 0);
  assert_memory_equal(buf, want, sizeof(want));
  struct rdzv_join_full got;
  assert_int_equal(rec_decode_exact(buf, sizeof(want), &got), 0);
  assert_int_equal(got.role, RDZV_JOIN_ACTIVE);
  assert_int_equal(got.rec.domain_len, 0);
  assert_int_equal(got.unhealthy_len, 3);
  assert_memory_equal(got.unhealthy, "ECC", 3);
  /* A spare of a domain, unhealthy: every part of the tail. */
  j.role = RDZV_JOIN_SPARE;
  j.rec.domain = (const uint8_t *)"nv1";
  j.rec.domain_len = 3;
  size_t n = rdzv_join_rec_size(&j);
  assert_int_equal(n, sizeof(want) + 3);
  assert_int_equal(rdzv_join_rec_encode(&j, buf), 0);
  assert_int_equal(rec_decode_exact(buf, n, &got), 0);
  assert_int_equal(got.role, RDZV_JOIN_SPARE);
  assert_memory_equal(got.rec.domain, "nv1", 3);
  assert_memory_equal(got.unhealthy, "ECC", 3);
  uint8_t bad[64];
  memcpy(bad, want, sizeof(want));
  bad[28] = 0; /* an empty reason: never written */
  assert_int_equal(rec_decode_exact(bad, 30, &got), RDZV_EPROTO);
  memcpy(bad, want, sizeof(want));
  bad[sizeof(want)] = 'x'; /* a byte after the reason */
  assert_int_equal(rec_decode_exact(bad, sizeof(want) + 1, &got), RDZV_EPROTO);
  assert_int_equal(rec_decode_exact(want, sizeof(want) - 1, &got), RDZV_EPROTO);
  memcpy(bad, want, sizeof(want));
  bad[29] = 1; /* reason length 259 */
  assert_int_equal(rec_decode_exact(bad, sizeof(want), &got), RDZV_EPROTO);
  j.unhealthy_len = 256;
  assert_int_equal(rdzv_join_rec_encode(&j, buf), RDZV_EPROTO);
}

/* Hand-built bytes; \x.. escapes are split with "" where digits follow. */
struct bad_rec {
  const char *name;
  const char *bytes;
  size_t len;
};

#define HDR                                                                    \
  "\1\0\0\0\0\0\0\0"                                                           \
  "\2\0\0\0"                                                                   \
  "\4\0\0\0"
#define B(s) s, sizeof(s) - 1

/* clang-format off */
static const struct bad_rec bad_recs[] = {
    {"valid (control)", B(HDR "\1\0h" "\0\0" "\0\0\0\0")},
    {"host length 0", B(HDR "\0\0" "\0\0" "\0\0\0\0")},
    {"host length 256", B(HDR "\0\1" "\0\0" "\0\0\0\0")},
    {"host length high byte", B(HDR "\1\1h" "\0\0" "\0\0\0\0")},
    {"host length past the end", B(HDR "\5\0hh" "\0\0" "\0\0\0\0")},
    {"location length 256", B(HDR "\1\0h" "\0\1" "\0\0\0\0")},
    {"location length past the end", B(HDR "\1\0h" "\3\0ab")},
    {"location length eats topo length", B(HDR "\1\0h" "\4\0" "\0\0\0\0")},
    {"negative local rank",
     B("\1\0\0\0\0\0\0\0" "\377\377\377\377" "\4\0\0\0"
       "\1\0h" "\0\0" "\0\0\0\0")},
    {"local rank INT32_MIN",
     B("\1\0\0\0\0\0\0\0" "\0\0\0\200" "\4\0\0\0"
       "\1\0h" "\0\0" "\0\0\0\0")},
    {"negative local size",
     B("\1\0\0\0\0\0\0\0" "\2\0\0\0" "\377\377\377\377"
       "\1\0h" "\0\0" "\0\0\0\0")},
    {"topo length past the end", B(HDR "\1\0h" "\0\0" "\2\0\0\0t")},
    {"topo length short of the end", B(HDR "\1\0h" "\0\0" "\1\0\0\0tt")},
    {"topo length huge", B(HDR "\1\0h" "\0\0" "\377\377\377\377t")},
    {"topo length 2^32 - 1 with no bytes",
     B(HDR "\1\0h" "\0\0" "\377\377\377\377")},
    {"topo length 65536 low bytes only", B(HDR "\1\0h" "\0\0" "\0\0\1\0")},
    {"no topo length", B(HDR "\1\0h" "\0\0")},
    {"half a topo length", B(HDR "\1\0h" "\0\0" "\0\0")},
    {"no location length", B(HDR "\1\0h")},
    {"header only", B(HDR)},
    {"empty", B("")},
};
/* clang-format on */

static void test_rec_malformed(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(bad_recs) / sizeof(bad_recs[0]); k++) {
    struct rdzv_join_full got;
    int want = k == 0 ? 0 : RDZV_EPROTO;
    int rc = rec_decode_exact((const uint8_t *)bad_recs[k].bytes,
                              bad_recs[k].len, &got);
    if (rc != want)
      fail_msg("%s: %d, want %d", bad_recs[k].name, rc, want);
  }
  /* Host or location lengths of 256 and 65535 with all their bytes
   * present; 255 is the valid control. */
  static const uint32_t lens[] = {255, 256, 65535};
  for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
    for (int which = 0; which < 2; which++) {
      uint32_t l = lens[k];
      size_t m = 16 + 2 + (which ? 1 : l) + 2 + (which ? l : 0) + 4;
      uint8_t *rec = calloc(1, m);
      struct rdzv_join_full got;
      assert_non_null(rec);
      memcpy(rec, HDR, 16);
      memset(rec + 16, 'x', m - 16 - 4); /* lengths are written below */
      rec[16] = (uint8_t)(which ? 1 : l);
      rec[17] = (uint8_t)(which ? 0 : l >> 8);
      size_t loc = 16 + 2 + (which ? 1 : l);
      rec[loc] = (uint8_t)(which ? l : 0);
      rec[loc + 1] = (uint8_t)(which ? l >> 8 : 0);
      int want = l == 255 ? 0 : RDZV_EPROTO;
      int rc = rec_decode_exact(rec, m, &got);
      if (rc != want)
        fail_msg("%s length %u: %d, want %d", which ? "location" : "host", l,
                 rc, want);
      free(rec);
    }
  }

  /* A topology of 65536 bytes, the length field matching exactly. */
  size_t n = 16 + 3 + 2 + 4 + RDZV_JOIN_MAX_TOPO + 1;
  uint8_t *buf = calloc(1, n);
  struct rdzv_join_full got;
  assert_non_null(buf);
  memcpy(buf, HDR "\1\0h\0\0", 21);
  put32(buf + 21, RDZV_JOIN_MAX_TOPO + 1);
  assert_int_equal(rdzv_join_rec_decode(buf, n, &got), RDZV_EPROTO);
  /* One byte less, with the length to match, is the maximum and valid. */
  put32(buf + 21, RDZV_JOIN_MAX_TOPO);
  assert_int_equal(rdzv_join_rec_decode(buf, n - 1, &got), 0);
  assert_int_equal(got.topo_len, RDZV_JOIN_MAX_TOPO);
  free(buf);
}

struct bad_enc {
  const char *name;
  int32_t local_rank, local_size;
  uint32_t host_len, loc_len, topo_len;
};

/* clang-format off */
static const struct bad_enc bad_encs[] = {
    {"host length 0", 0, 0, 0, 0, 0},
    {"host length 256", 0, 0, 256, 0, 0},
    {"location length 256", 0, 0, 1, 256, 0},
    {"negative local rank", -1, 0, 1, 0, 0},
    {"local rank INT32_MIN", INT32_MIN, 0, 1, 0, 0},
    {"negative local size", 0, -1, 1, 0, 0},
    {"topology 65536", 0, 0, 1, 0, RDZV_JOIN_MAX_TOPO + 1},
};
/* clang-format on */

static void test_rec_encode_refuses(void **state) {
  (void)state;
  static uint8_t big[RDZV_JOIN_MAX_TOPO + 1];
  static uint8_t out[16 + 2 + 256 + 2 + 256 + 4 + RDZV_JOIN_MAX_TOPO + 1];
  for (size_t k = 0; k < sizeof(bad_encs) / sizeof(bad_encs[0]); k++) {
    const struct bad_enc *tc = &bad_encs[k];
    struct rdzv_join_full j;
    memset(&j, 0, sizeof(j));
    j.rec.host = big;
    j.rec.host_len = tc->host_len;
    j.rec.location = big;
    j.rec.location_len = tc->loc_len;
    j.rec.local_rank = tc->local_rank;
    j.local_size = tc->local_size;
    j.topo = big;
    j.topo_len = tc->topo_len;
    if (rdzv_join_rec_encode(&j, out) != RDZV_EPROTO)
      fail_msg("encode accepted %s", tc->name);
  }
}

/* ---- assignments and refusals ------------------------------------------- */

/* clang-format off */
static const struct rdzv_assignment asg_cases[] = {
    {0, 1, 0, 1, 0, 1},
    {13, 16, 5, 8, 1, 2},
    {99999, 100000, 7, 8, 12499, 12500},
    {INT32_MAX - 1, INT32_MAX, INT32_MAX - 1, INT32_MAX, INT32_MAX - 1,
     INT32_MAX},
};
/* clang-format on */

static void test_assign_roundtrip(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(asg_cases) / sizeof(asg_cases[0]); k++) {
    uint8_t buf[RDZV_JOIN_ASSIGN_BYTES];
    uint64_t claim = 0, want_claim = 0xFEEDFACE00000000ull + k;
    struct rdzv_assignment got;
    rdzv_join_assign_encode(want_claim, &asg_cases[k], buf);
    assert_int_equal(assign_decode_exact(buf, sizeof(buf), &claim, &got), 0);
    assert_int_equal(claim, want_claim);
    assert_memory_equal(&got, &asg_cases[k], sizeof(got));
    for (size_t n = 0; n < sizeof(buf); n++) {
      int rc = assign_decode_exact(buf, n, &claim, &got);
      /* A 12-byte prefix reads as a refusal whose status is the rank:
       * never negative for these, so never a valid refusal. */
      if (rc != RDZV_EPROTO)
        fail_msg("assignment %zu: prefix %zu gave %d", k, n, rc);
    }
    uint8_t longer[RDZV_JOIN_ASSIGN_BYTES + 1] = {0};
    memcpy(longer, buf, sizeof(buf));
    assert_int_equal(assign_decode_exact(longer, sizeof(longer), &claim, &got),
                     RDZV_EPROTO);
  }
}

static void test_assign_golden(void **state) {
  (void)state;
  static const struct rdzv_assignment a = {0x0C0B0A09, 0x100F0E0D, 0x14131211,
                                           0x18171615, 0x1C1B1A19, 0x201F1E1D};
  uint8_t buf[RDZV_JOIN_ASSIGN_BYTES], want[RDZV_JOIN_ASSIGN_BYTES];
  for (size_t i = 0; i < sizeof(want); i++)
    want[i] = (uint8_t)(i + 1);
  rdzv_join_assign_encode(0x0807060504030201ull, &a, buf);
  assert_memory_equal(buf, want, sizeof(want));

  uint8_t err[RDZV_JOIN_ERROR_BYTES];
  static const uint8_t want_err[RDZV_JOIN_ERROR_BYTES] = {
      1, 2, 3, 4, 5, 6, 7, 8, 0xFE, 0xFF, 0xFF, 0xFF};
  rdzv_join_error_encode(0x0807060504030201ull, -2, err);
  assert_memory_equal(err, want_err, sizeof(want_err));
}

/* clang-format off */
static const struct {
  const char *name;
  struct rdzv_assignment a;
} bad_asgs[] = {
    {"rank = world", {8, 8, 0, 8, 0, 1}},
    {"rank > world", {9, 8, 0, 8, 0, 1}},
    {"negative rank", {-1, 8, 0, 8, 0, 1}},
    {"world 0", {0, 0, 0, 1, 0, 1}},
    {"negative world", {0, -8, 0, 1, 0, 1}},
    {"local rank = local size", {3, 8, 4, 4, 0, 2}},
    {"negative local rank", {3, 8, -1, 4, 0, 2}},
    {"local size 0", {3, 8, 0, 0, 0, 2}},
    {"node rank = node count", {3, 8, 3, 4, 2, 2}},
    {"negative node rank", {3, 8, 3, 4, -1, 2}},
    {"node count 0", {3, 8, 3, 4, 0, 0}},
    {"all INT32_MIN", {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN,
                       INT32_MIN}},
};
/* clang-format on */

static void test_assign_malformed(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(bad_asgs) / sizeof(bad_asgs[0]); k++) {
    uint8_t buf[RDZV_JOIN_ASSIGN_BYTES];
    uint64_t claim;
    struct rdzv_assignment got;
    rdzv_join_assign_encode(5, &bad_asgs[k].a, buf);
    if (assign_decode_exact(buf, sizeof(buf), &claim, &got) != RDZV_EPROTO)
      fail_msg("assignment %s accepted", bad_asgs[k].name);
  }
  /* Sizes that are neither an assignment nor a refusal. */
  static const size_t sizes[] = {0, 1, 8, 11, 13, 16, 24, 31, 33, 64};
  uint8_t zeros[64] = {0};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    uint64_t claim;
    struct rdzv_assignment got;
    assert_int_equal(assign_decode_exact(zeros, sizes[k], &claim, &got),
                     RDZV_EPROTO);
  }
}

/* clang-format off */
static const struct {
  int status;
  int want;
} refusals[] = {
    {RDZV_EDUPLICATE_CLAIM, RDZV_EDUPLICATE_CLAIM},
    {RDZV_ENOMEM, RDZV_ENOMEM},
    {-1, -1},
    {-110, -110},
    {INT32_MIN, INT32_MIN},
    /* Not a refusal: a non-negative status, or RDZV_EPROTO itself. */
    {0, RDZV_EPROTO},
    {1, RDZV_EPROTO},
    {INT32_MAX, RDZV_EPROTO},
    {RDZV_EPROTO, RDZV_EPROTO},
};
/* clang-format on */

static void test_refusal(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(refusals) / sizeof(refusals[0]); k++) {
    uint8_t buf[RDZV_JOIN_ERROR_BYTES];
    uint64_t claim = 0, want_claim = 0xABCDEF0123456789ull ^ k;
    struct rdzv_assignment got, untouched;
    memset(&got, 0x5A, sizeof(got));
    memset(&untouched, 0x5A, sizeof(untouched));
    rdzv_join_error_encode(want_claim, refusals[k].status, buf);
    int rc = assign_decode_exact(buf, sizeof(buf), &claim, &got);
    if (rc != refusals[k].want)
      fail_msg("refusal %d: %d, want %d", refusals[k].status, rc,
               refusals[k].want);
    if (rc != RDZV_EPROTO) {
      assert_int_equal(claim, want_claim);
      assert_memory_equal(&got, &untouched, sizeof(got));
    }
    /* Truncated or extended, a refusal is malformed. */
    for (size_t n = 0; n < sizeof(buf); n++)
      assert_int_equal(assign_decode_exact(buf, n, &claim, &got), RDZV_EPROTO);
    uint8_t longer[RDZV_JOIN_ERROR_BYTES + 1] = {0};
    memcpy(longer, buf, sizeof(buf));
    assert_int_equal(assign_decode_exact(longer, sizeof(longer), &claim, &got),
                     RDZV_EPROTO);
  }
}

/* ---- random inputs ------------------------------------------------------ */

/* An accepted record encodes back to exactly the bytes it came from. */
static void check_rec_canonical(const uint8_t *p, size_t n,
                                const struct rdzv_join_full *j) {
  assert_true(j->rec.host_len >= 1 && j->rec.host_len <= 255);
  assert_true(j->rec.location_len <= 255);
  assert_true(j->topo_len <= RDZV_JOIN_MAX_TOPO);
  assert_true(j->rec.local_rank >= 0 && j->local_size >= 0);
  assert_int_equal(rdzv_join_rec_size(j), n);
  uint8_t *again = malloc(n);
  assert_non_null(again);
  assert_int_equal(rdzv_join_rec_encode(j, again), 0);
  assert_memory_equal(again, p, n);
  free(again);
}

/* 10,000 random strings (lengths biased to the interesting sizes) through
 * every decoder, then 10,000 single- and multi-byte mutations of valid
 * records. */
static void test_random(void **state) {
  (void)state;
  uint64_t seed = 0x10ADBEEFu;
  uint8_t *buf = malloc(600);
  assert_non_null(buf);
  for (int t = 0; t < 10000; t++) {
    size_t n;
    uint64_t r = rng_next(&seed);
    switch (r % 4) {
    case 0:
      n = (size_t)(r >> 8) % 40;
      break;
    case 1:
      n = RDZV_JOIN_ERROR_BYTES + (size_t)(r >> 8) % 3 - 1;
      break;
    case 2:
      n = RDZV_JOIN_ASSIGN_BYTES + (size_t)(r >> 8) % 3 - 1;
      break;
    default:
      n = (size_t)(r >> 8) % 600;
      break;
    }
    for (size_t i = 0; i < n; i++) {
      uint64_t v = rng_next(&seed);
      /* Many small bytes, so lengths are often in range. */
      buf[i] = (uint8_t)((v & 3) ? (v >> 8) % 8 : v >> 8);
    }
    struct rdzv_join_full j;
    struct rdzv_join_params p;
    struct rdzv_assignment a;
    uint64_t claim;
    int rc = rec_decode_exact(buf, n, &j);
    if (rc != 0 && rc != RDZV_EPROTO)
      fail_msg("record decode gave %d", rc);
    if (rc == 0)
      check_rec_canonical(buf, n, &j);
    rc = params_decode_exact(buf, n, &p);
    if (rc != 0 && rc != RDZV_EPROTO)
      fail_msg("params decode gave %d", rc);
    rc = assign_decode_exact(buf, n, &claim, &a);
    /* A 12-byte string is a refusal when its status is negative. */
    if (rc != 0 && rc != RDZV_EPROTO && !(n == RDZV_JOIN_ERROR_BYTES && rc < 0))
      fail_msg("assignment decode of %zu bytes gave %d", n, rc);
    if (rc == 0) {
      uint8_t again[RDZV_JOIN_ASSIGN_BYTES];
      assert_int_equal(n, RDZV_JOIN_ASSIGN_BYTES);
      rdzv_join_assign_encode(claim, &a, again);
      assert_memory_equal(again, buf, n);
    }
  }
  free(buf);

  /* Mutations of the short valid records. */
  size_t accepted = 0;
  for (int t = 0; t < 10000; t++) {
    const struct rec_case *tc = &rec_cases[t % 6];
    size_t n;
    uint8_t *rec = rec_encode_alloc(tc, &n);
    int flips = 1 + (int)(rng_next(&seed) % 3);
    for (int f = 0; f < flips; f++) {
      uint64_t v = rng_next(&seed);
      rec[(size_t)(v % n)] ^= (uint8_t)(1u << ((v >> 32) % 8));
    }
    struct rdzv_join_full j;
    int rc = rdzv_join_rec_decode(rec, n, &j);
    if (rc != 0 && rc != RDZV_EPROTO)
      fail_msg("mutated record decode gave %d", rc);
    if (rc == 0) {
      accepted++;
      check_rec_canonical(rec, n, &j);
    }
    free(rec);
  }
  /* Flips in the claim and in string bytes keep a record valid. */
  assert_true(accepted > 0);
}

/* rdzv_gen_key_parse: what is a generation's key, and what is not. */
static void test_gen_key_parse(void **state) {
  (void)state;
  static const struct {
    const char *key;
    int rc;
    const char *round;
    int64_t gen;
  } cases[] = {
      {"rdzv/world/g1/uid/world", 0, "world", 1},
      {"rdzv/w/g12/", 0, "w", 12},
      {"rdzv/r/g0/x", 0, "r", 0},
      {"rdzv/world/g1", -1, NULL, 0},  /* no '/' after the number */
      {"rdzv/world/g/x", -1, NULL, 0}, /* no digits */
      {"rdzv/world/gx1/", -1, NULL, 0},
      {"rdzv/world/1/x", -1, NULL, 0}, /* no 'g' */
      {"rdzv/world", -1, NULL, 0},
      {"rdzX/world/g1/x", -1, NULL, 0},
      {"other/key/g1/x", -1, NULL, 0},
      {"", -1, NULL, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const uint8_t *round = NULL;
    size_t rl = 0;
    int64_t gen = -1;
    int rc = rdzv_gen_key_parse((const uint8_t *)cases[i].key,
                                strlen(cases[i].key), &round, &rl, &gen);
    if (rc != cases[i].rc)
      fail_msg("%s: rc %d, want %d", cases[i].key, rc, cases[i].rc);
    if (rc == 0 &&
        (rl != strlen(cases[i].round) ||
         memcmp(round, cases[i].round, rl) != 0 || gen != cases[i].gen))
      fail_msg("%s: round '%.*s' gen %lld", cases[i].key, (int)rl, round,
               (long long)gen);
  }
}

/* rdzv_members_describe: hosts in name order, ranks as ranges, unknown
 * ranks omitted, a long text cut with "...". */
static void test_members_describe(void **state) {
  (void)state;
  struct rdzv_member_name m[] = {
      {(const uint8_t *)"h18", 3, 7},   {(const uint8_t *)"h17", 3, 137},
      {(const uint8_t *)"h17", 3, 136}, {(const uint8_t *)"h17", 3, 139},
      {(const uint8_t *)"h17", 3, 138}, {(const uint8_t *)"h18", 3, 2},
      {(const uint8_t *)"h18", 3, 5},   {(const uint8_t *)"h9", 2, -1},
      {(const uint8_t *)"h17", 3, 143}};
  char out[200];
  assert_int_equal(rdzv_members_describe(m, 9, "ranks", out, sizeof(out)), 3);
  assert_string_equal(out, "host h17 (ranks 136-139,143), host h18 (ranks "
                           "2,5,7), host h9");
  struct rdzv_member_name one = {(const uint8_t *)"a", 1, 0};
  assert_int_equal(rdzv_members_describe(&one, 1, "local ranks", out, 64), 1);
  assert_string_equal(out, "host a (local ranks 0)");
  assert_int_equal(rdzv_members_describe(m, 0, "ranks", out, 64), 0);
  assert_string_equal(out, "");
  assert_int_equal(rdzv_members_describe(m, 9, "ranks", out, 20), 3);
  assert_int_equal(strlen(out), 19);
  assert_string_equal(out + 16, "...");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_params_roundtrip),
      cmocka_unit_test(test_params_golden),
      cmocka_unit_test(test_params_malformed),
      cmocka_unit_test(test_rec_roundtrip),
      cmocka_unit_test(test_rec_golden),
      cmocka_unit_test(test_rec_truncated_and_trailing),
      cmocka_unit_test(test_rec_role_domain_tail),
      cmocka_unit_test(test_rec_unhealthy_tail),
      cmocka_unit_test(test_rec_malformed),
      cmocka_unit_test(test_rec_encode_refuses),
      cmocka_unit_test(test_assign_roundtrip),
      cmocka_unit_test(test_assign_golden),
      cmocka_unit_test(test_assign_malformed),
      cmocka_unit_test(test_refusal),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_gen_key_parse),
      cmocka_unit_test(test_members_describe),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
