/* Rank assignment: a pure, deterministic function from the set of joins to
 * ranks. Hosts are ordered by network location label, then host name,
 * both in natural order (digit runs as numbers: a launcher's index in a
 * host name, Slurm's n1..n12 or an Indexed Job's pod-0..pod-11, gives the
 * launcher's own order);
 * ranks are contiguous per host, ordered by the launcher's local rank. The
 * result depends only on the set of joins, never on arrival order. */
#ifndef RDZV_RENDEZVOUS_ASSIGN_H
#define RDZV_RENDEZVOUS_ASSIGN_H

#include <stddef.h>
#include <stdint.h>

/* One rank's join, borrowed from a decoded message. */
struct rdzv_join_rec {
  const uint8_t *host; /* host identity (name), 1..255 bytes */
  uint32_t host_len;
  const uint8_t *location; /* e.g. "pod2/rack7/sw1"; may be empty */
  uint32_t location_len;
  int32_t local_rank;    /* as the launcher numbered it (>= 0) */
  uint64_t claim;        /* identity of the joining process */
  const uint8_t *domain; /* e.g. an NVLink domain's ClusterUUID; may be
                            empty */
  uint32_t domain_len;
};

struct rdzv_assignment {
  int32_t rank;
  int32_t world_size;
  int32_t local_rank; /* position among its host's ranks, 0-based */
  int32_t local_size; /* ranks on its host */
  int32_t node_rank;  /* its host's position in host order */
  int32_t node_count; /* hosts */
};

/* Assigns ranks to n joins (n >= 1). out[i] is recs[i]'s assignment.
 * scratch must hold n entries. Returns 0, or RDZV_EDUPLICATE_CLAIM when
 * two joins claim the same (host, local rank) with different claim ids;
 * then *dup_a and *dup_b are their indices (both joins are named in the
 * caller's error). Joins with equal claim ids are the same process re-sent
 * and must be removed by the caller first. */
int rdzv_assign(const struct rdzv_join_rec *recs, size_t n,
                struct rdzv_assignment *out, size_t *scratch, size_t *dup_a,
                size_t *dup_b);

/* Compares two names in natural order (runs of digits as numbers, the
 * rest bytewise; see assign.c): <0, 0 (equal bytes) or >0. */
int rdzv_natural_cmp(const uint8_t *a, uint32_t an, const uint8_t *b,
                     uint32_t bn);

/* Compares two joins in assignment order (location, host, local rank):
 * <0, 0 (same host and local rank) or >0. */
int rdzv_join_cmp(const struct rdzv_join_rec *a, const struct rdzv_join_rec *b);

/* Sorts idx[0..n) (indices into recs) into assignment order, stably;
 * tmp holds n entries. */
void rdzv_join_sort(const struct rdzv_join_rec *recs, size_t *idx, size_t *tmp,
                    size_t n);

#endif /* RDZV_RENDEZVOUS_ASSIGN_H */
