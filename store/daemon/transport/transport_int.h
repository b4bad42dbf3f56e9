/* What the transport's own files (transport.c, conn.c, listen.c,
 * inproc.c) share and nobody else uses. Private. */
#ifndef RDZV_STORE_DAEMON_TRANSPORT_INT_H
#define RDZV_STORE_DAEMON_TRANSPORT_INT_H

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
/* The loop's check callback: writes what this iteration queued. */
void rdzv__conn_flush_check(uv_check_t *h);

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
