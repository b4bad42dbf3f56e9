/* Unit tests for rank assignment (rendezvous/assign.c).
 *
 * Each layout in the table lists hosts in an arbitrary order with the
 * launcher's local ranks (possibly sparse and unordered) and the host's
 * expected node rank. The expected assignment is derived from that alone:
 * ranks follow node-rank order, contiguous per host, ordered by launcher
 * local rank. Every layout is also assigned again from 200 seeded
 * shuffles of its joins, which must give every (host, local rank) the same
 * assignment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv/error.h"
#include "rendezvous/assign.h"

#define MAX_LR 16
#define SHUFFLES 200

/* ---- a seeded PRNG (splitmix64) ----------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void shuffle(size_t *v, size_t n, uint64_t *s) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(rng_next(s) % i);
    size_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

/* ---- layouts ------------------------------------------------------------ */

struct host_spec {
  const char *name;
  const char *location; /* NULL: empty */
  int node_rank;        /* expected position in host order */
  int nlr;              /* launcher local ranks below; 0 ends the list */
  int32_t lr[MAX_LR];
};

struct layout {
  const char *name;
  struct host_spec hosts[8];
};

/* clang-format off */
static const struct layout layouts[] = {
    {"one rank", {{"solo", NULL, 0, 1, {0}}}},
    {"one host of 8",
     {{"h", NULL, 0, 8, {7, 3, 0, 1, 6, 2, 5, 4}}}},
    {"uneven 7 + 8",
     {{"node-b", NULL, 1, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"node-a", NULL, 0, 7, {6, 5, 4, 3, 2, 1, 0}}}},
    {"a host with one rank",
     {{"big", NULL, 0, 4, {0, 1, 2, 3}},
      {"tiny", NULL, 1, 1, {0}}}},
    {"8, 1, 5",
     {{"h0", NULL, 0, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"h1", NULL, 1, 1, {0}},
      {"h2", NULL, 2, 5, {0, 1, 2, 3, 4}}}},
    {"sparse launcher local ranks",
     {{"gpu7", NULL, 0, 3, {5, 0, 2}}}},
    {"sparse and large launcher local ranks",
     {{"x", NULL, 1, 3, {1000000, 7, 2147483647}},
      {"w", NULL, 0, 2, {9, 3}}}},
    {"location before name",
     {{"a", "rack2", 3, 2, {0, 1}},
      {"z", "rack1", 2, 2, {1, 0}},
      {"m", NULL, 0, 1, {0}},
      {"b", "rack1", 1, 1, {0}}}},
    {"natural order of names (digit runs as numbers)",
     {{"node10", NULL, 2, 1, {0}},
      {"node2", NULL, 1, 1, {0}},
      {"node1", NULL, 0, 2, {0, 1}},
      {"node\xff", NULL, 3, 1, {0}}}},
    {"prefix names and locations",
     {{"ab", "p/r", 3, 1, {0}},
      {"a", "p/r", 2, 1, {0}},
      {"a", "p", 0, 2, {1, 0}},
      {"ab", "p", 1, 1, {0}}}},
    {"four racks of two",
     {{"n3", "pod1/rack2", 3, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"n0", "pod0/rack9", 1, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"n1", "pod1/rack1", 2, 8, {7, 6, 5, 4, 3, 2, 1, 0}},
      {"n2", "pod0/rack1", 0, 8, {1, 3, 5, 7, 0, 2, 4, 6}},
      {"n5", "pod2", 5, 2, {0, 1}},
      {"n4", "pod2", 4, 3, {0, 2, 4}}}},
};
/* clang-format on */
#define NLAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

static size_t layout_hosts(const struct layout *l) {
  size_t h = 0;
  while (h < 8 && l->hosts[h].nlr > 0)
    h++;
  return h;
}

static size_t layout_ranks(const struct layout *l) {
  size_t n = 0;
  for (size_t h = 0; h < layout_hosts(l); h++)
    n += (size_t)l->hosts[h].nlr;
  return n;
}

