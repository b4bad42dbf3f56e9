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
  uint32_t len;            /* bytes of data */
  uint8_t *data;           /* data[0..len), then a NUL byte when cap > len */
  size_t cap;              /* bytes data may hold (with its NUL) */
  bool inline_data;        /* data is in the blob's own allocation */
  bool interned;           /* in this thread's table (rdzv__blob_intern_add) */
  uint32_t skip;           /* interned: the leading bytes not compared */
  uint64_t hash;           /* interned: of data[skip..len) (sampled) */
  struct rdzv_blob *inext; /* interned: the next in its bucket */
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

/* Interning: one copy of a big value per thread, however many daemons
 * hold it. Every node of a host receives the same big replies from its
 * parent (the job's id table, about 100 KB at 100k ranks); a process
 * that runs many daemons on one loop (rdzv-bench simulates 800 hosts per
 * process) would otherwise hold and first-touch one copy per daemon. A
 * daemon alone in its process (rdzvd) finds nothing to share and pays a
 * sampled hash per big frame. The table is thread-local, as blobs are
 * used on their loop's thread only; it holds no reference: the last
 * unref takes a blob out.
 *
 * Frames of fewer bytes than this are not interned (below a page a copy
 * costs no page faults). */
#define RDZV_BLOB_INTERN_MIN_BYTES 8192u

/* The interned blob whose bytes [skip, len) equal p[skip..len) (the
 * bytes before skip, a frame's header, may differ), or NULL; *hash is
 * set for rdzv__blob_intern_add either way. The result holds no new
 * reference. skip < len. */
struct rdzv_blob *rdzv__blob_intern_find(const uint8_t *p, uint32_t len,
                                         uint32_t skip, uint64_t *hash);
/* Puts b (not interned yet) in this thread's table, with the hash that
 * rdzv__blob_intern_find gave for its bytes and skip. */
void rdzv__blob_intern_add(struct rdzv_blob *b, uint32_t skip, uint64_t hash);

/* A spare read buffer, so that a big frame whose bytes were found
 * interned leaves its warm buffer for the next one rather than to
 * free(3) (which may give it back to the kernel, to be faulted in again):
 * rdzv__blob_spare_take returns this thread's spare of at least need
 * bytes and at most twice that (ownership passes; *cap is set: the frame
 * read into it keeps all of it), or NULL; rdzv__blob_spare_give
 * keeps mem (cap bytes) as the spare when it is bigger than the one held
 * and at most RDZV_BLOB_SPARE_MAX_BYTES, else frees it. */
#define RDZV_BLOB_SPARE_MAX_BYTES ((size_t)16 << 20)
uint8_t *rdzv__blob_spare_take(size_t need, size_t *cap);
void rdzv__blob_spare_give(uint8_t *mem, size_t cap);
/* Frees this thread's spare (a job's end gives its memory back). */
void rdzv__blob_spare_release(void);

#endif /* RDZV_STORE_DAEMON_BLOB_H */
