/* comm/groups.c: see groups.h. */
#include "comm/groups.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv__comm_name_check(const char *name) {
  size_t n;

  if (name == NULL)
    return -EINVAL;
  n = strlen(name);
  if (n == 0 || n > RDZV_COMM_NAME_MAX)
    return -EINVAL;
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    if (!ok)
      return -EINVAL;
  }
  return 0;
}

int rdzv__comm_child_name(const char *parent, const char *name, int32_t color,
                          char *out, size_t n) {
  int len;

  if (parent == NULL || out == NULL || rdzv__comm_name_check(name) < 0)
    return -EINVAL;
  if (color < 0)
    len = snprintf(out, n, "%s.%s", parent, name);
  else
    len = snprintf(out, n, "%s.%s.%d", parent, name, (int)color);
  if (len < 0 || (size_t)len >= n || len > RDZV_COMM_NAME_MAX)
    return -ENAMETOOLONG;
  return 0;
}

int64_t rdzv__comm_list_index(const int32_t *ranks, int32_t n, int32_t size,
                              int32_t me) {
  uint8_t *seen;
  int64_t index = -1;

  if (ranks == NULL || n < 1 || size < 1 || n > size)
    return -EINVAL;
  seen = calloc((size_t)size / 8 + 1, 1);
  if (seen == NULL)
    return RDZV_ENOMEM;
  for (int32_t i = 0; i < n; i++) {
    int32_t r = ranks[i];
    if (r < 0 || r >= size || (seen[r / 8] >> (r % 8) & 1)) {
      index = -EINVAL;
      break;
    }
    seen[r / 8] |= (uint8_t)(1u << (r % 8));
    if (r == me)
      index = i;
  }
  free(seen);
  return index;
}

/* A member of a split group while sorting: key, then parent rank. */
struct keyed {
  int32_t key;
  int32_t rank;
};

static int by_key_then_rank(const void *a, const void *b) {
  const struct keyed *x = a, *y = b;

  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

int rdzv__comm_split_members(int32_t size, rdzv_comm_color_fn color_of,
                             void *arg, int32_t me, int32_t **members,
                             int32_t *count, int32_t *index, int32_t *color) {
  int32_t mine, mykey, c, k, n = 0;
  struct keyed *g;
  int rc;

  *members = NULL;
  *count = 0;
  *index = -1;
  rc = color_of(arg, me, &mine, &mykey);
  if (rc < 0)
    return rc;
  *color = mine;
  if (mine < 0)
    return 0;
  g = malloc((size_t)size * sizeof(*g));
  if (g == NULL)
    return RDZV_ENOMEM;
  for (int32_t r = 0; r < size; r++) {
    rc = color_of(arg, r, &c, &k);
    if (rc < 0) {
      free(g);
      return rc;
    }
    if (c == mine) {
      g[n].key = k;
      g[n].rank = r;
      n++;
    }
  }
  qsort(g, (size_t)n, sizeof(*g), by_key_then_rank);
  *members = malloc((size_t)n * sizeof(**members));
  if (*members == NULL) {
    free(g);
    return RDZV_ENOMEM;
  }
  for (int32_t i = 0; i < n; i++) {
    (*members)[i] = g[i].rank;
    if (g[i].rank == me)
      *index = i;
  }
  *count = n;
  free(g);
  return 0;
}

int rdzv__comm_mesh_init(struct rdzv__mesh *m, int32_t ndims,
                         const int32_t *dims, uint32_t group_dims,
                         int32_t size) {
  int64_t product = 1;

  if (m == NULL || dims == NULL || ndims < 1 ||
      ndims > RDZV_COMM_MESH_MAX_DIMS || group_dims >> ndims != 0)
    return -EINVAL;
  for (int32_t i = 0; i < ndims; i++) {
    if (dims[i] < 1)
      return -EINVAL;
    product *= dims[i];
    if (product > size)
      return -EINVAL;
    m->dims[i] = dims[i];
  }
  if (product != size)
    return -EINVAL;
  m->ndims = ndims;
  m->group_dims = group_dims;
  return 0;
}

int rdzv__comm_mesh_color(void *arg, int32_t rank, int32_t *color,
                          int32_t *key) {
  const struct rdzv__mesh *m = arg;
  int32_t coord[RDZV_COMM_MESH_MAX_DIMS];
  int32_t c = 0, k = 0;

  /* Row-major: the last dimension varies fastest. */
  for (int32_t i = m->ndims - 1; i >= 0; i--) {
    coord[i] = rank % m->dims[i];
    rank /= m->dims[i];
  }
  for (int32_t i = 0; i < m->ndims; i++) {
    if (m->group_dims >> i & 1)
      k = k * m->dims[i] + coord[i];
    else
      c = c * m->dims[i] + coord[i];
  }
  *color = c;
  *key = k;
  return 0;
}
