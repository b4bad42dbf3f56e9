/* Who is in a round's world and who waits beside it, at the root: the
 * last complete world (kept for the next generation's placement,
 * rendezvous/place.h, and listed by `rdzvctl members`), the spares a
 * complete generation parked, when an open generation with spares
 * completes (its actives at the maximum; the last call; --spare-wait-ms
 * for the previous hosts), spares that go away (their death or leave
 * aborts nothing), and the placement's events in the timeline. Owns
 * r->world, r->parked and the spare_wait timer's callback. May use
 * round.c (completion) and rendezvous/place.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <uthash.h>

#include "rendezvous/place.h"
#include "store/daemon/root/round.h"

const struct world_host *rdzv__round_world_find(const struct round *r,
                                                const struct jmember *m) {
  uint8_t key[512];
  const struct rdzv_join_rec *j = &m->j.rec;
  struct world_host *w = NULL;
  if (r->world_by_key == NULL ||
      j->host_len + 1 + j->location_len > sizeof(key))
    return NULL;
  memcpy(key, j->host, j->host_len);
  key[j->host_len] = 0;
  if (j->location_len)
    memcpy(key + j->host_len + 1, j->location, j->location_len);
  HASH_FIND(hh, r->world_by_key, key, j->host_len + 1 + j->location_len, w);
  return w;
}

uint32_t rdzv__round_world_ranks(const struct round *r) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->nworld_hosts; i++)
    if (!r->world[i].released)
      n += (uint32_t)r->world[i].local_size;
  return n;
}

void rdzv__round_world_release(struct round *r, const struct jmember *m) {
  if (r->state != ROUND_DONE || r->world_gen != r->gen)
    return;
  struct world_host *w = (struct world_host *)rdzv__round_world_find(r, m);
  if (w != NULL)
    w->released = true;
}

void rdzv__round_world_prev(const struct round *r,
                            struct rdzv_place_host *prev) {
  for (uint32_t i = 0; i < r->nworld_hosts; i++) {
    const struct world_host *w = &r->world[i];
    prev[i] = (struct rdzv_place_host){.host = w->host,
                                       .host_len = w->host_len,
                                       .location = w->location,
                                       .location_len = w->location_len,
                                       .domain = w->domain,
                                       .domain_len = w->domain_len,
                                       .local_size = w->local_size};
  }
}

static void world_free(struct round *r) {
  HASH_CLEAR(hh, r->world_by_key);
  for (uint32_t i = 0; i < r->nworld_hosts; i++)
    free(r->world[i].host);
  free(r->world);
  r->world = NULL;
  r->nworld_hosts = 0;
}

void rdzv__round_world_save(struct round *r, struct jmember *const *ms,
                            const struct rdzv_assignment *asg,
                            const size_t *idx) {
  world_free(r);
  uint32_t hosts = 0;
  for (uint32_t k = 0; k < r->n; k++)
    if (asg[idx[k]].local_rank == 0)
      hosts++;
  r->world = calloc(hosts ? hosts : 1, sizeof(*r->world));
  if (r->world == NULL) {
    /* The next generation is then placed as a first one would be. */
    rdzv__log_job(r->s->d, 0, r->s->job_id,
                  "round %s generation %" PRId64 ": cannot keep its world "
                  "(out of memory)",
                  r->name, r->gen);
    return;
  }
  for (uint32_t k = 0; k < r->n; k++) {
    const struct jmember *m = ms[idx[k]];
    const struct rdzv_assignment *a = &asg[idx[k]];
    if (a->local_rank != 0)
      continue;
    const struct rdzv_join_rec *j = &m->j.rec;
    uint32_t kl = j->host_len + 1 + j->location_len;
    uint8_t *b = malloc(kl + j->domain_len + 1);
    if (b == NULL)
      continue;
    struct world_host *w = &r->world[r->nworld_hosts++];
    memcpy(b, j->host, j->host_len);
    b[j->host_len] = 0;
    if (j->location_len)
      memcpy(b + j->host_len + 1, j->location, j->location_len);
    if (j->domain_len)
      memcpy(b + kl, j->domain, j->domain_len);
    *w = (struct world_host){.host = b,
                             .host_len = j->host_len,
                             .location = b + j->host_len + 1,
                             .location_len = j->location_len,
                             .domain = b + kl,
                             .domain_len = j->domain_len,
                             .local_size = a->local_size,
                             .first_rank = a->rank,
                             .spare = m->j.role == RDZV_JOIN_SPARE};
    HASH_ADD_KEYPTR(hh, r->world_by_key, b, kl, w);
  }
  r->world_gen = r->gen;
}

