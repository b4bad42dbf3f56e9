/* Unit tests for the pure shape functions in rendezvous/topo.c: the tree of
 * hosts (parent, children, depth) and NCCL's scalable-init blocks.
 *
 * The tree is checked exhaustively for every host count 1..4096 and a
 * table of fan-outs; the blocks for every rank count 1..2000 and every id
 * count up to 300, against an independent walk of the documented rule.
 * Hot loops test with plain comparisons and fail_msg() so that the
 * exhaustive sweeps stay fast under ASan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rendezvous/topo.h"

#define MAX_HOSTS 4096
#define MAX_NRANKS 2000
#define MAX_NIDS 300

static const int64_t fanouts[] = {1, 2, 3, 4, 16, 32, 64};
#define NFANOUTS (sizeof(fanouts) / sizeof(fanouts[0]))

/* ---- tree: exhaustive --------------------------------------------------- */

/* Every host but 0 has a parent below itself; host 0 hangs off the root. */
static void test_tree_parent_exhaustive(void **state) {
  (void)state;
  for (size_t k = 0; k < NFANOUTS; k++) {
    int64_t f = fanouts[k];
    for (int64_t n = 1; n <= MAX_HOSTS; n++) {
      if (rdzv_tree_parent(0, n, f) != RDZV_TREE_ROOT)
        fail_msg("parent(0, %lld, %lld) is not the root", (long long)n,
                 (long long)f);
      for (int64_t i = 1; i < n; i++) {
        int64_t p = rdzv_tree_parent(i, n, f);
        if (p < 0 || p >= i || p != (i - 1) / f)
          fail_msg("parent(%lld, %lld, %lld) = %lld", (long long)i,
                   (long long)n, (long long)f, (long long)p);
      }
    }
  }
}

/* The children ranges, taken in host order, are exactly 1..n-1 in order:
 * each host appears once, under its own parent, and no host has more than
 * F children. */
static void test_tree_children_partition(void **state) {
  (void)state;
  for (size_t k = 0; k < NFANOUTS; k++) {
    int64_t f = fanouts[k];
    for (int64_t n = 1; n <= MAX_HOSTS; n++) {
      int64_t next = 1; /* the next host that must appear as a child */
      for (int64_t i = 0; i < n; i++) {
        int64_t first = -7;
        int64_t cnt = rdzv_tree_children(i, n, f, &first);
        if (cnt < 0 || cnt > f)
          fail_msg("children(%lld, %lld, %lld): count %lld", (long long)i,
                   (long long)n, (long long)f, (long long)cnt);
        if (cnt == 0) {
          if (first != 0)
            fail_msg("children(%lld, %lld, %lld): leaf with first %lld",
                     (long long)i, (long long)n, (long long)f,
                     (long long)first);
          continue;
        }
        if (first != next)
          fail_msg("children(%lld, %lld, %lld): first %lld, expected %lld",
                   (long long)i, (long long)n, (long long)f, (long long)first,
                   (long long)next);
        for (int64_t c = first; c < first + cnt; c++) {
          if (c >= n || rdzv_tree_parent(c, n, f) != i)
            fail_msg("child %lld of %lld (n %lld, f %lld) has parent %lld",
                     (long long)c, (long long)i, (long long)n, (long long)f,
                     (long long)rdzv_tree_parent(c, n, f));
        }
        /* A non-last parent with children has all F of them. */
        if (first + cnt < n && cnt != f)
          fail_msg("children(%lld, %lld, %lld): %lld, not full", (long long)i,
                   (long long)n, (long long)f, (long long)cnt);
        next = first + cnt;
      }
      if (next != n)
        fail_msg("n %lld, f %lld: children cover 1..%lld, not 1..%lld",
                 (long long)n, (long long)f, (long long)next - 1,
                 (long long)n - 1);
    }
  }
}

/* depth(0) == 1 and depth(i) == 1 + depth(parent(i)). The depth takes no
 * host count, so one sweep of 0..4095 per fan-out covers every n. */
