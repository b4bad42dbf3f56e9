/* The node role (agent): serves the ranks of its host and child nodes,
 * answers what it can locally (write-once keys it has cached, copies of
 * mutable keys: node_copies.c), combines identical reads and waits into
 * one upstream request (node_read.c), combines concurrent adds and
 * collective contributions, and forwards the rest to its parent
 * unchanged. This file: forwarding, adds, dispatch and the job's state. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "store/daemon/keys/kvs.h"
#include "store/daemon/transport/transport.h"
#include "store/daemon/keys/waits.h"
#include "store/daemon/node/node.h"
#include "store/daemon/node/node_int.h"

/* Combined adds to one counter. What goes up is a list of parts, each
 * { op id, delta } (wire.h, RDZV_MSG_ADD): one for the sum of this node's
 * local callers (a fresh id), then the parts of each child node's add as
 * it sent them, so that the root applies each part once even when a
 * child, its connection here lost, sends them again through another
 * ancestor. */
struct nadd {
  UT_hash_handle hh;
  struct node_job *nj;
  uint8_t *key;
  uint32_t klen;
  struct lreq *pending, **pending_tail; /* local callers and child adds */
  int64_t pending_sum;                  /* the local callers' deltas */
  bool pending_local;                   /* any local caller pending */
  struct rdzv_buf child_parts;          /* the child adds' parts, in order */
  uint32_t nchild_parts;
  uint64_t first_ms;
  uint32_t pending_n; /* adds pending: local callers plus child parts */
  uint64_t busy_ms;   /* when more than one went up together (0: never) */
  bool inflight;
  uv_timer_t timer;
  struct rdzv_deferred due; /* add_flush at the end of this iteration */
};

struct add_batch {
  struct nadd *ad;
  struct lreq *reqs;
  int64_t sum;
  bool local; /* parts[0] is the local callers' sum */
};

void rdzv__node_reply_status(struct conn *c, const struct rdzv_msg *m, int st) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, st);
  rdzv__conn_reply(c, &r);
}

struct lreq *rdzv__node_lreq_new(struct conn *c, uint32_t req_id) {
  struct lreq *l = calloc(1, sizeof(*l));
  if (l == NULL)
    return NULL;
  l->c = c;
  l->req_id = req_id;
  rdzv__conn_ref(c);
  return l;
}

void rdzv__node_lreq_answer(struct lreq *l, uint8_t type,
                            const struct rdzv_msg *up) {
  struct rdzv_msg r = *up;
  r.type = type;
  r.req_id = l->req_id;
  r.flags = (uint16_t)(up->flags & ~RDZV_F_SUPERSEDED);
  rdzv__conn_reply(l->c, &r);
  rdzv__conn_unref(l->c);
  free(l);
}

/* Caches a write-once value and wakes local waiters of its key. A big
 * value that came in the frame being handled (the parent's reply, a
 * shared buffer: d->frame_blob) is kept by reference to that buffer,
 * not copied, when it is most of it (a small value does not pin a big
 * frame); every later reply sends it from there. */
void rdzv__node_cache_put(struct node_job *nj, struct rdzv_slice k,
                          struct rdzv_slice v) {
  struct rdzv_blob *fb = nj->d->frame_blob;
  int rc;
  if (fb != NULL && v.n >= nj->d->cfg.share_min_bytes &&
      (uint64_t)v.n * 2 >= fb->len && rdzv__blob_holds(fb, v.p, v.n))
    rc = rdzv__kv_set_shared(&nj->cache, k.p, k.n, fb, v.p, v.n, true, NULL);
  else
    rc = rdzv__kv_set(&nj->cache, k.p, k.n, v.p, v.n, true, NULL);
  if (rc == 0)
    rdzv__waits_notify(&nj->waits, k.p, k.n);
}

/* ---- forwarding ------------------------------------------------------------ */

struct fwd {
  struct node_job *nj;
  struct lreq *l;
  uint8_t type;
  bool cache_set; /* a write-once SET: cache it on success */
  uint32_t klen, vlen;
  uint8_t kv[];
};

