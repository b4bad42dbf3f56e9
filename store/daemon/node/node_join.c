/* Rendezvous joins at a node: the joins of the node's subtree are combined
 * into few upstream requests (after a quiet interval, or at once when the
 * whole world has passed through), and the root's assignments are handed
 * back to each requester, matched by claim. A rank (or child node) that
 * disconnects after joining aborts its generation for everyone, promptly,
 * unless it left cleanly first (ABORT with RDZV_F_LEAVE). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "store/daemon/node/node_int.h"

struct jwait { /* a local request (rank or child node) */
  struct conn *c;
  uint32_t req_id;
  uint32_t nleft; /* its claims not answered yet */
  struct rdzv_buf out;
  uint32_t nout;
  int status; /* last refusal among its items */
  struct jwait *next;
};

struct claimref {
  UT_hash_handle hh;
  uint64_t claim;
  struct jwait *w;
  uint8_t *rec; /* the encoded join record (NULL: out of memory) */
  uint32_t rec_len;
  bool local;   /* a local rank's (else it came through a child node) */
};

/* A local rank's assignment, kept while the host records are built. */
struct local_asg {
  struct rdzv_assignment a;
  struct rdzv_join_full j; /* points into rec */
  uint8_t *rec;
};

struct njround {
  UT_hash_handle hh;
  char name[128];
  struct node_job *nj;
  uint8_t params[RDZV_JOIN_PARAMS_BYTES];
  uint32_t max_size;
  struct rdzv_buf pending; /* encoded records not yet forwarded */
  uint32_t npending;
  uint64_t seen;
  uint64_t first_ms;
  struct jwait *waiters;
  struct claimref *claims;
  uv_timer_t timer;
  int64_t last_gen; /* the newest generation a reply brought */
  int64_t lost_gen; /* generations up to this one died with the parent */
  /* The join records of the members of generation done_gen that completed
   * through this node (its ranks and its subtree's): sent again after a
   * lost connection to the parent, so the root binds them to the new
   * path instead of aborting the generation (sessions of nodes). */
  struct rdzv_buf done_recs;
  uint32_t ndone;
  int64_t done_gen;
};

