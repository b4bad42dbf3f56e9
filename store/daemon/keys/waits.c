/* Waits on keys: see waits.h. */
#include "store/daemon/keys/waits.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "store/daemon/transport/transport.h"

/* One key a waiter still needs, linked on that key's watch. */
struct waitref {
  struct waiter *w;
  bool linked;
  TAILQ_ENTRY(waitref) link;
};
TAILQ_HEAD(waitref_list, waitref);

struct watch {
  UT_hash_handle hh;
  uint8_t *key;
  uint32_t klen;
  struct waitref_list refs;
};

/* The waiters of one connection, so that its close drops them at once. */
struct conn_waiters {
  UT_hash_handle hh;
  struct conn *c;
  struct waiter_list list; /* by waiter.conn_link */
};

struct waiter {
  struct waitset *ws;
  struct conn *c;
  struct conn_waiters *by_conn; /* NULL if it could not be indexed */
  TAILQ_ENTRY(waiter) conn_link;
  uint32_t req_id;
  uint32_t nkeys;
  uint32_t nmissing;
  uint64_t seq;   /* the waitset's count when it registered */
  bool want_copy; /* a child node asked for copies (RDZV_F_COPY) */
  uint64_t deadline_ms;
  struct rdzv_slice *keys; /* copies, in one block with the struct */
  struct waitref *refs;
  uv_timer_t timer;
  TAILQ_ENTRY(waiter) link;
};

void rdzv__waits_init(struct waitset *ws, uv_loop_t *loop,
                      const struct waits_hooks *hooks, void *ctx) {
  memset(ws, 0, sizeof(*ws));
  ws->loop = loop;
  ws->hooks = *hooks;
  ws->ctx = ctx;
  TAILQ_INIT(&ws->waiters);
}

static void on_waiter_closed(uv_handle_t *h) {
  struct waiter *w = h->data;
  rdzv__conn_unref(w->c);
  free(w);
}

static void unlink_ref(struct waitset *ws, struct waiter *w, uint32_t i) {
  struct waitref *r = &w->refs[i];
  if (!r->linked)
    return;
  struct watch *wt = NULL;
  HASH_FIND(hh, ws->watches, w->keys[i].p, w->keys[i].n, wt);
  if (wt != NULL) {
    TAILQ_REMOVE(&wt->refs, r, link);
    if (TAILQ_EMPTY(&wt->refs)) {
      HASH_DEL(ws->watches, wt);
      free(wt->key);
      free(wt);
    }
  }
  r->linked = false;
}

/* Indexes w under its connection (best effort: without memory it is
 * only not dropped early). */
static void index_by_conn(struct waitset *ws, struct waiter *w) {
  struct conn_waiters *b = NULL;
  HASH_FIND_PTR(ws->by_conn, &w->c, b);
  if (b == NULL) {
    b = calloc(1, sizeof(*b));
    if (b == NULL)
      return;
    b->c = w->c;
    TAILQ_INIT(&b->list);
    HASH_ADD_PTR(ws->by_conn, c, b);
  }
  TAILQ_INSERT_TAIL(&b->list, w, conn_link);
  w->by_conn = b;
}

