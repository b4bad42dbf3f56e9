/* The durable root's batches (durable_int.h): the changes marked since the
 * last batch, persisted behind the transport's write gate in transactions
 * fenced by the leader key (lease grants first, then values too large for
 * one request in parts, then the keys that point at them); retries; the op
 * records of mutations, removed after --dedup-window-ms. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uthash.h>

#include "rdzv/error.h"
#include "store/daemon/durable/durable_int.h"

/* ---- batches: the dirty keys to etcd ---------------------------------------------- */

static void batch_free(struct batch *b) {
  for (size_t i = 0; i < b->nops; i++) {
    free(b->ops[i].key);
    free(b->ops[i].val);
  }
  free(b->ops);
  for (size_t i = 0; i < b->npops; i++) {
    free(b->pops[i].key);
    free(b->pops[i].val);
  }
  free(b->pops);
  struct breq *r = b->reqs;
  while (r != NULL) {
    struct breq *n = r->next;
    free(r);
    r = n;
  }
  free(b);
}

static int bop_push(struct bop **arr, size_t *n, size_t *cap, const void *k1,
                    size_t n1, const void *k2, size_t n2, const void *v1,
                    size_t m1, const void *v2, size_t m2, bool del,
                    int64_t lease) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 64;
    struct bop *o = realloc(*arr, c * sizeof(*o));
    if (o == NULL)
      return RDZV_ENOMEM;
    *arr = o;
    *cap = c;
  }
  struct bop *o = &(*arr)[*n];
  memset(o, 0, sizeof(*o));
  o->klen = n1 + n2;
  o->key = malloc(o->klen > 0 ? o->klen : 1);
  if (o->key == NULL)
    return RDZV_ENOMEM;
  memcpy(o->key, k1, n1);
  if (n2 > 0)
    memcpy(o->key + n1, k2, n2);
  if (!del) {
    o->vlen = m1 + m2;
    o->val = malloc(o->vlen > 0 ? o->vlen : 1);
    if (o->val == NULL) {
      free(o->key);
      return RDZV_ENOMEM;
    }
    if (m1 > 0)
      memcpy(o->val, v1, m1);
    if (m2 > 0)
      memcpy(o->val + m1, v2, m2);
  }
  o->lease = lease;
  (*n)++;
  return 0;
}

static int bop_add(struct batch *b, const void *k1, size_t n1, const void *k2,
                   size_t n2, const void *v1, size_t m1, const void *v2,
                   size_t m2, bool del, int64_t lease) {
  return bop_push(&b->ops, &b->nops, &b->cap, k1, n1, k2, n2, v1, m1, v2, m2,
                  del, lease);
}

static struct bigval *big_find(struct rdzv_durable *du, const uint8_t *k,
                               size_t klen) {
  struct bigval *g = NULL;
  HASH_FIND(hh, du->bigs, k, klen, g);
  return g;
}

int rdzv__du_big_set(struct rdzv_durable *du, const uint8_t *k, size_t klen,
                     const char *id) {
  struct bigval *g = big_find(du, k, klen);
  if (g == NULL) {
    g = calloc(1, sizeof(*g) + klen);
    if (g == NULL)
      return RDZV_ENOMEM;
    memcpy(g->key, k, klen);
    g->klen = klen;
    HASH_ADD(hh, du->bigs, key, g->klen, g);
  }
  snprintf(g->id, sizeof(g->id), "%s", id);
  return 0;
}

/* The job's entries go with it (what etcd holds of it is removed or
 * expires with its lease; a later job of that id starts afresh). */
void rdzv__du_bigs_drop_job(struct rdzv_durable *du, const struct djob *j) {
  struct bigval *g, *t;
  HASH_ITER (hh, du->bigs, g, t) {
    if (g->klen > j->eklen && memcmp(g->key, j->ekey, j->eklen) == 0) {
      HASH_DEL(du->bigs, g);
      free(g);
    }
  }
}