/* The key "rdzv/<round>/g<gen>/<what>" of r's generation, or an empty
 * value. */
static struct rdzv_state_val gen_key(const struct round *r, const char *what) {
  char key[192];
  struct rdzv_state_val v = {NULL, 0, false, NULL};
  int n = snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/%s", r->name, r->gen,
                   what);
  if (rdzv__state_get(r->s->st, (const uint8_t *)key, (uint32_t)n, &v) < 0)
    v.n = 0;
  return v;
}

/* Parses one line of the hosts key (node_rank first_rank local_size host
 * location) into w (bytes copied). Returns 0, or -1 if it does not. */
static int world_line(const uint8_t *p, uint32_t n, uint32_t node,
                      struct world_host *w) {
  char line[600];
  if (n >= sizeof(line))
    return -1;
  memcpy(line, p, n);
  line[n] = 0;
  int nr, first, size, at = 0;
  if (sscanf(line, "%d %d %d %n", &nr, &first, &size, &at) != 3 || at == 0 ||
      nr != (int)node || size < 1)
    return -1;
  const char *host = line + at, *sp = strchr(host, ' ');
  if (sp == NULL || sp == host)
    return -1;
  uint32_t hl = (uint32_t)(sp - host), ll = (uint32_t)strlen(sp + 1);
  uint8_t *b = malloc(hl + 1 + ll + 1);
  if (b == NULL)
    return -1;
  memcpy(b, host, hl);
  b[hl] = 0;
  memcpy(b + hl + 1, sp + 1, ll);
  *w = (struct world_host){.host = b,
                           .host_len = hl,
                           .location = b + hl + 1,
                           .location_len = ll,
                           .domain = b + hl + 1 + ll,
                           .domain_len = 0,
                           .local_size = size,
                           .first_rank = first};
  return 0;
}

/* The domain of node rank node from the domains key's runs, into w (a
 * copy of w's bytes grown to hold it). */
static void world_domain(const struct rdzv_state_val *d, uint32_t node,
                         struct world_host *w) {
  for (uint32_t i = 0; i < d->n;) {
    uint32_t j = i;
    while (j < d->n && d->p[j] != '\n')
      j++;
    char line[400];
    uint32_t n = j - i < sizeof(line) - 1 ? j - i : sizeof(line) - 1;
    memcpy(line, d->p + i, n);
    line[n] = 0;
    i = j + 1;
    int first, hosts, at = 0;
    if (sscanf(line, "%d %d %*d %*d %n", &first, &hosts, &at) != 2 || at == 0 ||
        (int64_t)node < first || (int64_t)node >= first + hosts)
      continue;
    const char *name = line + at;
    size_t nl = strcmp(name, "-") == 0 ? 0 : strlen(name);
    uint8_t *b = malloc(w->host_len + 1 + w->location_len + nl + 1);
    if (b == NULL || nl == 0) {
      free(b);
      return;
    }
    memcpy(b, w->host, w->host_len + 1 + w->location_len);
    memcpy(b + w->host_len + 1 + w->location_len, name, nl);
    free(w->host);
    w->host = b;
    w->location = b + w->host_len + 1;
    w->domain = b + w->host_len + 1 + w->location_len;
    w->domain_len = (uint32_t)nl;
    return;
  }
}

