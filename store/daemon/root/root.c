/* The root role: holds the truth of each job and answers every request
 * itself. This file: the role's table, per-job set-up and teardown,
 * dispatch, and the key operations (set, get, add, compare-and-set,
 * delete, multi-get and -set, append, number of keys) over the job's
 * state (store/daemon/state); re-sent mutations in root_dedup.c, writes
 * held for copies below in root_fence.c, collectives in coll.c,
 * rendezvous rounds in round.c and root_join.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "store/daemon/root/root.h"
#include "store/daemon/root/root_int.h"

/* ---- job state ------------------------------------------------------------- */

static bool key_present(void *ctx, const uint8_t *k, uint32_t klen) {
  struct root_job *s = ctx;
  struct rdzv_state_val v;
  return rdzv__state_get(s->st, k, klen, &v) == 0;
}

static void key_value(void *ctx, const uint8_t *k, uint32_t klen,
                      struct rdzv_slice *v, bool *write_once,
                      struct rdzv_blob **blob) {
  struct root_job *s = ctx;
  struct rdzv_state_val e = {NULL, 0, false, NULL};
  rdzv__state_get(s->st, k, klen, &e);
  v->p = e.p;
  v->n = e.n;
  *write_once = e.write_once;
  *blob = e.blob;
}

/* Grants child node c copies of a completed wait's keys (all or none). */
static bool key_grant(void *ctx, struct conn *c, const struct rdzv_slice *keys,
                      uint32_t n) {
  struct root_job *s = ctx;
  if (c->role != RDZV_ROLE_NODE)
    return false;
  for (uint32_t i = 0; i < n; i++)
    if (!rdzv__copies_grantable(&s->copies, keys[i].p, keys[i].n))
      return false;
  /* Write-once keys need no registration: nodes keep them for good. */
  for (uint32_t i = 0; i < n; i++) {
    struct rdzv_state_val v;
    if (rdzv__state_get(s->st, keys[i].p, keys[i].n, &v) == 0 && v.write_once)
      continue;
    if (rdzv__copies_register(&s->copies, c, keys[i].p, keys[i].n) < 0)
      return false;
  }
  return true;
}

static const struct waits_hooks root_wait_hooks = {key_present, key_value,
                                                   key_grant, NULL};

/* The root's state of job j, opened on first use with the backend given
 * at start-up (d->role_ctx). NULL on ENOMEM (or the backend's error). */
static struct root_job *root_job(struct daemon *d, struct job *j) {
  if (j->role_data != NULL)
    return j->role_data;
  const struct rdzv_state_backend *b = d->role_ctx;
  struct root_job *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  int rc = b->open(b, j->id, &s->st);
  if (rc < 0) {
    rdzv__log(d, 0, "job '%s': %s state: %s", j->id, b->name,
              rdzv_strerror(rc));
    free(s);
    return NULL;
  }
  s->d = d;
  s->job_id = j->id;
  TAILQ_INIT(&s->done_fifo);
  rdzv__waits_init(&s->waits, d->loop, &root_wait_hooks, s);
  snprintf(s->what, sizeof(s->what), "job %s", j->id);
  rdzv__copies_init(&s->copies, d, s->what);
  TAILQ_INIT(&s->deferred);
  rdzv__copies_on_idle(&s->copies, rdzv__root_undefer, s);
  j->role_data = s;
  return s;
}

/* Every answer of this file goes here: the answer to an op with an id is
 * kept. */
/* Answers r, written from blobs[0..n) where its bytes lie in them. */
static void answer_shared(struct conn *c, struct rdzv_msg *r,
                          struct rdzv_blob *const *blobs, uint32_t n) {
  struct root_job *s = c->job != NULL ? c->job->role_data : NULL;
  if (s != NULL && s->cur_op != 0 && r->req_id == s->cur_req) {
    rdzv__root_dedup_put(s, s->cur_op, r);
    s->cur_op = 0;
  }
  rdzv__conn_reply_shared(c, r, blobs, n);
}

static void answer(struct conn *c, struct rdzv_msg *r) {
  answer_shared(c, r, NULL, 0);
}

