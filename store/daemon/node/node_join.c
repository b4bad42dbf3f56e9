/* Rendezvous joins at a node: the joins of the node's subtree are combined
 * into few upstream requests, and the root's assignments are handed back to
 * each requester, matched by claim. The joins go up at once when the whole
 * world has passed through, or when the node's whole subtree has joined:
 * it knows that when it was told how many child nodes it has (--children)
 * and each of them said its own subtree is complete (RDZV_F_COMPLETE), and
 * each host whose ranks join here has all of its local size. Otherwise
 * after the quiet interval (--flush-ms, at most --flush-max-ms).
 *
 * Sessions. Each member of a completed generation is bound to the
 * connection its claim last came through (struct cbind). A connection
 * that closes without a clean leave (ABORT with RDZV_F_LEAVE) is "lost":
 * its members have --session-grace-ms to come back through any connection
 * here (a restarted node's re-send, a rank resuming with its join record
 * and generation: RDZV_MSG_JOIN with a = generation), else the generation
 * is aborted naming their hosts and ranks. A rank whose process is gone
 * (its Unix socket peer exited) aborts at once. Aborts carry the claims
 * they are about; one about members that are bound to another live
 * connection here is a lost daemon's stale word and is refused
 * (RDZV_EFENCED), and a child node's re-send never takes a member from a
 * live rank's own connection. This file: combining, forwarding and
 * answering joins, and the bindings; the sessions' events are
 * node_sessions.c's (node_join_int.h). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "store/daemon/node/node_int.h"
#include "store/daemon/node/health.h"
#include "store/daemon/node/node_join_int.h"

static const char no_host[] = "";

static void send_join_reply(struct jwait *w, int status, uint16_t flags,
                            const struct rdzv_msg *up) {
  struct rdzv_slice t = {NULL, 0};
  rdzv_items_get(&up->keys, 0, &t);
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = RDZV_MSG_JOIN;
  r.req_id = w->req_id;
  r.status = status;
  r.flags = flags;
  r.a = up->a;
  r.b = up->b;
  r.keys.n = t.n > 0 ? 1 : 0;
  r.keys.v = &t;
  r.vals.n = w->nout;
  r.vals.raw = w->out.data;
  r.vals.raw_len = w->out.len;
  if (flags & RDZV_F_PARTIAL) {
    r.flags |= RDZV_F_REPLY;
    rdzv__conn_send(w->c, &r); /* more replies follow */
  } else
    rdzv__conn_reply(w->c, &r);
  w->out.len = 0;
  w->nout = 0;
}

static void jwait_unlink_free(struct njround *jr, struct jwait *w) {
  for (struct jwait **pp = &jr->waiters; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  }
  struct claimref *cr, *t;
  HASH_ITER (hh, jr->claims, cr, t) {
    if (cr->w == w) {
      HASH_DEL(jr->claims, cr);
      free(cr->rec);
      free(cr);
    }
  }
  rdzv_buf_free(&w->out);
  rdzv__conn_unref(w->c);
  free(w);
}

/* Records that connection c is in generation gen of this round (0 while
 * its join is pending); for a rank, its claim (when not 0), its
 * assignment (when known) and its host (rec, when not NULL). Returns the
 * record, or NULL out of memory. */
