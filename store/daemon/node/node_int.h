/* A node's per-job state, shared by node.c (cache, waits, reads, adds,
 * collectives) and node_join.c (rendezvous joins). Private. */
#ifndef RDZV_STORE_NODE_INT_H
#define RDZV_STORE_NODE_INT_H

#include "store/daemon/keys/kvs.h"
#include "store/daemon/transport/transport.h"
#include "store/daemon/keys/waits.h"

struct nget;
struct lreq;
struct nadd;
struct ncoll;
struct njround;
struct joined;
struct upstream;
struct upwait;

struct node_job {
  struct daemon *d;
  struct job *job;
  struct upstream *up;
  struct kv_table cache; /* write-once keys */
  struct waitset waits;
  struct upwait *upwaits; /* node.c: upstream waits in flight, by key */
  struct nget *gets;
  struct nadd *adds;
  struct ncoll *colls;
  struct njround *jrounds;
  /* Some round's generations died with the parent (joins_lost): until
   * then no request needs rdzv__node_lost_generation's key parse. */
  bool joins_lost;
  struct joined *joined; /* connections that joined, by conn */
  uint64_t epoch; /* parent restarts seen: mixed into our hello replies */
  uv_timer_t *lost_timer; /* node_join.c: lost child nodes' grace */
};

struct lreq { /* a local request waiting for an upstream answer */
  struct conn *c;
  uint32_t req_id;
  int64_t delta;   /* adds: a local caller's delta */
  uint32_t nparts; /* adds: a child node's parts (0: a local caller) */
  struct lreq *next;
};

struct lreq *rdzv__node_lreq_new(struct conn *c, uint32_t req_id);
/* A fresh op id (RDZV_F_OPID) for a mutation this node sends up. */
uint64_t rdzv__node_opid(struct daemon *d);
/* Sends reply (type/status/fields of an upstream reply) to a local
 * request and frees it. */
void rdzv__node_lreq_answer(struct lreq *l, uint8_t type,
                            const struct rdzv_msg *up);
/* Frees a list of local requests without answering (their connections'
 * references dropped). */
void rdzv__node_lreqs_free(struct lreq *l);

/* coll.c: RDZV_MSG_BARRIER / GATHER and COLL_STATUS; c closed (its places
 * among the waiters go; its contributions stay); the job ends. */
void rdzv__node_collective(struct node_job *nj, struct conn *c,
                           const struct rdzv_msg *m);
void rdzv__node_coll_status(struct node_job *nj, struct conn *c,
                            const struct rdzv_msg *m);
void rdzv__node_colls_drop_conn(struct node_job *nj, struct conn *c);
void rdzv__node_colls_free(struct node_job *nj);
/* An abort of round (its name, n bytes) went up: what this node holds of
 * the round's collectives ("rdzv/<round>/g<N>/...") goes up now, after it,
 * so that their members hear of the abort from the root at once instead
 * of after the wait for a member that will not come (--flush-max-ms). */
void rdzv__node_colls_flush_round(struct node_job *nj, const uint8_t *round,
                                  size_t n);

/* Replies status (no fields) to request m of c. */
void rdzv__node_reply_status(struct conn *c, const struct rdzv_msg *m,
                             int st);
/* Forwards m unchanged to the parent; the reply goes back to c. */
void rdzv__node_forward(struct node_job *nj, struct conn *c,
                        const struct rdzv_msg *m);
/* Starts t to fire after the quiet interval (--flush-ms), but no later
 * than --flush-max-ms after first_ms. */
void rdzv__node_schedule(struct daemon *d, uv_timer_t *t, uint64_t first_ms,
                         uv_timer_cb cb);

/* Caches a write-once key (copied) and wakes local waiters of it. */
void rdzv__node_cache_put(struct node_job *nj, struct rdzv_slice k,
                          struct rdzv_slice v);

/* node_join.c */
void rdzv__node_join(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m);
void rdzv__node_abort(struct node_job *nj, struct conn *c,
                      const struct rdzv_msg *m);