void rdzv__root_reply_status(struct conn *c, const struct rdzv_msg *m, int st) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, st);
  answer(c, &r);
}

/* ---- the job's memory cap ------------------------------------------------- */

int rdzv__root_room(struct root_job *s, struct conn *c,
                    const struct rdzv_msg *m, uint64_t more) {
  uint64_t cap = s->d->cfg.max_job_bytes;
  if (cap == 0)
    return 0;
  uint64_t used = rdzv__state_bytes(s->st) + s->coll_bytes;
  if (used + more <= cap)
    return 0;
  char text[600];
  snprintf(text, sizeof(text),
           "%s needing %" PRIu64 " more bytes refused: job %s holds %" PRIu64
           " bytes at the root %s, whose --max-job-bytes is %" PRIu64,
           rdzv_msg_type_name(m->type), more, s->job_id, used, s->d->cfg.name,
           cap);
  rdzv__log_event(s->d, "%s", text);
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, RDZV_EJOB_FULL);
  r.keys.n = 1;
  r.keys.v = &t;
  answer(c, &r);
  return RDZV_EJOB_FULL;
}

/* What setting k to vlen bytes adds to the job (0 when it shrinks). */
static uint64_t set_growth(struct root_job *s, struct rdzv_slice k,
                           uint32_t vlen) {
  struct rdzv_state_val e;
  if (rdzv__state_get(s->st, k.p, k.n, &e) < 0)
    return (uint64_t)k.n + vlen;
  return vlen > e.n ? vlen - e.n : 0;
}

/* ---- simple operations --------------------------------------------------- */

void rdzv__root_item(const struct rdzv_items *it, uint32_t i,
                     struct rdzv_slice *out) {
  /* Shapes were validated, so the item exists. */
  if (rdzv_items_get(it, i, out) < 0) {
    out->p = NULL;
    out->n = 0;
  }
}

static void handle_set(struct root_job *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k, v;
  rdzv__root_item(&m->keys, 0, &k);
  rdzv__root_item(&m->vals, 0, &v);
  if (rdzv__root_room(s, c, m, set_growth(s, k, v.n)) < 0)
    return;
  int rc = rdzv__state_set(s->st, k.p, k.n, v.p, v.n,
                           (m->flags & RDZV_F_WRITE_ONCE) != 0);
  rdzv__root_answer_status_write(s, c, m, rc, NULL, k, rc == 0, rc == 0);
}

static void handle_get(struct root_job *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k;
  rdzv__root_item(&m->keys, 0, &k);
  struct rdzv_state_val e;
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rdzv__state_get(s->st, k.p, k.n, &e));
  struct rdzv_slice v = {NULL, 0};
  struct rdzv_blob *b = NULL;
  if (r.status == 0) {
    v.p = e.p;
    v.n = e.n;
    r.vals.n = 1;
    r.vals.v = &v;
    r.a = e.write_once ? 1 : 0;
    b = e.blob;
  }
  /* A child node asked to keep a copy (of the value, or of the absence):
   * registered before the reply goes, so an invalidation follows it. */
  if ((m->flags & RDZV_F_COPY) && c->role == RDZV_ROLE_NODE &&
      (r.status == 0 || r.status == RDZV_ENOKEY) && r.a == 0 &&
      rdzv__copies_grantable(&s->copies, k.p, k.n) &&
      rdzv__copies_register(&s->copies, c, k.p, k.n) == 0)
    r.flags |= RDZV_F_COPY;
  answer_shared(c, &r, &b, b != NULL ? 1 : 0);
}

/* Parses a whole decimal int64; an absent value is 0. */
static int parse_i64(const struct rdzv_state_val *e, int64_t *out) {
  if (e == NULL) {
    *out = 0;
    return 0;
  }
  if (e->n == 0 || e->n > 20)
    return RDZV_ENOT_NUMBER;
  char buf[24];
  memcpy(buf, e->p, e->n);
  buf[e->n] = '\0';
  char *end = NULL;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || *end != '\0')
    return RDZV_ENOT_NUMBER;
  *out = v;
  return 0;
}

/* A node's combined add: its parts, each { op id, delta }, applied in
 * order, each once (a part already applied, sent again after a lost
 * connection, gets its first answer); all or nothing when one would
 * overflow. */
