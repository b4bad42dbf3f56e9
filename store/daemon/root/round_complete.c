/* A rendezvous generation's completion at the root: its world placed
 * (rendezvous/place.c, with the last world and the spares), the spares
 * left out parked, ranks assigned, the host table and per-host topology
 * published as write-once keys of that generation (older generations'
 * keys removed), its assignments recorded in the job's state, and every
 * requester answered. May use round.c (records, requesters),
 * round_members.c (the world, parking) and rendezvous/'s pure functions. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/assign.h"
#include "rendezvous/join_wire.h"
#include "rendezvous/place.h"
#include "store/daemon/root/round.h"

/* RDZV_STATE_REC_ASSIGN of a round: the generation's assignments, one
 * JOIN assignment encoding (rendezvous/join_wire.h, the claim and the
 * assignment) a rank, in rank order. A re-sent join is answered from it
 * (root_join.c). Rank k's member is ms[idx[k]], its assignment
 * asg[idx[k]]. */
static void assignments_save(struct round *r, struct jmember *const *ms,
                             const struct rdzv_assignment *asg,
                             const size_t *idx) {
  struct rdzv_buf b = {0};
  uint8_t item[RDZV_JOIN_ASSIGN_BYTES];
  int rc = 0;
  for (uint32_t k = 0; rc == 0 && k < r->n; k++) {
    rdzv_join_assign_encode(ms[idx[k]]->j.rec.claim, &asg[idx[k]], item);
    rc = rdzv_buf_append(&b, item, sizeof(item));
  }
  if (rc == 0)
    rc = rdzv__state_rec_put(
        r->s->st, RDZV_STATE_REC_ASSIGN, (const uint8_t *)r->name,
        (uint32_t)strlen(r->name), b.data, (uint32_t)b.len);
  if (rc < 0)
    rdzv__log(r->s->d, 0,
              "round %s generation %" PRId64 ": cannot record its ranks",
              r->name, r->gen);
  rdzv_buf_free(&b);
}

/* A key the root set: its waiters go once copies of its absence are
 * gone below. */
struct put_notify {
  struct root_job *s;
  uint32_t klen;
  uint8_t key[];
};

static void put_notified(void *arg) {
  struct put_notify *p = arg;
  rdzv__waits_notify(&p->s->waits, p->key, p->klen);
  free(p);
}

int rdzv__root_put(struct root_job *s, const char *key, const uint8_t *v,
                   uint32_t vlen) {
  return rdzv__root_set(s, key, v, vlen, true);
}

int rdzv__root_set(struct root_job *s, const char *key, const uint8_t *v,
                   uint32_t vlen, bool write_once) {
  uint32_t kl = (uint32_t)strlen(key);
  int rc =
      rdzv__state_set(s->st, (const uint8_t *)key, kl, v, vlen, write_once);
  if (rc < 0)
    return rc;
  struct rdzv_slice k = {(const uint8_t *)key, kl};
  struct put_notify *p = malloc(sizeof(*p) + kl);
  if (p != NULL) {
    p->s = s;
    p->klen = kl;
    memcpy(p->key, key, kl);
    if (rdzv__copies_invalidate(&s->copies, &k, 1, 0, put_notified, p) == 1)
      return 0;
    free(p);
  } else {
    rdzv__copies_invalidate(&s->copies, &k, 1, 0, NULL, NULL);
  }
  rdzv__waits_notify(&s->waits, (const uint8_t *)key, kl);
  return 0;
}

/* Removes the keys of generations older than r->gen. */
struct old_gen_scan {
  uint32_t plen;     /* of "rdzv/<round>/g" */
  int64_t gen;       /* keys of generations below this one go */
  struct copies *cp; /* copies of them held below go too */
};

static int old_generation_key(void *arg, const uint8_t *k, uint32_t klen,
                              const struct rdzv_state_val *v) {
  const struct old_gen_scan *o = arg;
  (void)v;
  int64_t g = 0;
  uint32_t i = o->plen;
  while (i < klen && k[i] >= '0' && k[i] <= '9' && g < INT32_MAX)
    g = g * 10 + (k[i++] - '0');
  if (!(i > o->plen && i < klen && k[i] == '/' && g < o->gen))
    return RDZV_STATE_KEEP;
  struct rdzv_slice ks = {k, klen};
  rdzv__copies_invalidate(o->cp, &ks, 1, 0, NULL, NULL);
  return RDZV_STATE_DELETE;
}