static void test_tree_depth_exhaustive(void **state) {
  (void)state;
  for (size_t k = 0; k < NFANOUTS; k++) {
    int64_t f = fanouts[k];
    assert_int_equal(rdzv_tree_depth(0, f), 1);
    for (int64_t i = 1; i < MAX_HOSTS; i++) {
      int64_t p = rdzv_tree_parent(i, MAX_HOSTS, f);
      int64_t d = rdzv_tree_depth(i, f);
      if (d != 1 + rdzv_tree_depth(p, f))
        fail_msg("depth(%lld, %lld) = %lld, parent %lld depth %lld",
                 (long long)i, (long long)f, (long long)d, (long long)p,
                 (long long)rdzv_tree_depth(p, f));
    }
  }
}

/* ---- tree: tables ------------------------------------------------------- */

struct tree_case {
  int64_t i, count, fanout;
  int64_t parent;
  int64_t nchildren, first;
};

/* clang-format off */
static const struct tree_case tree_cases[] = {
    /* A small binary tree: 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5}. */
    {0, 6, 2, RDZV_TREE_ROOT, 2, 1},
    {1, 6, 2, 0, 2, 3},
    {2, 6, 2, 0, 1, 5},
    {3, 6, 2, 1, 0, 0},
    {5, 6, 2, 2, 0, 0},
    /* A chain. */
    {0, 3, 1, RDZV_TREE_ROOT, 1, 1},
    {2, 3, 1, 1, 0, 0},
    /* One host. */
    {0, 1, 64, RDZV_TREE_ROOT, 0, 0},
    /* Fan-out larger than the hosts. */
    {0, 5, 64, RDZV_TREE_ROOT, 4, 1},
    {4, 5, 64, 0, 0, 0},
    /* Out of range: i < 0, i >= count, count <= 0, fan-out < 1. */
    {-1, 8, 2, -2, 0, 0},
    {8, 8, 2, -2, 0, 0},
    {9, 8, 2, -2, 0, 0},
    {0, 0, 2, -2, 0, 0},
    {0, -5, 2, -2, 0, 0},
    {1, 8, 0, -2, 0, 0},
    {1, 8, -3, -2, 0, 0},
    {INT64_MIN, 8, 2, -2, 0, 0},
    {0, 8, INT64_MIN, -2, 0, 0},
    /* Extremes do not overflow. */
    {INT64_MAX - 1, INT64_MAX, 2, (INT64_MAX - 2) / 2, 0, 0},
    {0, INT64_MAX, INT64_MAX, RDZV_TREE_ROOT, INT64_MAX - 1, 1},
    {1, INT64_MAX, INT64_MAX, 0, 0, 0},
    {(INT64_MAX - 2) / 2, INT64_MAX, 2, ((INT64_MAX - 2) / 2 - 1) / 2, 2,
     INT64_MAX - 2},
    {(INT64_MAX - 2) / 2 + 1, INT64_MAX, 2, (INT64_MAX - 2) / 4, 0, 0},
    {(INT64_MAX - 4) / 3, INT64_MAX, 3, ((INT64_MAX - 4) / 3 - 1) / 3, 3,
     INT64_MAX - 3},
};
/* clang-format on */

static void test_tree_table(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(tree_cases) / sizeof(tree_cases[0]); k++) {
    const struct tree_case *tc = &tree_cases[k];
    int64_t first = -7;
    int64_t cnt = rdzv_tree_children(tc->i, tc->count, tc->fanout, &first);
    if (rdzv_tree_parent(tc->i, tc->count, tc->fanout) != tc->parent ||
        cnt != tc->nchildren || first != tc->first)
      fail_msg("case %zu (i %lld, count %lld, f %lld): parent %lld, "
               "children %lld from %lld",
               k, (long long)tc->i, (long long)tc->count, (long long)tc->fanout,
               (long long)rdzv_tree_parent(tc->i, tc->count, tc->fanout),
               (long long)cnt, (long long)first);
  }
}

struct depth_case {
  int64_t i, fanout, depth;
};

