/* The transport's API: what a role (store/daemon/root, store/daemon/node)
 * and a front end (store/daemon/tcpstore) may use of rdzvd's transport.
 *
 * The transport owns listeners, connections, framing, the hello, limits,
 * the write path, jobs (by id) and statistics. It reaches the role chosen
 * at start-up only through struct rdzv_role below, and never names a role
 * function; a role answers only through the calls declared here
 * (rdzv__conn_reply, rdzv__conn_send, rdzv__conn_fail, ...).
 *
 * Roles may read the fields documented as readable in struct conn, struct
 * job and struct daemon; everything else is the transport's. Private:
 * never installed. */
#ifndef RDZV_STORE_DAEMON_TRANSPORT_H
#define RDZV_STORE_DAEMON_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <uv.h>

#include "store/daemon/blob.h"
#include "store/daemon/config.h"
#include "store/daemon/daemon.h"
#include "store/tls/tls.h"
#include "store/wire/wire.h"

struct daemon;
struct conn;
struct job;

/* ---- statistics (stats.c) ----------------------------------------------- */

struct op_stats {
  uint64_t received;  /* requests of this type from peers below */
  uint64_t forwarded; /* requests of this type sent to the parent */
  uint64_t local;     /* answered here without the parent (cache, root) */
  uint64_t errors;    /* answered with a non-zero status */
};

/* The daemon's counters that stats' JSON shows as they are, in the order
 * it lists them: X(group, key, field), group `top` for the top level
 * (stats.c). Adding a counter is a line here: struct stats gets the
 * field, the JSON the key. */
