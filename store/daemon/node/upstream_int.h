/* A node's link to its parent for one job (upstream.c says how it
 * behaves): the structs its files share, and what each offers the
 * others. Private to store/daemon/node's upstream files:
 *   upstream.c          the link's life: requests (queue, in flight,
 *                       resends, expiry), reset and backoff, liveness,
 *                       the write path, the API of node_int.h;
 *   upstream_copies.c   the parent's lease on copies (pings, INVAL),
 *                       and what /readyz asks of the link;
 *   upstream_read.c     frames from the parent: the hello's reply and
 *                       proof, ancestors, the leader, replies;
 *   upstream_connect.c  resolving, candidates, connecting, the hello;
 *   upstream_home.c     probes of the parent, and back home after a
 *                       reattachment (--home-after-ms).
 * Everything runs on the daemon's loop thread. */
#ifndef RDZV_STORE_DAEMON_NODE_UPSTREAM_INT_H
#define RDZV_STORE_DAEMON_NODE_UPSTREAM_INT_H

#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <uthash.h>
#include <uv.h>

#include "store/auth/auth.h"
#include "store/daemon/node/node_int.h"

enum up_state {
  UP_IDLE,
  UP_RESOLVING,
  UP_CONNECTING,
  UP_HELLO,
  UP_READY,
  UP_BACKOFF,
  UP_CLOSED
};
/* Each state's name in logs and /readyz (upstream.c). */
extern const char *const rdzv__up_state_names[];

/* How often a request is sent again after the connection it went on
 * failed (to the next ancestor, or the same parent back) or moved back
 * home, before it fails with "outcome unknown". Mutations carry an op id,
 * so the root applies a re-sent one once. Reads and waits (GET, MGET,
 * WAIT, NKEYS, KEYS, STATS: rdzv__up_req_is_read) change nothing where
 * they are answered and are safe to repeat: a wait pending for minutes
 * may outlive many losses of its parent, so they have a bound of their
 * own, MAX_READ_RESENDS (only a request that kills every parent it
 * reaches would meet it). */
#define MAX_RESENDS 3
#define MAX_READ_RESENDS 200

struct upreq {
  UT_hash_handle hh;
  uint32_t id;
  bool sent;
  uint8_t tries; /* times sent again after a failed connection */
  uint64_t seq;  /* submission order (u->seq): after a fence or not */
  upstream_cb cb;
  void *arg;
  struct rdzv_buf frame; /* the encoded request, kept until it completes */
  /* While queued (not sent): since when. */
  bool queued;
  uint64_t queued_ms;
  TAILQ_ENTRY(upreq) qlink;
  TAILQ_ENTRY(upreq) alink; /* u->all: every request, in submission order */
};
TAILQ_HEAD(upreq_queue, upreq);

