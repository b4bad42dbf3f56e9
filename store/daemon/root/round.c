/* A rendezvous round's life at the root: created by name, a generation
 * opened, completed (ranks assigned by the pure rdzv_assign, the host
 * table and per-host topology published as write-once keys of that
 * generation, older generations' keys removed) or failed (at its
 * deadline, naming who is missing), and its records kept in the job's
 * state. Requests for older generations get RDZV_ESTALE_GENERATION.
 * Joining is in root_join.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/assign.h"
#include "rendezvous/join_wire.h"
#include "rendezvous/place.h"
#include "store/daemon/root/round.h"

/* ---- the round's records in the job's state ------------------------------------ */

/* RDZV_STATE_REC_ROUND of a round: { i64 generation, u8 state, the reason
 * text }, little-endian; written at every change of generation or state,
 * so a durable backend has what a restarted root needs. */
static void round_save(struct round *r) {
  uint8_t rec[9 + sizeof(r->reason)];
  size_t rl = strlen(r->reason);
  rdzv_store_u64le(rec, (uint64_t)r->gen);
  rec[8] = (uint8_t)r->state;
  memcpy(rec + 9, r->reason, rl);
  if (rdzv__state_rec_put(r->s->st, RDZV_STATE_REC_ROUND,
                          (const uint8_t *)r->name, (uint32_t)strlen(r->name),
                          rec, (uint32_t)(9 + rl)) < 0)
    rdzv__log_job(r->s->d, 0, r->s->job_id,
                  "round %s generation %" PRId64 ": cannot record it", r->name,
                  r->gen);
}

/* A round's record, if the state has one (a backend that outlived an
 * earlier root): its generation and outcome carry on; one that was open
 * cannot (its members were that root's), so it counts as failed. */
static void round_load(struct round *r) {
  struct rdzv_state_val v;
  if (rdzv__state_rec_get(r->s->st, RDZV_STATE_REC_ROUND,
                          (const uint8_t *)r->name, (uint32_t)strlen(r->name),
                          &v) < 0 ||
      v.n < 9)
    return;
  r->gen = (int64_t)rdzv_load_u64le(v.p);
  r->state = v.p[8] == ROUND_DONE ? ROUND_DONE : ROUND_FAILED;
  snprintf(r->reason, sizeof(r->reason), "%.*s", (int)(v.n - 9), v.p + 9);
  if (v.p[8] == ROUND_OPEN)
    snprintf(r->reason, sizeof(r->reason),
             "generation %" PRId64 " was open when the root stopped", r->gen);
}

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
    rc = rdzv__state_rec_put(r->s->st, RDZV_STATE_REC_ASSIGN,
                             (const uint8_t *)r->name,
                             (uint32_t)strlen(r->name), b.data,
                             (uint32_t)b.len);
  if (rc < 0)
    rdzv__log(r->s->d, 0,
              "round %s generation %" PRId64 ": cannot record its ranks",
              r->name, r->gen);
  rdzv_buf_free(&b);
}

static void member_free_all(struct round *r) {
  struct jmember *m, *t;
  HASH_ITER(hh, r->by_claim, m, t) {
    HASH_DEL(r->by_claim, m);
    HASH_DELETE(hh_slot, r->by_slot, m);
    if (m->in_host)
      HASH_DELETE(hh_host, r->by_host, m);
    free(m);
  }
  r->n = 0;
  r->nspare = r->nspare_all = 0;
  r->reserved = 0;
}

static void contrib_clear(struct round *r) {
  struct contrib *ct, *t;
  HASH_ITER(hh, r->contribs, ct, t) {
    HASH_DEL(r->contribs, ct);
    rdzv__conn_unref(ct->c);
    free(ct);
  }
}

struct contrib *rdzv__round_contrib_find(struct round *r, const struct conn *c) {
  struct contrib *ct = NULL;
  HASH_FIND_PTR(r->contribs, &c, ct);
  return ct;
}

void rdzv__round_contrib_add(struct round *r, struct conn *c) {
  if (rdzv__round_contrib_find(r, c) != NULL)
    return;
  struct contrib *ct = calloc(1, sizeof(*ct));
  if (ct == NULL)
    return; /* its death will then go unnoticed until a deadline */
  rdzv__conn_ref(c);
  ct->c = c;
  HASH_ADD_PTR(r->contribs, c, ct);
}