void rdzv__du_bigs_free(struct rdzv_durable *du) {
  struct bigval *g, *t;
  HASH_ITER (hh, du->bigs, g, t) {
    HASH_DEL(du->bigs, g);
    free(g);
  }
}

/* One key's new value (v1 then v2) or its delete, for j (tag at offset
 * j->eklen of key: 'k', 'r' or 'o'), glued to the operation before it
 * when glue. A value over half of --etcd-max-request-bytes goes in parts
 * (struct bigval); a key that had parts loses them. */
static int emit(struct rdzv_durable *du, struct batch *b, struct djob *j,
                uint8_t *key, size_t klen, const uint8_t *v1, size_t m1,
                const uint8_t *v2, size_t m2, bool del, bool glue) {
  size_t part = du->cfg.etcd_max_request_bytes / 2;
  size_t total = m1 + m2;
  struct bigval *old = big_find(du, key, klen);
  char old_id[25] = "";
  if (old != NULL)
    snprintf(old_id, sizeof(old_id), "%s", old->id);
  size_t first = b->nops;
  int rc = 0;
  if (!del && total > part) {
    char id[25];
    snprintf(id, sizeof(id), "%016" PRIx64 "%08" PRIx64, du->opbase,
             ++du->opseq & 0xffffffffu);
    uint8_t *all = malloc(total);
    if (all == NULL)
      return RDZV_ENOMEM;
    if (m1 > 0)
      memcpy(all, v1, m1);
    if (m2 > 0)
      memcpy(all + m1, v2, m2);
    uint32_t n = (uint32_t)((total + part - 1) / part);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
      char pk[1100];
      int pn = snprintf(pk, sizeof(pk), "%.*sp/%s/%06u", (int)j->eklen, j->ekey,
                        id, i);
      size_t off = (size_t)i * part;
      size_t len = total - off < part ? total - off : part;
      rc = bop_push(&b->pops, &b->npops, &b->pcap, pk, (size_t)pn, NULL, 0,
                    all + off, len, NULL, 0, false, j->lease);
    }
    free(all);
    char rdzv__du_mark[80];
    int mn = snprintf(rdzv__du_mark, sizeof(rdzv__du_mark), "%s:%u:%zu", id, n,
                      total);
    key[j->eklen] = (uint8_t)(key[j->eklen] - 'a' + 'A');
    if (rc == 0)
      rc = bop_add(b, key, klen, NULL, 0, rdzv__du_mark, (size_t)mn, NULL, 0,
                   false, j->lease);
    key[j->eklen] = (uint8_t)(key[j->eklen] - 'A' + 'a');
    if (rc == 0) /* the small form goes */
      rc = bop_add(b, key, klen, NULL, 0, NULL, 0, NULL, 0, true, 0);
    if (rc == 0)
      rc = rdzv__du_big_set(du, key, klen, id);
  } else {
    rc = bop_add(b, key, klen, NULL, 0, v1, m1, v2, m2, del, j->lease);
    if (rc == 0 && old != NULL) { /* the large form goes */
      key[j->eklen] = (uint8_t)(key[j->eklen] - 'a' + 'A');
      rc = bop_add(b, key, klen, NULL, 0, NULL, 0, NULL, 0, true, 0);
      key[j->eklen] = (uint8_t)(key[j->eklen] - 'A' + 'a');
      HASH_DEL(du->bigs, old);
      free(old);
    }
  }
  if (rc == 0 && old_id[0] != '\0') { /* the old parts go */
    char pk[1100];
    int pn =
        snprintf(pk, sizeof(pk), "%.*sp/%s/", (int)j->eklen, j->ekey, old_id);
    rc = bop_add(b, pk, (size_t)pn, NULL, 0, NULL, 0, NULL, 0, true, 0);
    if (rc == 0)
      b->ops[b->nops - 1].prefix = true;
  }
  for (size_t i = first; rc == 0 && i < b->nops; i++)
    b->ops[i].glue = i > first || glue;
  return rc;
}