struct joined { /* a connection that has joined a generation */
  UT_hash_handle hh;
  struct conn *c;
  char round[128];
  int64_t gen;    /* 0 while its join is pending */
  uint64_t claim; /* a rank's claim (0 for a child node) */
  int32_t rank, local_rank; /* a rank's assignment, -1 until known */
  /* A child node whose connection closed: it has --session-grace-ms to
   * come back (a connection of the same name) before its generation is
   * aborted. */
  bool lost;
  uint64_t lost_ms;
  /* A child node's members of generation gen: items of { host, u32 rank
   * (LE) }, to name them if it is lost. */
  struct rdzv_buf who;
};

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
  }
  else
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
  HASH_ITER(hh, jr->claims, cr, t) {
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

/* Records that w's connection is in generation gen of this round. */
static void mark_joined(struct njround *jr, struct conn *c, int64_t gen,
                        uint64_t claim, const struct rdzv_assignment *a) {
  struct node_job *nj = jr->nj;
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  if (jn == NULL && (jn = calloc(1, sizeof(*jn))) != NULL) {
    jn->c = c;
    jn->rank = jn->local_rank = -1;
    rdzv__conn_ref(c);
    snprintf(jn->round, sizeof(jn->round), "%s", jr->name);
    HASH_ADD(hh, nj->joined, c, sizeof(jn->c), jn);
  }
  if (jn != NULL) {
    if (jn->gen != gen)
      jn->who.len = 0;
    jn->gen = gen;
    if (c->role != RDZV_ROLE_NODE)
      jn->claim = claim;
    if (c->role != RDZV_ROLE_NODE && a != NULL) {
      jn->rank = a->rank;
      jn->local_rank = a->local_rank;
    }
  }
}

static void joined_free(struct node_job *nj, struct joined *jn) {
  HASH_DEL(nj->joined, jn);
  rdzv_buf_free(&jn->who);
  rdzv__conn_unref(jn->c);
  free(jn);
}

static void unmark_joined(struct node_job *nj, struct conn *c) {
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  if (jn != NULL && c->role != RDZV_ROLE_NODE)
    joined_free(nj, jn);
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
      mark_joined(jr, w->c, r->a, claim, &a);
      struct rdzv_join_full jf;
      struct joined *jn = NULL;
      if (w->c->role == RDZV_ROLE_NODE && cr->rec != NULL &&
          rdzv_join_rec_decode(cr->rec, cr->rec_len, &jf) == 0)
        HASH_FIND(hh, jr->nj->joined, &w->c, sizeof(w->c), jn);
      if (jn != NULL) {
        uint8_t item[256 + 4];
        uint32_t hl = jf.rec.host_len < 256 ? jf.rec.host_len : 256;
        memcpy(item, jf.rec.host, hl);
        uint32_t rk = (uint32_t)a.rank;
        for (int b = 0; b < 4; b++)
          item[hl + b] = (uint8_t)(rk >> (8 * b));
        rdzv_items_append(&jn->who, item, hl + 4);
      }
      if (r->a != jr->done_gen) {
        jr->done_gen = r->a;
        jr->done_recs.len = 0;
        jr->ndone = 0;
      }
      if (cr->rec != NULL &&
          rdzv_items_append(&jr->done_recs, cr->rec, cr->rec_len) == 0)
        jr->ndone++;
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
    /* Final for w: a whole-round failure, its refusals, or its ranks. */
    int st = r->status != 0 ? r->status : (w->nleft > 0 ? RDZV_EPROTO : 0);
    if (st != 0)
      unmark_joined(jr->nj, w->c);
    if (st == 0 && w->nout > 0 && w->status != 0 &&
        w->c->role != RDZV_ROLE_NODE)
      st = w->status;
    send_join_reply(w, st, 0, r);
    jwait_unlink_free(jr, w);
  }
  /* A round that ended here starts counting afresh, so the joins of a
   * next generation are combined again. */
  if (!partial)
    jr->seen = HASH_COUNT(jr->claims);
  if (r->status == 0 && r->a > 0) {
    if (r->a > jr->last_gen)
      jr->last_gen = r->a;
    jr->lost_gen = 0; /* a generation of the new parent supersedes */
  }
}

/* ---- forwarding ---------------------------------------------------------------- */

static void join_flush(struct njround *jr) {
  struct node_job *nj = jr->nj;
  uv_timer_stop(&jr->timer);
  if (jr->npending == 0)
    return;
  struct rdzv_slice params = {jr->params, sizeof(jr->params)};
  struct rdzv_slice name = {(const uint8_t *)jr->name,
                            (uint32_t)strlen(jr->name)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_JOIN;
  m.keys.n = 1;
  m.keys.v = &name;
  m.vals.n = jr->npending;
  m.vals.raw = jr->pending.data;
  m.vals.raw_len = jr->pending.len;
  /* A failure comes back through on_join_reply, with its reason. */
  rdzv__upstream_send_split(nj->up, &m, &params, on_join_reply, jr);
  jr->npending = 0;
  jr->pending.len = 0;
}

static void on_join_timer(uv_timer_t *t) { join_flush(t->data); }

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
    /* A child node's completed members of generation a, sent again after
     * it reconnected: not combined (the root applies it to that
     * generation only), but remembered here as if they had completed
     * through this node, so that this node's own losses and reconnections
     * account for them too. */
    mark_joined(jr, c, m->a, 0, NULL);
    if (jr->done_gen != m->a) {
      jr->done_gen = m->a;
      jr->done_recs.len = 0;
      jr->ndone = 0;
    }
    size_t pos = 0;
    rdzv_items_next(&m->vals, &pos, &v); /* params */
    while (rdzv_items_next(&m->vals, &pos, &v))
      if (rdzv_items_append(&jr->done_recs, v.p, v.n) == 0)
        jr->ndone++;
    rdzv__node_forward(nj, c, m);
    return;
  }
  struct jwait *w = jwait_for(jr, c, m->req_id);
  if (w == NULL) {
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (jr->npending == 0) {
    memcpy(jr->params, pv.p, sizeof(jr->params));
    jr->max_size = params.max_size;
    jr->first_ms = rdzv__now_ms(nj->d);
  } else {
    nj->d->stats.combined += m->vals.n - 1;
  }
  size_t pos = 0;
  rdzv_items_next(&m->vals, &pos, &v); /* params */
  while (rdzv_items_next(&m->vals, &pos, &v)) {
    struct rdzv_join_full j;
    struct claimref *cr = NULL;
    if (rdzv_join_rec_decode(v.p, v.n, &j) < 0)
      continue; /* the root will not see it; its requester times out */
    HASH_FIND(hh, jr->claims, &j.rec.claim, sizeof(uint64_t), cr);
    if (cr == NULL && (cr = calloc(1, sizeof(*cr))) != NULL) {
      cr->claim = j.rec.claim;
      HASH_ADD(hh, jr->claims, claim, sizeof(cr->claim), cr);
      w->nleft++;
      jr->seen++;
      cr->local = c->role != RDZV_ROLE_NODE;
      if ((cr->rec = malloc(v.n)) != NULL) {
        memcpy(cr->rec, v.p, v.n);
        cr->rec_len = v.n;
      }
    }
    if (cr != NULL)
      cr->w = w;
    rdzv_items_append(&jr->pending, v.p, v.n);
    jr->npending++;
  }
  /* A rank's or a child node's: either one closing before the round
   * completes loses joins, so the generation must abort. */
  mark_joined(jr, c, 0, 0, NULL);
  if (jr->seen >= jr->max_size)
    join_flush(jr);
  else
    rdzv__node_schedule(nj->d, &jr->timer, jr->first_ms, on_join_timer);
}