static void on_fwd_reply(struct daemon *d, const struct rdzv_msg *r,
                         void *arg) {
  struct fwd *f = arg;
  (void)d;
  if (r->status == 0 && f->cache_set) {
    struct rdzv_slice k = {f->kv, f->klen}, v = {f->kv + f->klen, f->vlen};
    rdzv__node_cache_put(f->nj, k, v);
  }
  struct rdzv_slice k, v;
  if (r->status == 0 && f->type == RDZV_MSG_GET && (r->a & 1) &&
      rdzv_items_get(&r->vals, 0, &v) == 0) {
    k.p = f->kv;
    k.n = f->klen;
    rdzv__node_cache_put(f->nj, k, v);
  }
  rdzv__node_lreq_answer(f->l, f->type, r);
  free(f);
}

uint64_t rdzv__node_opid(struct daemon *d) {
  static uint64_t seq;
  /* splitmix64 of this daemon's random incarnation and a counter: unique
   * across the tree's nodes with overwhelming odds, never 0. */
  uint64_t z = d->incarnation + ++seq * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z != 0 ? z : 1;
}

/* Forwards m unchanged; keeps key (and value, for a write-once SET) so the
 * reply can fill the cache. */
void rdzv__node_forward(struct node_job *nj, struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_slice k = {NULL, 0}, v = {NULL, 0};
  bool cache_set = m->type == RDZV_MSG_SET && (m->flags & RDZV_F_WRITE_ONCE);
  if (m->type == RDZV_MSG_SET || m->type == RDZV_MSG_GET)
    rdzv_items_get(&m->keys, 0, &k);
  if (cache_set)
    rdzv_items_get(&m->vals, 0, &v);
  struct fwd *f = calloc(1, sizeof(*f) + k.n + v.n);
  struct lreq *l = f ? rdzv__node_lreq_new(c, m->req_id) : NULL;
  if (l == NULL) {
    free(f);
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  f->nj = nj;
  f->l = l;
  f->type = m->type;
  f->cache_set = cache_set;
  f->klen = k.n;
  f->vlen = v.n;
  if (k.n)
    memcpy(f->kv, k.p, k.n);
  if (v.n)
    memcpy(f->kv + k.n, v.p, v.n);
  /* A mutation gets an op id here, where it enters the tree, unless a
   * node below gave it one: sent again after a lost connection, the root
   * applies it once. */
  struct rdzv_msg idm;
  if ((m->type == RDZV_MSG_SET || m->type == RDZV_MSG_CAS ||
       m->type == RDZV_MSG_DELETE || m->type == RDZV_MSG_MSET ||
       m->type == RDZV_MSG_APPEND) &&
      !((m->flags & RDZV_F_OPID) && m->b != 0)) {
    idm = *m;
    idm.flags |= RDZV_F_OPID;
    idm.b = (int64_t)rdzv__node_opid(nj->d);
    m = &idm;
  }
  int rc = rdzv__upstream_send(nj->up, m, on_fwd_reply, f);
  if (rc < 0) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, rc);
    rdzv__node_lreq_answer(l, m->type, &r);
    free(f);
  }
}

/* ---- adds: combined per counter ------------------------------------------- */

static void add_flush(struct nadd *ad);
static void add_schedule(struct nadd *ad);
static void on_add_timer(uv_timer_t *t);

/* The next 8-byte value of a reply's vals at *pos (the value after the
 * next part). */
static bool part_after(const struct rdzv_msg *r, size_t *pos, int64_t *out) {
  struct rdzv_slice v;
  if (!rdzv_items_next(&r->vals, pos, &v) || v.n != 8)
    return false;
  *out = (int64_t)rdzv_load_u64le(v.p);
  return true;
}

static void on_add_reply(struct daemon *d, const struct rdzv_msg *r,
                         void *arg) {
  struct add_batch *b = arg;
  struct nadd *ad = b->ad;
  (void)d;
  /* The parent applied each part in order. Local callers get the value
   * they would have seen had the adds run one after another, in arrival
   * order (two's-complement arithmetic in uint64_t: well defined, and
   * equal to the true values whenever those fit in int64); each child
   * gets the values after its own parts. */
  int64_t local_after = 0;
  int status = r->status;
  size_t pos = 0;
  if (status == 0 && b->local && !part_after(r, &pos, &local_after))
    status = RDZV_EPROTO;
  uint64_t running = (uint64_t)local_after - (uint64_t)b->sum;
  struct lreq *l;
  while ((l = b->reqs) != NULL) {
    b->reqs = l->next;
    struct rdzv_msg out = *r;
    out.status = status;
    out.vals.n = 0;
    out.vals.raw_len = 0;
    out.vals.v = NULL;
    if (status == 0 && l->nparts == 0) {
      running += (uint64_t)l->delta;
      out.a = (int64_t)running;
    } else if (status == 0) {
      /* The child's parts' answers: the next nparts items, passed on as
       * one raw list (the bytes of r from pos on). */
      size_t start = pos;
      int64_t last = 0;
      bool ok = true;
      for (uint32_t i = 0; i < l->nparts && ok; i++)
        ok = part_after(r, &pos, &last);
      if (ok) {
        out.vals.n = l->nparts;
        out.vals.raw = r->vals.raw + start;
        out.vals.raw_len = pos - start;
        out.a = last;
      } else {
        out.status = RDZV_EPROTO;
      }
    }
    rdzv__node_lreq_answer(l, RDZV_MSG_ADD, &out);
  }
  free(b);
  ad->inflight = false;
  if (ad->pending != NULL)
    add_schedule(ad);
}

