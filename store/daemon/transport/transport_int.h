/* What the transport's own files (transport.c, conn.c, conn_send.c,
 * flush.c, hello.c, listen.c, inproc.c, outq.c, conn_tls.c, stats.c)
 * share and nobody else uses. Private. */
#ifndef RDZV_STORE_DAEMON_TRANSPORT_INT_H
#define RDZV_STORE_DAEMON_TRANSPORT_INT_H

#include "store/auth/auth.h"
#include "store/daemon/transport/transport.h"

/* Read buffers start small and double while a frame needs more: 100,000
 * mostly idle connections must not pin 64 KiB each. */
#define READ_MIN 4096

/* conn.c */
/* Closes c now (no last frame): the role's conn_closed hook runs for a
 * socket peer. Idempotent. */
void rdzv__conn_close_now(struct conn *c);
/* One decoded frame from c: the hello, or a request for the role. */
void rdzv__conn_handle_frame(struct conn *c, const struct rdzv_msg *m);
/* Refuses c (accepted, nothing read yet) before anything of it is read:
 * an ERROR frame of status with text (keys[0]) is its last; then c drops
 * what it reads, unread, and closes when the peer hangs up or after
 * --hello-timeout-ms or 1 s, whichever is shorter. Counts and logs
 * nothing (the caller does: this is no broken rule, no proto_errors). */
void rdzv__conn_refuse(struct conn *c, int status, const char *text);
/* An accepted connection starts its hello timer and reading. */
void rdzv__conn_start_reading(struct conn *c);
/* flush.c: the loop's check callback: runs what this iteration deferred,
 * then writes what it queued. */
void rdzv__conn_flush_check(uv_check_t *h);
/* flush.c: c has frames to write: on the dirty list, written at the end of
 * this loop iteration. */
void rdzv__conn_mark_dirty(struct conn *c);
/* flush.c: c off the dirty and held lists (closing, or writing now). */
void rdzv__conn_unlist(struct conn *c);

/* conn.c, for hello.c */
/* The most of a challenged hello's peer name kept until its proof comes
 * (the connection's name holds fewer). */
#define HELLO_NAME_KEEP 255u
/* A challenged hello waiting for the peer's proof (RDZV_MSG_AUTH). */
struct conn_auth {
  struct rdzv_buf hello; /* what admission needs of the hello, encoded */
  uint8_t expect[RDZV_AUTH_PROOF_BYTES]; /* the client proof it must send */
  bool known; /* this daemon holds the job's secret */
};
/* c's state becomes s (logged at debug level). */
void rdzv__conn_set_state(struct conn *c, enum conn_state s);
/* Frees c's pending challenge, if any. */
void rdzv__conn_auth_free(struct conn *c);
/* A heap-allocated timer's close callback: frees it. */
void rdzv__conn_on_timer_freed(uv_handle_t *h);
/* flush.c: writes what c has queued, unless a write is in flight. */
void rdzv__conn_start_write(struct conn *c);
/* conn_send.c: m is c's last frame: c moves to state then (CONN_CLOSING:
 * closed once m is written; CONN_REFUSED: rdzv__conn_refuse's), stops
 * reading, and m is written now, after what a durable root's gate has
 * released (what it holds is dropped). An in-process peer gets nothing. */
void rdzv__conn_last_frame(struct conn *c, const struct rdzv_msg *m,
                           enum conn_state then);
/* conn_send.c: an ERROR frame (status, text) as c's last frame
 * (rdzv__conn_last_frame). */
void rdzv__conn_fail_sent(struct conn *c, uint32_t req_id, int status,
                          const char *text, enum conn_state then);
/* A child node pings every --heartbeat-ms: one silent for
 * --liveness-timeout-ms is stopped, wedged or cut off (its TCP connection
 * may look healthy for minutes). Closing it withdraws what it carried, as
 * for a child that died. */
void rdzv__conn_on_child_check(uv_timer_t *t);
/* Whether c's peer is on another host: a TCP peer whose address is
 * neither loopback nor the connection's own local address (what it sees
 * as "127.0.0.1:P" or unix:PATH is its own host's). */
bool rdzv__conn_peer_remote(struct conn *c);
/* An address that means this host only (unix:, loopback, localhost). */
bool rdzv__conn_addr_local(const char *a);
/* Under a gate: a reply that depends on no state (a ping's) goes before
 * the frames the gate holds, so that a peer hears from this daemon while
 * etcd is slow (its liveness check must not declare it lost). */
void rdzv__conn_send_ungated(struct conn *c, const struct rdzv_msg *r);

/* hello.c: the hello, its admission and authentication */
/* Who is on the other end, for a log line: "ADDR:PORT" or "unix pid N". */
void rdzv__conn_peer_desc(struct conn *c, char *buf, size_t n);
/* A peer-given string made printable for a log line. */
void rdzv__conn_printable(const struct rdzv_slice *s, char *buf, size_t n);
/* A hello (c in HELLO_WAIT): refused, challenged (the job has a secret)
 * or admitted; READY with its job once admitted. */
void rdzv__conn_handle_hello(struct conn *c, const struct rdzv_msg *m);
/* The frame after a challenge: the peer's proof. Right: the hello goes on
 * as it would have without authentication, its reply answering m. */
void rdzv__conn_handle_auth(struct conn *c, const struct rdzv_msg *m);

/* conn_tls.c: TLS on accepted TCP connections (RDZV_TLS_READ_BYTES, the
 * read buffer's size: transport.h) */
/* Loads the TLS configuration of --tls-* into d->tls (none given: stays
 * NULL). 0, or RDZV_ETLS / RDZV_ENOMEM with a message on stderr. */
int rdzv__tls_start(struct daemon *d);
/* Frees d's TLS configuration and read buffer. */
void rdzv__tls_stop(struct daemon *d);
/* A connection accepted on the TCP listener of a daemon with TLS gets
 * its session. 0 or RDZV_ENOMEM. */
int rdzv__conn_tls_accept(struct conn *c);
/* libuv's read buffer for c (a TLS connection): the daemon's. */
void rdzv__conn_tls_alloc(struct conn *c, uv_buf_t *buf);
/* n bytes read into it: their plaintext is appended to c->in. False when
 * c was refused or closed (a plain peer, a failed handshake: logged and
 * counted), true to decode c->in. */
bool rdzv__conn_tls_in(struct conn *c, size_t n);

/* listen.c */
int rdzv__listen_tcp(struct daemon *d);
int rdzv__listen_unix(struct daemon *d);
/* Removes PATH.lock and releases the Unix socket's lock, if d holds it. */
void rdzv__unix_lock_release(const struct daemon *d);

/* stats.c: answers RDZV_MSG_STATS (the daemon's statistics, no job's). */
void rdzv__reply_stats(struct conn *c, const struct rdzv_msg *m);

/* transport.c */
void rdzv__close_noop(uv_handle_t *h);

#endif /* RDZV_STORE_DAEMON_TRANSPORT_INT_H */
