/* A reference-counted byte string: how rdzvd holds a value once and sends
 * it to every waiter from that one buffer (a key table's values, a
 * collective's result, a frame read from the parent). Whoever keeps a
 * pointer into a blob past the current call holds a reference: the key
 * table for its entry, the transport for a write in flight that refers
 * to it. The bytes never change while a blob is shared (a key table that
 * changes a value makes a new blob, unless it holds the only reference).
 *
 * Not thread-safe: a daemon's blobs are used on its loop thread only.
 * Private: never installed. */
#ifndef RDZV_STORE_DAEMON_BLOB_H
#define RDZV_STORE_DAEMON_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdzv_blob {
  uint32_t refs;
  uint32_t len;   /* bytes of data */
  uint8_t *data;  /* data[0..len), then a NUL byte when cap > len */
  size_t cap;     /* bytes data may hold (with its NUL) */
  bool inline_data; /* data is in the blob's own allocation */
};

/* A new blob of n bytes copied from p (p may be NULL when n is 0), with
 * one reference (the caller's). NULL when out of memory. */
struct rdzv_blob *rdzv__blob_new(const void *p, uint32_t n);
/* A new blob that takes the malloc'd memory mem of cap bytes (at least
 * len), whose first len bytes are the blob's (a NUL is written after them
 * when cap > len); one reference. Frees mem and returns NULL when out of
 * memory. */
struct rdzv_blob *rdzv__blob_take(uint8_t *mem, uint32_t len, size_t cap);
/* Takes a reference; returns b (NULL-safe). */
struct rdzv_blob *rdzv__blob_ref(struct rdzv_blob *b);
/* Drops a reference; the last one frees the blob. NULL-safe. */
void rdzv__blob_unref(struct rdzv_blob *b);
/* True if p[0..n) lies inside b's bytes (n > 0). */
bool rdzv__blob_holds(const struct rdzv_blob *b, const void *p, size_t n);

#endif /* RDZV_STORE_DAEMON_BLOB_H */
