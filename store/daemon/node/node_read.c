/* A node's reads and waits: GET, MGET (TCPStore's CHECK and MULTI_GET)
 * and WAIT. Each is answered here when the write-once cache and the
 * valid copies of mutable keys (node_copies.c) hold every key it names;
 * otherwise it goes up as one request, with RDZV_F_COPY so that the
 * parent may grant copies of what it answers.
 *
 * Identical requests in flight (the same type and keys) are combined,
 * never answered by a reply that may predate them: a read that comes
 * while an identical one is in flight waits for the next one, which goes
 * up when the first is answered; only when the first came with granted
 * copies (and the lease runs) is it answered at once from them, as a read
 * after that reply would be. A read hinted write-once (RDZV_F_WRITE_ONCE)
 * joins the one in flight: such a key never changes once it exists.
 * Waits likewise: a multi-key wait goes up as one request, shared by
 * every identical wait; when it is answered without copies, only the
 * waiters that came before it was sent are completed by it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "store/daemon/node/node_int.h"

/* ---- reads ------------------------------------------------------------- */

struct nget { /* one read in flight (type and keys), and those after it */
  UT_hash_handle hh;
  struct node_job *nj;
  struct lreq *reqs; /* answered by the read in flight */
  struct lreq *next; /* came after it was sent: the next read's */
  uint16_t flags;    /* the request's flags (WRITE_ONCE) */
  uint32_t nkeys;
  uint32_t idlen; /* type byte, then the keys' raw item list */
  uint8_t id[];
};

static void send_read(struct nget *g);

/* Answers l with reply r; a child node that asked for a copy of what r
 * granted here is registered for it (keys of r's grant: grant/ngrant). */
static void answer_read(struct node_job *nj, struct lreq *l, uint8_t type,
                        const struct rdzv_msg *r, bool granted,
                        const struct rdzv_slice *grant, uint32_t ngrant) {
  struct rdzv_msg out = *r;
  out.flags &= (uint16_t)~RDZV_F_COPY;
  if (granted && l->copy && rdzv__node_copies_grant(nj, l->c, grant, ngrant))
    out.flags |= RDZV_F_COPY;
  rdzv__node_lreq_answer(l, type, &out);
}

/* The keys a granted reply covers (wire.h, RDZV_F_COPY): for MGET's
 * ENOKEY the ones it lists, otherwise the request's. *out is malloc'd. */
static uint32_t granted_keys(const struct nget *g, const struct rdzv_msg *r,
                             struct rdzv_slice **out) {
  struct rdzv_items req = {g->nkeys, NULL, g->id + 1, g->idlen - 1};
  const struct rdzv_items *it =
      g->id[0] == RDZV_MSG_MGET && r->status == RDZV_ENOKEY ? &r->keys : &req;
  *out = calloc(it->n ? it->n : 1, sizeof(**out));
  if (*out == NULL)
    return 0;
  size_t pos = 0;
  uint32_t n = 0;
  while (n < it->n && rdzv_items_next(it, &pos, &(*out)[n]))
    n++;
  return n;
}

static void on_read_reply(struct daemon *d, const struct rdzv_msg *r,
                          void *arg) {
  struct nget *g = arg;
  struct node_job *nj = g->nj;
  uint8_t type = g->id[0];
  (void)d;
  struct rdzv_slice *keys = NULL;
  uint32_t nk = 0;
  bool granted = false;
  /* What the reply lets this node keep: a write-once value for good; a
   * granted copy (of values, or of absences) until invalidated. */
  if (type == RDZV_MSG_GET && r->status == 0 && (r->a & 1)) {
    struct rdzv_slice k = {g->id + 5, g->idlen - 5}, v;
    if (rdzv_items_get(&r->vals, 0, &v) == 0)
      rdzv__node_cache_put(nj, k, v);
  } else if ((r->flags & RDZV_F_COPY) &&
             (r->status == 0 || r->status == RDZV_ENOKEY)) {
    nk = granted_keys(g, r, &keys);
    granted = keys != NULL;
    size_t pos = 0;
    for (uint32_t i = 0; granted && i < nk; i++) {
      struct rdzv_slice v;
      bool have = r->status == 0 && rdzv_items_next(&r->vals, &pos, &v);
      rdzv__node_copy_put(nj, keys[i], have ? &v : NULL);
    }
  }
  struct lreq *l;
  while ((l = g->reqs) != NULL) {
    g->reqs = l->next;
    answer_read(nj, l, type, r, granted, keys, nk);
  }
  /* Those that came after it was sent: from the copies it granted if
   * they are valid now (no write acknowledged since: it would have
   * waited for this node), else by the next read. */
  bool now = granted && rdzv__node_copies_valid(nj);
  /* A failure (the parent unreachable, the job ending) fails them too:
   * the next read would meet it again. */
  bool failed = r->status != 0 && r->status != RDZV_ENOKEY;
  if (now || failed) {
    while ((l = g->next) != NULL) {
      g->next = l->next;
      if (now)
        nj->d->stats.reads_combined++;
      answer_read(nj, l, type, r, granted, keys, nk);
    }
  }
  free(keys);
  if (g->next != NULL) {
    g->reqs = g->next;
    g->next = NULL;
    send_read(g);
    return;
  }
  HASH_DEL(nj->gets, g);
  free(g);
}

