/* rdzv client library: what a rank (or an operator tool) links to talk to
 * its host's node agent, or to any rdzvd.
 *
 * Threads: the library starts no thread and installs no signal handler. A
 * handle may be used by one thread at a time. The core is a poll-driven
 * state machine (rdzv_client_fd / _events / _timeout_ms / _process), in the
 * manner of curl's multi interface; the blocking rdzv_store_* calls in
 * rdzv/store.h are thin wrappers that drive it with poll() and a deadline.
 *
 * Ownership (see rdzv/rdzv.h): pointer arguments are borrowed for the call
 * only; the library copies what it keeps. */
#ifndef RDZV_CLIENT_H
#define RDZV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdzv_client rdzv_client_t;

#define RDZV_CLIENT_OPTS_VERSION 2u

/* Options. Fill with rdzv_client_opts_init, then set what you need. New
 * fields are only ever appended. */
struct rdzv_client_opts {
  size_t size;      /* sizeof(struct rdzv_client_opts), set by init */
  uint32_t version; /* RDZV_CLIENT_OPTS_VERSION, set by init */
  /* Server address: "unix:/path/to.sock", "tcp:HOST:PORT" or "HOST:PORT"
   * (HOST a name, an IPv4 address or [IPv6]). Required. */
  const char *addr;
  /* Job id: the namespace of every key. Required, non-empty; there is no
   * shared default. At most 255 bytes. */
  const char *job_id;
  /* Name of this peer for the server's logs; default "<hostname>:<pid>". */
  const char *name;
  /* Largest frame body accepted from the server, and sent to it: a
   * request whose frame would be larger fails at once with
   * RDZV_EFRAME_TOO_BIG (rdzvd's --max-frame-bytes has the same default),
   * bytes. Default 64 MiB. */
  uint32_t max_frame_bytes;
  /* First reconnect delay and its cap, seconds. The delay doubles after
   * each failed attempt, with +-25% jitter. Defaults 0.01 and 2.0. */
  double backoff_initial_s;
  double backoff_max_s;
  /* Deadline of one connect attempt, seconds (a peer that drops SYNs must
   * not stall us for the kernel's minutes-long SYN timeout). Default 5. */
  double attempt_timeout_s;
  /* Liveness of the daemon, seconds. While a request waits for its reply
   * (or, once a session is set with rdzv_client_set_resume, whenever the
   * caller drives the core: rdzv_client_timeout_ms says when) and nothing
   * has come from the daemon for heartbeat_s, a PING is sent
   * (at most one per heartbeat_s); when nothing at all has come for
   * liveness_timeout_s the daemon is taken for stopped or wedged: the
   * requests it holds fail with RDZV_ESILENT (last_error names the
   * address) and the connection is opened again. Defaults 1 and 5;
   * liveness_timeout_s must exceed heartbeat_s; liveness_timeout_s INFINITY
   * turns both off. A daemon whose own liveness timeout (its hello reply,
   * --liveness-timeout-ms) is shorter imposes it on the connection, with
   * a heartbeat of at most a quarter of it. */
  double heartbeat_s;
  double liveness_timeout_s;
  /* The job's secret, proved in the hello (never sent: an HMAC-SHA256
   * challenge and response, store/auth/auth.h): the bytes at secret
   * (secret_len, 16 .. 1024) if set; else the file secret_file (no access
   * for others, 16 .. 1024 bytes without trailing whitespace); else the
   * file named by the environment variable RDZV_SECRET_FILE; else the
   * value of RDZV_SECRET (without trailing whitespace, as a file's); else
   * none. A file is read once, here. With a secret, a daemon that cannot
   * prove it (or asks for none) is refused: RDZV_EAUTH, last_error naming
   * it. A secret that cannot be read leaves the handle failed: every
   * request completes with RDZV_EAUTH, last_error saying why (never the
   * secret). Borrowed for rdzv_client_create only (copied). */
  const char *secret_file;
  const uint8_t *secret;
  size_t secret_len;
  /* TLS (options version 2). To a TCP address the connection is TLS
   * (1.2 or 1.3, store/tls) when any of these four is set, else when the
   * environment sets any of RDZV_TLS_DIR, RDZV_TLS_CA, RDZV_TLS_CERT,
   * RDZV_TLS_KEY (read the same way); a "unix:" address stays plain.
   * tls_dir: DIR/ca.crt, DIR/tls.crt and DIR/tls.key (a Kubernetes TLS
   * Secret with its CA) for what the other three do not give. tls_ca:
   * the CA file (PEM) the daemon's certificate must chain to (required).
   * tls_cert and tls_key: this side's certificate chain and key (PEM),
   * both or neither (a daemon takes a rank without one). Settings that
   * cannot be loaded leave the handle failed: every request completes
   * with RDZV_ETLS, last_error naming the file and why. A daemon whose
   * certificate is of another CA or expired, or one without TLS, is
   * refused: RDZV_ETLS, last_error naming it with OpenSSL's reason.
   * Borrowed for rdzv_client_create only (the files are read there). */
  const char *tls_dir;
  const char *tls_ca;
  const char *tls_cert;
  const char *tls_key;
};