/* Keys of older generations go: the generation's own ("rdzv/<round>/g<N>/")
 * and its workers' ("rdzv/<round>/w<N>/", e.g. a torchrun restart round's
 * TCPStore key space, python/rdzv/torchrun.py), which are not refused as
 * stale while the next generation forms (those workers still run then). */
static void drop_old_generations(struct round *r) {
  static const char kinds[] = {'g', 'w'};
  for (size_t i = 0; i < sizeof(kinds); i++) {
    char prefix[160];
    int pl = snprintf(prefix, sizeof(prefix), "rdzv/%s/%c", r->name, kinds[i]);
    struct old_gen_scan o = {(uint32_t)pl, r->gen, &r->s->copies};
    rdzv__state_scan(r->s->st, (const uint8_t *)prefix, (uint32_t)pl,
                     old_generation_key, &o);
  }
}

/* One line of "rdzv/<round>/g<gen>/domains" (see publish_topology) for
 * the run of hosts of one domain that ends before node rank `end`, and its
 * part of the timeline's summary. */
static void domain_run(struct round *r, struct rdzv_buf *out,
                       const struct jmember *first, int32_t node0,
                       int32_t rank0, int32_t end, int32_t end_rank) {
  char line[400], name[256];
  uint32_t n = first->j.rec.domain_len;
  for (uint32_t i = 0; i < n; i++) /* one line each, whatever the bytes */
    name[i] =
        first->j.rec.domain[i] < 0x20 ? '?' : (char)first->j.rec.domain[i];
  if (n == 0)
    name[n++] = '-';
  name[n] = 0;
  int len = snprintf(line, sizeof(line), "%d %d %d %d %s\n", node0, end - node0,
                     rank0, end_rank - rank0, name);
  rdzv_buf_append(out, line, (size_t)len);
  size_t off = strlen(r->tl.domains);
  if (off < sizeof(r->tl.domains) - 1)
    snprintf(r->tl.domains + off, sizeof(r->tl.domains) - off,
             "%s%.63s (node ranks %d-%d)", off > 0 ? ", " : "", name, node0,
             end - 1);
}

/* Publishes "rdzv/<round>/g<gen>/hosts" (one line per host in node-rank
 * order: node_rank first_rank local_size host location), per host
 * "rdzv/<round>/g<gen>/topo/<node_rank>" (one line per rank: rank
 * local_rank topology-record, with the record's newlines as ';') and,
 * when a host gave a domain, "rdzv/<round>/g<gen>/domains": the domains
 * the world used, one line per run of consecutive hosts of one domain in
 * node-rank order: first_node_rank hosts first_rank ranks domain (the
 * domain's bytes to the end of the line, control bytes as '?', "-" for
 * hosts without one). */
