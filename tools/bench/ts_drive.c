/* rdzv-bench --ts-drive: simulated ranks that speak PyTorch's c10d
 * TCPStore protocol (the legacy dialect of torch <= 2.0, which PyTorch
 * 1.13's server speaks and rdzvd's front end serves) over TCP, one
 * connection per rank, all driven by one epoll loop. The same clients run
 * against every server of the incumbents' mode (incumbents.c). Each rank
 * runs PyTorch's init pattern, with the keys a torch client puts on the
 * wire (a "/" in front of user keys):
 *   connect; ADD "init/" 1           (the store constructor's worker count)
 *   rank 0: SET "/uid" (128 bytes)   (ncclGetUniqueId's id)
 *   others: WAIT ["/uid"], GET "/uid" (store.get: a wait, then the get)
 *   SET "/topo/<rank>" (64 bytes)    (its topology record)
 *   ADD "/barrier" 1 -> n; the rank with n == N: SET "/barrier_done" "1";
 *   WAIT ["/barrier_done"]           (the add-barrier with a done key)
 * With --pattern pytorch (bench_opts.pytorch), the traffic torch 2.x
 * itself sends through a store at init and after, in the v2 dialect
 * (VALIDATE first), with B = ceil(N/128) blocks of ranks:
 *   connect; VALIDATE; ADD "init/" 1
 *   the first rank of each block b (blocks balanced as ProcessGroupNCCL
 *   makes them): SET "/UniqueNCCLID:<b>" (128 bytes)
 *   every rank: WAIT [all B keys]; MULTI_GET [all B keys] (each checked)
 *   rank 0: SET "/single_uid"; others: WAIT, GET (the one-root path)
 *   rank 0: SET "/torchelastic/state"; each host's first rank (its agent):
 *   WAIT, then GET it 5 times (torchrun's c10d handler's polls)
 *   every rank: CHECK ["/dump"] 60 times (the heartbeat monitor; absent)
 * "done" then counts a rank with every id right in UID_OK; LAST, ADD_SUM
 * are 0 and INIT_SUM the sum of init/'s replies.
 * Lines with the orchestrator:
 *   -> "ready"   ports read
 *   <- "go"      start every rank
 *   -> "done OK FAIL UID_OK LAST ADD_SUM INIT_SUM" when all finished:
 *      ranks that got the right uid, that saw n == N, the sums of the
 *      barrier's and of init/'s ADD replies (each N(N+1)/2 when every
 *      rank's add was applied once); durations written
 *   <- "exit"    close and exit */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/wire/tcpstore_wire.h"
#include "tools/bench/bench.h"
#include "tools/bench/ts_drive.h"
#include "tools/bench/incumbents.h"
#include "tools/bench/rank.h"

void ts_fail(struct ts_driver *dv, struct ts_rank *r, const char *why) {
  if (r->step == T_DONE || r->step == T_FAILED)
    return;
  snprintf(r->why, sizeof(r->why), "%s", why);
  r->step = T_FAILED;
  r->t_done = bench_now();
  dv->ndone++;
  if (dv->nfail++ < 3)
    fprintf(stderr, "rdzv-bench: tcpstore rank %" PRId64 ": %s\n", r->rank,
            why);
}

/* Keeps r's epoll registration at what it needs: readable once
 * connected, writable while connecting or while bytes wait. */
static void rearm(struct ts_driver *dv, struct ts_rank *r) {
  if (r->fd < 0)
    return;
  uint32_t ev =
      (r->step == T_CONNECT ? 0 : EPOLLIN) |
      (r->step == T_CONNECT || r->out_off < r->out.len ? EPOLLOUT : 0);
  if (ev == r->events)
    return;
  struct epoll_event e = {.events = ev, .data.u64 = (uint64_t)(r - dv->rs)};
  int op = r->events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(dv->ep, op, r->fd, &e) < 0)
    ts_fail(dv, r, strerror(errno));
  r->events = ev;
}