static void handle_add_parts(struct root_job *s, struct conn *c,
                             const struct rdzv_msg *m) {
  struct rdzv_slice k, p;
  rdzv__root_item(&m->keys, 0, &k);
  struct rdzv_state_val e;
  bool have = rdzv__state_get(s->st, k.p, k.n, &e) == 0;
  int64_t cur = 0;
  int rc = parse_i64(have ? &e : NULL, &cur);
  uint64_t *after = calloc(m->vals.n, sizeof(*after));
  if (rc == 0 && after == NULL)
    rc = RDZV_ENOMEM;
  size_t pos = 0;
  uint32_t i = 0, fresh = 0;
  /* A part may come twice in one message (a rank re-sent it through
   * another path and both copies met in one node's combined add): the
   * second gets the first's answer, like a part met in the dedup table. */
  struct seen_part {
    UT_hash_handle hh;
    uint64_t id;
    uint64_t after;
  } *seen = NULL, *sp, *st;
  while (rc == 0 && rdzv_items_next(&m->vals, &pos, &p)) {
    uint64_t id = rdzv_load_u64le(p.p);
    struct done_op *o = rdzv__root_dedup_find(s, id);
    if (o != NULL) {
      s->d->stats.dedup_hits++;
      after[i++] = (uint64_t)o->a;
      continue;
    }
    HASH_FIND(hh, seen, &id, sizeof(id), sp);
    if (sp != NULL) {
      s->d->stats.dedup_hits++;
      after[i++] = sp->after;
      continue;
    }
    if (__builtin_add_overflow(cur, (int64_t)rdzv_load_u64le(p.p + 8), &cur))
      rc = -ERANGE;
    after[i++] = (uint64_t)cur;
    fresh++;
    if ((sp = malloc(sizeof(*sp))) == NULL) {
      rc = RDZV_ENOMEM; /* nothing is applied */
      break;
    }
    sp->id = id;
    sp->after = (uint64_t)cur;
    HASH_ADD(hh, seen, id, sizeof(sp->id), sp);
  }
  HASH_ITER (hh, seen, sp, st) {
    HASH_DEL(seen, sp);
    free(sp);
  }
  char text[24];
  int n = snprintf(text, sizeof(text), "%" PRId64, cur);
  if (rc == 0 && fresh > 0 &&
      rdzv__root_room(s, c, m, set_growth(s, k, (uint32_t)n)) < 0) {
    free(after);
    return;
  }
  if (rc == 0 && fresh > 0)
    rc = rdzv__state_set(s->st, k.p, k.n, (const uint8_t *)text, (uint32_t)n,
                         false);
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  struct rdzv_buf vals = {0};
  if (rc == 0) {
    /* Each new part's answer is kept for a re-send of it. */
    pos = 0;
    for (uint32_t j = 0; j < i && rdzv_items_next(&m->vals, &pos, &p); j++) {
      uint8_t le[8];
      rdzv_store_u64le(le, after[j]);
      rdzv_items_append(&vals, le, sizeof(le));
      uint64_t id = rdzv_load_u64le(p.p);
      if (rdzv__root_dedup_find(s, id) == NULL) {
        struct rdzv_msg one;
        memset(&one, 0, sizeof(one));
        one.a = (int64_t)after[j];
        rdzv__root_dedup_put(s, id, &one);
      }
    }
    r.a = i > 0 ? (int64_t)after[i - 1] : cur;
    r.vals.n = i;
    r.vals.raw = vals.data;
    r.vals.raw_len = vals.len;
    if (fresh > 1)
      s->d->stats.combined += fresh - 1;
  }
  /* Parts answered again (fresh < i) may belong to a first sending whose
   * answer still waits for invalidations: this one waits for them too. */
  rdzv__root_answer_write(s, c, &r, NULL, k, rc == 0 && fresh > 0,
                          rc == 0 && fresh > 0);
  rdzv_buf_free(&vals);
  free(after);
}

