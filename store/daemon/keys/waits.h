/* Waits on keys (several keys, one deadline), shared by the root (keys in
 * its table) and the node (keys its parent reported). A waitset holds the
 * waiters of one job; the role tells it through hooks which keys exist,
 * what their values are, and learns when a key gets its first waiter. */
#ifndef RDZV_STORE_WAITS_H
#define RDZV_STORE_WAITS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <uv.h>

#include "store/daemon/blob.h"
#include "store/wire/wire.h"

struct conn;
struct watch;
struct waiter;
struct conn_waiters;
TAILQ_HEAD(waiter_list, waiter);

struct waits_hooks {
  /* True if key exists now. */
  bool (*present)(void *ctx, const uint8_t *k, uint32_t klen);
  /* Value of an existing key for the OK reply (may give n = 0 when the
   * role does not hold values, as a node for mutable keys), and the blob
   * that holds it (NULL: none): the reply is written from it, so every
   * waiter of a key gets the one buffer, not a copy each. */
  void (*value)(void *ctx, const uint8_t *k, uint32_t klen,
                struct rdzv_slice *v, bool *write_once,
                struct rdzv_blob **blob);
  /* Optional (NULL: none granted): the waiter of c that asked for copies
   * (RDZV_F_COPY) completes with keys[0..n): true when the role granted
   * them (registered c for each), and the reply carries RDZV_F_COPY. */
  bool (*grant)(void *ctx, struct conn *c, const struct rdzv_slice *keys,
                uint32_t n);
  /* Optional (NULL: not called): a new waiter lacks keys[0..n) (borrowed
   * for the call), deadline_ms its deadline (loop time). Called once per
   * waiter. */
  void (*missing)(void *ctx, const struct rdzv_slice *keys, uint32_t n,
                  uint64_t deadline_ms);
};

struct waitset {
  uv_loop_t *loop;
  struct waits_hooks hooks;
  void *ctx;
  struct watch *watches;
  struct waiter_list waiters;
  struct conn_waiters *by_conn; /* each connection's waiters */
  uint64_t seq; /* waiters registered so far (each gets the next) */
};

void rdzv__waits_init(struct waitset *ws, uv_loop_t *loop,
                      const struct waits_hooks *hooks, void *ctx);
/* Registers the WAIT request m of c; replies at once if every key exists.
 * Returns the number of keys still missing (0: answered), or RDZV_ENOMEM
 * (answered with that status). */
int rdzv__waits_add(struct waitset *ws, struct conn *c,
                    const struct rdzv_msg *m);
/* key now exists: completes the waiters that lacked only it. */
void rdzv__waits_notify(struct waitset *ws, const uint8_t *k, uint32_t klen);
/* key existed at some moment after each waiter registered as number
 * <= upto (rdzv__waits_seq then) came: completes those that lacked only
 * it; later waiters keep waiting for it. */
void rdzv__waits_notify_upto(struct waitset *ws, const uint8_t *k,
                             uint32_t klen, uint64_t upto);
/* The number the last registered waiter got (0: none yet). */
uint64_t rdzv__waits_seq(const struct waitset *ws);
/* Latest deadline (loop ms) among waiters of key, or 0 if none. */
uint64_t rdzv__waits_deadline(struct waitset *ws, const uint8_t *k,
                              uint32_t klen);
/* Fails every waiter of key with status (e.g. the parent went away) and
 * text (keys[0] of the reply: which daemon failed, why); "" or NULL for
 * none (then keys = the keys still missing, as at a deadline). */
void rdzv__waits_fail_key(struct waitset *ws, const uint8_t *k, uint32_t klen,
                          int status, const char *text);
/* Fails every waiter that waits on a key starting with prefix with status
 * and text (keys[0] of the reply); e.g. an aborted generation. */
void rdzv__waits_fail_prefix(struct waitset *ws, const uint8_t *prefix,
                             uint32_t plen, int status, const char *text);
/* Drops every waiter of c without replying (c closed): its memory and
 * its reference on c go now, not at its deadline. O(c's waiters). */
void rdzv__waits_drop_conn(struct waitset *ws, struct conn *c);
/* Drops every waiter without replying (shutdown). */
void rdzv__waits_clear(struct waitset *ws);

#endif /* RDZV_STORE_WAITS_H */
