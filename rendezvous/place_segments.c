/* Whole-domain placement: the world made of segments, S hosts of one
 * domain each (place.h states the rules; place_int.h the entry). Owns
 * nothing past the call; calls only place.c's helpers. */
#include <stdlib.h>
#include <string.h>

#include "rendezvous/assign.h"
#include "rendezvous/place_int.h"

/* A previous segment: prev places p0 .. p0 + len - 1, one domain. */
enum punit_state {
  PUNIT_STANDING, /* every host came back, or was replaced in place */
  PUNIT_HOLE      /* given up: filled by a whole segment, or closed */
};

struct punit {
  size_t p0, len;
  enum punit_state state;
  size_t fill; /* the segment that took a hole's place, or SIZE_MAX */
};

/* A segment formed from the hosts left: members[start .. start + len). */
struct cand {
  size_t start, len;
  int kind;  /* the least active of its hosts' RDZV_PLACE_* */
  bool full; /* S hosts of one domain (else one host, placed only for the
                minimum) */
  bool used;
  size_t ranks;
};

struct ctx {
  const struct rdzv_place_in *in;
  const size_t *idx;
  struct phost *h;
  size_t nh, used; /* ranks placed so far */
};

static const struct rdzv_join_rec *rec_of(const struct ctx *x, size_t k) {
  return &x->in->recs[x->idx[x->h[k].first]];
}

static bool same_domain(const uint8_t *a, uint32_t an, const uint8_t *b,
                        uint32_t bn) {
  return an > 0 && rdzv__place_bytes_eq(a, an, b, bn);
}

/* The loose host of prev place p's domain to put there: the most active,
 * of p's size first; SIZE_MAX if none fits in max_size. */
static size_t repair_pick(struct ctx *x, const struct rdzv_place_host *p) {
  size_t best = SIZE_MAX;
  for (int pass = RDZV_PLACE_ACTIVE; pass <= RDZV_PLACE_SPARE; pass++) {
    for (size_t k = 0; k < x->nh; k++) {
      const struct rdzv_join_rec *r = rec_of(x, k);
      if (x->h[k].placed || x->h[k].kind != pass ||
          !same_domain(r->domain, r->domain_len, p->domain, p->domain_len) ||
          x->used + x->h[k].count > x->in->max_size)
        continue;
      if ((int32_t)x->h[k].count == p->local_size)
        return k;
      if (best == SIZE_MAX)
        best = k;
    }
    if (best != SIZE_MAX)
      return best;
  }
  return SIZE_MAX;
}

/* Sort key of a loose host for forming segments: by domain in natural
 * order (hosts without one last), then kind, then assignment order. */
struct loose {
  const uint8_t *dom;
  uint32_t dom_len;
  int kind;
  size_t k;
};

static int loose_cmp(const void *pa, const void *pb) {
  const struct loose *a = pa, *b = pb;
  if ((a->dom_len == 0) != (b->dom_len == 0))
    return a->dom_len == 0 ? 1 : -1;
  int c = rdzv_natural_cmp(a->dom, a->dom_len, b->dom, b->dom_len);
  if (c == 0 && a->kind != b->kind)
    c = a->kind < b->kind ? -1 : 1;
  if (c == 0 && a->k != b->k)
    c = a->k < b->k ? -1 : 1;
  return c;
}

/* Forms the segments of the hosts not placed: writes members (host
 * indices) and cands; returns their count. */
