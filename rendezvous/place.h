/* Placement: which joins make a generation's world, and in what host
 * order, when the round has a previous world or spares. The hosts of the
 * previous generation's world keep their node ranks (and so, when every
 * host before them kept its size, their rank ranges); the place of a host
 * that did not come back goes to a host that is not in the previous world:
 * new active hosts first, then spares, each time the one that shares the
 * absent host's domain and local size if any, else its domain, else its
 * size, else the first in assignment order (rendezvous/assign.h); a place
 * nobody fills closes up (the hosts after it move down). Active hosts not
 * placed in a hole follow in assignment order, then extra hosts (active
 * ones the root held back past the maximum), then spares, while the world
 * stays within max_size ranks; the others are parked. Extra hosts come
 * before spares for a hole too. A host of the previous world counts as
 * active whatever it joined as (it had its place).
 *
 * Whole domains (segment_hosts S > 0): the world is made of segments, S
 * hosts of one domain each (a host without a domain is a segment of its
 * own when S is 1, and never part of a whole one otherwise), so that node
 * ranks fill whole domains:
 * - a previous segment (S consecutive hosts of one domain in the previous
 *   world, in node-rank order) keeps its node ranks while all its hosts
 *   came back; a segment that lost hosts is first repaired in place by
 *   hosts of its own domain outside the previous world (new active hosts,
 *   then extra ones, then spares), its other hosts keeping theirs;
 * - a segment that cannot be repaired is given up whole: its hosts that
 *   came back lose their places (a swap with released set) and its place
 *   goes to a whole segment formed from the hosts left (those of one
 *   domain, active before extra before spare, in assignment order), of
 *   its domain first, then of its size, in the same kinds' order, within
 *   max_size; with none the place closes up;
 * - whole segments left follow, active ones, then extra, then spare ones,
 *   domain after domain in natural order of their names (assign.h),
 *   within max_size;
 * - hosts that make no whole segment (a domain's remainder) are placed
 *   only while the world has fewer than min_size ranks (the minimum needs
 *   them), within max_size; the others are parked (rank -1), active ones
 *   included.
 * Pure and deterministic: the result depends only on the inputs, never
 * on arrival order. */
#ifndef RDZV_RENDEZVOUS_PLACE_H
#define RDZV_RENDEZVOUS_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/assign.h"

/* A host of the previous generation's world, given in node-rank order.
 * Borrowed bytes. */
struct rdzv_place_host {
  const uint8_t *host;
  uint32_t host_len;
  const uint8_t *location;
  uint32_t location_len;
  const uint8_t *domain;
  uint32_t domain_len;
  int32_t local_size;
};

/* What a join is to the placement (a host is what its most active join
 * is). */
#define RDZV_PLACE_ACTIVE 0 /* in the world */
#define RDZV_PLACE_EXTRA 1  /* an active host held back (past the maximum) */
#define RDZV_PLACE_SPARE 2  /* joined as a spare */

struct rdzv_place_in {
  const struct rdzv_join_rec *recs; /* every live join, n >= 1 */
  size_t n;
  const uint8_t *spare;               /* n of RDZV_PLACE_* (NULL: all active) */
  const struct rdzv_place_host *prev; /* the previous world (may be NULL) */
  size_t nprev;
  uint32_t max_size;      /* ranks in the world at most; active hosts are all
                             in it even past this (the caller parks extras
                             before) unless segment_hosts is set */
  uint32_t min_size;      /* with segment_hosts: partial segments are used
                             only while the world has fewer ranks */
  uint32_t segment_hosts; /* 0: hosts are placed one by one (no whole
                             domains); else S as above */
};

/* What happened to a previous host's place (one per prev entry whose host
 * is not among the joins, or was released from its segment). */
struct rdzv_place_swap {
  size_t prev;   /* index into in->prev */
  size_t by;     /* index into in->recs of the first join of the host that
                    took the place, or SIZE_MAX: nobody, the place closed */
  int by_spare;  /* that host's RDZV_PLACE_* (0: an active one) */
  bool released; /* the previous host came back but lost its place: its
                    segment lost another host and was given up */
};

/* Places in->recs. out[i] is recs[i]'s assignment, rank -1 for a parked
 * join (world_size and node_count say the world's size then too).
 * swaps (room for nprev) receives the replaced places, *nswaps their
 * count; *nworld the ranks in the world. Returns 0, RDZV_ENOMEM, or
 * RDZV_EDUPLICATE_CLAIM as rdzv_assign (two joins of one host and local
 * rank: *dup_a, *dup_b). */
int rdzv_place(const struct rdzv_place_in *in, struct rdzv_assignment *out,
               struct rdzv_place_swap *swaps, size_t *nswaps, size_t *nworld,
               size_t *dup_a, size_t *dup_b);

#endif /* RDZV_RENDEZVOUS_PLACE_H */