#define RDZV_STATS_COUNTERS(X)                                                 \
  X(connections, open, conns_open)                                             \
  X(connections, total, conns_total)                                           \
  /* over the connection limit */                                              \
  X(connections, rejected, conns_rejected)                                     \
  X(bytes, in, bytes_in)                                                       \
  X(bytes, out, bytes_out)                                                     \
  X(frames, in, frames_in)                                                     \
  X(frames, out, frames_out)                                                   \
  /* peers dropped for malformed input or limits */                            \
  X(top, proto_errors, proto_errors)                                           \
  /* write-once reads served from the cache */                                 \
  X(top, cache_hits, cache_hits)                                               \
  /* reads and waits joined to one upstream request */                         \
  X(top, coalesced, coalesced)                                                 \
  /* adds and contributions merged into another */                             \
  X(top, combined, combined)                                                   \
  X(top, upstream_reconnects, upstream_reconnects)                             \
  /* a parent met again with a new incarnation */                              \
  X(top, parent_restarts, parent_restarts)                                     \
  /* the parent lost to --liveness-timeout-ms */                               \
  X(top, parent_silent, parent_silent)                                         \
  /* child nodes lost to --liveness-timeout-ms */                              \
  X(top, children_silent, children_silent)                                     \
  /* extra requests to fit the parent's frame limit */                         \
  X(top, split_frames, split_frames)                                           \
  /* requests sent again after a lost connection */                            \
  X(top, resent, resent)                                                       \
  /* connections made to an ancestor, not --parent */                          \
  X(top, reattached, reattached)                                               \
  /* root: re-sent mutations answered, not redone */                           \
  X(top, dedup_hits, dedup_hits)                                               \
  /* Of bytes.out: written from a value's shared buffer (a reference, no       \
   * copy); bytes of values of at least --share-min-bytes copied into a        \
   * connection's output all the same (no shared buffer held them). Socket     \
   * peers only: in-process peers copy nothing. Of bytes.in: frames from the   \
   * parent whose bytes another daemon of this thread already held, kept       \
   * once (blob.h: interning). */                                              \
  X(bytes, shared, bytes_shared)                                               \
  X(bytes, copied_large, bytes_copied_large)                                   \
  X(bytes, interned, bytes_interned)                                           \
  /* stale aborts and re-binds of a lost daemon refused (the members are       \
   * bound elsewhere) */                                                       \
  X(top, fenced, fenced)                                                       \
  /* job links moved back from an ancestor to --parent once it was healthy     \
   * again */                                                                  \
  X(top, returned_home, returned_home)                                         \
  /* node: times its parent declared it lost or refused a request of it as     \
   * stale */                                                                  \
  X(top, fenced_here, fenced_here)                                             \
  /* collectives forwarded at the subtree's last contribution (members         \
   * known); joins forwarded when the subtree had joined (--children known) */ \
  X(top, coll_subtree_flushes, coll_subtree_flushes)                           \
  X(top, join_subtree_flushes, join_subtree_flushes)                           \
  /* ranks' sessions resumed on a new connection */                            \
  X(top, sessions_resumed, sessions_resumed)                                   \
  /* node: host health checks run (--health-cmd), and failed (the host         \
   * quarantined) */                                                           \
  X(top, health_checks, health_checks)                                         \
  X(top, health_failed, health_failed)                                         \
  /* root: join records of quarantined hosts refused (RDZV_EQUARANTINED) */    \
  X(top, quarantine_refused, quarantine_refused)                               \
  /* ranks' sessions that expired (or whose process was gone): generation      \
   * aborted */                                                                \
  X(top, sessions_lost, sessions_lost)                                         \
  /* Copies of mutable keys (keys/copies.h). Parent side: copies granted to    \
   * child nodes, invalidation replies sent, writes that waited for            \
   * invalidations, holders whose lease ended before they acknowledged.        \
   * Node side: reads, checks and waits answered from valid copies, and        \
   * invalidations received; reads answered by an identical one sent after     \
   * they came (mutable keys). */                                              \
  X(copies, granted, copies_granted)                                           \
  X(copies, invalidations_sent, invalidations_sent)                            \
  X(copies, write_waits, copy_write_waits)                                     \
  X(copies, lease_waits, copy_lease_waits)                                     \
  X(copies, hits, copy_hits)                                                   \
  X(copies, invalidations_received, invalidations_received)                    \
  X(copies, reads_combined, reads_combined)                                    \
  /* Authentication (--secret-file, --secret-dir): hellos challenged, peers    \
   * that proved the secret, peers refused (a wrong proof, another job's,      \
   * none), hellos without a nonce refused, parents (of a node) that could     \
   * not prove the secret or asked for none, Unix-socket peers whose uid is    \
   * not allowed (--allow-uids), refused before a hello. */                    \
  X(auth, challenged, auth_challenged)                                         \
  X(auth, accepted, auth_accepted)                                             \
  X(auth, refused, auth_refused)                                               \
  X(auth, no_nonce, auth_no_nonce)                                             \
  X(auth, parent_refused, auth_parent_refused)                                 \
  X(auth, peer_refused, auth_peer_refused)                                     \
  /* TLS: handshakes completed on accepted and outgoing links, those that      \
   * failed (a certificate not trusted, expired or missing), plain peers       \
   * refused at the TLS listener, nodes refused for coming without a           \
   * certificate. */                                                           \
  X(tls, handshakes, tls_handshakes)                                           \
  X(tls, failed, tls_failed)                                                   \
  X(tls, plain_refused, tls_plain_refused)                                     \
  X(tls, no_cert, tls_no_cert)                                                 \
  /* An etcd-backed root (store/daemon/durable; the group only with one):      \
   * batches persisted, transactions and operations they took, stand-downs,    \
   * elections won, the client's requests and bytes, and the requests etcd     \
   * failed or refused (each retried). */                                      \
  X(etcd, batches, etcd_batches)                                               \
  X(etcd, txns, etcd_txns)                                                     \
  X(etcd, ops, etcd_ops)                                                       \
  X(etcd, stand_downs, etcd_stand_downs)                                       \
  X(etcd, elections_won, etcd_elections_won)                                   \
  X(etcd, requests, etcd_requests)                                             \
  X(etcd, bytes_out, etcd_bytes_out)                                           \
  X(etcd, bytes_in, etcd_bytes_in)                                             \
  X(etcd, errors, etcd_errors)                                                 \
  /* Probes (wire.h's RDZV_ROLE_PROBE): nodes' probes this daemon answered;    \
   * this node's probes its parent answered (the one at start, then those      \
   * of a job's link away from the parent). */                                 \
  X(probes, answered, probes_answered)                                         \
  X(probes, learned, probes_learned)

struct stats {
#define RDZV_STATS_FIELD(group, key, field) uint64_t field;
  RDZV_STATS_COUNTERS(RDZV_STATS_FIELD)
#undef RDZV_STATS_FIELD
  struct op_stats ops[RDZV_MSG_TYPE_MAX + 1];
  /* An etcd-backed root's role ("leader", "standby", ...; NULL: no etcd),
   * and the leader lease's keepalives answered, and failed. */
  const char *etcd_role;
  uint64_t etcd_lease_renewals, etcd_lease_failures;
  /* etcd requests' latency: by upper bound (store/etcd/etcd.h's
   * rdzv_etcd_latency_bounds_us), summed (us), counted. */
  uint64_t etcd_lat_hist[9];
  uint64_t etcd_lat_us_sum, etcd_lat_count;
  /* The root's rendezvous generations that completed: how long each was
   * open, counted in RDZV_ROUND_BUCKETS (upper bounds in ms, the last
   * one unbounded), their sum; and the generations that failed. */
#define RDZV_ROUND_BUCKETS 10
  uint64_t round_ms_hist[RDZV_ROUND_BUCKETS];
  uint64_t round_ms_sum, rounds_completed, rounds_failed;
};

