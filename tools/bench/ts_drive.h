/* rdzv-bench --ts-drive's private parts: a simulated rank's state and
 * the driver's, shared by ts_drive.c (the loop, connections, PyTorch's
 * init pattern) and ts_pattern.c (PyTorch's own store traffic, --pytorch).
 * Private to tools/bench. */
#ifndef RDZV_TOOLS_BENCH_TS_DRIVE_H
#define RDZV_TOOLS_BENCH_TS_DRIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/wire/tcpstore_wire.h"
#include "tools/bench/bench.h"

enum ts_step {
  T_CONNECT,
  T_INIT,
  /* --pattern pytorch */
  T_IDS_WAIT,
  T_IDS_MGET,
  T_SINGLE_WAIT,
  T_SINGLE_GET,
  T_STATE_WAIT,
  T_STATE_GET,
  T_STATE_CAS, /* --pt-keepalive: an agent's compare_set of the state */
  T_CHECK,
  T_CALLBACK, /* the second connection is connecting */
  T_UID_WAIT,
  T_UID_GET,
  T_BARRIER_ADD,
  T_DONE_WAIT,
  T_DONE,
  T_FAILED,
};

struct ts_rank {
  int fd;
  int fd2; /* the idle second connection, or -1 */
  int64_t rank;
  uint16_t port;
  enum ts_step step;
  enum rdzv_ts_op expect; /* the reply awaited */
  struct rdzv_buf out;    /* bytes not sent yet: out.data[off..len) */
  size_t out_off;
  uint8_t in[512];
  size_t in_len;
  uint32_t events; /* registered with epoll */
  int tries;
  double retry_at; /* > 0: reconnect then */
  double t_done;
  double t_phase[4]; /* connected, init/ answered, uid had, barrier add */
  int64_t add_reply, init_reply;
  bool uid_ok, last;
  bool v2;      /* the v2 dialect (--pattern pytorch) */
  char why[96]; /* a failure */
  /* --pattern pytorch: a MULTI_GET's reply, checked as it streams in
   * (B blobs of 128 bytes: never held whole), and the steps' counters. */
  int64_t mg_left;   /* blobs still to come */
  int64_t mg_body;   /* bytes of the current blob still to come */
  uint8_t mg_hdr[8]; /* its length, as it comes */
  int mg_nhdr;
  int64_t mg_pos; /* offset in the current blob */
  bool mg_ok;
  int reps;        /* GETs or CHECKs done in this step */
  double check_at; /* > 0: the next paced check is due then */
};

struct ts_driver {
  const struct bench_opts *o;
  int64_t nblocks; /* --pattern pytorch: B */
  struct ts_rank *rs;
  int64_t n, ndone, nfail, nretry;
  int conns;      /* connections a rank: 1 or 2 */
  double check_s; /* --pt-check-ms in seconds (0: checks back to back) */
  int64_t npaced; /* ranks waiting for their next paced check */
  bool keepalive; /* --pt-keepalive: agents rewrite the state */
  int ep;
  double t_go;
};

/* Marks r failed (why: for the first three, on stderr). */
void ts_fail(struct ts_driver *dv, struct ts_rank *r, const char *why);
/* Queues one request: op on key (with one value, or a delta), in r's
 * dialect; its reply is the one awaited. 0 or RDZV_ENOMEM. */
int ts_put_req(struct ts_rank *r, enum rdzv_ts_op op, const char *key,
               const void *val, size_t vlen, int64_t delta);
/* The 128-byte uid rank 0 sets, the same for every rank to check. */
void ts_uid_bytes(uint8_t *p);

/* ts_pattern.c: --pytorch. The keys of the run (0 or -1); the reply to
 * r's last request; what r->in holds of a streamed reply (GET,
 * MULTI_GET: checked as it comes). Each returns 0 or an error. */
int ts_pt_prepare(struct ts_driver *dv);
int ts_pt_advance(struct ts_driver *dv, struct ts_rank *r,
                  const struct rdzv_ts_reply *rep);
int ts_pt_stream(struct ts_driver *dv, struct ts_rank *r);
/* The same on p[0..n), read straight from the socket: *used bytes. */
int ts_pt_stream_buf(struct ts_driver *dv, struct ts_rank *r, const uint8_t *p,
                     size_t n, size_t *used);
/* r's paced check is due (r->check_at passed): sends it, or ends r. */
int ts_pt_check_due(struct ts_driver *dv, struct ts_rank *r);

#endif
