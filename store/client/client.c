/* librdzv: the client handle, requests and the poll() drivers.
 *
 * The handle's settings from its options are in client_opts.c; the
 * connection (client_connect.c: connecting and its state machine;
 * client_conn.c: socket I/O, dispatch of replies) below this file; see
 * client_int.h for how they fit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "store/auth/auth.h"
#include "store/client/client_int.h"

#define CHECK_HANDLE(c) assert((c) != NULL && (c)->magic == RDZV__CLIENT_MAGIC)

/* A WAIT's server-side timeout is sent in ms; cap it at about 24 days. */
#define MAX_WAIT_MS ((int64_t)INT32_MAX)

/* ---- time and text ------------------------------------------------------ */

int64_t rdzv__now_ns(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t rdzv__deadline_after(int64_t now, double s) {
  double ns;

  if (isnan(s))
    return now;
  if (s <= 0)
    return now;
  ns = s * 1e9;
  if (ns >= (double)(RDZV__NO_DEADLINE - now))
    return RDZV__NO_DEADLINE;
  return now + (int64_t)ns;
}

void rdzv__set_error(struct rdzv_client *c, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
  va_end(ap);
}

static void client_free(struct rdzv_client *c) {
  rdzv__conn_close(c);
  rdzv__home_probe_end(c);
  rdzv_tls_cfg_free(c->tls_cfg);
  while (c->nfb > 0) {
    c->nfb--;
    free(c->fb[c->nfb].host);
    free(c->fb_str[c->nfb]);
  }
  rdzv_buf_free(&c->in);
  rdzv_buf_free(&c->out);
  free(c->addr.host);
  free(c->addr_str);
  if (c->redirected) {
    free(c->home.host);
    free(c->home_str);
  }
  if (c->secret != NULL) {
    rdzv_auth_wipe(c->secret, c->secret_len);
    free(c->secret);
  }
  free(c->job_id);
  free(c->name);
  free(c->tab);
  free(c->heap);
  free(c->scratch);
  c->magic = 0;
  free(c);
}

int rdzv_client_create(const struct rdzv_client_opts *opts,
                       rdzv_client_t **out) {
  struct rdzv_client *c;
  int err;

  if (opts == NULL || out == NULL)
    return -EINVAL;
  *out = NULL;
  if (!rdzv__opts_ok(opts))
    return -EINVAL;
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return RDZV_ENOMEM;
  c->fd = -1;
  c->home_fd = -1;
  err = rdzv__client_init(c, opts);
  if (err < 0) {
    client_free(c);
    return err;
  }
  *out = c;
  return 0;
}

static void resume_free(struct rdzv_client *c);

void rdzv_client_destroy(rdzv_client_t *c) {
  struct rdzv__req_list l;

  if (c == NULL)
    return;
  CHECK_HANDLE(c);
  if (c->in_cb > 0) {
    /* Rule 4: never free an object inside its own callback. */
    rdzv__set_error(c, "destroy: called from inside a callback; ignored");
    return;
  }
  rdzv__conn_close(c);
  resume_free(c);
  rdzv__tab_clear(c);
  c->closing = true;
  /* In-flight requests first, then queued ones, each in submission order.
   * Callbacks cannot add more: submit refuses while closing. */
  while (c->sent.n > 0 || c->queue.n > 0) {
    l = c->sent.n > 0 ? c->sent : c->queue;
    if (c->sent.n > 0)
      memset(&c->sent, 0, sizeof(c->sent));
    else
      memset(&c->queue, 0, sizeof(c->queue));
    rdzv__finish_all(c, &l, RDZV_ECANCELED);
  }
  client_free(c);
}

/* ---- accessors ---------------------------------------------------------- */

const char *rdzv_client_last_error(const rdzv_client_t *c) {
  if (c == NULL)
    return "";
  CHECK_HANDLE(c);
  return c->last_error;
}

int rdzv_client_fd(const rdzv_client_t *c) {
  CHECK_HANDLE(c);
  return c->fd;
}

short rdzv_client_events(const rdzv_client_t *c) {
  CHECK_HANDLE(c);
  switch (c->state) {
  case RDZV__CS_CONNECTING:
    return POLLOUT;
  case RDZV__CS_HELLO_SENT:
    return (short)(POLLIN |
                   (c->out.len > 0 || c->cipher.len > 0 ? POLLOUT : 0));
  case RDZV__CS_READY:
    return (short)(POLLIN | (c->out.len > 0 || c->cipher.len > 0 ||
                                     (c->queue.n > 0 && !c->resume_wait)
                                 ? POLLOUT
                                 : 0));
  default:
    return 0;
  }
}

int rdzv_client_timeout_ms(const rdzv_client_t *c) {
  int64_t t = RDZV__NO_DEADLINE;
  int64_t now;
  int64_t ms;

  CHECK_HANDLE(c);
  if (c->state == RDZV__CS_FAILED && c->queue.n > 0)
    return 0;
  if (c->state == RDZV__CS_IDLE && rdzv__conn_wanted(c))
    return 0;
  if (c->state == RDZV__CS_BACKOFF || c->state == RDZV__CS_CONNECTING ||
      c->state == RDZV__CS_HELLO_SENT)
    t = c->timer;
  if (c->heap_n > 0 && c->heap[0]->deadline < t)
    t = c->heap[0]->deadline;
  if (rdzv__conn_heartbeat_due(c) < t)
    t = rdzv__conn_heartbeat_due(c);
  if (rdzv__home_due(c) < t)
    t = rdzv__home_due(c);
  if (t == RDZV__NO_DEADLINE)
    return -1;
  now = rdzv__now_ns();
  if (t <= now)
    return 0;
  ms = (t - now + 999999) / 1000000;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

size_t rdzv_client_pending(const rdzv_client_t *c) {
  CHECK_HANDLE(c);
  return c->queue.n + c->sent.n;
}

/* ---- submission --------------------------------------------------------- */

/* Copies the caller's byte strings into slices; checks sizes. */
static int slices_fill(struct rdzv_slice *dst, const struct rdzv_bytes *src,
                       size_t n, int too_big) {
  size_t i;

  if (n > 0 && src == NULL)
    return -EINVAL;
  for (i = 0; i < n; i++) {
    if (src[i].data == NULL && src[i].len != 0)
      return -EINVAL;
    if (src[i].len > UINT32_MAX)
      return too_big;
    dst[i].p = src[i].data;
    dst[i].n = (uint32_t)src[i].len;
  }
  return 0;
}

static int64_t wait_ms(double timeout_s) {
  double ms = ceil(timeout_s * 1000.0);

  if (!(ms > 0))
    return 0;
  return ms >= (double)MAX_WAIT_MS ? MAX_WAIT_MS : (int64_t)ms;
}

static uint32_t next_id(struct rdzv_client *c) {
  uint32_t id;

  do {
    id = c->next_id++;
  } while (id == 0 || rdzv__tab_find(c, id) != NULL);
  return id;
}

/* A fresh op id for a mutation (RDZV_F_OPID): splitmix64 of the handle's
 * random base and a counter, never 0. */
static uint64_t next_opid(struct rdzv_client *c) {
  uint64_t z = c->opid_base + ++c->opid_seq * 0x9E3779B97F4A7C15u;

  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  z ^= z >> 31;
  return z != 0 ? z : 1;
}

/* Checks req and encodes its frame into r->frame. Every mutation gets an
 * op id, so that sending it again after a lost connection (to the same
 * daemon or a fallback) applies it once: set, cas, delete, mset and
 * append in b, an add as one part { op id, delta } (wire.h). */
static int req_encode(struct rdzv_client *c, const struct rdzv_request *req,
                      double timeout_s, struct rdzv__req *r) {
  struct rdzv_msg m;
  struct rdzv_slice *sl;
  uint8_t part[16];
  int err;

  if (req->op < RDZV_OP_SET ||
      (req->op > RDZV_OP_COLL_STATUS && req->op != RDZV_OP_TS_SPACE) ||
      req->nkeys > UINT32_MAX || req->nvals > UINT32_MAX ||
      (req->flags &
       ~(RDZV_STORE_WRITE_ONCE | RDZV_STORE_LEAVE | RDZV_STORE_GIVE_UP)) != 0 ||
      ((req->flags & RDZV_STORE_WRITE_ONCE) && req->op != RDZV_OP_SET &&
       req->op != RDZV_OP_MSET && req->op != RDZV_OP_GET) ||
      ((req->flags & RDZV_STORE_LEAVE) && req->op != RDZV_OP_ABORT) ||
      ((req->flags & RDZV_STORE_GIVE_UP) && req->op != RDZV_OP_COLL_STATUS))
    return -EINVAL;
  sl = malloc((req->nkeys + req->nvals + 1) * sizeof(*sl));
  if (sl == NULL)
    return RDZV_ENOMEM;
  err = slices_fill(sl, req->keys, req->nkeys, RDZV_EKEY_TOO_LONG);
  if (err == 0)
    err = slices_fill(sl + req->nkeys, req->vals, req->nvals,
                      RDZV_EVALUE_TOO_BIG);
  memset(&m, 0, sizeof(m));
  m.type = (uint8_t)req->op;
  m.flags = (uint16_t)req->flags;
  m.a = req->op == RDZV_OP_WAIT ? wait_ms(timeout_s) : req->a;
  m.b = req->b;
  m.keys.n = (uint32_t)req->nkeys;
  m.keys.v = sl;
  m.vals.n = (uint32_t)req->nvals;
  m.vals.v = sl + req->nkeys;
  if (err == 0 && (req->op == RDZV_OP_SET || req->op == RDZV_OP_CAS ||
                   req->op == RDZV_OP_DELETE || req->op == RDZV_OP_MSET ||
                   req->op == RDZV_OP_APPEND)) {
    m.flags |= RDZV_F_OPID;
    m.b = (int64_t)next_opid(c);
  } else if (err == 0 && req->op == RDZV_OP_ADD && req->nvals == 0) {
    rdzv_store_u64le(part, next_opid(c));
    rdzv_store_u64le(part + 8, (uint64_t)req->a);
    sl[req->nkeys] = (struct rdzv_slice){part, sizeof(part)};
    m.flags |= RDZV_F_OPID;
    m.a = 0;
    m.vals.n = 1;
  }
  /* The codec's shape rules are the server's: check them here so that a
   * malformed request fails at once instead of closing the connection. */
  if (err == 0 && rdzv_msg_validate_request(&m, NULL) < 0)
    err = -EINVAL;
  if (err == 0) {
    r->id = next_id(c);
    m.req_id = r->id;
    err = rdzv_msg_encode(&m, &r->frame);
  }
  /* A frame over the limit would make the server drop the connection, and
   * the client would send it again after each reconnect until the
   * deadline: refuse it here (the server's default limit is ours). */
  if (err == 0 && r->frame.len - RDZV_WIRE_HEADER_BYTES > c->max_frame)
    err = RDZV_EFRAME_TOO_BIG;
  free(sl);
  return err;
}

int rdzv_client_submit(rdzv_client_t *c, const struct rdzv_request *req,
                       double timeout_s, rdzv_request_cb cb, void *arg) {
  struct rdzv__req *r;
  int64_t now = rdzv__now_ns();
  int err;

  CHECK_HANDLE(c);
  if (req == NULL || cb == NULL || isnan(timeout_s))
    return -EINVAL;
  if (c->closing)
    return RDZV_ECANCELED;
  r = calloc(1, sizeof(*r));
  if (r == NULL)
    return RDZV_ENOMEM;
  r->heap_idx = SIZE_MAX;
  err = req_encode(c, req, timeout_s, r);
  r->op = (uint8_t)req->op;
  r->cb = cb;
  r->arg = arg;
  r->timeout_s = timeout_s;
  r->deadline = rdzv__deadline_after(now, timeout_s);
  if (err == 0 && r->deadline != RDZV__NO_DEADLINE)
    err = rdzv__heap_push(c, r);
  if (err < 0) {
    rdzv_buf_free(&r->frame);
    free(r);
    return err;
  }
  r->where = RDZV__REQ_QUEUED;
  rdzv__list_push_back(&c->queue, r);
  if (req->op == RDZV_OP_JOIN)
    c->use_fallbacks = true;
  return 0;
}

static void resume_free(struct rdzv_client *c) {
  struct rdzv__req *r = c->resume;

  if (r == NULL)
    return;
  if (r->where == RDZV__REQ_SENT) {
    rdzv__list_remove(&c->sent, r);
    rdzv__tab_del(c, r->id);
    c->resume_wait = false;
  } else if (r->where == RDZV__REQ_QUEUED) {
    rdzv__list_remove(&c->queue, r);
  }
  c->resume = NULL;
  rdzv_buf_free(&r->frame);
  free(r);
}

int rdzv_client_set_resume(rdzv_client_t *c, const struct rdzv_request *req) {
  struct rdzv__req *r;
  int err;

  CHECK_HANDLE(c);
  if (c->resume != NULL && c->resume->where != RDZV__REQ_DETACHED)
    return -EBUSY;
  resume_free(c);
  if (req == NULL)
    return 0;
  r = calloc(1, sizeof(*r));
  if (r == NULL)
    return RDZV_ENOMEM;
  r->heap_idx = SIZE_MAX;
  err = req_encode(c, req, INFINITY, r);
  if (err < 0) {
    rdzv_buf_free(&r->frame);
    free(r);
    return err;
  }
  r->op = (uint8_t)req->op;
  r->deadline = RDZV__NO_DEADLINE;
  r->timeout_s = INFINITY;
  r->where = RDZV__REQ_DETACHED;
  c->resume = r;
  c->use_fallbacks = true;
  return 0;
}

unsigned rdzv_client_resumes(const rdzv_client_t *c) {
  CHECK_HANDLE(c);
  return c->resumes;
}

/* The session's resume request was answered (m, status) or failed
 * (status, m NULL). Accepted: the queue flows again. Refused: the session
 * is over; the request is dropped and every queued request fails with
 * that status (what they ask belongs to a session the daemons no longer
 * hold), last_error saying why. */
static void resume_done(struct rdzv_client *c, const struct rdzv_msg *m,
                        int status) {
  struct rdzv__req_list l;
  struct rdzv_slice t = {NULL, 0};

  c->resume_wait = false;
  c->resume->where = RDZV__REQ_DETACHED;
  if (status == 0) {
    c->resumes++;
    return;
  }
  if (m != NULL)
    (void)rdzv_items_get(&m->keys, 0, &t);
  rdzv__set_error(c, "session not resumed at %s: %s%s%.*s", rdzv__target_str(c),
                  rdzv_strerror(status), t.n > 0 ? ": " : "",
                  (int)(t.n < 300 ? t.n : 300),
                  t.n > 0 ? (const char *)t.p : "");
  resume_free(c);
  l = c->queue;
  memset(&c->queue, 0, sizeof(c->queue));
  rdzv__finish_all(c, &l, status);
}

/* ---- completion --------------------------------------------------------- */

/* Fills the scratch arrays from m's item lists. */
static int scratch_fill(struct rdzv_client *c, const struct rdzv_msg *m,
                        struct rdzv_result *res) {
  size_t need = (size_t)m->keys.n + m->vals.n;
  struct rdzv_bytes *s;
  struct rdzv_slice sl;
  size_t pos;
  size_t i;

  if (need == 0)
    return 0;
  if (need > c->scratch_cap) {
    s = realloc(c->scratch, need * sizeof(*s));
    if (s == NULL)
      return RDZV_ENOMEM;
    c->scratch = s;
    c->scratch_cap = need;
  }
  for (i = 0, pos = 0; i < m->keys.n && rdzv_items_next(&m->keys, &pos, &sl);
       i++)
    c->scratch[i] = (struct rdzv_bytes){sl.p, sl.n};
  res->nkeys = i;
  res->keys = c->scratch;
  for (i = 0, pos = 0; i < m->vals.n && rdzv_items_next(&m->vals, &pos, &sl);
       i++)
    c->scratch[res->nkeys + i] = (struct rdzv_bytes){sl.p, sl.n};
  res->nvals = i;
  res->vals = c->scratch + res->nkeys;
  return 0;
}

void rdzv__req_finish(struct rdzv_client *c, struct rdzv__req *r,
                      const struct rdzv_msg *m, int status) {
  struct rdzv_result res;

  if (r->where == RDZV__REQ_SENT) {
    rdzv__list_remove(&c->sent, r);
    rdzv__tab_del(c, r->id);
  } else if (r->where == RDZV__REQ_QUEUED) {
    rdzv__list_remove(&c->queue, r);
  }
  if (r == c->resume) {
    resume_done(c, m, status);
    return;
  }
  rdzv__heap_remove(c, r);
  memset(&res, 0, sizeof(res));
  res.status = status;
  if (m != NULL) {
    res.flags = m->flags;
    res.a = m->a;
    res.b = m->b;
    if (scratch_fill(c, m, &res) < 0) {
      memset(&res, 0, sizeof(res));
      res.status = RDZV_ENOMEM;
    }
  }
  c->in_cb++;
  r->cb(c, &res, r->arg);
  c->in_cb--;
  rdzv_buf_free(&r->frame);
  free(r);
}

void rdzv__finish_all(struct rdzv_client *c, struct rdzv__req_list *l,
                      int status) {
  struct rdzv__req *r;

  while (l->head != NULL) {
    r = l->head;
    rdzv__list_remove(l, r);
    r->where = RDZV__REQ_DETACHED;
    rdzv__req_finish(c, r, NULL, status);
  }
}

/* Whether a request changes the store: one that was sent and got no
 * answer may have been applied, or may still be. */
static int mutates(int op) {
  return op == RDZV_OP_SET || op == RDZV_OP_ADD || op == RDZV_OP_CAS ||
         op == RDZV_OP_DELETE || op == RDZV_OP_MSET || op == RDZV_OP_APPEND;
}

/* A request whose deadline passed. WAIT and MGET report every key as
 * missing: which of them exist is the server's to know. */
static void req_expire(struct rdzv_client *c, struct rdzv__req *r) {
  struct rdzv_msg m;
  size_t used;
  const char *op = rdzv_msg_type_name(r->op);

  if (c->state == RDZV__CS_READY || r->where == RDZV__REQ_SENT)
    rdzv__set_error(c,
                    "%s: no reply from %s within %.3g s (from the daemon "
                    "there or one above it)%s",
                    op, rdzv__target_str(c), r->timeout_s,
                    mutates(r->op) ? "; the request was sent: its outcome is "
                                     "unknown (it may have been applied)"
                                   : "");
  else if (c->conn_err[0] != '\0')
    rdzv__set_error(c, "%s: deadline of %.3g s passed while not connected: %s",
                    op, r->timeout_s, c->conn_err);
  else
    rdzv__set_error(c, "%s: deadline of %.3g s passed while connecting to %s",
                    op, r->timeout_s, rdzv__target_str(c));
  if ((r->op == RDZV_OP_WAIT || r->op == RDZV_OP_MGET) &&
      rdzv_msg_decode(r->frame.data, r->frame.len, UINT32_MAX, &m, &used) ==
          0) {
    m.flags = 0;
    m.a = 0;
    m.b = 0;
    m.vals.n = 0;
    m.vals.raw_len = 0;
    rdzv__req_finish(c, r, &m, RDZV_EDEADLINE);
    return;
  }
  rdzv__req_finish(c, r, NULL, RDZV_EDEADLINE);
}

/* The server enforces the deadline of a WAIT (and of a JOIN) too, and its
 * answer says exactly what is missing, so such a request that the server
 * holds gets a short grace (250 ms plus 10% of its timeout, at most 2 s)
 * for that answer before the client gives up on its own and can only say
 * "no reply". */
static int grant_wait_grace(struct rdzv_client *c, struct rdzv__req *r) {
  if ((r->op != RDZV_OP_WAIT && r->op != RDZV_OP_JOIN) ||
      r->where != RDZV__REQ_SENT || r->graced)
    return 0;
  double g = 0.25 + r->timeout_s * 0.1;
  r->graced = 1;
  rdzv__heap_remove(c, r);
  r->deadline += (int64_t)((g < 2.0 ? g : 2.0) * 1e9);
  return rdzv__heap_push(c, r) == 0;
}

static void expire_due(struct rdzv_client *c, int64_t now) {
  while (c->heap_n > 0 && c->heap[0]->deadline <= now)
    if (!grant_wait_grace(c, c->heap[0]))
      req_expire(c, c->heap[0]);
}

/* ---- drivers ------------------------------------------------------------ */

int rdzv_client_process(rdzv_client_t *c) {
  struct rdzv__req_list l;

  CHECK_HANDLE(c);
  if (c->in_cb > 0)
    return RDZV_EWOULDBLOCK_CB;
  rdzv__conn_step(c, rdzv__now_ns());
  expire_due(c, rdzv__now_ns());
  if (c->state == RDZV__CS_FAILED && c->queue.n > 0) {
    l = c->queue;
    memset(&c->queue, 0, sizeof(c->queue));
    rdzv__finish_all(c, &l, c->fatal);
  }
  return 0;
}

/* Waits in poll() for the handle's socket or timer, at most until
 * deadline. */
static void poll_once(struct rdzv_client *c, int64_t deadline) {
  struct pollfd p;
  int t = rdzv_client_timeout_ms(c);
  int64_t left = deadline - rdzv__now_ns();
  int64_t left_ms;

  if (deadline != RDZV__NO_DEADLINE) {
    left_ms = left <= 0 ? 0 : (left + 999999) / 1000000;
    if (left_ms > INT_MAX)
      left_ms = INT_MAX;
    if (t < 0 || left_ms < t)
      t = (int)left_ms;
  }
  p.fd = c->fd;
  p.events = rdzv_client_events(c);
  p.revents = 0;
  if (p.fd < 0 && t < 0)
    t = 1000; /* cannot happen while work is pending; never sleep forever */
  if (p.fd >= 0)
    poll(&p, 1, t);
  else
    poll(NULL, 0, t);
}

int rdzv__client_drive(struct rdzv_client *c,
                       int (*done)(struct rdzv_client *, void *), void *arg,
                       int64_t deadline) {
  for (;;) {
    rdzv_client_process(c);
    if (done(c, arg))
      return 0;
    if (rdzv__now_ns() >= deadline)
      return RDZV_EDEADLINE;
    poll_once(c, deadline);
  }
}

static int none_pending(struct rdzv_client *c, void *arg) {
  (void)arg;
  return c->queue.n + c->sent.n == 0;
}

int rdzv_client_run(rdzv_client_t *c, double timeout_s) {
  CHECK_HANDLE(c);
  if (c->in_cb > 0)
    return RDZV_EWOULDBLOCK_CB;
  if (isnan(timeout_s))
    return -EINVAL;
  return rdzv__client_drive(c, none_pending, NULL,
                            rdzv__deadline_after(rdzv__now_ns(), timeout_s));
}

static int connect_settled(struct rdzv_client *c, void *arg) {
  (void)arg;
  return c->state == RDZV__CS_READY || c->state == RDZV__CS_FAILED ||
         c->hard_err != 0;
}

int rdzv_client_connect(rdzv_client_t *c, double timeout_s) {
  int64_t start = rdzv__now_ns();
  int err;

  CHECK_HANDLE(c);
  if (c->in_cb > 0)
    return RDZV_EWOULDBLOCK_CB;
  if (isnan(timeout_s))
    return -EINVAL;
  c->hard_err = 0;
  c->want_conn++;
  err = rdzv__client_drive(c, connect_settled, NULL,
                           rdzv__deadline_after(start, timeout_s));
  c->want_conn--;
  if (c->state == RDZV__CS_READY)
    return 0;
  if (c->state == RDZV__CS_FAILED)
    return c->fatal;
  if (c->hard_err != 0)
    return c->hard_err;
  if (c->conn_err[0] != '\0')
    rdzv__set_error(c, "%s", c->conn_err);
  else
    rdzv__set_error(c, "connect %s: no connection within %.3g s (state %s)",
                    rdzv__target_str(c), (double)(rdzv__now_ns() - start) / 1e9,
                    rdzv__conn_state_name(c->state));
  return err;
}