/* The upper bounds of stats.round_ms_hist's buckets, ms (UINT64_MAX for
 * the last). */
extern const uint64_t rdzv__round_bounds_ms[RDZV_ROUND_BUCKETS];

/* Returns the daemon's statistics as one JSON object (malloc'd text),
 * with what the role adds (struct rdzv_role's status) of job only (NULL:
 * of every job). */
char *rdzv__stats_json(const struct daemon *d, const struct job *only);

/* ---- output queues (outq.c) ------------------------------------------- */

/* Bytes to write to a stream, in order: the queue's own bytes, with the
 * bytes of shared buffers (blobs) in between that are written from those
 * buffers, never copied. refs[i] belongs right before buf.data[refs[i].at]
 * (at ascending); the queue holds a reference on each blob until its
 * bytes are written or dropped. A zeroed struct is an empty queue; an
 * empty queue after a write holds no memory. Loop thread only. */
struct rdzv_outq_ref {
  size_t at;
  struct rdzv_blob *blob;
  const uint8_t *p; /* inside blob */
  uint32_t n;
};
struct rdzv_outq {
  struct rdzv_buf buf;
  struct rdzv_outq_ref *refs;
  uint32_t nrefs, cap;
};

/* Queues p[0..n), which lies inside blob b (a reference is taken), after
 * the queue's bytes so far. 0, or RDZV_ENOMEM (nothing queued). */
int rdzv__outq_ref(struct rdzv_outq *q, struct rdzv_blob *b, const uint8_t *p,
                   uint32_t n);
/* Drops everything after the first len own bytes (the references after
 * them too). */
void rdzv__outq_truncate(struct rdzv_outq *q, size_t len);
/* n own bytes were inserted at offset at (by the caller, in q->buf):
 * references after them move along. */
void rdzv__outq_insert(struct rdzv_outq *q, size_t at, size_t n);
/* Empties q and frees its memory. */
void rdzv__outq_release(struct rdzv_outq *q);
/* Bytes q would write (its own and the references'). */
size_t rdzv__outq_bytes(const struct rdzv_outq *q);
/* Writes q's first n own bytes (1 <= n <= q->buf.len) with the
 * references up to them to s; what follows stays in q. They are tried on
 * the socket at once (uv_try_write): when all of them went, the call
 * returns RDZV_OUTQ_WRITTEN and cb never runs. Otherwise one uv_write
 * carries the rest, owning those bytes and references until it
 * completes; then cb(arg, status) runs (libuv's status), once, and the
 * call returns 0. Adds the bytes written to *written and those written
 * from shared buffers to *shared (either may be NULL). Other returns:
 * RDZV_ENOMEM (q unchanged), or a libuv error of the write (the head is
 * dropped; cb never runs). With tls (a TLS link; NULL: plain), the
 * bytes go into the session (copied from shared buffers too) and its
 * ciphertext is what is written; before the handshake is done the
 * session holds them, nothing is written and the call returns
 * RDZV_OUTQ_WRITTEN (rdzv__tls_send writes them once it is). RDZV_ETLS:
 * the session failed (the head is dropped). */
#define RDZV_OUTQ_WRITTEN 1
int rdzv__outq_write(struct rdzv_outq *q, size_t n, uv_stream_t *s,
                     rdzv_tls_t *tls, void (*cb)(void *arg, int status),
                     void *arg, uint64_t *written, uint64_t *shared);
/* The most plaintext one write of a TLS connection seals (its own bytes
 * and values referred to; a value bigger than this goes alone). */
#define RDZV_TLS_WRITE_BYTES (1u << 20)
/* How many of q's first n own bytes to write so that they and the
 * references among them come to at most budget bytes, or to the end of
 * the first reference when that one alone is more: at least 1. */
size_t rdzv__outq_span(const struct rdzv_outq *q, size_t n, size_t budget);
/* Writes the ciphertext session t has waiting (its handshake's records,
 * held data once the handshake ended, an alert) to s, tried at once on
 * the socket, else by a uv_write that owns a copy (its outcome is not
 * reported: a failed write shows as a failed read). Adds the bytes to
 * *written (may be NULL). Returns 0, RDZV_ENOMEM or a libuv error. */
int rdzv__tls_send(uv_stream_t *s, rdzv_tls_t *t, uint64_t *written);

/* ---- connections (conn.c) ---------------------------------------------- */

/* A connection's states; rdzv__conn_set_state (conn.c) is the one place
 * that moves between them, and logs each move:
 *   HELLO_WAIT -> AUTH_WAIT   the hello challenged (hello.c)
 *   AUTH_WAIT  -> HELLO_WAIT  the proof right: the hello's admission
 *   HELLO_WAIT -> READY       the hello admitted
 *   any open   -> CLOSING     a last frame queued (an ERROR, a refusal, a
 *                             probe's answer): closed once written
 *   HELLO_WAIT -> REFUSED     refused before its hello was read: the
 *                             ERROR written, then open until the peer
 *                             hangs up (or a short timeout)
 *   any        -> CLOSED      the handle closed */
