/* Copies of mutable keys held below a daemon: see copies.h. */
#include "store/daemon/keys/copies.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "store/daemon/transport/transport.h"

/* A write waiting for its invalidations; its keys are busy meanwhile
 * (raw item list; all: every key). */
struct cwait {
  uint32_t left; /* holders still to acknowledge or expire */
  copies_done_cb done;
  void *arg;
  bool all;
  bool busy; /* its keys were made busy */
  struct rdzv_buf keys;
  uint32_t nkeys;
};

struct busykey {
  UT_hash_handle hh;
  uint64_t count;
  uint32_t klen;
  uint8_t key[];
};

/* One invalidation a holder has not acknowledged yet: seq, or
 * PEND_EXPIRY (a holder whose connection closed: only its lease's end
 * releases it). Ascending seq per holder. */
#define PEND_EXPIRY UINT64_MAX
struct pend {
  uint64_t seq;
  struct cwait *w;
  struct pend *next;
};

struct holder {
  UT_hash_handle hh_conn; /* cp->by_conn, while live */
  UT_hash_handle hh_id;   /* cp->by_id, until forgotten */
  struct copies *cp;
  uint64_t id;
  struct conn *c;         /* referenced while live; NULL once closed */
  uint64_t issued;        /* invalidations issued to it (the newest's seq) */
  uint64_t acked;         /* ... that it acknowledged */
  struct rdzv_buf queued; /* keys not delivered yet (a raw item list) */
  uint32_t nqueued;
  bool queued_all;
  bool has_req; /* its INVAL request is held here */
  uint32_t req_id;
  uint64_t lease_until; /* loop ms: its lease's end as this daemon sees it */
  struct pend *pend, **pend_tail, *last;
  uv_timer_t *timer; /* at lease_until while pend is not empty */
  uint64_t mark;     /* invalidate: already counted for this write */
};

struct keyholders {
  UT_hash_handle hh;
  uint32_t n, cap;
  uint64_t *ids;
  uint32_t klen;
  uint8_t key[];
};

struct hotkey {
  UT_hash_handle hh;
  uint64_t at_ms;
  uint32_t klen;
  uint8_t key[];
};

static uint64_t now_ms(struct copies *cp) { return rdzv__now_ms(cp->d); }

static void on_timer_closed(uv_handle_t *h) { free(h); }

static void holder_forget(struct copies *cp, struct holder *h) {
  HASH_DELETE(hh_id, cp->by_id, h);
  if (h->c != NULL) {
    HASH_DELETE(hh_conn, cp->by_conn, h);
    rdzv__conn_unref(h->c);
  }
  rdzv_buf_free(&h->queued);
  if (h->timer != NULL) {
    uv_timer_stop(h->timer);
    uv_close((uv_handle_t *)h->timer, on_timer_closed);
  }
  free(h);
}

static int busy_add(struct copies *cp, const uint8_t *k, uint32_t klen) {
  struct busykey *b = NULL;
  HASH_FIND(hh, cp->busy, k, klen, b);
  if (b == NULL) {
    b = calloc(1, sizeof(*b) + klen);
    if (b == NULL)
      return RDZV_ENOMEM;
    b->klen = klen;
    memcpy(b->key, k, klen);
    HASH_ADD_KEYPTR(hh, cp->busy, b->key, b->klen, b);
  }
  b->count++;
  return 0;
}

static void busy_del(struct copies *cp, const uint8_t *k, uint32_t klen) {
  struct busykey *b = NULL;
  HASH_FIND(hh, cp->busy, k, klen, b);
  if (b != NULL && --b->count == 0) {
    HASH_DEL(cp->busy, b);
    free(b);
  }
}

bool rdzv__copies_busy(const struct copies *cp, const uint8_t *k,
                       uint32_t klen) {
  if (cp->busy_all > 0)
    return true;
  struct busykey *b = NULL;
  HASH_FIND(hh, cp->busy, k, klen, b);
  return b != NULL;
}

void rdzv__copies_on_idle(struct copies *cp, void (*idle)(void *arg),
                          void *arg) {
  cp->idle = idle;
  cp->idle_arg = arg;
}

/* w's keys busy (0), or RDZV_ENOMEM with none of them. */
static int wait_busy(struct copies *cp, struct cwait *w) {
  if (w->all) {
    cp->busy_all++;
    return 0;
  }
  struct rdzv_items it = {w->nkeys, NULL, w->keys.data, w->keys.len};
  size_t pos = 0;
  struct rdzv_slice k;
  uint32_t i = 0;
  for (; rdzv_items_next(&it, &pos, &k); i++)
    if (busy_add(cp, k.p, k.n) < 0)
      break;
  if (i == w->nkeys)
    return 0;
  pos = 0;
  for (uint32_t j = 0; j < i && rdzv_items_next(&it, &pos, &k); j++)
    busy_del(cp, k.p, k.n);
  return RDZV_ENOMEM;
}

