/* comm/groups.h: pure functions behind the communicator handles: names,
 * rank-list checks, split membership and device-mesh colors. No I/O, no
 * NCCL; unit-tested in tests/unit/comm_groups_test.c. Private to comm/. */
#ifndef RDZV_COMM_GROUPS_H
#define RDZV_COMM_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/comm.h"

/* 0 if name is 1 .. RDZV_COMM_NAME_MAX bytes of [A-Za-z0-9_-], else
 * -EINVAL. '.' separates name parts and '/' key parts, so neither may
 * appear in a part. */
int rdzv__comm_name_check(const char *name);

/* Writes "<parent>.<name>" (color < 0) or "<parent>.<name>.<color>" to
 * out[0 .. n). Returns 0, -EINVAL (bad name) or -ENAMETOOLONG (longer than
 * RDZV_COMM_NAME_MAX or than n - 1). */
int rdzv__comm_child_name(const char *parent, const char *name, int32_t color,
                          char *out, size_t n);

/* Checks a rank list against a parent of `size` ranks: n >= 1, every rank
 * in 0 .. size-1, none repeated. Returns the index of `me` in the list,
 * -1 when absent, or -EINVAL / RDZV_ENOMEM. */
int64_t rdzv__comm_list_index(const int32_t *ranks, int32_t n, int32_t size,
                              int32_t me);

/* The group of parent rank `me` in a split of `size` ranks by color_of:
 * *members (malloc'd; NULL when *count is 0) receives the parent ranks of
 * its group ordered by (key, parent rank), *count their number, *index
 * me's position, *color me's color. A negative color of `me`: *count 0,
 * *index -1. Returns 0, color_of's error, or RDZV_ENOMEM. */
int rdzv__comm_split_members(int32_t size, rdzv_comm_color_fn color_of,
                             void *arg, int32_t me, int32_t **members,
                             int32_t *count, int32_t *index, int32_t *color);

/* A device mesh for rdzv_comm_split_mesh; the arg of rdzv__comm_mesh_color. */
struct rdzv__mesh {
  int32_t ndims;
  int32_t dims[RDZV_COMM_MESH_MAX_DIMS];
  uint32_t group_dims;
};

/* Fills *m after checking the arguments against a parent of `size` ranks:
 * 0 or -EINVAL. */
int rdzv__comm_mesh_init(struct rdzv__mesh *m, int32_t ndims,
                         const int32_t *dims, uint32_t group_dims,
                         int32_t size);

/* rdzv_comm_color_fn for a struct rdzv__mesh: color is the row-major index
 * of rank's coordinates outside group_dims, key their index inside. */
int rdzv__comm_mesh_color(void *arg, int32_t rank, int32_t *color,
                          int32_t *key);

#endif /* RDZV_COMM_GROUPS_H */