static void send_abort(struct node_job *nj, const char *round, int64_t gen,
                       uint64_t claim, uint16_t flags, const char *why) {
  struct rdzv_slice keys[2] = {
      {(const uint8_t *)round, (uint32_t)strlen(round)},
      {(const uint8_t *)why, (uint32_t)strlen(why)}};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_ABORT;
  m.flags = flags;
  m.a = gen;
  m.b = (int64_t)claim;
  m.keys.n = 2;
  m.keys.v = keys;
  rdzv__upstream_send(nj->up, &m, NULL, NULL);
}

void rdzv__node_abort(struct node_job *nj, struct conn *c,
                      const struct rdzv_msg *m) {
  if ((m->flags & RDZV_F_LEAVE) && c->role == RDZV_ROLE_NODE && m->b != 0) {
    /* A rank further down left: the root must hear of it (it frees the
     * rank's slot), whatever the depth. */
    rdzv__node_forward(nj, c, m);
    return;
  }
  if (m->flags & RDZV_F_LEAVE) {
    /* A clean leave of a rank here, or of a child node whose job ended
     * (no claim: every rank below it left or was reported dead): this
     * connection's end is no failure. */
    struct joined *jn = NULL;
    HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
    if (jn != NULL) {
      /* The root frees a rank's slot for a later job with this id (a
       * child node's record has no claim). */
      if (jn->gen > 0 && jn->claim != 0)
        send_abort(nj, jn->round, jn->gen, jn->claim, RDZV_F_LEAVE, "left");
      joined_free(nj, jn);
    }
    nj->d->stats.ops[RDZV_MSG_ABORT].local++;
    rdzv__node_reply_status(c, m, 0);
    return;
  }
  rdzv__node_forward(nj, c, m);
}

/* Whether a READY child node named name (other than c) serves job nj. */
static bool child_back(struct node_job *nj, const struct conn *c,
                       const char *name) {
  struct conn *o;
  TAILQ_FOREACH(o, &nj->d->conns, link)
    if (o != c && o->job == nj->job && o->role == RDZV_ROLE_NODE &&
        o->state == CONN_READY && strcmp(o->name, name) == 0)
      return true;
  return false;
}

static void on_lost_closed(uv_handle_t *h) { free(h); }

/* "host h17 (ranks 136-143), ..." from jn->who (consecutive members of a
 * host grouped), at most n bytes. */