static void wait_unbusy(struct copies *cp, struct cwait *w) {
  if (w->all) {
    cp->busy_all--;
    return;
  }
  struct rdzv_items it = {w->nkeys, NULL, w->keys.data, w->keys.len};
  size_t pos = 0;
  struct rdzv_slice k;
  while (rdzv_items_next(&it, &pos, &k))
    busy_del(cp, k.p, k.n);
}

static void wait_free(struct cwait *w) {
  rdzv_buf_free(&w->keys);
  free(w);
}

static void wait_release(struct copies *cp, struct cwait *w) {
  if (--w->left == 0) {
    copies_done_cb done = w->done;
    void *arg = w->arg;
    bool busy = w->busy;
    if (busy)
      wait_unbusy(cp, w);
    wait_free(w);
    if (done != NULL)
      done(arg);
    if (busy && cp->idle != NULL)
      cp->idle(cp->idle_arg);
  }
}

/* Releases h's pending invalidations with seq <= upto. */
static void release_upto(struct copies *cp, struct holder *h, uint64_t upto) {
  struct pend *p;
  while ((p = h->pend) != NULL && p->seq <= upto) {
    h->pend = p->next;
    if (h->pend == NULL) {
      h->pend_tail = &h->pend;
      h->last = NULL;
    }
    struct cwait *w = p->w;
    free(p);
    wait_release(cp, w); /* may run a callback that writes again */
  }
}

static void on_lease_end(uv_timer_t *t);

static void arm(struct copies *cp, struct holder *h) {
  if (h->timer == NULL) {
    h->timer = malloc(sizeof(*h->timer));
    if (h->timer == NULL)
      return; /* released at the next ack, or never: see on_lease_end */
    uv_timer_init(cp->d->loop, h->timer);
    h->timer->data = h;
  }
  uint64_t now = now_ms(cp);
  uv_timer_start(h->timer, on_lease_end,
                 h->lease_until > now ? h->lease_until - now : 0, 0);
}

/* h's lease is over as this daemon sees it: what it has not acknowledged
 * no longer waits for it (it may no longer answer from its copies, and a
 * renewal counts only once it has applied them). A holder whose
 * connection closed is forgotten. */
static void on_lease_end(uv_timer_t *t) {
  struct holder *h = t->data;
  struct copies *cp = h->cp;
  uint64_t now = now_ms(cp);
  if (h->lease_until > now) { /* renewed meanwhile */
    arm(cp, h);
    return;
  }
  if (h->pend != NULL)
    rdzv__log(cp->d, 2,
              "%s: a copy holder's lease ended before it "
              "acknowledged invalidation %" PRIu64 " (of %" PRIu64 ")",
              cp->what, h->acked + 1, h->issued);
  cp->d->stats.copy_lease_waits++;
  release_upto(cp, h, PEND_EXPIRY);
  if (h->c == NULL && h != cp->grace)
    holder_forget(cp, h);
}

static struct holder *holder_new(struct copies *cp, struct conn *c) {
  struct holder *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return NULL;
  h->cp = cp;
  h->id = ++cp->next_id;
  h->pend_tail = &h->pend;
  HASH_ADD(hh_id, cp->by_id, id, sizeof(h->id), h);
  if (c != NULL) {
    h->c = c;
    rdzv__conn_ref(c);
    HASH_ADD(hh_conn, cp->by_conn, c, sizeof(h->c), h);
  }
  return h;
}

static struct holder *holder_of(struct copies *cp, struct conn *c) {
  struct holder *h = NULL;
  HASH_FIND(hh_conn, cp->by_conn, &c, sizeof(c), h);
  return h;
}

void rdzv__copies_init(struct copies *cp, struct daemon *d, const char *what) {
  memset(cp, 0, sizeof(*cp));
  cp->d = d;
  cp->what = what;
}

void rdzv__copies_grace(struct copies *cp, uint64_t until_ms) {
  if (until_ms <= rdzv__now_ms(cp->d))
    return;
  if (cp->grace == NULL && (cp->grace = holder_new(cp, NULL)) == NULL)
    return; /* out of memory: see copies.h's ENOMEM rule for writes */
  if (until_ms > cp->grace->lease_until)
    cp->grace->lease_until = until_ms;
}