void rdzv__round_world_load(struct round *r) {
  world_free(r);
  struct rdzv_state_val h = gen_key(r, "hosts"), d = gen_key(r, "domains");
  uint32_t lines = 0;
  for (uint32_t i = 0; i < h.n; i++)
    lines += h.p[i] == '\n';
  if (lines == 0)
    return;
  r->world = calloc(lines, sizeof(*r->world));
  if (r->world == NULL)
    return;
  for (uint32_t i = 0; i < h.n && r->nworld_hosts < lines;) {
    uint32_t j = i;
    while (j < h.n && h.p[j] != '\n')
      j++;
    struct world_host *w = &r->world[r->nworld_hosts];
    if (world_line(h.p + i, j - i, r->nworld_hosts, w) < 0) {
      rdzv__log_job(r->s->d, 0, r->s->job_id,
                    "round %s generation %" PRId64 ": its world's hosts do "
                    "not parse (line %u): the next generation is placed "
                    "as a first one",
                    r->name, r->gen, r->nworld_hosts + 1);
      world_free(r);
      return;
    }
    world_domain(&d, r->nworld_hosts, w);
    r->nworld_hosts++;
    i = j + 1;
  }
  for (uint32_t k = 0; k < r->nworld_hosts; k++) {
    struct world_host *w = &r->world[k];
    HASH_ADD_KEYPTR(hh, r->world_by_key, w->host,
                    w->host_len + 1 + w->location_len, w);
  }
  r->world_gen = r->gen;
  rdzv__log_job(r->s->d, 1, r->s->job_id,
                "round %s generation %" PRId64 ": its world of %u hosts "
                "found in the state: the next generation keeps their "
                "places",
                r->name, r->gen, r->nworld_hosts);
}

void rdzv__round_member_drop(struct round *r, struct jmember *m) {
  bool was_host = m->in_host;
  HASH_DEL(r->by_claim, m);
  HASH_DELETE(hh_slot, r->by_slot, m);
  if (was_host)
    HASH_DELETE(hh_host, r->by_host, m);
  r->n--;
  if (m->spare) {
    r->nspare_all--;
    if (!m->gone) {
      r->nspare--;
      if (m->j.role != RDZV_JOIN_SPARE)
        r->nextra--;
    }
  }
  if (m->via != NULL && m->via->nmembers > 0)
    m->via->nmembers--;
  if (was_host) { /* another member of its host stands for it */
    struct jmember *o, *t;
    HASH_ITER (hh, r->by_claim, o, t) {
      if (o->j.rec.host_len == m->j.rec.host_len &&
          memcmp(o->j.rec.host, m->j.rec.host, m->j.rec.host_len) == 0) {
        o->in_host = true;
        HASH_ADD_KEYPTR(hh_host, r->by_host, o->j.rec.host, o->j.rec.host_len,
                        o);
        break;
      }
    }
  }
  free(m);
}

void rdzv__round_park(struct round *r, struct jmember *m) {
  struct jmember *old = NULL, *t;
  HASH_FIND(hh, r->parked, &m->j.rec.claim, sizeof(uint64_t), old);
  if (old == NULL) { /* a restarted spare process in the same slot */
    HASH_ITER (hh, r->parked, old, t)
      if (old->slot_len == m->slot_len &&
          memcmp(old->slot, m->slot, m->slot_len) == 0)
        break;
  }
  if (old != NULL) {
    HASH_DEL(r->parked, old);
    free(old);
  }
  m->via = NULL;
  m->rank = -1;
  if (m->gone) { /* nobody to tell when a place opens */
    free(m);
    return;
  }
  HASH_ADD(hh, r->parked, j.rec.claim, sizeof(uint64_t), m);
}

void rdzv__round_members_free(struct round *r, bool all) {
  struct jmember *m, *t;
  HASH_ITER (hh, r->parked, m, t) {
    HASH_DEL(r->parked, m);
    free(m);
  }
  if (all)
    world_free(r);
}

static void cut63(char *out, const uint8_t *p, uint32_t n) {
  snprintf(out, 64, "%.*s", (int)(n < 63 ? n : 63), (const char *)p);
}

