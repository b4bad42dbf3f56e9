/* The root's answers to re-sent mutations (RDZV_F_OPID): applied once,
 * answered as the first time (see root_int.h). */
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "store/daemon/root/root_int.h"

/* Most answers kept per job (besides --dedup-window-ms). */
#define DEDUP_MAX 1000000

bool rdzv__root_mutates(uint8_t type) {
  return type == RDZV_MSG_SET || type == RDZV_MSG_CAS ||
         type == RDZV_MSG_DELETE || type == RDZV_MSG_MSET ||
         type == RDZV_MSG_APPEND || type == RDZV_MSG_ADD;
}

/* A durable backend keeps each answer as a record (RDZV_STATE_REC_OP),
 * so that the leader after a failover answers a re-send too. The record:
 * status, a, flags, the key and value counts (8 bytes each, little-
 * endian), then the keys' and values' raw item lists, each after its
 * length (8 bytes). */
static bool durable(const struct root_job *s) {
  const struct rdzv_state_backend *b = s->d->role_ctx;
  return b->durable;
}

static void op_name(uint64_t id, uint8_t out[8]) { rdzv_store_u64le(out, id); }

static void op_rec_put(struct root_job *s, const struct done_op *o) {
  size_t n = 7 * 8 + o->keys.len + o->vals.len;
  uint8_t *v = malloc(n), name[8];
  if (v == NULL)
    return; /* kept in memory only: a re-send after a failover applies */
  uint64_t f[7] = {(uint64_t)(int64_t)o->status,
                   (uint64_t)o->a,
                   o->flags,
                   o->nkeys,
                   o->nvals,
                   o->keys.len,
                   o->vals.len};
  for (int i = 0; i < 7; i++)
    rdzv_store_u64le(v + 8 * i, f[i]);
  if (o->keys.len > 0)
    memcpy(v + 56, o->keys.data, o->keys.len);
  if (o->vals.len > 0)
    memcpy(v + 56 + o->keys.len, o->vals.data, o->vals.len);
  op_name(o->id, name);
  rdzv__state_rec_put(s->st, RDZV_STATE_REC_OP, name, 8, v, (uint32_t)n);
  free(v);
}

/* The answer to op id from its record, or NULL (none, or not one). */
static struct done_op *op_rec_get(struct root_job *s, uint64_t id) {
  uint8_t name[8];
  struct rdzv_state_val e;
  op_name(id, name);
  if (rdzv__state_rec_get(s->st, RDZV_STATE_REC_OP, name, 8, &e) < 0 ||
      e.n < 56)
    return NULL;
  uint64_t f[7];
  for (int i = 0; i < 7; i++)
    f[i] = rdzv_load_u64le(e.p + 8 * i);
  if (f[5] > e.n - 56 || f[6] != e.n - 56 - f[5] || f[3] > UINT32_MAX ||
      f[4] > UINT32_MAX)
    return NULL;
  struct done_op *o = calloc(1, sizeof(*o));
  if (o == NULL)
    return NULL;
  o->id = id;
  o->at_ms = uv_now(s->d->loop);
  o->status = (int32_t)(int64_t)f[0];
  o->a = (int64_t)f[1];
  o->flags = (uint16_t)f[2];
  o->nkeys = (uint32_t)f[3];
  o->nvals = (uint32_t)f[4];
  if ((f[5] > 0 && rdzv_buf_append(&o->keys, e.p + 56, f[5]) < 0) ||
      (f[6] > 0 && rdzv_buf_append(&o->vals, e.p + 56 + f[5], f[6]) < 0)) {
    rdzv_buf_free(&o->keys);
    rdzv_buf_free(&o->vals);
    free(o);
    return NULL;
  }
  HASH_ADD(hh, s->done_ops, id, sizeof(o->id), o);
  TAILQ_INSERT_TAIL(&s->done_fifo, o, link);
  s->ndone++;
  return o;
}

static void done_op_free(struct root_job *s, struct done_op *o) {
  HASH_DEL(s->done_ops, o);
  TAILQ_REMOVE(&s->done_fifo, o, link);
  s->ndone--;
  rdzv_buf_free(&o->keys);
  rdzv_buf_free(&o->vals);
  free(o);
}

int rdzv__root_items_copy(const struct rdzv_items *it, struct rdzv_buf *out) {
  size_t pos = 0;
  struct rdzv_slice v;
  while (rdzv_items_next(it, &pos, &v))
    if (rdzv_items_append(out, v.p, v.n) < 0)
      return RDZV_ENOMEM;
  return 0;
}

/* Keeps r as the answer to op id. Out of memory keeps nothing: a re-send
 * would then be applied again, as without op ids. */
void rdzv__root_dedup_put(struct root_job *s, uint64_t id,
                          const struct rdzv_msg *r) {
  uint64_t now = uv_now(s->d->loop);
  struct done_op *o;
  while (
      (o = TAILQ_FIRST(&s->done_fifo)) != NULL &&
      (o->at_ms + s->d->cfg.dedup_window_ms < now || s->ndone >= DEDUP_MAX)) {
    if (durable(s)) {
      uint8_t name[8];
      op_name(o->id, name);
      rdzv__state_rec_del(s->st, RDZV_STATE_REC_OP, name, 8);
    }
    done_op_free(s, o);
  }
  o = calloc(1, sizeof(*o));
  if (o == NULL)
    return;
  o->id = id;
  o->at_ms = now;
  o->status = r->status;
  o->a = r->a;
  o->flags = r->flags;
  o->nkeys = r->keys.n;
  o->nvals = r->vals.n;
  if (rdzv__root_items_copy(&r->keys, &o->keys) < 0 ||
      rdzv__root_items_copy(&r->vals, &o->vals) < 0) {
    rdzv_buf_free(&o->keys);
    rdzv_buf_free(&o->vals);
    free(o);
    return;
  }
  HASH_ADD(hh, s->done_ops, id, sizeof(o->id), o);
  TAILQ_INSERT_TAIL(&s->done_fifo, o, link);
  s->ndone++;
  if (durable(s))
    op_rec_put(s, o);
}

struct done_op *rdzv__root_dedup_find(struct root_job *s, uint64_t id) {
  struct done_op *o = NULL;
  HASH_FIND(hh, s->done_ops, &id, sizeof(id), o);
  if (o == NULL && durable(s))
    o = op_rec_get(s, id); /* answered by an earlier leader */
  return o;
}

/* A re-sent op already applied: answered as the first time. */
bool rdzv__root_dedup_answer(struct root_job *s, struct conn *c,
                             const struct rdzv_msg *m) {
  struct done_op *o = rdzv__root_dedup_find(s, (uint64_t)m->b);
  if (o == NULL)
    return false;
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, o->status);
  r.a = o->a;
  r.flags = o->flags;
  r.keys.n = o->nkeys;
  r.keys.raw = o->keys.data;
  r.keys.raw_len = o->keys.len;
  r.vals.n = o->nvals;
  r.vals.raw = o->vals.data;
  r.vals.raw_len = o->vals.len;
  s->d->stats.dedup_hits++;
  /* (A re-send of a write whose invalidations are still waited for was
   * held until they were done: its keys were busy.) */
  rdzv__conn_reply(c, &r);
  return true;
}

void rdzv__root_dedup_free(struct root_job *s) {
  struct done_op *o;
  while ((o = TAILQ_FIRST(&s->done_fifo)) != NULL)
    done_op_free(s, o);
}