static void send_read(struct nget *g) {
  struct node_job *nj = g->nj;
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = g->id[0];
  m.flags = g->flags;
  if (nj->d->cfg.cache_mutable)
    m.flags |= RDZV_F_COPY;
  m.keys.n = g->nkeys;
  m.keys.raw = g->id + 1;
  m.keys.raw_len = g->idlen - 1;
  int rc = rdzv__upstream_send(nj->up, &m, on_read_reply, g);
  if (rc < 0) {
    struct rdzv_msg r;
    memset(&r, 0, sizeof(r));
    r.type = m.type;
    r.status = rc;
    on_read_reply(nj->d, &r, g); /* every one waiting fails with rc */
  }
}

/* Joins m to an identical read in flight, or sends it up. */
static void read_up(struct node_job *nj, struct conn *c,
                    const struct rdzv_msg *m) {
  struct rdzv_buf id = {0};
  uint8_t type = m->type;
  struct lreq *l = rdzv__node_lreq_new(c, m->req_id);
  size_t pos = 0;
  struct rdzv_slice k;
  bool ok = l != NULL && rdzv_buf_append(&id, &type, 1) == 0;
  while (ok && rdzv_items_next(&m->keys, &pos, &k))
    ok = rdzv_items_append(&id, k.p, k.n) == 0;
  if (!ok) {
    rdzv_buf_free(&id);
    if (l != NULL) {
      rdzv__conn_unref(c);
      free(l);
    }
    rdzv__node_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  l->copy = (m->flags & RDZV_F_COPY) != 0;
  struct nget *g = NULL;
  HASH_FIND(hh, nj->gets, id.data, id.len, g);
  if (g != NULL) {
    rdzv_buf_free(&id);
    nj->d->stats.coalesced++;
    if ((m->flags & RDZV_F_WRITE_ONCE) && type == RDZV_MSG_GET) {
      l->next = g->reqs; /* a write-once key: any answer is current */
      g->reqs = l;
    } else {
      l->next = g->next;
      g->next = l;
    }
    return;
  }
  g = calloc(1, sizeof(*g) + id.len);
  if (g == NULL) {
    rdzv_buf_free(&id);
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, RDZV_ENOMEM);
    rdzv__node_lreq_answer(l, m->type, &r);
    return;
  }
  g->nj = nj;
  g->reqs = l;
  g->flags = m->flags & RDZV_F_WRITE_ONCE;
  g->nkeys = m->keys.n;
  g->idlen = (uint32_t)id.len;
  memcpy(g->id, id.data, id.len);
  rdzv_buf_free(&id);
  HASH_ADD(hh, nj->gets, id, g->idlen, g);
  send_read(g);
}

/* Replies to GET/MGET m of c from what this node holds, granting c (a
 * child node that asked) copies of it. */
static void reply_held(struct node_job *nj, struct conn *c,
                       const struct rdzv_msg *m, struct rdzv_msg *r,
                       const struct rdzv_slice *grant, uint32_t ngrant,
                       struct rdzv_blob **blobs, uint32_t nblobs) {
  if ((m->flags & RDZV_F_COPY) && rdzv__node_copies_grant(nj, c, grant, ngrant))
    r->flags |= RDZV_F_COPY;
  rdzv__conn_reply_shared(c, r, blobs, nblobs);
}