void rdzv__round_tl_membership(struct round *r, struct jmember *const *ms,
                               const struct rdzv_assignment *asg, size_t live,
                               const struct rdzv_place_swap *swaps,
                               size_t nswaps,
                               const struct rdzv_place_host *prev) {
  struct timeline *tl = &r->tl;
  tl->promoted_hosts = tl->parked_hosts = tl->parked_ranks = 0;
  for (size_t i = 0; i < live; i++) {
    if (asg[i].rank < 0) {
      tl->parked_ranks++;
      if (asg[i].local_rank == 0)
        tl->parked_hosts++;
    } else if (ms[i]->spare && asg[i].local_rank == 0) {
      tl->promoted_hosts++;
    }
  }
  tl->nswaps = 0;
  tl->swaps_left_out = 0;
  for (size_t k = 0; k < nswaps; k++) {
    const struct rdzv_place_host *p = &prev[swaps[k].prev];
    struct tl_swap sw = {.node_rank = (int32_t)swaps[k].prev,
                         .first_rank = -1,
                         .released = swaps[k].released};
    cut63(sw.lost, p->host, p->host_len);
    if (swaps[k].by == SIZE_MAX) {
      sw.how = TL_SWAP_CLOSED;
    } else {
      const struct jmember *m = ms[swaps[k].by];
      sw.how = swaps[k].by_spare == RDZV_PLACE_SPARE ? TL_SWAP_SPARE
                                                     : TL_SWAP_ACTIVE;
      cut63(sw.by, m->j.rec.host, m->j.rec.host_len);
      sw.first_rank = asg[swaps[k].by].rank - asg[swaps[k].by].local_rank;
      sw.ranks = asg[swaps[k].by].local_size;
    }
    const char *lost = sw.released ? "rejoined, but its segment lost a "
                                     "host and was given up"
                                   : "did not rejoin";
    if (sw.how == TL_SWAP_CLOSED)
      rdzv__log_event_job(r->s->d, r->s->job_id,
                          "round %s generation %" PRId64 ": host %s (node "
                          "rank %d of generation %" PRId64 ") %s and no "
                          "spare that fits was left: its place closed up",
                          r->name, r->gen, sw.lost, sw.node_rank, r->world_gen,
                          lost);
    else
      rdzv__log_event_job(r->s->d, r->s->job_id,
                          "round %s generation %" PRId64 ": host %s (node "
                          "rank %d of generation %" PRId64 ") %s: %s %s "
                          "took its place (ranks %d-%d)",
                          r->name, r->gen, sw.lost, sw.node_rank, r->world_gen,
                          lost, sw.how == TL_SWAP_SPARE ? "spare" : "new host",
                          sw.by, sw.first_rank, sw.first_rank + sw.ranks - 1);
    if (tl->nswaps < TL_SWAPS)
      tl->swaps[tl->nswaps++] = sw;
    else
      tl->swaps_left_out++;
  }
}

/* ---- when an open generation with spares completes ----------------------- */

static uint32_t actives(const struct round *r) { return r->n - r->nspare_all; }

/* Whether the open generation may complete with its spares: an active
 * member or an extra one (declared spares alone never start a world),
 * and enough ranks. */
static bool spares_may_complete(const struct round *r) {
  uint32_t a = actives(r);
  return (a > 0 || r->nextra > 0) && a + r->nspare >= r->params.min_size;
}

static void on_spare_wait(uv_timer_t *t) {
  struct round *r = t->data;
  if (r->state != ROUND_OPEN || !spares_may_complete(r))
    return;
  rdzv__log_job(r->s->d, 2, r->s->job_id,
                "round %s generation %" PRId64 ": %u of %u ranks active "
                "after --spare-wait-ms %u: spares take the places left",
                r->name, r->gen, actives(r), r->params.max_size,
                r->s->d->cfg.spare_wait_ms);
  /* Short of the minimum when the spares do not fit: the deadline
   * decides then. (The last call, if it passed, deferred to this.) */
  rdzv__round_complete(r);
}