static void waiter_free(struct waiter *w) {
  struct waitset *ws = w->ws;
  for (uint32_t i = 0; i < w->nkeys; i++)
    unlink_ref(ws, w, i);
  TAILQ_REMOVE(&ws->waiters, w, link);
  struct conn_waiters *b = w->by_conn;
  if (b != NULL) {
    TAILQ_REMOVE(&b->list, w, conn_link);
    if (TAILQ_EMPTY(&b->list)) {
      HASH_DEL(ws->by_conn, b);
      free(b);
    }
    w->by_conn = NULL;
  }
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

/* Replies OK with the keys' values and write-once bits, written from the
 * blobs that hold the values. */
static void reply_ok(struct waiter *w) {
  struct waitset *ws = w->ws;
  struct rdzv_slice one,
      *vals = w->nkeys == 1 ? &one : calloc(w->nkeys, sizeof(*vals));
  struct rdzv_blob *oneb = NULL,
                   **blobs =
                       w->nkeys == 1 ? &oneb : calloc(w->nkeys, sizeof(*blobs));
  uint32_t nblobs = 0;
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = RDZV_MSG_WAIT;
  r.req_id = w->req_id;
  for (uint32_t i = 0; vals != NULL && i < w->nkeys; i++) {
    bool wo = false;
    struct rdzv_blob *b = NULL;
    ws->hooks.value(ws->ctx, w->keys[i].p, w->keys[i].n, &vals[i], &wo, &b);
    if (b != NULL && blobs != NULL)
      blobs[nblobs++] = b;
    if (wo && i < 63)
      r.a |= (int64_t)1 << i;
  }
  if (vals != NULL) {
    r.vals.n = w->nkeys;
    r.vals.v = vals;
  }
  if (w->want_copy && ws->hooks.grant != NULL &&
      ws->hooks.grant(ws->ctx, w->c, w->keys, w->nkeys))
    r.flags |= RDZV_F_COPY;
  rdzv__conn_reply_shared(w->c, &r, blobs, blobs != NULL ? nblobs : 0);
  if (vals != &one)
    free(vals);
  if (blobs != &oneb)
    free(blobs);
}

static void reply_missing(struct waiter *w, int status) {
  struct rdzv_slice *missing = calloc(w->nkeys, sizeof(*missing));
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = RDZV_MSG_WAIT;
  r.req_id = w->req_id;
  r.status = status;
  uint32_t n = 0;
  for (uint32_t i = 0; missing != NULL && i < w->nkeys; i++)
    if (w->refs[i].linked)
      missing[n++] = w->keys[i];
  r.keys.n = n;
  r.keys.v = missing;
  rdzv__conn_reply(w->c, &r);
  free(missing);
}

static void on_wait_timeout(uv_timer_t *t) {
  struct waiter *w = t->data;
  reply_missing(w, RDZV_EDEADLINE);
  waiter_free(w);
}

void rdzv__waits_notify(struct waitset *ws, const uint8_t *k, uint32_t klen) {
  struct watch *wt = NULL;
  HASH_FIND(hh, ws->watches, k, klen, wt);
  if (wt == NULL)
    return;
  HASH_DEL(ws->watches, wt);
  struct waitref *r;
  while ((r = TAILQ_FIRST(&wt->refs)) != NULL) {
    TAILQ_REMOVE(&wt->refs, r, link);
    r->linked = false;
    struct waiter *w = r->w;
    if (--w->nmissing == 0) {
      reply_ok(w);
      waiter_free(w);
    }
  }
  free(wt->key);
  free(wt);
}

void rdzv__waits_notify_upto(struct waitset *ws, const uint8_t *k,
                             uint32_t klen, uint64_t upto) {
  struct watch *wt = NULL;
  HASH_FIND(hh, ws->watches, k, klen, wt);
  if (wt == NULL)
    return;
  /* Completing a waiter unlinks its other refs (never this watch's
   * others: it waits on each key once), but may free this watch when it
   * empties: collect the ones due first. */
  struct waitref *r, *next;
  struct waitref_list due;
  TAILQ_INIT(&due);
  for (r = TAILQ_FIRST(&wt->refs); r != NULL; r = next) {
    next = TAILQ_NEXT(r, link);
    if (r->w->seq > upto)
      continue;
    TAILQ_REMOVE(&wt->refs, r, link);
    TAILQ_INSERT_TAIL(&due, r, link);
  }
  if (TAILQ_EMPTY(&wt->refs)) {
    HASH_DEL(ws->watches, wt);
    free(wt->key);
    free(wt);
  }
  while ((r = TAILQ_FIRST(&due)) != NULL) {
    TAILQ_REMOVE(&due, r, link);
    r->linked = false;
    struct waiter *w = r->w;
    if (--w->nmissing == 0) {
      reply_ok(w);
      waiter_free(w);
    }
  }
}

uint64_t rdzv__waits_seq(const struct waitset *ws) { return ws->seq; }

void rdzv__waits_fail_key(struct waitset *ws, const uint8_t *k, uint32_t klen,
                          int status, const char *text) {
  struct watch *wt = NULL;
  struct waitref *r;
  struct rdzv_slice t = {(const uint8_t *)text,
                         text ? (uint32_t)strlen(text) : 0};
  HASH_FIND(hh, ws->watches, k, klen, wt);
  /* Each failed waiter unlinks all its refs, possibly freeing wt, so look
   * the watch up again after each one. */
  while (wt != NULL && (r = TAILQ_FIRST(&wt->refs)) != NULL) {
    if (t.n > 0) {
      rdzv__conn_answer_text(r->w->c, RDZV_MSG_WAIT, r->w->req_id, status,
                             (const char *)t.p, t.n);
    } else {
      reply_missing(r->w, status);
    }
    waiter_free(r->w);
    wt = NULL;
    HASH_FIND(hh, ws->watches, k, klen, wt);
  }
}

uint64_t rdzv__waits_deadline(struct waitset *ws, const uint8_t *k,
                              uint32_t klen) {
  struct watch *wt = NULL;
  HASH_FIND(hh, ws->watches, k, klen, wt);
  uint64_t max = 0;
  struct waitref *r;
  if (wt != NULL)
    TAILQ_FOREACH (r, &wt->refs, link)
      if (r->w->deadline_ms > max)
        max = r->w->deadline_ms;
  return max;
}

static struct waiter *waiter_new(struct waitset *ws, struct conn *c,
                                 const struct rdzv_msg *m) {
  size_t keybytes = 0, pos = 0;
  struct rdzv_slice k;
  while (rdzv_items_next(&m->keys, &pos, &k))
    keybytes += k.n;
  size_t sz = sizeof(struct waiter) + m->keys.n * sizeof(struct rdzv_slice) +
              m->keys.n * sizeof(struct waitref) + keybytes;
  struct waiter *w = calloc(1, sz);
  if (w == NULL)
    return NULL;
  w->keys = (struct rdzv_slice *)(w + 1);
  w->refs = (struct waitref *)(w->keys + m->keys.n);
  uint8_t *p = (uint8_t *)(w->refs + m->keys.n);
  w->ws = ws;
  w->nkeys = m->keys.n;
  w->c = c;
  w->req_id = m->req_id;
  w->seq = ++ws->seq;
  w->want_copy = (m->flags & RDZV_F_COPY) != 0;
  w->deadline_ms = uv_now(ws->loop) + (uint64_t)m->a;
  pos = 0;
  for (uint32_t i = 0; rdzv_items_next(&m->keys, &pos, &k); i++) {
    memcpy(p, k.p, k.n);
    w->keys[i].p = p;
    w->keys[i].n = k.n;
    w->refs[i].w = w;
    p += k.n;
  }
  return w;
}

/* Links ref onto key's watch; returns 1 if the watch is new, 0 if it
 * existed, RDZV_ENOMEM. */
static int watch_key(struct waitset *ws, struct waitref *r,
                     const struct rdzv_slice *k) {
  struct watch *wt = NULL;
  int created = 0;
  HASH_FIND(hh, ws->watches, k->p, k->n, wt);
  if (wt == NULL) {
    wt = calloc(1, sizeof(*wt));
    if (wt == NULL || (wt->key = malloc(k->n ? k->n : 1)) == NULL) {
      free(wt);
      return RDZV_ENOMEM;
    }
    memcpy(wt->key, k->p, k->n);
    wt->klen = k->n;
    TAILQ_INIT(&wt->refs);
    HASH_ADD_KEYPTR(hh, ws->watches, wt->key, wt->klen, wt);
    created = 1;
  }
  TAILQ_INSERT_TAIL(&wt->refs, r, link);
  r->linked = true;
  return created;
}

int rdzv__waits_add(struct waitset *ws, struct conn *c,
                    const struct rdzv_msg *m) {
  struct waiter *w = waiter_new(ws, c, m);
  if (w == NULL) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, RDZV_ENOMEM);
    rdzv__conn_reply(c, &r);
    return RDZV_ENOMEM;
  }
  rdzv__conn_ref(c);
  uv_timer_init(ws->loop, &w->timer);
  w->timer.data = w;
  TAILQ_INSERT_TAIL(&ws->waiters, w, link);
  index_by_conn(ws, w);
  /* Count first, then tell the role what is missing: it may answer
   * synchronously (e.g. from a cache) and must see a complete waiter. */
  for (uint32_t i = 0; i < w->nkeys; i++) {
    if (ws->hooks.present(ws->ctx, w->keys[i].p, w->keys[i].n))
      continue;
    w->nmissing++;
    /* Out of memory it stays unlinked: only its deadline ends it. */
    (void)watch_key(ws, &w->refs[i], &w->keys[i]);
  }
  uint32_t missing = w->nmissing;
  if (missing == 0) {
    reply_ok(w);
    waiter_free(w);
    return 0;
  }
  uv_timer_start(&w->timer, on_wait_timeout, (uint64_t)m->a, 0);
  uint64_t deadline = w->deadline_ms;
  /* w may complete in the hook (answered from a cache): its memory lasts
   * until its timer's close completes, on a later loop iteration, so its
   * key bytes stay valid here; which keys it lacks is read first. */
  struct rdzv_slice *keys = NULL;
  uint32_t nk = 0;
  if (ws->hooks.missing != NULL &&
      (keys = calloc(missing, sizeof(*keys))) != NULL) {
    for (uint32_t i = 0; i < w->nkeys; i++)
      if (w->refs[i].linked)
        keys[nk++] = w->keys[i];
  }
  if (ws->hooks.missing != NULL && keys == NULL) {
    /* Out of memory: the waiter waits on, asked of nobody, until its
     * deadline. */
    return (int)missing;
  }
  if (keys != NULL)
    ws->hooks.missing(ws->ctx, keys, nk, deadline);
  free(keys);
  return (int)missing;
}

