/* Barriers and gathers at a node: contributions of the subtree are
 * combined and forwarded as one request, each member counted once by its
 * id, as soon as the subtree's last contribution has arrived. The node
 * knows when that is if the collective tells who its members are (keys[1],
 * rendezvous/members.h) and the generation named in its key completed its
 * join through this node: then it knows which of those members are ranks
 * of its subtree. Otherwise (or while some are missing) it forwards after
 * --flush-ms of quiet, at most --flush-max-ms after the first held
 * contribution; when it knows, only the latter bounds the wait for a
 * member that went elsewhere. The parent's answer fans out to every local
 * requester; COLL_STATUS is asked of the root after sending up what is
 * held here. */
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rendezvous/join_wire.h"
#include "rendezvous/members.h"
#include "store/daemon/node/node_int.h"

struct ncoll { /* combined contributions to one barrier or gather */
  UT_hash_handle hh;
  struct node_job *nj;
  uint8_t *name; /* type byte + name */
  uint32_t nlen;
  uint8_t type;
  uint64_t count;
  uint64_t seen;           /* contributions that passed through here */
  struct rdzv_buf pending; /* encoded items not yet forwarded */
  uint32_t npending;
  struct lreq *waiters;
  bool done;
  /* The result (a gather's contributions), held once: a reference to
   * the parent's reply it came in (or a copy), written from there to
   * every member (NULL: none yet). */
  struct rdzv_blob *result;
  struct rdzv_slice result_at; /* its bytes, inside result */
  uint64_t first_ms;
  uv_timer_t timer;
  uint8_t *spec; /* keys[1] as the first contribution that had one told it */
  uint32_t spec_len;
  struct rdzv_members *members; /* spec decoded (NULL: none, or bad) */
  int64_t expected; /* contributors in this subtree (-1: not known) */
  uint64_t expected_ver;
};

static void coll_flush(struct ncoll *co);

static void coll_answer_all(struct ncoll *co, const struct rdzv_msg *r) {
  struct lreq *l;
  while ((l = co->waiters) != NULL) {
    co->waiters = l->next;
    rdzv__node_lreq_answer(l, co->type, r);
  }
}

static void on_coll_reply(struct daemon *d, const struct rdzv_msg *r,
                          void *arg) {
  struct ncoll *co = arg;
  if (r->flags & RDZV_F_SUPERSEDED)
    return; /* a newer request of ours carries the result */
  if (r->status != 0) {
    coll_answer_all(co, r);
    return;
  }
  if (!co->done) {
    co->done = true;
    struct rdzv_blob *fb = d->frame_blob;
    const uint8_t *p = r->vals.raw;
    size_t n = r->vals.raw_len;
    if (n > 0 && fb != NULL && rdzv__blob_holds(fb, p, n)) {
      co->result = rdzv__blob_ref(fb);
    } else if (n > 0 && (co->result = rdzv__blob_new(p, (uint32_t)n)) != NULL) {
      p = co->result->data;
    }
    co->result_at.p = co->result != NULL ? p : NULL;
    co->result_at.n = co->result != NULL ? (uint32_t)n : 0;
    co->npending = 0;
    co->pending.len = 0;
  }
  struct rdzv_msg out = *r;
  out.vals.raw = co->result_at.p;
  out.vals.raw_len = co->result_at.n;
  coll_answer_all(co, &out);
}

static void coll_reply_done(struct ncoll *co, struct conn *c,
                            const struct rdzv_msg *m) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  r.a = (int64_t)co->count;
  if (co->type == RDZV_MSG_GATHER) {
    r.vals.n = (uint32_t)co->count;
    r.vals.raw = co->result_at.p;
    r.vals.raw_len = co->result_at.n;
  }
  co->nj->d->stats.ops[co->type].local++;
  rdzv__conn_reply_shared(c, &r, &co->result, co->result != NULL ? 1 : 0);
}

