/* librdzv internals: the client handle, its requests and the connection
 * state machine. Private to store/client*.c and store/store_api.c.
 *
 * Layout of the core:
 *  - client.c: handle life cycle, options and addresses, request
 *    submission and completion, the poll() drivers (rdzv_client_run /
 *    _connect).
 *  - client_req.c: request lists, the id table, the deadline heap.
 *  - client_conn.c: the connection (one state machine: resolve, connect,
 *    hello, read and write frames, backoff) and the dispatch of replies.
 *
 * Requests live on exactly one of two lists: `queue` (not yet handed to a
 * connection) or `sent` (encoded into the output buffer of the current
 * connection, and looked up by id when the reply comes). A request with a
 * finite deadline is also in the deadline heap. */
#ifndef RDZV_STORE_CLIENT_INT_H
#define RDZV_STORE_CLIENT_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "rdzv/client.h"
#include "store/tls/tls.h"
#include "store/wire/wire.h"

#define RDZV__CLIENT_MAGIC 0x435A4452u /* "RDZC" */
#define RDZV__ERR_BYTES 512
#define RDZV__MAX_ADDRS 8
/* Fallback daemons learnt from a hello reply (the daemon's ancestors). */
#define RDZV__MAX_FALLBACKS 8
/* Times a request in flight is sent again after lost connections before
 * it fails with the loss's status (a request that kills every daemon it
 * reaches must not go round for ever): a mutation, a join or a collective
 * RDZV__MAX_RESENDS times; a read or a wait, which is safe to repeat and
 * may be pending across many repairs, RDZV__MAX_READ_RESENDS (the node's
 * upstream has the same two bounds). */
#define RDZV__MAX_RESENDS 3
#define RDZV__MAX_READ_RESENDS 200
#define RDZV__NO_DEADLINE INT64_MAX

enum rdzv__conn_state {
  RDZV__CS_IDLE,       /* no socket; nothing asked for one */
  RDZV__CS_CONNECTING, /* non-blocking connect in progress */
  RDZV__CS_HELLO_SENT, /* connected; waiting for the hello reply */
  RDZV__CS_READY,      /* hello accepted; requests flow */
  RDZV__CS_BACKOFF,    /* no socket; waiting before the next attempt */
  RDZV__CS_FAILED,     /* hello refused: fatal for the handle */
};

enum rdzv__req_where {
  RDZV__REQ_QUEUED,
  RDZV__REQ_SENT,
  RDZV__REQ_DETACHED, /* on a caller's local list, about to complete */
};

struct rdzv__req {
  struct rdzv__req *prev;
  struct rdzv__req *next;
  uint8_t op;
  uint8_t where;    /* enum rdzv__req_where */
  uint8_t graced;   /* a WAIT's deadline was extended once (client.c) */
  uint8_t resends;  /* times sent again after a lost connection */
  uint32_t id;      /* req_id on the wire */
  int64_t deadline; /* CLOCK_MONOTONIC ns, or RDZV__NO_DEADLINE */
  double timeout_s; /* as submitted, for messages */
  size_t heap_idx;  /* index in the deadline heap, SIZE_MAX if none */
  uint64_t end_off; /* connection byte offset just past the frame */
  rdzv_request_cb cb;
  void *arg;
  struct rdzv_buf frame; /* the whole encoded frame */
};

struct rdzv__req_list {
  struct rdzv__req *head;
  struct rdzv__req *tail;
  size_t n;
};

struct rdzv__addr {
  bool is_unix;
  struct sockaddr_un sun; /* unix: the socket path */
  socklen_t sun_len;
  char *host; /* tcp: name or address, brackets removed */
  char port[8];
};

struct rdzv_client {
  uint32_t magic;
  enum rdzv__conn_state state;
  int fd;
  bool debug;         /* RDZV_CLIENT_DEBUG was set at create */
  int in_cb;          /* > 0 while a callback of this handle runs */
  bool closing;       /* destroy is completing requests */
  int fatal;          /* FAILED: the status every request gets */
  int hard_err;       /* last non-retryable connect error, or 0 */
  unsigned want_conn; /* rdzv_client_connect is waiting for READY */

  /* The job's secret (malloc'd, secret_len bytes; NULL: none), the
   * nonce of this connection's hello, and whether its proof went out
   * (the next hello-like reply is the RDZV_MSG_AUTH's). */
  uint8_t *secret;
  size_t secret_len;
  char secret_src[300]; /* where it came from, for errors
                           ("RDZV_SECRET_FILE=...") */
  uint8_t cnonce[32];
  bool auth_sent;