static void handle_add(struct root_job *s, struct conn *c,
                       const struct rdzv_msg *m) {
  if (m->flags & RDZV_F_OPID) {
    handle_add_parts(s, c, m);
    return;
  }
  struct rdzv_slice k;
  rdzv__root_item(&m->keys, 0, &k);
  struct rdzv_state_val e;
  bool have = rdzv__state_get(s->st, k.p, k.n, &e) == 0;
  int64_t cur = 0;
  int rc = parse_i64(have ? &e : NULL, &cur);
  if (rc == 0 && __builtin_add_overflow(cur, m->a, &cur))
    rc = -ERANGE;
  char text[24];
  int n = snprintf(text, sizeof(text), "%" PRId64, cur);
  if (rc == 0 && rdzv__root_room(s, c, m, set_growth(s, k, (uint32_t)n)) < 0)
    return;
  if (rc == 0) {
    rc = rdzv__state_set(s->st, k.p, k.n, (const uint8_t *)text, (uint32_t)n,
                         false);
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  r.a = cur;
  rdzv__root_answer_write(s, c, &r, NULL, k, rc == 0, rc == 0);
}

static void handle_cas(struct root_job *s, struct conn *c,
                       const struct rdzv_msg *m) {
  struct rdzv_slice k, exp, des;
  rdzv__root_item(&m->keys, 0, &k);
  rdzv__root_item(&m->vals, 0, &exp);
  rdzv__root_item(&m->vals, 1, &des);
  struct rdzv_state_val e;
  bool have = rdzv__state_get(s->st, k.p, k.n, &e) == 0;
  bool match =
      !have ? exp.n == 0
            : (e.n == exp.n && (exp.n == 0 || memcmp(e.p, exp.p, exp.n) == 0));
  int rc = match ? 0 : RDZV_ECAS_FAILED;
  if (match && rdzv__root_room(s, c, m, set_growth(s, k, des.n)) < 0)
    return;
  if (match) {
    rc = rdzv__state_set(s->st, k.p, k.n, des.p, des.n, have && e.write_once);
    /* The value now stored (the set changed what e pointed to). */
    have = rdzv__state_get(s->st, k.p, k.n, &e) == 0;
  }
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  struct rdzv_slice cur = {have ? e.p : NULL, have ? e.n : 0};
  r.vals.n = 1;
  r.vals.v = &cur;
  r.a = have;
  rdzv__root_answer_write(s, c, &r, NULL, k, rc == 0, rc == 0);
}

static void handle_delete(struct root_job *s, struct conn *c,
                          const struct rdzv_msg *m) {
  struct rdzv_slice k;
  rdzv__root_item(&m->keys, 0, &k);
  struct rdzv_msg r;
  struct rdzv_state_val e;
  bool have = rdzv__state_get(s->st, k.p, k.n, &e) == 0;
  /* Nodes cache write-once keys for good: deleting one would leave stale
   * copies, so it is refused (generations remove their own keys). */
  rdzv__reply_init(&r, m, have && e.write_once ? RDZV_EWRITE_ONCE : 0);
  if (r.status == 0)
    r.a = rdzv__state_del(s->st, k.p, k.n);
  rdzv__root_answer_write(s, c, &r, NULL, k, r.status == 0 && r.a == 1, 0);
}

/* Registers c for keys[0..n) (or, keys NULL, every key of items).
 * True when every one is granted. */
static bool mget_grant(struct root_job *s, struct conn *c,
                       const struct rdzv_slice *keys, uint32_t n,
                       const struct rdzv_items *items) {
  size_t pos = 0;
  struct rdzv_slice k;
  for (uint32_t i = 0; keys != NULL ? i < n : rdzv_items_next(items, &pos, &k);
       i++) {
    if (keys != NULL)
      k = keys[i];
    if (!rdzv__copies_grantable(&s->copies, k.p, k.n))
      return false;
  }
  pos = 0;
  for (uint32_t i = 0; keys != NULL ? i < n : rdzv_items_next(items, &pos, &k);
       i++) {
    if (keys != NULL)
      k = keys[i];
    if (rdzv__copies_register(&s->copies, c, k.p, k.n) < 0)
      return false;
  }
  return true;
}

static void handle_mget(struct root_job *s, struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_slice *vals = calloc(m->keys.n, sizeof(*vals));
  struct rdzv_slice *missing = calloc(m->keys.n, sizeof(*missing));
  struct rdzv_blob **blobs = calloc(m->keys.n, sizeof(*blobs));
  uint32_t nblobs = 0;
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  if (vals == NULL || missing == NULL || blobs == NULL) {
    r.status = RDZV_ENOMEM;
  } else {
    uint32_t nmiss = 0;
    size_t pos = 0;
    struct rdzv_slice k;
    for (uint32_t i = 0; rdzv_items_next(&m->keys, &pos, &k); i++) {
      struct rdzv_state_val e;
      if (rdzv__state_get(s->st, k.p, k.n, &e) < 0) {
        missing[nmiss++] = k;
      } else {
        vals[i].p = e.p;
        vals[i].n = e.n;
        if (e.blob != NULL)
          blobs[nblobs++] = e.blob;
      }
    }
    if (nmiss > 0) {
      r.status = RDZV_ENOKEY;
      r.keys.n = nmiss;
      r.keys.v = missing;
    } else {
      r.vals.n = m->keys.n;
      r.vals.v = vals;
    }
    /* Copies for a child node: of every value, or (ENOKEY) of every
     * absence the reply lists; all or none. */
    if ((m->flags & RDZV_F_COPY) && c->role == RDZV_ROLE_NODE &&
        mget_grant(s, c, nmiss > 0 ? missing : NULL, nmiss > 0 ? nmiss : 0,
                   &m->keys))
      r.flags |= RDZV_F_COPY;
  }
  answer_shared(c, &r, blobs, nblobs);
  free(vals);
  free(missing);
  free(blobs);
}

static void handle_mset(struct root_job *s, struct conn *c,
                        const struct rdzv_msg *m) {
  bool wo = (m->flags & RDZV_F_WRITE_ONCE) != 0;
  size_t kp = 0, vp = 0;
  struct rdzv_slice k, v;
  /* Check every write-once conflict first, so the call is all or nothing. */
  while (rdzv_items_next(&m->keys, &kp, &k) &&
         rdzv_items_next(&m->vals, &vp, &v)) {
    struct rdzv_state_val e;
    if (rdzv__state_get(s->st, k.p, k.n, &e) == 0 && e.write_once &&
        (e.n != v.n || (v.n > 0 && memcmp(e.p, v.p, v.n) != 0))) {
      rdzv__root_reply_status(c, m, RDZV_EWRITE_ONCE);
      return;
    }
  }
  uint64_t more = 0;
  kp = vp = 0;
  while (rdzv_items_next(&m->keys, &kp, &k) &&
         rdzv_items_next(&m->vals, &vp, &v))
    more += set_growth(s, k, v.n);
  if (rdzv__root_room(s, c, m, more) < 0)
    return;
  int rc = 0;
  uint32_t nset = 0;
  kp = vp = 0;
  while (rc == 0 && rdzv_items_next(&m->keys, &kp, &k) &&
         rdzv_items_next(&m->vals, &vp, &v)) {
    rc = rdzv__state_set(s->st, k.p, k.n, v.p, v.n, wo);
    if (rc == 0)
      nset++;
  }
  /* Every key's copies go (a failure part-way set the first nset). */
  rdzv__root_answer_status_write(s, c, m, rc, &m->keys, k, nset > 0, nset);
}

static void handle_append(struct root_job *s, struct conn *c,
                          const struct rdzv_msg *m) {
  struct rdzv_slice k, v;
  rdzv__root_item(&m->keys, 0, &k);
  rdzv__root_item(&m->vals, 0, &v);
  struct rdzv_state_val e;
  /* The value after the append obeys the same limit as a set. */
  if (rdzv__state_get(s->st, k.p, k.n, &e) == 0 &&
      (uint64_t)e.n + v.n > s->d->cfg.max_value_bytes) {
    rdzv__root_reply_status(c, m, RDZV_EVALUE_TOO_BIG);
    return;
  }
  if (rdzv__root_room(s, c, m, set_growth(s, k, 0) + v.n) < 0)
    return;
  int rc = rdzv__state_append(s->st, k.p, k.n, v.p, v.n);
  rdzv__root_answer_status_write(s, c, m, rc, NULL, k, rc == 0, rc == 0);
}

/* RDZV_MSG_KEYS: every key (with the prefix, if one is given) as an
 * encoded item list, within the frame limit. */
struct keys_ctx {
  struct rdzv_buf b;
  uint32_t n;
  size_t max; /* bytes the list may take in a reply body */
};

static int keys_cb(void *arg, const uint8_t *k, uint32_t klen,
                   const struct rdzv_state_val *v) {
  struct keys_ctx *x = arg;
  (void)v;
  if (x->b.len + 4 + (size_t)klen > x->max)
    return RDZV_EFRAME_TOO_BIG;
  if (rdzv_items_append(&x->b, k, klen) < 0)
    return RDZV_ENOMEM;
  x->n++;
  return RDZV_STATE_KEEP;
}

static void handle_keys(struct root_job *s, struct conn *c,
                        const struct rdzv_msg *m) {
  struct rdzv_slice prefix = {NULL, 0};
  if (m->keys.n > 0)
    rdzv__root_item(&m->keys, 0, &prefix);
  struct keys_ctx x = {{0}, 0, 0};
  /* The body's fixed part and the (empty) value list aside. */
  x.max = s->d->cfg.max_frame_bytes > RDZV_WIRE_MIN_BODY_BYTES
              ? s->d->cfg.max_frame_bytes - RDZV_WIRE_MIN_BODY_BYTES
              : 0;
  int rc = rdzv__state_scan(s->st, prefix.p, prefix.n, keys_cb, &x);
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, rc);
  if (rc == 0) {
    r.a = x.n;
    r.keys.n = x.n;
    r.keys.raw = x.b.data;
    r.keys.raw_len = x.b.len;
  }
  answer(c, &r);
  rdzv_buf_free(&x.b);
}