static void flush(struct ts_driver *dv, struct ts_rank *r) {
  while (r->out_off < r->out.len) {
    ssize_t k = send(r->fd, r->out.data + r->out_off, r->out.len - r->out_off,
                     MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
      break;
    if (k < 0) {
      ts_fail(dv, r, strerror(errno));
      return;
    }
    r->out_off += (size_t)k;
  }
  if (r->out_off == r->out.len)
    r->out.len = r->out_off = 0;
  rearm(dv, r);
}

/* Queues one request: op on key (with one value, or a delta). */
int ts_put_req(struct ts_rank *r, enum rdzv_ts_op op, const char *key,
               const void *val, size_t vlen, int64_t delta) {
  struct rdzv_slice k = {(const uint8_t *)key, (uint32_t)strlen(key)};
  struct rdzv_slice v = {val, (uint32_t)vlen};
  struct rdzv_ts_req q = {.op = op, .nkeys = 1, .keys = &k, .delta = delta};
  if (op == RDZV_TS_SET) {
    q.nvals = 1;
    q.vals = &v;
  }
  if (rdzv_ts_op_has_reply(op))
    r->expect = op;
  return rdzv_ts_encode(r->v2 ? RDZV_TS_V2 : RDZV_TS_LEGACY, &q, &r->out);
}

/* The uid rank 0 sets: 128 bytes every rank can check. */
void ts_uid_bytes(uint8_t *p) {
  for (int i = 0; i < BENCH_INC_UID_BYTES; i++)
    p[i] = (uint8_t)(i * 7 + 13);
}

/* This rank's topology record (64 bytes) and barrier ADD. */
static int topo_and_add(struct ts_driver *dv, struct ts_rank *r) {
  char key[64], rec[BENCH_INC_TOPO_BYTES];
  snprintf(key, sizeof(key), "/topo/%" PRId64, r->rank);
  memset(rec, ' ', sizeof(rec));
  snprintf(rec, sizeof(rec),
           "rank=%" PRId64 " host=h%06" PRId64 " gpu_pci=simulated", r->rank,
           r->rank / dv->o->ranks_per_host);
  int rc = ts_put_req(r, RDZV_TS_SET, key, rec, sizeof(rec), 0);
  if (rc == 0)
    rc = ts_put_req(r, RDZV_TS_ADD, "/barrier", NULL, 0, 1);
  r->step = T_BARRIER_ADD;
  return rc;
}

/* torch 1.13's second connection, opened after the worker count and
 * never used (waited for: 1.13 connects it before returning). Its
 * completion comes through epoll with bit 63 of the index set. */
static int open_callback(struct ts_driver *dv, struct ts_rank *r) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(r->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  r->fd2 = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (r->fd2 < 0)
    return -errno;
  if (connect(r->fd2, (struct sockaddr *)&a, sizeof(a)) < 0 &&
      errno != EINPROGRESS)
    return -errno;
  struct epoll_event e = {.events = EPOLLOUT,
                          .data.u64 = (uint64_t)(r - dv->rs) | 1ull << 63};
  return epoll_ctl(dv->ep, EPOLL_CTL_ADD, r->fd2, &e) < 0 ? -errno : 0;
}

static int advance(struct ts_driver *dv, struct ts_rank *r,
                   const struct rdzv_ts_reply *rep);

/* The second connection is up (or failed): on with the pattern. */
static void callback_connected(struct ts_driver *dv, struct ts_rank *r) {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(r->fd2, SOL_SOCKET, SO_ERROR, &err, &len);
  epoll_ctl(dv->ep, EPOLL_CTL_DEL, r->fd2, NULL);
  if (err != 0 || r->step != T_CALLBACK) {
    ts_fail(dv, r, err != 0 ? strerror(err) : "callback connection");
    return;
  }
  struct rdzv_ts_reply none = {0};
  int rc = advance(dv, r, &none);
  if (rc < 0)
    ts_fail(dv, r, rdzv_strerror(rc));
  else
    flush(dv, r);
}

/* Advances r with the reply to its last request. */
static int advance(struct ts_driver *dv, struct ts_rank *r,
                   const struct rdzv_ts_reply *rep) {
  int64_t n = dv->o->ranks;
  uint8_t uid[BENCH_INC_UID_BYTES];
  if (dv->o->pytorch)
    return ts_pt_advance(dv, r, rep);
  switch (r->step) {
  case T_INIT:
    r->t_phase[1] = bench_now();
    r->init_reply = rep->i64;
    if (dv->conns == 2 && r->fd2 < 0) {
      r->step = T_CALLBACK;
      return open_callback(dv, r);
    }
    /* fall through */
  case T_CALLBACK:
    if (r->rank == 0) {
      ts_uid_bytes(uid);
      r->uid_ok = true;
      int rc = ts_put_req(r, RDZV_TS_SET, "/uid", uid, sizeof(uid), 0);
      return rc < 0 ? rc : topo_and_add(dv, r);
    }
    r->step = T_UID_WAIT;
    return ts_put_req(r, RDZV_TS_WAIT, "/uid", NULL, 0, 0);
  case T_UID_WAIT:
    if (rep->u8 != RDZV_TS_STOP_WAITING)
      return RDZV_EPROTO;
    r->step = T_UID_GET;
    return ts_put_req(r, RDZV_TS_GET, "/uid", NULL, 0, 0);
  case T_UID_GET:
    r->t_phase[2] = bench_now();
    ts_uid_bytes(uid);
    r->uid_ok = rep->nblobs == 1 && rep->blobs[0].n == sizeof(uid) &&
                memcmp(rep->blobs[0].p, uid, sizeof(uid)) == 0;
    if (!r->uid_ok)
      return RDZV_EPROTO;
    return topo_and_add(dv, r);
  case T_BARRIER_ADD:
    r->t_phase[3] = bench_now();
    r->add_reply = rep->i64;
    r->step = T_DONE_WAIT;
    if (rep->i64 == n) {
      r->last = true;
      int rc = ts_put_req(r, RDZV_TS_SET, "/barrier_done", "1", 1, 0);
      if (rc < 0)
        return rc;
    }
    return ts_put_req(r, RDZV_TS_WAIT, "/barrier_done", NULL, 0, 0);
  case T_DONE_WAIT:
    if (rep->u8 != RDZV_TS_STOP_WAITING)
      return RDZV_EPROTO;
    r->step = T_DONE;
    r->expect = 0;
    r->t_done = bench_now();
    dv->ndone++;
    return 0;
  default:
    return RDZV_EPROTO;
  }
}

static void start_connect(struct ts_driver *dv, struct ts_rank *r) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(r->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  r->retry_at = 0;
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (r->fd < 0) {
    ts_fail(dv, r, strerror(errno));
    return;
  }
  setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  /* One source address has about 28,000 ephemeral ports for one server
   * address (fewer while earlier runs' connections linger in TIME_WAIT):
   * a run of more than 10,000 ranks spreads them over 127.0.0.2, .3, ...,
   * 10,000 ranks each. */
  if (dv->o->ranks > 10000) {
    struct sockaddr_in src = {
        .sin_family = AF_INET,
        .sin_addr.s_addr =
            htonl(INADDR_LOOPBACK + 1 + (uint32_t)(r->rank / 10000))};
    if (bind(r->fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
      ts_fail(dv, r, strerror(errno));
      return;
    }
  }
  r->events = UINT32_MAX;
  r->step = T_CONNECT;
  if (connect(r->fd, (struct sockaddr *)&a, sizeof(a)) < 0 &&
      errno != EINPROGRESS) {
    ts_fail(dv, r, strerror(errno));
    return;
  }
  rearm(dv, r);
}

/* The connect finished (or failed: refused ports are tried again, as a
 * torch client does, with a backoff of 10 ms doubling to 1 s). */
static void connected(struct ts_driver *dv, struct ts_rank *r) {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET) {
    epoll_ctl(dv->ep, EPOLL_CTL_DEL, r->fd, NULL);
    close(r->fd);
    r->fd = -1;
    double d = 0.01 * (double)(1 << (r->tries < 7 ? r->tries : 7));
    r->tries++;
    r->retry_at = bench_now() + (d < 1 ? d : 1);
    dv->nretry++;
    return;
  }
  if (err != 0) {
    ts_fail(dv, r, strerror(err));
    return;
  }
  r->step = T_INIT;
  r->t_phase[0] = bench_now();
  if (dv->o->pytorch) { /* torch 2.x: VALIDATE with the magic first */
    struct rdzv_ts_req v = {.op = RDZV_TS_VALIDATE, .u32 = RDZV_TS_MAGIC};
    r->v2 = true;
    if (rdzv_ts_encode(RDZV_TS_V2, &v, &r->out) < 0)
      ts_fail(dv, r, "out of memory");
  }
  if (ts_put_req(r, RDZV_TS_ADD, "init/", NULL, 0, 1) < 0)
    ts_fail(dv, r, "out of memory");
  flush(dv, r);
}

/* A streamed reply (ids of 128 bytes each, 782 of them at 100,000 ranks)
 * is read into this, many kilobytes a call, and checked from here. */
static uint8_t stream_buf[1 << 16];

static void readable(struct ts_driver *dv, struct ts_rank *r) {
  bool streaming = r->expect == 0 && r->mg_left > 0 && r->in_len == 0;
  ssize_t k =
      streaming ? recv(r->fd, stream_buf, sizeof(stream_buf), 0)
                : recv(r->fd, r->in + r->in_len, sizeof(r->in) - r->in_len, 0);
  if (k < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (k <= 0) {
    ts_fail(dv, r,
            k == 0 ? "the server closed the connection" : strerror(errno));
    return;
  }
  if (streaming) {
    size_t used = 0;
    int rc = ts_pt_stream_buf(dv, r, stream_buf, (size_t)k, &used);
    if (rc < 0) {
      ts_fail(dv, r, rc == RDZV_EPROTO ? "a wrong value" : rdzv_strerror(rc));
      return;
    }
    /* What follows the stream's end (a reply to the request its end
     * sent, when the server was that quick) goes the usual way. */
    if ((size_t)k - used > sizeof(r->in)) {
      ts_fail(dv, r, "bytes nobody asked for");
      return;
    }
    memcpy(r->in, stream_buf + used, (size_t)k - used);
    k = (ssize_t)((size_t)k - used);
    flush(dv, r);
    if (k == 0 || r->step == T_DONE || r->step == T_FAILED)
      return;
  }
  r->in_len += (size_t)k;
  for (;;) {
    struct rdzv_slice blob;
    struct rdzv_ts_reply rep;
    size_t used = 0;
    if (r->expect == 0 && r->mg_left > 0) { /* a streamed reply */
      int rc = ts_pt_stream(dv, r);
      if (rc < 0) {
        ts_fail(dv, r, rc == RDZV_EPROTO ? "a wrong value" : rdzv_strerror(rc));
        return;
      }
      flush(dv, r);
      if (r->in_len == 0 || r->step == T_DONE || r->step == T_FAILED)
        return;
      continue;
    }
    if (r->expect == 0) {
      if (r->in_len > 0)
        ts_fail(dv, r, "bytes nobody asked for");
      return;
    }
    int rc = rdzv_ts_parse_reply(r->expect, 1, r->in, r->in_len, sizeof(r->in),
                                 &blob, 1, &rep, &used);
    if (rc == 0 && r->in_len == sizeof(r->in))
      rc = RDZV_EVALUE_TOO_BIG;
    if (rc == 0)
      return;
    if (rc < 0) {
      ts_fail(dv, r, rdzv_strerror(rc));
      return;
    }
    r->expect = 0;
    rc = advance(dv, r, &rep);
    memmove(r->in, r->in + used, r->in_len - used);
    r->in_len -= used;
    if (rc < 0) {
      ts_fail(dv, r,
              rc == RDZV_EPROTO ? "unexpected reply" : rdzv_strerror(rc));
      return;
    }
    flush(dv, r);
    if (r->step == T_DONE || r->step == T_FAILED)
      return;
  }
}

static int read_port(const char *path, uint16_t *port) {
  FILE *f = fopen(path, "r");
  int p = 0;
  int ok = f != NULL && fscanf(f, "%d", &p) == 1 && p > 0 && p < 65536;
  if (f != NULL)
    fclose(f);
  *port = (uint16_t)p;
  return ok ? 0 : -1;
}

static void loop(struct ts_driver *dv) {
  struct epoll_event evs[1024];
  double deadline = dv->t_go + dv->o->timeout_s;
  while (dv->ndone < dv->n) {
    int got = epoll_wait(dv->ep, evs, 1024,
                         dv->nretry > 0   ? 5
                         : dv->npaced > 0 ? 20
                                          : 100);
    for (int k = 0; k < got; k++) {
      uint64_t i = evs[k].data.u64 & ~(1ull << 63);
      struct ts_rank *r = &dv->rs[i];
      if (r->fd < 0 || r->step == T_FAILED)
        continue;
      if (evs[k].data.u64 >> 63) {
        callback_connected(dv, r);
        continue;
      }
      if (r->step == T_CONNECT) {
        connected(dv, r);
        continue;
      }
      if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        readable(dv, r);
      if (r->step != T_FAILED && (evs[k].events & EPOLLOUT))
        flush(dv, r);
    }
    double now = bench_now();
    if (dv->nretry > 0) /* reconnects due */
      for (int64_t i = 0; i < dv->n; i++)
        if (dv->rs[i].retry_at > 0 && dv->rs[i].retry_at <= now) {
          dv->nretry--;
          start_connect(dv, &dv->rs[i]);
        }
    if (dv->npaced > 0) /* paced checks due (--pt-check-ms) */
      for (int64_t i = 0; i < dv->n; i++) {
        struct ts_rank *r = &dv->rs[i];
        if (r->step != T_CHECK || r->check_at <= 0 || r->check_at > now)
          continue;
        int rc = ts_pt_check_due(dv, r);
        if (rc < 0)
          ts_fail(dv, r, rdzv_strerror(rc));
        else
          flush(dv, r);
      }
    if (now > deadline) {
      for (int64_t i = 0; i < dv->n; i++)
        ts_fail(dv, &dv->rs[i], "timed out (--timeout)");
    }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* RDZV_BENCH_VERBOSE: when the ranks reached each step (seconds after
 * go: median and last), to see where the time goes. */
static void phases(struct ts_driver *dv) {
  static const char *const names[4] = {"connected", "init/ added", "uid read",
                                       "barrier added"};
  double *d = malloc((size_t)dv->n * sizeof(*d));
  for (int k = 0; d != NULL && k < 4; k++) {
    int64_t m = 0;
    for (int64_t i = 0; i < dv->n; i++)
      if (dv->rs[i].t_phase[k] > 0)
        d[m++] = dv->rs[i].t_phase[k] - dv->t_go;
    if (m == 0)
      continue;
    qsort(d, (size_t)m, sizeof(*d), cmp_double);
    fprintf(stderr,
            "  tcpstore driver %d: %-14s median %.3f s, p99 %.3f "
            "s, last %.3f s (%" PRId64 " ranks)\n",
            (int)getpid(), names[k], d[(m - 1) / 2],
            d[(int64_t)((double)(m - 1) * 0.99)], d[m - 1], m);
  }
  free(d);
}

static void report(struct ts_driver *dv) {
  if (getenv("RDZV_BENCH_VERBOSE") != NULL)
    phases(dv);
  int64_t uid_ok = 0, last = 0, add_sum = 0, init_sum = 0;
  for (int64_t i = 0; i < dv->n; i++) {
    struct ts_rank *r = &dv->rs[i];
    uid_ok += r->uid_ok && r->step == T_DONE;
    last += r->last;
    add_sum += r->add_reply;
    init_sum += r->init_reply;
  }
  double *d = malloc((size_t)(dv->n > 0 ? dv->n : 1) * sizeof(*d));
  for (int64_t i = 0; d != NULL && i < dv->n; i++)
    d[i] = dv->rs[i].step == T_DONE ? dv->rs[i].t_done - dv->t_go : -1;
  if (d != NULL)
    bench_inc_write_durations(dv->o, d, dv->n);
  free(d);
  printf("done %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
         " %" PRId64 "\n",
         dv->n - dv->nfail, dv->nfail, uid_ok, last, add_sum, init_sum);
  fflush(stdout);
}

int bench_ts_drive_main(struct bench_opts *o) {
  struct ts_driver dv = {
      .o = o, .ep = epoll_create1(EPOLL_CLOEXEC), .conns = 1};
  const char *c = getenv("RDZV_BENCH_TS_CONNS");
  if (c != NULL && strcmp(c, "2") == 0)
    dv.conns = 2;
  const char *ka = getenv("RDZV_BENCH_PT_KEEPALIVE");
  dv.keepalive = ka != NULL && strcmp(ka, "1") == 0;
  const char *pc = getenv("RDZV_BENCH_PT_CHECK_MS");
  if (pc != NULL)
    dv.check_s = strtod(pc, NULL) / 1000.0;
  for (int64_t h = o->first; h < o->first + o->count; h++)
    dv.n += bench_host_ranks(o, h);
  dv.rs = calloc((size_t)(dv.n > 0 ? dv.n : 1), sizeof(*dv.rs));
  if (dv.rs == NULL || dv.ep < 0 || (o->pytorch && ts_pt_prepare(&dv) < 0))
    return 1;
  int64_t k = 0;
  for (int64_t h = o->first; h < o->first + o->count; h++) {
    char path[200];
    uint16_t port;
    bench_ts_port_path(o, o->flat ? -1 : h, path, sizeof(path));
    if (read_port(path, &port) < 0) {
      fprintf(stderr, "rdzv-bench: no TCPStore port in %s\n", path);
      return 1;
    }
    for (int64_t l = 0; l < bench_host_ranks(o, h); l++, k++) {
      dv.rs[k].fd = dv.rs[k].fd2 = -1;
      dv.rs[k].port = port;
      dv.rs[k].rank = h * o->ranks_per_host + l;
    }
  }
  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof(line), stdin) == NULL)
    return 1;
  dv.t_go = bench_now();
  for (k = 0; k < dv.n; k++)
    start_connect(&dv, &dv.rs[k]);
  loop(&dv);
  report(&dv);
  /* Connected until every driver is done, as a job's ranks are. */
  if (fgets(line, sizeof(line), stdin) == NULL)
    line[0] = '\0';
  for (k = 0; k < dv.n; k++) {
    if (dv.rs[k].fd >= 0)
      close(dv.rs[k].fd);
    if (dv.rs[k].fd2 >= 0)
      close(dv.rs[k].fd2);
    rdzv_buf_free(&dv.rs[k].out);
  }
  free(dv.rs);
  close(dv.ep);
  return dv.nfail == 0 ? 0 : 1;
}