/* When the pending adds of ad go up. A counter that only one caller at a
 * time adds to (every add went up alone for --flush-max-ms) is idle: its
 * add goes at the end of this loop iteration, waiting for nothing. A busy
 * one, with concurrent adders whose adds keep coming, waits for the quiet
 * interval (at most --flush-max-ms after the first pending add): a burst
 * costs the parent a few adds, not one per round trip. */
static void add_schedule(struct nadd *ad) {
  struct daemon *d = ad->nj->d;
  if (ad->inflight || ad->pending == NULL)
    return;
  if (ad->busy_ms == 0 || rdzv__now_ms(d) > ad->busy_ms + d->cfg.flush_max_ms)
    rdzv__defer(d, &ad->due);
  else
    rdzv__node_schedule(d, &ad->timer, ad->first_ms, on_add_timer);
}

static void add_flush(struct nadd *ad) {
  struct node_job *nj = ad->nj;
  uv_timer_stop(&ad->timer);
  rdzv__defer_cancel(nj->d, &ad->due);
  if (ad->inflight || ad->pending == NULL)
    return;
  struct add_batch *b = calloc(1, sizeof(*b));
  struct rdzv_buf parts = {0};
  if (b == NULL) {
    /* Retried after the quiet interval (or by the next add). */
    rdzv__node_schedule(nj->d, &ad->timer, ad->first_ms, on_add_timer);
    return;
  }
  if (ad->pending_local) {
    uint8_t part[16];
    rdzv_store_u64le(part, rdzv__node_opid(nj->d));
    rdzv_store_u64le(part + 8, (uint64_t)ad->pending_sum);
    if (rdzv_items_append(&parts, part, sizeof(part)) < 0) {
      free(b);
      rdzv__node_schedule(nj->d, &ad->timer, ad->first_ms, on_add_timer);
      return;
    }
  }
  if (rdzv_buf_append(&parts, ad->child_parts.data, ad->child_parts.len) < 0) {
    rdzv_buf_free(&parts);
    free(b);
    rdzv__node_schedule(nj->d, &ad->timer, ad->first_ms, on_add_timer);
    return;
  }
  b->ad = ad;
  b->reqs = ad->pending;
  b->sum = ad->pending_sum;
  b->local = ad->pending_local;
  uint32_t nparts = (ad->pending_local ? 1 : 0) + ad->nchild_parts;
  ad->pending = NULL;
  ad->pending_tail = &ad->pending;
  ad->pending_sum = 0;
  ad->pending_local = false;
  ad->child_parts.len = 0;
  ad->nchild_parts = 0;
  if (ad->pending_n > 1)
    ad->busy_ms = rdzv__now_ms(nj->d);
  ad->pending_n = 0;
  ad->inflight = true;
  struct rdzv_slice k = {ad->key, ad->klen};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_ADD;
  m.flags = RDZV_F_OPID;
  m.keys.n = 1;
  m.keys.v = &k;
  m.vals.n = nparts;
  m.vals.raw = parts.data;
  m.vals.raw_len = parts.len;
  int rc = rdzv__upstream_send(nj->up, &m, on_add_reply, b);
  rdzv_buf_free(&parts);
  if (rc < 0) {
    struct rdzv_msg r;
    memset(&r, 0, sizeof(r));
    r.status = rc;
    on_add_reply(nj->d, &r, b);
  }
}

static void on_add_timer(uv_timer_t *t) { add_flush(t->data); }

static void on_add_due(struct rdzv_deferred *x) {
  add_flush((struct nadd *)((char *)x - offsetof(struct nadd, due)));
}