void rdzv__node_get(struct node_job *nj, struct conn *c,
                    const struct rdzv_msg *m) {
  struct stats *st = &nj->d->stats;
  struct rdzv_slice k;
  rdzv_items_get(&m->keys, 0, &k);
  struct kv_entry *e = rdzv__kv_find(&nj->cache, k.p, k.n);
  if (e != NULL) { /* from the cache's one buffer, not a copy */
    struct rdzv_slice v = {e->val, e->vlen};
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, 0);
    r.a = 1;
    r.vals.n = 1;
    r.vals.v = &v;
    st->cache_hits++;
    st->ops[RDZV_MSG_GET].local++;
    rdzv__conn_reply_shared(c, &r, &e->blob, 1);
    return;
  }
  struct rdzv_slice v;
  struct rdzv_blob *b = NULL;
  int have = rdzv__node_copy_find(nj, k, &v, &b);
  if (have >= 0) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, have ? 0 : RDZV_ENOKEY);
    if (have) {
      r.vals.n = 1;
      r.vals.v = &v;
    }
    st->copy_hits++;
    st->ops[RDZV_MSG_GET].local++;
    reply_held(nj, c, m, &r, &k, 1, &b, b != NULL ? 1 : 0);
    return;
  }
  read_up(nj, c, m);
}

void rdzv__node_mget(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m) {
  uint32_t n = m->keys.n;
  struct rdzv_slice *vals = calloc(n, sizeof(*vals));
  struct rdzv_slice *keys = calloc(n, sizeof(*keys));
  struct rdzv_slice *missing = calloc(n, sizeof(*missing));
  struct rdzv_blob **blobs = calloc(n, sizeof(*blobs));
  size_t pos = 0;
  uint32_t i = 0, nmiss = 0, nblobs = 0, cached = 0;
  bool known = vals != NULL && keys != NULL && missing != NULL && blobs != NULL;
  while (known && rdzv_items_next(&m->keys, &pos, &keys[i])) {
    struct rdzv_slice k = keys[i];
    struct kv_entry *e = rdzv__kv_find(&nj->cache, k.p, k.n);
    if (e != NULL) {
      blobs[nblobs++] = e->blob;
      vals[i].p = e->val;
      vals[i++].n = e->vlen;
      cached++;
      continue;
    }
    struct rdzv_blob *b = NULL;
    int have = rdzv__node_copy_find(nj, k, &vals[i], &b);
    if (have < 0)
      known = false;
    else if (have == 0)
      missing[nmiss++] = k;
    else if (b != NULL)
      blobs[nblobs++] = b;
    i++;
  }
  if (!known) {
    free(vals);
    free(keys);
    free(missing);
    free(blobs);
    read_up(nj, c, m);
    return;
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, nmiss > 0 ? RDZV_ENOKEY : 0);
  if (nmiss > 0) {
    r.keys.n = nmiss;
    r.keys.v = missing;
  } else {
    r.vals.n = n;
    r.vals.v = vals;
  }
  nj->d->stats.cache_hits += cached;
  nj->d->stats.copy_hits += n - cached;
  nj->d->stats.ops[RDZV_MSG_MGET].local++;
  reply_held(nj, c, m, &r, nmiss > 0 ? missing : keys, nmiss > 0 ? nmiss : n,
             blobs, nmiss > 0 ? 0 : nblobs);
  free(vals);
  free(keys);
  free(missing);
  free(blobs);
}

void rdzv__node_reads_free(struct node_job *nj) {
  struct nget *g, *t;
  HASH_ITER (hh, nj->gets, g, t) {
    HASH_DEL(nj->gets, g);
    rdzv__node_lreqs_free(g->reqs);
    rdzv__node_lreqs_free(g->next);
    free(g);
  }
}

/* ---- waits: one upstream wait per set of keys -------------------------- */

/* An upstream wait in flight, by its keys (their raw item list): at most
 * one per set, whatever the local waiters do (a waiter that comes while
 * one is in flight rides on it; at its deadline it is asked again for
 * those still waiting). seq: the waitset's count when it was sent. */
struct upwait {
  UT_hash_handle hh; /* nj->upwaits */
  struct node_job *nj;
  uint64_t seq;
  uint32_t nkeys;
  uint32_t len;
  uint8_t raw[];
};

