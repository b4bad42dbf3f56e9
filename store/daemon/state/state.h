/* The root's state behind one interface: what must outlive a request at
 * the root of a job, and what a durable root (etcd) must persist before
 * it acknowledges.
 *
 * One struct rdzv_state holds one job's state. It has two parts:
 *   - keys: the job's keys and values (mutable and write-once), counters
 *     (decimal int64 values, RDZV_MSG_ADD) included;
 *   - records: the root's own bookkeeping by kind and name, invisible to
 *     clients and not counted as keys: a rendezvous round's generation and
 *     outcome (RDZV_STATE_REC_ROUND), its rank assignments
 *     (RDZV_STATE_REC_ASSIGN), a completed or failed collective's outcome
 *     (RDZV_STATE_REC_COLL). Their encodings belong to the root
 *     (store/daemon/root); a backend stores bytes.
 * What is tied to a live connection (a waiter, a pending reply, the
 * members of a round still open, timers) is not state: it stays in the
 * role and ends with its connection.
 *
 * How the root uses the records today: it reads a round's record when it
 * first meets the round (so generations carry on where a backend outlived
 * an earlier root), the assignment record to answer a re-sent join, and a
 * collective's record for every answer after it completed or failed.
 * Bringing a collective's live struct back from its record after a
 * restart is left to the durable root.
 *
 * Implementations: the in-memory table (mem.h), the default and the
 * embedded root; an etcd-backed one is meant to sit beside it. A backend
 * is a table of functions (struct rdzv_state_backend) that opens a job's
 * state; the state's own calls go through its ops table, never by name.
 *
 * Conventions for every call: st and every pointer argument are borrowed
 * for the call; a backend copies what it keeps. Values returned in a
 * struct rdzv_state_val are borrowed from st and valid until the next
 * call that changes st (set, append, del, scan, rec_put, rec_del) or its
 * close. Keys and names are binary (klen bytes, no terminator); a value
 * pointer may be NULL when its length is 0. A call that fails changes
 * nothing. Errors are the project's status codes (rdzv/error.h):
 * RDZV_ENOMEM, and those named per call; a backend with storage of its
 * own may also return -errno from that storage. All calls run on the
 * daemon's loop thread. Private: never installed. */
#ifndef RDZV_STORE_DAEMON_STATE_H
#define RDZV_STORE_DAEMON_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdzv_state;

struct rdzv_blob;

struct rdzv_state_val {
  const uint8_t *p; /* borrowed (see above); NULL when n is 0 */
  uint32_t n;
  bool write_once;
  /* The reference-counted buffer that holds p (store/daemon/blob.h), or
   * NULL when the backend has none. Borrowed like p: a caller that sends
   * the value gives it to the transport (rdzv__conn_reply_shared), which
   * takes its own reference, so the bytes outlive a change or deletion of
   * the key while they are being written. */
  struct rdzv_blob *blob;
};

/* Record kinds: one namespace each. */
enum rdzv_state_rec {
  RDZV_STATE_REC_ROUND = 1,  /* round name -> generation and outcome */
  RDZV_STATE_REC_ASSIGN = 2, /* round name -> the last generation's ranks */
  RDZV_STATE_REC_COLL = 3,   /* type byte + name -> a collective's outcome */
  RDZV_STATE_REC_OP = 4,     /* op id (8 bytes, little-endian) -> the
                                answer to that mutation (durable backends
                                only: a re-send after a failover is
                                answered, not applied again) */
};

/* What scan's callback answers for each key. */
enum rdzv_state_scan {
  RDZV_STATE_KEEP = 0,
  RDZV_STATE_DELETE = 1,
};