/* Fills *opts with defaults. opts must not be NULL. */
void rdzv_client_opts_init(struct rdzv_client_opts *opts);

/* Creates a client handle. Does not connect: the connection is opened by
 * the first request (or by rdzv_client_connect) and re-opened after a
 * failure, with exponential backoff and jitter, until that request's
 * deadline. Refused, reset, "no such socket file" and "name not
 * resolvable yet" all count as "not yet".
 * On success *out owns a handle to release with rdzv_client_destroy.
 * Returns 0, -EINVAL (NULL argument or wrong opts size/version),
 * RDZV_EJOB_ID_MISSING (job id NULL or empty or longer than 255 bytes),
 * RDZV_EBAD_ADDR (addr NULL or not parseable), RDZV_ENOMEM. (A secret
 * that cannot be read is not an error here: see secret_file.) */
int rdzv_client_create(const struct rdzv_client_opts *opts,
                       rdzv_client_t **out);

/* Closes the connection and frees the handle. Outstanding asynchronous
 * requests complete with RDZV_ECANCELED before it returns. NULL is a
 * no-op. Must not be called from inside a callback of the same handle. */
void rdzv_client_destroy(rdzv_client_t *c);

/* Connects and exchanges the hello, retrying until timeout_s seconds have
 * passed. Blocks. Returns 0; RDZV_EDEADLINE (last_error names the address
 * and the last failure); RDZV_EPROTO_VERSION, RDZV_EJOB_MISMATCH,
 * RDZV_ETOO_MANY_CONNECTIONS or RDZV_EHELLO when the server refused the
 * hello; RDZV_EAUTH when it refused this handle's secret (or the lack of
 * one), or could not prove the job's secret itself; RDZV_EWOULDBLOCK_CB
 * from inside a callback. */
int rdzv_client_connect(rdzv_client_t *c, double timeout_s);

/* Text describing the most recent failure on this handle (which key was
 * missing, which address refused, ...). Owned by the handle; valid until
 * the next call on it. Never NULL (empty when there was none). */
const char *rdzv_client_last_error(const rdzv_client_t *c);

/* ---- Poll-driven core ------------------------------------------------- */

/* The socket to poll, or -1 when there is none right now (backing off:
 * honour rdzv_client_timeout_ms). */
int rdzv_client_fd(const rdzv_client_t *c);
/* poll() events (POLLIN, POLLOUT) the core waits for on that socket. */
short rdzv_client_events(const rdzv_client_t *c);
/* Milliseconds until the core needs rdzv_client_process even without I/O
 * (a retry, a deadline), or -1 for none. */
int rdzv_client_timeout_ms(const rdzv_client_t *c);
/* Does all I/O possible without blocking, fires due timers and runs the
 * callbacks of finished requests. Returns 0, or a negative status for a
 * failure of the handle itself (RDZV_ENOMEM). Request failures are
 * reported to their callbacks, not here. */
int rdzv_client_process(rdzv_client_t *c);

/* ---- Asynchronous requests -------------------------------------------- */

/* Operation codes; the same numbers as the wire's message types. */
enum rdzv_op {
  RDZV_OP_SET = 2,
  RDZV_OP_GET = 3,
  RDZV_OP_WAIT = 4,
  RDZV_OP_ADD = 5,
  RDZV_OP_CAS = 6,
  RDZV_OP_DELETE = 7,
  RDZV_OP_MGET = 8,
  RDZV_OP_MSET = 9,
  RDZV_OP_APPEND = 10,
  RDZV_OP_NKEYS = 11,
  RDZV_OP_BARRIER = 12,
  RDZV_OP_GATHER = 13,
  RDZV_OP_STATS = 14,
  RDZV_OP_JOIN = 16,
  RDZV_OP_ABORT = 17,
  RDZV_OP_COLL_STATUS = 18,
  RDZV_OP_TS_SPACE = 23,
};

/* A borrowed byte string. */
struct rdzv_bytes {
  const void *data;
  size_t len;
};

/* A request: the fields each op uses are those of the wire message of the
 * same number (store/wire/wire.h). Keys and values are copied at submission. */
