/* Placement of a generation's world: see place.h. */
#include "rendezvous/place.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "rendezvous/place_int.h"

bool rdzv__place_bytes_eq(const uint8_t *a, uint32_t an, const uint8_t *b,
                          uint32_t bn) {
  return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

#define bytes_eq rdzv__place_bytes_eq

/* How well host h (first join r) fits the place of prev host p: 3 same
 * domain and size, 2 same domain, 1 same size, 0 neither. */
static int fit(const struct rdzv_join_rec *r, size_t count,
               const struct rdzv_place_host *p) {
  bool dom = p->domain_len > 0 &&
             bytes_eq(r->domain, r->domain_len, p->domain, p->domain_len);
  bool size = (int32_t)count == p->local_size;
  return (dom ? 2 : 0) + (size ? 1 : 0);
}

int rdzv_place(const struct rdzv_place_in *in, struct rdzv_assignment *out,
               struct rdzv_place_swap *swaps, size_t *nswaps, size_t *nworld,
               size_t *dup_a, size_t *dup_b) {
  size_t n = in->n, np = in->prev ? in->nprev : 0;
  size_t *idx = malloc(n * sizeof(*idx)), *tmp = malloc(n * sizeof(*tmp));
  struct phost *h = calloc(n, sizeof(*h));
  size_t *pidx = malloc((np ? np : 1) * sizeof(*pidx));
  size_t *ptmp = malloc((np ? np : 1) * sizeof(*ptmp));
  size_t *at = malloc((np ? np : 1) * sizeof(*at)); /* prev place -> host */
  size_t *order = malloc(n * sizeof(*order));       /* world hosts, in order */
  struct rdzv_join_rec *prec = calloc(np ? np : 1, sizeof(*prec));
  int rc = RDZV_ENOMEM;
  *nswaps = 0;
  *nworld = 0;
  if (!idx || !tmp || !h || !pidx || !ptmp || !at || !order || !prec)
    goto out;
  for (size_t i = 0; i < n; i++)
    idx[i] = i;
  rdzv_join_sort(in->recs, idx, tmp, n);
  rc = 0;
  for (size_t i = 1; i < n; i++) {
    if (rdzv_join_cmp(&in->recs[idx[i - 1]], &in->recs[idx[i]]) == 0) {
      *dup_a = idx[i - 1];
      *dup_b = idx[i];
      rc = RDZV_EDUPLICATE_CLAIM;
      goto out;
    }
  }
  /* Hosts: runs of one (location, host) in sorted order. */
  size_t nh = 0;
  for (size_t i = 0; i < n; i++) {
    const struct rdzv_join_rec *r = &in->recs[idx[i]];
    if (i == 0 ||
        !bytes_eq(r->host, r->host_len, in->recs[idx[i - 1]].host,
                  in->recs[idx[i - 1]].host_len) ||
        !bytes_eq(r->location, r->location_len, in->recs[idx[i - 1]].location,
                  in->recs[idx[i - 1]].location_len)) {
      h[nh].first = i;
      h[nh].kind = RDZV_PLACE_SPARE;
      nh++;
    }
    h[nh - 1].count++;
    int kind = in->spare != NULL ? in->spare[idx[i]] : RDZV_PLACE_ACTIVE;
    if (kind < h[nh - 1].kind)
      h[nh - 1].kind = kind;
  }
  /* The previous world's hosts, matched by a merge walk in the same
   * order (both sorted by location, then host). */
  for (size_t p = 0; p < np; p++) {
    prec[p] = (struct rdzv_join_rec){.host = in->prev[p].host,
                                     .host_len = in->prev[p].host_len,
                                     .location = in->prev[p].location,
                                     .location_len = in->prev[p].location_len};
    pidx[p] = p;
    at[p] = SIZE_MAX;
  }
  rdzv_join_sort(prec, pidx, ptmp, np);
  for (size_t p = 0, k = 0; p < np && k < nh;) {
    /* Compared by location and host first: the local rank (0 in prec)
     * only decides between the same host, which is matched first. */
    int c = rdzv_join_cmp(&prec[pidx[p]], &in->recs[idx[h[k].first]]);
    const struct rdzv_join_rec *r = &in->recs[idx[h[k].first]];
    bool same = bytes_eq(prec[pidx[p]].host, prec[pidx[p]].host_len, r->host,
                         r->host_len) &&
                bytes_eq(prec[pidx[p]].location, prec[pidx[p]].location_len,
                         r->location, r->location_len);
    if (same) {
      if (at[pidx[p]] == SIZE_MAX) { /* a host listed twice keeps one */
        at[pidx[p]] = k;
        h[k].placed = true;
        h[k].kind = RDZV_PLACE_ACTIVE;
        h[k].slot = pidx[p];
      }
      p++;
      k++;
    } else if (c < 0) {
      p++;
    } else {
      k++;
    }
  }
  size_t nw = 0;
  if (in->segment_hosts > 0) {
    nw = rdzv__place_segments(in, idx, h, nh, at, order, swaps, nswaps);
    if (nw == SIZE_MAX) {
      rc = RDZV_ENOMEM;
      goto out;
    }
    goto ranks;
  }
  size_t used = 0;
  for (size_t k = 0; k < nh; k++)
    if (h[k].kind == RDZV_PLACE_ACTIVE)
      used += h[k].count;
  /* The holes, in node-rank order: new active hosts first, then extra
   * ones, then spares, those two only within max_size. */
  for (size_t p = 0; p < np; p++) {
    if (at[p] != SIZE_MAX)
      continue;
    size_t best = SIZE_MAX;
    int best_fit = -1;
    for (int pass = RDZV_PLACE_ACTIVE;
         pass <= RDZV_PLACE_SPARE && best == SIZE_MAX; pass++) {
      for (size_t k = 0; k < nh; k++) {
        if (h[k].placed || h[k].kind != pass)
          continue;
        if (pass != RDZV_PLACE_ACTIVE && used + h[k].count > in->max_size)
          continue;
        int f = fit(&in->recs[idx[h[k].first]], h[k].count, &in->prev[p]);
        if (f > best_fit) {
          best_fit = f;
          best = k;
        }
      }
    }
    swaps[*nswaps].prev = p;
    swaps[*nswaps].by = best == SIZE_MAX ? SIZE_MAX : idx[h[best].first];
    swaps[*nswaps].by_spare = best != SIZE_MAX ? h[best].kind : 0;
    swaps[*nswaps].released = false;
    (*nswaps)++;
    if (best == SIZE_MAX)
      continue;
    if (h[best].kind != RDZV_PLACE_ACTIVE)
      used += h[best].count;
    h[best].placed = true;
    h[best].slot = p;
    at[p] = best;
  }
  /* The world in order: the previous places still held, then active
   * hosts not placed, then spares while they fit. */
  for (size_t p = 0; p < np; p++)
    if (at[p] != SIZE_MAX)
      order[nw++] = at[p];
  for (size_t k = 0; k < nh; k++) {
    if (!h[k].placed && h[k].kind == RDZV_PLACE_ACTIVE) {
      h[k].placed = true;
      order[nw++] = k;
    }
  }
  for (int kind = RDZV_PLACE_EXTRA; kind <= RDZV_PLACE_SPARE; kind++) {
    for (size_t k = 0; k < nh; k++) {
      if (!h[k].placed && h[k].kind == kind &&
          used + h[k].count <= in->max_size) {
        h[k].placed = true;
        used += h[k].count;
        order[nw++] = k;
      }
    }
  }
ranks:;
  int32_t rank = 0;
  for (size_t w = 0; w < nw; w++) {
    const struct phost *ph = &h[order[w]];
    for (size_t j = 0; j < ph->count; j++) {
      struct rdzv_assignment *a = &out[idx[ph->first + j]];
      a->rank = rank++;
      a->local_rank = (int32_t)j;
      a->local_size = (int32_t)ph->count;
      a->node_rank = (int32_t)w;
    }
  }
  for (size_t k = 0; k < nh; k++) {
    for (size_t j = 0; j < h[k].count; j++) {
      struct rdzv_assignment *a = &out[idx[h[k].first + j]];
      if (!h[k].placed) {
        a->rank = -1;
        a->local_rank = (int32_t)j;
        a->local_size = (int32_t)h[k].count;
        a->node_rank = -1;
      }
      a->world_size = rank;
      a->node_count = (int32_t)nw;
    }
  }
  *nworld = (size_t)rank;
out:
  free(idx);
  free(tmp);
  free(h);
  free(pidx);
  free(ptmp);
  free(at);
  free(order);
  free(prec);
  return rc;
}
