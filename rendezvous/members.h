/* Who the members of a barrier or gather are, told to the nodes it passes
 * through (keys[1] of RDZV_MSG_BARRIER / RDZV_MSG_GATHER, see wire.h), so
 * that a node which knows which ranks of the generation are in its subtree
 * (a completed join went through it) forwards the subtree's contributions
 * the moment the last of them arrives instead of after a quiet interval.
 * A pure codec: bytes in, struct out; no I/O, no state. Fuzzed
 * (tests/fuzz/wire_fuzz.c).
 *
 * Encoding (little endian), RDZV_MEMBERS_MAX_BYTES at most:
 *   u8  kind       RDZV_MEMBERS_EACH or RDZV_MEMBERS_BLOCKS
 *   u32 nmembers   M, the group's size (1 .. INT32_MAX)
 *   u32 nruns      1 .. RDZV_MEMBERS_MAX_RUNS
 *   nruns x { u32 first, u32 stride (>= 1), u32 len (>= 1) }
 * The runs list the members' ranks in member order: member index i is the
 * i-th rank of first, first + stride, ..., over the runs in turn; their
 * lens add up to M. EACH: member id i of the collective is member index i
 * (a barrier of the group, its check-in). BLOCKS: the collective's count
 * is a number of NCCL blocks B and member id b is block b's first member
 * index, rdzv_nccl_block_first(b, M, B) (the unique-id gather of NCCL's
 * scalable init). A group whose ranks need more runs is not told: nodes
 * then fall back to the quiet interval. */
#ifndef RDZV_RENDEZVOUS_MEMBERS_H
#define RDZV_RENDEZVOUS_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#define RDZV_MEMBERS_EACH 0
#define RDZV_MEMBERS_BLOCKS 1
#define RDZV_MEMBERS_MAX_RUNS 64
#define RDZV_MEMBERS_MAX_BYTES (9 + 12 * RDZV_MEMBERS_MAX_RUNS)

struct rdzv_members_run {
  uint32_t first, stride, len;
};

struct rdzv_members {
  uint8_t kind;
  uint32_t nmembers;
  uint32_t nruns;
  struct rdzv_members_run runs[RDZV_MEMBERS_MAX_RUNS];
};

/* Encodes the group of the n ranks ranks[0..n) in member order (NULL: the
 * whole world, ranks 0 .. n-1) as a collective of kind into out (cap
 * bytes; RDZV_MEMBERS_MAX_BYTES always suffice). Runs are found greedily
 * (a run continues while the step between neighbours stays the same and
 * positive): O(n), O(1) for the world (ranks NULL). Returns the bytes written,
 * -EINVAL (n < 1 or > INT32_MAX, a negative rank, a bad kind), -E2BIG (more
 * than RDZV_MEMBERS_MAX_RUNS runs are needed: tell nodes nothing) or -ENOSPC
 * (cap too small). */
int rdzv_members_encode(const int32_t *ranks, int64_t n, int kind, uint8_t *out,
                        size_t cap);

/* Decodes len bytes at p into *out. Returns 0, or -EINVAL when they are not
 * one encoding as above (truncated, trailing bytes, a bad kind, a zero
 * stride or len, lens not adding up to nmembers, a run past INT32_MAX). */
int rdzv_members_decode(const uint8_t *p, size_t len, struct rdzv_members *out);

/* Member index of rank in m (0 .. nmembers-1), or -1 when it is not a
 * member (the first run that holds it counts). */
int64_t rdzv_members_index(const struct rdzv_members *m, int64_t rank);

/* Whether rank contributes to a collective of m whose member count is
 * count (EACH: its member index is below count; BLOCKS: it is the first
 * member of one of count blocks). */
int rdzv_members_contributes(const struct rdzv_members *m, uint64_t count,
                             int64_t rank);

#endif /* RDZV_RENDEZVOUS_MEMBERS_H */