/* The operation of one dirty entry: the current value put, or a delete. */
static int dirty_op(struct rdzv_durable *du, struct batch *b, struct djob *j,
                    const struct dirty *x) {
  const uint8_t *name = x->id + 1;
  uint32_t nlen = (uint32_t)(x->len - 1);
  struct rdzv_state_val v;
  char pre[1100];
  int pl;
  bool have;
  uint8_t flag = 'm';
  if (x->id[0] == 'k') {
    have = rdzv__state_get(j->mem, name, nlen, &v) == 0;
    flag = have && v.write_once ? 'w' : 'm';
    pl = snprintf(pre, sizeof(pre), "%.*sk/", (int)j->eklen, j->ekey);
  } else {
    int kind = x->id[0] - '0';
    have = rdzv__state_rec_get(j->mem, (enum rdzv_state_rec)kind, name, nlen,
                               &v) == 0;
    pl = snprintf(pre, sizeof(pre), "%.*sr/%d/", (int)j->eklen, j->ekey, kind);
  }
  if (pl < 0 || (size_t)pl >= sizeof(pre))
    return RDZV_ENOMEM;
  uint8_t *key = malloc((size_t)pl + nlen);
  if (key == NULL)
    return RDZV_ENOMEM;
  memcpy(key, pre, (size_t)pl);
  if (nlen > 0)
    memcpy(key + pl, name, nlen);
  /* A key's value is its flag byte, then its bytes; a record's its
   * bytes. */
  bool is_key = x->id[0] == 'k';
  int rc = emit(du, b, j, key, (size_t)pl + nlen, is_key ? &flag : NULL,
                is_key && have ? 1 : 0, have ? v.p : NULL, have ? v.n : 0,
                !have, false);
  free(key);
  return rc;
}

static void breq_send(struct breq *r);

/* A batch goes once it is finished and nothing points at it any more. */
static void batch_maybe_free(struct batch *b) {
  if (b->finished && b->inflight == 0 && b->timers == 0)
    batch_free(b);
}

static void on_retry_closed(uv_handle_t *h) {
  struct breq *r = h->data;
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  r->timer_open = false;
  b->timers--;
  du->handles_open--;
  batch_maybe_free(b);
  rdzv__du_maybe_free_du(du);
}

void rdzv__du_batch_finish(struct batch *b) {
  b->finished = true;
  for (struct breq *x = b->reqs; x != NULL; x = x->next)
    if (x->timer_open && !uv_is_closing((uv_handle_t *)&x->retry))
      uv_close((uv_handle_t *)&x->retry, on_retry_closed);
  batch_maybe_free(b);
}

static void on_retry(uv_timer_t *t) {
  struct breq *r = t->data;
  if (r->b->finished)
    return;
  breq_send(r);
}

/* A request of the batch failed: again after a pause while the lease
 * holds; a transaction over its size limit splits in two. */
