/* Joining a rendezvous round at the root: ranks join directly or
 * combined by nodes, each member counted once by its claim; duplicate
 * claims and live conflicts are refused naming both processes; a re-sent
 * join after completion gets its known assignment; a connection that
 * carried joins closing aborts the generation. The round completes at the
 * expected world size (or, elastic, between min and max after a last
 * call), and each requester gets the assignments of the joins it sent,
 * with the generation (round.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "store/daemon/root/round.h"

static struct jpend *pend_for(struct round *r, struct conn *c,
                              uint32_t req_id) {
  struct jpend *p;
  /* Only a child node sends several requests to one round; ranks send
   * one each, so they skip this walk (100,000 ranks on one server). */
  for (p = c->role == RDZV_ROLE_NODE ? r->pend : NULL; p != NULL; p = p->next) {
    if (p->c != c)
      continue;
    /* The requester's older request gives way to this one, which will
     * carry all of its assignments. */
    rdzv__round_reply(c, p->req_id, 0, RDZV_F_SUPERSEDED, NULL, 0, "", r->gen,
                      0);
    p->req_id = req_id;
    return p;
  }
  p = calloc(1, sizeof(*p));
  if (p == NULL)
    return NULL;
  p->c = c;
  p->req_id = req_id;
  rdzv__conn_ref(c);
  p->next = r->pend;
  r->pend = p;
  return p;
}

static struct jmember *member_new(const struct rdzv_slice *v) {
  /* Decoded once to size the slot key (host, NUL, local rank): held
   * exactly, not for the longest host (the root keeps one a member). */
  struct rdzv_join_full probe;
  if (rdzv_join_rec_decode(v->p, v->n, &probe) < 0)
    return NULL;
  struct jmember *m = calloc(1, sizeof(*m) + v->n + probe.rec.host_len + 5);
  if (m == NULL)
    return NULL;
  memcpy(m->data, v->p, v->n);
  m->len = v->n;
  if (rdzv_join_rec_decode(m->data, m->len, &m->j) < 0) {
    free(m);
    return NULL;
  }
  /* Slot key: host, NUL, local rank (4 bytes LE). */
  m->slot = m->data + v->n;
  memcpy(m->slot, m->j.rec.host, m->j.rec.host_len);
  uint32_t lr = (uint32_t)m->j.rec.local_rank;
  uint8_t *q = m->slot + m->j.rec.host_len;
  q[0] = 0;
  for (int i = 0; i < 4; i++)
    q[1 + i] = (uint8_t)(lr >> (8 * i));
  m->slot_len = m->j.rec.host_len + 5;
  return m;
}

/* The joining process's name from its topology record ("process=..."),
 * else its claim id in hex. */
static void process_of(const struct jmember *m, char *out, size_t n) {
  const uint8_t *t = m->j.topo, *end = t + m->j.topo_len;
  while (t < end) {
    const uint8_t *nl = memchr(t, '\n', (size_t)(end - t));
    const uint8_t *le = nl ? nl : end;
    if (le - t > 8 && memcmp(t, "process=", 8) == 0) {
      snprintf(out, n, "%.*s", (int)(le - t - 8), (const char *)t + 8);
      return;
    }
    t = le + 1;
  }
  snprintf(out, n, "claim %016" PRIx64, m->j.rec.claim);
}

/* The first member that joined from m's host, if any. */
static struct jmember *host_peer(struct round *r, const struct jmember *m) {
  struct jmember *p = NULL;
  HASH_FIND(hh_host, r->by_host, m->j.rec.host, m->j.rec.host_len, p);
  return p;
}

/* Adds one record; returns 0 (added or a re-send), or
 * RDZV_EDUPLICATE_CLAIM with text naming both claimants. */
