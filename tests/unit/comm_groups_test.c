/* comm/groups: names, rank lists, split membership and device meshes.
 * Pure functions, checked table by table and, for meshes, exhaustively
 * over every shape of up to 4 dimensions and 64 ranks and every mask. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/groups.h"

static void test_names(void **state) {
  static const struct {
    const char *name;
    int ok;
  } cases[] = {
      {"tp", 1},   {"data_parallel-2", 1},
      {"A9", 1},   {"", 0},
      {"a.b", 0},  {"a/b", 0},
      {"a b", 0},  {"é", 0},
      {"tp\n", 0},
  };
  char long_name[RDZV_COMM_NAME_MAX + 2];
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    assert_int_equal(rdzv__comm_name_check(cases[i].name) == 0, cases[i].ok);
  assert_int_equal(rdzv__comm_name_check(NULL), -EINVAL);
  memset(long_name, 'x', sizeof(long_name));
  long_name[RDZV_COMM_NAME_MAX] = '\0';
  assert_int_equal(rdzv__comm_name_check(long_name), 0);
  long_name[RDZV_COMM_NAME_MAX] = 'x';
  long_name[RDZV_COMM_NAME_MAX + 1] = '\0';
  assert_int_equal(rdzv__comm_name_check(long_name), -EINVAL);
}

static void test_child_names(void **state) {
  char out[RDZV_COMM_NAME_MAX + 1], parent[RDZV_COMM_NAME_MAX + 1];
  (void)state;
  assert_int_equal(rdzv__comm_child_name("world", "tp", -1, out, sizeof(out)),
                   0);
  assert_string_equal(out, "world.tp");
  assert_int_equal(rdzv__comm_child_name("world", "tp", 3, out, sizeof(out)),
                   0);
  assert_string_equal(out, "world.tp.3");
  assert_int_equal(
      rdzv__comm_child_name("world.dp.1", "pp", 0, out, sizeof(out)), 0);
  assert_string_equal(out, "world.dp.1.pp.0");
  assert_int_equal(rdzv__comm_child_name("world", "a.b", -1, out, sizeof(out)),
                   -EINVAL);
  /* 97 + ".tp" = 100 fits; one more byte does not. */
  memset(parent, 'p', 97);
  parent[97] = '\0';
  assert_int_equal(rdzv__comm_child_name(parent, "tp", -1, out, sizeof(out)),
                   0);
  assert_int_equal(rdzv__comm_child_name(parent, "tpx", -1, out, sizeof(out)),
                   -ENAMETOOLONG);
  assert_int_equal(rdzv__comm_child_name(parent, "tp", 1, out, sizeof(out)),
                   -ENAMETOOLONG);
}

static void test_rank_lists(void **state) {
  static const struct {
    int32_t ranks[6];
    int32_t n, size, me;
    int64_t want;
  } cases[] = {
      {{0, 1, 2, 3}, 4, 4, 2, 2},    {{3, 1}, 2, 4, 1, 1},
      {{3, 1}, 2, 4, 0, -1},         {{5}, 1, 8, 5, 0},
      {{1, 1}, 2, 4, 1, -EINVAL},    {{0, 4}, 2, 4, 0, -EINVAL},
      {{-1, 0}, 2, 4, 0, -EINVAL},   {{0}, 0, 4, 0, -EINVAL},
      {{0, 1, 2}, 3, 2, 0, -EINVAL}, {{7, 6, 5, 4, 3, 2}, 6, 8, 2, 5},
  };
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    assert_int_equal(rdzv__comm_list_index(cases[i].ranks, cases[i].n,
                                           cases[i].size, cases[i].me),
                     cases[i].want);
  assert_int_equal(rdzv__comm_list_index(NULL, 1, 4, 0), -EINVAL);
}

/* Color rank % 3, key -rank (so each group is in descending rank order);
 * ranks 10 and 11 are in no group. */
static int mod3(void *arg, int32_t rank, int32_t *color, int32_t *key) {
  (void)arg;
  *color = rank >= 10 ? -1 : rank % 3;
  *key = -rank;
  return 0;
}

static int fails_at_5(void *arg, int32_t rank, int32_t *color, int32_t *key) {
  (void)arg;
  *color = 0;
  *key = 0;
  return rank == 5 ? -ERANGE : 0;
}

/* Equal keys: parent rank order breaks the tie. */
static int halves(void *arg, int32_t rank, int32_t *color, int32_t *key) {
  (void)arg;
  *color = rank / 4;
  *key = rank % 2;
  return 0;
}

