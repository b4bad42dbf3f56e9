/* A key table: binary keys to byte values with a write-once flag. The
 * root keeps one per job (the truth); a node keeps one per job as its cache
 * of write-once keys. uthash underneath.
 *
 * Each value is held in a reference-counted blob (store/daemon/blob.h),
 * the entry's own reference: a reply that sends the value takes another
 * (the transport writes from the blob), so a value is held once however
 * many connections it is being written to, and a write in flight keeps
 * the bytes it refers to when the key is changed or deleted meanwhile. A
 * changed value gets a new blob unless the entry holds the only
 * reference (an append then grows it in place). */
#ifndef RDZV_STORE_KVS_H
#define RDZV_STORE_KVS_H

#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "store/daemon/blob.h"

struct kv_entry {
  UT_hash_handle hh;
  uint8_t *key;
  uint32_t klen;
  const uint8_t *val; /* vlen bytes inside blob, then a NUL */
  uint32_t vlen;
  struct rdzv_blob *blob; /* holds val: the entry's reference */
  bool write_once;
};

struct kv_table {
  struct kv_entry *head;
  uint64_t count;
  uint64_t bytes; /* the keys' and values' bytes together */
};

struct kv_entry *rdzv__kv_find(struct kv_table *t, const uint8_t *k,
                               uint32_t klen);
/* Sets k to v. A write-once key may be set again only with equal bytes.
 * Returns 0, RDZV_EWRITE_ONCE or RDZV_ENOMEM. *out (may be NULL) gets the
 * entry. */
int rdzv__kv_set(struct kv_table *t, const uint8_t *k, uint32_t klen,
                 const uint8_t *v, uint32_t vlen, bool write_once,
                 struct kv_entry **out);
/* Sets k to the n bytes at p, which lie inside blob (the entry takes a
 * reference of its own: nothing is copied). The rules and results of
 * rdzv__kv_set; on an equal write-once value the entry keeps its own
 * blob. */
int rdzv__kv_set_shared(struct kv_table *t, const uint8_t *k, uint32_t klen,
                        struct rdzv_blob *blob, const uint8_t *p, uint32_t n,
                        bool write_once, struct kv_entry **out);
/* Appends v to k's value (creating it). Returns 0, RDZV_EWRITE_ONCE,
 * RDZV_ENOMEM. */
int rdzv__kv_append(struct kv_table *t, const uint8_t *k, uint32_t klen,
                    const uint8_t *v, uint32_t vlen, struct kv_entry **out);
/* Returns 1 if k existed and was removed, else 0. */
int rdzv__kv_delete(struct kv_table *t, const uint8_t *k, uint32_t klen);
void rdzv__kv_clear(struct kv_table *t);

#endif /* RDZV_STORE_KVS_H */
