/* The root's per-job state, shared by root.c (keys, waits, collectives)
 * and root_join.c (rendezvous rounds). Private. */
#ifndef RDZV_STORE_ROOT_INT_H
#define RDZV_STORE_ROOT_INT_H

#include "store/kvs.h"
#include "store/server_int.h"
#include "store/waits.h"

struct coll;
struct round;

struct kvs {
  struct daemon *d;
  struct kv_table kv;
  struct coll *colls;
  struct round *rounds;
  struct waitset waits;
};

/* RDZV_MSG_JOIN and RDZV_MSG_ABORT at the root. */
void rdzv__root_join(struct kvs *s, struct conn *c, const struct rdzv_msg *m);
void rdzv__root_abort(struct kvs *s, struct conn *c, const struct rdzv_msg *m);
/* Generation check of a request's first key: keys named
 * "rdzv/<round>/g<N>/..." of an older generation than the round's current
 * one are RDZV_ESTALE_GENERATION, of an aborted one RDZV_EABORTED (with
 * the reason in *why). Returns 0 for every other key. */
int rdzv__root_gen_check(struct kvs *s, const struct rdzv_msg *m,
                         const char **why);
void rdzv__root_rounds_free(struct kvs *s);
/* c closed: a generation it joined ranks to is aborted (unless they left
 * cleanly). */
void rdzv__root_rounds_conn_closed(struct kvs *s, struct conn *c);
/* Fails the pending barriers and gathers named with prefix (status and
 * text to every requester) and forgets them. */
void rdzv__root_colls_fail_prefix(struct kvs *s, const char *prefix,
                                  int status, const char *text);

/* Sets a write-once key on behalf of the root itself and wakes waiters. */
int rdzv__root_put(struct kvs *s, const char *key, const uint8_t *v,
                   uint32_t vlen);

#endif /* RDZV_STORE_ROOT_INT_H */