static void send_upwait(struct node_job *nj, const struct rdzv_slice *keys,
                        uint32_t n, uint64_t deadline_ms);

/* Asks again, for the keys of uw that still have waiters, with the
 * latest of their deadlines if it is still ahead. */
static void upwait_again(struct node_job *nj, const struct upwait *uw) {
  struct rdzv_items it = {uw->nkeys, NULL, uw->raw, uw->len};
  struct rdzv_slice *left = calloc(uw->nkeys ? uw->nkeys : 1, sizeof(*left));
  if (left == NULL)
    return; /* they end at their deadlines */
  uint64_t dl = 0;
  uint32_t n = 0;
  size_t pos = 0;
  struct rdzv_slice k;
  while (rdzv_items_next(&it, &pos, &k)) {
    uint64_t kd = rdzv__waits_deadline(&nj->waits, k.p, k.n);
    if (kd == 0)
      continue; /* no waiter left on it */
    left[n++] = k;
    if (kd > dl)
      dl = kd;
  }
  if (n > 0 && dl > rdzv__now_ms(nj->d))
    send_upwait(nj, left, n, dl);
  free(left);
}

static void on_upwait(struct daemon *d, const struct rdzv_msg *r, void *arg) {
  struct upwait *uw = arg;
  struct node_job *nj = uw->nj;
  HASH_DEL(nj->upwaits, uw);
  struct rdzv_items it = {uw->nkeys, NULL, uw->raw, uw->len};
  size_t pos = 0, vpos = 0;
  struct rdzv_slice k, v;
  if (r->status == 0) {
    bool granted = (r->flags & RDZV_F_COPY) != 0;
    for (uint32_t i = 0; rdzv_items_next(&it, &pos, &k); i++) {
      bool have = rdzv_items_next(&r->vals, &vpos, &v);
      if (have && i < 63 && ((r->a >> i) & 1))
        rdzv__node_cache_put(nj, k, v); /* write-once: for good */
      else if (granted && have)
        rdzv__node_copy_put(nj, k, &v);
    }
    /* With copies granted and the lease running every waiter may go (no
     * write completed since the parent answered: it would have waited
     * for this node); otherwise only those that came before this wait
     * went up (the keys existed while they waited), and the others ask
     * again. */
    bool all = granted && rdzv__node_copies_valid(nj);
    pos = 0;
    while (rdzv_items_next(&it, &pos, &k)) {
      if (all)
        rdzv__waits_notify(&nj->waits, k.p, k.n);
      else
        rdzv__waits_notify_upto(&nj->waits, k.p, k.n, uw->seq);
    }
    if (!all)
      upwait_again(nj, uw);
  } else if (r->status == RDZV_EDEADLINE) {
    /* Waiters that came later may still have time: ask again for them. */
    upwait_again(nj, uw);
  } else {
    /* The upstream failure's text (which daemon, why) in keys[0]. */
    char text[600] = "";
    struct rdzv_slice t;
    if (rdzv_items_get(&r->keys, 0, &t) == 0 && t.n > 0)
      snprintf(text, sizeof(text), "%.*s", (int)(t.n < 599 ? t.n : 599),
               (const char *)t.p);
    while (rdzv_items_next(&it, &pos, &k))
      rdzv__waits_fail_key(&nj->waits, k.p, k.n, r->status, text);
  }
  (void)d;
  free(uw);
}