void rdzv__round_progress(struct round *r) {
  if (r->state != ROUND_OPEN)
    return;
  uint32_t a = actives(r);
  if (a >= r->params.max_size) {
    rdzv__round_complete(r);
    return;
  }
  if (a >= r->params.min_size && !uv_is_active((uv_handle_t *)&r->last_call))
    uv_timer_start(&r->last_call, rdzv__round_on_last_call,
                   r->params.last_call_ms, 0);
  if (r->nspare > 0 && spares_may_complete(r) &&
      !uv_is_active((uv_handle_t *)&r->spare_wait)) {
    uint64_t now = rdzv__now_ms(r->s->d), wait = r->s->d->cfg.spare_wait_ms;
    uint64_t gone = now > r->first_active_ms ? now - r->first_active_ms : 0;
    r->spare_wait.data = r;
    uv_timer_start(&r->spare_wait, on_spare_wait, wait > gone ? wait - gone : 0,
                   0);
  }
}

/* ---- spares that go away ----------------------------------------------------- */

static void spare_gone(struct round *r, struct jmember *m) {
  m->gone = true;
  r->nspare--;
  if (m->j.role != RDZV_JOIN_SPARE)
    r->nextra--;
  if (r->nspare == 0 && uv_is_active((uv_handle_t *)&r->spare_wait) &&
      actives(r) >= r->params.min_size) {
    /* No spare left to wait for: the last call (which deferred to the
     * spare wait) decides again. */
    uv_timer_stop(&r->spare_wait);
    uv_timer_start(&r->last_call, rdzv__round_on_last_call, 0, 0);
  }
  rdzv__log_job(r->s->d, 2, r->s->job_id,
                "round %s generation %" PRId64 ": spare host %.*s local rank "
                "%d went away",
                r->name, r->gen, (int)m->j.rec.host_len, m->j.rec.host,
                m->j.rec.local_rank);
}

uint32_t rdzv__round_spares_drop_conn(struct round *r, const struct conn *c) {
  struct jmember *m, *t;
  uint32_t k = 0;
  if (r->state == ROUND_OPEN && r->nspare > 0) {
    HASH_ITER (hh, r->by_claim, m, t)
      if (m->spare && !m->gone && m->c == c) {
        spare_gone(r, m);
        k++;
      }
  }
  HASH_ITER (hh, r->parked, m, t) {
    if (m->c == c) {
      HASH_DEL(r->parked, m);
      free(m);
      k++;
    }
  }
  return k;
}

bool rdzv__round_spares_drop_claims(struct round *r,
                                    const struct rdzv_items *vals) {
  struct rdzv_slice v;
  size_t pos = 0;
  if (vals->n == 0)
    return false;
  while (rdzv_items_next(vals, &pos, &v)) {
    struct jmember *m = NULL;
    if (v.n != 8)
      return false;
    uint64_t claim = rdzv_load_u64le(v.p);
    HASH_FIND(hh, r->by_claim, &claim, sizeof(claim), m);
    if (m != NULL && !(m->spare && r->state == ROUND_OPEN))
      return false;
    if (m == NULL)
      HASH_FIND(hh, r->parked, &claim, sizeof(claim), m);
    if (m == NULL)
      return false;
  }
  pos = 0;
  while (rdzv_items_next(vals, &pos, &v)) {
    struct jmember *m = NULL;
    uint64_t claim = rdzv_load_u64le(v.p);
    HASH_FIND(hh, r->by_claim, &claim, sizeof(claim), m);
    if (m != NULL) {
      if (!m->gone)
        spare_gone(r, m);
      continue;
    }
    HASH_FIND(hh, r->parked, &claim, sizeof(claim), m);
    if (m != NULL) {
      HASH_DEL(r->parked, m);
      free(m);
    }
  }
  return true;
}

/* ---- for operators ---------------------------------------------------------- */