static size_t form(struct ctx *x, struct loose *l, size_t *members,
                   struct cand *cands) {
  size_t nl = 0, nc = 0, S = x->in->segment_hosts;
  for (size_t k = 0; k < x->nh; k++) {
    if (x->h[k].placed)
      continue;
    const struct rdzv_join_rec *r = rec_of(x, k);
    l[nl++] = (struct loose){r->domain, r->domain_len, x->h[k].kind, k};
  }
  qsort(l, nl, sizeof(*l), loose_cmp);
  for (size_t i = 0; i < nl; i++)
    members[i] = l[i].k;
  for (size_t i = 0; i < nl;) {
    size_t j = i + 1;
    while (j < nl && l[i].dom_len > 0 &&
           rdzv__place_bytes_eq(l[i].dom, l[i].dom_len, l[j].dom, l[j].dom_len))
      j++;
    /* [i, j): one domain (or one host without a domain) */
    size_t whole = l[i].dom_len > 0 ? (j - i) / S * S : (S == 1 ? 1 : 0);
    for (size_t a = i; a < j;) {
      size_t len = a < i + whole ? S : 1;
      struct cand *c = &cands[nc++];
      *c = (struct cand){.start = a, .len = len, .full = a < i + whole};
      for (size_t b = a; b < a + len; b++) {
        if (l[b].kind > c->kind)
          c->kind = l[b].kind;
        c->ranks += x->h[l[b].k].count;
      }
      a += len;
    }
    i = j;
  }
  return nc;
}

/* The whole segment to fill hole u: of its domain and size first. */
static size_t hole_pick(struct ctx *x, const struct punit *u,
                        const size_t *members, struct cand *cands, size_t nc) {
  const struct rdzv_place_host *p = &x->in->prev[u->p0];
  size_t ranks = 0;
  for (size_t q = u->p0; q < u->p0 + u->len; q++)
    ranks +=
        (size_t)(x->in->prev[q].local_size > 0 ? x->in->prev[q].local_size : 0);
  for (int pass = RDZV_PLACE_ACTIVE; pass <= RDZV_PLACE_SPARE; pass++) {
    size_t best = SIZE_MAX;
    int best_fit = -1;
    for (size_t c = 0; c < nc; c++) {
      if (!cands[c].full || cands[c].used || cands[c].kind != pass ||
          x->used + cands[c].ranks > x->in->max_size)
        continue;
      const struct rdzv_join_rec *r = rec_of(x, members[cands[c].start]);
      int f = (same_domain(r->domain, r->domain_len, p->domain, p->domain_len)
                   ? 2
                   : 0) +
              (cands[c].ranks == ranks ? 1 : 0);
      if (f > best_fit) {
        best_fit = f;
        best = c;
      }
    }
    if (best != SIZE_MAX)
      return best;
  }
  return SIZE_MAX;
}

static void take(struct ctx *x, struct cand *c, const size_t *members,
                 size_t *order, size_t *nw) {
  c->used = true;
  x->used += c->ranks;
  for (size_t b = c->start; b < c->start + c->len; b++) {
    x->h[members[b]].placed = true;
    order[(*nw)++] = members[b];
  }
}