/* clang-format off */
static const struct depth_case depth_cases[] = {
    {0, 1, 1}, {1, 1, 2}, {10, 1, 11},
    {0, 2, 1}, {1, 2, 2}, {2, 2, 2}, {3, 2, 3}, {6, 2, 3}, {7, 2, 4},
    {1, 64, 2}, {64, 64, 2}, {65, 64, 3}, {64 + 64 * 64, 64, 3},
    {65 + 64 * 64, 64, 4},
    {INT64_MAX, INT64_MAX, 2},
    {INT64_MAX, 2, 64},
    /* Bad arguments. */
    {-1, 2, 0}, {INT64_MIN, 2, 0}, {5, 0, 0}, {5, -1, 0}, {0, 0, 0},
};
/* clang-format on */

static void test_tree_depth_table(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(depth_cases) / sizeof(depth_cases[0]); k++) {
    const struct depth_case *tc = &depth_cases[k];
    int64_t d = rdzv_tree_depth(tc->i, tc->fanout);
    if (d != tc->depth)
      fail_msg("depth(%lld, %lld) = %lld, expected %lld", (long long)tc->i,
               (long long)tc->fanout, (long long)d, (long long)tc->depth);
  }
}

/* ---- NCCL blocks -------------------------------------------------------- */

/* Walks ranks 0..nranks-1 through the documented rule (the first r blocks
 * hold q+1 ranks, the rest q) and compares every rank's block and every
 * block's first rank. Blocks are therefore contiguous, in order, and cover
 * each rank exactly once. */
static void check_blocks(int64_t nranks, int64_t nids) {
  int64_t q = nranks / nids, r = nranks % nids;
  int64_t b = 0, start = 0;
  for (int64_t rank = 0; rank < nranks; rank++) {
    int64_t size = b < r ? q + 1 : q;
    if (rank == start + size) {
      b++;
      start = rank;
    }
    int64_t got = rdzv_nccl_block_of(rank, nranks, nids);
    if (got != b)
      fail_msg("block_of(%lld, %lld, %lld) = %lld, expected %lld",
               (long long)rank, (long long)nranks, (long long)nids,
               (long long)got, (long long)b);
    if (rank == start && rdzv_nccl_block_first(b, nranks, nids) != rank)
      fail_msg("block_first(%lld, %lld, %lld) = %lld, expected %lld",
               (long long)b, (long long)nranks, (long long)nids,
               (long long)rdzv_nccl_block_first(b, nranks, nids),
               (long long)rank);
  }
  /* The walk must end exactly at the last block, full. */
  if (b != nids - 1 || nranks - start != (b < r ? q + 1 : q))
    fail_msg("nranks %lld nids %lld: walk ended at block %lld from %lld",
             (long long)nranks, (long long)nids, (long long)b,
             (long long)start);
}

/* Id counts checked rank by rank for every nranks up to 2000; below
 * FULL_NRANKS every id count is. (test_nccl_block_sizes covers every pair
 * up to 2000 x 300 at the block boundaries.) */
#define FULL_NRANKS 400
static const int64_t some_nids[] = {
    1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,
    13,  16,  17,  31,  32,  33,  63,  64,  65,  97,  100, 127,
    128, 129, 199, 211, 255, 256, 257, 293, 299, 300,
};

static void test_nccl_blocks_exhaustive(void **state) {
  (void)state;
  for (int64_t nranks = 1; nranks <= MAX_NRANKS; nranks++) {
    int64_t top = nranks < MAX_NIDS ? nranks : MAX_NIDS;
    if (nranks <= FULL_NRANKS) {
      for (int64_t nids = 1; nids <= top; nids++)
        check_blocks(nranks, nids);
      continue;
    }
    for (size_t k = 0; k < sizeof(some_nids) / sizeof(some_nids[0]); k++)
      if (some_nids[k] <= top)
        check_blocks(nranks, some_nids[k]);
    /* And the id counts that divide nranks or leave remainder 1. */
    for (int64_t nids = 1; nids <= top; nids++)
      if (nranks % nids <= 1)
        check_blocks(nranks, nids);
  }
}

/* Properties stated directly in terms of the two functions: block sizes
 * from consecutive firsts, and block_first(block_of(rank)) <= rank <
 * block_first(block_of(rank) + 1). */
