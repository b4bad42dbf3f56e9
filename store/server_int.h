/* rdzvd internals shared by the transport (server.c), the roles (root.c,
 * node.c, upstream.c), the key table (kvs.c) and statistics (stats.c).
 * Private: never installed. */
#ifndef RDZV_STORE_SERVER_INT_H
#define RDZV_STORE_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <uv.h>

#include "store/config.h"
#include "store/wire.h"

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

struct stats {
  struct op_stats ops[RDZV_MSG_TYPE_MAX + 1];
  uint64_t conns_open;
  uint64_t conns_total;
  uint64_t conns_rejected; /* over the connection limit */
  uint64_t proto_errors;   /* peers dropped for malformed input/limits */
  uint64_t bytes_in;
  uint64_t bytes_out;
  uint64_t frames_in;
  uint64_t frames_out;
  uint64_t cache_hits;      /* write-once reads served from the cache */
  uint64_t coalesced;       /* reads/waits joined to one upstream request */
  uint64_t combined;        /* adds/contributions merged into another */
  uint64_t upstream_reconnects;
};

/* Returns the daemon's statistics as one JSON object (malloc'd text). */
char *rdzv__stats_json(const struct daemon *d);

/* ---- connections (server.c) -------------------------------------------- */

enum conn_state {
  CONN_HELLO_WAIT = 0, /* accepted, no hello yet */
  CONN_READY,          /* hello accepted */
  CONN_CLOSING,        /* flushing a last frame, then closing */
  CONN_CLOSED,         /* handle closed; freed when refs drop to 0 */
};

struct conn {
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  struct daemon *d;
  enum conn_state state;
  int role;          /* enum rdzv_peer_role, once READY */
  struct job *job;   /* once READY */
  char name[64];
  struct rdzv_buf in;
  struct rdzv_buf out;     /* frames waiting to be written */
  struct rdzv_buf writing; /* frames being written by wreq */
  uv_write_t wreq;
  bool write_active;
  bool dirty; /* on d->dirty: out has bytes to flush */
  uv_timer_t hello_timer;
  uint32_t outstanding;
  uint32_t refs; /* the handle's own reference plus pending operations */
  /* In-process peer (benchmark): no socket; frames written to it are
   * decoded and handed to deliver(deliver_arg, msg) instead. */
  bool inproc;
  void (*deliver)(void *arg, const struct rdzv_msg *m);
  void *deliver_arg;
  TAILQ_ENTRY(conn) link;
  TAILQ_ENTRY(conn) dirty_link;
};
TAILQ_HEAD(conn_list, conn);

void rdzv__conn_ref(struct conn *c);
void rdzv__conn_unref(struct conn *c);
/* True while replies can still be sent to c. */
bool rdzv__conn_alive(const struct conn *c);
/* Queues a reply (flag REPLY set here) to c, unless c is gone; it is
 * written at the end of this loop iteration. Counts errors in stats, and
 * ends one outstanding request. */
void rdzv__conn_reply(struct conn *c, struct rdzv_msg *reply);
/* Queues a frame without touching the outstanding count. */
void rdzv__conn_send(struct conn *c, const struct rdzv_msg *m);
/* Sends an ERROR frame with status and text, then closes c. */
void rdzv__conn_fail(struct conn *c, int status, const char *text);
/* The same, naming the request that broke the rule. */
void rdzv__conn_fail_req(struct conn *c, uint32_t req_id, int status,
                         const char *text);

/* ---- jobs and roles ----------------------------------------------------- */

struct kvs; /* kvs.c: a job's key table at the root */
struct node_job; /* node.c: a job's cache/coalescing state on a node */
struct upstream; /* upstream.c: a node's connection to its parent */

struct job {
  char *id;
  struct kvs *kvs;        /* root */
  struct node_job *node;  /* node */
  struct job *next;
};

struct daemon {
  uv_loop_t *loop;
  struct rdzv_daemon_config cfg;
  struct rdzv_wire_limits limits;
  uv_tcp_t tcp_listen;
  uv_pipe_t unix_listen;
  bool have_tcp, have_unix;
  uv_idle_t flush_idle;
  uv_check_t flush_check;
  struct conn_list conns;
  struct conn_list dirty;
  uint32_t nconns;
  struct job *jobs;
  struct stats stats;
  char bound_addr[300];
  uint64_t start_ms;
  bool stopping;
  struct ts_server *tcpstore; /* --tcpstore-listen, or NULL */
  /* rdzv__log_drop's rate limit: the second, lines in it, lines left out */
  uint64_t drop_log_sec;
  uint32_t drop_log_n;
  uint64_t drop_log_skipped;
};

/* Logs (at level 1) that a connection was dropped for breaking a rule, at
 * most 10 lines a second; the next line says how many were left out
 * (statistics still count every one: proto_errors). */
void rdzv__log_drop(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "HOST:PORT" or "[V6]:PORT" into host and port. 0 or RDZV_EBAD_ADDR. */
int rdzv__split_host_port(const char *addr, char *host, size_t hostlen,
                          int *port);
/* Writes "PORT\n" to path atomically (a temporary file renamed). 0 or
 * -errno. */
int rdzv__write_port_file(const char *path, int port);

/* The TCPStore front end (store/tcpstore.c): listens on listen (HOST:PORT)
 * for PyTorch c10d TCPStore clients, whose keys live in job `job`; writes
 * the bound port to port_file (may be empty). *out is set even on failure
 * (pass it to rdzv__tcpstore_stop). Returns 0 or a negative status (a
 * message went to stderr). */
struct ts_server;
int rdzv__tcpstore_start(struct daemon *d, const char *listen, const char *job,
                         const char *port_file, struct ts_server **out);
/* Closes the listener and every TCPStore connection. NULL is a no-op. */
void rdzv__tcpstore_stop(struct ts_server *s);

/* Finds or creates the job named id (len bytes). NULL on ENOMEM. */
struct job *rdzv__job_get(struct daemon *d, const uint8_t *id, size_t len);

/* Handles one validated request from a READY connection. */
void rdzv__root_handle(struct daemon *d, struct conn *c,
                       const struct rdzv_msg *m);
void rdzv__node_handle(struct daemon *d, struct conn *c,
                       const struct rdzv_msg *m);
void rdzv__root_job_free(struct job *j);
void rdzv__node_job_free(struct job *j);
/* A connection went away: drop what the role keeps for it. */
void rdzv__root_conn_closed(struct daemon *d, struct conn *c);

/* ---- node's upstream ------------------------------------------------------ */

/* Called once with the parent's reply, or with a reply synthesized here
 * (status RDZV_ECONN_CLOSED, RDZV_ECANCELED) when none can come. */
typedef void (*upstream_cb)(struct daemon *d, const struct rdzv_msg *reply,
                            void *arg);

struct upstream *rdzv__upstream_create(struct daemon *d, const char *job_id);
void rdzv__upstream_destroy(struct upstream *u);
/* Sends m (its req_id is replaced) to the parent; queued until connected. */
int rdzv__upstream_send(struct upstream *u, const struct rdzv_msg *m,
                        upstream_cb cb, void *arg);

/* ---- helpers --------------------------------------------------------------- */

uint64_t rdzv__now_ms(struct daemon *d);
void rdzv__log(struct daemon *d, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A reply skeleton for request m. */
void rdzv__reply_init(struct rdzv_msg *r, const struct rdzv_msg *m,
                      int status);

#endif /* RDZV_STORE_SERVER_INT_H */
