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

static int set_value(struct kv_table *t, struct kv_entry *e, const uint8_t *v, uint32_t vlen) {
  /* One spare byte keeps values NUL-terminated, handy for counters. */
  uint8_t *nv = malloc((size_t)vlen + 1);
  if (nv == NULL)
    return RDZV_ENOMEM;
  if (vlen > 0)
    memcpy(nv, v, vlen);
  nv[vlen] = 0;
  free(e->val);
  e->val = nv;
  t->bytes = t->bytes - e->vlen + vlen;
  e->vlen = vlen;
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

int rdzv__kv_set(struct kv_table *t, const uint8_t *k, uint32_t klen,
                 const uint8_t *v, uint32_t vlen, bool write_once,
                 struct kv_entry **out) {
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
  int rc = set_value(t, e, v, vlen);
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

int rdzv__kv_append(struct kv_table *t, const uint8_t *k, uint32_t klen,
                    const uint8_t *v, uint32_t vlen, struct kv_entry **out) {
  struct kv_entry *e = rdzv__kv_find(t, k, klen);
  if (e == NULL)
    return rdzv__kv_set(t, k, klen, v, vlen, false, out);
  if (e->write_once)
    return RDZV_EWRITE_ONCE;
  uint8_t *nv = realloc(e->val, (size_t)e->vlen + vlen + 1);
  if (nv == NULL)
    return RDZV_ENOMEM;
  if (vlen > 0)
    memcpy(nv + e->vlen, v, vlen);
  e->val = nv;
  e->vlen += vlen;
  t->bytes += vlen;
  nv[e->vlen] = 0;
  if (out != NULL)
    *out = e;
  return 0;
}

static void entry_free(struct kv_entry *e) {
  free(e->key);
  free(e->val);
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
  HASH_ITER(hh, t->head, e, tmp) {
    HASH_DEL(t->head, e);
    entry_free(e);
  }
  t->count = 0;
  t->bytes = 0;
}
