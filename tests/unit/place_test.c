/* Unit tests for the placement of a generation's world
 * (rendezvous/place.c): previous hosts keep their node ranks and rank
 * ranges, holes go to new actives, then to spares of the lost host's
 * domain and size, unfilled holes close up, extra spares are parked, and
 * the result never depends on the joins' order (200 seeded shuffles of
 * each case, and a seeded random run checked against the rules); with
 * whole domains (segments), a segment is repaired in place or given up
 * whole for a whole segment of spares, and hosts outside whole segments
 * join only for the minimum. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv/error.h"
#include "rendezvous/place.h"

#define MAXJ 64

struct host_spec {
  const char *name, *domain;
  int ranks;
  int spare; /* 0 active, 1 spare, 2 extra (an active held back) */
};

struct placed {
  struct rdzv_join_rec recs[MAXJ];
  uint8_t spare[MAXJ];
  struct rdzv_assignment out[MAXJ];
  struct rdzv_place_swap swaps[MAXJ];
  size_t n, nswaps, nworld;
};

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void add_host(struct placed *p, const struct host_spec *h) {
  for (int lr = 0; lr < h->ranks; lr++) {
    assert_true(p->n < MAXJ);
    p->recs[p->n] = (struct rdzv_join_rec){
        .host = (const uint8_t *)h->name,
        .host_len = (uint32_t)strlen(h->name),
        .location = (const uint8_t *)"",
        .local_rank = lr,
        .claim = p->n + 1,
        .domain = (const uint8_t *)(h->domain ? h->domain : ""),
        .domain_len = h->domain ? (uint32_t)strlen(h->domain) : 0};
    p->spare[p->n] = h->spare == 1   ? RDZV_PLACE_SPARE
                     : h->spare == 2 ? RDZV_PLACE_EXTRA
                                     : RDZV_PLACE_ACTIVE;
    p->n++;
  }
}

static void prev_of(const struct host_spec *hs, size_t nh,
                    struct rdzv_place_host *prev) {
  for (size_t i = 0; i < nh; i++)
    prev[i] = (struct rdzv_place_host){
        .host = (const uint8_t *)hs[i].name,
        .host_len = (uint32_t)strlen(hs[i].name),
        .location = (const uint8_t *)"",
        .domain = (const uint8_t *)(hs[i].domain ? hs[i].domain : ""),
        .domain_len = hs[i].domain ? (uint32_t)strlen(hs[i].domain) : 0,
        .local_size = hs[i].ranks};
}

/* Whole domains (rdzv_place_in.segment_hosts) and the minimum they
 * honour, for the segment tests (reset after each). */
static uint32_t g_segment, g_min;

static int seg_reset(void **state) {
  (void)state;
  g_segment = g_min = 0;
  return 0;
}

static void place(struct placed *p, const struct rdzv_place_host *prev,
                  size_t nprev, uint32_t max) {
  struct rdzv_place_in in = {p->recs, p->n, p->spare, prev,
                             nprev,   max,  g_min,    g_segment};
  size_t da, db;
  assert_int_equal(
      rdzv_place(&in, p->out, p->swaps, &p->nswaps, &p->nworld, &da, &db), 0);
}

/* The assignment of host name's local rank lr. */
static const struct rdzv_assignment *of(const struct placed *p,
                                        const char *name, int lr) {
  for (size_t i = 0; i < p->n; i++)
    if (p->recs[i].host_len == strlen(name) &&
        memcmp(p->recs[i].host, name, p->recs[i].host_len) == 0 &&
        p->recs[i].local_rank == lr)
      return &p->out[i];
  fail_msg("no join of %s local rank %d", name, lr);
  return NULL;
}