struct joined *rdzv__nj_mark_joined(struct njround *jr, struct conn *c,
                                    int64_t gen, uint64_t claim,
                                    const struct rdzv_assignment *a,
                                    const struct rdzv_join_full *rec) {
  struct node_job *nj = jr->nj;
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  size_t rlen = strlen(jr->name);
  if (jn == NULL && (jn = calloc(1, sizeof(*jn) + rlen + 1)) != NULL) {
    jn->c = c;
    jn->rank = jn->local_rank = -1;
    jn->host = no_host;
    rdzv__conn_ref(c);
    memcpy(jn->round, jr->name, rlen + 1);
    HASH_ADD(hh, nj->joined, c, sizeof(jn->c), jn);
  }
  if (jn != NULL) {
    jn->gen = gen;
    if (c->role != RDZV_ROLE_NODE && claim != 0)
      jn->claim = claim;
    if (c->role != RDZV_ROLE_NODE && a != NULL) {
      jn->rank = a->rank;
      jn->local_rank = a->local_rank;
    }
    if (c->role != RDZV_ROLE_NODE && rec != NULL) {
      /* Kept when unchanged; out of memory, the host stays unknown (the
       * node then does not count this rank's host complete). */
      size_t hl = rec->rec.host_len < 255 ? rec->rec.host_len : 255;
      bool ok = true;
      if (strlen(jn->host) != hl || memcmp(jn->host, rec->rec.host, hl) != 0) {
        char *h = strndup((const char *)rec->rec.host, hl);
        if (jn->host != no_host)
          free((char *)jn->host);
        jn->host = h != NULL ? h : no_host;
        ok = h != NULL;
      }
      jn->local_size = ok ? rec->local_size : 0;
    }
  }
  return jn;
}

/* ---- bindings of completed members ------------------------------------------- */

/* Child node c has (on) or has not (off) said that its subtree joined
 * jr's pending generation. */
void rdzv__nj_complete_set(struct njround *jr, struct conn *c, bool on) {
  struct ccomplete *cc = NULL;
  HASH_FIND(hh, jr->complete, &c, sizeof(c), cc);
  if (on && cc == NULL && (cc = calloc(1, sizeof(*cc))) != NULL) {
    cc->c = c;
    rdzv__conn_ref(c);
    HASH_ADD(hh, jr->complete, c, sizeof(cc->c), cc);
  } else if (!on && cc != NULL) {
    HASH_DEL(jr->complete, cc);
    rdzv__conn_unref(cc->c);
    free(cc);
  }
}

static void complete_clear(struct njround *jr) {
  struct ccomplete *cc, *t;
  HASH_ITER (hh, jr->complete, cc, t) {
    HASH_DEL(jr->complete, cc);
    rdzv__conn_unref(cc->c);
    free(cc);
  }
}

struct njround *rdzv__nj_jround_find(struct node_job *nj, const char *name) {
  struct njround *jr = NULL;
  HASH_FIND(hh, nj->jrounds, name, strlen(name), jr);
  return jr;
}

void rdzv__nj_binds_clear(struct njround *jr) {
  struct cbind *b, *t;
  jr->binds_ver++;
  HASH_ITER (hh, jr->binds, b, t) {
    HASH_DEL(jr->binds, b);
    free(b);
  }
}

/* A new generation's members replace the old one's. */
void rdzv__nj_binds_for_gen(struct njround *jr, int64_t gen) {
  if (jr->done_gen == gen)
    return;
  rdzv__nj_binds_clear(jr);
  jr->done_gen = gen;
}

/* Whether jn is a live rank's own connection (not lost): the freshest
 * word on where that rank is. */
bool rdzv__nj_live_rank(const struct joined *jn) {
  return jn != NULL && !jn->lost && jn->c->role != RDZV_ROLE_NODE;
}

/* Binds member claim (join record rec) of generation done_gen to jn. A
 * child node does not take a member from another live rank connection
 * (a stale re-send: counted as fenced). rank < 0 keeps what is known.
 * Returns the binding, or NULL (fenced, or out of memory). */
struct cbind *rdzv__nj_bind_claim(struct njround *jr, uint64_t claim,
                                  struct joined *jn, int32_t rank,
                                  const uint8_t *rec, uint32_t rec_len) {
  struct cbind *b = NULL;
  HASH_FIND(hh, jr->binds, &claim, sizeof(claim), b);
  if (b != NULL && b->jn != jn && jn->c->role == RDZV_ROLE_NODE &&
      rdzv__nj_live_rank(b->jn)) {
    jr->nj->d->stats.fenced++;
    return NULL;
  }
  if (b == NULL) {
    if ((b = calloc(1, sizeof(*b) + rec_len)) == NULL)
      return NULL;
    b->claim = claim;
    b->rank = -1;
    b->rec_len = rec_len;
    memcpy(b->rec, rec, rec_len);
    HASH_ADD(hh, jr->binds, claim, sizeof(b->claim), b);
  }
  b->jn = jn;
  if (rank >= 0 && b->rank != rank) {
    b->rank = rank;
    jr->binds_ver++;
  }
  return b;
}