static void publish_topology(struct round *r, struct jmember *const *ms,
                             const struct rdzv_assignment *asg,
                             const size_t *idx) {
  struct rdzv_buf hosts = {0}, topo = {0}, doms = {0};
  char line[640], key[192];
  const struct jmember *run = NULL; /* first host of the current run */
  int32_t run_node = 0, run_rank = 0;
  bool any_domain = false;
  r->tl.domains[0] = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    struct jmember *m = ms[idx[i]];
    const struct rdzv_assignment *a = &asg[idx[i]];
    if (a->local_rank == 0) {
      any_domain |= m->j.rec.domain_len > 0;
      if (run == NULL || run->j.rec.domain_len != m->j.rec.domain_len ||
          (m->j.rec.domain_len > 0 &&
           memcmp(run->j.rec.domain, m->j.rec.domain, m->j.rec.domain_len))) {
        if (run != NULL)
          domain_run(r, &doms, run, run_node, run_rank, a->node_rank, a->rank);
        run = m;
        run_node = a->node_rank;
        run_rank = a->rank;
      }
      int n = snprintf(line, sizeof(line), "%d %d %d %.*s %.*s\n", a->node_rank,
                       a->rank, a->local_size, (int)m->j.rec.host_len,
                       m->j.rec.host, (int)m->j.rec.location_len,
                       m->j.rec.location);
      rdzv_buf_append(&hosts, line, (size_t)n);
      topo.len = 0;
    }
    rdzv_topo_append_line(&topo, a->rank, a->local_rank, m->j.topo,
                          m->j.topo_len);
    if (a->local_rank == a->local_size - 1) {
      snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/topo/%d", r->name,
               r->gen, a->node_rank);
      rdzv__root_put(r->s, key, topo.data, (uint32_t)topo.len);
    }
  }
  snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/hosts", r->name, r->gen);
  rdzv__root_put(r->s, key, hosts.data, (uint32_t)hosts.len);
  if (run != NULL)
    domain_run(r, &doms, run, run_node, run_rank,
               asg[idx[r->n - 1]].node_rank + 1, (int32_t)r->n);
  if (any_domain) {
    snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/domains", r->name, r->gen);
    rdzv__root_put(r->s, key, doms.data, (uint32_t)doms.len);
    rdzv__log_event_job(r->s->d, r->s->job_id,
                        "round %s generation %" PRId64 ": domains %s", r->name,
                        r->gen, r->tl.domains);
  } else {
    r->tl.domains[0] = 0;
  }
  rdzv_buf_free(&hosts);
  rdzv_buf_free(&topo);
  rdzv_buf_free(&doms);
}

/* Takes member m out of the generation's tables (it is parked, or a
 * spare that went away): its host keeps a by_host entry if another of its
 * members stays (see rdzv__round_complete). */
static void member_unlink(struct round *r, struct jmember *m) {
  HASH_DEL(r->by_claim, m);
  HASH_DELETE(hh_slot, r->by_slot, m);
  if (m->in_host) {
    HASH_DELETE(hh_host, r->by_host, m);
    m->in_host = false;
  }
  r->n--;
}

/* The items of a requester p once the generation completed: each of its
 * members' assignment, or RDZV_EPARKED for a spare left out; the reply's
 * status is RDZV_EPARKED when all of them were left out. */
static void reply_completed(struct round *r, struct jpend *p, uint32_t world) {
  char text[300] = "";
  int status = 0;
  if (p->nparked > 0) {
    snprintf(text, sizeof(text),
             "round %s generation %" PRId64 " is complete with %u ranks: "
             "parked as a spare (%u hosts parked); told when a place opens "
             "(rdzv/%s/g%" PRId64 "/next)",
             r->name, r->gen, world, r->tl.parked_hosts, r->name, r->gen);
    if (p->nparked == p->nout)
      status = RDZV_EPARKED;
  }
  rdzv__round_reply(p->c, p->req_id, status, 0, &p->out, p->nout, text, r->gen,
                    world);
}