void rdzv__copies_free(struct copies *cp) {
  cp->idle = NULL; /* nothing is taken up again: the job ends */
  struct holder *h;
  /* One at a time: a callback (a write's answer) may change the table. */
  while ((h = cp->by_id) != NULL) {
    release_upto(cp, h, PEND_EXPIRY);
    holder_forget(cp, h);
  }
  cp->grace = NULL;
  struct busykey *bk, *bt;
  HASH_ITER (hh, cp->busy, bk, bt) {
    HASH_DEL(cp->busy, bk);
    free(bk);
  }
  cp->busy_all = 0;
  struct keyholders *k, *kt;
  HASH_ITER (hh, cp->keys, k, kt) {
    HASH_DEL(cp->keys, k);
    free(k->ids);
    free(k);
  }
  struct hotkey *x, *xt;
  HASH_ITER (hh, cp->hot, x, xt) {
    HASH_DEL(cp->hot, x);
    free(x);
  }
}

bool rdzv__copies_grantable(struct copies *cp, const uint8_t *k,
                            uint32_t klen) {
  const struct rdzv_daemon_config *cfg = &cp->d->cfg;
  if (!cfg->cache_mutable || klen == 0 ||
      HASH_CNT(hh, cp->keys) >= cfg->max_copies)
    return false;
  struct hotkey *x = NULL;
  HASH_FIND(hh, cp->hot, k, klen, x);
  if (x == NULL)
    return true;
  if (now_ms(cp) - x->at_ms < cfg->copy_cooldown_ms)
    return false;
  HASH_DEL(cp->hot, x);
  free(x);
  return true;
}

int rdzv__copies_register(struct copies *cp, struct conn *c, const uint8_t *k,
                          uint32_t klen) {
  struct holder *h = holder_of(cp, c);
  if (h == NULL && (h = holder_new(cp, c)) == NULL)
    return RDZV_ENOMEM;
  struct keyholders *kh = NULL;
  HASH_FIND(hh, cp->keys, k, klen, kh);
  if (kh == NULL) {
    kh = calloc(1, sizeof(*kh) + klen);
    if (kh == NULL)
      return RDZV_ENOMEM;
    kh->klen = klen;
    memcpy(kh->key, k, klen);
    HASH_ADD_KEYPTR(hh, cp->keys, kh->key, kh->klen, kh);
  }
  for (uint32_t i = 0; i < kh->n; i++)
    if (kh->ids[i] == h->id)
      return 0;
  if (kh->n == kh->cap) {
    /* Holders forgotten since (their connections closed, their leases
     * ended) leave the list first: a key read again after every
     * reconnection of its holders does not grow without bound. */
    uint32_t live = 0;
    for (uint32_t i = 0; i < kh->n; i++) {
      struct holder *x = NULL;
      HASH_FIND(hh_id, cp->by_id, &kh->ids[i], sizeof(kh->ids[i]), x);
      if (x != NULL)
        kh->ids[live++] = kh->ids[i];
    }
    kh->n = live;
  }
  if (kh->n == kh->cap) {
    uint32_t cap = kh->cap ? kh->cap * 2 : 4;
    uint64_t *ids = realloc(kh->ids, cap * sizeof(*ids));
    if (ids == NULL)
      return RDZV_ENOMEM;
    kh->ids = ids;
    kh->cap = cap;
  }
  kh->ids[kh->n++] = h->id;
  cp->d->stats.copies_granted++;
  return 0;
}

/* Sends h what is queued for it on its held INVAL request. */
static void deliver(struct copies *cp, struct holder *h) {
  if (!h->has_req || h->c == NULL || (h->nqueued == 0 && !h->queued_all))
    return;
  struct rdzv_msg r;
  memset(&r, 0, sizeof(r));
  r.type = RDZV_MSG_INVAL;
  r.req_id = h->req_id;
  r.a = (int64_t)h->issued;
  if (h->queued_all) {
    r.flags = RDZV_F_ALL;
  } else {
    r.keys.n = h->nqueued;
    r.keys.raw = h->queued.data;
    r.keys.raw_len = h->queued.len;
  }
  h->has_req = false;
  cp->d->stats.invalidations_sent++;
  rdzv__conn_reply(h->c, &r);
  h->queued.len = 0;
  h->nqueued = 0;
  h->queued_all = false;
}

/* Adds h to w's holders for invalidation seq (the caller queued it). */
static int pend_add(struct copies *cp, struct holder *h, struct cwait *w,
                    uint64_t seq) {
  struct pend *p = malloc(sizeof(*p));
  if (p == NULL)
    return RDZV_ENOMEM;
  p->seq = seq;
  p->w = w;
  p->next = NULL;
  *h->pend_tail = p;
  h->pend_tail = &p->next;
  h->last = p;
  w->left++;
  if (h->timer == NULL || !uv_is_active((uv_handle_t *)h->timer))
    arm(cp, h);
  return 0;
}

