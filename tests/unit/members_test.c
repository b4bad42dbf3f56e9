/* rendezvous/members: who a collective's members are, as nodes read them.
 * Round trips over every group shape a job uses (the world, contiguous
 * tensor-parallel groups, strided data-parallel groups, arbitrary lists),
 * golden bytes, every malformed form, and member counting (EACH and
 * BLOCKS) against a brute force over rdzv_nccl_block_first. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/members.h"
#include "rendezvous/topo.h"

static void roundtrip(const int32_t *ranks, int64_t n, int kind,
                      uint32_t want_runs) {
  uint8_t b[RDZV_MEMBERS_MAX_BYTES];
  struct rdzv_members m;
  int len = rdzv_members_encode(ranks, n, kind, b, sizeof(b));
  assert_int_equal(len, 9 + 12 * (int)want_runs);
  assert_int_equal(rdzv_members_decode(b, (size_t)len, &m), 0);
  assert_int_equal(m.kind, kind);
  assert_int_equal(m.nmembers, n);
  assert_int_equal(m.nruns, want_runs);
  for (int64_t i = 0; i < n; i++)
    assert_int_equal(rdzv_members_index(&m, ranks ? ranks[i] : i), i);
}

static void test_shapes(void **state) {
  (void)state;
  roundtrip(NULL, 1, RDZV_MEMBERS_EACH, 1);
  roundtrip(NULL, 100000, RDZV_MEMBERS_BLOCKS, 1); /* the world */
  int32_t tp[8], dp[512], two[6] = {0, 1, 2, 10, 20, 30},
                          mixed[4] = {9, 3, 4, 5};
  for (int i = 0; i < 8; i++)
    tp[i] = 64 + i; /* a tensor-parallel group: one run */
  for (int i = 0; i < 512; i++)
    dp[i] = 3 + 8 * i; /* a data-parallel group: one strided run */
  roundtrip(tp, 8, RDZV_MEMBERS_EACH, 1);
  roundtrip(dp, 512, RDZV_MEMBERS_EACH, 1);
  roundtrip(two, 6, RDZV_MEMBERS_EACH, 2);
  roundtrip(mixed, 4, RDZV_MEMBERS_EACH, 2); /* a step down starts a run */
  /* Non-members. */
  uint8_t b[RDZV_MEMBERS_MAX_BYTES];
  struct rdzv_members m;
  int len = rdzv_members_encode(dp, 512, RDZV_MEMBERS_EACH, b, sizeof(b));
  assert_int_equal(rdzv_members_decode(b, (size_t)len, &m), 0);
  assert_int_equal(rdzv_members_index(&m, 4), -1);
  assert_int_equal(rdzv_members_index(&m, 3 + 8 * 512), -1);
  assert_int_equal(rdzv_members_index(&m, 2), -1);
  assert_int_equal(rdzv_members_index(&m, -5), -1);
}

static void test_golden(void **state) {
  (void)state;
  int32_t r[3] = {5, 7, 9};
  uint8_t b[RDZV_MEMBERS_MAX_BYTES];
  static const uint8_t want[21] = {1, 3, 0, 0, 0, 1, 0, 0, 0, 5, 0,
                                   0, 0, 2, 0, 0, 0, 3, 0, 0, 0};
  assert_int_equal(rdzv_members_encode(r, 3, RDZV_MEMBERS_BLOCKS, b, sizeof(b)),
                   21);
  assert_memory_equal(b, want, sizeof(want));
  assert_int_equal(rdzv_members_encode(r, 3, 1, b, 20), -ENOSPC);
}

static void test_refusals(void **state) {
  (void)state;
  uint8_t b[RDZV_MEMBERS_MAX_BYTES];
  struct rdzv_members m;
  int32_t neg[2] = {1, -1}, many[200];
  for (int i = 0; i < 200; i++)
    many[i] = (i % 2) ? 1000 - i : i; /* zig-zag: a run every 2 ranks */
  assert_int_equal(rdzv_members_encode(NULL, 0, 0, b, sizeof(b)), -EINVAL);
  assert_int_equal(rdzv_members_encode(NULL, 4, 2, b, sizeof(b)), -EINVAL);
  assert_int_equal(rdzv_members_encode(neg, 2, 0, b, sizeof(b)), -EINVAL);
  assert_int_equal(rdzv_members_encode(many, 200, 0, b, sizeof(b)), -E2BIG);
  int len = rdzv_members_encode(NULL, 8, 0, b, sizeof(b));
  assert_int_equal(len, 21);
  /* Every truncation, and a trailing byte. */
  for (int i = 0; i < len; i++)
    assert_int_equal(rdzv_members_decode(b, (size_t)i, &m), -EINVAL);
  assert_int_equal(rdzv_members_decode(b, (size_t)len + 1, &m), -EINVAL);
  uint8_t x[RDZV_MEMBERS_MAX_BYTES];
  memcpy(x, b, (size_t)len);
  x[0] = 2; /* kind */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[13] = 0; /* stride 0 */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[17] = 7; /* lens add up to 7, not 8 */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[17] = 0; /* len 0 */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[1] = 0; /* no members */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[12] = 0x7f; /* first rank near INT32_MAX: the run passes it */
  x[11] = 0xff;
  x[10] = 0xff;
  x[9] = 0xff;
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
  memcpy(x, b, (size_t)len);
  x[5] = 65; /* too many runs */
  assert_int_equal(rdzv_members_decode(x, (size_t)len, &m), -EINVAL);
}

/* Counting: for each group and count, the contributors are exactly the
 * member ids 0..count-1 (EACH) or each block's first member (BLOCKS). */
static void test_contributes(void **state) {
  (void)state;
  int32_t g[300];
  for (int i = 0; i < 300; i++)
    g[i] = 7 + 3 * i;
  uint8_t b[RDZV_MEMBERS_MAX_BYTES];
  struct rdzv_members m;
  int len = rdzv_members_encode(g, 300, RDZV_MEMBERS_BLOCKS, b, sizeof(b));
  assert_int_equal(rdzv_members_decode(b, (size_t)len, &m), 0);
  for (int64_t nids = 1; nids <= 300; nids += 7) {
    int64_t n = 0;
    for (int64_t rank = 0; rank < 1000; rank++) {
      int c = rdzv_members_contributes(&m, (uint64_t)nids, rank);
      int64_t i = rank >= 7 && (rank - 7) % 3 == 0 && (rank - 7) / 3 < 300
                      ? (rank - 7) / 3
                      : -1;
      int want = 0;
      for (int64_t bl = 0; i >= 0 && bl < nids; bl++)
        want |= rdzv_nccl_block_first(bl, 300, nids) == i;
      assert_int_equal(c, want);
      n += c;
    }
    assert_int_equal(n, nids);
  }
  assert_int_equal(rdzv_members_contributes(&m, 0, 7), 0);
  assert_int_equal(rdzv_members_contributes(&m, 301, 7), 0);
  len = rdzv_members_encode(g, 300, RDZV_MEMBERS_EACH, b, sizeof(b));
  assert_int_equal(rdzv_members_decode(b, (size_t)len, &m), 0);
  assert_int_equal(rdzv_members_contributes(&m, 300, 7 + 3 * 299), 1);
  assert_int_equal(rdzv_members_contributes(&m, 299, 7 + 3 * 299), 0);
  assert_int_equal(rdzv_members_contributes(&m, 300, 8), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_golden),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_contributes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