enum conn_state {
  CONN_HELLO_WAIT = 0, /* accepted, no hello yet */
  CONN_AUTH_WAIT,      /* hello challenged, its proof not yet come */
  CONN_READY,          /* hello accepted */
  CONN_CLOSING,        /* flushing a last frame, then closing */
  CONN_REFUSED,        /* a refusal written; waiting for the peer's close */
  CONN_CLOSED,         /* handle closed; freed when refs drop to 0 */
};

struct conn {
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  /* Readable by roles: d, role, job and name. */
  struct daemon *d;
  enum conn_state state;
  int role;        /* enum rdzv_peer_role, once READY */
  struct job *job; /* once READY */
  char name[64];
  struct rdzv_buf in;
  struct rdzv_outq out; /* frames waiting to be written (idle: no memory) */
  bool write_active;    /* a write of earlier frames is in flight */
  bool dirty;           /* on d->dirty: out has bytes to flush */
  /* Before the hello: --hello-timeout-ms. After it, for a child node only:
   * every --heartbeat-ms, closes c once it has sent nothing for
   * --liveness-timeout-ms. A client's goes after its hello (NULL: an idle
   * client holds no timer). */
  uv_timer_t *timer;
  uint64_t last_rx_ms;     /* when bytes last came from the peer (loop time) */
  uint64_t last_check_ms;  /* when the child check last ran */
  uint64_t check_every_ms; /* its interval */
  bool tcp;                /* accepted on the TCP listener */
  /* The peer process of a Unix-socket connection (SO_PEERCRED at accept,
   * in this daemon's pid namespace), 0 when unknown. Readable by roles. */
  int peer_pid;
  uint32_t outstanding;
  uint32_t refs; /* the handle's own reference plus pending operations */
  bool decoding; /* inside decode_frames: c->in is being read */
  /* In-process peer (benchmark): no socket; frames written to it are
   * decoded and handed to deliver(deliver_arg, msg) instead. */
  bool inproc;
  void (*deliver)(void *arg, const struct rdzv_msg *m);
  void *deliver_arg;
  /* During deliver: the blobs the message's bytes may lie in (see
   * rdzv_daemon_inproc_blob). */
  struct rdzv_blob *const *deliver_blobs;
  uint32_t deliver_nblobs;
  TAILQ_ENTRY(conn) link;
  TAILQ_ENTRY(conn) dirty_link;
  /* Under a write gate (a durable root): the first gate_rel bytes of out
   * may be written; the first gate_seal bytes (>= gate_rel) wait for the
   * batch being persisted; the rest for the next one. held: on d->held
   * (out has bytes past gate_rel). */
  size_t gate_rel, gate_seal;
  bool held;
  TAILQ_ENTRY(conn) held_link;
  /* Between a challenged hello and the peer's RDZV_MSG_AUTH: what the
   * hello said and the proof expected (hello.c); NULL otherwise. */
  struct conn_auth *auth;
  /* TLS (conn_tls.c): the session of a peer on the TCP listener of a
   * daemon with --tls-*; NULL: plain (the Unix socket, no TLS). */
  rdzv_tls_t *tls;
  bool tls_seen; /* its first bytes came (they decided TLS or refused) */
};
TAILQ_HEAD(conn_list, conn);

/* Work put off to the end of this loop iteration, after every read of it
 * and before what it queued is written (rdzv__defer): e.g. a node's add
 * goes up at once, yet combined with the adds of the same counter that
 * arrived in the same iteration. Embedded in its owner; zeroed to start. */
struct rdzv_deferred {
  void (*cb)(struct rdzv_deferred *x);
  bool queued;
  TAILQ_ENTRY(rdzv_deferred) link;
};
TAILQ_HEAD(rdzv_deferred_list, rdzv_deferred);

void rdzv__conn_ref(struct conn *c);
void rdzv__conn_unref(struct conn *c);
/* True while replies can still be sent to c. */
bool rdzv__conn_alive(const struct conn *c);
/* True when c's peer came through the Unix socket (neither the TCP
 * listener nor in-process): its peer_pid names a process of this host. */
bool rdzv__conn_on_unix_socket(const struct conn *c);
/* Queues a reply (flag REPLY set here) to c, unless c is gone; it is
 * written at the end of this loop iteration. Counts errors in stats, and
 * ends one outstanding request. */