static void describe_who(const struct joined *jn, char *out, size_t n) {
  struct rdzv_items it = {0, NULL, jn->who.data, jn->who.len};
  struct rdzv_slice v;
  size_t pos = 0, used = 0;
  const uint8_t *host = NULL;
  uint32_t hl = 0;
  int32_t lo = 0, hi = 0;
  out[0] = '\0';
  for (;;) {
    bool more = rdzv_items_next(&it, &pos, &v) && v.n >= 4;
    int32_t rk = 0;
    if (more) {
      rk = (int32_t)(v.p[v.n - 4] | v.p[v.n - 3] << 8 | v.p[v.n - 2] << 16 |
                     (uint32_t)v.p[v.n - 1] << 24);
      if (host != NULL && v.n - 4 == hl && memcmp(v.p, host, hl) == 0) {
        lo = rk < lo ? rk : lo;
        hi = rk > hi ? rk : hi;
        continue;
      }
    }
    if (host != NULL && used < n)
      used += (size_t)snprintf(out + used, n - used, "%shost %.*s (ranks %d-%d)",
                               used ? ", " : "", (int)hl, host, lo, hi);
    if (!more)
      break;
    host = v.p;
    hl = v.n - 4;
    lo = hi = rk;
  }
}

/* Child nodes lost --session-grace-ms ago: back (a connection of the
 * same name), nothing to do; else their generation aborts. */
static void on_lost_timer(uv_timer_t *t) {
  struct node_job *nj = t->data;
  uint64_t now = uv_now(nj->d->loop), grace = nj->d->cfg.session_grace_ms;
  uint64_t next = 0;
  struct joined *jn, *tmp;
  HASH_ITER(hh, nj->joined, jn, tmp) {
    if (!jn->lost)
      continue;
    if (jn->lost_ms + grace > now) {
      uint64_t due = jn->lost_ms + grace - now;
      next = next == 0 || due < next ? due : next;
      continue;
    }
    if (!child_back(nj, jn->c, jn->c->name)) {
      char who[300];
      describe_who(jn, who, sizeof(who));
      char why[700];
      snprintf(why, sizeof(why), "node %s disconnected from node %s and did "
               "not come back within --session-grace-ms %" PRIu64 "%s%s",
               jn->c->name, nj->d->cfg.name, grace, who[0] ? ": " : "", who);
      rdzv__log_event(nj->d, "round %s generation %" PRId64 ": %s",
                      jn->round, jn->gen, why);
      send_abort(nj, jn->round, jn->gen, 0, 0, why);
    }
    joined_free(nj, jn);
  }
  if (next > 0)
    uv_timer_start(t, on_lost_timer, next, 0);
}

void rdzv__node_conn_closed(struct node_job *nj, struct conn *c) {
  struct joined *jn = NULL;
  HASH_FIND(hh, nj->joined, &c, sizeof(c), jn);
  if (jn == NULL)
    return;
  if (c->role == RDZV_ROLE_NODE && nj->d->cfg.session_grace_ms > 0) {
    jn->lost = true;
    jn->lost_ms = uv_now(nj->d->loop);
    if (nj->lost_timer == NULL &&
        (nj->lost_timer = malloc(sizeof(*nj->lost_timer))) != NULL) {
      uv_timer_init(nj->d->loop, nj->lost_timer);
      nj->lost_timer->data = nj;
    }
    if (nj->lost_timer != NULL) {
      if (!uv_is_active((uv_handle_t *)nj->lost_timer))
        uv_timer_start(nj->lost_timer, on_lost_timer,
                       nj->d->cfg.session_grace_ms, 0);
      return;
    }
  }
  char why[320];
  if (c->role == RDZV_ROLE_NODE)
    snprintf(why, sizeof(why), "node %s disconnected from node %s", c->name,
             nj->d->cfg.name);
  else if (jn->rank >= 0)
    snprintf(why, sizeof(why),
             "rank %d (local rank %d, process %s) disconnected from node %s",
             jn->rank, jn->local_rank, c->name, nj->d->cfg.name);
  else
    snprintf(why, sizeof(why), "a joining rank (process %s) disconnected "
             "from node %s", c->name, nj->d->cfg.name);
  rdzv__log_event(nj->d, "round %s generation %" PRId64 ": %s", jn->round,
            jn->gen, why);
  send_abort(nj, jn->round, jn->gen, 0, 0, why);
  joined_free(nj, jn);
}