struct upstream {
  struct daemon *d;
  char *job_id;
  /* The node's probe at start (node.h's rdzv__node_probe): no job, no
   * requests, no pings, its parent only; *probe_slot is cleared when it
   * ends. */
  bool probe;
  bool probe_once; /* a failed attempt ends it (no retry) */
  void (*probe_done)(void *arg, bool answered);
  void *probe_arg;
  /* Back home (upstream_home.c): while this job's link is READY on an
   * ancestor, `home` ticks, each tick probing the parent (home_probe,
   * one at a time); home_since: since when (loop ms) every probe was
   * answered, 0 after a failure; going_home: the reset under way moves
   * to the parent. */
  uv_timer_t home;
  struct upstream *home_probe;
  uint64_t home_since;
  bool going_home;
  /* The attempt under way returns home: the parent's new incarnation (it
   * restarted while this link was away, which is why it left) is taken
   * as it is, not as a restart above (the ancestor this link was on kept
   * the job's state, and would have said if it had not), as long as it
   * is the one the probes gave (home_inc; 0: an older parent that gives
   * none): one that differs restarted again, or lost the job's state
   * since (its hello's incarnation mixes in its own parent's restarts),
   * and is taken as a restart. */
  bool home_hello;
  uint64_t home_inc;
  /* Returns that failed (the hello refused, the connection lost before
   * READY) since the last that worked: each doubles the time the parent
   * must answer ready before the next return (at most 32 times
   * --home-after-ms); home_fail_inc: the parent's incarnation then (its
   * probes giving another one, a restarted parent, start afresh).
   * home_not_ready: probe answers that said the parent's own link toward
   * the root is down (RDZV_F_ROOT_AWAY); home_deferred: returns put off
   * while requests other than reads were in flight (home_waiting: the one
   * now). All for stats' "links". */
  uint32_t home_fails;
  uint64_t home_fail_inc;
  uint64_t home_failed_total, home_not_ready, home_deferred;
  bool home_waiting;
  /* A probe's (u->probe_once) answer: the parent's incarnation (b) and
   * whether it said its own link toward the root is down. */
  uint64_t probe_inc;
  bool probe_away;
  enum up_state state;
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  bool have_stream;
  uv_connect_t creq;
  uv_getaddrinfo_t gai;
  uv_timer_t timer; /* the backoff; while an attempt runs, its deadline */
  uv_write_t wreq;
  bool write_active;
  struct rdzv_buf out;
  struct rdzv_buf writing;
  struct rdzv_buf in;
  /* A TCP attempt's TLS session (rdzvd --tls-*; NULL: plain), and the
   * ciphertext it made that waits to be written (upstream_tls.c). */
  rdzv_tls_t *tls;
  struct rdzv_buf cipher;
  struct upreq *reqs;
  struct upreq_queue queue; /* queued requests, oldest first */
  struct upreq_queue all;   /* every request, in submission order */
  uv_timer_t expire;        /* fails queued requests past the timeout */
  uv_timer_t beat;          /* every --heartbeat-ms: ping, or lose */
  uint64_t last_rx_ms;      /* bytes last came (or the attempt began) */
  uint64_t last_beat_ms;    /* when on_beat last ran */
  char why[300];            /* the last failure, for errors and logs */
  uint64_t down_since_ms;   /* since when the parent is not connected */
  bool was_up;              /* READY once: a loss is logged */
  uint32_t next_id;
  uint32_t hello_id; /* the hello's req_id, then (challenged) its proof's */
  /* This attempt's hello nonce, and whether the proof went out (the reply
   * awaited is then the RDZV_MSG_AUTH's). */
  uint8_t cnonce[RDZV_AUTH_NONCE_BYTES];
  bool auth_sent;
  /* Where to connect: addrs[0] = --parent, then the ancestors above it as
   * the parent last told them (nearest first); addr_idx the one in use.
   * incs[i]: the incarnation addrs[i] gave in its last hello reply, 0
   * before the first (a change means that daemon restarted). Each a copy
   * of its own (at most 255 bytes): a node holds one upstream a job, and
   * a 100k-rank simulation 12,500 of them. */
  char *addrs[RDZV_MAX_ANCESTORS + 1];
  uint64_t incs[RDZV_MAX_ANCESTORS + 1];
  uint64_t shared_inc; /* the last an etcd-backed root gave (0: none) */
  uint32_t naddrs;
  uint32_t addr_idx;
  /* This round's candidates for addrs[addr_idx]: the resolver's answer
   * (owned), the address tried (cand) and its port (port, of
   * port_first..port_last); next_cand: the next attempt takes the next
   * candidate instead of resolving again. cand_text: "IP:PORT" tried. */
  struct addrinfo *res;
  struct addrinfo *cand;
  int port, port_first, port_last;
  bool next_cand;
  uint32_t ncands_tried;
  uint32_t nother_job; /* this round's candidates that served another job */
  char cand_text[80];
  bool closing;             /* the stream's close has not completed yet */
  bool connect_after_close; /* ... and an attempt waits for it */
  bool stay;             /* the next reset retries the same address (the parent
                            closed us on purpose: it lives) */
  int loss_status;       /* how the last ready connection ended */
  uint32_t parent_frame; /* its frame limit (hello reply a), 0 unknown */
  void (*on_restart)(void *arg);
  void (*on_reconnect)(void *arg);
  void *restart_arg;
  uint64_t backoff_ms;
  /* Copies of mutable keys (keys/copies.h, wire.h's RDZV_MSG_INVAL): the
   * lease the parent's ping replies gave (loop ms; 0: none), the ping
   * whose reply renews it and when it was sent, the newest invalidation
   * received on this connection and the last acknowledged, the INVAL
   * request in flight (0: none), and a number that changes with every
   * ready connection (an acknowledgment meant for an earlier one is not
   * sent). */
  uint64_t lease_until;
  uint32_t ping_id;
  uint64_t ping_sent_ms;
  uint64_t inval_recv;
  uint64_t inval_acked; /* the last sent in an INVAL request (b) */
  uint32_t inval_id;
  uint64_t conn_gen;
  void (*on_inval)(void *arg, uint64_t gen, const struct rdzv_msg *m);
  void (*on_lost)(void *arg);
  /* A standby root's hello refusal named the leader: addrs[redirect] is
   * tried next (-1: none); redirects in a row since the last ready
   * connection (past two, the backoff applies: standbys that disagree
   * must not make a node spin). */
  int redirect;
  uint32_t redirects;
  uint32_t attempts;
  uint32_t refs;
  /* /readyz's root_reachable: the parent's last ping reply said its own
   * link toward the root is down (RDZV_F_ROOT_AWAY); false until told,
   * and again on each new connection. */
  bool root_away;
  /* /readyz's not_fenced: the parent declared this node lost (an ERROR
   * frame, RDZV_ESILENT) or refused one of its requests as stale
   * (RDZV_EFENCED), at fenced_ms (loop ms), why in fence_why. It stays
   * fenced for --session-grace-ms (what the node held of its ranks'
   * sessions is settled by then, here and above) and until the parent
   * has answered a request submitted after the fence (seq > fence_seq)
   * or a ping sent after it (heard_after). */
  bool fenced, heard_after;
  uint64_t fenced_ms;
  uint64_t seq, fence_seq;
  char fence_why[200];
};

