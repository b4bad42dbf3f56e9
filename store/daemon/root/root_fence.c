/* The root's writes and copies held below (keys/copies.h): a write's
 * answer, and its waiters' wake-up, wait until every copy of its keys
 * below is invalidated; requests about those keys wait meanwhile (see
 * root_int.h). */
#include <stdlib.h>
#include <string.h>

#include "store/daemon/root/root_int.h"

/* A write's answer held until the copies of its keys held below are
 * invalidated (keys/copies.h): its fields copied, c referenced, and the
 * keys whose waiters it completes (raw item list). */
struct held_reply {
  struct root_job *s;
  struct conn *c;
  struct rdzv_msg r;
  struct rdzv_buf keys, vals, notify;
  uint32_t nnotify;
};

static void notify_items(struct root_job *s, const struct rdzv_items *it) {
  size_t pos = 0;
  struct rdzv_slice k;
  while (rdzv_items_next(it, &pos, &k))
    rdzv__waits_notify(&s->waits, k.p, k.n);
}

static void held_free(struct held_reply *h) {
  rdzv__conn_unref(h->c);
  rdzv_buf_free(&h->keys);
  rdzv_buf_free(&h->vals);
  rdzv_buf_free(&h->notify);
  free(h);
}

static void held_send(void *arg) {
  struct held_reply *h = arg;
  h->r.keys.raw = h->keys.data;
  h->r.keys.raw_len = h->keys.len;
  h->r.keys.v = NULL;
  h->r.vals.raw = h->vals.data;
  h->r.vals.raw_len = h->vals.len;
  h->r.vals.v = NULL;
  rdzv__conn_reply(h->c, &h->r);
  struct rdzv_items n = {h->nnotify, NULL, h->notify.data, h->notify.len};
  notify_items(h->s, &n);
  held_free(h);
}

/* The first n keys of items (or the one key k when items is NULL) as a
 * raw item list. */
static int keys_copy(const struct rdzv_items *items, struct rdzv_slice k,
                     uint32_t n, struct rdzv_buf *out) {
  if (items == NULL)
    return n > 0 ? rdzv_items_append(out, k.p, k.n) : 0;
  size_t pos = 0;
  struct rdzv_slice x;
  for (uint32_t i = 0; i < n && rdzv_items_next(items, &pos, &x); i++)
    if (rdzv_items_append(out, x.p, x.n) < 0)
      return RDZV_ENOMEM;
  return 0;
}

static struct held_reply *held_new(struct root_job *s, struct conn *c,
                                   const struct rdzv_msg *r,
                                   const struct rdzv_items *items,
                                   struct rdzv_slice k, uint32_t nnotify) {
  struct held_reply *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return NULL;
  h->s = s;
  h->r = *r;
  h->c = c;
  rdzv__conn_ref(c);
  h->nnotify = nnotify;
  if (rdzv__root_items_copy(&r->keys, &h->keys) < 0 ||
      rdzv__root_items_copy(&r->vals, &h->vals) < 0 ||
      keys_copy(items, k, nnotify, &h->notify) < 0) {
    held_free(h);
    return NULL;
  }
  return h;
}

/* Answers write r to c once the copies of the keys it changed (items, or
 * the one key k when items is NULL; none when changed is false) are
 * invalidated below, then completes the waiters of its first nnotify
 * keys: the new value is seen nowhere before every old copy is gone (the
 * keys are busy meanwhile: root_handle holds requests naming them). The
 * answer to an op id is kept at once. */
void rdzv__root_answer_write(struct root_job *s, struct conn *c,
                             struct rdzv_msg *r, const struct rdzv_items *items,
                             struct rdzv_slice k, bool changed,
                             uint32_t nnotify) {
  if (s->cur_op != 0 && r->req_id == s->cur_req) {
    rdzv__root_dedup_put(s, s->cur_op, r);
    s->cur_op = 0;
  }
  int rc = 0;
  if (changed && rdzv__copies_nholders(&s->copies) > 0) {
    struct held_reply *h = held_new(s, c, r, items, k, nnotify);
    if (h == NULL)
      rc = RDZV_ENOMEM;
    else if (items != NULL)
      rc = rdzv__copies_invalidate_items(&s->copies, items, 0, held_send, h);
    else
      rc = rdzv__copies_invalidate(&s->copies, &k, 1, 0, held_send, h);
    if (rc == 1)
      return;
    if (h != NULL)
      held_free(h);
  }
  if (rc < 0) {
    /* Applied, but not known to be visible everywhere: an outcome the
     * writer must treat as unknown. */
    struct rdzv_msg e = *r;
    e.status = RDZV_ENOMEM;
    e.keys.n = e.vals.n = 0;
    e.keys.raw_len = e.vals.raw_len = 0;
    e.keys.v = e.vals.v = NULL;
    rdzv__conn_reply(c, &e);
  } else {
    rdzv__conn_reply(c, r);
  }
  if (items != NULL) {
    size_t pos = 0;
    struct rdzv_slice x;
    for (uint32_t i = 0; i < nnotify && rdzv_items_next(items, &pos, &x); i++)
      rdzv__waits_notify(&s->waits, x.p, x.n);
  } else if (nnotify > 0) {
    rdzv__waits_notify(&s->waits, k.p, k.n);
  }
}

