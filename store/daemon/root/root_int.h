/* The root's per-job data, shared by root.c (dispatch, key operations),
 * coll.c (barriers and gathers), round.c and root_join.c (rendezvous rounds).
 * Private. */
#ifndef RDZV_STORE_ROOT_INT_H
#define RDZV_STORE_ROOT_INT_H

#include <uthash.h>

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
  uint64_t grace_for;  /* the leadership (d->leader_since_ms) whose grace
                          is set on copies */
  char what[300];      /* "job <id>" for logs */
  uint64_t coll_bytes; /* coll.c: contributions held until completion */
  /* root.c: answers to ops with an op id, by id and oldest first; the op
   * being handled (cur_op, 0 for none) and its request id. */
  struct done_op *done_ops;
  TAILQ_HEAD(, done_op) done_fifo;
  uint64_t ndone;
  uint64_t cur_op;
  uint32_t cur_req;
};

/* round_timeline.c: the role's status hook (struct rdzv_role): o's
 * "rounds": {job id: {round name: timeline}} of job only (NULL: every
 * job; at most 256 rounds, then "rounds_not_listed": the count left out). */
void rdzv__root_status(struct daemon *d, const struct job *only, void *o);

/* ---- root.c ---------------------------------------------------------------- */

/* Replies status (no fields) to request m of c. */
void rdzv__root_reply_status(struct conn *c, const struct rdzv_msg *m, int st);
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

/* ---- root_dedup.c: re-sent mutations, applied once ------------------------ */

/* The answer to a mutation that carried an op id (RDZV_F_OPID), kept
 * --dedup-window-ms (and at most DEDUP_MAX per job) so that the same op
 * sent again by a node whose connection failed before the answer came is
 * answered the same, not applied twice. */
struct done_op {
  UT_hash_handle hh;
  uint64_t id;
  uint64_t at_ms;
  int32_t status;
  int64_t a;
  uint16_t flags;
  uint32_t nkeys, nvals;
  struct rdzv_buf keys, vals; /* raw item lists */
  TAILQ_ENTRY(done_op) link;  /* oldest first */
};

/* Whether type changes keys (set, cas, delete, mset, append, add). */
bool rdzv__root_mutates(uint8_t type);
/* Keeps r as the answer to op id (out of memory: nothing kept, a
 * re-send is then applied again); a durable backend also as a record. */
void rdzv__root_dedup_put(struct root_job *s, uint64_t id,
                          const struct rdzv_msg *r);
/* The answer to op id (from the table, or a durable backend's record),
 * or NULL. */
struct done_op *rdzv__root_dedup_find(struct root_job *s, uint64_t id);
/* A re-sent op already applied (m->b its id): answered as the first
 * time, true; false when it is new. */
bool rdzv__root_dedup_answer(struct root_job *s, struct conn *c,
                             const struct rdzv_msg *m);
void rdzv__root_dedup_free(struct root_job *s);
/* Appends it's items to out as a raw list. 0 or RDZV_ENOMEM. */
int rdzv__root_items_copy(const struct rdzv_items *it, struct rdzv_buf *out);

/* ---- root_fence.c: writes answered once copies below are invalidated ---- */

/* Answers write r to c once the copies of the keys it changed (items, or
 * the one key k when items is NULL; none when changed is false) are
 * invalidated below, then wakes the waiters of its first nnotify keys
 * (the same keys). The answer to the op id being handled is kept at once.
 * Out of memory to wait: answered RDZV_ENOMEM (applied, outcome unknown
 * to the writer). */
void rdzv__root_answer_write(struct root_job *s, struct conn *c,
                             struct rdzv_msg *r, const struct rdzv_items *items,
                             struct rdzv_slice k, bool changed,
                             uint32_t nnotify);
/* The same with a bare status reply to request m. */
void rdzv__root_answer_status_write(struct root_job *s, struct conn *c,
                                    const struct rdzv_msg *m, int st,
                                    const struct rdzv_items *items,
                                    struct rdzv_slice k, bool changed,
                                    uint32_t nnotify);
/* Whether request m names a key whose invalidation is waited for (a
 * count or a listing of keys: whether any key is). */
bool rdzv__root_blocked(struct root_job *s, const struct rdzv_msg *m);
/* Holds m of c until its keys are not busy (false: out of memory,
 * nothing held). */
bool rdzv__root_defer(struct root_job *s, struct conn *c,
                      const struct rdzv_msg *m);
/* Keys stopped being busy (copies' idle callback, arg = s): the held
 * requests go, in order. */
void rdzv__root_undefer(void *arg);
/* Drops every held request (the job ends). */
void rdzv__root_deferred_clear(struct root_job *s);
/* The role's request handler (root.c), for the held requests. */
void rdzv__root_handle(struct daemon *d, struct conn *c,
                       const struct rdzv_msg *m);

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
/* As rdzv__root_put, for a key that is write-once or not (a mutable one
 * may be overwritten or deleted by clients later). */
int rdzv__root_set(struct root_job *s, const char *key, const uint8_t *v,
                   uint32_t vlen, bool write_once);

#endif /* RDZV_STORE_ROOT_INT_H */