int rdzv__round_complete(struct round *r) {
  uint32_t n = r->n;
  int short_of_min = 0;
  struct rdzv_join_rec *recs = calloc(n, sizeof(*recs));
  struct rdzv_assignment *asg = calloc(n, sizeof(*asg));
  struct jmember **ms = calloc(n, sizeof(*ms));
  uint8_t *spare = calloc(n, 1);
  size_t *scratch = calloc(n, sizeof(*scratch));
  struct rdzv_place_host *prev = calloc(r->nworld_hosts + 1, sizeof(*prev));
  struct rdzv_place_swap *swaps = calloc(r->nworld_hosts + 1, sizeof(*swaps));
  size_t da = 0, db = 0, i = 0, live = 0, nswaps = 0, world = 0;
  struct jmember *m, *t;
  int rc = RDZV_ENOMEM;
  if (recs && asg && ms && spare && scratch && prev && swaps) {
    /* Live members first (placed), spares that went away after them. */
    HASH_ITER (hh, r->by_claim, m, t)
      if (!m->gone)
        ms[live++] = m;
    i = live;
    HASH_ITER (hh, r->by_claim, m, t)
      if (m->gone)
        ms[i++] = m;
    for (i = 0; i < live; i++) {
      recs[i] = ms[i]->j.rec;
      spare[i] = !ms[i]->spare                      ? RDZV_PLACE_ACTIVE
                 : ms[i]->j.role == RDZV_JOIN_SPARE ? RDZV_PLACE_SPARE
                                                    : RDZV_PLACE_EXTRA;
    }
    rdzv__round_world_prev(r, prev);
    struct rdzv_place_in in = {recs,
                               live,
                               spare,
                               prev,
                               r->nworld_hosts,
                               r->params.max_size,
                               r->params.min_size,
                               r->params.segment_hosts};
    rc = live > 0 ? rdzv_place(&in, asg, swaps, &nswaps, &world, &da, &db)
                  : RDZV_EPROTO;
  }
  if (rc < 0) {
    rdzv__round_fail(r, rc,
                     rc == RDZV_EPROTO ? "no live member to place"
                                       : "rank assignment failed");
    goto out;
  }
  if (world < r->params.min_size) { /* spares that do not fit */
    short_of_min = 1;
    goto out;
  }
  /* Parked spares (and those gone) answer RDZV_EPARKED and leave the
   * generation's tables; the rest are its world. */
  uint8_t item[RDZV_JOIN_ASSIGN_BYTES];
  rdzv__round_tl_membership(r, ms, asg, live, swaps, nswaps, prev);
  size_t w = 0;
  for (i = 0; i < n; i++) {
    m = ms[i];
    if (i < live && asg[i].rank >= 0) {
      ms[w] = m;
      asg[w++] = asg[i];
      continue;
    }
    rdzv_join_error_encode(m->j.rec.claim, RDZV_EPARKED, item);
    rdzv_items_append(&m->via->out, item, RDZV_JOIN_ERROR_BYTES);
    m->via->nout++;
    m->via->nparked++;
    member_unlink(r, m);
    rdzv__round_park(r, m);
  }
  r->nspare = r->nspare_all = r->nextra = 0;
  for (i = 0; i < w; i++) {
    /* A host whose by_host member was parked or gone gets another. */
    struct jmember *peer = NULL;
    HASH_FIND(hh_host, r->by_host, ms[i]->j.rec.host, ms[i]->j.rec.host_len,
              peer);
    if (peer == NULL) {
      ms[i]->in_host = true;
      HASH_ADD_KEYPTR(hh_host, r->by_host, ms[i]->j.rec.host,
                      ms[i]->j.rec.host_len, ms[i]);
    }
  }
  /* scratch[k]: the index (in ms and asg) of rank k, for publishing in
   * rank order. */
  for (i = 0; i < w; i++) {
    ms[i]->rank = asg[i].rank;
    scratch[asg[i].rank] = i;
  }
  rdzv__round_world_save(r, ms, asg, scratch);
  for (i = 0; i < w; i++)
    ms[i]->spare = false; /* in the world now: its loss aborts */
  r->state = ROUND_DONE;
  rdzv__round_tl_end(r);
  rdzv__round_prev_clear(r);
  uv_timer_stop(&r->deadline);
  uv_timer_stop(&r->last_call);
  uv_timer_stop(&r->spare_wait);
  drop_old_generations(r);
  publish_topology(r, ms, asg, scratch);
  assignments_save(r, ms, asg, scratch);
  rdzv__round_save(r);
  for (i = 0; i < w; i++) {
    rdzv_join_assign_encode(ms[i]->j.rec.claim, &asg[i], item);
    rdzv_items_append(&ms[i]->via->out, item, sizeof(item));
    ms[i]->via->nout++;
  }
  for (struct jpend *p = r->pend; p != NULL; p = p->next)
    reply_completed(r, p, r->n);
  rdzv__round_pend_free_all(r);
  for (i = 0; i < w; i++)
    ms[i]->via = NULL;
  rdzv__log_event_job(
      r->s->d, r->s->job_id, "round %s generation %" PRId64 ": %u ranks%s",
      r->name, r->gen, r->n, r->tl.parked_hosts > 0 ? " (spares parked)" : "");
out:
  free(recs);
  free(asg);
  free(ms);
  free(spare);
  free(scratch);
  free(prev);
  free(swaps);
  return short_of_min;
}