static int add_member(struct round *r, struct jpend *p,
                      const struct rdzv_slice *v, char *text, size_t tn) {
  struct jmember *m = member_new(v), *old = NULL;
  if (m == NULL) {
    snprintf(text, tn, "malformed join record");
    return RDZV_EPROTO;
  }
  HASH_FIND(hh, r->by_claim, &m->j.rec.claim, sizeof(uint64_t), old);
  if (old != NULL) {
    if (old->spare && old->gone) { /* its path came back */
      old->gone = false;
      r->nspare++;
      if (old->j.role != RDZV_JOIN_SPARE)
        r->nextra++;
    }
    if (old->via != p) { /* a re-send through another path: counted once */
      old->via->nmembers--;
      old->via = p;
      p->nmembers++;
    }
    rdzv__round_rebind(r, old, p->c);
    free(m);
    return 0;
  }
  /* A host is one place: all its ranks must report one location, or the
   * assignment would split it in two hosts with overlapping local ranks. */
  struct jmember *peer = host_peer(r, m);
  if (peer != NULL && (peer->j.rec.location_len != m->j.rec.location_len ||
                       memcmp(peer->j.rec.location, m->j.rec.location,
                              m->j.rec.location_len) != 0)) {
    snprintf(text, tn, "host %.*s reports two locations: '%.*s' and '%.*s'",
             (int)m->j.rec.host_len, m->j.rec.host,
             (int)peer->j.rec.location_len, peer->j.rec.location,
             (int)m->j.rec.location_len, m->j.rec.location);
    free(m);
    return RDZV_EPROTO;
  }
  HASH_FIND(hh_slot, r->by_slot, m->slot, m->slot_len, old);
  if (old != NULL && old->spare && old->gone) {
    /* A spare that went away, and a new process in its place. */
    rdzv__round_member_drop(r, old);
    old = NULL;
    peer = host_peer(r, m);
  }
  if (old != NULL) {
    char pa[96], pb[96];
    process_of(old, pa, sizeof(pa));
    process_of(m, pb, sizeof(pb));
    snprintf(text, tn,
             "host %.*s local rank %d is claimed by two processes: %s (joined "
             "first, generation %" PRId64 ") and %s",
             (int)m->j.rec.host_len, m->j.rec.host, m->j.rec.local_rank, pa,
             r->gen, pb);
    free(m);
    return RDZV_EDUPLICATE_CLAIM;
  }
  /* Active or spare: a host's ranks share its first one's role. A host of
   * the last world comes back to its place (its ranks were held for it,
   * one by one as they come); a new host is a spare when it says so, or
   * an extra (held back) when its first rank would need a rank beyond
   * the actives and the places still held. */
  const struct world_host *w =
      peer == NULL || r->held > 0 ? rdzv__round_world_find(r, m) : NULL;
  if (w != NULL && !w->released && r->held > 0)
    r->held--;
  if (peer != NULL)
    m->spare = peer->spare;
  else if (w != NULL)
    m->spare = false;
  else
    m->spare = m->j.role == RDZV_JOIN_SPARE ||
               r->n - r->nspare_all + r->held + 1 > r->params.max_size;
  if ((!m->spare || m->j.role != RDZV_JOIN_SPARE) && r->first_active_ms == 0)
    r->first_active_ms = rdzv__now_ms(r->s->d);
  if (!m->spare && r->n - r->nspare_all >= r->params.max_size) {
    /* Its host's first ranks fitted but this one does not (local sizes
     * that understate the ranks): not in the generation. */
    snprintf(text, tn,
             "round %s generation %" PRId64 " is complete at its "
             "maximum of %u ranks: host %.*s local rank %d is not in it",
             r->name, r->gen, r->params.max_size, (int)m->j.rec.host_len,
             m->j.rec.host, m->j.rec.local_rank);
    free(m);
    return RDZV_EROUND_FULL;
  }
  if (m->spare) {
    r->nspare++;
    r->nspare_all++;
    if (m->j.role != RDZV_JOIN_SPARE)
      r->nextra++;
  }
  m->via = p;
  m->c = p->c;
  p->nmembers++;
  HASH_ADD(hh, r->by_claim, j.rec.claim, sizeof(uint64_t), m);
  HASH_ADD_KEYPTR(hh_slot, r->by_slot, m->slot, m->slot_len, m);
  if (peer == NULL) {
    m->in_host = true;
    HASH_ADD_KEYPTR(hh_host, r->by_host, m->j.rec.host, m->j.rec.host_len, m);
  }
  r->n++;
  rdzv__round_tl_join(r, m);
  rdzv__round_prev_back(r, m);
  return 0;
}

