/* Internal to the placement (place.c, place_segments.c): the hosts of a
 * placement as place.c finds them, and the whole-domain pass it hands
 * them to when the job has segments. */
#ifndef RDZV_RENDEZVOUS_PLACE_INT_H
#define RDZV_RENDEZVOUS_PLACE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/place.h"

struct phost {
  size_t first; /* position in the sorted order of its first join */
  size_t count; /* its joins */
  int kind;     /* RDZV_PLACE_*: the least of its joins'; ACTIVE when
                   of prev */
  bool placed;  /* in the world */
  size_t slot;  /* its place: index into prev, or nprev + k appended */
};

bool rdzv__place_bytes_eq(const uint8_t *a, uint32_t an, const uint8_t *b,
                          uint32_t bn);

/* The whole-domain placement (place.h, segment_hosts > 0). idx: the
 * joins in assignment order; h[nh]: the hosts, runs of idx; at[p]: the
 * host of prev place p that came back, or SIZE_MAX. Writes the world's
 * hosts in node-rank order into order[] (room for nh) and sets their
 * placed; fills swaps as rdzv_place. Returns the world's host count, or
 * SIZE_MAX when out of memory. */
size_t rdzv__place_segments(const struct rdzv_place_in *in, const size_t *idx,
                            struct phost *h, size_t nh, const size_t *at,
                            size_t *order, struct rdzv_place_swap *swaps,
                            size_t *nswaps);

#endif /* RDZV_RENDEZVOUS_PLACE_INT_H */