static void pend_free_all(struct round *r) {
  struct jpend *p;
  while ((p = r->pend) != NULL) {
    r->pend = p->next;
    rdzv_buf_free(&p->out);
    rdzv__conn_unref(p->c);
    free(p);
  }
}

/* ---- child nodes lost, and their members sent again ------------------------- */

bool rdzv__round_rebind(struct round *r, struct jmember *m, struct conn *c) {
  if (m->c == c)
    return true;
  if (c->role == RDZV_ROLE_NODE && m->c != NULL &&
      m->c->role != RDZV_ROLE_NODE && rdzv__conn_alive(m->c)) {
    /* The rank is here on its own live connection (it resumed its
     * session): a node's re-send of it is stale. */
    r->s->d->stats.fenced++;
    return false;
  }
  m->c = c;
  rdzv__round_contrib_add(r, c);
  return true;
}

bool rdzv__round_holds(struct round *r, const struct contrib *ct) {
  struct jmember *m, *t;
  HASH_ITER(hh, r->by_claim, m, t)
    if (m->c == ct->c && !m->left && !m->spare)
      return true;
  return false;
}

/* Names the members still bound to the lost connection of ct ("host h17
 * (ranks 136-143)", see rdzv_members_describe), at most n bytes; returns
 * how many there are. */
static uint32_t describe_orphans(struct round *r, const struct contrib *ct,
                                 char *out, size_t n) {
  struct jmember *m, *t;
  uint32_t count = 0, k = 0;
  out[0] = '\0';
  HASH_ITER(hh, r->by_claim, m, t)
    if (m->c == ct->c && !m->left && !m->spare)
      count++;
  struct rdzv_member_name *names =
      count > 0 ? malloc(count * sizeof(*names)) : NULL;
  if (names == NULL)
    return count;
  HASH_ITER(hh, r->by_claim, m, t)
    if (m->c == ct->c && !m->left && !m->spare)
      names[k++] = (struct rdzv_member_name){
          m->j.rec.host, m->j.rec.host_len,
          r->state == ROUND_DONE ? m->rank : m->j.rec.local_rank};
  rdzv_members_describe(names, k,
                        r->state == ROUND_DONE ? "ranks" : "local ranks", out,
                        n);
  free(names);
  return count;
}

static void on_grace(uv_timer_t *t) {
  struct round *r = t->data;
  uint64_t now = uv_now(r->s->d->loop), grace = r->s->d->cfg.session_grace_ms;
  uint64_t next = 0;
  struct contrib *ct, *tmp;
  HASH_ITER(hh, r->contribs, ct, tmp) {
    if (!ct->lost)
      continue;
    if (ct->lost_ms + grace > now) { /* a later loss: its own turn */
      uint64_t due = ct->lost_ms + grace - now;
      next = next == 0 || due < next ? due : next;
      continue;
    }
    char who[300];
    uint32_t n = describe_orphans(r, ct, who, sizeof(who));
    if (n == 0) { /* every member came back through another connection */
      rdzv__log_job(r->s->d, 2, r->s->job_id,
                    "round %s generation %" PRId64 ": %s %s lost, "
                    "but all its members came back",
                    r->name, r->gen,
                    ct->c->role == RDZV_ROLE_NODE ? "node" : "rank",
                    ct->c->name);
      HASH_DEL(r->contribs, ct);
      rdzv__conn_unref(ct->c);
      free(ct);
      continue;
    }
    if (r->state == ROUND_FAILED)
      continue;
    r->s->d->stats.sessions_lost += n;
    char why[512];
    snprintf(why, sizeof(why),
             "generation %" PRId64 " aborted: %s lost: node %s disconnected "
             "from the root and %u of its members did not come back within "
             "--session-grace-ms %" PRIu64, r->gen, who, ct->c->name, n,
             grace);
    rdzv__round_fail(r, RDZV_EABORTED, why);
  }
  if (next > 0)
    uv_timer_start(&r->grace, on_grace, next, 0);
}

void rdzv__round_node_lost(struct round *r, struct contrib *ct) {
  char who[8];
  if (describe_orphans(r, ct, who, sizeof(who)) == 0) {
    /* Every member it carried left cleanly: nothing to wait for. */
    ct->left = true;
    return;
  }
  ct->lost = true;
  ct->lost_ms = uv_now(r->s->d->loop);
  rdzv__log_event_job(r->s->d, r->s->job_id,
                      "round %s generation %" PRId64 ": child node %s "
                      "lost; its members wait %u ms for a re-send",
                      r->name, r->gen, ct->c->name,
                      r->s->d->cfg.session_grace_ms);
  if (!uv_is_active((uv_handle_t *)&r->grace))
    uv_timer_start(&r->grace, on_grace, r->s->d->cfg.session_grace_ms, 0);
}