/* A DONE round and a join whose records are all known claims: the same
 * processes asking again (a re-send). Answers and returns 1, else 0. */
static int answer_known(struct round *r, struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_buf out = {0};
  struct rdzv_slice v;
  struct rdzv_state_val asg;
  size_t pos = 0;
  uint32_t nparked = 0;
  /* The generation's assignments, as round.c recorded them. */
  if (rdzv__state_rec_get(r->s->st, RDZV_STATE_REC_ASSIGN,
                          (const uint8_t *)r->name, (uint32_t)strlen(r->name),
                          &asg) < 0 ||
      asg.n != (uint64_t)r->n * RDZV_JOIN_ASSIGN_BYTES)
    return 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  size_t first = pos;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct jmember *old = NULL;
    if (rdzv_join_rec_decode(v.p, v.n, &j) == 0)
      HASH_FIND(hh, r->by_claim, &j.rec.claim, sizeof(uint64_t), old);
    if (old == NULL && r->parked != NULL &&
        rdzv_join_rec_decode(v.p, v.n, &j) == 0)
      HASH_FIND(hh, r->parked, &j.rec.claim, sizeof(uint64_t), old);
    if (old != NULL && old->rank < 0 && old->spare) { /* parked: again */
      uint8_t item[RDZV_JOIN_ERROR_BYTES];
      rdzv_join_error_encode(old->j.rec.claim, RDZV_EPARKED, item);
      rdzv_items_append(&out, item, sizeof(item));
      nparked++;
      continue;
    }
    if (old == NULL || old->rank < 0 || (uint32_t)old->rank >= r->n) {
      rdzv_buf_free(&out);
      return 0;
    }
    rdzv_items_append(&out, asg.p + (size_t)old->rank * RDZV_JOIN_ASSIGN_BYTES,
                      RDZV_JOIN_ASSIGN_BYTES);
  }
  /* All known: these members come through c from now on (a subtree that
   * reattached sends its completed members again). */
  pos = first;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct jmember *old = NULL;
    if (rdzv_join_rec_decode(v.p, v.n, &j) == 0)
      HASH_FIND(hh, r->by_claim, &j.rec.claim, sizeof(uint64_t), old);
    if (old != NULL) {
      rdzv__round_rebind(r, old, c);
      continue;
    }
    if (rdzv_join_rec_decode(v.p, v.n, &j) == 0)
      HASH_FIND(hh, r->parked, &j.rec.claim, sizeof(uint64_t), old);
    if (old != NULL) /* a parked spare's path */
      old->c = c;
  }
  char text[400] = "";
  if (nparked > 0)
    snprintf(text, sizeof(text),
             "round %s generation %" PRId64 ": parked "
             "as a spare until a place opens (rdzv/%s/g%" PRId64 "/next)",
             r->name, r->gen, r->name, r->gen);
  rdzv__round_reply(c, m->req_id, nparked == m->vals.n - 1 ? RDZV_EPARKED : 0,
                    0, &out, m->vals.n - 1, text, r->gen, r->n);
  rdzv_buf_free(&out);
  return 1;
}

static void pend_drop(struct round *r, struct jpend *p) {
  for (struct jpend **pp = &r->pend; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      rdzv__conn_unref(p->c);
      rdzv_buf_free(&p->out);
      free(p);
      return;
    }
  }
}

