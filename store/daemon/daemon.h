/* rdzvd as a library: a daemon (root or node role) on one libuv loop. What
 * tools/rdzvd.c and the benchmark (tools/bench) use. rdzv_daemon_start and
 * rdzv_daemon_run (daemon.c) pick the role and the front ends; the other
 * calls are the transport's (store/daemon/transport). */
#ifndef RDZV_STORE_DAEMON_H
#define RDZV_STORE_DAEMON_H

#include <uv.h>

#include "store/daemon/config.h"

struct daemon;

/* Starts a daemon described by cfg on loop: the root role (with the
 * in-memory state backend) or the node role, by cfg->role; binds and
 * listens (cfg->listen "" means no TCP listener), starts the TCPStore front
 * end if cfg asks for one, then writes cfg->port_file. Several daemons may
 * share one loop (the benchmark runs many nodes per process). *out is set even
 * on failure: the caller runs the loop until its handles are closed, then calls
 * rdzv_daemon_free. Returns 0 or a negative status (message on stderr). */
int rdzv_daemon_start(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct daemon **out);
/* Closes every connection, listener and timer of d (asynchronously, on
 * its loop). Idempotent. */
void rdzv_daemon_stop(struct daemon *d);
/* Frees d once its loop has run the close callbacks. NULL is a no-op. */
void rdzv_daemon_free(struct daemon *d);
/* d's statistics as one JSON object (malloc'd; free). */
char *rdzv_daemon_stats_json(const struct daemon *d);
/* d's traffic since it started: the "frames" and "bytes" of its
 * statistics (store/daemon/transport/stats.c), read without building them
 * (the benchmark reads 800 daemons a process). */
struct rdzv_daemon_traffic {
  uint64_t frames_in, frames_out;
  uint64_t bytes_in, bytes_out;
  uint64_t bytes_interned; /* of bytes_in: kept once per thread (blob.h) */
  /* Of frames_in + frames_out: the liveness traffic, each PING this
   * daemon answered or sent counted with its reply (two frames). */
  uint64_t heartbeat_frames;
};
void rdzv_daemon_traffic(const struct daemon *d,
                         struct rdzv_daemon_traffic *out);

/* In-process peers, for the benchmark's in-process rank transport: a
 * READY client connection of job without a socket. Each message the
 * daemon sends to it is passed to deliver(arg, msg) at once, without
 * encoding (msg valid during the call). deliver runs inside the daemon's
 * handlers and must not call into the daemon: queue, and send later.
 * Returns NULL on ENOMEM. */
struct conn;
struct rdzv_msg;
struct conn *
rdzv_daemon_inproc_connect(struct daemon *d, const char *job,
                           void (*deliver)(void *, const struct rdzv_msg *),
                           void *arg);
/* Hands one encoded request frame to the daemon, as if read from a
 * socket. Returns 0, RDZV_ECONN_CLOSED, or the decoder's error. */
int rdzv_daemon_inproc_send(struct conn *c, const uint8_t *frame, size_t len);
/* Closes an in-process connection (as a peer's close would). */
void rdzv_daemon_inproc_close(struct conn *c);
/* Inside deliver only: the reference-counted buffer (store/daemon/blob.h)
 * that holds the n bytes at p of the message being delivered, with a
 * reference taken for the caller (who drops it with rdzv__blob_unref), so
 * that a peer that writes the bytes on (the TCPStore front end) can write
 * them from that buffer instead of copying them; NULL when none does (or
 * n is 0). */
struct rdzv_blob;
struct rdzv_blob *rdzv_daemon_inproc_blob(struct conn *c, const uint8_t *p,
                                          size_t n);

/* Runs the daemon described by cfg on a new libuv loop until SIGINT or
 * SIGTERM. Blocks. Returns 0 after a clean stop, or a negative status if
 * it could not start (bind failed, bad address; a message goes to stderr).
 * Must be called once per process. */
int rdzv_daemon_run(const struct rdzv_daemon_config *cfg);

#endif /* RDZV_STORE_DAEMON_H */