/* ---- dispatch and teardown ------------------------------------------------ */

void rdzv__root_handle(struct daemon *d, struct conn *c,
                       const struct rdzv_msg *m) {
  struct root_job *s = root_job(d, c->job);
  if (s == NULL) {
    rdzv__root_reply_status(c, m, RDZV_ENOMEM);
    return;
  }
  /* An etcd-backed root that took over: its predecessor's copies may be
   * answered from until their leases end (nobody here knows their
   * holders), so its writes wait one lease from the takeover. */
  if (d->leader_since_ms != s->grace_for) {
    s->grace_for = d->leader_since_ms;
    rdzv__copies_grace(&s->copies,
                       d->leader_since_ms + rdzv_config_copy_lease_ms(&d->cfg));
  }
  if (rdzv__root_blocked(s, m) && rdzv__root_defer(s, c, m))
    return; /* taken up when its keys' invalidations are done */
  const char *why = "";
  int gen_rc = m->type == RDZV_MSG_JOIN || m->type == RDZV_MSG_ABORT
                   ? 0
                   : rdzv__root_gen_check(s, m, &why);
  if (gen_rc < 0) {
    struct rdzv_slice t = {(const uint8_t *)why, (uint32_t)strlen(why)};
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, gen_rc);
    r.keys.n = t.n > 0 ? 1 : 0;
    r.keys.v = &t;
    answer(c, &r);
    return;
  }
  if ((m->flags & RDZV_F_OPID) && m->b != 0 && rdzv__root_mutates(m->type) &&
      m->type != RDZV_MSG_ADD) {
    if (rdzv__root_dedup_answer(s, c, m))
      return;
    s->cur_op = (uint64_t)m->b;
    s->cur_req = m->req_id;
  }
  if (m->type != RDZV_MSG_WAIT && m->type != RDZV_MSG_BARRIER &&
      m->type != RDZV_MSG_GATHER && m->type != RDZV_MSG_JOIN)
    d->stats.ops[m->type].local++;
  switch (m->type) {
  case RDZV_MSG_JOIN:
    rdzv__root_join(s, c, m);
    break;
  case RDZV_MSG_ABORT:
    rdzv__root_abort(s, c, m);
    break;
  case RDZV_MSG_SET:
    handle_set(s, c, m);
    break;
  case RDZV_MSG_GET:
    handle_get(s, c, m);
    break;
  case RDZV_MSG_WAIT:
    if (rdzv__waits_add(&s->waits, c, m) == 0)
      d->stats.ops[m->type].local++;
    break;
  case RDZV_MSG_ADD:
    handle_add(s, c, m);
    break;
  case RDZV_MSG_CAS:
    handle_cas(s, c, m);
    break;
  case RDZV_MSG_DELETE:
    handle_delete(s, c, m);
    break;
  case RDZV_MSG_MGET:
    handle_mget(s, c, m);
    break;
  case RDZV_MSG_MSET:
    handle_mset(s, c, m);
    break;
  case RDZV_MSG_APPEND:
    handle_append(s, c, m);
    break;
  case RDZV_MSG_NKEYS: {
    struct rdzv_msg r;
    rdzv__reply_init(&r, m, 0);
    r.a = (int64_t)rdzv__state_count(s->st);
    answer(c, &r);
    break;
  }
  case RDZV_MSG_KEYS:
    handle_keys(s, c, m);
    break;
  case RDZV_MSG_INVAL:
    rdzv__copies_inval_request(&s->copies, c, m);
    break;
  case RDZV_MSG_BARRIER:
  case RDZV_MSG_GATHER:
    rdzv__root_collective(s, c, m);
    break;
  case RDZV_MSG_COLL_STATUS:
    rdzv__root_coll_status(s, c, m);
    break;
  default:
    rdzv__root_reply_status(c, m, RDZV_EPROTO);
    break;
  }
  s->cur_op = 0;
}