static void coll_flush(struct ncoll *co) {
  struct node_job *nj = co->nj;
  uv_timer_stop(&co->timer);
  if (co->npending == 0 || co->done)
    return;
  struct rdzv_slice name = {co->name + 1, co->nlen - 1};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = co->type;
  m.b = (int64_t)co->count;
  struct rdzv_slice keys[2] = {name, {co->spec, co->spec_len}};
  m.keys.n = co->spec != NULL ? 2 : 1;
  m.keys.v = keys;
  m.vals.n = co->npending;
  m.vals.raw = co->pending.data;
  m.vals.raw_len = co->pending.len;
  /* A failure comes back through on_coll_reply, with its reason. */
  rdzv__upstream_send_split(nj->up, &m, NULL, on_coll_reply, co);
  co->npending = 0;
  co->pending.len = 0;
}

static void on_coll_timer(uv_timer_t *t) { coll_flush(t->data); }

/* Keeps who the members are (keys[1] of m) for this collective and for
 * the requests it sends up. A spec that does not decode is passed on
 * unchanged (the parent may read it otherwise) but tells this node nothing. */
static void learn_members(struct ncoll *co, const struct rdzv_msg *m) {
  struct rdzv_slice sp;
  if (rdzv_items_get(&m->keys, 1, &sp) < 0 || sp.n == 0 ||
      sp.n > RDZV_MEMBERS_MAX_BYTES || (co->spec = malloc(sp.n)) == NULL)
    return;
  memcpy(co->spec, sp.p, sp.n);
  co->spec_len = sp.n;
  struct rdzv_members *mb = malloc(sizeof(*mb));
  if (mb != NULL && rdzv_members_decode(sp.p, sp.n, mb) == 0)
    co->members = mb;
  else
    free(mb);
}

/* The combined collective of that type and name (keys[0] of a BARRIER,
 * GATHER or COLL_STATUS); if absent, created with count when create is
 * set, else NULL (NULL also when out of memory). */
static struct ncoll *ncoll_lookup(struct node_job *nj, uint8_t type,
                                  const struct rdzv_msg *m, bool create,
                                  uint64_t count) {
  struct rdzv_slice name;
  rdzv_items_get(&m->keys, 0, &name);
  uint32_t nlen = name.n + 1;
  uint8_t *key = malloc(nlen);
  if (key == NULL)
    return NULL;
  key[0] = type;
  memcpy(key + 1, name.p, name.n);
  struct ncoll *co = NULL;
  HASH_FIND(hh, nj->colls, key, nlen, co);
  if (co != NULL || !create) {
    free(key);
    return co;
  }
  co = calloc(1, sizeof(*co));
  if (co == NULL) {
    free(key);
    return NULL;
  }
  co->name = key;
  co->nlen = nlen;
  co->type = type;
  co->count = count;
  co->expected = -1;
  co->nj = nj;
  uv_timer_init(nj->d->loop, &co->timer);
  co->timer.data = co;
  HASH_ADD_KEYPTR(hh, nj->colls, co->name, co->nlen, co);
  return co;
}

/* A child node's older request is answered "superseded": only its newest
 * request will carry the result (one result per child, not per batch). */
static void supersede(struct ncoll *co, struct conn *c) {
  if (c->role != RDZV_ROLE_NODE)
    return;
  for (struct lreq **pp = &co->waiters; *pp != NULL; pp = &(*pp)->next) {
    struct lreq *old = *pp;
    if (old->c != c)
      continue;
    *pp = old->next;
    struct rdzv_msg r;
    memset(&r, 0, sizeof(r));
    r.type = co->type;
    r.req_id = old->req_id;
    r.flags = RDZV_F_SUPERSEDED;
    rdzv__conn_reply(c, &r);
    rdzv__conn_unref(c);
    free(old);
    return;
  }
}