/* Every placement of p's joins in 200 shuffled orders equals p's own. */
static void check_shuffles(const struct placed *p,
                           const struct rdzv_place_host *prev, size_t nprev,
                           uint32_t max) {
  uint64_t seed = 42;
  for (int s = 0; s < 200; s++) {
    struct placed q;
    memset(&q, 0, sizeof(q));
    size_t perm[MAXJ];
    for (size_t i = 0; i < p->n; i++)
      perm[i] = i;
    for (size_t i = p->n; i > 1; i--) {
      size_t j = (size_t)(rng_next(&seed) % i), t = perm[i - 1];
      perm[i - 1] = perm[j];
      perm[j] = t;
    }
    for (size_t i = 0; i < p->n; i++) {
      q.recs[i] = p->recs[perm[i]];
      q.spare[i] = p->spare[perm[i]];
    }
    q.n = p->n;
    place(&q, prev, nprev, max);
    assert_int_equal(q.nworld, p->nworld);
    assert_int_equal(q.nswaps, p->nswaps);
    for (size_t i = 0; i < p->n; i++)
      assert_memory_equal(&q.out[i], &p->out[perm[i]], sizeof(q.out[i]));
  }
}

/* Ranks 0..nworld-1 each once; parked joins have rank -1. */
static void check_ranks(const struct placed *p) {
  int seen[MAXJ] = {0};
  size_t in_world = 0;
  for (size_t i = 0; i < p->n; i++) {
    assert_int_equal(p->out[i].world_size, (int32_t)p->nworld);
    if (p->out[i].rank < 0) {
      assert_int_equal(p->out[i].node_rank, -1);
      continue;
    }
    assert_true(p->out[i].rank < (int32_t)p->nworld);
    assert_int_equal(seen[p->out[i].rank]++, 0);
    in_world++;
  }
  assert_int_equal(in_world, p->nworld);
}

static const struct host_spec world4[] = {
    {"h0", "A", 2, 0}, {"h1", "A", 2, 0}, {"h2", "B", 2, 0}, {"h3", "B", 2, 0}};

static void test_no_prev_is_assignment_order(void **state) {
  (void)state;
  struct placed p = {0};
  add_host(&p, &world4[3]);
  add_host(&p, &world4[0]);
  add_host(&p, &world4[2]);
  add_host(&p, &world4[1]);
  place(&p, NULL, 0, 8);
  assert_int_equal(p.nworld, 8);
  assert_int_equal(p.nswaps, 0);
  assert_int_equal(of(&p, "h0", 0)->rank, 0);
  assert_int_equal(of(&p, "h2", 1)->rank, 5);
  assert_int_equal(of(&p, "h3", 0)->node_rank, 3);
  check_ranks(&p);
  check_shuffles(&p, NULL, 0, 8);
}

static void test_spare_takes_lost_place_and_domain(void **state) {
  (void)state;
  struct rdzv_place_host prev[4];
  prev_of(world4, 4, prev);
  struct placed p = {0};
  add_host(&p, &world4[0]);
  add_host(&p, &world4[1]);
  add_host(&p, &world4[3]); /* h2 (domain B) is lost */
  /* Spares of domains A and B: s-b gets h2's place although s-a comes
   * first in assignment order; s-a is parked. */
  static const struct host_spec sa = {"s-a", "A", 2, 1},
                                sb = {"s-b", "B", 2, 1};
  add_host(&p, &sa);
  add_host(&p, &sb);
  place(&p, prev, 4, 8);
  assert_int_equal(p.nworld, 8);
  assert_int_equal(of(&p, "s-b", 0)->rank, 4);
  assert_int_equal(of(&p, "s-b", 1)->rank, 5);
  assert_int_equal(of(&p, "s-b", 0)->node_rank, 2);
  assert_int_equal(of(&p, "h3", 0)->rank, 6); /* kept its rank range */
  assert_int_equal(of(&p, "h3", 0)->node_rank, 3);
  assert_int_equal(of(&p, "s-a", 0)->rank, -1); /* parked */
  assert_int_equal(of(&p, "s-a", 1)->rank, -1);
  assert_int_equal(p.nswaps, 1);
  assert_int_equal(p.swaps[0].prev, 2);
  assert_int_equal(p.swaps[0].by_spare, RDZV_PLACE_SPARE);
  assert_int_equal(p.recs[p.swaps[0].by].host[0], 's');
  assert_int_equal(p.recs[p.swaps[0].by].host[2], 'b');
  check_ranks(&p);
  check_shuffles(&p, prev, 4, 8);
}