struct rdzv_state_ops {
  /* The value of key k: 0, or RDZV_ENOKEY (out untouched). */
  int (*get)(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
             struct rdzv_state_val *out);
  /* Sets k to v (vlen bytes), write-once if write_once (a mutable key
   * set with write_once becomes write-once). A write-once key may be set
   * again only to equal bytes (then 0, and it stays write-once). 0,
   * RDZV_EWRITE_ONCE, RDZV_ENOMEM. */
  int (*set)(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
             const uint8_t *v, uint32_t vlen, bool write_once);
  /* Appends v to k's value, creating k (mutable) if absent. 0,
   * RDZV_EWRITE_ONCE, RDZV_ENOMEM. */
  int (*append)(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                const uint8_t *v, uint32_t vlen);
  /* Removes k, write-once or not (refusing a client's delete of a
   * write-once key is the root's rule, not the backend's). 1 if k existed,
   * 0 if not. */
  int (*del)(struct rdzv_state *st, const uint8_t *k, uint32_t klen);
  /* How many keys there are. */
  uint64_t (*count)(struct rdzv_state *st);
  /* The bytes the job's keys, values and records take together (names
   * and values, not the backend's overhead): what --max-job-bytes caps. */
  uint64_t (*bytes)(struct rdzv_state *st);
  /* Calls cb for every key starting with prefix (plen bytes, 0 for all),
   * in no particular order; cb answers RDZV_STATE_KEEP or
   * RDZV_STATE_DELETE (the key is removed after cb returns), or a negative
   * status, which ends the scan and is returned (deletions already made
   * stay). k and v are valid during cb only; cb must not call into st.
   * Returns 0 or that status. */
  int (*scan)(struct rdzv_state *st, const uint8_t *prefix, uint32_t plen,
              int (*cb)(void *arg, const uint8_t *k, uint32_t klen,
                        const struct rdzv_state_val *v),
              void *arg);
  /* Records: put replaces (0 or RDZV_ENOMEM); get answers 0, RDZV_ENOKEY
   * or RDZV_ENOMEM; del removes (0 also when absent, or RDZV_ENOMEM). */
  int (*rec_put)(struct rdzv_state *st, enum rdzv_state_rec kind,
                 const uint8_t *name, uint32_t nlen, const uint8_t *v,
                 uint32_t vlen);
  int (*rec_get)(struct rdzv_state *st, enum rdzv_state_rec kind,
                 const uint8_t *name, uint32_t nlen,
                 struct rdzv_state_val *out);
  int (*rec_del)(struct rdzv_state *st, enum rdzv_state_rec kind,
                 const uint8_t *name, uint32_t nlen);
  /* Frees st and what it holds in memory (a durable backend keeps what it
   * persisted). NULL is not passed. */
  void (*close)(struct rdzv_state *st);
  /* Optional (NULL: close): the job ended (its last connection left
   * --job-linger-ms ago): a durable backend removes what it persisted of
   * the job, then frees st as close does. */
  void (*finish)(struct rdzv_state *st);
};

/* Every implementation's state starts with this. */
struct rdzv_state {
  const struct rdzv_state_ops *ops;
};

/* A backend: opens the state of job (a NUL-terminated id), creating it if
 * new. 0 with *out set, or RDZV_ENOMEM (or the backend's error) with *out
 * NULL. */
struct rdzv_state_backend {
  const char *name; /* "memory", ... : logs and stats */
  /* State that outlives the process (etcd): the root then keeps the
   * answers to mutations with op ids as RDZV_STATE_REC_OP records. */
  bool durable;
  int (*open)(const struct rdzv_state_backend *b, const char *job,
              struct rdzv_state **out);
};

/* The calls, spelled as functions (each is the ops call of that name). */
static inline int rdzv__state_get(struct rdzv_state *st, const uint8_t *k,
                                  uint32_t klen, struct rdzv_state_val *out) {
  return st->ops->get(st, k, klen, out);
}
static inline int rdzv__state_set(struct rdzv_state *st, const uint8_t *k,
                                  uint32_t klen, const uint8_t *v,
                                  uint32_t vlen, bool write_once) {
  return st->ops->set(st, k, klen, v, vlen, write_once);
}
static inline int rdzv__state_append(struct rdzv_state *st, const uint8_t *k,
                                     uint32_t klen, const uint8_t *v,
                                     uint32_t vlen) {
  return st->ops->append(st, k, klen, v, vlen);
}
static inline int rdzv__state_del(struct rdzv_state *st, const uint8_t *k,
                                  uint32_t klen) {
  return st->ops->del(st, k, klen);
}
static inline uint64_t rdzv__state_count(struct rdzv_state *st) {
  return st->ops->count(st);
}
static inline uint64_t rdzv__state_bytes(struct rdzv_state *st) {
  return st->ops->bytes(st);
}
static inline int rdzv__state_scan(struct rdzv_state *st, const uint8_t *prefix,
                                   uint32_t plen,
                                   int (*cb)(void *, const uint8_t *, uint32_t,
                                             const struct rdzv_state_val *),
                                   void *arg) {
  return st->ops->scan(st, prefix, plen, cb, arg);
}
static inline int rdzv__state_rec_put(struct rdzv_state *st,
                                      enum rdzv_state_rec kind,
                                      const uint8_t *name, uint32_t nlen,
                                      const uint8_t *v, uint32_t vlen) {
  return st->ops->rec_put(st, kind, name, nlen, v, vlen);
}
static inline int rdzv__state_rec_get(struct rdzv_state *st,
                                      enum rdzv_state_rec kind,
                                      const uint8_t *name, uint32_t nlen,
                                      struct rdzv_state_val *out) {
  return st->ops->rec_get(st, kind, name, nlen, out);
}
static inline int rdzv__state_rec_del(struct rdzv_state *st,
                                      enum rdzv_state_rec kind,
                                      const uint8_t *name, uint32_t nlen) {
  return st->ops->rec_del(st, kind, name, nlen);
}
static inline void rdzv__state_close(struct rdzv_state *st) {
  if (st != NULL)
    st->ops->close(st);
}
static inline void rdzv__state_finish(struct rdzv_state *st) {
  if (st != NULL && st->ops->finish != NULL)
    st->ops->finish(st);
  else if (st != NULL)
    st->ops->close(st);
}

#endif /* RDZV_STORE_DAEMON_STATE_H */