void rdzv__node_collective(struct node_job *nj, struct conn *c,
                           const struct rdzv_msg *m) {
  struct ncoll *co = ncoll_lookup(nj, m->type, m, true, (uint64_t)m->b);
  if (co == NULL) {
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->count != (uint64_t)m->b && co->done) {
    rdzv__node_reply_status(c, m, RDZV_ECOUNT_MISMATCH);
    return;
  }
  if (co->count != (uint64_t)m->b) {
    /* Up as it is: the root fails every member of the collective, ours
     * included, with both counts (one side alone cannot complete). */
    rdzv__node_forward(nj, c, m);
    return;
  }
  if (co->done) {
    coll_reply_done(co, c, m);
    return;
  }
  struct lreq *l = rdzv__node_lreq_new(c, m->req_id);
  if (l == NULL ||
      rdzv_buf_append(&co->pending, m->vals.raw, m->vals.raw_len) < 0) {
    if (l != NULL) {
      rdzv__conn_unref(c);
      free(l);
    }
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  if (co->npending == 0)
    co->first_ms = rdzv__now_ms(nj->d);
  else
    nj->d->stats.combined += m->vals.n;
  co->npending += m->vals.n;
  co->seen += m->vals.n;
  supersede(co, c);
  l->next = co->waiters;
  co->waiters = l;
  if (co->spec == NULL && m->keys.n > 1)
    learn_members(co, m);
  if (co->members != NULL) {
    struct rdzv_slice name = {co->name + 1, co->nlen - 1};
    int64_t n = rdzv__node_subtree_contributors(nj, name, co->members,
                                                co->count, &co->expected_ver);
    if (n != -2)
      co->expected = n;
  }
  /* The whole job, or this node's whole subtree, passed through here: no
   * point waiting any longer. */
  if (co->seen >= co->count ||
      (co->expected > 0 && co->seen >= (uint64_t)co->expected)) {
    if (co->seen < co->count)
      nj->d->stats.coll_subtree_flushes++;
    coll_flush(co);
  } else if (co->expected > 0) {
    if (co->npending == m->vals.n) /* the first held: the guard starts */
      uv_timer_start(&co->timer, on_coll_timer, nj->d->cfg.flush_max_ms, 0);
  } else {
    rdzv__node_schedule(nj->d, &co->timer, co->first_ms, on_coll_timer);
  }
}

/* COLL_STATUS: what this node holds of that collective goes up first, on
 * the same ordered link, so the root's answer counts it. */
void rdzv__node_coll_status(struct node_job *nj, struct conn *c,
                            const struct rdzv_msg *m) {
  struct ncoll *co = ncoll_lookup(nj, (uint8_t)m->a, m, false, 0);
  if (co != NULL)
    coll_flush(co);
  rdzv__node_forward(nj, c, m);
}

void rdzv__node_colls_flush_round(struct node_job *nj, const uint8_t *round,
                                  size_t n) {
  struct ncoll *co, *ct;
  HASH_ITER (hh, nj->colls, co, ct) {
    const uint8_t *name;
    size_t nlen;
    int64_t g;
    if (co->npending > 0 &&
        rdzv_gen_key_parse(co->name + 1, co->nlen - 1, &name, &nlen, &g) == 0 &&
        nlen == n && memcmp(name, round, n) == 0)
      coll_flush(co);
  }
}

static void on_ncoll_closed(uv_handle_t *h) {
  struct ncoll *co = h->data;
  rdzv_buf_free(&co->pending);
  rdzv__blob_unref(co->result);
  free(co->name);
  free(co->spec);
  free(co->members);
  free(co);
}

void rdzv__node_colls_drop_conn(struct node_job *nj, struct conn *c) {
  struct ncoll *co, *ct;
  HASH_ITER (hh, nj->colls, co, ct) {
    struct lreq **pp = &co->waiters;
    while (*pp != NULL) {
      struct lreq *l = *pp;
      if (l->c != c) {
        pp = &l->next;
        continue;
      }
      *pp = l->next;
      rdzv__conn_unref(l->c);
      free(l);
    }
  }
}

void rdzv__node_colls_free(struct node_job *nj) {
  struct ncoll *co, *ct;
  HASH_ITER (hh, nj->colls, co, ct) {
    HASH_DEL(nj->colls, co);
    rdzv__node_lreqs_free(co->waiters);
    uv_close((uv_handle_t *)&co->timer, on_ncoll_closed);
  }
}