static void breq_failed(struct breq *r, const struct rdzv_etcd_result *res) {
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  du->errors++;
  if (!r->grant && res->status == RDZV_ETOO_LARGE && r->to - r->from > 1) {
    struct breq *h = calloc(1, sizeof(*h));
    if (h != NULL) {
      *h = *r;
      h->timer_open = false;
      size_t mid = r->from + (r->to - r->from) / 2;
      struct bop *arr = r->parts ? b->pops : b->ops;
      while (mid > r->from + 1 && arr[mid].glue)
        mid--;
      h->from = mid;
      r->to = mid;
      h->next = b->reqs;
      b->reqs = h;
      b->left++;
      rdzv__du_dlog(du, 1,
                    "a transaction over etcd's limits (%s): split in two",
                    res->message);
      breq_send(r);
      breq_send(h);
      return;
    }
  }
  /* What etcd will refuse however often it is asked (an unknown lease, a
   * part over its size limit, a permission it lacks) ends the leadership,
   * saying why: a new leader loads what etcd has. */
  bool transient = res->status != RDZV_ENOKEY &&
                   res->status != RDZV_ETOO_LARGE &&
                   !(res->status == RDZV_EETCD && res->http >= 400 &&
                     res->http < 500 && res->http != 408 && res->http != 429);
  if (!transient) {
    char why[600];
    snprintf(why, sizeof(why), "etcd refused a %s: %s%s%s%s",
             r->grant ? "lease grant" : "transaction",
             rdzv_strerror(res->status), res->message[0] ? ": " : "",
             res->message,
             res->status == RDZV_ETOO_LARGE
                 ? " (is --etcd-max-request-bytes above etcd's "
                   "--max-request-bytes?)"
                 : "");
    rdzv__du_stand_down(du, res->status, why);
    return;
  }
  if (rdzv__du_now_ms(du) >= du->lease_deadline_ms) {
    char why[600];
    snprintf(why, sizeof(why),
             "etcd lease lost: persisting failed past the "
             "lease's %u s: %s%s%s",
             du->cfg.etcd_lease_ttl_s, rdzv_strerror(res->status),
             res->message[0] ? ": " : "", res->message);
    rdzv__du_stand_down(du, RDZV_ELEASE_LOST, why);
    return;
  }
  rdzv__du_dlog(du, 2, "%s failed (%s%s%s): again",
                r->grant ? "a lease grant" : "a transaction",
                rdzv_strerror(res->status), res->message[0] ? ": " : "",
                res->message);
  if (!r->timer_open) {
    uv_timer_init(du->loop, &r->retry);
    r->retry.data = r;
    r->timer_open = true;
    b->timers++;
    du->handles_open++;
  }
  uv_timer_start(&r->retry, on_retry, 100, 0);
}

static void on_breq(void *arg, const struct rdzv_etcd_result *res) {
  struct breq *r = arg;
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  b->inflight--;
  if (b->finished || res->status == RDZV_ECANCELED) {
    batch_maybe_free(b); /* stood down or stopping: the batch is dropped */
    return;
  }
  if (r->grant && res->status == RDZV_EETCD && res->http == 412)
    res = NULL; /* "lease already exists": an earlier try got through */
  if (res != NULL && res->status < 0) {
    breq_failed(r, res);
    return;
  }
  if (!r->grant && res != NULL && !res->succeeded) {
    rdzv__du_stand_down(
        du, RDZV_ENOT_LEADER,
        "fenced: the leader key changed (another root leads now)");
    return;
  }
  if (r->grant) {
    struct djob *j, *t;
    HASH_ITER (hh, du->jobs, j, t) {
      if (j->lease == r->lease)
        j->lease_granted = true;
    }
  } else {
    du->txns++;
    du->ops_persisted += r->to - r->from;
  }
  if (--b->left == 0)
    rdzv__du_batch_step(b);
}

static void breq_send(struct breq *r) {
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  int rc;
  r->sent = true;
  if (r->grant) {
    rc = rdzv_etcd_lease_grant(du->e, r->ttl, r->lease, on_breq, r);
  } else {
    struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
    char lk[300];
    int n = snprintf(lk, sizeof(lk), "%s/leader", du->prefix);
    rc = t != NULL
             ? rdzv_etcd_txn_compare(t, lk, (size_t)n, RDZV_ETCD_CREATE,
                                     RDZV_ETCD_EQUAL, du->leader_rev, NULL, 0)
             : RDZV_ENOMEM;
    struct bop *arr = r->parts ? b->pops : b->ops;
    for (size_t i = r->from; rc == 0 && i < r->to; i++) {
      struct bop *o = &arr[i];
      rc = o->val != NULL
               ? rdzv_etcd_txn_put(t, true, o->key, o->klen, o->val, o->vlen,
                                   o->lease)
               : rdzv_etcd_txn_delete(t, true, o->key, o->klen, o->prefix);
    }
    if (rc == 0) {
      rc = rdzv_etcd_txn(du->e, t, on_breq, r);
      t = NULL;
    }
    rdzv_etcd_txn_free(t);
  }
  if (rc == 0)
    b->inflight++;
  else
    rdzv__du_stand_down(du, rc, "out of memory sending to etcd");
}