static void test_nccl_block_sizes(void **state) {
  (void)state;
  for (int64_t nranks = 1; nranks <= MAX_NRANKS; nranks++) {
    int64_t top = nranks < MAX_NIDS ? nranks : MAX_NIDS;
    for (int64_t nids = 1; nids <= top; nids++) {
      int64_t q = nranks / nids, r = nranks % nids;
      if (rdzv_nccl_block_first(0, nranks, nids) != 0)
        fail_msg("block_first(0, %lld, %lld) != 0", (long long)nranks,
                 (long long)nids);
      for (int64_t b = 0; b < nids; b++) {
        int64_t lo = rdzv_nccl_block_first(b, nranks, nids);
        int64_t hi =
            b + 1 < nids ? rdzv_nccl_block_first(b + 1, nranks, nids) : nranks;
        if (hi - lo != (b < r ? q + 1 : q))
          fail_msg("nranks %lld nids %lld: block %lld holds %lld",
                   (long long)nranks, (long long)nids, (long long)b,
                   (long long)(hi - lo));
        /* Both ends of the block map back to it. */
        if (rdzv_nccl_block_of(lo, nranks, nids) != b ||
            rdzv_nccl_block_of(hi - 1, nranks, nids) != b)
          fail_msg("nranks %lld nids %lld: ends of block %lld map elsewhere",
                   (long long)nranks, (long long)nids, (long long)b);
      }
    }
  }
  /* Every rank of a few larger shapes. */
  static const int64_t shapes[][2] = {
      {100000, 782}, {100000, 1}, {65536, 512}, {131071, 1024}, {4099, 4099},
  };
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    int64_t nranks = shapes[k][0], nids = shapes[k][1];
    for (int64_t rank = 0; rank < nranks; rank++) {
      int64_t b = rdzv_nccl_block_of(rank, nranks, nids);
      int64_t lo = b >= 0 ? rdzv_nccl_block_first(b, nranks, nids) : -1;
      int64_t hi =
          b + 1 < nids ? rdzv_nccl_block_first(b + 1, nranks, nids) : nranks;
      if (b < 0 || b >= nids || lo < 0 || lo > rank || rank >= hi)
        fail_msg("rank %lld of %lld, %lld ids: block %lld [%lld, %lld)",
                 (long long)rank, (long long)nranks, (long long)nids,
                 (long long)b, (long long)lo, (long long)hi);
    }
  }
}

/* The example in NCCL's documentation: 7 ranks, 3 ids. */
static void test_nccl_doc_example(void **state) {
  (void)state;
  static const int64_t block[7] = {0, 0, 0, 1, 1, 2, 2};
  static const int64_t root[3] = {0, 3, 5};
  for (int64_t rank = 0; rank < 7; rank++)
    assert_int_equal(rdzv_nccl_block_of(rank, 7, 3), block[rank]);
  for (int64_t b = 0; b < 3; b++)
    assert_int_equal(rdzv_nccl_block_first(b, 7, 3), root[b]);
}

struct block_case {
  int64_t x, nranks, nids;
  int64_t block_of, block_first; /* of x as a rank, of x as a block */
};

/* clang-format off */
static const struct block_case block_cases[] = {
    {0, 1, 1, 0, 0},
    {6, 7, 7, 6, 6},
    {127, 128, 1, 0, -1},
    {99999, 100000, 782, 781, -1},
    /* Bad arguments: nids < 1, nids > nranks, x out of range. */
    {0, 7, 0, -1, -1},
    {0, 7, -1, -1, -1},
    {0, 7, 8, -1, -1},
    {0, 0, 0, -1, -1},
    {-1, 7, 3, -1, -1},
    {7, 7, 3, -1, -1},
    {3, 7, 3, 1, -1},
    {INT64_MIN, 7, 3, -1, -1},
    /* Extremes. */
    {INT64_MAX - 1, INT64_MAX, 1, 0, -1},
    {0, INT64_MAX, 1, 0, 0},
    {INT64_MAX - 1, INT64_MAX, INT64_MAX, INT64_MAX - 1, INT64_MAX - 1},
    {INT64_MAX - 1, INT64_MAX, 2, 1, -1},
};
/* clang-format on */