/* Adds the request's records. Duplicate claims are answered at once: as
 * the final reply if nothing else of this requester is pending, else as a
 * partial reply. */
static void add_records(struct round *r, struct jpend *p,
                        const struct rdzv_msg *m) {
  struct rdzv_buf errs = {0};
  uint32_t nerr = 0;
  char text[512] = "";
  struct rdzv_slice v;
  size_t pos = 0;
  int last = 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    int rc = add_member(r, p, &v, text, sizeof(text));
    if (rc == 0)
      continue;
    struct rdzv_join_full j;
    uint64_t claim = rdzv_join_rec_decode(v.p, v.n, &j) == 0 ? j.rec.claim : 0;
    uint8_t item[RDZV_JOIN_ERROR_BYTES];
    rdzv_join_error_encode(claim, rc, item);
    rdzv_items_append(&errs, item, sizeof(item));
    nerr++;
    last = rc;
  }
  if (p->nmembers > 0)
    rdzv__round_contrib_add(r, p->c);
  if (nerr > 0) {
    struct conn *c = p->c;
    if (p->nmembers == 0) {
      pend_drop(r, p);
      rdzv__round_reply(c, m->req_id, nerr == m->vals.n - 1 ? last : 0, 0,
                        &errs, nerr, text, r->gen, 0);
    } else {
      rdzv__round_reply(c, m->req_id, 0, RDZV_F_PARTIAL, &errs, nerr, text,
                        r->gen, 0);
    }
  }
  rdzv_buf_free(&errs);
}

/* Answers join request m: every record refused with status, text
 * saying why. */
static void refuse_all(struct round *r, struct conn *c,
                       const struct rdzv_msg *m, int status, const char *text) {
  struct rdzv_buf errs = {0};
  struct rdzv_slice v;
  size_t pos = 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    uint8_t item[RDZV_JOIN_ERROR_BYTES];
    rdzv_join_error_encode(rdzv_join_rec_decode(v.p, v.n, &j) == 0 ? j.rec.claim
                                                                   : 0,
                           status, item);
    rdzv_items_append(&errs, item, sizeof(item));
  }
  rdzv__round_reply(c, m->req_id, status, 0, &errs, m->vals.n - 1, text, r->gen,
                    0);
  rdzv_buf_free(&errs);
}

/* A DONE generation whose ranks are alive and a join that claims one of
 * their slots (host, local rank) with another process: a second job using
 * this job's id, or a rank started twice. Refused, and the live
 * generation is left alone. Answers and returns 1, else 0. */
static int refuse_live_conflicts(struct round *r, struct conn *c,
                                 const struct rdzv_msg *m) {
  struct rdzv_slice v;
  size_t pos = 0;
  char text[512] = "";
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct jmember *probe = member_new(&v), *old = NULL;
    if (probe == NULL)
      continue;
    HASH_FIND(hh_slot, r->by_slot, probe->slot, probe->slot_len, old);
    char pname[96] = "";
    if (old != NULL)
      process_of(old, pname, sizeof(pname));
    if (old != NULL && !old->left && text[0] == '\0')
      snprintf(text, sizeof(text),
               "job id in use by a live job: host %.*s local rank %d is held "
               "by process %s of generation %" PRId64,
               (int)old->j.rec.host_len, old->j.rec.host, old->j.rec.local_rank,
               pname, r->gen);
    free(probe);
  }
  if (text[0] == '\0')
    return 0;
  /* Every record of the request is refused: part of it must not start a
   * new generation under the live job. */
  refuse_all(r, c, m, RDZV_EDUPLICATE_CLAIM, text);
  return 1;
}