  /* Options, copied. */
  char *addr_str;
  char *job_id;
  char *name;
  struct rdzv__addr addr;
  /* Where to go when addr is lost: the chain of ancestors of the daemon
   * at addr (its hello reply), used once this handle has sent a JOIN (a
   * rank follows its node's chain; a tool asking one daemon does not).
   * target: 0 = addr, i > 0 = fb[i - 1]. */
  struct rdzv__addr fb[RDZV__MAX_FALLBACKS];
  char *fb_str[RDZV__MAX_FALLBACKS];
  int nfb;
  int target;
  bool use_fallbacks;
  uint64_t opid_base; /* random: op ids of this handle's mutations */
  uint64_t opid_seq;
  /* The session's resume request (rdzv_client_set_resume): sent first on
   * every connection after a lost one; nothing else is sent until it is
   * answered (resume_wait). where is DETACHED while on no list. */
  struct rdzv__req *resume;
  bool resume_wait;
  bool lost_once;   /* a READY connection was lost: the next one resumes */
  unsigned resumes; /* sessions resumed (answered 0) */
  uint32_t max_frame;
  double backoff_initial;
  double backoff_max;
  double attempt_timeout;
  int64_t heartbeat_ns;
  int64_t liveness_ns; /* RDZV__NO_DEADLINE: no heartbeats */
  /* As configured; the two above may be shorter on a connection to a
   * daemon whose own liveness timeout (hello reply) is shorter. */
  int64_t heartbeat_cfg_ns;
  int64_t liveness_cfg_ns;

  /* Connection. */
  struct sockaddr_storage ai[RDZV__MAX_ADDRS];
  socklen_t ai_len[RDZV__MAX_ADDRS];
  int ai_n;
  int ai_idx;
  int64_t timer;      /* attempt deadline or end of backoff, ns */
  double backoff_cur; /* next backoff delay before jitter, s */
  unsigned attempts;  /* failed attempts since the last success */
  unsigned redirects; /* standby roots followed to their leader since */
  /* While following a leader named by a standby root: the address the
   * handle was given (home), gone back to once the leader is lost too. */
  bool redirected;
  struct rdzv__addr home;
  char *home_str;
  int64_t first_attempt;
  uint64_t rng;
  struct rdzv_buf in;
  struct rdzv_buf out;
  /* TLS (client_tls.c): the configuration (NULL: plain), this TCP
   * connection's session (NULL: none), and the ciphertext it made that
   * waits for the socket. */
  rdzv_tls_cfg_t *tls_cfg;
  rdzv_tls_t *tls;
  struct rdzv_buf cipher;
  /* Back at its own node (client_home.c): RDZV_HOME_AFTER_MS (0: off),
   * the wait before the next return (doubled after one that did not
   * stick), when the next probe is due, since when the node answered
   * ready (0: not), returns made. */
  int64_t home_after_ns, home_wait_ns, home_next, home_since;
  unsigned home_returns;
  /* The probe in flight (-1: none; client_home.c): its socket, what it
   * read, when it is given up, when its socket is next looked at. */
  int home_fd;
  struct rdzv_buf home_in;
  int64_t home_probe_end, home_poll;
  uint64_t out_total;  /* bytes appended to `out` on this connection */
  uint64_t sent_total; /* bytes handed to the kernel on this connection */
  int64_t last_rx;     /* ns: bytes last came from the daemon (or READY) */
  int64_t last_ping;   /* ns: the last PING was queued */
  int64_t last_step;   /* ns: the core last ran (rdzv__conn_step) */

  /* Requests. */
  uint32_t next_id;
  struct rdzv__req_list queue;
  struct rdzv__req_list sent;
  struct rdzv__req **tab; /* open addressing by id: sent requests */
  size_t tab_cap;
  size_t tab_n;
  struct rdzv__req **heap; /* min-heap by deadline */
  size_t heap_n;
  size_t heap_cap;
  struct rdzv_bytes *scratch; /* result item arrays for callbacks */
  size_t scratch_cap;

  char conn_err[RDZV__ERR_BYTES];
  char last_error[RDZV__ERR_BYTES];
};

/* ---- client_req.c ------------------------------------------------------- */