/* The members bound to jn go (its connection's record is freed). */
static void binds_unbind(struct njround *jr, const struct joined *jn) {
  struct cbind *b, *t;
  HASH_ITER (hh, jr->binds, b, t) {
    if (b->jn == jn) {
      HASH_DEL(jr->binds, b);
      free(b);
      jr->binds_ver++;
    }
  }
}

void rdzv__nj_joined_free(struct node_job *nj, struct joined *jn) {
  struct njround *jr = rdzv__nj_jround_find(nj, jn->round);
  if (jr != NULL)
    binds_unbind(jr, jn);
  HASH_DEL(nj->joined, jn);
  rdzv__conn_unref(jn->c);
  if (jn->host != no_host)
    free((char *)jn->host);
  free(jn);
}

static void unmark_joined(struct node_job *nj, struct conn *c) {
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  if (jn != NULL && c->role != RDZV_ROLE_NODE)
    rdzv__nj_joined_free(nj, jn);
}

/* ---- replies from the parent ------------------------------------------------ */

static int by_rank(const void *x, const void *y) {
  const struct local_asg *a = x, *b = y;
  return a->a.rank < b->a.rank ? -1 : a->a.rank > b->a.rank;
}

/* Every rank of a host usually joins through that host's node, so the
 * node can build the host's topology record itself, byte for byte as the
 * root does (rdzv_topo_append_line), and cache it: the ranks' topology
 * reads never leave the host. Only complete hosts are cached. */
static void cache_host_records(struct njround *jr, int64_t gen,
                               struct local_asg *la, size_t n) {
  qsort(la, n, sizeof(*la), by_rank);
  for (size_t i = 0; i < n;) {
    size_t e = i;
    while (e < n && la[e].a.node_rank == la[i].a.node_rank)
      e++;
    if ((int32_t)(e - i) == la[i].a.local_size) {
      struct rdzv_buf b = {0};
      for (size_t k = i; k < e; k++)
        rdzv_topo_append_line(&b, la[k].a.rank, la[k].a.local_rank,
                              la[k].j.topo, la[k].j.topo_len);
      char key[256];
      int kl = snprintf(key, sizeof(key), "rdzv/%s/g%" PRId64 "/topo/%d",
                        jr->name, gen, la[i].a.node_rank);
      struct rdzv_slice ks = {(const uint8_t *)key, (uint32_t)kl};
      struct rdzv_slice vs = {b.data, (uint32_t)b.len};
      rdzv__node_cache_put(jr->nj, ks, vs);
      rdzv_buf_free(&b);
    }
    i = e;
  }
  for (size_t k = 0; k < n; k++)
    free(la[k].rec);
}