/* Phase 1: the leases of jobs new to etcd; phase 2: the transactions;
 * then the gate opens. */
/* The transactions over b->pops (parts) or b->ops, each below
 * --etcd-max-txn-ops and --etcd-max-request-bytes, a glued group never
 * cut (a group alone over the limits goes whole: etcd refuses it, and it
 * is split then). Returns how many, or RDZV_ENOMEM. */
static int chunk(struct batch *b, bool parts) {
  struct rdzv_durable *du = b->du;
  struct bop *arr = parts ? b->pops : b->ops;
  size_t n = parts ? b->npops : b->nops;
  size_t max_ops = du->cfg.etcd_max_txn_ops > 1 ? du->cfg.etcd_max_txn_ops - 1
                                                : 1; /* one is the compare */
  size_t max_bytes = du->cfg.etcd_max_request_bytes;
  size_t i = 0;
  int made = 0;
  while (i < n) {
    size_t from = i, bytes = 64;
    while (i < n && i - from < max_ops &&
           (i == from || bytes + arr[i].klen + arr[i].vlen + 32 <= max_bytes)) {
      bytes += arr[i].klen + arr[i].vlen + 32;
      i++;
    }
    if (i < n && arr[i].glue) {
      size_t g = i;
      while (g > from && arr[g].glue)
        g--;
      if (g > from)
        i = g; /* the group starts the next transaction */
      else
        while (i < n && arr[i].glue)
          i++;
    }
    struct breq *r = calloc(1, sizeof(*r));
    if (r == NULL)
      return RDZV_ENOMEM;
    r->b = b;
    r->parts = parts;
    r->from = from;
    r->to = i;
    r->next = b->reqs;
    b->reqs = r;
    b->left++;
    b->ntxn++;
    made++;
  }
  return made;
}

/* Phase 0: the leases of jobs new to etcd (sent by gate_start); 1: the
 * parts of large values; 2: the transactions; then the gate opens. */
void rdzv__du_batch_step(struct batch *b) {
  struct rdzv_durable *du = b->du;
  while (b->phase < 2) {
    b->phase++;
    bool parts = b->phase == 1;
    int made = chunk(b, parts);
    if (made < 0) {
      rdzv__du_stand_down(du, RDZV_ENOMEM,
                          "out of memory building a transaction");
      return;
    }
    if (made > 0) {
      /* Sent after the loop: a callback never runs inside a send. */
      for (struct breq *r = b->reqs; r != NULL && !b->finished; r = r->next)
        if (!r->grant && r->parts == parts && !r->sent)
          breq_send(r);
      return;
    }
  }
  /* Done: what waited for it goes out. */
  b->phase = 3;
  du->batches++;
  du->batch = NULL;
  rdzv__du_batch_finish(b);
  rdzv__du_stats_update(du);
  rdzv__gate_done(du->d);
}

/* Remembers a persisted group of op records for its expiry. */
int rdzv__du_opkey_add(struct djob *j, const uint8_t *k, size_t klen,
                       uint64_t expire_ms) {
  struct opkey *o = calloc(1, sizeof(*o));
  if (o == NULL || (o->key = malloc(klen)) == NULL) {
    free(o);
    return RDZV_ENOMEM;
  }
  memcpy(o->key, k, klen);
  o->klen = klen;
  o->expire_ms = expire_ms;
  *j->opkeys_tail = o;
  j->opkeys_tail = &o->next;
  return 0;
}

/* The op records ops (see struct dirty) as one etcd key of j, glued to
 * the operation before it when glue. */