static void mark_hot(struct copies *cp, const uint8_t *k, uint32_t klen) {
  if (cp->d->cfg.copy_cooldown_ms == 0)
    return;
  struct hotkey *x = NULL;
  HASH_FIND(hh, cp->hot, k, klen, x);
  if (x == NULL) {
    x = calloc(1, sizeof(*x) + klen);
    if (x == NULL)
      return; /* granted again at once: only more invalidations */
    x->klen = klen;
    memcpy(x->key, k, klen);
    HASH_ADD_KEYPTR(hh, cp->hot, x->key, x->klen, x);
  }
  x->at_ms = now_ms(cp);
}

/* Unregisters the holders of k and queues k for each live one; marks
 * each (mark) so that a write counts it once. */
static void take_key(struct copies *cp, const uint8_t *k, uint32_t klen,
                     uint64_t mark) {
  struct keyholders *kh = NULL;
  HASH_FIND(hh, cp->keys, k, klen, kh);
  if (kh == NULL)
    return;
  HASH_DEL(cp->keys, kh);
  bool held = false;
  for (uint32_t i = 0; i < kh->n; i++) {
    struct holder *h = NULL;
    HASH_FIND(hh_id, cp->by_id, &kh->ids[i], sizeof(kh->ids[i]), h);
    if (h == NULL)
      continue; /* forgotten: its lease ended after its connection */
    held = true;
    h->mark = mark;
    if (h->c != NULL && !h->queued_all &&
        rdzv_items_append(&h->queued, k, klen) == 0)
      h->nqueued++;
    else if (h->c != NULL)
      h->queued_all = true; /* out of memory: everything goes */
  }
  if (held)
    mark_hot(cp, k, klen);
  free(kh->ids);
  free(kh);
}

static int invalidate(struct copies *cp, const struct rdzv_items *items,
                      const struct rdzv_slice *keys, uint32_t n, unsigned flags,
                      copies_done_cb done, void *arg) {
  static uint64_t marks;
  bool all = (flags & RDZV_COPIES_ALL) != 0;
  uint64_t mark = ++marks;
  struct holder *h, *tmp;
  if (all) {
    HASH_ITER (hh_id, cp->by_id, h, tmp) {
      h->mark = mark;
      if (h->c != NULL) {
        h->queued_all = true;
        h->queued.len = 0;
        h->nqueued = 0;
      }
    }
    struct keyholders *k, *kt;
    HASH_ITER (hh, cp->keys, k, kt) {
      HASH_DEL(cp->keys, k);
      free(k->ids);
      free(k);
    }
  } else if (items != NULL) {
    size_t pos = 0;
    struct rdzv_slice k;
    while (rdzv_items_next(items, &pos, &k))
      take_key(cp, k.p, k.n, mark);
  } else {
    for (uint32_t i = 0; i < n; i++)
      take_key(cp, keys[i].p, keys[i].n, mark);
  }
  if (cp->grace != NULL)
    cp->grace->mark = mark;
  /* Each marked holder: a new invalidation (live), waited for while its
   * lease runs. */
  uint64_t now = now_ms(cp);
  struct cwait *w = NULL;
  int rc = 0;
  HASH_ITER (hh_id, cp->by_id, h, tmp) {
    if (h->mark != mark)
      continue;
    uint64_t seq = PEND_EXPIRY;
    if (h->c != NULL)
      seq = ++h->issued;
    if (h->lease_until > now) {
      if (w == NULL && (w = calloc(1, sizeof(*w))) == NULL) {
        rc = RDZV_ENOMEM;
      } else if (rc == 0 && pend_add(cp, h, w, seq) < 0) {
        rc = RDZV_ENOMEM;
      }
    }
    deliver(cp, h);
  }
  if (w == NULL)
    return rc;
  if (rc == 0 && w->left > 0) {
    /* Its keys are busy until it is done. */
    w->all = all;
    if (!all && items != NULL) {
      size_t pos = 0;
      struct rdzv_slice k;
      while (rc == 0 && rdzv_items_next(items, &pos, &k))
        if ((rc = rdzv_items_append(&w->keys, k.p, k.n)) == 0)
          w->nkeys++;
    } else if (!all) {
      for (uint32_t i = 0; rc == 0 && i < n; i++)
        if ((rc = rdzv_items_append(&w->keys, keys[i].p, keys[i].n)) == 0)
          w->nkeys++;
    }
    if (rc == 0)
      rc = wait_busy(cp, w);
    w->busy = rc == 0;
  }
  if (w->left == 0 || rc < 0) {
    /* Nothing to wait for, or a wait that cannot be tracked whole: the
     * entries added release it, with no callback and no busy keys. */
    if (w->left == 0)
      wait_free(w);
    else {
      w->done = NULL;
      w->arg = NULL;
      w->all = false;
      rdzv_buf_free(&w->keys);
      w->nkeys = 0;
    }
    return rc;
  }
  w->done = done;
  w->arg = arg;
  cp->d->stats.copy_write_waits++;
  return 1;
}