/* A DONE generation and a join that would not be in the next one's world
 * either: every record a spare (not of the world), or the world at its
 * maximum with all its members live (no member left cleanly; a loss
 * fails the generation). Opening the next generation would restart the
 * whole job for nothing, so the records are parked (RDZV_EPARKED, listed
 * by `rdzvctl members`): a launcher parks or ends the process, which
 * learns from "rdzv/<round>/g<gen>/next" (or that generation's abort)
 * when to join again. Answers and returns 1, else 0. */
static int park_on_done(struct round *r, struct conn *c,
                        const struct rdzv_msg *m) {
  struct jmember *mb, *t;
  uint32_t live = 0;
  HASH_ITER (hh, r->by_claim, mb, t)
    if (!mb->left)
      live++;
  /* A round this root loaded from its state (an earlier root completed
   * it) has no members and no params here: never full. */
  bool full = live > 0 && live >= r->params.max_size, all_spare = true;
  struct rdzv_slice v;
  size_t pos = 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  size_t first = pos;
  while (all_spare && rdzv_items_next(&m->vals, &pos, &v)) {
    struct jmember *probe = member_new(&v);
    all_spare = probe != NULL && probe->j.role == RDZV_JOIN_SPARE &&
                rdzv__round_world_find(r, probe) == NULL;
    free(probe);
  }
  if (!full && !all_spare)
    return 0;
  struct rdzv_buf items = {0};
  char host[64] = "?";
  pos = first;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct jmember *pm = member_new(&v);
    uint8_t item[RDZV_JOIN_ERROR_BYTES];
    rdzv_join_error_encode(pm != NULL ? pm->j.rec.claim : 0, RDZV_EPARKED,
                           item);
    rdzv_items_append(&items, item, sizeof(item));
    if (pm == NULL)
      continue;
    snprintf(host, sizeof(host), "%.*s",
             (int)(pm->j.rec.host_len < 63 ? pm->j.rec.host_len : 63),
             pm->j.rec.host);
    pm->c = c;
    pm->spare = true;
    rdzv__round_park(r, pm);
  }
  char text[700];
  if (full)
    snprintf(text, sizeof(text),
             "round %s generation %" PRId64 " is "
             "complete at its maximum of %u ranks, all of them live: host "
             "%s parked as a spare until a place opens (rdzv/%s/g%" PRId64
             "/next)",
             r->name, r->gen, r->params.max_size, host, r->name, r->gen);
  else
    snprintf(text, sizeof(text),
             "round %s generation %" PRId64 " is "
             "complete with %u ranks: spare host %s parked until a place "
             "opens (rdzv/%s/g%" PRId64 "/next)",
             r->name, r->gen, r->n, host, r->name, r->gen);
  rdzv__round_reply(c, m->req_id, RDZV_EPARKED, 0, &items, m->vals.n - 1, text,
                    r->gen, r->n);
  rdzv_buf_free(&items);
  return 1;
}

static void join_records(struct round *r, struct conn *c,
                         const struct rdzv_msg *m,
                         const struct rdzv_join_params *pp);