static void root_conn_closed(struct daemon *d, struct conn *c) {
  /* c's waits and its places among collectives' waiters go now (what it
   * contributed stays). A generation c joined ranks to is aborted at
   * once. (The transport calls this only while it runs, for a job with
   * role data.) */
  struct root_job *s = c->job->role_data;
  (void)d;
  rdzv__waits_drop_conn(&s->waits, c); /* their replies would go nowhere */
  rdzv__copies_conn_closed(&s->copies, c);
  rdzv__root_colls_conn_closed(s, c);
  rdzv__root_rounds_conn_closed(s, c);
}

static void root_job_free(struct daemon *d, struct job *j) {
  struct root_job *s = j->role_data;
  if (s == NULL)
    return;
  rdzv__waits_clear(&s->waits);
  rdzv__copies_free(&s->copies); /* held answers go (their peers are gone) */
  rdzv__root_deferred_clear(s);
  rdzv__root_dedup_free(s);
  rdzv__root_rounds_free(s);
  rdzv__root_colls_free(s);
  /* Lingered out: the job ended (a durable backend removes what it
   * persisted). Stopping: its state stays where it is kept. */
  if (d->stopping)
    rdzv__state_close(s->st);
  else
    rdzv__state_finish(s->st);
  free(s);
  j->role_data = NULL;
}