static void test_size_then_order(void **state) {
  (void)state;
  struct rdzv_place_host prev[4];
  prev_of(world4, 4, prev);
  struct placed p = {0};
  add_host(&p, &world4[1]);
  add_host(&p, &world4[2]);
  add_host(&p, &world4[3]); /* h0 lost */
  /* No spare of domain A: the one of h0's size wins over the first. */
  static const struct host_spec s1 = {"s1", "C", 1, 1}, s2 = {"s2", "C", 2, 1};
  add_host(&p, &s1);
  add_host(&p, &s2);
  place(&p, prev, 4, 8);
  assert_int_equal(of(&p, "s2", 0)->rank, 0);
  assert_int_equal(of(&p, "s2", 0)->node_rank, 0);
  assert_int_equal(of(&p, "h1", 0)->rank, 2);
  assert_int_equal(of(&p, "s1", 0)->rank, -1); /* 9 ranks would not fit */
  check_ranks(&p);
  check_shuffles(&p, prev, 4, 8);
}

static void test_new_active_before_spare(void **state) {
  (void)state;
  struct rdzv_place_host prev[4];
  prev_of(world4, 4, prev);
  struct placed p = {0};
  add_host(&p, &world4[0]);
  add_host(&p, &world4[2]);
  add_host(&p, &world4[3]); /* h1 lost */
  static const struct host_spec n9 = {"n9", NULL, 2, 0}, sp = {"sp", "A", 2, 1};
  add_host(&p, &sp);
  add_host(&p, &n9);
  place(&p, prev, 4, 8);
  assert_int_equal(of(&p, "n9", 0)->node_rank, 1);
  assert_int_equal(of(&p, "n9", 0)->rank, 2);
  assert_int_equal(of(&p, "sp", 0)->rank, -1);
  assert_int_equal(p.swaps[0].by_spare, RDZV_PLACE_ACTIVE);
  check_ranks(&p);
  check_shuffles(&p, prev, 4, 8);
  /* An extra host (active, held back past the maximum) comes before a
   * spare, even one of the lost host's domain; a second extra that does
   * not fit is parked. */
  struct placed q = {0};
  add_host(&q, &world4[0]);
  add_host(&q, &world4[2]);
  add_host(&q, &world4[3]);
  static const struct host_spec x1 = {"x1", "C", 2, 2}, x2 = {"x2", "C", 2, 2},
                                sa = {"sa", "A", 2, 1};
  add_host(&q, &sa);
  add_host(&q, &x2);
  add_host(&q, &x1);
  place(&q, prev, 4, 8);
  assert_int_equal(of(&q, "x1", 0)->node_rank, 1);
  assert_int_equal(of(&q, "x2", 0)->rank, -1);
  assert_int_equal(of(&q, "sa", 0)->rank, -1);
  assert_int_equal(q.swaps[0].by_spare, RDZV_PLACE_EXTRA);
  check_ranks(&q);
  check_shuffles(&q, prev, 4, 8);
}

static void test_hole_closes_without_spares(void **state) {
  (void)state;
  struct rdzv_place_host prev[4];
  prev_of(world4, 4, prev);
  struct placed p = {0};
  add_host(&p, &world4[0]);
  add_host(&p, &world4[1]);
  add_host(&p, &world4[3]); /* h2 lost, no spare */
  place(&p, prev, 4, 8);
  assert_int_equal(p.nworld, 6);
  assert_int_equal(of(&p, "h3", 0)->node_rank, 2);
  assert_int_equal(of(&p, "h3", 0)->rank, 4);
  assert_int_equal(of(&p, "h3", 0)->node_count, 3);
  assert_int_equal(p.nswaps, 1);
  assert_int_equal(p.swaps[0].by, SIZE_MAX);
  check_ranks(&p);
  check_shuffles(&p, prev, 4, 8);
}