static json_t *bytes_json(const uint8_t *p, uint32_t n) {
  char buf[256];
  uint32_t i = 0;
  for (; i < n && i + 1 < sizeof(buf); i++)
    buf[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
  buf[i] = '\0';
  return json_string(buf);
}

void rdzv__round_members_json(struct round *r, json_t *o) {
  json_t *world = json_array();
  for (uint32_t i = 0; i < r->nworld_hosts && i < ROUND_MEMBERS_LISTED; i++) {
    const struct world_host *w = &r->world[i];
    json_t *e = json_pack("{s:o,s:i,s:i,s:i,s:s}", "host",
                          bytes_json(w->host, w->host_len), "node_rank", (int)i,
                          "first_rank", w->first_rank, "ranks", w->local_size,
                          "role", w->spare ? "spare, promoted" : "active");
    if (e != NULL && w->domain_len > 0)
      json_object_set_new(e, "domain", bytes_json(w->domain, w->domain_len));
    json_array_append_new(world, e);
  }
  json_object_set_new(o, "world", world);
  json_object_set_new(o, "world_generation", json_integer(r->world_gen));
  json_object_set_new(o, "world_hosts", json_integer(r->nworld_hosts));
  /* Parked spares by host (first seen), ranks counted. */
  json_t *parked = json_array();
  uint32_t nparked = 0;
  struct jmember *m, *t;
  HASH_ITER (hh, r->parked, m, t) {
    nparked++;
    size_t i, k = json_array_size(parked);
    json_t *e = NULL;
    for (i = 0; i < k; i++) {
      e = json_array_get(parked, i);
      const char *h = json_string_value(json_object_get(e, "host"));
      json_t *mine = bytes_json(m->j.rec.host, m->j.rec.host_len);
      bool same = h != NULL && strcmp(h, json_string_value(mine)) == 0;
      json_decref(mine);
      if (same)
        break;
    }
    if (i < k) {
      json_object_set_new(
          e, "ranks",
          json_integer(json_integer_value(json_object_get(e, "ranks")) + 1));
      continue;
    }
    if (k >= ROUND_MEMBERS_LISTED)
      continue;
    e = json_pack("{s:o,s:i}", "host",
                  bytes_json(m->j.rec.host, m->j.rec.host_len), "ranks", 1);
    if (e != NULL && m->j.rec.domain_len > 0)
      json_object_set_new(e, "domain",
                          bytes_json(m->j.rec.domain, m->j.rec.domain_len));
    json_array_append_new(parked, e);
  }
  json_object_set_new(o, "parked", parked);
  json_object_set_new(o, "parked_ranks", json_integer(nparked));
  static const char *const how[] = {"spare", "new host", "closed"};
  json_t *swaps = json_array();
  for (uint32_t i = 0; i < r->tl.nswaps; i++) {
    const struct tl_swap *sw = &r->tl.swaps[i];
    json_t *e = json_pack(
        "{s:o,s:i,s:s}", "lost",
        bytes_json((const uint8_t *)sw->lost, (uint32_t)strlen(sw->lost)),
        "node_rank", sw->node_rank, "by", how[sw->how]);
    if (e != NULL && sw->how != TL_SWAP_CLOSED) {
      json_object_set_new(
          e, "host",
          bytes_json((const uint8_t *)sw->by, (uint32_t)strlen(sw->by)));
      json_object_set_new(e, "first_rank", json_integer(sw->first_rank));
      json_object_set_new(e, "ranks", json_integer(sw->ranks));
    }
    if (e != NULL && sw->released)
      json_object_set_new(e, "released", json_true());
    json_array_append_new(swaps, e);
  }
  json_object_set_new(o, "replaced", swaps);
  if (r->tl.swaps_left_out > 0)
    json_object_set_new(o, "replaced_left_out",
                        json_integer(r->tl.swaps_left_out));
  json_object_set_new(o, "spares_promoted", json_integer(r->tl.promoted_hosts));
  json_object_set_new(o, "parked_hosts", json_integer(r->tl.parked_hosts));
  if (r->tl.domains[0] != 0)
    json_object_set_new(o, "domains", json_string(r->tl.domains));
}