static struct nadd *nadd_get(struct node_job *nj, struct rdzv_slice k) {
  struct nadd *ad = NULL;
  HASH_FIND(hh, nj->adds, k.p, k.n, ad);
  if (ad != NULL)
    return ad;
  ad = calloc(1, sizeof(*ad));
  if (ad == NULL || (ad->key = malloc(k.n)) == NULL) {
    free(ad);
    return NULL;
  }
  memcpy(ad->key, k.p, k.n);
  ad->klen = k.n;
  ad->nj = nj;
  ad->pending_tail = &ad->pending;
  uv_timer_init(nj->d->loop, &ad->timer);
  ad->timer.data = ad;
  ad->due.cb = on_add_due;
  HASH_ADD_KEYPTR(hh, nj->adds, ad->key, ad->klen, ad);
  return ad;
}

/* Schedules a flush after a quiet interval (flush_ms without new input),
 * but no later than flush_max_ms after the first held input. */
void rdzv__node_schedule(struct daemon *d, uv_timer_t *t, uint64_t first_ms,
                         uv_timer_cb cb) {
  uint64_t now = rdzv__now_ms(d);
  uint64_t limit = first_ms + d->cfg.flush_max_ms;
  uint64_t due = now + d->cfg.flush_ms;
  if (due > limit)
    due = limit > now ? limit : now;
  uv_timer_start(t, cb, due - now, 0);
}