void rdzv__conn_reply(struct conn *c, struct rdzv_msg *reply);
/* Runs x->cb(x) once at the end of this loop iteration (after its reads,
 * before its writes); a no-op while x is already queued. x must stay
 * valid until then or until rdzv__defer_cancel(d, x). */
void rdzv__defer(struct daemon *d, struct rdzv_deferred *x);
void rdzv__defer_cancel(struct daemon *d, struct rdzv_deferred *x);
/* Queues a frame without touching the outstanding count. */
void rdzv__conn_send(struct conn *c, const struct rdzv_msg *m);
/* Most blobs one send may name (more are ignored: their bytes copied). */
#define RDZV_SEND_MAX_BLOBS 64
/* rdzv__conn_reply and rdzv__conn_send for a message whose bytes may lie
 * in blobs[0..nblobs) (borrowed; e.g. the values of the keys it answers
 * with): every item (or raw list) of at least --share-min-bytes inside
 * one of them is written from that blob, which the transport holds a
 * reference on until the write completes (so a key deleted, a job freed
 * or a connection closed meanwhile changes nothing the write reads); the
 * rest is copied as by rdzv__conn_send. So a value goes to any number of
 * connections from the one buffer that holds it. nblobs may be 0. */
void rdzv__conn_reply_shared(struct conn *c, struct rdzv_msg *reply,
                             struct rdzv_blob *const *blobs, uint32_t nblobs);
void rdzv__conn_send_shared(struct conn *c, const struct rdzv_msg *m,
                            struct rdzv_blob *const *blobs, uint32_t nblobs);
/* Sends an ERROR frame with status and text, then closes c. */
void rdzv__conn_fail(struct conn *c, int status, const char *text);
/* The same, naming the request that broke the rule. */
void rdzv__conn_fail_req(struct conn *c, uint32_t req_id, int status,
                         const char *text);

/* ---- a durable root's write gate (flush.c) --------------------------------- */

/* A role whose answers must not go out before what they depend on is
 * persisted (the etcd-backed root) installs a gate. At the end of every
 * loop iteration the transport asks pending(); when it is true and no
 * batch is being persisted, it seals: every frame queued so far waits
 * for that batch, and start() persists it; the role calls
 * rdzv__gate_done when it is persisted (the frames go out) or
 * rdzv__gate_drop when it never will be (the frames are dropped: the
 * peers' re-sends find the truth elsewhere). Frames queued while a batch
 * is being persisted wait for the next one. With nothing pending and no
 * batch in flight, frames go out at once, as without a gate. In-process
 * peers (the benchmark's) are not gated. */
struct rdzv_gate {
  bool (*pending)(void *arg);
  void (*start)(void *arg);
};
void rdzv__gate_install(struct daemon *d, const struct rdzv_gate *g, void *arg);
void rdzv__gate_done(struct daemon *d);
void rdzv__gate_drop(struct daemon *d);
/* Everything queued to every connection may go (what is queued now is
 * known to depend on nothing unpersisted: errors after a drop). */
void rdzv__gate_release(struct daemon *d);

/* ---- jobs and the role interface ----------------------------------------- */

/* A job as the transport knows it: its id, and what the role keeps for it
 * (role_data, owned by the role; the role frees it in job_free). A job
 * lives while connections of it are open; once the last one closes it
 * lingers --job-linger-ms (a relaunch with the same id finds its state),
 * then the role's job_free runs and the job is gone. A job no request
 * ever used (role_data NULL: a hello, statistics) goes at once. */
struct job {
  char *id;
  void *role_data;
  struct daemon *d;
  uint32_t nconns; /* READY connections of this job */
  uv_timer_t linger;
  struct job *next;
};

/* Readiness checks (rdzvd's /readyz and /health, store/daemon/http): each
 * named ("parent", "etcd", ...), passed or failed with why. */
#define RDZV_MAX_CHECKS 8
struct rdzv_check {
  const char *name; /* static */
  bool ok;
  char why[400]; /* a failed check's reason, naming what failed */
};
struct rdzv_checks {
  int n;
  struct rdzv_check c[RDZV_MAX_CHECKS];
};
/* Adds a check to cs (none past RDZV_MAX_CHECKS); fmt: why it failed
 * (printf; ignored when ok). */