void rdzv__root_join(struct root_job *s, struct conn *c,
                     const struct rdzv_msg *m) {
  struct rdzv_slice name, pv;
  struct rdzv_join_params params;
  rdzv_items_get(&m->keys, 0, &name);
  rdzv_items_get(&m->vals, 0, &pv);
  struct round *r = NULL;
  if (rdzv_join_params_decode(pv.p, pv.n, &params) < 0 ||
      (r = rdzv__round_get(s, &name)) == NULL) {
    rdzv__round_reply(
        c, m->req_id, RDZV_EPROTO, 0, NULL, 0,
        "join: bad round name (1..127 bytes, no '/' or NUL) or parameters", 0,
        0);
    return;
  }
  if (m->a != 0) {
    /* A node's completed members of generation a, sent again after it
     * reconnected: bound to this path if that generation still stands,
     * never the start of a new one. */
    if (r->state == ROUND_DONE && r->gen == m->a && answer_known(r, c, m)) {
      if (c->role != RDZV_ROLE_NODE)
        s->d->stats.sessions_resumed++; /* a rank that fell back to us */
      return;
    }
    char text[200];
    snprintf(text, sizeof(text),
             "round %s generation %" PRId64 " is gone "
             "(now generation %" PRId64 ", %s): rejoin",
             r->name, m->a, r->gen,
             r->state == ROUND_DONE   ? "done"
             : r->state == ROUND_OPEN ? "open"
                                      : "failed");
    rdzv__round_reply(c, m->req_id, RDZV_EABORTED, 0, NULL, 0, text, r->gen, 0);
    return;
  }
  /* Quarantined hosts (and hosts their node's health gate failed) are
   * refused first: they open no generation and take no place. */
  struct rdzv_msg rest;
  struct rdzv_buf kept = {0};
  memset(&rest, 0, sizeof(rest));
  if (rdzv__quarantine_filter(r, c, m, &rest, &kept) == 1)
    return;
  if (kept.len > 0)
    m = &rest;
  join_records(r, c, m, &params);
  rdzv_buf_free(&kept);
}

/* Join request m (quarantined hosts' records taken out) of round r. */
static void join_records(struct round *r, struct conn *c,
                         const struct rdzv_msg *m,
                         const struct rdzv_join_params *pp) {
  struct rdzv_join_params params = *pp;
  if (r->state == ROUND_DONE &&
      (answer_known(r, c, m) || refuse_live_conflicts(r, c, m) ||
       park_on_done(r, c, m)))
    return;
  if (r->state == ROUND_FAILED && c->role == RDZV_ROLE_NODE && m->a == 0 &&
      m->b > r->gen && m->b < RDZV_JOIN_GEN_FLOOR_MAX) {
    /* A node knew generation b of this round: this root lost it (it
     * restarted without its state, or the round was forgotten). The next
     * generation is numbered above it, so that no key under
     * rdzv/<round>/g<N>/ (unique ids, gathers) names two worlds to a node
     * or rank that still holds the old one. */
    rdzv__log_job(r->s->d, 1, r->s->job_id,
                  "round %s: %s knew generation "
                  "%" PRId64 " (this root had %" PRId64 "): the next one is "
                  "numbered above it",
                  r->name, c->name, m->b, r->gen);
    r->gen = m->b;
  }
  if (r->state != ROUND_OPEN)
    rdzv__round_open(r, &params);
  struct jpend *p = pend_for(r, c, m->req_id);
  if (p == NULL) {
    rdzv__round_reply(c, m->req_id, RDZV_ENOMEM, 0, NULL, 0, "", r->gen, 0);
    return;
  }
  add_records(r, p, m);
  rdzv__round_progress(r);
}

/* An abort that names its members (vals: u64 LE claims, from a node that
 * lost them) while every one of them is bound to another live connection
 * here: the word of a daemon that was itself declared lost. */
static bool stale_abort(struct round *r, const struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_slice v;
  size_t pos = 0;
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct jmember *mb = NULL;
    if (v.n != 8)
      return false;
    uint64_t claim = rdzv_load_u64le(v.p);
    HASH_FIND(hh, r->by_claim, &claim, sizeof(claim), mb);
    if (mb == NULL || mb->c == c || mb->c == NULL || !rdzv__conn_alive(mb->c))
      return false;
    struct contrib *ct = rdzv__round_contrib_find(r, mb->c);
    if (ct != NULL && ct->lost)
      return false;
  }
  return true;
}