static void set_rec(struct rdzv_join_rec *r, const char *host,
                    const char *location, int32_t lr, uint64_t claim) {
  r->host = (const uint8_t *)host;
  r->host_len = (uint32_t)strlen(host);
  r->location = (const uint8_t *)(location ? location : "");
  r->location_len = location ? (uint32_t)strlen(location) : 0;
  r->local_rank = lr;
  r->claim = claim;
}

/* Fills recs (host by host, local ranks in table order) and the expected
 * assignment of each. */
static void layout_build(const struct layout *l, struct rdzv_join_rec *recs,
                         struct rdzv_assignment *want) {
  size_t nh = layout_hosts(l), n = layout_ranks(l), k = 0;
  for (size_t h = 0; h < nh; h++) {
    const struct host_spec *hs = &l->hosts[h];
    /* First rank: the ranks of every host placed before this one. */
    int32_t first = 0;
    for (size_t o = 0; o < nh; o++)
      if (l->hosts[o].node_rank < hs->node_rank)
        first += l->hosts[o].nlr;
    for (int j = 0; j < hs->nlr; j++, k++) {
      /* Position among the host's launcher local ranks, in value order. */
      int32_t pos = 0;
      for (int m = 0; m < hs->nlr; m++)
        if (hs->lr[m] < hs->lr[j])
          pos++;
      set_rec(&recs[k], hs->name, hs->location, hs->lr[j],
              0x1000u + (uint64_t)k);
      want[k].rank = first + pos;
      want[k].world_size = (int32_t)n;
      want[k].local_rank = pos;
      want[k].local_size = hs->nlr;
      want[k].node_rank = hs->node_rank;
      want[k].node_count = (int32_t)nh;
    }
  }
}

static void assert_asg_eq(const struct rdzv_assignment *got,
                          const struct rdzv_assignment *want, const char *what,
                          size_t k) {
  if (memcmp(got, want, sizeof(*got)) != 0)
    fail_msg("%s, join %zu: got rank %d/%d local %d/%d node %d/%d, want "
             "rank %d/%d local %d/%d node %d/%d",
             what, k, got->rank, got->world_size, got->local_rank,
             got->local_size, got->node_rank, got->node_count, want->rank,
             want->world_size, want->local_rank, want->local_size,
             want->node_rank, want->node_count);
}

static int assign_checked(const struct rdzv_join_rec *recs, size_t n,
                          struct rdzv_assignment *out) {
  size_t *scratch = malloc(n * sizeof(*scratch));
  size_t da = 99, db = 99;
  assert_non_null(scratch);
  int rc = rdzv_assign(recs, n, out, scratch, &da, &db);
  free(scratch);
  return rc;
}

static void test_layouts(void **state) {
  (void)state;
  for (size_t li = 0; li < NLAYOUTS; li++) {
    const struct layout *l = &layouts[li];
    size_t n = layout_ranks(l);
    struct rdzv_join_rec *recs = calloc(n, sizeof(*recs));
    struct rdzv_assignment *want = calloc(n, sizeof(*want));
    struct rdzv_assignment *got = calloc(n, sizeof(*got));
    assert_true(recs && want && got);
    layout_build(l, recs, want);
    memset(got, 0xA5, n * sizeof(*got));
    assert_int_equal(assign_checked(recs, n, got), 0);
    for (size_t k = 0; k < n; k++)
      assert_asg_eq(&got[k], &want[k], l->name, k);
    free(recs);
    free(want);
    free(got);
  }
}

/* The same joins in 200 orders give each (host, local rank) the same
 * assignment. */