/* The root stands down (its etcd lease is lost): every waiting caller of
 * j is told why, rather than kept waiting for a root that no longer
 * serves. */
static void root_fail_all(struct daemon *d, struct job *j, int status,
                          const char *text) {
  struct root_job *s = j->role_data;
  (void)d;
  if (s == NULL)
    return;
  rdzv__waits_fail_prefix(&s->waits, (const uint8_t *)"", 0, status, text);
  rdzv__root_colls_fail_prefix(s, "", status, text);
  rdzv__root_rounds_fail_pending(s, status, text);
}

/* A child node's PING: its lease on copies, the root's whole
 * --copy-lease-ms. */
static void root_ping(struct daemon *d, struct conn *c, struct rdzv_msg *r) {
  struct root_job *s = c->job != NULL ? c->job->role_data : NULL;
  if (s == NULL)
    s = root_job(d, c->job);
  if (s != NULL)
    rdzv__copies_ping(&s->copies, c, rdzv_config_copy_lease_ms(&d->cfg), &r->a,
                      &r->b);
}

const struct rdzv_role rdzv__root_role = {
    "root",
    rdzv__root_handle,
    root_conn_closed,
    NULL,
    root_job_free,
    root_fail_all,
    root_ping,
    NULL,
    rdzv__root_status,
    NULL, /* probe_ready: a root is always ready */
};