static void on_round_timer_closed(uv_handle_t *h) {
  struct round *r = h->data;
  if (--r->open_timers == 0)
    free(r);
}

struct round *rdzv__round_get(struct root_job *s, const struct rdzv_slice *name) {
  struct round *r = NULL;
  /* Names are kept NUL-terminated (records and keys are named with
   * them), so a NUL inside one is refused like a '/'. */
  if (name->n >= sizeof(r->name) || memchr(name->p, '/', name->n) != NULL ||
      memchr(name->p, '\0', name->n) != NULL)
    return NULL;
  HASH_FIND(hh, s->rounds, name->p, name->n, r);
  if (r != NULL)
    return r;
  r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  memcpy(r->name, name->p, name->n);
  r->s = s;
  r->gen = 0;
  r->state = ROUND_FAILED; /* no generation open yet */
  uv_timer_init(s->d->loop, &r->deadline);
  uv_timer_init(s->d->loop, &r->last_call);
  uv_timer_init(s->d->loop, &r->grace);
  uv_timer_init(s->d->loop, &r->spare_wait);
  r->deadline.data = r->last_call.data = r->grace.data = r->spare_wait.data =
      r;
  r->open_timers = 4;
  round_load(r);
  HASH_ADD(hh, s->rounds, name, strlen(r->name), r);
  return r;
}

/* ---- replies ------------------------------------------------------------------ */

void rdzv__round_reply(struct conn *c, uint32_t req_id, int status,
                       uint16_t flags, const struct rdzv_buf *items,
                       uint32_t nitems, const char *text, int64_t gen,
                       int64_t world) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = RDZV_MSG_JOIN;
  r.req_id = req_id;
  r.status = status;
  r.flags = flags;
  r.a = gen;
  r.b = world;
  if (t.n > 0) {
    r.keys.n = 1;
    r.keys.v = &t;
  }
  if (items != NULL) {
    r.vals.n = nitems;
    r.vals.raw = items->data;
    r.vals.raw_len = items->len;
  }
  if (flags & RDZV_F_PARTIAL) {
    r.flags |= RDZV_F_REPLY;
    rdzv__conn_send(c, &r); /* not the last reply: outstanding stays */
  }
  else
    rdzv__conn_reply(c, &r);
}

/* The current generation fails: every requester and waiter of its keys
 * gets status with why, and its pending collectives fail too. */
void rdzv__round_fail(struct round *r, int status, const char *why) {
  snprintf(r->reason, sizeof(r->reason), "%s", why);
  bool was_open = r->state == ROUND_OPEN;
  r->state = ROUND_FAILED;
  if (was_open)
    rdzv__round_tl_end(r);
  round_save(r);
  uv_timer_stop(&r->deadline);
  uv_timer_stop(&r->last_call);
  uv_timer_stop(&r->spare_wait);
  for (struct jpend *p = r->pend; p != NULL; p = p->next)
    rdzv__round_reply(p->c, p->req_id, status, 0, NULL, 0, why, r->gen, 0);
  pend_free_all(r);
  char prefix[160];
  int n = snprintf(prefix, sizeof(prefix), "rdzv/%s/g%" PRId64 "/", r->name,
                   r->gen);
  rdzv__waits_fail_prefix(&r->s->waits, (const uint8_t *)prefix, (uint32_t)n,
                          status, why);
  rdzv__root_colls_fail_prefix(r->s, prefix, status, why);
  rdzv__log_event_job(r->s->d, r->s->job_id,
                      "round %s generation %" PRId64 " failed: %s", r->name,
                      r->gen, why);
}

/* ---- missing ranks --------------------------------------------------------- */

struct hostcount {
  UT_hash_handle hh;
  const uint8_t *host;
  uint32_t host_len;
  int32_t have, want;
};

/* Describes what is missing: hosts with fewer ranks than their local
 * size, and hosts of the expected list ("rdzv/<round>/expected-hosts",
 * newline-separated, set by a launcher) that never joined. */
