/* Tree and NCCL block shapes: see topo.h. */
#include "rendezvous/topo.h"

int64_t rdzv_tree_parent(int64_t i, int64_t count, int64_t fanout) {
  if (fanout < 1 || i < 0 || i >= count)
    return -2;
  return i == 0 ? RDZV_TREE_ROOT : (i - 1) / fanout;
}

int64_t rdzv_tree_children(int64_t i, int64_t count, int64_t fanout,
                           int64_t *first) {
  *first = 0;
  if (fanout < 1 || i < 0 || i >= count)
    return 0;
  /* Overflow-safe: i < count and F*i+1 is compared by division. */
  if (i > (count - 2) / fanout || count < 2)
    return 0;
  int64_t f = fanout * i + 1;
  int64_t n = count - f < fanout ? count - f : fanout;
  *first = f;
  return n;
}

int64_t rdzv_tree_depth(int64_t i, int64_t fanout) {
  if (fanout < 1 || i < 0)
    return 0;
  int64_t d = 1;
  while (i > 0) {
    i = (i - 1) / fanout;
    d++;
  }
  return d;
}

int64_t rdzv_nccl_nids(int64_t nranks, int64_t ranks_per_root) {
  if (nranks < 1 || ranks_per_root < 1)
    return 0;
  return (nranks - 1) / ranks_per_root + 1;
}

int64_t rdzv_nccl_block_of(int64_t rank, int64_t nranks, int64_t nids) {
  if (nids < 1 || nids > nranks || rank < 0 || rank >= nranks)
    return -1;
  int64_t q = nranks / nids, r = nranks % nids;
  /* The first r blocks have q + 1 ranks: they cover r * (q + 1) ranks,
   * written r * q + r because q + 1 overflows when nids is 1 and nranks
   * is INT64_MAX (then r is 0). */
  int64_t big = r * q + r;
  if (rank < big)
    return rank / (q + 1);
  return r + (rank - big) / q;
}

int64_t rdzv_nccl_block_first(int64_t b, int64_t nranks, int64_t nids) {
  if (nids < 1 || nids > nranks || b < 0 || b >= nids)
    return -1;
  int64_t q = nranks / nids, r = nranks % nids;
  /* b * (q + 1) for b < r, else r * (q + 1) + (b - r) * q; as NCCL's
   * firstRankFromRoot, with no q + 1 to overflow. */
  return b * q + (b < r ? b : r);
}