static void test_arrival_order(void **state) {
  (void)state;
  uint64_t seed = 0x5EED0001u;
  for (size_t li = 0; li < NLAYOUTS; li++) {
    const struct layout *l = &layouts[li];
    size_t n = layout_ranks(l);
    struct rdzv_join_rec *recs = calloc(n, sizeof(*recs));
    struct rdzv_join_rec *shuf = calloc(n, sizeof(*shuf));
    struct rdzv_assignment *want = calloc(n, sizeof(*want));
    struct rdzv_assignment *got = calloc(n, sizeof(*got));
    size_t *perm = calloc(n, sizeof(*perm));
    assert_true(recs && shuf && want && got && perm);
    layout_build(l, recs, want);
    for (size_t k = 0; k < n; k++)
      perm[k] = k;
    for (int t = 0; t < SHUFFLES; t++) {
      shuffle(perm, n, &seed);
      for (size_t k = 0; k < n; k++)
        shuf[k] = recs[perm[k]];
      assert_int_equal(assign_checked(shuf, n, got), 0);
      for (size_t k = 0; k < n; k++)
        assert_asg_eq(&got[k], &want[perm[k]], l->name, perm[k]);
    }
    free(recs);
    free(shuf);
    free(want);
    free(got);
    free(perm);
  }
}

/* ---- rdzv_join_cmp ------------------------------------------------------ */

struct cmp_case {
  const char *loc_a, *host_a;
  int32_t lr_a;
  const char *loc_b, *host_b;
  int32_t lr_b;
  int sign;
};

/* clang-format off */
static const struct cmp_case cmp_cases[] = {
    {"", "h", 0, "", "h", 0, 0},
    {"", "h", 0, "", "h", 1, -1},
    {"", "h", 2147483647, "", "h", 0, 1},
    {"", "a", 9, "", "b", 0, -1},
    {"", "a", 0, "", "ab", 0, -1},
    {"", "b", 0, "", "ab", 0, 1},
    {"r2", "a", 0, "r1", "z", 0, 1},
    {"", "z", 0, "r", "a", 0, -1},
    {"r", "a", 0, "r/x", "a", 0, -1},
    {"", "\xff", 0, "", "a", 0, 1},
    /* natural order: digit runs as numbers */
    {"", "n2", 0, "", "n10", 0, -1},
    {"", "pod-9", 0, "", "pod-10", 0, -1},
    {"rack2", "z", 0, "rack10", "a", 0, -1},
    {"", "n1", 0, "", "n01", 0, -1},
    {"", "n007", 0, "", "n7", 0, 1},
    {"", "n1a", 0, "", "n1b", 0, -1},
    {"", "a10b2", 0, "", "a10b10", 0, -1},
    {"", "n99999999999999999999", 0, "", "n100000000000000000000", 0, -1},
    {"", "n10", 0, "", "n10x", 0, -1},
    {"", "n10", 0, "", "n1x", 0, 1},
};
/* clang-format on */

static void test_join_cmp(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(cmp_cases) / sizeof(cmp_cases[0]); k++) {
    const struct cmp_case *tc = &cmp_cases[k];
    struct rdzv_join_rec a, b;
    set_rec(&a, tc->host_a, tc->loc_a, tc->lr_a, 1);
    set_rec(&b, tc->host_b, tc->loc_b, tc->lr_b, 2);
    int ab = rdzv_join_cmp(&a, &b), ba = rdzv_join_cmp(&b, &a);
    int sab = (ab > 0) - (ab < 0), sba = (ba > 0) - (ba < 0);
    if (sab != tc->sign || sba != -tc->sign)
      fail_msg("cmp case %zu: %d and %d, want sign %d", k, ab, ba, tc->sign);
  }
}

/* Hosts named by a launcher's index (Slurm's n1..n12, an Indexed Job's
 * pod-0..pod-11), joined in reverse: node ranks follow the index, not
 * the names' text order (where n10 < n2). */