size_t rdzv__place_segments(const struct rdzv_place_in *in, const size_t *idx,
                            struct phost *h, size_t nh, const size_t *at,
                            size_t *order, struct rdzv_place_swap *swaps,
                            size_t *nswaps) {
  size_t np = in->prev ? in->nprev : 0, S = in->segment_hosts, nw = 0;
  struct ctx x = {in, idx, h, nh, 0};
  struct punit *units = calloc(np ? np : 1, sizeof(*units));
  size_t *holder = malloc((np ? np : 1) * sizeof(*holder));
  bool *released = calloc(np ? np : 1, sizeof(*released));
  struct loose *l = malloc((nh ? nh : 1) * sizeof(*l));
  size_t *members = malloc((nh ? nh : 1) * sizeof(*members));
  struct cand *cands = calloc(nh ? nh : 1, sizeof(*cands));
  size_t nu = 0, nc = 0;
  if (!units || !holder || !released || !l || !members || !cands) {
    nw = SIZE_MAX;
    goto out;
  }
  /* The previous segments: runs of S places of one domain. */
  for (size_t p = 0; p < np; p++) {
    struct punit *u = nu > 0 ? &units[nu - 1] : NULL;
    if (u != NULL && u->len < S &&
        same_domain(in->prev[u->p0].domain, in->prev[u->p0].domain_len,
                    in->prev[p].domain, in->prev[p].domain_len)) {
      u->len++;
    } else {
      units[nu++] = (struct punit){.p0 = p, .len = 1, .fill = SIZE_MAX};
    }
  }
  for (size_t k = 0; k < nh; k++)
    h[k].placed = false;
  for (size_t p = 0; p < np; p++) {
    holder[p] = at[p];
    if (at[p] != SIZE_MAX) {
      h[at[p]].placed = true;
      x.used += h[at[p]].count;
    }
  }
  /* Repairs in place, else the segment is given up. */
  for (size_t i = 0; i < nu; i++) {
    struct punit *u = &units[i];
    bool whole = true;
    for (size_t p = u->p0; p < u->p0 + u->len && whole; p++) {
      if (holder[p] != SIZE_MAX)
        continue;
      size_t k = repair_pick(&x, &in->prev[p]);
      if (k == SIZE_MAX) {
        whole = false;
        break;
      }
      holder[p] = k;
      h[k].placed = true;
      x.used += h[k].count;
    }
    if (whole)
      continue;
    u->state = PUNIT_HOLE;
    for (size_t p = u->p0; p < u->p0 + u->len; p++) {
      if (holder[p] == SIZE_MAX)
        continue;
      h[holder[p]].placed = false;
      x.used -= h[holder[p]].count;
      released[p] = at[p] != SIZE_MAX;
      holder[p] = SIZE_MAX;
    }
  }
  nc = form(&x, l, members, cands);
  /* Holes, in node-rank order, and the world's order with them. */
  for (size_t i = 0; i < nu; i++) {
    struct punit *u = &units[i];
    if (u->state == PUNIT_HOLE) {
      u->fill = hole_pick(&x, u, members, cands, nc);
      size_t first = nw;
      if (u->fill != SIZE_MAX)
        take(&x, &cands[u->fill], members, order, &nw);
      for (size_t p = u->p0; p < u->p0 + u->len; p++) {
        if (at[p] != SIZE_MAX && !released[p])
          continue;
        size_t pos = first + (p - u->p0);
        size_t by = u->fill != SIZE_MAX && pos < nw ? order[pos] : SIZE_MAX;
        swaps[(*nswaps)++] = (struct rdzv_place_swap){
            .prev = p,
            .by = by == SIZE_MAX ? SIZE_MAX : idx[h[by].first],
            .by_spare = by == SIZE_MAX ? 0 : h[by].kind,
            .released = released[p]};
      }
      continue;
    }
    for (size_t p = u->p0; p < u->p0 + u->len; p++) {
      order[nw++] = holder[p];
      if (at[p] == SIZE_MAX) /* repaired in place */
        swaps[(*nswaps)++] =
            (struct rdzv_place_swap){.prev = p,
                                     .by = idx[h[holder[p]].first],
                                     .by_spare = h[holder[p]].kind};
    }
  }
  /* Whole segments left, then single hosts while the minimum needs them. */
  for (int pass = RDZV_PLACE_ACTIVE; pass <= RDZV_PLACE_SPARE; pass++)
    for (size_t c = 0; c < nc; c++)
      if (cands[c].full && !cands[c].used && cands[c].kind == pass &&
          x.used + cands[c].ranks <= in->max_size)
        take(&x, &cands[c], members, order, &nw);
  for (int pass = RDZV_PLACE_ACTIVE; pass <= RDZV_PLACE_SPARE; pass++)
    for (size_t c = 0; c < nc && x.used < in->min_size; c++)
      if (!cands[c].full && !cands[c].used && cands[c].kind == pass &&
          x.used + cands[c].ranks <= in->max_size)
        take(&x, &cands[c], members, order, &nw);
out:
  free(units);
  free(holder);
  free(released);
  free(l);
  free(members);
  free(cands);
  return nw;
}