/* ---- upstream.c: the link's life, requests, reset and backoff, writes ---- */
/* The probe (u->probe) ended: answered by a parent that takes jobs
 * (answered), or not (it refused the probe, it is a standby root, or,
 * probe_once, an attempt failed); tells probe_done and destroys u. */
void rdzv__up_probe_end(struct upstream *u, bool answered);
/* A probe of the parent for job_id: done(arg, answered) when it ends
 * (not when it is destroyed first); once: a failed attempt ends it, else
 * it retries with the link's backoff until answered. NULL when out of
 * memory. */
struct upstream *rdzv__up_probe_new(struct daemon *d, const char *job_id,
                                    bool once,
                                    void (*done)(void *arg, bool answered),
                                    void *arg);

/* ---- upstream_home.c: back to the parent after a reattachment ------------ */
/* u became READY: on an ancestor, starts the ticks that probe the parent
 * (--home-after-ms); on the parent, stops them. */
void rdzv__up_home_ready(struct upstream *u);
/* u is being reset or destroyed: stops the ticks and ends a probe. */
void rdzv__up_home_stop(struct upstream *u);
/* The attempt that returned u home failed before READY (why: u->why):
 * counted and logged; the next return waits longer, and this reset goes
 * back to an ancestor (not the parent again). */
void rdzv__up_home_failed(struct upstream *u);
/* The attempt that returned u home became READY: the hello's incarnation
 * inc is a restart when it is not the one the probes gave. Returns
 * whether it is. */
bool rdzv__up_home_arrived(struct upstream *u, uint64_t inc);
/* Whether r is a read or a wait (safe to repeat, changes nothing):
 * MAX_READ_RESENDS, and no reason to put off a return home. */
bool rdzv__up_req_is_read(const struct upreq *r);
/* The address in use: the parent, or an ancestor while reattached. */
const char *rdzv__up_addr(const struct upstream *u);
/* u's state becomes s (logged at debug level). */
void rdzv__up_set_state(struct upstream *u, enum up_state s);
/* Frees the round's resolved candidates. */
void rdzv__up_free_cands(struct upstream *u);
/* Drops a reference (the timers' and the stream's hold one each);
 * the last frees u. */
void rdzv__up_unref(struct upstream *u);
/* The connection failed (or never came up): fail what was in flight and
 * try again after a jittered, growing delay. */
void rdzv__up_reset(struct upstream *u, const char *why, int err);
/* One attempt (one candidate) failed before the parent was ready: the
 * next candidate at once, else the round fails (up_reset). Nothing was
 * sent on the attempt but its hello, so nothing is failed or re-sent. */
void rdzv__up_attempt_failed(struct upstream *u, const char *why, int err);