static void test_natural_order(void **state) {
  (void)state;
  static const char *const fmts[] = {"n%d", "pod-%d"};
  for (size_t f = 0; f < 2; f++) {
    char names[12][16];
    struct rdzv_join_rec recs[12];
    struct rdzv_assignment out[12];
    size_t scratch[12], da, db;
    for (int i = 0; i < 12; i++) {
      int idx = 11 - i + (f == 0); /* n12..n1, pod-11..pod-0 */
      snprintf(names[i], sizeof(names[i]), fmts[f], idx);
      set_rec(&recs[i], names[i], NULL, 0, (uint64_t)i + 1);
    }
    assert_int_equal(rdzv_assign(recs, 12, out, scratch, &da, &db), 0);
    for (int i = 0; i < 12; i++)
      if (out[i].node_rank != 11 - i)
        fail_msg("%s: node rank %d, want %d", names[i], out[i].node_rank,
                 11 - i);
  }
}

/* ---- duplicates --------------------------------------------------------- */

struct dup_case {
  const char *name;
  size_t n;
  struct {
    const char *host, *loc;
    int32_t lr;
    uint64_t claim;
  } recs[6];
  int rc;
  size_t a, b; /* the two joins named, in either order */
};

/* clang-format off */
static const struct dup_case dup_cases[] = {
    {"pair", 2, {{"h", NULL, 0, 1}, {"h", NULL, 0, 2}},
     RDZV_EDUPLICATE_CLAIM, 0, 1},
    {"among others", 6,
     {{"h1", NULL, 0, 1}, {"h2", NULL, 3, 2}, {"h1", NULL, 1, 3},
      {"h2", NULL, 0, 4}, {"h2", NULL, 3, 5}, {"h0", NULL, 0, 6}},
     RDZV_EDUPLICATE_CLAIM, 1, 4},
    {"with location", 3,
     {{"h", "rack", 0, 1}, {"g", "rack", 0, 2}, {"h", "rack", 0, 3}},
     RDZV_EDUPLICATE_CLAIM, 0, 2},
    {"same local rank, other hosts", 3,
     {{"h", NULL, 0, 1}, {"g", NULL, 0, 2}, {"hh", NULL, 0, 3}}, 0, 0, 0},
    {"same host, other local ranks", 3,
     {{"h", NULL, 0, 1}, {"h", NULL, 1, 2}, {"h", NULL, 2, 3}}, 0, 0, 0},
};
/* clang-format on */

static void test_duplicates(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof(dup_cases) / sizeof(dup_cases[0]); k++) {
    const struct dup_case *tc = &dup_cases[k];
    struct rdzv_join_rec recs[6];
    struct rdzv_assignment out[6];
    size_t scratch[6], da = 99, db = 99;
    for (size_t i = 0; i < tc->n; i++)
      set_rec(&recs[i], tc->recs[i].host, tc->recs[i].loc, tc->recs[i].lr,
              tc->recs[i].claim);
    int rc = rdzv_assign(recs, tc->n, out, scratch, &da, &db);
    if (rc != tc->rc)
      fail_msg("%s: rc %d, want %d", tc->name, rc, tc->rc);
    if (rc == 0)
      continue;
    if (!((da == tc->a && db == tc->b) || (da == tc->b && db == tc->a)))
      fail_msg("%s: named joins %zu and %zu, want %zu and %zu", tc->name, da,
               db, tc->a, tc->b);
  }
}

/* ---- scale -------------------------------------------------------------- */

/* 12,500 hosts of 8 (100,000 ranks) in 125 racks, joined in a seeded
 * random order. Host p in expected order (rack p / 100, j = p % 100) is
 * named so that names sort against the racks (descending across racks)
 * and against j within a rack: the location must order before the name. */
#define BIG_HOSTS 12500
#define BIG_PER 8
#define BIG_N (BIG_HOSTS * BIG_PER)