int rdzv__copies_invalidate(struct copies *cp, const struct rdzv_slice *keys,
                            uint32_t n, unsigned flags, copies_done_cb done,
                            void *arg) {
  return invalidate(cp, NULL, keys, n, flags, done, arg);
}

int rdzv__copies_invalidate_items(struct copies *cp,
                                  const struct rdzv_items *keys, unsigned flags,
                                  copies_done_cb done, void *arg) {
  return invalidate(cp, keys, NULL, 0, flags, done, arg);
}

void rdzv__copies_inval_request(struct copies *cp, struct conn *c,
                                const struct rdzv_msg *m) {
  if (c->role != RDZV_ROLE_NODE) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, RDZV_EPROTO);
    rdzv__conn_reply(c, &r);
    return;
  }
  struct holder *h = holder_of(cp, c);
  if (h == NULL && (h = holder_new(cp, c)) == NULL) {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, RDZV_ENOMEM);
    rdzv__conn_reply(c, &r);
    return;
  }
  if (h->has_req) {
    /* Two in flight: the peer broke the rule (one at a time). */
    rdzv__conn_fail_req(c, m->req_id, RDZV_EPROTO,
                        "a second invalidation request in flight");
    return;
  }
  uint64_t ack = (uint64_t)m->b;
  if (ack > h->issued) {
    rdzv__conn_fail_req(c, m->req_id, RDZV_EPROTO,
                        "an invalidation acknowledged before it was sent");
    return;
  }
  h->has_req = true;
  h->req_id = m->req_id;
  if (ack > h->acked)
    h->acked = ack;
  release_upto(cp, h, ack);
  /* The callbacks above may have closed c (h is then not live). */
  h = holder_of(cp, c);
  if (h != NULL)
    deliver(cp, h);
}

void rdzv__copies_ping(struct copies *cp, struct conn *c, uint32_t lease_ms,
                       int64_t *grant_ms, int64_t *issued) {
  *grant_ms = 0;
  *issued = 0;
  if (c->role != RDZV_ROLE_NODE || !cp->d->cfg.cache_mutable)
    return;
  struct holder *h = holder_of(cp, c);
  if (h == NULL && (h = holder_new(cp, c)) == NULL)
    return; /* no lease: the child serves no copy */
  *issued = (int64_t)h->issued;
  /* A child that has not acknowledged every invalidation issued to it
   * (stopped, slow, or one that never will) gets no renewal: a write waits
   * for it at most until the lease it has runs out. The child counts a
   * renewal only when it had acknowledged up to *issued before this ping
   * (its acknowledgment and its ping travel the same ordered link). */
  if (h->acked < h->issued)
    return;
  /* The time now, not the loop iteration's start: the ping may have come
   * after that, and this view must not end before the child's. */
  uv_update_time(cp->d->loop);
  uint64_t until = now_ms(cp) + lease_ms;
  if (until > h->lease_until)
    h->lease_until = until;
  *grant_ms = lease_ms;
}

void rdzv__copies_conn_closed(struct copies *cp, struct conn *c) {
  struct holder *h = holder_of(cp, c);
  if (h == NULL)
    return;
  HASH_DELETE(hh_conn, cp->by_conn, h);
  rdzv__conn_unref(h->c);
  h->c = NULL;
  h->has_req = false;
  rdzv_buf_free(&h->queued);
  h->nqueued = 0;
  h->queued_all = false;
  /* What it has not acknowledged now waits for its lease's end only. */
  for (struct pend *p = h->pend; p != NULL; p = p->next)
    p->seq = PEND_EXPIRY;
  if (h->lease_until <= now_ms(cp)) {
    release_upto(cp, h, PEND_EXPIRY);
    /* release_upto's callbacks do not forget holders: h is still here. */
    holder_forget(cp, h);
    return;
  }
  arm(cp, h);
}

uint64_t rdzv__copies_nholders(const struct copies *cp) {
  return HASH_CNT(hh_id, cp->by_id);
}