void rdzv__waits_drop_conn(struct waitset *ws, struct conn *c) {
  struct conn_waiters *b = NULL;
  /* Each free may free the bucket: look it up again every time. */
  for (;;) {
    b = NULL;
    HASH_FIND_PTR(ws->by_conn, &c, b);
    if (b == NULL)
      return;
    waiter_free(TAILQ_FIRST(&b->list));
  }
}

void rdzv__waits_clear(struct waitset *ws) {
  struct waiter *w;
  while ((w = TAILQ_FIRST(&ws->waiters)) != NULL)
    waiter_free(w);
}

void rdzv__waits_fail_prefix(struct waitset *ws, const uint8_t *prefix,
                             uint32_t plen, int status, const char *text) {
  struct watch *wt, *tmp;
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  bool again = true;
  /* Failing a waiter may free watches other than the current one, so
   * restart the walk after each. */
  while (again) {
    again = false;
    HASH_ITER (hh, ws->watches, wt, tmp) {
      if (wt->klen < plen || memcmp(wt->key, prefix, plen) != 0)
        continue;
      struct waiter *w = TAILQ_FIRST(&wt->refs)->w;
      struct rdzv_msg r;
      memset(&r, 0, sizeof(r));
      r.type = RDZV_MSG_WAIT;
      r.req_id = w->req_id;
      r.status = status;
      r.keys.n = t.n > 0 ? 1 : 0;
      r.keys.v = &t;
      rdzv__conn_reply(w->c, &r);
      waiter_free(w);
      again = true;
      break;
    }
  }
}