static void test_large(void **state) {
  (void)state;
  char(*names)[24] = calloc(BIG_HOSTS, sizeof(*names));
  char(*locs)[24] = calloc(BIG_HOSTS, sizeof(*locs));
  struct rdzv_join_rec *recs = calloc(BIG_N, sizeof(*recs));
  struct rdzv_assignment *out = calloc(BIG_N, sizeof(*out));
  int32_t *want_node = calloc(BIG_N, sizeof(*want_node));
  size_t *order = calloc(BIG_N, sizeof(*order));
  size_t *scratch = calloc(BIG_N, sizeof(*scratch));
  uint8_t *seen = calloc(BIG_N, 1);
  assert_true(names && locs && recs && out && want_node && order && scratch &&
              seen);
  for (int p = 0; p < BIG_HOSTS; p++) {
    int rack = p / 100, j = p % 100;
    snprintf(locs[p], sizeof(locs[p]), "pod/rack%03d", rack);
    snprintf(names[p], sizeof(names[p]), "h%05d",
             (124 - rack) * 100 + (99 - j));
  }
  for (size_t k = 0; k < BIG_N; k++)
    order[k] = k;
  uint64_t seed = 0xB16B00B5u;
  shuffle(order, BIG_N, &seed);
  for (size_t k = 0; k < BIG_N; k++) {
    /* Join order[k]: host h = order[k] / 8, launcher local rank
     * 3 * (order[k] % 8) (sparse). */
    size_t id = order[k];
    int h = (int)(id / BIG_PER), lr = (int)(id % BIG_PER);
    set_rec(&recs[k], names[h], locs[h], 3 * lr, 0xC0000000u + id);
    int rack = h / 100, j = h % 100;
    want_node[k] = rack * 100 + (99 - j);
  }
  size_t da = 0, db = 0;
  assert_int_equal(rdzv_assign(recs, BIG_N, out, scratch, &da, &db), 0);
  for (size_t k = 0; k < BIG_N; k++) {
    const struct rdzv_assignment *a = &out[k];
    int32_t lr = recs[k].local_rank / 3;
    if (a->world_size != BIG_N || a->node_count != BIG_HOSTS ||
        a->local_size != BIG_PER || a->node_rank != want_node[k] ||
        a->local_rank != lr || a->rank != a->node_rank * BIG_PER + lr)
      fail_msg("join %zu (%s local %d): rank %d/%d local %d/%d node %d/%d", k,
               names[order[k] / BIG_PER], recs[k].local_rank, a->rank,
               a->world_size, a->local_rank, a->local_size, a->node_rank,
               a->node_count);
    if (seen[a->rank])
      fail_msg("rank %d assigned twice", a->rank);
    seen[a->rank] = 1;
  }
  /* A sample spelled out: rack000 holds names h12400..h12499 and rack124
   * h00000..h00099, each rack in name order. */
  static const struct {
    const char *name;
    int32_t node_rank;
  } sample[] = {
      {"h12400", 0},    {"h12499", 99},    {"h12300", 100},
      {"h06250", 6250}, {"h00000", 12400}, {"h00099", 12499},
  };
  size_t hits = 0;
  for (size_t k = 0; k < BIG_N; k++) {
    for (size_t s = 0; s < sizeof(sample) / sizeof(sample[0]); s++) {
      if (strcmp(names[order[k] / BIG_PER], sample[s].name) != 0)
        continue;
      hits++;
      assert_int_equal(out[k].node_rank, sample[s].node_rank);
      assert_int_equal(out[k].rank,
                       sample[s].node_rank * BIG_PER + recs[k].local_rank / 3);
    }
  }
  assert_int_equal(hits, BIG_PER * (sizeof(sample) / sizeof(sample[0])));
  free(names);
  free(locs);
  free(recs);
  free(out);
  free(want_node);
  free(order);
  free(scratch);
  free(seen);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts),    cmocka_unit_test(test_arrival_order),
      cmocka_unit_test(test_join_cmp),   cmocka_unit_test(test_natural_order),
      cmocka_unit_test(test_duplicates), cmocka_unit_test(test_large),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