static void test_promoted_spare_stays_and_extras_append(void **state) {
  (void)state;
  /* The previous world had spare "s-b" in h2's place: joining again as a
   * spare it keeps that place. With no previous world, spares fill up to
   * the maximum after the actives. */
  static const struct host_spec w[] = {{"h0", "A", 2, 0},
                                       {"h1", "A", 2, 0},
                                       {"s-b", "B", 2, 1},
                                       {"h3", "B", 2, 0}};
  struct rdzv_place_host prev[4];
  prev_of(w, 4, prev);
  struct placed p = {0};
  for (int i = 0; i < 4; i++)
    add_host(&p, &w[i]);
  place(&p, prev, 4, 8);
  assert_int_equal(of(&p, "s-b", 1)->rank, 5);
  assert_int_equal(of(&p, "h3", 0)->rank, 6);
  check_ranks(&p);
  struct placed q = {0};
  add_host(&q, &w[0]);
  add_host(&q, &w[2]);
  static const struct host_spec s9 = {"s9", NULL, 2, 1};
  add_host(&q, &s9);
  place(&q, NULL, 0, 6);
  assert_int_equal(q.nworld, 6);
  assert_int_equal(of(&q, "h0", 0)->rank, 0);
  assert_int_equal(of(&q, "s-b", 0)->rank, 2); /* spares in assignment order */
  assert_int_equal(of(&q, "s9", 0)->rank, 4);
  check_ranks(&q);
  check_shuffles(&q, NULL, 0, 6);
}

/* A seeded random run: 8 previous hosts of 1-3 ranks in 2 domains, a
 * random subset back, random spares and new actives. Checked: survivors
 * and fillers hold the previous places in order, with ranks contiguous
 * (a survivor keeps its range when nothing before it changed size or
 * closed); the world stays
 * within max unless the actives alone pass it; order independence. */
static void test_random(void **state) {
  (void)state;
  uint64_t seed = 7;
  static char names[24][16], doms[2][2] = {"A", "B"};
  for (int round = 0; round < 300; round++) {
    struct host_spec prevh[8], extra[8];
    int sizes[8];
    for (int i = 0; i < 8; i++) {
      snprintf(names[i], sizeof(names[i]), "h%d", i);
      sizes[i] = 1 + (int)(rng_next(&seed) % 3);
      prevh[i] = (struct host_spec){names[i], doms[i / 4], sizes[i], 0};
    }
    struct rdzv_place_host prev[8];
    prev_of(prevh, 8, prev);
    struct placed p = {0};
    int back[8];
    uint32_t max = 0;
    for (int i = 0; i < 8; i++) {
      max += (uint32_t)sizes[i];
      back[i] = rng_next(&seed) % 4 != 0;
      if (back[i])
        add_host(&p, &prevh[i]);
    }
    int nextra = (int)(rng_next(&seed) % 5);
    for (int e = 0; e < nextra; e++) {
      snprintf(names[8 + e], sizeof(names[0]), "x%d", e);
      extra[e] = (struct host_spec){names[8 + e], doms[rng_next(&seed) % 2],
                                    1 + (int)(rng_next(&seed) % 3),
                                    (int)(rng_next(&seed) % 3)};
      add_host(&p, &extra[e]);
    }
    place(&p, prev, 8, max);
    check_ranks(&p);
    uint32_t actives = 0;
    for (size_t i = 0; i < p.n; i++)
      if (p.spare[i] == RDZV_PLACE_ACTIVE)
        actives++;
    assert_true(p.nworld <= (max > actives ? max : actives));
    int last_node = -1;
    int32_t expect_first = 0;
    for (int i = 0; i < 8; i++) {
      if (!back[i]) {
        /* A hole: filled (node rank kept by whoever took it) or closed. */
        for (size_t s = 0; s < p.nswaps; s++)
          if (p.swaps[s].prev == (size_t)i && p.swaps[s].by != SIZE_MAX) {
            const struct rdzv_assignment *a = &p.out[p.swaps[s].by];
            assert_int_equal(a->node_rank, last_node + 1);
            last_node = a->node_rank;
            expect_first += a->local_size;
          }
        continue;
      }
      const struct rdzv_assignment *a = of(&p, names[i], 0);
      assert_int_equal(a->node_rank, last_node + 1);
      last_node = a->node_rank;
      assert_int_equal(a->rank, expect_first);
      expect_first += sizes[i];
    }
    check_shuffles(&p, prev, 8, max);
  }
}

