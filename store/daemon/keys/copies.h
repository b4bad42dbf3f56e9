/* Copies of mutable keys held below a daemon: the parent's side of the
 * tree's consistent cache. The root keeps one struct copies per job, and
 * so does every node (for its own child nodes).
 *
 * The rule (linearizable, as one TCPStore server is): a child node may
 * answer a read from its copy of a key (its value, or its absence) only
 * while (a) the parent holds it registered for that key and (b) its
 * lease runs. A write to a key is acknowledged only after every
 * registered copy below has been dropped (the child acknowledged the
 * invalidation, after its own children did) or its holder's lease has run
 * out, as the parent sees it. In the manner of Chubby's cache and Flux's
 * KVS; the protocol is RDZV_F_COPY and RDZV_MSG_INVAL in store/wire/wire.h.
 *
 * - Registration: a GET, MGET or WAIT from a child node with RDZV_F_COPY
 *   whose reply this daemon grants (rdzv__copies_grantable, then
 *   rdzv__copies_register before the reply is queued: the reply and any
 *   later invalidation travel the same ordered connection).
 * - Invalidation (rdzv__copies_invalidate): every holder of the keys is
 *   unregistered and sent the keys on its held RDZV_MSG_INVAL request
 *   (queued until it sends one); the caller's callback runs when each of
 *   them acknowledged (its next INVAL's b) or its lease ended.
 * - Leases: a child's lease is renewed by the parent's PING replies
 *   (rdzv__copies_ping): it lasts the granted ms from when the child sent
 *   the ping, so the child's own view ends first. Neither side counts a
 *   renewal while an invalidation issued before it is unacknowledged (the
 *   reply's b: the child counts it only when it had acknowledged up to b):
 *   one that fell behind (stopped, slow, out of memory, hostile) stays
 *   expired until it caught up, and a write waits for it no longer than
 *   the lease it had. A holder whose connection closed is waited for until its
 *   lease ends (a stopped process may still answer from its copies when it
 *   resumes, until its own clock says the lease is over).
 * - Write-hot keys: a key written while copies of it were held is not
 *   granted again for --copy-cooldown-ms, so counters and state keys that
 *   are written as often as read do not make every write wait for
 *   invalidations (their reads go to the root, combined per node).
 *
 * Every call runs on the daemon's loop; key bytes are borrowed for the
 * call. Private: never installed. */
#ifndef RDZV_STORE_COPIES_H
#define RDZV_STORE_COPIES_H

#include <stdbool.h>
#include <stdint.h>

#include "store/wire/wire.h"

struct daemon;
struct conn;
struct holder;
struct keyholders;
struct hotkey;
struct busykey;

struct copies {
  struct daemon *d;
  const char *what;       /* "job J" for logs */
  struct holder *by_conn; /* live holders, by connection */
  struct holder *by_id;   /* every holder still known, by id */
  struct keyholders *keys;
  struct hotkey *hot;
  uint64_t next_id;
  /* A pseudo-holder whose lease ends when writes may be acknowledged
   * without waiting (a new leader's grace); NULL: none. Kept, expired,
   * until cp ends (a write's callbacks may run inside its own release). */
  struct holder *grace;
  struct busykey *busy; /* keys whose invalidation is waited for */
  uint64_t busy_all;    /* ... of every key (RDZV_COPIES_ALL) */
  void (*idle)(void *arg);
  void *idle_arg;
};

/* Starts cp for a job (what names it in logs, borrowed for cp's life). */
void rdzv__copies_init(struct copies *cp, struct daemon *d, const char *what);
/* Every write waits at least until until_ms (loop time), as for a holder
 * whose lease ends then: copies granted by another daemon before this one
 * took over (a new leader of an etcd-backed root) may be answered from
 * until then. An earlier time than one already set changes nothing. */
void rdzv__copies_grace(struct copies *cp, uint64_t until_ms);
/* Ends cp: holders dropped, waiting writes released (their callbacks
 * run), held INVAL requests left unanswered (their connections are
 * closing). */
void rdzv__copies_free(struct copies *cp);

/* Whether a copy of key k may be granted now (copies enabled, the key not
 * cooling down after a write that found holders). */
bool rdzv__copies_grantable(struct copies *cp, const uint8_t *k, uint32_t klen);
/* Registers child node c as holding a copy of k. 0 or RDZV_ENOMEM (then
 * the caller must not grant it). */
int rdzv__copies_register(struct copies *cp, struct conn *c, const uint8_t *k,
                          uint32_t klen);

/* Called once when a write's invalidations are done. */
typedef void (*copies_done_cb)(void *arg);

/* rdzv__copies_invalidate's flags. */
/* every key of the job (e.g. this node lost its own parent): keys are
 * ignored */
#define RDZV_COPIES_ALL 0x1u

/* keys[0..n) changed. Every holder of them is unregistered and sent the
 * invalidation whatever the result. Returns 0 when nothing is to be waited
 * for (done is not called: the caller goes on at once), 1 when done(arg)
 * will run once every holder acknowledged or its lease ended, or
 * RDZV_ENOMEM when the wait could not be tracked (done is not called; the
 * caller must not claim the write is visible everywhere: it answers
 * RDZV_ENOMEM, an outcome the writer has to treat as unknown). While
 * done is pending, the keys are busy (rdzv__copies_busy). */
int rdzv__copies_invalidate(struct copies *cp, const struct rdzv_slice *keys,
                            uint32_t n, unsigned flags, copies_done_cb done,
                            void *arg);
/* The same for the keys of an item list (a request's keys). */
int rdzv__copies_invalidate_items(struct copies *cp,
                                  const struct rdzv_items *keys, unsigned flags,
                                  copies_done_cb done, void *arg);

/* Whether an invalidation of k (or of every key) is still waited for.
 * The root answers nothing about a busy key until it is not (it holds
 * such requests, rdzv__copies_on_idle): the new value must not be seen
 * anywhere while an old copy may still be answered from below (Chubby's
 * rule: a write takes effect for readers once every cache is clean). */
bool rdzv__copies_busy(const struct copies *cp, const uint8_t *k,
                       uint32_t klen);
/* idle(arg) runs whenever keys stopped being busy (after the done
 * callbacks of the writes that made them so). */
void rdzv__copies_on_idle(struct copies *cp, void (*idle)(void *arg),
                          void *arg);

/* RDZV_MSG_INVAL request m from child node c: acknowledges up to m->b,
 * then is answered at once with what is queued for c, or held. A client
 * (not a node) is answered RDZV_EPROTO. */
void rdzv__copies_inval_request(struct copies *cp, struct conn *c,
                                const struct rdzv_msg *m);
/* c sent a PING: *issued gets the newest invalidation sequence number
 * issued to c, and *grant_ms lease_ms (at most this daemon's own lease
 * left, for a node), which becomes c's lease from now as this daemon sees
 * it; or 0 (no renewal) while c has not acknowledged every invalidation
 * issued to it. */
void rdzv__copies_ping(struct copies *cp, struct conn *c, uint32_t lease_ms,
                       int64_t *grant_ms, int64_t *issued);
/* c closed: it is waited for until its lease ends, then forgotten. */
void rdzv__copies_conn_closed(struct copies *cp, struct conn *c);

/* Holders known (live, closed within their lease, and the grace). */
uint64_t rdzv__copies_nholders(const struct copies *cp);

#endif /* RDZV_STORE_COPIES_H */