static void test_split_members(void **state) {
  int32_t *m = NULL, n = 0, index = 0, color = 0;
  (void)state;
  assert_int_equal(
      rdzv__comm_split_members(12, mod3, NULL, 4, &m, &n, &index, &color), 0);
  assert_int_equal(n, 3); /* 7, 4, 1 */
  assert_int_equal(color, 1);
  assert_int_equal(m[0], 7);
  assert_int_equal(m[1], 4);
  assert_int_equal(m[2], 1);
  assert_int_equal(index, 1);
  free(m);
  assert_int_equal(
      rdzv__comm_split_members(12, mod3, NULL, 11, &m, &n, &index, &color), 0);
  assert_null(m);
  assert_int_equal(n, 0);
  assert_int_equal(index, -1);
  assert_true(color < 0);
  assert_int_equal(
      rdzv__comm_split_members(8, halves, NULL, 6, &m, &n, &index, &color), 0);
  assert_int_equal(n, 4); /* keys 0,1,0,1 over 4..7: 4, 6, 5, 7 */
  assert_int_equal(m[0], 4);
  assert_int_equal(m[1], 6);
  assert_int_equal(m[2], 5);
  assert_int_equal(m[3], 7);
  assert_int_equal(index, 1);
  free(m);
  assert_int_equal(
      rdzv__comm_split_members(8, fails_at_5, NULL, 0, &m, &n, &index, &color),
      -ERANGE);
  assert_null(m);
}

static void test_mesh_args(void **state) {
  struct rdzv__mesh m;
  int32_t dims[RDZV_COMM_MESH_MAX_DIMS + 1] = {2, 4, 8, 1, 1, 1, 1, 1, 1};
  (void)state;
  assert_int_equal(rdzv__comm_mesh_init(&m, 3, dims, 1u << 2, 64), 0);
  assert_int_equal(rdzv__comm_mesh_init(&m, 3, dims, 1u << 2, 63), -EINVAL);
  assert_int_equal(rdzv__comm_mesh_init(&m, 3, dims, 1u << 3, 64), -EINVAL);
  assert_int_equal(rdzv__comm_mesh_init(&m, 0, dims, 0, 1), -EINVAL);
  assert_int_equal(
      rdzv__comm_mesh_init(&m, RDZV_COMM_MESH_MAX_DIMS + 1, dims, 0, 64),
      -EINVAL);
  dims[1] = 0;
  assert_int_equal(rdzv__comm_mesh_init(&m, 3, dims, 0, 0), -EINVAL);
  dims[1] = -4;
  assert_int_equal(rdzv__comm_mesh_init(&m, 3, dims, 0, 64), -EINVAL);
}

/* Coordinate d of rank in a row-major mesh. */
static int32_t coord(const int32_t *dims, int32_t nd, int32_t rank, int32_t d) {
  for (int32_t i = nd - 1; i > d; i--)
    rank /= dims[i];
  return rank % dims[d];
}

/* Every rank's group: the ranks that agree outside the mask, in rank
 * order, of the size the mask implies, the same for all its members. */
static void check_mesh(const int32_t *dims, int32_t nd, uint32_t mask) {
  struct rdzv__mesh m;
  int32_t size = 1, gsize = 1;

  for (int32_t d = 0; d < nd; d++) {
    size *= dims[d];
    if (mask >> d & 1)
      gsize *= dims[d];
  }
  assert_int_equal(rdzv__comm_mesh_init(&m, nd, dims, mask, size), 0);
  for (int32_t me = 0; me < size; me++) {
    int32_t *g = NULL, n = 0, index = -1, color = -1, want = 0;
    assert_int_equal(rdzv__comm_split_members(size, rdzv__comm_mesh_color, &m,
                                              me, &g, &n, &index, &color),
                     0);
    assert_int_equal(n, gsize);
    assert_int_equal(g[index], me);
    for (int32_t r = 0; r < size; r++) {
      int same = 1;
      for (int32_t d = 0; d < nd; d++)
        if (!(mask >> d & 1) && coord(dims, nd, r, d) != coord(dims, nd, me, d))
          same = 0;
      if (same) {
        assert_true(want < n);
        assert_int_equal(g[want], r); /* ascending parent rank */
        want++;
      }
    }
    assert_int_equal(want, n);
    free(g);
  }
}

static void test_mesh_exhaustive(void **state) {
  int32_t dims[4];
  int shapes = 0;
  (void)state;
  for (int32_t nd = 1; nd <= 4; nd++) {
    int32_t total = 1;
    for (int32_t d = 0; d < nd; d++)
      total *= 4;
    for (int32_t code = 0; code < total; code++) {
      int32_t size = 1, x = code;
      for (int32_t d = 0; d < nd; d++) {
        dims[d] = x % 4 + 1;
        x /= 4;
        size *= dims[d];
      }
      if (size > 64)
        continue;
      for (uint32_t mask = 0; mask < 1u << nd; mask++)
        check_mesh(dims, nd, mask);
      shapes++;
    }
  }
  assert_true(shapes > 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),      cmocka_unit_test(test_child_names),
      cmocka_unit_test(test_rank_lists), cmocka_unit_test(test_split_members),
      cmocka_unit_test(test_mesh_args),  cmocka_unit_test(test_mesh_exhaustive),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