/* ---- whole domains (segment_hosts) ------------------------------------ */

/* The world's hosts in node-rank order, as "name/domain" words. */
static void world_order(const struct placed *p, char *out, size_t n) {
  size_t off = 0;
  out[0] = 0;
  for (int32_t node = 0; node < (int32_t)p->n; node++) {
    for (size_t i = 0; i < p->n; i++) {
      if (p->out[i].node_rank != node || p->recs[i].local_rank != 0)
        continue;
      off += (size_t)snprintf(out + off, n - off, "%s%.*s", off ? " " : "",
                              (int)p->recs[i].host_len,
                              (const char *)p->recs[i].host);
    }
  }
}

#define HOST1(name, dom, kind)                                                 \
  { name, dom, 1, kind }

/* Domains A (5 hosts), B (4) and C (2), segments of 4: A's first four
 * and B's four are the world, in domain order; a4 and C are parked while
 * the minimum is met, and join (a4 first, then C's) when it needs them. */
static void test_seg_first_generation(void **state) {
  (void)state;
  static const struct host_spec hs[] = {
      HOST1("c0", "C", 0), HOST1("b3", "B", 0), HOST1("a4", "A", 0),
      HOST1("a0", "A", 0), HOST1("b0", "B", 0), HOST1("c1", "C", 0),
      HOST1("a1", "A", 0), HOST1("b1", "B", 0), HOST1("a2", "A", 0),
      HOST1("b2", "B", 0), HOST1("a3", "A", 0)};
  char got[256];
  g_segment = 4;
  g_min = 8;
  struct placed p = {0};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
    add_host(&p, &hs[i]);
  place(&p, NULL, 0, 12);
  world_order(&p, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3 b0 b1 b2 b3");
  assert_int_equal(p.nworld, 8);
  assert_int_equal(of(&p, "a4", 0)->rank, -1);
  assert_int_equal(of(&p, "c0", 0)->rank, -1);
  check_ranks(&p);
  check_shuffles(&p, NULL, 0, 12);
  /* The minimum needs two more: the remainders join, domain by domain. */
  g_min = 10;
  place(&p, NULL, 0, 12);
  world_order(&p, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3 b0 b1 b2 b3 a4 c0");
  check_shuffles(&p, NULL, 0, 12);
  /* A maximum of 6 takes one whole segment, never a part of B's. */
  g_min = 4;
  place(&p, NULL, 0, 6);
  world_order(&p, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3");
}

static const struct host_spec seg_prev[] = {
    HOST1("a0", "A", 0), HOST1("a1", "A", 0), HOST1("a2", "A", 0),
    HOST1("a3", "A", 0), HOST1("b0", "B", 0), HOST1("b1", "B", 0),
    HOST1("b2", "B", 0), HOST1("b3", "B", 0)};
static const struct host_spec seg_spares[] = {
    HOST1("d0", "D", 1), HOST1("d1", "D", 1), HOST1("d2", "D", 1),
    HOST1("d3", "D", 1), HOST1("sa", "A", 1)};

/* a2 is lost; a spare of A repairs the segment in place (survivors keep
 * their ranks), D's spares stay parked. */
static void test_seg_repair_in_place(void **state) {
  (void)state;
  struct rdzv_place_host prev[8];
  prev_of(seg_prev, 8, prev);
  g_segment = 4;
  g_min = 8;
  struct placed p = {0};
  for (size_t i = 0; i < 8; i++)
    if (i != 2)
      add_host(&p, &seg_prev[i]);
  for (size_t i = 0; i < 5; i++)
    add_host(&p, &seg_spares[i]);
  place(&p, prev, 8, 8);
  char got[256];
  world_order(&p, got, sizeof(got));
  assert_string_equal(got, "a0 a1 sa a3 b0 b1 b2 b3");
  assert_int_equal(of(&p, "a3", 0)->rank, 3);
  assert_int_equal(p.nswaps, 1);
  assert_int_equal(p.swaps[0].prev, 2);
  assert_false(p.swaps[0].released);
  assert_int_equal(p.swaps[0].by_spare, RDZV_PLACE_SPARE);
  assert_int_equal(of(&p, "d0", 0)->rank, -1);
  check_ranks(&p);
  check_shuffles(&p, prev, 8, 8);
}

/* b1 is lost and B has no spare: B's segment is given up whole, D's four
 * spares take its node ranks 4-7, A keeps 0-3, B's survivors are parked
 * (released); with no whole segment left the place closes up, and the
 * survivors come back only for the minimum. */
static void test_seg_given_up_whole(void **state) {
  (void)state;
  struct rdzv_place_host prev[8];
  prev_of(seg_prev, 8, prev);
  g_segment = 4;
  g_min = 8;
  struct placed p = {0};
  for (size_t i = 0; i < 8; i++)
    if (i != 5)
      add_host(&p, &seg_prev[i]);
  for (size_t i = 0; i < 4; i++)
    add_host(&p, &seg_spares[i]);
  place(&p, prev, 8, 8);
  char got[256];
  world_order(&p, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3 d0 d1 d2 d3");
  assert_int_equal(of(&p, "a2", 0)->rank, 2);
  assert_int_equal(of(&p, "d1", 0)->rank, 5);
  assert_int_equal(of(&p, "b0", 0)->rank, -1);
  assert_int_equal(of(&p, "b2", 0)->rank, -1);
  assert_int_equal(p.nswaps, 4);
  for (size_t k = 0; k < 4; k++) {
    assert_int_equal(p.swaps[k].prev, 4 + k);
    assert_int_equal(p.swaps[k].released, k != 1);
    assert_int_equal(p.out[p.swaps[k].by].node_rank, (int32_t)(4 + k));
  }
  check_ranks(&p);
  check_shuffles(&p, prev, 8, 8);
  /* No spare: the place closes; a minimum of 4 leaves B's survivors
   * parked, one of 7 takes them back (not as a segment). */
  struct placed q = {0};
  for (size_t i = 0; i < 8; i++)
    if (i != 5)
      add_host(&q, &seg_prev[i]);
  g_min = 4;
  place(&q, prev, 8, 8);
  world_order(&q, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3");
  assert_int_equal(q.nswaps, 4);
  for (size_t k = 0; k < 4; k++)
    assert_int_equal(q.swaps[k].by, SIZE_MAX);
  g_min = 7;
  place(&q, prev, 8, 8);
  world_order(&q, got, sizeof(got));
  assert_string_equal(got, "a0 a1 a2 a3 b0 b2 b3");
  check_shuffles(&q, prev, 8, 8);
}

/* Seeded random first and second generations: 3 to 5 domains of 1 to 6
 * hosts (1 rank each), segments of 1 to 4, random losses and spares.
 * Checked: ranks form the world, a host outside a whole segment is in
 * it only when the world without it is short of the minimum (runs of
 * one domain in node-rank order are whole segments otherwise), segments
 * that kept all their hosts keep their node ranks, order independence. */
static void test_seg_random(void **state) {
  (void)state;
  uint64_t seed = 11;
  static char names[40][16], doms[6][4] = {"D0", "D1", "D2", "D3", "D4", "D5"};
  for (int round = 0; round < 200; round++) {
    struct host_spec hs[40];
    size_t nh = 0;
    int ndom = 3 + (int)(rng_next(&seed) % 3);
    for (int d = 0; d < ndom; d++) {
      int k = 1 + (int)(rng_next(&seed) % 6);
      for (int i = 0; i < k && nh < 30; i++, nh++) {
        snprintf(names[nh], sizeof(names[nh]), "h%zu", nh);
        hs[nh] = (struct host_spec){names[nh], doms[d], 1,
                                    rng_next(&seed) % 5 == 0 ? 1 : 0};
      }
    }
    g_segment = 1 + (uint32_t)(rng_next(&seed) % 4);
    uint32_t max = 1 + (uint32_t)(rng_next(&seed) % nh);
    g_min = 1 + (uint32_t)(rng_next(&seed) % max);
    struct placed p = {0};
    for (size_t i = 0; i < nh; i++)
      add_host(&p, &hs[i]);
    place(&p, NULL, 0, max);
    check_ranks(&p);
    assert_true(p.nworld <= max);
    /* Whole segments unless the minimum needed more. */
    size_t rem = 0, run = 0;
    const uint8_t *dom = NULL;
    for (int32_t node = 0; node <= (int32_t)p.nworld; node++) {
      const struct rdzv_join_rec *r = NULL;
      for (size_t i = 0; i < p.n; i++)
        if (p.out[i].node_rank == node && node < (int32_t)p.nworld)
          r = &p.recs[i];
      if (r == NULL || r->domain != dom) {
        rem += run % g_segment;
        run = 0;
        dom = r ? r->domain : NULL;
      }
      run++;
    }
    if (rem > 0)
      assert_true(p.nworld - 1 < g_min);
    check_shuffles(&p, NULL, 0, max);
    /* The next generation: the world of this one, some lost. */
    struct rdzv_place_host prev[40];
    struct host_spec ph[40];
    size_t np = 0;
    for (int32_t node = 0; node < (int32_t)p.nworld; node++)
      for (size_t i = 0; i < nh; i++)
        if (of(&p, hs[i].name, 0)->node_rank == node)
          ph[np++] = hs[i];
    prev_of(ph, np, prev);
    struct placed q = {0};
    bool back[40];
    for (size_t i = 0; i < nh; i++) {
      back[i] = rng_next(&seed) % 6 != 0;
      if (back[i])
        add_host(&q, &hs[i]);
    }
    place(&q, prev, np, max);
    check_ranks(&q);
    /* A previous segment whose hosts all came back, with nothing before
     * it changed, keeps its node ranks: checked for the first one. */
    bool first_whole = np >= g_segment && rem == 0;
    for (size_t k = 0; k < g_segment && first_whole; k++)
      for (size_t i = 0; i < nh; i++)
        if (ph[k].name == hs[i].name && !back[i])
          first_whole = false;
    for (size_t k = 0; k < g_segment && first_whole; k++)
      assert_int_equal(of(&q, ph[k].name, 0)->node_rank, (int32_t)k);
    check_shuffles(&q, prev, np, max);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_prev_is_assignment_order),
      cmocka_unit_test(test_spare_takes_lost_place_and_domain),
      cmocka_unit_test(test_size_then_order),
      cmocka_unit_test(test_new_active_before_spare),
      cmocka_unit_test(test_hole_closes_without_spares),
      cmocka_unit_test(test_promoted_spare_stays_and_extras_append),
      cmocka_unit_test(test_random),
      cmocka_unit_test_teardown(test_seg_first_generation, seg_reset),
      cmocka_unit_test_teardown(test_seg_repair_in_place, seg_reset),
      cmocka_unit_test_teardown(test_seg_given_up_whole, seg_reset),
      cmocka_unit_test_teardown(test_seg_random, seg_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
