/* The root's per-job data, shared by root.c (dispatch, key operations),
 * coll.c (barriers and gathers), round.c and root_join.c (rendezvous rounds).
 * Private. */
#ifndef RDZV_STORE_ROOT_INT_H
#define RDZV_STORE_ROOT_INT_H

#include "store/daemon/keys/copies.h"
#include "store/daemon/keys/waits.h"
#include "store/daemon/state/state.h"
#include "store/daemon/transport/transport.h"

struct coll;
struct round;
struct done_op;
struct deferred;

/* A job at the root: j->role_data. st is the truth (keys, counters,
 * write-once keys, round and collective records); the rest is live
 * bookkeeping tied to connections and timers. */
struct root_job {
  struct daemon *d;
  const char *job_id; /* the transport's job id, which outlives s */
  struct rdzv_state *st;
  struct coll *colls;   /* coll.c: collectives seen, done or not */
  struct round *rounds; /* round.c: rounds by name */
  struct waitset waits;
  struct copies copies; /* child nodes' copies of this job's keys */
  /* root.c: requests naming keys whose invalidation is waited for, in
   * the order they came; whether they are being taken up. */
  TAILQ_HEAD(, deferred) deferred;
  bool undeferring;
  uint64_t grace_for; /* the leadership (d->leader_since_ms) whose grace
                         is set on copies */
  char what[300];       /* "job <id>" for logs */
  uint64_t coll_bytes; /* coll.c: contributions held until completion */
  /* root.c: answers to ops with an op id, by id and oldest first; the op
   * being handled (cur_op, 0 for none) and its request id. */
  struct done_op *done_ops;
  TAILQ_HEAD(, done_op) done_fifo;
  uint64_t ndone;
  uint64_t cur_op;
  uint32_t cur_req;
};

/* ---- root.c ---------------------------------------------------------------- */

/* Replies status (no fields) to request m of c. */
void rdzv__root_reply_status(struct conn *c, const struct rdzv_msg *m,
                             int st);
/* Item i of a validated request's list (shapes were checked, so it
 * exists; an empty slice otherwise). */
void rdzv__root_item(const struct rdzv_items *it, uint32_t i,
                     struct rdzv_slice *out);

/* 0 when the job may hold `more` bytes beyond what it holds (its state's
 * bytes and its collectives' pending contributions), within
 * --max-job-bytes (0: no cap); else RDZV_EJOB_FULL, already answered to
 * request m of c with a text naming the job, the cap and the numbers, and
 * logged (rate-limited). */
int rdzv__root_room(struct root_job *s, struct conn *c,
                    const struct rdzv_msg *m, uint64_t more);

/* ---- coll.c ---------------------------------------------------------------- */

/* RDZV_MSG_BARRIER / RDZV_MSG_GATHER and RDZV_MSG_COLL_STATUS. */
void rdzv__root_collective(struct root_job *s, struct conn *c,
                           const struct rdzv_msg *m);
void rdzv__root_coll_status(struct root_job *s, struct conn *c,
                            const struct rdzv_msg *m);
/* Fails the pending barriers and gathers named with prefix (status and
 * text to every requester) and forgets them. */
void rdzv__root_colls_fail_prefix(struct root_job *s, const char *prefix,
                                  int status, const char *text);
/* c closed: its places among the collectives' waiters go (what it
 * contributed stays). */
void rdzv__root_colls_conn_closed(struct root_job *s, struct conn *c);
/* Frees every collective's live data (the job ends). */
void rdzv__root_colls_free(struct root_job *s);

/* ---- round.c, root_join.c ------------------------------------------------ */

/* RDZV_MSG_JOIN and RDZV_MSG_ABORT at the root. */
void rdzv__root_join(struct root_job *s, struct conn *c,
                     const struct rdzv_msg *m);
void rdzv__root_abort(struct root_job *s, struct conn *c,
                      const struct rdzv_msg *m);
/* Generation check of a request's first key: keys named
 * "rdzv/<round>/g<N>/..." of an older generation than the round's current
 * one are RDZV_ESTALE_GENERATION, of an aborted one RDZV_EABORTED (with
 * the reason in *why). Returns 0 for every other key. */
int rdzv__root_gen_check(struct root_job *s, const struct rdzv_msg *m,
                         const char **why);
void rdzv__root_rounds_free(struct root_job *s);
/* Answers every join waiting at the root with status and why (the round
 * itself is left as it is: the root stands down). */
void rdzv__root_rounds_fail_pending(struct root_job *s, int status,
                                    const char *why);
/* c closed: a generation it joined ranks to is aborted (unless they left
 * cleanly). */
void rdzv__root_rounds_conn_closed(struct root_job *s, struct conn *c);
/* Sets a write-once key on behalf of the root itself and wakes its
 * waiters, once copies of its absence held below are invalidated. */
int rdzv__root_put(struct root_job *s, const char *key, const uint8_t *v,
                   uint32_t vlen);

#endif /* RDZV_STORE_ROOT_INT_H */
