/* A rendezvous round's life at the root: created by name, a generation
 * opened, completed (round_complete.c) or failed (at its deadline,
 * naming who is missing; a lost child node after its grace), and its
 * records kept in the job's state. Requests for older generations get
 * RDZV_ESTALE_GENERATION. Joining is in root_join.c, who is in the world
 * in round_members.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/assign.h"
#include "rendezvous/join_wire.h"
#include "store/daemon/root/round.h"

/* ---- the round's records in the job's state ------------------------------------ */

/* RDZV_STATE_REC_ROUND of a round: { i64 generation, u8 state, the reason
 * text }, little-endian; written at every change of generation or state,
 * so a durable backend has what a restarted root needs. */
void rdzv__round_save(struct round *r) {
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
  if (r->state == ROUND_DONE)
    rdzv__round_world_load(r);
}

static void member_free_all(struct round *r) {
  struct jmember *m, *t;
  HASH_ITER (hh, r->by_claim, m, t) {
    HASH_DEL(r->by_claim, m);
    HASH_DELETE(hh_slot, r->by_slot, m);
    if (m->in_host)
      HASH_DELETE(hh_host, r->by_host, m);
    free(m);
  }
  r->n = 0;
  r->nspare = r->nspare_all = r->nextra = 0;
}

static void contrib_clear(struct round *r) {
  struct contrib *ct, *t;
  HASH_ITER (hh, r->contribs, ct, t) {
    HASH_DEL(r->contribs, ct);
    rdzv__conn_unref(ct->c);
    free(ct);
  }
}

struct contrib *rdzv__round_contrib_find(struct round *r,
                                         const struct conn *c) {
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

void rdzv__round_pend_free_all(struct round *r) {
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
  HASH_ITER (hh, r->by_claim, m, t)
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
  HASH_ITER (hh, r->by_claim, m, t)
    if (m->c == ct->c && !m->left && !m->spare)
      count++;
  struct rdzv_member_name *names =
      count > 0 ? malloc(count * sizeof(*names)) : NULL;
  if (names == NULL)
    return count;
  HASH_ITER (hh, r->by_claim, m, t)
    if (m->c == ct->c && !m->left && !m->spare)
      names[k++] = (struct rdzv_member_name){
          m->j.rec.host, m->j.rec.host_len,
          r->state == ROUND_DONE ? m->rank : m->j.rec.local_rank};
  rdzv_members_describe(
      names, k, r->state == ROUND_DONE ? "ranks" : "local ranks", out, n);
  free(names);
  return count;
}

static void on_grace(uv_timer_t *t) {
  struct round *r = t->data;
  uint64_t now = uv_now(r->s->d->loop), grace = r->s->d->cfg.session_grace_ms;
  uint64_t next = 0;
  struct contrib *ct, *tmp;
  HASH_ITER (hh, r->contribs, ct, tmp) {
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
             "--session-grace-ms %" PRIu64,
             r->gen, who, ct->c->name, n, grace);
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

struct round *rdzv__round_get(struct root_job *s,
                              const struct rdzv_slice *name) {
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
  r->deadline.data = r->last_call.data = r->grace.data = r->spare_wait.data = r;
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
  } else
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
  rdzv__round_save(r);
  uv_timer_stop(&r->deadline);
  uv_timer_stop(&r->last_call);
  uv_timer_stop(&r->spare_wait);
  for (struct jpend *p = r->pend; p != NULL; p = p->next)
    rdzv__round_reply(p->c, p->req_id, status, 0, NULL, 0, why, r->gen, 0);
  rdzv__round_pend_free_all(r);
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
  HASH_ITER (hh, r->by_claim, m, mt) {
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
      out, n, "round '%s' generation %" PRId64 ": %u of %u ranks joined",
      r->name, r->gen, r->n - r->nspare_all, r->params.max_size);
  if (r->nspare > 0 && off < n)
    off += (size_t)snprintf(out + off, n - off, " (and %u spare ranks)",
                            r->nspare);
  HASH_ITER (hh, hosts, h, t) {
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
  rdzv__quarantine_describe(r->s, out, n);
  HASH_ITER (hh, hosts, h, t) {
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
       (r->nspare > 0 && (active > 0 || r->nextra > 0) &&
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

void rdzv__round_prev_clear(struct round *r) {
  struct prevslot *p, *t;
  HASH_ITER (hh, r->prev, p, t) {
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
  HASH_ITER (hh, r->by_claim, m, t) {
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
  rdzv__round_prev_clear(r);
  if (r->state == ROUND_DONE)
    prev_remember(r);
  member_free_all(r);
  rdzv__round_members_free(r, false); /* parked spares join again */
  uv_timer_stop(&r->spare_wait);
  rdzv__round_pend_free_all(r);
  contrib_clear(r);
  r->gen++;
  r->state = ROUND_OPEN;
  r->params = *p;
  r->held = rdzv__round_world_ranks(r);
  r->first_active_ms = 0;
  r->reason[0] = '\0';
  r->opened_ms = rdzv__now_ms(r->s->d);
  rdzv__round_save(r);
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
  HASH_ITER (hh, s->rounds, r, t) {
    for (struct jpend *p = r->pend; p != NULL; p = p->next)
      rdzv__round_reply(p->c, p->req_id, status, 0, NULL, 0, why, r->gen, 0);
    rdzv__round_pend_free_all(r);
  }
}

void rdzv__root_rounds_free(struct root_job *s) {
  struct round *r, *t;
  HASH_ITER (hh, s->rounds, r, t) {
    HASH_DEL(s->rounds, r);
    rdzv__round_prev_clear(r);
    member_free_all(r);
    rdzv__round_members_free(r, true);
    rdzv__round_pend_free_all(r);
    contrib_clear(r);
    uv_close((uv_handle_t *)&r->deadline, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->last_call, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->grace, on_round_timer_closed);
    uv_close((uv_handle_t *)&r->spare_wait, on_round_timer_closed);
  }
}