/* Routes each item of an upstream reply to the requester of its claim. */
static void route_items(struct njround *jr, const struct rdzv_msg *r) {
  struct rdzv_slice v;
  size_t pos = 0, nla = 0;
  struct local_asg *la = calloc(r->vals.n ? r->vals.n : 1, sizeof(*la));
  while (rdzv_items_next(&r->vals, &pos, &v)) {
    uint64_t claim = 0;
    struct rdzv_assignment a;
    int st = rdzv_join_assign_decode(v.p, v.n, &claim, &a);
    struct claimref *cr = NULL;
    HASH_FIND(hh, jr->claims, &claim, sizeof(claim), cr);
    if (cr == NULL)
      continue;
    struct jwait *w = cr->w;
    rdzv_items_append(&w->out, v.p, v.n);
    w->nout++;
    w->nleft--;
    if (st < 0) {
      w->status = st;
      unmark_joined(jr->nj, w->c); /* refused: its end aborts nothing */
    } else {
      struct joined *jn = rdzv__nj_mark_joined(jr, w->c, r->a, claim, &a, NULL);
      rdzv__nj_binds_for_gen(jr, r->a);
      if (jn != NULL && cr->rec != NULL)
        (void)rdzv__nj_bind_claim(jr, claim, jn, a.rank, cr->rec, cr->rec_len);
      if (la != NULL && cr->rec != NULL && cr->local &&
          rdzv_join_rec_decode(cr->rec, cr->rec_len, &la[nla].j) == 0) {
        la[nla].a = a;
        la[nla++].rec = cr->rec;
        cr->rec = NULL;
      }
    }
    HASH_DEL(jr->claims, cr);
    free(cr->rec);
    free(cr);
  }
  if (la != NULL)
    cache_host_records(jr, r->a, la, nla);
  free(la);
}

static void on_join_reply(struct daemon *d, const struct rdzv_msg *r,
                          void *arg) {
  struct njround *jr = arg;
  (void)d;
  if (r->flags & RDZV_F_SUPERSEDED)
    return;
  route_items(jr, r);
  bool partial = (r->flags & RDZV_F_PARTIAL) != 0;
  struct jwait *w = jr->waiters, *next;
  for (; w != NULL; w = next) {
    next = w->next;
    if (partial && w->nout == 0)
      continue;
    if (partial && w->nleft > 0) {
      send_join_reply(w, 0, RDZV_F_PARTIAL, r);
      continue;
    }
    /* Claims of w still unanswered while the round is answered: they went
     * up in a later request (a subtree or rank that re-sent them here
     * after the parent had this one), whose reply brings them. */
    if (r->status == 0 && w->nleft > 0) {
      if (w->nout > 0)
        send_join_reply(w, 0, RDZV_F_PARTIAL, r);
      continue;
    }
    /* Final for w: a whole-round failure, its refusals, or its ranks. */
    int st = r->status;
    if (st != 0)
      unmark_joined(jr->nj, w->c);
    if (st == 0 && w->nout > 0 && w->status != 0 &&
        w->c->role != RDZV_ROLE_NODE)
      st = w->status;
    send_join_reply(w, st, 0, r);
    jwait_unlink_free(jr, w);
  }
  /* A round that ended here starts counting afresh, so the joins of a
   * next generation are combined again (and its children say again when
   * their subtree has joined). */
  if (!partial) {
    jr->seen = HASH_COUNT(jr->claims);
    complete_clear(jr);
    jr->gave_up = false;
    rdzv__node_health_round_done(jr);
  }
  if (r->status == 0 && r->a > 0) {
    if (r->a > jr->last_gen)
      jr->last_gen = r->a;
    jr->lost_gen = 0; /* a generation of the new parent supersedes */
  }
}

/* ---- forwarding ---------------------------------------------------------------- */

/* Sends n join records (items in recs) of this round to the parent, a =
 * gen (0: a join; else a re-bind of that generation's members), with the
 * round's params, split to the parent's frame limit; cb(jr) answers. */