void rdzv__check_add(struct rdzv_checks *cs, const char *name, bool ok,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What a role provides: the transport finds the role through this table,
 * given at start-up (rdzv__transport_start), and calls nothing else of it.
 * Every hook runs on the daemon's loop thread. */
struct rdzv_role {
  const char *name; /* "root" or "node": logs and stats */
  /* One validated request m (never a hello) from READY connection c. The
   * role answers it once, now or later, with rdzv__conn_reply (or closes
   * c with rdzv__conn_fail); m is valid during the call only. */
  void (*handle)(struct daemon *d, struct conn *c, const struct rdzv_msg *m);
  /* c (a socket peer) closed while the daemon runs, and c->job has role
   * data: release or withdraw what c held. Replies to c are dropped from
   * now on; references the role holds on c stay valid until unref'd. */
  void (*conn_closed)(struct daemon *d, struct conn *c);
  /* Optional (NULL: 0): what the role mixes into the incarnation this
   * daemon announces to peers of j in the hello reply. A node changes it
   * when its own parent restarted, so that its children notice too. */
  uint64_t (*hello_epoch)(struct daemon *d, struct job *j);
  /* Free j->role_data (it may be NULL) and set it to NULL, with all it
   * holds (timers, the node's connection to its parent): the daemon is
   * stopping, or the job has had no connection for --job-linger-ms. No
   * connection of j is open either way. */
  void (*job_free)(struct daemon *d, struct job *j);
  /* Optional (NULL: none): answers every request of j the role holds
   * (waits, collectives, joins) with status and text (keys[0]): a root
   * that stands down tells its waiting callers why. */
  void (*fail_all)(struct daemon *d, struct job *j, int status,
                   const char *text);
  /* Optional (NULL: a bare reply): child node c of a job sent a PING; the
   * role may fill reply's a and b (its lease on copies of mutable keys,
   * RDZV_MSG_INVAL in wire.h) before it goes. */
  void (*ping)(struct daemon *d, struct conn *c, struct rdzv_msg *reply);
  /* Optional (NULL: none): adds the role's readiness checks to cs. */
  void (*checks)(struct daemon *d, struct rdzv_checks *cs);
  /* Optional (NULL: none): adds what the role knows of its jobs to the
   * statistics object o (a jansson json_t *): of job only, or of every
   * job when only is NULL (the root: "rounds", each round's timeline). */
  void (*status)(struct daemon *d, const struct job *only, void *o);
  /* Optional (NULL: always ready, as a root is): whether a link of job j
   * (NULL: one this daemon holds nothing of) may come back to this
   * daemon, i.e. its own link toward the root for that job is up; the
   * answer to a node's probe says so (wire.h's RDZV_ROLE_PROBE). */
  bool (*probe_ready)(struct daemon *d, struct job *j);
};

/* A rate limit for a kind of log line: at most 10 lines a second; the
 * next line logged says how many were left out (what: "dropped
 * connections", ...). */
struct rdzv_log_limit {
  const char *what;
  uint64_t sec;
  uint32_t n;
  uint64_t skipped;
};

/* Most ancestors a node keeps (and tells its children) above its parent. */
#define RDZV_MAX_ANCESTORS 16

struct daemon {
  /* Readable by roles: loop, cfg and stats (roles count into stats). */
  uv_loop_t *loop;
  /* The linearizability checker's mutant (RDZVD_TEST_MUTANT=serve-expired
   * in the environment, logged at start): a node answers from copies
   * whose lease has run out. Never set otherwise. */
  bool mutant_serve_expired;
  /* An etcd-backed root: when it last became the leader (loop ms; 0:
   * never). Copies granted by the leader before it may be answered from
   * until their leases end: its writes wait that long (root.c). */
  uint64_t leader_since_ms;
  struct rdzv_daemon_config cfg;
  struct rdzv_wire_limits limits;
  const struct rdzv_role *role;
  void *role_ctx; /* given with the role at start-up (e.g. a state backend) */
  /* Random at each start, never 0: told to every peer in the hello reply
   * (b), so a peer that meets a different one knows this daemon restarted
   * and lost what it held. */
  uint64_t incarnation;
  /* A node's ancestors above its parent, nearest first, as the parent
   * last told (node/upstream.c). The hello reply gives every peer this
   * daemon's own chain: its --parent, then these. */
  char *ancestors[RDZV_MAX_ANCESTORS]; /* [0..nancestors): heap copies */
  uint32_t nancestors;
  uv_tcp_t tcp_listen;
  uv_pipe_t unix_listen;
  bool have_tcp, have_unix;
  uv_idle_t flush_idle;
  uv_check_t flush_check;
  struct rdzv_deferred_list deferred;
  struct conn_list conns;
  struct conn_list dirty;
  uint32_t nconns;
  struct job *jobs;
  struct stats stats;
  char bound_addr[300];
  uint64_t start_ms;
  bool stopping;
  bool started;           /* the start succeeded (daemon.c) */
  bool port_file_written; /* cfg.port_file is ours: removed at stop */
  /* Run first by rdzv_daemon_stop (a front end closing its in-process
   * connections before the transport closes the rest), or NULL. */
  void (*stop_hook)(void *arg);
  void *stop_hook_arg;
  /* RDZV_MSG_TS_SPACE from c (tcpstore/spaces.c), or NULL: refused. */
  void (*ts_space)(void *arg, struct conn *c, const struct rdzv_msg *m);
  void *ts_space_arg;
  /* The write gate (NULL: none), its argument, whether a batch is being
   * persisted, and the connections with frames it holds. */
  const struct rdzv_gate *gate;
  void *gate_arg;
  bool gate_busy;
  struct conn_list held;
  /* A node: its parent answered its probe at start (rdzv__node_probe). */
  bool parent_answered;
  /* Admission (NULL: every hello is accepted): a root that is not the
   * leader answers 0 with why in text and the leader's address in leader
   * ("" unknown); the hello is then refused with RDZV_ENOT_LEADER, the
   * leader's address in vals[0]. Returns 1 to admit. */
  int (*admit)(void *arg, char *text, size_t textlen, char *leader,
               size_t leaderlen);
  void *admit_arg;
  /* A root's peers (the other roots of an etcd-backed service, leader
   * first), told in the hello reply as a node's ancestors are: where a
   * node goes when this root is lost. */
  char *peers[RDZV_MAX_ANCESTORS]; /* [0..npeers): heap copies */
  uint32_t npeers;
  /* The blob that holds the frame being handled now (a node's reply
   * from its parent, while its callback runs), or NULL: every send
   * treats it as one of its blobs, so what a role passes on from that
   * frame is written from it, not copied per connection. */
  struct rdzv_blob *frame_blob;
  /* Rate limits of rdzv__log_drop and of the roles' events. */
  struct rdzv_log_limit drop_limit;
  struct rdzv_log_limit event_limit;
  /* Authentication: on with --secret-file or --secret-dir (and then every
   * socket peer proves the job's secret); secret holds --secret-file's
   * (never logged, never in stats). auth_limit: the rate limit of the
   * refusals' log lines. */
  bool auth;
  uint8_t *secret; /* RDZV_AUTH_SECRET_MAX_BYTES, with --secret-file */
  size_t secret_len;
  struct rdzv_log_limit auth_limit;
  /* This daemon's own key (random at start, never sent): its hellos to a
   * parent carry nonces made with it (rdzv_auth_own_nonce), so that a
   * hello sent back to it (a fake parent reflecting the node's own
   * hello) is refused. */
  uint8_t own_key[32];
  /* TLS (--tls-dir, --tls-cert, --tls-key, --tls-ca): the configuration
   * every TCP link's session is made of, NULL without; and the buffer
   * every TLS socket's ciphertext is read into (read synchronously, then
   * decrypted into the connection's own buffer). */
  rdzv_tls_cfg_t *tls;
  uint8_t *tls_rbuf; /* RDZV_TLS_READ_BYTES; the node's upstream's too */
};
/* Bytes of ciphertext one read of a TLS link takes (a TLS record holds
 * at most 16 KiB of plaintext, plus its overhead). */
#define RDZV_TLS_READ_BYTES 65536u

/* Creates the daemon of cfg on loop with role (and role_ctx, kept for the
 * role in d->role_ctx): binds and listens (cfg->listen "" means no TCP
 * listener; cfg->unix_path "" no Unix socket). Writes no port file (the
 * caller does, once every listener of its own is up too). *out is set even
 * on failure: the caller stops it, runs the loop until its handles are
 * closed, then calls rdzv_daemon_free. Returns 0 or a negative status (a
 * message went to stderr). */
int rdzv__transport_start(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                          const struct rdzv_role *role, void *role_ctx,
                          struct daemon **out);
/* The port the TCP listener is bound to (the kernel's choice for port 0),
 * or 0 without one. */
int rdzv__transport_tcp_port(struct daemon *d);

/* Logs (at level 1) that a connection was dropped for breaking a rule, at
 * most 10 lines a second; the next line says how many were left out
 * (statistics still count every one: proto_errors). */
void rdzv__log_drop(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Logs (at level 1) an event a peer can cause in a loop (a round failing,
 * ...) under the daemon's event rate limit, as rdzv__log_drop does. */
void rdzv__log_event(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* rdzv__log_event about job, as rdzv__log_job says. */
void rdzv__log_event_job(struct daemon *d, const char *job, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));

/* "HOST:PORT" or "[V6]:PORT" (PORT 0..65535; store/wire/addr.h's syntax,
 * a bare IPv6 host taken, no unix:) into host (hostlen bytes,
 * NUL-terminated) and port: a listener's address. 0 or RDZV_EBAD_ADDR. */
int rdzv__split_host_port(const char *addr, char *host, size_t hostlen,
                          int *port);
/* Writes "PORT\n" to path atomically (a temporary file renamed). 0 or
 * -errno. */
int rdzv__write_port_file(const char *path, int port);

/* list[i] = a copy of the len bytes at p (an address, at most 255 bytes),
 * freeing what it held; kept as it is when it holds those bytes already.
 * For d->ancestors and d->peers (i < RDZV_MAX_ANCESTORS). 0 or
 * RDZV_ENOMEM (list[i] unchanged). */
int rdzv__addrs_set(char **list, uint32_t i, const void *p, size_t len);

/* Frees list[keep..*n) and sets *n = keep (keep may exceed *n after
 * rdzv__addrs_set filled the entries up to it). */
void rdzv__addrs_truncate(char **list, uint32_t *n, uint32_t keep);

/* d->ancestors from --parent P,A1,A2,... (A1, A2, ...): what a node uses
 * until its parent tells it the chain, or when the parent tells none. */
void rdzv__ancestors_configured(struct daemon *d);
/* The secret of job id (len bytes) into out (1024 bytes), its length in
 * *out_len: --secret-file's (with --job, for that job only), or the file
 * --secret-dir/<id> (id of [A-Za-z0-9._-] only, not starting with '.';
 * a file that cannot be read, or one whose mode lets others read it, is
 * logged, rate-limited, and counts as none). 1 when the job has one,
 * else 0 (out zeroed). */
int rdzv__job_secret(struct daemon *d, const uint8_t *id, size_t len,
                     uint8_t *out, size_t *out_len);
/* Logs a refused authentication (never the secret or a proof) under the
 * daemon's auth rate limit, as rdzv__log_drop does. */
void rdzv__log_auth(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* rdzv__log_auth about job, as rdzv__log_job says. */
void rdzv__log_auth_job(struct daemon *d, const char *job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Finds or creates the job named id (len bytes). NULL on ENOMEM. */
struct job *rdzv__job_get(struct daemon *d, const uint8_t *id, size_t len);
/* Closes (with an ERROR frame of status and text) every READY connection
 * of job j whose peer has role peer_role (enum rdzv_peer_role). */
void rdzv__job_close_peers(struct daemon *d, struct job *j, int peer_role,
                           int status, const char *text);
/* Closes every READY connection of d, of any job and peer role, as
 * rdzv__conn_fail does (an ERROR frame of status and text, then the
 * close): a root that stands down sends its peers elsewhere. In-process
 * peers (the benchmark's), connections still in their hello and those
 * already closing are left as they are. The role's conn_closed hook runs
 * for each connection whose job still has role data when it closes:
 * during this call when its ERROR frame is written at once (or the write
 * fails), else once the frame is written, after whatever the role did
 * meanwhile (a job it freed since has no role data: no hook). The hook
 * must not close other connections of d. Loop thread. */
void rdzv__close_all_peers(struct daemon *d, int status, const char *text);
/* Holds job j for good (it never lingers out): the TCPStore front end's
 * job, whose keys a TCPStore server keeps for its whole life. */
void rdzv__job_pin(struct job *j);
/* c (becoming READY) belongs to j from now on. */
void rdzv__job_attach(struct conn *c, struct job *j);
/* c closed: j = c->job loses a connection; the last one starts its
 * linger. */
void rdzv__job_detach(struct conn *c);

/* ---- helpers --------------------------------------------------------------- */

uint64_t rdzv__now_ms(struct daemon *d);
/* One log line at level (0 error, 1 info, 2 debug; logged when at most
 * --log-level), as transport.c's log_line writes it. */
void rdzv__log(struct daemon *d, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As rdzv__log, about job (its id, NUL-terminated, at most 255 bytes;
 * NULL: about none, as rdzv__log): the text line starts "job JOB: ", a
 * JSON line carries "job". */
void rdzv__log_job(struct daemon *d, int level, const char *job,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* ---- the reply family (conn_send.c) ---------------------------------------- */

/* A reply skeleton for request m: its type and req_id, status. */
void rdzv__reply_init(struct rdzv_msg *r, const struct rdzv_msg *m, int status);
/* Replies status to request m of c, with text (keys[0]; "" for none), as
 * rdzv__conn_reply. The text is copied into c's queue. */
void rdzv__conn_reply_text(struct conn *c, const struct rdzv_msg *m, int status,
                           const char *text);
/* The same with a printf format: the text is cut at
 * RDZV_REPLY_TEXT_MAX - 1 bytes. */
#define RDZV_REPLY_TEXT_MAX 1024
void rdzv__conn_reply_textf(struct conn *c, const struct rdzv_msg *m,
                            int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for a request known by its type and req_id only (one held
 * while its message is gone: a collective's waiting member, a wait):
 * len bytes of text, none when 0. */
void rdzv__conn_answer_text(struct conn *c, uint8_t type, uint32_t req_id,
                            int status, const char *text, size_t len);

#endif /* RDZV_STORE_DAEMON_TRANSPORT_H */