void rdzv__node_conn_closed(struct node_job *nj, struct conn *c);
void rdzv__node_joins_free(struct node_job *nj);
/* The job ends here cleanly (no connection of it is left): tells the
 * parent, for each round this node joined ranks to, that this node leaves
 * (ABORT with RDZV_F_LEAVE and no claim), so that closing the connection
 * to it aborts nothing. */
void rdzv__node_joins_leave(struct node_job *nj);
/* The parent restarted: every generation joined so far is lost (requests
 * for its keys fail with RDZV_EABORTED, saying so, until a new join of
 * that round succeeds). */
void rdzv__node_joins_lost(struct node_job *nj);
/* The parent's connection is up again after a loss: each round's
 * completed members are sent again, so the root binds them to this path. */
void rdzv__node_joins_reconnected(struct node_job *nj);
/* How many contributors of a collective named key (its members spec, its
 * member count) this node's subtree holds, when key is
 * "rdzv/<round>/g<N>/..." of a generation whose join completed through
 * this node (its ranks and its child nodes' ranks are known here).
 * Returns that number; -1 when it cannot be known; -2 when *ver says it
 * was counted for the subtree as it stands (*ver, 0 at first, is updated
 * on every count). */
struct rdzv_members;
int64_t rdzv__node_subtree_contributors(struct node_job *nj,
                                        struct rdzv_slice key,
                                        const struct rdzv_members *spec,
                                        uint64_t count, uint64_t *ver);
/* If m's first key is "rdzv/<round>/g<N>/..." of a generation lost to a
 * parent's restart, answers it (RDZV_EABORTED with the reason) and returns
 * true. */
bool rdzv__node_lost_generation(struct node_job *nj, struct conn *c,
                                const struct rdzv_msg *m);

/* ---- the connection to the parent (upstream.c) ---------------------------- */

/* Called once with the parent's reply, or with a reply synthesized here
 * (status RDZV_ECONN_CLOSED, RDZV_ECANCELED) when none can come. */
typedef void (*upstream_cb)(struct daemon *d, const struct rdzv_msg *reply,
                            void *arg);

/* Connects to cfg.parent for job_id. on_restart(arg) runs when the parent
 * is met again with another incarnation than before (it restarted and lost
 * what it held), before anything queued is sent to it; on_reconnect(arg)
 * when a connection is ready again after a lost one (to the parent or an
 * ancestor), after what the lost one carried was sent again. */
struct upstream *rdzv__upstream_create(struct daemon *d, const char *job_id,
                                       void (*on_restart)(void *arg),
                                       void (*on_reconnect)(void *arg),
                                       void *arg);
/* Fails every request (RDZV_ECANCELED) and closes the connection; with
 * flush, what was sent but not written yet is written first (a clean
 * end's last messages). NULL is a no-op. */
void rdzv__upstream_destroy(struct upstream *u, bool flush);
/* Sends m (its req_id is replaced) to the parent; queued until connected. */
int rdzv__upstream_send(struct upstream *u, const struct rdzv_msg *m,
                        upstream_cb cb, void *arg);
/* The largest frame body the parent takes: what its hello reply said, or
 * this daemon's own --max-frame-bytes before the first hello. */
uint32_t rdzv__upstream_frame_limit(const struct upstream *u);
/* Sends m's items (m->vals, raw list) in as many requests as the parent's
 * frame limit needs, in order, each with the same keys, numbers and cb;
 * head (may be NULL) goes first in every one (a join's params). For the
 * combined messages whose items are independent contributions (barrier,
 * gather, join): the parent counts each once and answers the last request
 * with the result, the others RDZV_F_SUPERSEDED. Returns 0, an error of
 * rdzv__upstream_send (requests sent before it stay sent), or
 * RDZV_EFRAME_TOO_BIG (nothing sent) when one item alone cannot fit; on
 * an error cb (if not NULL) has also run, once, with that status and a
 * text (keys[0]) naming the parent and, for a misfit, both sizes. */
int rdzv__upstream_send_split(struct upstream *u, const struct rdzv_msg *m,
                              const struct rdzv_slice *head, upstream_cb cb,
                              void *arg);


#endif /* RDZV_STORE_NODE_INT_H */