static int join_send_up(struct njround *jr, int64_t gen,
                        const struct rdzv_buf *recs, uint32_t n, uint16_t flags,
                        upstream_cb cb) {
  struct rdzv_slice params = {jr->params, jr->params_len};
  struct rdzv_slice name = {(const uint8_t *)jr->name,
                            (uint32_t)strlen(jr->name)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_JOIN;
  m.flags = flags;
  m.a = gen;
  if (gen == 0) {
    /* The newest generation of this round known here or below: a root
     * that lost its state (restarted in memory) numbers the next one
     * above it, so that a generation's keys never name two worlds. */
    int64_t known = jr->last_gen > jr->lost_gen ? jr->last_gen : jr->lost_gen;
    m.b = known > jr->child_gen ? known : jr->child_gen;
  }
  m.keys.n = 1;
  m.keys.v = &name;
  m.vals.n = n;
  m.vals.raw = recs->data;
  m.vals.raw_len = recs->len;
  return rdzv__upstream_send_split(jr->nj->up, &m, &params, cb,
                                   cb != NULL ? jr : NULL);
}

/* complete: the subtree has joined (the parent is told: RDZV_F_COMPLETE). */
static void join_flush(struct njround *jr, bool complete) {
  uv_timer_stop(&jr->timer);
  if (jr->npending == 0)
    return;
  /* A failure comes back through on_join_reply, with its reason. */
  join_send_up(jr, 0, &jr->pending, jr->npending,
               complete ? RDZV_F_COMPLETE : 0, on_join_reply);
  jr->npending = 0;
  jr->pending.len = 0;
}

static void on_join_timer(uv_timer_t *t) {
  struct njround *jr = t->data;
  if (jr->nj->d->cfg.children != RDZV_CHILDREN_UNKNOWN && !jr->gave_up) {
    jr->gave_up = true; /* the guard: stop waiting for the whole subtree */
    rdzv__log(jr->nj->d, 2,
              "round %s: the subtree was not complete after "
              "--flush-max-ms (%u ms): the rest is combined over "
              "--flush-ms",
              jr->name, jr->nj->d->cfg.flush_max_ms);
  }
  join_flush(jr, false);
}

#define COMPLETE_MAX_HOSTS 16

/* Whether this node's whole subtree has joined round jr's pending
 * generation: --children is known and that many child nodes said their
 * subtree is complete, and its own ranks joined: --local-ranks of them
 * when told, else each host's whole local size for every host whose ranks
 * joined here, at least one (at most COMPLETE_MAX_HOSTS hosts: more are
 * not counted). */
static bool subtree_complete(struct njround *jr) {
  struct node_job *nj = jr->nj;
  uint32_t want = nj->d->cfg.children;
  if (want == RDZV_CHILDREN_UNKNOWN)
    return false;
  struct {
    const char *host;
    int32_t size, n;
  } hosts[COMPLETE_MAX_HOSTS];
  uint32_t nhosts = 0, nchildren = 0;
  struct joined *jn, *t;
  struct ccomplete *cc, *ct;
  HASH_ITER (hh, jr->complete, cc, ct)
    nchildren += rdzv__conn_alive(cc->c);
  HASH_ITER (hh, nj->joined, jn, t) {
    if (jn->gen != 0 || jn->lost || jn->c->role == RDZV_ROLE_NODE ||
        strcmp(jn->round, jr->name) != 0)
      continue;
    uint32_t h = 0;
    while (h < nhosts && strcmp(hosts[h].host, jn->host) != 0)
      h++;
    if (h == nhosts) {
      if (nhosts == COMPLETE_MAX_HOSTS || jn->local_size < 1)
        return false;
      hosts[nhosts++] = (__typeof__(hosts[0])){jn->host, jn->local_size, 0};
    }
    hosts[h].n++;
  }
  if (nchildren < want)
    return false;
  uint32_t local = nj->d->cfg.local_ranks;
  if (local != RDZV_CHILDREN_UNKNOWN) { /* told: count them, any host */
    uint32_t n = 0;
    for (uint32_t h = 0; h < nhosts; h++)
      n += (uint32_t)hosts[h].n;
    return n >= local;
  }
  if (nhosts == 0)
    return false; /* its host's ranks may be yet to come */
  for (uint32_t h = 0; h < nhosts; h++)
    if (hosts[h].n < hosts[h].size)
      return false;
  return true;
}

static struct njround *jround_get(struct node_job *nj,
                                  const struct rdzv_slice *name) {
  struct njround *jr = NULL;
  /* The root's rule for round names (round.c), checked here too: a name
   * it refuses must not reach it (it drops the whole connection). */
  if (name->n == 0 || name->n >= sizeof(jr->name) ||
      memchr(name->p, '/', name->n) != NULL ||
      memchr(name->p, '\0', name->n) != NULL)
    return NULL;
  HASH_FIND(hh, nj->jrounds, name->p, name->n, jr);
  if (jr != NULL)
    return jr;
  jr = calloc(1, sizeof(*jr));
  if (jr == NULL)
    return NULL;
  memcpy(jr->name, name->p, name->n);
  jr->nj = nj;
  uv_timer_init(nj->d->loop, &jr->timer);
  jr->timer.data = jr;
  HASH_ADD(hh, nj->jrounds, name, name->n, jr);
  return jr;
}

/* The waiter of connection c in this round; a child node's older request
 * gives way to the newer one (answered "superseded"). */
static struct jwait *jwait_for(struct njround *jr, struct conn *c,
                               uint32_t req_id) {
  struct jwait *w;
  for (w = c->role == RDZV_ROLE_NODE ? jr->waiters : NULL; w != NULL;
       w = w->next) {
    if (w->c != c)
      continue;
    struct rdzv_msg r;
    memset(&r, 0, sizeof(r));
    r.type = RDZV_MSG_JOIN;
    r.req_id = w->req_id;
    r.flags = RDZV_F_SUPERSEDED;
    rdzv__conn_reply(c, &r);
    w->req_id = req_id;
    return w;
  }
  w = calloc(1, sizeof(*w));
  if (w == NULL)
    return NULL;
  w->c = c;
  w->req_id = req_id;
  rdzv__conn_ref(c);
  w->next = jr->waiters;
  jr->waiters = w;
  return w;
}

void rdzv__node_join(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m) {
  struct rdzv_slice name, pv, v;
  struct rdzv_join_params params;
  rdzv_items_get(&m->keys, 0, &name);
  rdzv_items_get(&m->vals, 0, &pv);
  struct njround *jr = NULL;
  if (rdzv_join_params_decode(pv.p, pv.n, &params) < 0 ||
      (jr = jround_get(nj, &name)) == NULL) {
    rdzv__node_reply_status(c, m, RDZV_EPROTO);
    return;
  }
  if (m->a != 0) {
    rdzv__nj_resume_join(nj, jr, c, m);
    return;
  }
  /* The host's health gate (--health-cmd): a rank's join waits for its
   * host's check; a failed host's records go up marked, for the root to
   * quarantine it and refuse them. */
  const uint8_t *unhealthy = NULL;
  uint32_t unhealthy_len = 0;
  if (c->role != RDZV_ROLE_NODE && nj->d->cfg.health_cmd[0] != '\0') {
    struct rdzv_join_full first;
    size_t p0 = 0;
    rdzv_items_next(&m->vals, &p0, &v); /* params */
    if (rdzv_items_next(&m->vals, &p0, &v) &&
        rdzv_join_rec_decode(v.p, v.n, &first) == 0 &&
        rdzv__node_health_gate(jr, c, m, &first, &unhealthy, &unhealthy_len) ==
            RDZV_HEALTH_HELD)
      return;
  }
  if (c->role == RDZV_ROLE_NODE && m->b > jr->child_gen &&
      m->b < RDZV_JOIN_GEN_FLOOR_MAX)
    jr->child_gen = m->b;
  struct jwait *w = jwait_for(jr, c, m->req_id);
  if (w == NULL) {
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (jr->npending == 0) {
    memcpy(jr->params, pv.p, pv.n); /* decoded: at most the max */
    jr->params_len = pv.n;
    jr->max_size = params.max_size;
    jr->first_ms = rdzv__now_ms(nj->d);
  } else {
    nj->d->stats.combined += m->vals.n - 1;
  }
  size_t pos = 0;
  struct rdzv_join_full mine;
  bool have_mine = false;
  uint8_t *mine_marked = NULL;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct claimref *cr = NULL;
    if (rdzv_join_rec_decode(v.p, v.n, &j) < 0)
      continue; /* the root will not see it; its requester times out */
    uint8_t *marked = NULL;
    if (unhealthy_len > 0 && j.unhealthy_len == 0) {
      j.unhealthy = unhealthy;
      j.unhealthy_len = unhealthy_len;
      size_t n = rdzv_join_rec_size(&j);
      if ((marked = malloc(n)) == NULL ||
          rdzv_join_rec_encode(&j, marked) < 0) {
        free(marked);
        continue; /* as a record the root cannot take */
      }
      v.p = marked;
      v.n = (uint32_t)n;
      if (rdzv_join_rec_decode(v.p, v.n, &j) < 0) { /* j points into it */
        free(marked);
        continue;
      }
    }
    if (!have_mine) {
      mine = j; /* a rank sends one: its own */
      have_mine = true;
    }
    HASH_FIND(hh, jr->claims, &j.rec.claim, sizeof(uint64_t), cr);
    if (cr == NULL && (cr = calloc(1, sizeof(*cr))) != NULL) {
      cr->claim = j.rec.claim;
      HASH_ADD(hh, jr->claims, claim, sizeof(cr->claim), cr);
      jr->seen++;
      cr->local = c->role != RDZV_ROLE_NODE;
      if ((cr->rec = malloc(v.n)) != NULL) {
        memcpy(cr->rec, v.p, v.n);
        cr->rec_len = v.n;
      }
    }
    if (cr != NULL && cr->w != w) {
      /* A claim that came before through another requester (a subtree
       * that reattached here, a rank that re-sent) is answered to this
       * one now: the old one no longer waits for it. */
      if (cr->w != NULL)
        cr->w->nleft--;
      w->nleft++;
      cr->w = w;
    }
    rdzv_items_append(&jr->pending, v.p, v.n);
    jr->npending++;
    if (marked != NULL && mine.rec.host == j.rec.host)
      mine_marked = marked; /* mine points into it: freed below */
    else
      free(marked);
  }
  /* A rank's or a child node's: either one lost before the round
   * completes loses joins (unless they come again another way). */
  rdzv__nj_mark_joined(jr, c, 0, have_mine ? mine.rec.claim : 0, NULL,
                       have_mine ? &mine : NULL);
  free(mine_marked);
  /* A child's joins say whether its subtree is complete with them; a
   * later batch without the flag takes it back. */
  if (c->role == RDZV_ROLE_NODE && (have_mine || (m->flags & RDZV_F_COMPLETE)))
    rdzv__nj_complete_set(jr, c, (m->flags & RDZV_F_COMPLETE) != 0);
  if (jr->seen >= jr->max_size) {
    join_flush(jr, true);
  } else if (subtree_complete(jr)) {
    nj->d->stats.join_subtree_flushes++;
    join_flush(jr, true);
  } else if (nj->d->cfg.children != RDZV_CHILDREN_UNKNOWN && !jr->gave_up) {
    /* More of the subtree is due: no quiet interval, only the guard for
     * a host or child that never comes (this step does not use it). */
    if (!uv_is_active((uv_handle_t *)&jr->timer))
      uv_timer_start(&jr->timer, on_join_timer, nj->d->cfg.flush_max_ms, 0);
  } else {
    rdzv__node_schedule(nj->d, &jr->timer, jr->first_ms, on_join_timer);
  }
}

/* Every join still waiting for its assignment here goes up again in one
 * request (it supersedes the older ones at the parent): the lost parent
 * may have held some of them under a request of ours it had already
 * answered "superseded", which is not in flight any more. */
static void pending_resend(struct njround *jr) {
  if (jr->claims == NULL || jr->max_size == 0)
    return;
  struct rdzv_buf recs = {0};
  uint32_t n = 0;
  struct claimref *cr, *ct;
  HASH_ITER (hh, jr->claims, cr, ct)
    if (cr->rec != NULL && rdzv_items_append(&recs, cr->rec, cr->rec_len) == 0)
      n++;
  if (n > 0) {
    join_send_up(jr, 0, &recs, n, 0, on_join_reply);
    rdzv__log(jr->nj->d, 2,
              "round %s: %u pending joins sent again after a "
              "reconnection",
              jr->name, n);
  }
  rdzv_buf_free(&recs);
}

/* The connection to the parent is up again after a loss (to the parent or
 * an ancestor): each round's completed members that are bound to a live
 * connection here go up once more, so the root binds them to this path
 * (it answers with their assignments, which nobody here waits for).
 * Members of a lost connection are left to come back themselves: a node
 * that was declared lost and returns must not claim members that have
 * moved on. */
void rdzv__node_joins_reconnected(struct node_job *nj) {
  struct njround *jr, *t;
  HASH_ITER (hh, nj->jrounds, jr, t) {
    pending_resend(jr);
    if (jr->binds == NULL || jr->done_gen != jr->last_gen ||
        (jr->lost_gen != 0 && jr->done_gen <= jr->lost_gen))
      continue;
    struct rdzv_buf recs = {0};
    uint32_t n = 0;
    struct cbind *b, *bt;
    HASH_ITER (hh, jr->binds, b, bt)
      if (b->jn != NULL && !b->jn->lost &&
          rdzv_items_append(&recs, b->rec, b->rec_len) == 0)
        n++;
    if (n == 0) {
      rdzv_buf_free(&recs);
      continue;
    }
    /* a = the generation: a re-bind of its members only */
    int rc = join_send_up(jr, jr->done_gen, &recs, n, 0, NULL);
    rdzv__log(nj->d, rc < 0 ? 0 : 2,
              "round %s generation %" PRId64
              ": %u members sent again after a reconnection%s%s",
              jr->name, jr->done_gen, n, rc < 0 ? ": " : "",
              rc < 0 ? rdzv_strerror(rc) : "");
    rdzv_buf_free(&recs);
  }
}

void rdzv__node_joins_free(struct node_job *nj) {
  if (nj->lost_timer != NULL) {
    uv_close((uv_handle_t *)nj->lost_timer, rdzv__nj_on_lost_closed);
    nj->lost_timer = NULL;
  }
  struct njround *jr, *t;
  HASH_ITER (hh, nj->jrounds, jr, t) {
    HASH_DEL(nj->jrounds, jr);
    while (jr->waiters != NULL)
      jwait_unlink_free(jr, jr->waiters);
    complete_clear(jr);
    rdzv__node_health_free(jr);
    uv_close((uv_handle_t *)&jr->timer, rdzv__nj_on_jround_closed);
  }
  struct joined *jn, *jt;
  HASH_ITER (hh, nj->joined, jn, jt)
    rdzv__nj_joined_free(nj, jn);
}

int64_t rdzv__node_subtree_contributors(struct node_job *nj,
                                        struct rdzv_slice key,
                                        const struct rdzv_members *spec,
                                        uint64_t count, uint64_t *ver) {
  const uint8_t *name;
  size_t nlen;
  int64_t g;
  struct njround *jr = NULL;
  if (rdzv_gen_key_parse(key.p, key.n, &name, &nlen, &g) < 0)
    return -1;
  HASH_FIND(hh, nj->jrounds, name, nlen, jr);
  if (jr == NULL || jr->binds == NULL || jr->done_gen != g ||
      (jr->lost_gen != 0 && g <= jr->lost_gen) || g <= jr->aborted_gen)
    return -1;
  /* Each version of the subtree's members is counted once; a binding made
   * in a later part of the join's answer recounts. */
  uint64_t v = jr->binds_ver + 1; /* never 0: 0 is "not counted yet" */
  if (*ver == v)
    return -2;
  *ver = v;
  int64_t n = 0;
  struct cbind *b, *t;
  HASH_ITER (hh, jr->binds, b, t)
    if (b->rank >= 0 && rdzv_members_contributes(spec, count, b->rank))
      n++;
  return n;
}
