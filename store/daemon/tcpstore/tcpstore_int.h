/* What the two files of the PyTorch c10d TCPStore front end share:
 * tcpstore.c (the listener, the connections, their bytes) and bridge.c
 * (requests to the daemon and replies back). The server and connection
 * structs, the key limit both use, and the functions one calls in the
 * other; everything else stays static in its file. Private. */
#ifndef RDZV_STORE_DAEMON_TCPSTORE_INT_H
#define RDZV_STORE_DAEMON_TCPSTORE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "store/daemon/tcpstore/tcpstore.h"
#include "store/daemon/transport/transport.h"
#include "store/wire/tcpstore_wire.h"

/* Keys one parsed request may hold (the wire limit is checked first). */
#define TS_KEYS_CAP RDZV_TS_MAX_KEYS

struct ts_pending {
  uint32_t req_id; /* 0 while due (not sent yet) */
  enum rdzv_ts_op op;
  bool cancelled;      /* WAIT, BARRIER after CANCEL_WAIT: drop its answer */
  bool due;            /* BARRIER: its second step waits for on_deferred */
  uint8_t stage;       /* BARRIER: 0 the ADD, 1 rdzv's BARRIER */
  int64_t world;       /* BARRIER: the world size */
  uint64_t member;     /* BARRIER: this caller's member id */
  struct rdzv_buf arg; /* COMPARE_SET: the expected value; BARRIER: the
                          key */
  struct ts_pending *next;
};

struct ts_conn {
  uv_tcp_t tcp;
  struct ts_server *srv;
  struct conn *in; /* the in-process connection to the daemon */
  struct rdzv_ts_parser ps;
  struct rdzv_buf rbuf; /* bytes read, not parsed yet (idle: none) */
  struct rdzv_outq out; /* replies not written yet, big values by
                           reference to their shared buffers (idle:
                           no memory) */
  bool write_active, reading, closing;
  /* Set inside rdzv__ts_on_reply (which must not call into the daemon),
   * acted on by the server's idle handler on this loop iteration. */
  bool resume_due;
  bool
      barrier_due; /* a BARRIER's second step is due (bridge.c's on_deferred) */
  bool broke_rule; /* closed for a bad request or a failed one */
  /* Set: close it (on_deferred), saying why: what failed (NULL: the
   * daemon sent an ERROR frame) and the status. */
  bool close_due;
  const char *close_what;
  int close_status;
  uint32_t next_req;
  uint32_t npending;  /* requests the daemon has not answered */
  uint32_t nwrites;   /* ... of them writes without a reply */
  uint32_t nblocking; /* ... with a reply still owed, WAITs aside */
  struct ts_pending *pending, *pending_tail;
  struct ts_conn *prev, *next; /* srv->conns */
};

struct ts_server {
  uv_tcp_t listen;
  struct daemon *d;
  char job[256];
  /* A key space (spaces.c): every key a client names is this prefix
   * followed by the key; LIST_KEYS and GETNUMKEYS see only keys under it,
   * without it. plen 0: the job's keys as they are (--tcpstore-listen). */
  char prefix[RDZV_TS_SPACE_PREFIX_MAX + 1];
  uint32_t plen;
  struct rdzv_buf kbuf;     /* prefixed keys of the request being sent */
  struct rdzv_slice *pkeys; /* ... as slices, TS_KEYS_CAP */
  int port;                 /* bound */
  struct rdzv_ts_limits lim;
  uint32_t max_pending; /* TS_MAX_PENDING, or less under --max-outstanding */
  struct rdzv_slice *keys, *vals; /* parse scratch, TS_KEYS_CAP each */
  struct rdzv_buf frame;          /* encode scratch */
  struct ts_conn *conns;
  uv_idle_t deferred; /* runs what rdzv__ts_on_reply left for later */
  bool closing;
};

/* ---- tcpstore.c ---------------------------------------------------------- */

/* Writes what t->out holds, unless a write is under way or t is closing
 * (the write's end goes on with the rest). */
void rdzv__ts_flush(struct ts_conn *t);
/* Closes t, logging why (NULL: an ordinary end, not logged; also how a
 * close that waited for a write goes on). */
void rdzv__ts_close(struct ts_conn *t, const char *why);
/* Reads from t again (a no-op while reading or closing), and parses what
 * is buffered already. */
void rdzv__ts_read_more(struct ts_conn *t);

/* ---- bridge.c ------------------------------------------------------------ */

/* Parses and handles what t has read, in order: stops at a request that
 * may not go yet, and pauses reading when too much is held or pending. A
 * bad request closes t. */
void rdzv__ts_parse_all(struct ts_conn *t);
/* deliver() of t's in-process connection (arg: the ts_conn). */
void rdzv__ts_on_reply(void *arg, const struct rdzv_msg *r);
/* Frees a pending request and what it kept. */
void rdzv__ts_pending_free(struct ts_pending *p);

#endif /* RDZV_STORE_DAEMON_TCPSTORE_INT_H */