struct rdzv_request {
  enum rdzv_op op;
  /* RDZV_STORE_WRITE_ONCE: for SET and MSET, make the keys immutable; for
   * GET, a hint that the key is write-once, letting nodes join identical
   * reads in flight into one. */
  unsigned flags;
  int64_t a;
  int64_t b;
  size_t nkeys;
  const struct rdzv_bytes *keys;
  size_t nvals;
  const struct rdzv_bytes *vals;
};

#define RDZV_STORE_WRITE_ONCE 0x0002u
/* For ABORT: a clean leave of this connection's rank (aborts nothing). */
#define RDZV_STORE_LEAVE 0x0010u
/* For COLL_STATUS: fail the collective for every member unless it has
 * completed (see rdzv_store_collective_give_up). */
#define RDZV_STORE_GIVE_UP 0x0020u

/* The reply as the callback sees it. Every pointer is valid only until the
 * callback returns. On a local failure (deadline, connection lost) nkeys
 * and nvals are 0 except for a deadline on WAIT/MGET, where keys lists
 * the keys still missing. */
struct rdzv_result {
  int status;
  unsigned flags;
  int64_t a;
  int64_t b;
  size_t nkeys;
  const struct rdzv_bytes *keys;
  size_t nvals;
  const struct rdzv_bytes *vals;
};

typedef void (*rdzv_request_cb)(rdzv_client_t *c, const struct rdzv_result *res,
                                void *arg);

/* Submits a request; it is sent as soon as the connection allows. cb runs
 * exactly once, from rdzv_client_process or rdzv_client_destroy, with the
 * reply or with RDZV_EDEADLINE (timeout_s seconds after submission; for a
 * WAIT the server also enforces it), RDZV_ECONN_CLOSED or RDZV_ESILENT
 * (the connection failed while the request was in flight, for the fourth
 * time), RDZV_ECANCELED (destroy).
 * A request in flight when its connection is lost is sent again on the
 * next connection, at most 3 times: reads and waits are idempotent, and
 * every mutation carries an op id (set, cas, delete, mset and append in
 * the frame's b, which the caller's b does not reach; an add as one part
 * of RDZV_MSG_ADD) that the root applies once within its
 * --dedup-window-ms, so an add acknowledged before the loss is never
 * applied twice. Once the handle has submitted a JOIN (a rank), a lost
 * connection moves on to the daemon's ancestors, which its hello reply
 * named (nearest first), before it backs off and tries the address given
 * at create again. The
 * WAIT timeout is sent to the server as well, which answers at that
 * deadline naming the keys still missing; for a WAIT the server holds, the
 * client waits up to 250 ms + 10% of timeout_s (at most 2 s) longer for
 * that answer before expiring it locally.
 * Returns 0; -EINVAL (bad op or shape); RDZV_EKEY_TOO_LONG,
 * RDZV_EVALUE_TOO_BIG, RDZV_EFRAME_TOO_BIG (too big to encode); RDZV_ENOMEM.
 * A request that was sent, changes the store (set, add, cas, delete,
 * mset, append) and passes its deadline unanswered may still have been
 * applied: rdzv_client_last_error then says that its outcome is unknown.
 * Requests failed by a node for a parent it cannot reach complete with
 * RDZV_EUNREACHABLE (never sent up: not applied).
 * On a non-zero return cb never runs. May be called from a callback. */
int rdzv_client_submit(rdzv_client_t *c, const struct rdzv_request *req,
                       double timeout_s, rdzv_request_cb cb, void *arg);

/* Sets the session's resume request: after a lost connection, the next
 * one (to the same daemon or a fallback) sends req first and nothing else
 * until it is answered. Answered 0: the session goes on (counted, see
 * rdzv_client_resumes). Refused: the session is over: req is dropped and
 * every queued request fails with the refusal's status, last_error giving
 * the daemon's reason. While a resume is set, the core reconnects as soon
 * as it runs after a loss (drive it, or make a request, within the
 * daemons' --session-grace-ms). The rendezvous sets one after its join
 * (rdzv/rendezvous.h): the join record again with its generation.
 * req is copied (NULL clears). Returns 0, -EBUSY while the resume is in
 * flight, -EINVAL (bad shape), RDZV_ENOMEM. */
int rdzv_client_set_resume(rdzv_client_t *c, const struct rdzv_request *req);

/* Sessions resumed on this handle (resume requests answered 0). */
unsigned rdzv_client_resumes(const rdzv_client_t *c);

/* Number of submitted requests whose callbacks have not run yet. */
size_t rdzv_client_pending(const rdzv_client_t *c);

/* Blocks in poll() driving the core until no request is pending or
 * timeout_s seconds pass. Returns 0, RDZV_EDEADLINE, RDZV_EWOULDBLOCK_CB
 * or an error of rdzv_client_process. */
int rdzv_client_run(rdzv_client_t *c, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_CLIENT_H */