void rdzv__root_abort(struct root_job *s, struct conn *c,
                      const struct rdzv_msg *m) {
  struct rdzv_slice name, why = {(const uint8_t *)"", 0};
  rdzv_items_get(&m->keys, 0, &name);
  rdzv_items_get(&m->keys, 1, &why);
  struct round *r = NULL;
  HASH_FIND(hh, s->rounds, name.p, name.n, r);
  int64_t gen = m->a != 0 ? m->a : (r ? r->gen : 0);
  if (r != NULL && gen == r->gen && r->state != ROUND_FAILED &&
      rdzv__round_spares_drop_claims(r, &m->vals)) {
    /* Spares only (a node lost their processes, or they left): the
     * generation goes on without them. */
    struct rdzv_msg rep;
    rdzv__reply_init(&rep, m, 0);
    rep.a = r->gen;
    rdzv__conn_reply(c, &rep);
    return;
  }
  if (r != NULL && !(m->flags & RDZV_F_LEAVE) && gen == r->gen &&
      r->state != ROUND_FAILED && m->vals.n > 0 && stale_abort(r, c, m)) {
    char text[700];
    s->d->stats.fenced++;
    snprintf(text, sizeof(text),
             "root %s: an abort from %s about %u members "
             "of round %s generation %" PRId64 " that are back on live "
             "connections: stale, refused",
             s->d->cfg.name, c->name, m->vals.n, r->name, r->gen);
    rdzv__log_event(s->d, "%s", text);
    rdzv__conn_reply_text(c, m, RDZV_EFENCED, text);
    return;
  }
  if (r != NULL && (m->flags & RDZV_F_LEAVE) && gen == r->gen) {
    struct jmember *mb = NULL, *mt;
    uint64_t claim = (uint64_t)m->b;
    HASH_FIND(hh, r->by_claim, &claim, sizeof(claim), mb);
    if (mb != NULL) {
      mb->left = true;
      rdzv__round_world_release(r, mb);
    }
    if (claim == 0 && c->role != RDZV_ROLE_NODE) {
      /* A rank here (joined directly, or resumed here through its
       * fallback) says no claim: its members are those bound to it. */
      HASH_ITER (hh, r->by_claim, mb, mt)
        if (mb->c == c) {
          mb->left = true;
          rdzv__round_world_release(r, mb);
        }
    }
    struct contrib *ct = rdzv__round_contrib_find(r, c);
    /* A rank on the root itself left cleanly, or a child node whose job
     * ended (no claim): that connection's end aborts nothing. */
    if (ct != NULL && (c->role != RDZV_ROLE_NODE || claim == 0))
      ct->left = true;
  } else if (r != NULL && gen == r->gen && r->state != ROUND_FAILED) {
    char text[400];
    snprintf(text, sizeof(text), "generation %" PRId64 " aborted: %.*s", gen,
             (int)(why.n < 300 ? why.n : 300), why.p);
    rdzv__round_fail(r, RDZV_EABORTED, text);
  }
  struct rdzv_msg rep;
  rdzv__reply_init(&rep, m, 0);
  rep.a = r ? r->gen : 0;
  rdzv__conn_reply(c, &rep);
}

void rdzv__root_rounds_conn_closed(struct root_job *s, struct conn *c) {
  struct round *r, *t;
  HASH_ITER (hh, s->rounds, r, t) {
    /* Its spares go (a node's come back through its next path). */
    if (r->nspare > 0 || r->parked != NULL)
      rdzv__round_spares_drop_conn(r, c);
    struct contrib *ct = rdzv__round_contrib_find(r, c);
    if (ct == NULL || ct->left || r->state == ROUND_FAILED)
      continue;
    if (!rdzv__round_holds(r, ct)) {
      ct->left = true; /* its members all came back another way */
      continue;
    }
    if (c->role == RDZV_ROLE_NODE && s->d->cfg.session_grace_ms > 0) {
      rdzv__round_node_lost(r, ct);
      continue;
    }
    char why[256];
    snprintf(why, sizeof(why),
             "generation %" PRId64 " aborted: %s %s "
             "disconnected from the root",
             r->gen, c->role == RDZV_ROLE_NODE ? "node" : "rank", c->name);
    rdzv__round_fail(r, RDZV_EABORTED, why);
  }
}