static void handle_add(struct node_job *nj, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k;
  rdzv_items_get(&m->keys, 0, &k);
  struct nadd *ad = nadd_get(nj, k);
  struct lreq *l = ad ? rdzv__node_lreq_new(c, m->req_id) : NULL;
  if (l == NULL) {
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (m->flags & RDZV_F_OPID) {
    /* A child node's combined add: its parts go up with ours, as they
     * are (their ids are what the root knows them by). */
    if (rdzv_buf_append(&ad->child_parts, m->vals.raw, m->vals.raw_len) < 0) {
      rdzv__conn_unref(c);
      free(l);
      rdzv__node_reply_status(c, m, RDZV_ENOMEM);
      return;
    }
    l->nparts = m->vals.n;
    ad->nchild_parts += m->vals.n;
    ad->pending_n += m->vals.n;
    if (ad->pending == NULL)
      ad->first_ms = rdzv__now_ms(nj->d);
    else
      nj->d->stats.combined++;
    *ad->pending_tail = l;
    ad->pending_tail = &l->next;
    add_schedule(ad);
    return;
  }
  int64_t sum;
  if (__builtin_add_overflow(ad->pending_sum, m->a, &sum)) {
    /* Sequential adds would overflow somewhere here: the parent decides
     * (-ERANGE), this add going up alone. */
    rdzv__node_forward(nj, c, m);
    rdzv__conn_unref(c);
    free(l);
    return;
  }
  l->delta = m->a;
  if (ad->pending == NULL)
    ad->first_ms = rdzv__now_ms(nj->d);
  else
    nj->d->stats.combined++;
  *ad->pending_tail = l;
  ad->pending_tail = &l->next;
  ad->pending_sum = sum;
  ad->pending_local = true;
  ad->pending_n++;
  /* With nothing of this counter in flight, an idle counter's add goes up
   * at the end of this loop iteration, with the other adds of it read in
   * the same iteration; adds that come while one is in flight are combined
   * into the next one. */
  add_schedule(ad);
}

/* ---- dispatch, job state --------------------------------------------------- */

static void on_parent_reconnect(void *arg) {
  rdzv__node_joins_reconnected(arg);
}

/* The parent restarted (a new incarnation in its hello): what this node
 * holds of it is stale. Cached write-once values go (the new parent may
 * hold other values under those keys), the generations joined so far are
 * lost, and the child nodes of this job are disconnected: they reconnect,
 * meet a new incarnation of ours (epoch) and do the same below. */
static void on_parent_restart(void *arg) {
  struct node_job *nj = arg;
  struct daemon *d = nj->d;
  d->stats.parent_restarts++;
  rdzv__log_job(d, 1, nj->job->id,
                "the parent %s restarted: its job state is lost; "
                "cached values dropped, ranks must rejoin",
                d->cfg.parent);
  rdzv__kv_clear(&nj->cache);
  rdzv__node_copies_on_lost(nj);
  rdzv__node_joins_lost(nj);
  nj->epoch++;
  char text[400];
  snprintf(text, sizeof(text),
           "the root restarted above node %s: job "
           "state lost; reconnect",
           d->cfg.name);
  rdzv__job_close_peers(d, nj->job, RDZV_ROLE_NODE, RDZV_EABORTED, text);
}

static uint64_t node_hello_epoch(struct daemon *d, struct job *j) {
  struct node_job *nj = j->role_data;
  (void)d;
  return nj != NULL ? nj->epoch : 0;
}

struct node_job *rdzv__node_job(struct daemon *d, struct job *j) {
  if (j->role_data != NULL)
    return j->role_data;
  struct node_job *nj = calloc(1, sizeof(*nj));
  if (nj == NULL)
    return NULL;
  nj->d = d;
  nj->job = j;
  nj->up = rdzv__upstream_create(d, j->id, on_parent_restart,
                                 on_parent_reconnect, nj);
  if (nj->up == NULL) {
    free(nj);
    return NULL;
  }
  rdzv__waits_init(&nj->waits, d->loop, &rdzv__node_wait_hooks, nj);
  rdzv__node_copies_init(nj);
  j->role_data = nj;
  return nj;
}

static void node_handle(struct daemon *d, struct conn *c,
                        const struct rdzv_msg *m) {
  struct node_job *nj = rdzv__node_job(d, c->job);
  if (nj == NULL) {
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (m->type == RDZV_MSG_INVAL) { /* a child node's, never forwarded */
    rdzv__copies_inval_request(&nj->holders, c, m);
    return;
  }
  if (m->type != RDZV_MSG_JOIN && m->type != RDZV_MSG_ABORT &&
      rdzv__node_lost_generation(nj, c, m))
    return;
  switch (m->type) {
  case RDZV_MSG_GET:
    rdzv__node_get(nj, c, m);
    break;
  case RDZV_MSG_WAIT:
    rdzv__node_wait(nj, c, m);
    break;
  case RDZV_MSG_MGET:
    rdzv__node_mget(nj, c, m);
    break;
  case RDZV_MSG_ADD:
    handle_add(nj, c, m);
    break;
  case RDZV_MSG_BARRIER:
  case RDZV_MSG_GATHER:
    rdzv__node_collective(nj, c, m);
    break;
  case RDZV_MSG_COLL_STATUS:
    rdzv__node_coll_status(nj, c, m);
    break;
  case RDZV_MSG_JOIN:
    rdzv__node_join(nj, c, m);
    break;
  case RDZV_MSG_ABORT:
    rdzv__node_abort(nj, c, m);
    break;
  default:
    rdzv__node_forward(nj, c, m);
    break;
  }
}

void rdzv__node_lreqs_free(struct lreq *l) {
  while (l != NULL) {
    struct lreq *next = l->next;
    rdzv__conn_unref(l->c);
    free(l);
    l = next;
  }
}

static void on_nadd_closed(uv_handle_t *h) {
  struct nadd *ad = h->data;
  rdzv_buf_free(&ad->child_parts);
  free(ad->key);
  free(ad);
}

/* c closed: its waits and its places among a collective's waiters go now
 * (their replies would go nowhere, and each holds c). Its contributions
 * stay: accepted data is kept. */
static void node_conn_closed(struct daemon *d, struct conn *c) {
  struct node_job *nj = c->job->role_data;
  (void)d;
  rdzv__waits_drop_conn(&nj->waits, c);
  rdzv__copies_conn_closed(&nj->holders, c);
  rdzv__node_colls_drop_conn(nj, c);
  rdzv__node_conn_closed(nj, c);
}

static void node_job_free(struct daemon *d, struct job *j) {
  struct node_job *nj = j->role_data;
  if (nj == NULL)
    return;
  /* A clean end (the linger passed, not a stop): the parent hears that
   * this node leaves, before its connection closes. */
  bool clean = !d->stopping;
  if (clean)
    rdzv__node_joins_leave(nj);
  /* Child nodes' copies first: their callbacks acknowledge up. */
  rdzv__node_copies_free(nj);
  /* Upstream callbacks run (with RDZV_ECANCELED) and release their
   * requests before the tables go. */
  rdzv__upstream_destroy(nj->up, clean);
  rdzv__waits_clear(&nj->waits);
  rdzv__node_reads_free(nj);
  rdzv__node_joins_free(nj);
  struct nadd *ad, *at;
  HASH_ITER (hh, nj->adds, ad, at) {
    HASH_DEL(nj->adds, ad);
    rdzv__node_lreqs_free(ad->pending);
    rdzv__defer_cancel(d, &ad->due);
    uv_close((uv_handle_t *)&ad->timer, on_nadd_closed);
  }
  rdzv__node_colls_free(nj);
  rdzv__kv_clear(&nj->cache);
  free(nj);
  j->role_data = NULL;
}

/* /readyz's node checks, each over every job's link to the parent (a
 * node connects for a job at its first request: with no job yet,
 * nothing is down), failed naming the first job that fails it:
 *  - "parent": the link is up;
 *  - "root_reachable": and the parent's pings say its own link toward
 *    the root is up (so on up the tree, a heartbeat a level);
 *  - "not_fenced": the parent has not declared this node lost or refused
 *    a request of it as stale, or has accepted a request since. */
static void node_checks(struct daemon *d, struct rdzv_checks *cs) {
  static const char *const names[] = {"parent", "root_reachable", "not_fenced"};
  char why[3][400] = {"", "", ""};
  int bad[3] = {0, 0, 0};
  for (struct job *j = d->jobs; j != NULL; j = j->next) {
    struct node_job *nj = j->role_data;
    if (nj == NULL || nj->up == NULL)
      continue;
    char w[360];
    for (int k = 0; k < 3; k++) {
      bool ok = k == 0   ? rdzv__upstream_attached(nj->up, w, sizeof(w))
                : k == 1 ? rdzv__upstream_root_reachable(nj->up, w, sizeof(w))
                         : !rdzv__upstream_fenced(nj->up, w, sizeof(w));
      if (!ok && bad[k]++ == 0)
        snprintf(why[k], sizeof(why[k]), "%.40s: %.350s", nj->what, w);
    }
  }
  for (int k = 0; k < 3; k++)
    rdzv__check_add(cs, names[k], bad[k] == 0, "node %s: %s%s", d->cfg.name,
                    why[k], bad[k] > 1 ? " (and more jobs)" : "");
}

/* "links": for the job asked about (or every job, at most 256), where
 * its link to the parent goes: {"parent": address in use, "hops": 0 on
 * the parent, k on the k-th ancestor above it, "state": the link's}. */
static void node_status(struct daemon *d, const struct job *only, void *out) {
  json_t *o = out, *links = json_object();
  uint32_t n = 0;
  for (const struct job *j = d->jobs; j != NULL && n < 256; j = j->next) {
    const struct node_job *nj = j->role_data;
    if ((only != NULL && j != only) || nj == NULL || nj->up == NULL)
      continue;
    uint32_t hops = 0;
    const char *state = "";
    const char *addr = rdzv__upstream_where(nj->up, &hops, &state);
    struct rdzv_home_counts hc;
    rdzv__upstream_home_counts(nj->up, &hc);
    json_object_set_new(links, j->id,
                        json_pack("{s:s,s:I,s:s,s:I,s:I,s:I,s:I}", "parent",
                                  addr, "hops", (json_int_t)hops, "state",
                                  state, "home_failed", (json_int_t)hc.failed,
                                  "home_not_ready", (json_int_t)hc.not_ready,
                                  "home_deferred", (json_int_t)hc.deferred,
                                  "home_wait_ms", (json_int_t)hc.wait_ms));
    n++;
  }
  json_object_set_new(o, "links", links);
}

/* A node's probe asks whether one of job j's links may come back here:
 * yes when this node's own link of j reaches the root as far as it
 * knows (attached, its parent not saying otherwise). A job it holds
 * nothing of (j NULL, or no link yet): any of its links that does; with
 * none at all, whether its parent answered its probe at start (a node
 * restarted under a parent still dead says no, instead of taking a link
 * back that it could not carry). */
static bool node_probe_ready(struct daemon *d, struct job *j) {
  const struct node_job *nj = j != NULL ? j->role_data : NULL;
  if (nj != NULL && nj->up != NULL)
    return rdzv__upstream_root_reachable(nj->up, NULL, 0);
  bool any = false;
  for (const struct job *k = d->jobs; k != NULL; k = k->next) {
    const struct node_job *kj = k->role_data;
    if (kj == NULL || kj->up == NULL)
      continue;
    if (rdzv__upstream_root_reachable(kj->up, NULL, 0))
      return true;
    any = true;
  }
  return !any && d->parent_answered;
}

const struct rdzv_role rdzv__node_role = {
    "node",
    node_handle,
    node_conn_closed,
    node_hello_epoch,
    node_job_free,
    NULL,
    rdzv__node_copies_ping,
    node_checks,
    node_status,
    node_probe_ready,
};
