/* A node's per-job state, shared by node.c (cache, waits, reads, adds,
 * collectives) and node_join.c (rendezvous joins). Private. */
#ifndef RDZV_STORE_NODE_INT_H
#define RDZV_STORE_NODE_INT_H

#include "store/daemon/keys/copies.h"
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
struct absent;

struct node_job {
  struct daemon *d;
  struct job *job;
  struct upstream *up;
  struct kv_table cache; /* write-once keys */
  /* node_copies.c: copies of mutable keys granted by the parent (values,
   * and keys known absent), valid while the upstream's lease runs; and
   * this node's own child nodes' copies (it is their parent). */
  struct kv_table copies;
  struct absent *absent;
  struct copies holders;
  char what[300]; /* "job <id>" for logs */
  struct waitset waits;
  struct upwait *upwaits; /* node_read.c: upstream waits in flight, by
                             their keys */
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
  bool copy;       /* reads: a child node asked for a copy (RDZV_F_COPY) */
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
void rdzv__node_reply_status(struct conn *c, const struct rdzv_msg *m, int st);
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

/* node_read.c: GET, MGET and WAIT (answered from the write-once cache
 * and valid copies, or one upstream request per identical read or wait
 * in flight); the waits' hooks. */
void rdzv__node_get(struct node_job *nj, struct conn *c,
                    const struct rdzv_msg *m);
void rdzv__node_mget(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m);
void rdzv__node_wait(struct node_job *nj, struct conn *c,
                     const struct rdzv_msg *m);
extern const struct waits_hooks rdzv__node_wait_hooks;
/* Frees the reads in flight (their requests unanswered: the job ends). */
void rdzv__node_reads_free(struct node_job *nj);

/* node_copies.c: copies of mutable keys (keys/copies.h). */
void rdzv__node_copies_init(struct node_job *nj);
/* Before the upstream goes: child nodes' holders released. */
void rdzv__node_copies_free(struct node_job *nj);
/* Whether copies may be answered from now (the parent's lease runs). */
bool rdzv__node_copies_valid(struct node_job *nj);
/* This node's copy of k: 1 with its value in *v (and *blob), 0 when k is
 * held absent, -1 when no copy is held (or copies are not valid now). */
int rdzv__node_copy_find(struct node_job *nj, struct rdzv_slice k,
                         struct rdzv_slice *v, struct rdzv_blob **blob);
/* A granted copy of k: its value, or (v NULL) its absence. */
void rdzv__node_copy_put(struct node_job *nj, struct rdzv_slice k,
                         const struct rdzv_slice *v);
/* Registers child node c (a no-op for a client) for keys[0..n): true
 * when c is a node and every one was registered (the reply may carry
 * RDZV_F_COPY). */
bool rdzv__node_copies_grant(struct node_job *nj, struct conn *c,
                             const struct rdzv_slice *keys, uint32_t n);
/* The upstream's callbacks (rdzv__upstream_copies). */
void rdzv__node_copies_on_inval(void *arg, uint64_t gen,
                                const struct rdzv_msg *m);
void rdzv__node_copies_on_lost(void *arg);
/* A child node's PING: its lease (at most what is left of ours). */
void rdzv__node_copies_ping(struct daemon *d, struct conn *c,
                            struct rdzv_msg *r);

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
/* Copies (keys/copies.h): on_inval(arg, gen, m) gets each invalidation
 * reply of the parent (m->a its sequence number; keys, or flag ALL); the
 * node drops those copies, then calls rdzv__upstream_inval_ack(u, gen,
 * m->a) once the copies below it are gone too. on_lost(arg): the
 * connection that granted the copies ended (they all go). */
void rdzv__upstream_copies(struct upstream *u,
                           void (*on_inval)(void *arg, uint64_t gen,
                                            const struct rdzv_msg *m),
                           void (*on_lost)(void *arg));
/* Acknowledges invalidations up to seq on connection gen (a no-op when
 * that connection has ended), asking for the next ones. */
void rdzv__upstream_inval_ack(struct upstream *u, uint64_t gen, uint64_t seq);
/* Copies were granted while no lease runs: a PING goes now (unless one
 * is in flight), so that they may be answered from after its reply. */
void rdzv__upstream_want_lease(struct upstream *u);
/* Milliseconds the parent's lease on copies still runs (0: none). */
uint64_t rdzv__upstream_lease_left(const struct upstream *u);
/* Job j's node state, created (with its link to the parent, which
 * starts connecting) if it has none. NULL when out of memory. */
struct node_job *rdzv__node_job(struct daemon *d, struct job *j);
/* Whether u's connection to the parent is up (its hello answered); when
 * not, why in why (n bytes): the address, for how long, the last
 * failure. */
bool rdzv__upstream_attached(const struct upstream *u, char *why, size_t n);
/* Where u's link goes now: returns the address (the parent's, or an
 * ancestor's while reattached); *hops: 0 for the parent, k for the k-th
 * ancestor above it; *state: the link's state's name. Borrowed. */
const char *rdzv__upstream_where(const struct upstream *u, uint32_t *hops,
                                 const char **state);
/* Whether the root is reachable through u as far as this node knows: u
 * is attached and the parent's last ping reply did not carry
 * RDZV_F_ROOT_AWAY. When not, why (n bytes; why may be NULL) names the
 * parent and what is down. */
bool rdzv__upstream_root_reachable(const struct upstream *u, char *why,
                                   size_t n);
/* What a link's returns home came to (upstream_home.c): failed returns
 * (refused, or lost before ready) since the last one that worked, probe
 * answers that said the parent could not reach the root, returns put
 * off while requests other than reads were in flight, and how long the
 * parent must answer ready before the next return (ms). */
struct rdzv_home_counts {
  uint64_t failed, not_ready, deferred, wait_ms;
};
/* Fills *out with u's counts (stats' "links"). */
void rdzv__upstream_home_counts(const struct upstream *u,
                                struct rdzv_home_counts *out);
/* Whether the parent fenced this node (declared it lost, or refused a
 * request of it as stale) within the last --session-grace-ms, or since
 * and has answered nothing sent after; when so, why (n bytes): who said
 * what, how long ago. */
bool rdzv__upstream_fenced(const struct upstream *u, char *why, size_t n);
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