void rdzv__root_answer_status_write(struct root_job *s, struct conn *c,
                                    const struct rdzv_msg *m, int st,
                                    const struct rdzv_items *items,
                                    struct rdzv_slice k, bool changed,
                                    uint32_t nnotify) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, st);
  rdzv__root_answer_write(s, c, &r, items, k, changed, nnotify);
}

/* ---- requests about busy keys: held until their invalidation is done --- */

/* A request naming a key whose invalidation is waited for, kept as its
 * encoded frame until no key of it is busy. */
struct deferred {
  TAILQ_ENTRY(deferred) link;
  struct conn *c;
  struct rdzv_buf frame;
};

/* Requests about keys (their keys[] are keys of the job). */
static bool keyed(uint8_t type) {
  return type == RDZV_MSG_GET || type == RDZV_MSG_MGET ||
         type == RDZV_MSG_WAIT || type == RDZV_MSG_SET ||
         type == RDZV_MSG_CAS || type == RDZV_MSG_DELETE ||
         type == RDZV_MSG_MSET || type == RDZV_MSG_APPEND ||
         type == RDZV_MSG_ADD;
}

bool rdzv__root_blocked(struct root_job *s, const struct rdzv_msg *m) {
  bool any = s->copies.busy != NULL || s->copies.busy_all > 0;
  /* Counting or listing keys tells of every key: held while any is. */
  if (m->type == RDZV_MSG_NKEYS || m->type == RDZV_MSG_KEYS)
    return any;
  if (!keyed(m->type) || !any)
    return false;
  size_t pos = 0;
  struct rdzv_slice k;
  while (rdzv_items_next(&m->keys, &pos, &k))
    if (rdzv__copies_busy(&s->copies, k.p, k.n))
      return true;
  return false;
}

/* Holds m of c; false (nothing held) out of memory. */
bool rdzv__root_defer(struct root_job *s, struct conn *c,
                      const struct rdzv_msg *m) {
  struct deferred *x = calloc(1, sizeof(*x));
  if (x == NULL || rdzv_msg_encode(m, &x->frame) < 0) {
    free(x);
    return false;
  }
  x->c = c;
  rdzv__conn_ref(c);
  TAILQ_INSERT_TAIL(&s->deferred, x, link);
  return true;
}

static void deferred_free(struct deferred *x) {
  rdzv__conn_unref(x->c);
  rdzv_buf_free(&x->frame);
  free(x);
}

/* Keys stopped being busy: the requests held for them go, in the order
 * they came (one that makes a key busy again holds those after it). A
 * read or wait of a connection that closed meanwhile is dropped; a
 * write is applied (its node sends it again, applied once, op ids). */
void rdzv__root_undefer(void *arg) {
  struct root_job *s = arg;
  if (s->undeferring)
    return; /* the walk below sees what this call would */
  s->undeferring = true;
  struct deferred *x, *next;
  for (x = TAILQ_FIRST(&s->deferred); x != NULL; x = next) {
    next = TAILQ_NEXT(x, link);
    struct rdzv_msg m;
    size_t used = 0;
    if (rdzv_msg_decode(x->frame.data, x->frame.len, UINT32_MAX, &m, &used) <
        0) {
      TAILQ_REMOVE(&s->deferred, x, link);
      deferred_free(x);
      continue;
    }
    if (rdzv__root_blocked(s, &m))
      continue;
    TAILQ_REMOVE(&s->deferred, x, link);
    bool gone = !rdzv__conn_alive(x->c);
    bool read = m.type == RDZV_MSG_GET || m.type == RDZV_MSG_MGET ||
                m.type == RDZV_MSG_WAIT || m.type == RDZV_MSG_NKEYS ||
                m.type == RDZV_MSG_KEYS;
    if (!(gone && read))
      rdzv__root_handle(s->d, x->c, &m);
    deferred_free(x);
    next = TAILQ_FIRST(&s->deferred); /* handling may have changed it */
  }
  s->undeferring = false;
}

void rdzv__root_deferred_clear(struct root_job *s) {
  struct deferred *x;
  while ((x = TAILQ_FIRST(&s->deferred)) != NULL) {
    TAILQ_REMOVE(&s->deferred, x, link);
    deferred_free(x);
  }
}