static void test_nccl_block_table(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(block_cases) / sizeof(block_cases[0]); k++) {
    const struct block_case *tc = &block_cases[k];
    int64_t bo = rdzv_nccl_block_of(tc->x, tc->nranks, tc->nids);
    int64_t bf = rdzv_nccl_block_first(tc->x, tc->nranks, tc->nids);
    if (bo != tc->block_of || bf != tc->block_first)
      fail_msg("case %zu (x %lld, nranks %lld, nids %lld): block_of %lld, "
               "block_first %lld",
               k, (long long)tc->x, (long long)tc->nranks, (long long)tc->nids,
               (long long)bo, (long long)bf);
  }
  /* 100000 ranks in 782 blocks: q 127, r 686; block 686 starts at
   * 686 * 128 = 87808, the last block at 87808 + 95 * 127 = 99873. */
  assert_int_equal(rdzv_nccl_block_first(686, 100000, 782), 87808);
  assert_int_equal(rdzv_nccl_block_first(781, 100000, 782), 99873);
  assert_int_equal(rdzv_nccl_block_of(87807, 100000, 782), 685);
  assert_int_equal(rdzv_nccl_block_of(87808, 100000, 782), 686);
  /* Extreme block firsts stay within range. */
  assert_int_equal(rdzv_nccl_block_first(1, INT64_MAX, 2), INT64_MAX / 2 + 1);
  assert_int_equal(rdzv_nccl_block_of(INT64_MAX / 2, INT64_MAX, 2), 0);
  assert_int_equal(rdzv_nccl_block_of(INT64_MAX / 2 + 1, INT64_MAX, 2), 1);
}

/* ---- number of ids ------------------------------------------------------ */

struct nids_case {
  int64_t nranks, per_root, nids;
};

/* clang-format off */
static const struct nids_case nids_cases[] = {
    {1, 128, 1}, {127, 128, 1}, {128, 128, 1}, {129, 128, 2}, {256, 128, 2},
    {257, 128, 3}, {100000, 128, 782}, {99968, 128, 781}, {99969, 128, 782},
    {1, 1, 1}, {7, 1, 7}, {7, 3, 3}, {6, 3, 2}, {7, 100, 1},
    {INT64_MAX, 1, INT64_MAX}, {INT64_MAX, INT64_MAX, 1},
    {INT64_MAX, 2, INT64_MAX / 2 + 1},
    /* Bad arguments. */
    {0, 128, 0}, {-1, 128, 0}, {128, 0, 0}, {128, -128, 0}, {0, 0, 0},
    {INT64_MIN, 1, 0}, {1, INT64_MIN, 0},
};
/* clang-format on */

static void test_nccl_nids(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(nids_cases) / sizeof(nids_cases[0]); k++) {
    const struct nids_case *tc = &nids_cases[k];
    int64_t got = rdzv_nccl_nids(tc->nranks, tc->per_root);
    if (got != tc->nids)
      fail_msg("nids(%lld, %lld) = %lld, expected %lld", (long long)tc->nranks,
               (long long)tc->per_root, (long long)got, (long long)tc->nids);
  }
  for (int64_t n = 1; n <= 128; n++)
    assert_int_equal(rdzv_nccl_nids(n, 128), 1);
  /* ceil(n / rpr), and the result always yields valid blocks. */
  for (int64_t rpr = 1; rpr <= 300; rpr++) {
    for (int64_t n = 1; n <= MAX_NRANKS; n++) {
      int64_t ids = rdzv_nccl_nids(n, rpr);
      if (ids < 1 || ids > n || ids * rpr < n || (ids - 1) * rpr >= n)
        fail_msg("nids(%lld, %lld) = %lld", (long long)n, (long long)rpr,
                 (long long)ids);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tree_parent_exhaustive),
      cmocka_unit_test(test_tree_children_partition),
      cmocka_unit_test(test_tree_depth_exhaustive),
      cmocka_unit_test(test_tree_table),
      cmocka_unit_test(test_tree_depth_table),
      cmocka_unit_test(test_nccl_blocks_exhaustive),
      cmocka_unit_test(test_nccl_block_sizes),
      cmocka_unit_test(test_nccl_doc_example),
      cmocka_unit_test(test_nccl_block_table),
      cmocka_unit_test(test_nccl_nids),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