void rdzv__round_describe_missing(struct round *r, char *out, size_t n) {
  struct hostcount *hosts = NULL, *h, *t;
  struct jmember *m, *mt;
  HASH_ITER(hh, r->by_claim, m, mt) {
    HASH_FIND(hh, hosts, m->j.rec.host, m->j.rec.host_len, h);
    if (h == NULL && (h = calloc(1, sizeof(*h))) != NULL) {
      h->host = m->j.rec.host;
      h->host_len = m->j.rec.host_len;
      HASH_ADD_KEYPTR(hh, hosts, h->host, h->host_len, h);
    }
    if (h != NULL) {
      h->have++;
      if (m->j.local_size > h->want)
        h->want = m->j.local_size;
    }
  }
  size_t off = (size_t)snprintf(
      out, n, "round '%s' generation %" PRId64 ": %u of %u ranks joined", r->name,
      r->gen, r->n - r->nspare_all, r->params.max_size);
  if (r->nspare > 0 && off < n)
    off += (size_t)snprintf(out + off, n - off, " (and %u spare ranks)",
                            r->nspare);
  HASH_ITER(hh, hosts, h, t) {
    if (h->have < h->want && off < n)
      off += (size_t)snprintf(out + off, n - off, "; host %.*s lacks %d of %d",
                              (int)h->host_len, h->host, h->want - h->have,
                              h->want);
  }
  char key[160];
  snprintf(key, sizeof(key), "rdzv/%s/expected-hosts", r->name);
  struct rdzv_state_val e = {NULL, 0, false, NULL};
  rdzv__state_get(r->s->st, (const uint8_t *)key, (uint32_t)strlen(key), &e);
  uint32_t never = 0;
  for (uint32_t i = 0; i < e.n;) {
    uint32_t j = i;
    while (j < e.n && e.p[j] != '\n')
      j++;
    HASH_FIND(hh, hosts, e.p + i, j - i, h);
    if (j > i && h == NULL) {
      if (never++ < 20 && off < n)
        off += (size_t)snprintf(out + off, n - off, "; host %.*s never joined",
                                (int)(j - i), e.p + i);
    }
    i = j + 1;
  }
  if (never > 20 && off < n)
    snprintf(out + off, n - off, "; %u more hosts never joined", never - 20);
  HASH_ITER(hh, hosts, h, t) {
    HASH_DEL(hosts, h);
    free(h);
  }
}

static void on_deadline(uv_timer_t *t) {
  struct round *r = t->data;
  if (r->state != ROUND_OPEN)
    return;
  /* Enough ranks with the spares (elastic, or spares to fill the
   * places): the generation starts with them rather than failing. */
  uint32_t active = r->n - r->nspare_all;
  if (((active >= r->params.min_size &&
        r->params.min_size < r->params.max_size) ||
       (r->nspare > 0 && active > 0 &&
        active + r->nspare >= r->params.min_size)) &&
      rdzv__round_complete(r) == 0) {
    uv_timer_stop(&r->last_call);
    return;
  }
  char why[1024];
  rdzv__round_describe_missing(r, why, sizeof(why));
  size_t off = strlen(why);
  snprintf(why + off, sizeof(why) - off, " (deadline %.1f s)",
           r->params.timeout_ms / 1000.0);
  rdzv__round_fail(r, RDZV_EDEADLINE, why);
}

/* ---- completion -------------------------------------------------------------- */

static void prev_clear(struct round *r);

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
  uint32_t kl = (uint32_t)strlen(key);
  int rc = rdzv__state_set(s->st, (const uint8_t *)key, kl, v, vlen, true);
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
  uint32_t plen; /* of "rdzv/<round>/g" */
  int64_t gen;   /* keys of generations below this one go */
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

/* Publishes "rdzv/<round>/g<gen>/hosts" (one line per host in node-rank
 * order: node_rank first_rank local_size host location) and, per host,
 * "rdzv/<round>/g<gen>/topo/<node_rank>" (one line per rank: rank
 * local_rank topology-record, with the record's newlines as ';'). */