static void send_upwait(struct node_job *nj, const struct rdzv_slice *keys,
                        uint32_t n, uint64_t deadline_ms) {
  struct rdzv_buf raw = {0};
  for (uint32_t i = 0; i < n; i++)
    if (rdzv_items_append(&raw, keys[i].p, keys[i].n) < 0) {
      rdzv_buf_free(&raw);
      for (uint32_t j = 0; j < n; j++)
        rdzv__waits_fail_key(&nj->waits, keys[j].p, keys[j].n, RDZV_ENOMEM,
                             "out of memory at the node");
      return;
    }
  struct upwait *uw = NULL;
  HASH_FIND(hh, nj->upwaits, raw.data, raw.len, uw);
  if (uw != NULL) {
    rdzv_buf_free(&raw);
    nj->d->stats.coalesced++;
    return; /* in flight already: it is asked again at its deadline */
  }
  uw = malloc(sizeof(*uw) + raw.len);
  if (uw == NULL) {
    rdzv_buf_free(&raw);
    for (uint32_t j = 0; j < n; j++)
      rdzv__waits_fail_key(&nj->waits, keys[j].p, keys[j].n, RDZV_ENOMEM,
                           "out of memory at the node");
    return;
  }
  uw->nj = nj;
  uw->seq = rdzv__waits_seq(&nj->waits);
  uw->nkeys = n;
  uw->len = (uint32_t)raw.len;
  memcpy(uw->raw, raw.data, raw.len);
  rdzv_buf_free(&raw);
  uint64_t now = rdzv__now_ms(nj->d);
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_WAIT;
  if (nj->d->cfg.cache_mutable)
    m.flags = RDZV_F_COPY;
  /* At most --upstream-wait-max-ms at once: at its end it is asked again
   * if a local waiter still needs it (on_upwait), so a wait whose waiters
   * all hung up (a TCPStore WAIT has a 24-day timeout) ends here and at
   * the parent within that time. */
  uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
  if (left > nj->d->cfg.upstream_wait_max_ms)
    left = nj->d->cfg.upstream_wait_max_ms;
  m.a = (int64_t)left;
  m.keys.n = n;
  m.keys.raw = uw->raw;
  m.keys.raw_len = uw->len;
  /* Listed first: the reply may come inside the send. */
  HASH_ADD(hh, nj->upwaits, raw, uw->len, uw);
  int rc = rdzv__upstream_send(nj->up, &m, on_upwait, uw);
  if (rc < 0) {
    HASH_DEL(nj->upwaits, uw);
    free(uw);
    for (uint32_t j = 0; j < n; j++)
      rdzv__waits_fail_key(&nj->waits, keys[j].p, keys[j].n, rc, "");
  }
}

static bool hook_present(void *ctx, const uint8_t *k, uint32_t klen) {
  struct node_job *nj = ctx;
  if (rdzv__kv_find(&nj->cache, k, klen) != NULL)
    return true;
  struct rdzv_slice ks = {k, klen}, v;
  struct rdzv_blob *b;
  return rdzv__node_copy_find(nj, ks, &v, &b) == 1;
}

static void hook_value(void *ctx, const uint8_t *k, uint32_t klen,
                       struct rdzv_slice *v, bool *write_once,
                       struct rdzv_blob **blob) {
  struct node_job *nj = ctx;
  struct kv_entry *e = rdzv__kv_find(&nj->cache, k, klen);
  *write_once = e != NULL;
  if (e != NULL) {
    v->p = e->val;
    v->n = e->vlen;
    *blob = e->blob;
    return;
  }
  /* A valid copy's value (none otherwise: a node's wait replies may
   * carry no values). */
  struct rdzv_slice ks = {k, klen};
  *blob = NULL;
  if (rdzv__node_copy_find(nj, ks, v, blob) != 1) {
    v->p = NULL;
    v->n = 0;
    *blob = NULL;
  }
}

static bool hook_grant(void *ctx, struct conn *c, const struct rdzv_slice *keys,
                       uint32_t n) {
  struct node_job *nj = ctx;
  if (c->role != RDZV_ROLE_NODE)
    return false;
  for (uint32_t i = 0; i < n; i++) {
    struct rdzv_slice v;
    struct rdzv_blob *b;
    if (rdzv__kv_find(&nj->cache, keys[i].p, keys[i].n) == NULL &&
        rdzv__node_copy_find(nj, keys[i], &v, &b) != 1)
      return false; /* answered without a valid copy of it here */
  }
  return rdzv__node_copies_grant(nj, c, keys, n);
}

static void hook_missing(void *ctx, const struct rdzv_slice *keys, uint32_t n,
                         uint64_t deadline_ms) {
  send_upwait(ctx, keys, n, deadline_ms);
}

const struct waits_hooks rdzv__node_wait_hooks = {hook_present, hook_value,
                                                  hook_grant, hook_missing};

void rdzv__node_wait(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m) {
  struct stats *st = &nj->d->stats;
  uint64_t before = st->ops[RDZV_MSG_WAIT].forwarded;
  int missing = rdzv__waits_add(&nj->waits, c, m);
  if (missing == 0)
    st->ops[RDZV_MSG_WAIT].local++;
  else if (missing > 0 && st->ops[RDZV_MSG_WAIT].forwarded == before)
    st->coalesced++;
}