/* Writes what u has queued, unless a write is in flight. */
void rdzv__up_start_write(struct upstream *u);
/* addrs[1..] from the ancestors the parent last told (daemon-wide). Out
 * of memory, the list ends before the ancestor it could not copy (fewer
 * places to reattach to, none wrong). */
void rdzv__up_refresh_ancestors(struct upstream *u);
/* Takes r out of the queue of requests waiting for a connection. */
void rdzv__up_unqueue(struct upstream *u, struct upreq *r);
/* Completes r with reply: its callback runs, r is freed. */
void rdzv__up_complete(struct upstream *u, struct upreq *r,
                       const struct rdzv_msg *reply);
/* Completes r with a synthesized status and text (keys[0]; "" for
 * none). */
void rdzv__up_fail_one(struct upstream *u, struct upreq *r, int status,
                       const char *text);

/* ---- upstream_copies.c: the lease on copies, and /readyz's questions ---- */
/* A PING to the parent; its reply renews the lease on copies. */
void rdzv__up_send_ping(struct upstream *u);
/* Acknowledges invalidations up to ack, asking for the next ones. */
void rdzv__up_send_inval(struct upstream *u, uint64_t ack);
/* A PING or INVAL reply on a ready connection: true when it was one
 * (consumed here). */
bool rdzv__up_copies_frame(struct upstream *u, const struct rdzv_msg *m);
/* The parent refused this node as stale (declared lost, or a stale
 * request): what it said (n bytes of text). */
void rdzv__up_fence(struct upstream *u, const char *what, const uint8_t *text,
                    size_t n);
/* A ready connection's lease and invalidation stream end (it failed):
 * the node drops its copies, and those below it go too. */
void rdzv__up_lease_end(struct upstream *u);

/* ---- upstream_read.c: frames from the parent ---- */
/* Whether this node holds the job's secret (it then proves it). */
bool rdzv__up_has_secret(struct upstream *u);
/* The stream's read callbacks (libuv). */
void rdzv__up_on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf);
void rdzv__up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- upstream_connect.c: resolving, candidates, connecting, the hello ---- */
/* Starts a round of attempts: resolve addrs[addr_idx], then try each
 * candidate. */
void rdzv__up_connect(struct upstream *u);
/* Whether the round has a candidate after this one (skip_addr: none of
 * this address's other ports count). */
bool rdzv__up_cand_left(const struct upstream *u, bool skip_addr);
/* Moves to the round's next candidate: the next port of the range, else
 * the next address at the range's first port. skip_addr: the address did
 * not answer at all (its TCP connect timed out, no route): its other ports
 * would cost a timeout each, so the next address. Returns false when none
 * is left. */
bool rdzv__up_cand_advance(struct upstream *u, bool skip_addr);
/* An attempt's --connect-timeout-ms passed without a hello reply (a
 * dropped SYN, a listener that accepts and says nothing). */
void rdzv__up_on_attempt_timeout(uv_timer_t *t);

/* ---- upstream_tls.c: the link over TLS ---- */
/* A TCP attempt begins: a session when the daemon has TLS (the last one
 * ends). False when out of memory. */
bool rdzv__up_tls_begin(struct upstream *u);
/* The attempt's stream closes: its session, and its ciphertext, go. */
void rdzv__up_tls_end(struct upstream *u);
/* Moves u->out into the session, and the ciphertext it has to send
 * (none while the handshake holds it) to u->cipher. 0, RDZV_ETLS or
 * RDZV_ENOMEM (then rdzv__up_tls_failed). */
int rdzv__up_tls_seal(struct upstream *u);
/* The session failed with err: logged with OpenSSL's reason and the
 * parent's address; the attempt (before the hello's reply) or the link
 * (after it) fails. */
void rdzv__up_tls_failed(struct upstream *u, int err);
/* libuv's read buffer for a TLS stream: the daemon's. */
void rdzv__up_tls_alloc(struct upstream *u, uv_buf_t *buf);
/* n bytes of ciphertext read into it: plaintext appended to u->in, what
 * the session has to send is written. False when the session failed (the
 * attempt or the link failed, logged with the reason). */
bool rdzv__up_tls_in(struct upstream *u, size_t n);

#endif /* RDZV_STORE_DAEMON_NODE_UPSTREAM_INT_H */