static void on_jround_closed(uv_handle_t *h) {
  struct njround *jr = h->data;
  rdzv_buf_free(&jr->pending);
  rdzv_buf_free(&jr->done_recs);
  free(jr);
}

void rdzv__node_joins_leave(struct node_job *nj) {
  char why[200];
  snprintf(why, sizeof(why), "node %s: the job ended", nj->d->cfg.name);
  struct njround *jr, *t;
  HASH_ITER(hh, nj->jrounds, jr, t)
    send_abort(nj, jr->name, 0, 0, RDZV_F_LEAVE, why);
}

void rdzv__node_joins_lost(struct node_job *nj) {
  struct njround *jr, *t;
  HASH_ITER(hh, nj->jrounds, jr, t)
    jr->lost_gen = jr->last_gen;
}

bool rdzv__node_lost_generation(struct node_job *nj, struct conn *c,
                                const struct rdzv_msg *m) {
  struct rdzv_slice k;
  const uint8_t *name;
  size_t nlen;
  int64_t g;
  if (nj->jrounds == NULL || rdzv_items_get(&m->keys, 0, &k) < 0 ||
      rdzv_gen_key_parse(k.p, k.n, &name, &nlen, &g) < 0)
    return false;
  struct njround *jr = NULL;
  HASH_FIND(hh, nj->jrounds, name, nlen, jr);
  if (jr == NULL || jr->lost_gen == 0 || g == 0 || g > jr->lost_gen)
    return false;
  char text[400];
  snprintf(text, sizeof(text),
           "generation %" PRId64 " of round %s is lost: the root restarted "
           "(seen by node %s); rejoin",
           g, jr->name, nj->d->cfg.name);
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, RDZV_EABORTED);
  r.keys.n = 1;
  r.keys.v = &t;
  nj->d->stats.ops[m->type].local++;
  rdzv__conn_reply(c, &r);
  return true;
}

/* The connection to the parent is up again after a loss (to the parent or
 * an ancestor): each round's completed members go up once more, so the
 * root binds them to this path (it answers with their assignments, which
 * nobody here waits for). */
void rdzv__node_joins_reconnected(struct node_job *nj) {
  struct njround *jr, *t;
  HASH_ITER(hh, nj->jrounds, jr, t) {
    if (jr->ndone == 0 || jr->done_gen != jr->last_gen ||
        (jr->lost_gen != 0 && jr->done_gen <= jr->lost_gen))
      continue;
    struct rdzv_slice params = {jr->params, sizeof(jr->params)};
    struct rdzv_slice name = {(const uint8_t *)jr->name,
                              (uint32_t)strlen(jr->name)};
    struct rdzv_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_JOIN;
    m.a = jr->done_gen; /* a re-bind of that generation's members only */
    m.keys.n = 1;
    m.keys.v = &name;
    m.vals.n = jr->ndone;
    m.vals.raw = jr->done_recs.data;
    m.vals.raw_len = jr->done_recs.len;
    int rc = rdzv__upstream_send_split(nj->up, &m, &params, NULL, NULL);
    rdzv__log(nj->d, rc < 0 ? 0 : 2, "round %s generation %" PRId64
              ": %u members sent again after a reconnection%s%s", jr->name,
              jr->done_gen, jr->ndone, rc < 0 ? ": " : "",
              rc < 0 ? rdzv_strerror(rc) : "");
  }
}

void rdzv__node_joins_free(struct node_job *nj) {
  if (nj->lost_timer != NULL) {
    uv_close((uv_handle_t *)nj->lost_timer, on_lost_closed);
    nj->lost_timer = NULL;
  }
  struct njround *jr, *t;
  HASH_ITER(hh, nj->jrounds, jr, t) {
    HASH_DEL(nj->jrounds, jr);
    while (jr->waiters != NULL)
      jwait_unlink_free(jr, jr->waiters);
    uv_close((uv_handle_t *)&jr->timer, on_jround_closed);
  }
  struct joined *jn, *jt;
  HASH_ITER(hh, nj->joined, jn, jt)
    joined_free(nj, jn);
}