void rdzv__list_push_back(struct rdzv__req_list *l, struct rdzv__req *r);
void rdzv__list_push_front(struct rdzv__req_list *l, struct rdzv__req *r);
void rdzv__list_remove(struct rdzv__req_list *l, struct rdzv__req *r);

/* The id table of sent requests. put returns 0 or RDZV_ENOMEM. */
int rdzv__tab_put(struct rdzv_client *c, struct rdzv__req *r);
struct rdzv__req *rdzv__tab_find(const struct rdzv_client *c, uint32_t id);
void rdzv__tab_del(struct rdzv_client *c, uint32_t id);
void rdzv__tab_clear(struct rdzv_client *c);

/* The deadline heap. push returns 0 or RDZV_ENOMEM; remove is a no-op for
 * a request that is not in it. */
int rdzv__heap_push(struct rdzv_client *c, struct rdzv__req *r);
void rdzv__heap_remove(struct rdzv_client *c, struct rdzv__req *r);

/* ---- client.c ----------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t rdzv__now_ns(void);
/* now + s seconds, saturating; infinite s gives RDZV__NO_DEADLINE. */
int64_t rdzv__deadline_after(int64_t now, double s);

/* Formats last_error (snprintf, truncated to fit). */
void rdzv__set_error(struct rdzv_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Completes r: takes it off every list, table and heap, runs its callback
 * once with status and (when m is not NULL) the items, numbers and flags
 * of m, and frees it. m's pointers need only live for the call. */
void rdzv__req_finish(struct rdzv_client *c, struct rdzv__req *r,
                      const struct rdzv_msg *m, int status);

/* Whether op only reads (GET, WAIT, MGET, NKEYS, STATS): safe to send
 * again any number of times, and to move with. */
int rdzv__op_is_read(int op);
/* Completes every request on list l with status, in list order. l is a
 * list the caller has detached from the handle (and, for sent requests,
 * the id table cleared). */
void rdzv__finish_all(struct rdzv_client *c, struct rdzv__req_list *l,
                      int status);

/* Drives the core with poll() until done(c, arg) holds or deadline (ns)
 * passes. Returns 0 when done, RDZV_EDEADLINE otherwise. */
int rdzv__client_drive(struct rdzv_client *c,
                       int (*done)(struct rdzv_client *, void *), void *arg,
                       int64_t deadline);

/* ---- client_opts.c: a handle's settings from its options --------------- */

/* Whether opts' version and size are ones this library takes (1: up to
 * secret_len; 2: with TLS). */
int rdzv__opts_ok(const struct rdzv_client_opts *opts);
/* Fills a zeroed handle c from opts (checked with rdzv__opts_ok): the
 * address, job id, name, limits, the job's secret and the TLS settings.
 * Returns 0, -EINVAL (a limit out of range), RDZV_EJOB_ID_MISSING,
 * RDZV_EBAD_ADDR or RDZV_ENOMEM; a secret or TLS file that cannot be read
 * leaves c FAILED (every request gets RDZV_EAUTH or RDZV_ETLS) and
 * returns 0. */
int rdzv__client_init(struct rdzv_client *c,
                      const struct rdzv_client_opts *opts);
/* Parses "unix:PATH", "tcp:HOST:PORT" or "HOST:PORT" into *a (a->host
 * malloc'd). Returns 0 or RDZV_EBAD_ADDR. */
int rdzv__parse_addr(const char *s, struct rdzv__addr *a);

/* ---- client_connect.c: connecting, and the connection's states --------- */

/* The daemon the connection goes to now (addr or a fallback), and its
 * address as given. */
const struct rdzv__addr *rdzv__target(const struct rdzv_client *c);
const char *rdzv__target_str(const struct rdzv_client *c);

/* Whether anything needs a connection now. */
int rdzv__conn_wanted(const struct rdzv_client *c);
/* c's state becomes s (why: for the debug log, may be NULL): the only
 * place c->state changes after create. */
void rdzv__conn_to_state(struct rdzv_client *c, enum rdzv__conn_state s,
                         const char *why);
/* After a lost connection or a failed round of attempts: the next daemon
 * to try (the one after the current in addr, fb[0], fb[1], ...). Returns
 * 1 when it wrapped round to addr (or there is no other), 0 otherwise. */
int rdzv__conn_target_next(struct rdzv_client *c);
/* BACKOFF until a jittered, doubling delay from now (ns) has passed. */
void rdzv__conn_backoff_start(struct rdzv_client *c, int64_t now,
                              const char *why);
/* One attempt failed with errno err (what describes it): the next address
 * of the round, else a backoff, else (not retryable) the queued requests
 * complete with -err. */
void rdzv__conn_attempt_failed(struct rdzv_client *c, int64_t now, int err,
                               const char *what);
/* Starts a round of attempts: resolves the target, connects to its first
 * address. */
void rdzv__conn_round_start(struct rdzv_client *c, int64_t now);
/* CONNECTING: whether the non-blocking connect finished (then the hello
 * goes), failed or timed out. */
void rdzv__conn_connect_check(struct rdzv_client *c, int64_t now);

/* Closes the socket, if any, without completing anything. */
void rdzv__conn_close(struct rdzv_client *c);

/* "IDLE", "READY", ... */
const char *rdzv__conn_state_name(enum rdzv__conn_state s);

/* ---- client_conn.c: the established connection -------------------------- */
/* Does whatever the connection can do without blocking at time now: starts
 * an attempt, finishes a connect, exchanges the hello, writes queued
 * requests, reads and dispatches replies, ends a backoff. May run
 * callbacks. */
void rdzv__conn_step(struct rdzv_client *c, int64_t now);
/* READY with requests awaiting replies: when the heartbeat next needs the
 * core to run (a PING due, or the liveness timeout), else
 * RDZV__NO_DEADLINE. */
int64_t rdzv__conn_heartbeat_due(const struct rdzv_client *c);

/* Moves the connection to daemon target (0: addr): what is in flight goes
 * back to the front of the queue (it costs a resend), the connection
 * closes, and the next step connects to target, the session resumed
 * first. why: for the debug log. */
void rdzv__conn_move(struct rdzv_client *c, int64_t now, int target,
                     const char *why);

/* ---- client_home.c: a rank back at its own node -------------------------- */

/* Reads RDZV_HOME_AFTER_MS (default 5000; 0: a rank stays where it
 * resumed). */
void rdzv__home_init(struct rdzv_client *c);
/* A hello was accepted (now, ns): at home, the wait starts afresh; away,
 * the probes start. */
void rdzv__home_arrived(struct rdzv_client *c, int64_t now);
/* When the next probe is due (RDZV__NO_DEADLINE: none). */
int64_t rdzv__home_due(const struct rdzv_client *c);
/* Runs at every step, in any state. READY away from home: starts a probe
 * of the node when one is due, reads its answer without waiting, and
 * moves back once the node answered ready for the wait and only reads
 * and waits are in flight. Not away: ends a probe in flight. */
void rdzv__home_tick(struct rdzv_client *c, int64_t now);
/* Closes the probe in flight, if any (destroy). */
void rdzv__home_probe_end(struct rdzv_client *c);

/* ---- client_tls.c: TLS on TCP connections ------------------------------ */

/* Loads the TLS settings: opts' (version 2; NULL: version 1 options)
 * when any is set, else the environment's (RDZV_TLS_DIR, RDZV_TLS_CA,
 * RDZV_TLS_CERT, RDZV_TLS_KEY); none: plain. Settings that cannot be
 * loaded leave c FAILED with RDZV_ETLS (last_error says why) and return
 * 0. Returns 0 or RDZV_ENOMEM. */
int rdzv__ctls_init(struct rdzv_client *c, const struct rdzv_client_opts *opts);
/* A connection to the current target starts: a session when c has TLS
 * and the target is TCP. 0 or RDZV_ENOMEM. */
int rdzv__ctls_begin(struct rdzv_client *c);
/* The connection closes: its session and ciphertext go. */
void rdzv__ctls_end(struct rdzv_client *c);
/* Moves c->out into the session (counted as sent) and the ciphertext it
 * has to send into c->cipher. 0, RDZV_ETLS or RDZV_ENOMEM. */
int rdzv__ctls_seal(struct rdzv_client *c);
/* One recv of ciphertext, its plaintext appended to c->in. Returns what
 * recv returned (> 0, 0 for a close, -1 with errno), or -2 when the
 * session failed (RDZV_ETLS), -3 when out of memory: what (n bytes) then
 * says why, naming the daemon. */
ssize_t rdzv__ctls_recv(struct rdzv_client *c, char *what, size_t n);

#endif /* RDZV_STORE_CLIENT_INT_H */
