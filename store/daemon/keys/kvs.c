/* Key table (see kvs.h). */
#include "store/daemon/keys/kvs.h"

#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"

struct kv_entry *rdzv__kv_find(struct kv_table *t, const uint8_t *k,
                               uint32_t klen) {
  struct kv_entry *e = NULL;
  HASH_FIND(hh, t->head, k, klen, e);
  return e;
}

/* Gives e the n bytes at p inside blob b (taking a reference on it). */
static void put_blob(struct kv_table *t, struct kv_entry *e,
                     struct rdzv_blob *b, const uint8_t *p, uint32_t n) {
  rdzv__blob_ref(b);
  rdzv__blob_unref(e->blob);
  e->blob = b;
  e->val = p;
  t->bytes = t->bytes - e->vlen + n;
  e->vlen = n;
}

static int set_value(struct kv_table *t, struct kv_entry *e, const uint8_t *v,
                     uint32_t vlen) {
  /* The blob keeps values NUL-terminated, handy for counters. */
  struct rdzv_blob *b = rdzv__blob_new(v, vlen);
  if (b == NULL)
    return RDZV_ENOMEM;
  put_blob(t, e, b, b->data, vlen);
  rdzv__blob_unref(b); /* the entry's reference remains */
  return 0;
}

static struct kv_entry *insert(struct kv_table *t, const uint8_t *k,
                               uint32_t klen) {
  struct kv_entry *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return NULL;
  e->key = malloc(klen);
  if (e->key == NULL) {
    free(e);
    return NULL;
  }
  memcpy(e->key, k, klen);
  e->klen = klen;
  HASH_ADD_KEYPTR(hh, t->head, e->key, e->klen, e);
  t->count++;
  t->bytes += klen;
  return e;
}

/* rdzv__kv_set and rdzv__kv_set_shared: blob NULL copies v. */
static int kv_put(struct kv_table *t, const uint8_t *k, uint32_t klen,
                  struct rdzv_blob *blob, const uint8_t *v, uint32_t vlen,
                  bool write_once, struct kv_entry **out) {
  struct kv_entry *e = rdzv__kv_find(t, k, klen);
  if (e != NULL && e->write_once) {
    if (out != NULL)
      *out = e;
    if (e->vlen == vlen && (vlen == 0 || memcmp(e->val, v, vlen) == 0))
      return 0;
    return RDZV_EWRITE_ONCE;
  }
  bool added = e == NULL;
  if (added) {
    e = insert(t, k, klen);
    if (e == NULL)
      return RDZV_ENOMEM;
  }
  int rc = 0;
  if (blob != NULL)
    put_blob(t, e, blob, v, vlen);
  else
    rc = set_value(t, e, v, vlen);
  if (rc < 0) {
    if (added) /* nothing changes on failure */
      rdzv__kv_delete(t, k, klen);
    return rc;
  }
  e->write_once = write_once;
  if (out != NULL)
    *out = e;
  return 0;
}

int rdzv__kv_set(struct kv_table *t, const uint8_t *k, uint32_t klen,
                 const uint8_t *v, uint32_t vlen, bool write_once,
                 struct kv_entry **out) {
  return kv_put(t, k, klen, NULL, v, vlen, write_once, out);
}

int rdzv__kv_set_shared(struct kv_table *t, const uint8_t *k, uint32_t klen,
                        struct rdzv_blob *blob, const uint8_t *p, uint32_t n,
                        bool write_once, struct kv_entry **out) {
  if (blob == NULL || (n > 0 && !rdzv__blob_holds(blob, p, n)))
    return kv_put(t, k, klen, NULL, p, n, write_once, out);
  return kv_put(t, k, klen, blob, p, n, write_once, out);
}

/* Appends v to e's value: in place when e holds the only reference to a
 * blob of its own (grown by doubling, so repeated appends stay linear),
 * else into a new blob (a write in flight keeps the old bytes). */
static int append_value(struct kv_table *t, struct kv_entry *e,
                        const uint8_t *v, uint32_t vlen) {
  struct rdzv_blob *b = e->blob;
  size_t need = (size_t)e->vlen + vlen + 1;
  if (b != NULL && b->refs == 1 && !b->inline_data && e->val == b->data) {
    if (need > b->cap) {
      size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
      uint8_t *nd = realloc(b->data, cap);
      if (nd == NULL)
        return RDZV_ENOMEM;
      b->data = nd;
      b->cap = cap;
    }
    if (vlen > 0)
      memcpy(b->data + e->vlen, v, vlen);
    b->len = e->vlen + vlen;
    b->data[b->len] = 0;
    e->val = b->data;
    e->vlen = b->len;
    t->bytes += vlen;
    return 0;
  }
  uint8_t *mem = malloc(need);
  if (mem == NULL)
    return RDZV_ENOMEM;
  if (e->vlen > 0)
    memcpy(mem, e->val, e->vlen);
  if (vlen > 0)
    memcpy(mem + e->vlen, v, vlen);
  struct rdzv_blob *nb = rdzv__blob_take(mem, e->vlen + vlen, need);
  if (nb == NULL)
    return RDZV_ENOMEM;
  put_blob(t, e, nb, nb->data, nb->len);
  rdzv__blob_unref(nb);
  return 0;
}

int rdzv__kv_append(struct kv_table *t, const uint8_t *k, uint32_t klen,
                    const uint8_t *v, uint32_t vlen, struct kv_entry **out) {
  struct kv_entry *e = rdzv__kv_find(t, k, klen);
  if (e == NULL)
    return rdzv__kv_set(t, k, klen, v, vlen, false, out);
  if (e->write_once)
    return RDZV_EWRITE_ONCE;
  int rc = append_value(t, e, v, vlen);
  if (rc < 0)
    return rc;
  if (out != NULL)
    *out = e;
  return 0;
}

static void entry_free(struct kv_entry *e) {
  free(e->key);
  rdzv__blob_unref(e->blob);
  free(e);
}

int rdzv__kv_delete(struct kv_table *t, const uint8_t *k, uint32_t klen) {
  struct kv_entry *e = rdzv__kv_find(t, k, klen);
  if (e == NULL)
    return 0;
  HASH_DEL(t->head, e);
  t->count--;
  t->bytes -= (uint64_t)e->klen + e->vlen;
  entry_free(e);
  return 1;
}

void rdzv__kv_clear(struct kv_table *t) {
  struct kv_entry *e, *tmp;
  HASH_ITER (hh, t->head, e, tmp) {
    HASH_DEL(t->head, e);
    entry_free(e);
  }
  t->count = 0;
  t->bytes = 0;
}