static void publish_topology(struct round *r, struct jmember *const *ms,
                             const struct rdzv_assignment *asg,
                             const size_t *idx) {
  struct rdzv_buf hosts = {0}, topo = {0};
  char line[640], key[192];
  for (uint32_t i = 0; i < r->n; i++) {
    struct jmember *m = ms[idx[i]];
    const struct rdzv_assignment *a = &asg[idx[i]];
    if (a->local_rank == 0) {
      int n = snprintf(line, sizeof(line), "%d %d %d %.*s %.*s\n",
                       a->node_rank, a->rank, a->local_size,
                       (int)m->j.rec.host_len, m->j.rec.host,
                       (int)m->j.rec.location_len, m->j.rec.location);
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
  rdzv_buf_free(&hosts);
  rdzv_buf_free(&topo);
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
    if (!m->gone)
      r->nspare--;
  }
  if (m->via != NULL && m->via->nmembers > 0)
    m->via->nmembers--;
  if (was_host) { /* another member of its host stands for it */
    struct jmember *o, *t;
    HASH_ITER(hh, r->by_claim, o, t) {
      if (o->j.rec.host_len == m->j.rec.host_len &&
          memcmp(o->j.rec.host, m->j.rec.host, m->j.rec.host_len) == 0) {
        o->in_host = true;
        HASH_ADD_KEYPTR(hh_host, r->by_host, o->j.rec.host,
                        o->j.rec.host_len, o);
        break;
      }
    }
  }
  free(m);
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
static void reply_completed(struct round *r, struct jpend *p,
                            uint32_t world) {
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
  rdzv__round_reply(p->c, p->req_id, status, 0, &p->out, p->nout, text,
                    r->gen, world);
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
    HASH_ITER(hh, r->by_claim, m, t)
      if (!m->gone)
        ms[live++] = m;
    i = live;
    HASH_ITER(hh, r->by_claim, m, t)
      if (m->gone)
        ms[i++] = m;
    for (i = 0; i < live; i++) {
      recs[i] = ms[i]->j.rec;
      spare[i] = !ms[i]->spare ? RDZV_PLACE_ACTIVE
                 : ms[i]->j.role == RDZV_JOIN_SPARE ? RDZV_PLACE_SPARE
                                                    : RDZV_PLACE_EXTRA;
    }
    rdzv__round_world_prev(r, prev);
    struct rdzv_place_in in = {recs, live, spare, prev, r->nworld_hosts,
                               r->params.max_size};
    rc = live > 0 ? rdzv_place(&in, asg, swaps, &nswaps, &world, &da, &db)
                  : RDZV_EPROTO;
  }
  if (rc < 0) {
    rdzv__round_fail(r, rc, rc == RDZV_EPROTO ? "no live member to place"
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
  r->nspare = r->nspare_all = 0;
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
  prev_clear(r);
  uv_timer_stop(&r->deadline);
  uv_timer_stop(&r->last_call);
  uv_timer_stop(&r->spare_wait);
  drop_old_generations(r);
  publish_topology(r, ms, asg, scratch);
  assignments_save(r, ms, asg, scratch);
  round_save(r);
  for (i = 0; i < w; i++) {
    rdzv_join_assign_encode(ms[i]->j.rec.claim, &asg[i], item);
    rdzv_items_append(&ms[i]->via->out, item, sizeof(item));
    ms[i]->via->nout++;
  }
  for (struct jpend *p = r->pend; p != NULL; p = p->next)
    reply_completed(r, p, r->n);
  pend_free_all(r);
  for (i = 0; i < w; i++)
    ms[i]->via = NULL;
  rdzv__log_event_job(r->s->d, r->s->job_id,
                      "round %s generation %" PRId64 ": %u ranks%s", r->name,
                      r->gen, r->n,
                      r->tl.parked_hosts > 0 ? " (spares parked)" : "");
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

void rdzv__round_on_last_call(uv_timer_t *t) {
  struct round *r = t->data;
  uint32_t active = r->n - r->nspare_all;
  if (r->state != ROUND_OPEN || active < r->params.min_size)
    return;
  if (r->nspare > 0 && uv_is_active((uv_handle_t *)&r->spare_wait)) {
    /* Spares would take places the previous hosts may still come back
     * to: the --spare-wait-ms wait completes the generation. */
    return;
  }
  if (r->prev_pending > 0 && !r->prev_held) {
    /* Members of the superseded generation are still on their way:
     * one more last call for them. */
    r->prev_held = true;
    rdzv__log_job(r->s->d, 2, r->s->job_id,
                  "round %s generation %" PRId64 ": last call held "
                  "%u ms for %u members of the previous generation",
                  r->name, r->gen, r->params.last_call_ms, r->prev_pending);
    uv_timer_start(&r->last_call, rdzv__round_on_last_call,
                   r->params.last_call_ms, 0);
    return;
  }
  rdzv__round_complete(r);
}

static void prev_clear(struct round *r) {
  struct prevslot *p, *t;
  HASH_ITER(hh, r->prev, p, t) {
    HASH_DEL(r->prev, p);
    free(p);
  }
  r->prev_pending = 0;
  r->prev_held = false;
}

/* r's complete generation is being superseded: its live members' slots
 * are what the next one waits for (see struct round). */
static void prev_remember(struct round *r) {
  struct jmember *m, *t;
  HASH_ITER(hh, r->by_claim, m, t) {
    if (m->left)
      continue;
    struct prevslot *p = NULL;
    HASH_FIND(hh, r->prev, m->slot, m->slot_len, p);
    if (p != NULL || (p = calloc(1, sizeof(*p) + m->slot_len)) == NULL)
      continue;
    p->len = m->slot_len;
    memcpy(p->slot, m->slot, m->slot_len);
    HASH_ADD_KEYPTR(hh, r->prev, p->slot, p->len, p);
    r->prev_pending++;
  }
}

void rdzv__round_prev_back(struct round *r, const struct jmember *m) {
  struct prevslot *p = NULL;
  if (r->prev_pending == 0)
    return;
  HASH_FIND(hh, r->prev, m->slot, m->slot_len, p);
  if (p != NULL && !p->back) {
    p->back = true;
    r->prev_pending--;
  }
}

void rdzv__round_open(struct round *r, const struct rdzv_join_params *p) {
  rdzv__round_tl_open(r); /* the last generation, members and all, to history */
  if (r->state == ROUND_DONE && r->gen > 0) {
    /* The live generation is superseded: "rdzv/<round>/g<N>/next" (the
     * new generation's number) wakes whoever waits on it, e.g. torchrun's
     * agents, whose num_nodes_waiting is that wait (python/rdzv/torchrun.py);
     * nodes hold one wait for their subtree. A later request of
     * generation N gets RDZV_ESTALE_GENERATION, which says the same. */
    char key[180], val[24];
    snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/next", r->name, r->gen);
    int vl = snprintf(val, sizeof(val), "%" PRId64, r->gen + 1);
    if (rdzv__root_put(r->s, key, (const uint8_t *)val, (uint32_t)vl) < 0)
      rdzv__log_job(r->s->d, 0, r->s->job_id, "round %s: cannot publish %s",
                    r->name, key);
  }
  prev_clear(r);
  if (r->state == ROUND_DONE)
    prev_remember(r);
  member_free_all(r);
  rdzv__round_members_free(r, false); /* parked spares join again */
  uv_timer_stop(&r->spare_wait);
  pend_free_all(r);
  contrib_clear(r);
  r->gen++;
  r->state = ROUND_OPEN;
  r->params = *p;
  r->held = rdzv__round_world_ranks(r);
  r->first_active_ms = 0;
  r->reason[0] = '\0';
  r->opened_ms = rdzv__now_ms(r->s->d);
  round_save(r);
  uv_timer_start(&r->deadline, on_deadline, p->timeout_ms, 0);
}

int rdzv__root_gen_check(struct root_job *s, const struct rdzv_msg *m,
                         const char **why) {
  struct rdzv_slice k;
  const uint8_t *name;
  size_t nlen;
  int64_t g;
  if (s->rounds == NULL || rdzv_items_get(&m->keys, 0, &k) < 0 ||
      rdzv_gen_key_parse(k.p, k.n, &name, &nlen, &g) < 0)
    return 0;
  struct round *r = NULL;
  HASH_FIND(hh, s->rounds, name, nlen, r);
  if (r == NULL)
    return 0;
  if (g < r->gen)
    return RDZV_ESTALE_GENERATION;
  if (g == r->gen && r->state == ROUND_FAILED) {
    *why = r->reason;
    return RDZV_EABORTED;
  }
  return 0;
}

void rdzv__root_rounds_fail_pending(struct root_job *s, int status,
                                    const char *why) {
  struct round *r, *t;
  HASH_ITER(hh, s->rounds, r, t) {
    for (struct jpend *p = r->pend; p != NULL; p = p->next)
      rdzv__round_reply(p->c, p->req_id, status, 0, NULL, 0, why, r->gen, 0);
    pend_free_all(r);
  }
}

void rdzv__root_rounds_free(struct root_job *s) {
  struct round *r, *t;
  HASH_ITER(hh, s->rounds, r, t) {
    HASH_DEL(s->rounds, r);
    prev_clear(r);
    member_free_all(r);
    rdzv__round_members_free(r, true);
    pend_free_all(r);
    contrib_clear(r);
    uv_close((uv_handle_t *)&r->deadline, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->last_call, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->grace, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->spare_wait, on_round_timer_closed);
  }
}
