/* Pure functions of shape: the tree of nodes over a job's hosts, and NCCL's
 * scalable-init blocks. No I/O, no state; tested exhaustively. */
#ifndef RDZV_RENDEZVOUS_TOPO_H
#define RDZV_RENDEZVOUS_TOPO_H

#include <stdint.h>

#define RDZV_TREE_ROOT (-1)

/* The tree over H hosts with fan-out F (F >= 1), as in Flux's broker tree:
 * host 0 hangs off the root, host i > 0 off host (i - 1) / F. Returns the
 * parent host index of host i (0 <= i < count), RDZV_TREE_ROOT for host 0,
 * or -2 for arguments out of range. */
int64_t rdzv_tree_parent(int64_t i, int64_t count, int64_t fanout);

/* Children of host i: the hosts F*i+1 .. F*i+F that exist. Sets *first
 * and returns how many (0 for a leaf or bad arguments). */
int64_t rdzv_tree_children(int64_t i, int64_t count, int64_t fanout,
                           int64_t *first);

/* Number of hops from host i up to the root (host 0: 1). 0 for bad
 * arguments. */
int64_t rdzv_tree_depth(int64_t i, int64_t fanout);

/* NCCL scalable init (ncclCommInitRankScalable, NCCL >= 2.23): N ranks
 * split into nids contiguous blocks; with q = N / nids and r = N % nids the
 * first r blocks hold q + 1 ranks and the rest q (NCCL docs, "Creating a
 * communicator with options", and src/init.cc). */

/* Number of ids for nranks when each root serves at most ranks_per_root
 * ranks: ceil(nranks / ranks_per_root), at least 1 (PyTorch's
 * TORCH_NCCL_RANKS_PER_ROOT rule, default 128). 0 for bad arguments. */
int64_t rdzv_nccl_nids(int64_t nranks, int64_t ranks_per_root);

/* Block (0 .. nids-1) that rank belongs to; -1 for bad arguments. */
int64_t rdzv_nccl_block_of(int64_t rank, int64_t nranks, int64_t nids);

/* First rank of block b: the rank that creates that block's unique id;
 * -1 for bad arguments. */
int64_t rdzv_nccl_block_first(int64_t b, int64_t nranks, int64_t nids);

#endif /* RDZV_RENDEZVOUS_TOPO_H */
