/* The in-memory state backend (mem.h): keys in one key table, records in
 * another, keyed by the kind byte followed by the name. */
#include "store/daemon/state/mem.h"

#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/daemon/keys/kvs.h"

struct mem_state {
  struct rdzv_state base; /* first: the ops table */
  struct kv_table keys;
  struct kv_table recs;
};

static struct mem_state *mem(struct rdzv_state *st) {
  return (struct mem_state *)st;
}

static void val_of(const struct kv_entry *e, struct rdzv_state_val *out) {
  out->p = e->vlen > 0 ? e->val : NULL;
  out->n = e->vlen;
  out->write_once = e->write_once;
  out->blob = e->blob;
}

static int mem_get(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                   struct rdzv_state_val *out) {
  struct kv_entry *e = rdzv__kv_find(&mem(st)->keys, k, klen);
  if (e == NULL)
    return RDZV_ENOKEY;
  val_of(e, out);
  return 0;
}

static int mem_set(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                   const uint8_t *v, uint32_t vlen, bool write_once) {
  return rdzv__kv_set(&mem(st)->keys, k, klen, v, vlen, write_once, NULL);
}

static int mem_append(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                      const uint8_t *v, uint32_t vlen) {
  return rdzv__kv_append(&mem(st)->keys, k, klen, v, vlen, NULL);
}

static int mem_del(struct rdzv_state *st, const uint8_t *k, uint32_t klen) {
  return rdzv__kv_delete(&mem(st)->keys, k, klen);
}

static uint64_t mem_count(struct rdzv_state *st) { return mem(st)->keys.count; }

static uint64_t mem_bytes(struct rdzv_state *st) {
  return mem(st)->keys.bytes + mem(st)->recs.bytes;
}

static int mem_scan(struct rdzv_state *st, const uint8_t *prefix, uint32_t plen,
                    int (*cb)(void *, const uint8_t *, uint32_t,
                              const struct rdzv_state_val *),
                    void *arg) {
  struct kv_table *t = &mem(st)->keys;
  struct kv_entry *e, *tmp;
  HASH_ITER (hh, t->head, e, tmp) {
    if (e->klen < plen || (plen > 0 && memcmp(e->key, prefix, plen) != 0))
      continue;
    struct rdzv_state_val v;
    val_of(e, &v);
    int rc = cb(arg, e->key, e->klen, &v);
    if (rc < 0)
      return rc;
    if (rc == RDZV_STATE_DELETE)
      rdzv__kv_delete(t, e->key, e->klen); /* frees e; tmp stays valid */
  }
  return 0;
}

/* A record's key in recs: the kind byte, then the name. */
static uint8_t *rec_key(enum rdzv_state_rec kind, const uint8_t *name,
                        uint32_t nlen, uint8_t *stackbuf, size_t cap) {
  uint8_t *k = nlen + 1 <= cap ? stackbuf : malloc((size_t)nlen + 1);
  if (k == NULL)
    return NULL;
  k[0] = (uint8_t)kind;
  if (nlen > 0)
    memcpy(k + 1, name, nlen);
  return k;
}

static int mem_rec_put(struct rdzv_state *st, enum rdzv_state_rec kind,
                       const uint8_t *name, uint32_t nlen, const uint8_t *v,
                       uint32_t vlen) {
  uint8_t buf[256];
  uint8_t *k = rec_key(kind, name, nlen, buf, sizeof(buf));
  if (k == NULL)
    return RDZV_ENOMEM;
  int rc = rdzv__kv_set(&mem(st)->recs, k, nlen + 1, v, vlen, false, NULL);
  if (k != buf)
    free(k);
  return rc;
}

static int mem_rec_get(struct rdzv_state *st, enum rdzv_state_rec kind,
                       const uint8_t *name, uint32_t nlen,
                       struct rdzv_state_val *out) {
  uint8_t buf[256];
  uint8_t *k = rec_key(kind, name, nlen, buf, sizeof(buf));
  if (k == NULL)
    return RDZV_ENOMEM;
  struct kv_entry *e = rdzv__kv_find(&mem(st)->recs, k, nlen + 1);
  if (k != buf)
    free(k);
  if (e == NULL)
    return RDZV_ENOKEY;
  val_of(e, out);
  return 0;
}

static int mem_rec_del(struct rdzv_state *st, enum rdzv_state_rec kind,
                       const uint8_t *name, uint32_t nlen) {
  uint8_t buf[256];
  uint8_t *k = rec_key(kind, name, nlen, buf, sizeof(buf));
  if (k == NULL)
    return RDZV_ENOMEM;
  rdzv__kv_delete(&mem(st)->recs, k, nlen + 1);
  if (k != buf)
    free(k);
  return 0;
}

static void mem_close(struct rdzv_state *st) {
  rdzv__kv_clear(&mem(st)->keys);
  rdzv__kv_clear(&mem(st)->recs);
  free(st);
}

static const struct rdzv_state_ops mem_ops = {
    mem_get,     mem_set,     mem_append, mem_del,
    mem_count,   mem_bytes,   mem_scan,   mem_rec_put,
    mem_rec_get, mem_rec_del, mem_close,  NULL, /* finish: close */
};

static int mem_open(const struct rdzv_state_backend *b, const char *job,
                    struct rdzv_state **out) {
  (void)b;
  (void)job;
  struct mem_state *m = calloc(1, sizeof(*m));
  *out = NULL;
  if (m == NULL)
    return RDZV_ENOMEM;
  m->base.ops = &mem_ops;
  *out = &m->base;
  return 0;
}

const struct rdzv_state_backend rdzv__state_mem = {"memory", false, mem_open};