static int ops_group(struct rdzv_durable *du, struct batch *b, struct djob *j,
                     const struct rdzv_buf *ops, bool glue) {
  char k[1100];
  int n = snprintf(k, sizeof(k), "%.*so/%016" PRIx64 "%08" PRIx64,
                   (int)j->eklen, j->ekey, du->opbase, ++du->opseq);
  if (n < 0 || (size_t)n >= sizeof(k))
    return RDZV_ENOMEM;
  int rc = emit(du, b, j, (uint8_t *)k, (size_t)n, ops->data, ops->len, NULL, 0,
                false, glue);
  if (rc == 0)
    rc = rdzv__du_opkey_add(j, (const uint8_t *)k, (size_t)n,
                            rdzv__du_now_ms(du) + du->cfg.dedup_window_ms);
  return rc;
}

static bool gate_pending(void *arg) {
  struct rdzv_durable *du = arg;
  return du->role == DUR_LEADER && (du->ndirty > 0 || du->broken);
}

static void gate_start(void *arg) {
  struct rdzv_durable *du = arg;
  if (du->broken) {
    du->broken = false;
    rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory marking a change");
    return;
  }
  struct batch *b = calloc(1, sizeof(*b));
  if (b == NULL) {
    rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory sealing a batch");
    return;
  }
  b->du = du;
  struct djob *j, *jt;
  int rc = 0;
  HASH_ITER (hh, du->jobs, j, jt) {
    if (j->ndirty == 0)
      continue;
    if (j->lease == 0)
      j->lease = rdzv__du_random_i63();
    if (!j->lease_granted) {
      struct breq *r = calloc(1, sizeof(*r));
      if (r == NULL) {
        rc = RDZV_ENOMEM;
        break;
      }
      r->b = b;
      r->grant = true;
      r->lease = j->lease;
      r->ttl = du->cfg.etcd_job_ttl_s;
      r->next = b->reqs;
      b->reqs = r;
      b->left++;
    }
    if (!j->lease_put) {
      char v[24];
      int n = snprintf(v, sizeof(v), "%" PRId64, j->lease);
      rc = bop_add(b, j->ekey, j->eklen, "lease", 5, v, (size_t)n, NULL, 0,
                   false, j->lease);
      j->lease_put = rc == 0;
    }
    /* Groups past the dedup window go (before this batch adds its own:
     * a key must not be put and deleted in one transaction). */
    uint64_t now = rdzv__du_now_ms(du);
    while (rc == 0 && j->opkeys != NULL && j->opkeys->expire_ms <= now) {
      struct opkey *o = j->opkeys;
      rc = emit(du, b, j, o->key, o->klen, NULL, 0, NULL, 0, true, false);
      if (rc < 0)
        break;
      j->opkeys = o->next;
      if (j->opkeys == NULL)
        j->opkeys_tail = &j->opkeys;
      free(o->key);
      free(o);
    }
    struct dirty *x, *xt;
    HASH_ITER (hh, j->dirty, x, xt) {
      if (rc == 0)
        rc = dirty_op(du, b, j, x);
      if (rc == 0 && x->ops.len > 0)
        rc = ops_group(du, b, j, &x->ops, true);
    }
    if (rc == 0 && j->lone_ops.len > 0)
      rc = ops_group(du, b, j, &j->lone_ops, false);
    rdzv__du_job_clear_dirty(du, j);
    if (rc < 0)
      break;
  }
  if (rc < 0) {
    batch_free(b);
    rdzv__du_stand_down(du, rc, "out of memory sealing a batch");
    return;
  }
  du->batch = b;
  if (b->left == 0) {
    rdzv__du_batch_step(b);
    return;
  }
  for (struct breq *r = b->reqs; r != NULL && !b->finished; r = r->next)
    breq_send(r);
}

const struct rdzv_gate rdzv__du_gate = {gate_pending, gate_start};
