/* The bridge of the PyTorch c10d TCPStore front end of rdzvd (see
 * tcpstore.c for the listener and the connections): each parsed TCPStore
 * request becomes an rdzv request sent over the connection's in-process
 * connection to the daemon, in the order below, and each rdzv reply
 * becomes the TCPStore reply. This file owns the parsing of what a
 * connection read, the mapping both ways, the pending requests and their
 * order, and the work a reply leaves for later (a BARRIER's second step, a
 * close, reading again). It may call tcpstore.c through tcpstore_int.h
 * (rdzv__ts_flush, rdzv__ts_close, rdzv__ts_read_more), the transport's
 * in-process connections, and the codec of store/wire/tcpstore_wire.h.
 *
 * Mapping (TCPStore semantics: torch/csrc/distributed/c10d/TCPStore.cpp
 * and TCPStoreBackend.cpp, summarised in docs/pytorch.md):
 *   SET, APPEND, MULTI_SET  -> SET, APPEND, MSET; no reply;
 *   GET                     -> GET; a missing key answers an empty blob
 *                              (as TCPStore's libuv server does);
 *   ADD                     -> ADD; the new value as i64;
 *   CHECK                   -> MGET; READY when every key exists;
 *   WAIT                    -> WAIT with no practical deadline (TCPStore
 *                              servers never time out a wait); after
 *                              CANCEL_WAIT its late answer is dropped;
 *   COMPARE_SET             -> CAS; the value now stored; an absent key
 *                              with a non-empty expected value answers
 *                              the expected value (TCPStore does);
 *   GETNUMKEYS, DELETE_KEY  -> NKEYS, DELETE; i64;
 *   MULTI_GET               -> MGET; the blobs in order;
 *   LIST_KEYS (>= 2.10)     -> KEYS; i64 count, then each key as a string
 *                              (every key of the job: the client keeps
 *                              those that start with "/");
 *   BARRIER (>= 2.11)       -> ADD 1 on the key (the decimal counter
 *                              TCPStore keeps there), giving n; past the
 *                              world size W (n > W, or W < 1) 0x00 at
 *                              once, else rdzv's own BARRIER named by the
 *                              key, member n-1 of W, combined up the tree
 *                              like any barrier, and 0x00 when it
 *                              completes; like a WAIT it holds nothing
 *                              back, and CANCEL_WAIT drops its answer (the
 *                              contribution stays, as the counter's
 *                              increment does in PyTorch's server). A
 *                              completed barrier stays completed: a key
 *                              deleted and used again releases at once;
 *   PING, VALIDATE          -> answered here (echo; nothing);
 *   QUEUE_PUSH/POP/LEN      -> not served (closed): the tree has no FIFO
 *                              with an atomic pop, nor a wait that a push
 *                              ends for one waiter (docs/pytorch.md).
 * Any failure (unknown opcode, limits, an error answer such as a
 * non-numeric ADD) closes that connection only, the protocol's only way
 * to report one. Idle connections are never closed (a torch 1.13 client
 * keeps a silent second connection, and busy-loops if it is closed).
 *
 * Order. A connection's requests take effect, and are answered, in the
 * order they were sent, even when a client sends several at once: the
 * tree may answer out of order (a node holds adds to combine them, and
 * answers some requests itself), so a request with a reply waits until
 * everything before it is answered, and nothing goes after it until it
 * is. Writes without a reply (SET, APPEND, MULTI_SET) follow each other
 * at once: they travel the same ordered link. Torch clients wait for each
 * reply anyway, so this costs them nothing. A pending WAIT holds nothing
 * back: a client sends something else only once it stopped waiting (2.x
 * with CANCEL_WAIT, whose answer drops the WAIT's; 1.13 sends nothing and
 * gets the WAIT's late answer, as from PyTorch's own server). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/daemon/tcpstore/tcpstore_int.h"
#include "store/daemon/transport/transport.h"
#include "store/wire/tcpstore_wire.h"

/* A TCPStore WAIT becomes an rdzv WAIT with this timeout (ms): none in
 * practice, as TCPStore's own servers never time out a wait. */
#define TS_WAIT_FOREVER_MS ((int64_t)INT32_MAX)
/* Bytes read behind a request held back for order (see the header)
 * before reading pauses. Reading goes on below it: a torch client's SET
 * and ADD arrive together and the ADD waits for the SET, and stopping and
 * starting the read for that cost two epoll_ctl calls per request (4 of
 * the 18 system calls per rank of PyTorch's init pattern). */
#define TS_HELD_READ_MAX (64 * 1024)

static void defer(struct ts_conn *t);

/* ---- writing replies ------------------------------------------------------ */

/* A blob reply (u64 length, then the bytes) of the value v of reply r: a
 * big one written from the buffer that holds it in the daemon (a node's
 * cache, the root's table), not copied per connection. */
static int put_value(struct ts_conn *t, struct rdzv_slice v) {
  struct daemon *d = t->srv->d;
  struct rdzv_blob *b = NULL;
  if (v.n >= d->cfg.share_min_bytes && v.n > 0 && t->in != NULL)
    b = rdzv_daemon_inproc_blob(t->in, v.p, v.n);
  if (b == NULL) {
    if (v.n >= d->cfg.share_min_bytes && v.n > 0)
      d->stats.bytes_copied_large += v.n;
    return rdzv_ts_put_blob(&t->out.buf, v.p, v.n);
  }
  int rc = rdzv_ts_put_i64(&t->out.buf, (int64_t)v.n);
  if (rc == 0)
    rc = rdzv__outq_ref(&t->out, b, v.p, v.n);
  rdzv__blob_unref(b);
  return rc;
}

/* ---- replies from the daemon ---------------------------------------------- */

/* Writes without a reply to the client. */
static bool is_write(enum rdzv_ts_op op) {
  return op == RDZV_TS_SET || op == RDZV_TS_APPEND || op == RDZV_TS_MULTI_SET;
}

/* Whether q may be handled now without breaking the connection's order
 * (see the header comment). */
static bool may_go(const struct ts_conn *t, enum rdzv_ts_op op) {
  if (is_write(op))
    return t->nblocking == 0;
  return t->nblocking == 0 && t->nwrites == 0;
}

/* Requests whose pending answer holds later ones back (a client sends
 * nothing after a WAIT or a BARRIER until it is answered, or it cancels
 * it with CANCEL_WAIT). */
static bool blocks(enum rdzv_ts_op op) {
  return !is_write(op) && op != RDZV_TS_WAIT && op != RDZV_TS_BARRIER;
}

/* Appends p to t's pending requests. */
static void pending_add(struct ts_conn *t, struct ts_pending *p) {
  p->next = NULL;
  if (t->pending_tail != NULL)
    t->pending_tail->next = p;
  else
    t->pending = p;
  t->pending_tail = p;
  t->npending++;
  if (is_write(p->op))
    t->nwrites++;
  else if (blocks(p->op))
    t->nblocking++;
}

static struct ts_pending *pending_take(struct ts_conn *t, uint32_t req_id) {
  struct ts_pending **pp = &t->pending, *prev = NULL;
  for (; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
    struct ts_pending *p = *pp;
    if (p->req_id != req_id)
      continue;
    *pp = p->next;
    if (t->pending_tail == p)
      t->pending_tail = prev;
    t->npending--;
    if (is_write(p->op))
      t->nwrites--;
    else if (blocks(p->op))
      t->nblocking--;
    return p;
  }
  return NULL;
}

void rdzv__ts_pending_free(struct ts_pending *p) {
  rdzv_buf_free(&p->arg);
  free(p);
}

/* translate(): p goes on to a next step (a BARRIER's rdzv BARRIER). */
#define TS_NEXT_STEP 1

/* The TCPStore reply to an rdzv reply r of request p. Returns 0,
 * TS_NEXT_STEP, or a status that closes the connection. */
static int translate(struct ts_conn *t, const struct ts_pending *p,
                     const struct rdzv_msg *r) {
  struct rdzv_buf *o = &t->out.buf;
  struct rdzv_slice v;
  size_t pos = 0;
  int rc = 0;

  switch (p->op) {
  case RDZV_TS_SET:
  case RDZV_TS_APPEND:
  case RDZV_TS_MULTI_SET:
    return r->status; /* no reply; a failure closes */
  case RDZV_TS_GET:
    if (r->status == RDZV_ENOKEY)
      return rdzv_ts_put_blob(o, NULL, 0);
    if (r->status < 0)
      return r->status;
    if (rdzv_items_get(&r->vals, 0, &v) < 0)
      return RDZV_EPROTO;
    return put_value(t, v);
  case RDZV_TS_ADD:
  case RDZV_TS_GETNUMKEYS:
  case RDZV_TS_DELETE_KEY:
    return r->status < 0 ? r->status : rdzv_ts_put_i64(o, r->a);
  case RDZV_TS_CHECK:
    if (r->status == RDZV_ENOKEY)
      return rdzv_ts_put_u8(o, RDZV_TS_NOT_READY);
    return r->status < 0 ? r->status : rdzv_ts_put_u8(o, RDZV_TS_READY);
  case RDZV_TS_WAIT:
    if (p->cancelled)
      return 0;
    return r->status < 0 ? r->status : rdzv_ts_put_u8(o, RDZV_TS_STOP_WAITING);
  case RDZV_TS_COMPARE_SET:
    if (r->status < 0 && r->status != RDZV_ECAS_FAILED)
      return r->status;
    if (rdzv_items_get(&r->vals, 0, &v) < 0)
      v.n = 0;
    if (r->status == RDZV_ECAS_FAILED && v.n == 0 && p->arg.len > 0)
      return rdzv_ts_put_blob(o, p->arg.data, p->arg.len);
    return rdzv_ts_put_blob(o, v.p, v.n);
  case RDZV_TS_MULTI_GET:
    if (r->status < 0)
      return r->status;
    while (rc == 0 && rdzv_items_next(&r->vals, &pos, &v))
      rc = put_value(t, v);
    return rc;
  case RDZV_TS_LIST_KEYS: {
    if (r->status < 0)
      return r->status;
    uint32_t pl = t->srv->plen; /* KEYS named only keys under the prefix */
    rc = rdzv_ts_put_i64(o, (int64_t)r->keys.n);
    while (rc == 0 && rdzv_items_next(&r->keys, &pos, &v))
      rc = v.n < pl ? RDZV_EPROTO : rdzv_ts_put_blob(o, v.p + pl, v.n - pl);
    return rc;
  }
  case RDZV_TS_BARRIER:
    if (r->status < 0)
      return r->status;
    if (p->stage == 0) { /* the ADD: r->a callers arrived, this one too */
      if (p->world >= 1 && r->a <= p->world) {
        if (r->a < 1)
          return RDZV_ENOT_NUMBER; /* a counter someone set below 1 */
        return TS_NEXT_STEP;
      }
    }
    return p->cancelled ? 0 : rdzv_ts_put_u8(o, RDZV_TS_STOP_WAITING);
  default:
    return RDZV_EPROTO;
  }
}

static int send_frame(struct ts_conn *t, struct ts_pending *p,
                      struct rdzv_msg *m);

/* The second step of t's BARRIERs whose ADD answered: rdzv's BARRIER
 * named by the key, this caller's member id, of the world size. Returns
 * 0, or a status that closes the connection. */
static int send_due_barriers(struct ts_conn *t) {
  t->barrier_due = false;
  for (;;) {
    /* From the head each time: an answer may come back inside a send
     * and free what follows. */
    struct ts_pending *p = t->pending;
    while (p != NULL && !p->due)
      p = p->next;
    if (p == NULL)
      return 0;
    p->due = false;
    uint8_t id[8];
    rdzv_store_u64le(id, p->member);
    struct rdzv_slice name = {p->arg.data, (uint32_t)p->arg.len};
    struct rdzv_slice contrib = {id, sizeof(id)};
    struct rdzv_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_BARRIER;
    m.b = p->world;
    m.keys.n = 1;
    m.keys.v = &name;
    m.vals.n = 1;
    m.vals.v = &contrib;
    int rc = send_frame(t, p, &m);
    if (rc < 0)
      return rc;
    if (t->closing || t->close_due)
      return 0;
  }
}

/* t is to be closed (from on_deferred): what failed, and how. */
static void close_later(struct ts_conn *t, const char *what, int status) {
  t->broke_rule = true;
  t->close_due = true;
  t->close_what = what;
  t->close_status = status;
}

static void on_deferred(uv_idle_t *h) {
  struct ts_server *s = h->data;
  uv_idle_stop(h);
  struct ts_conn *t = s->conns, *next;
  for (; t != NULL; t = next) {
    next = t->next;
    if (!t->close_due && t->barrier_due) {
      int rc = send_due_barriers(t);
      if (rc < 0 && !t->close_due)
        close_later(t, "barrier", rc);
    }
    if (t->close_due) {
      char why[160];
      if (t->close_what != NULL)
        snprintf(why, sizeof(why), "%s failed: %s", t->close_what,
                 rdzv_strerror(t->close_status));
      else
        snprintf(why, sizeof(why), "%s", rdzv_strerror(t->close_status));
      rdzv__ts_close(t, why);
    } else if (t->resume_due) {
      t->resume_due = false;
      if (t->reading)
        rdzv__ts_parse_all(t); /* what was held back */
      else
        rdzv__ts_read_more(t); /* also handles what was held back */
    }
  }
}

/* Leaves work for on_deferred. */
static void defer(struct ts_conn *t) {
  uv_idle_start(&t->srv->deferred, on_deferred);
}

/* deliver() of the in-process connection: runs inside the daemon's
 * handlers, so it only writes to our socket; what would call the daemon
 * (closing, sending held requests) is deferred. */
void rdzv__ts_on_reply(void *arg, const struct rdzv_msg *r) {
  struct ts_conn *t = arg;
  if (t->closing || t->close_due)
    return;
  if (r->type == RDZV_MSG_ERROR) {
    close_later(t, NULL, r->status);
    defer(t);
    return;
  }
  struct ts_pending *p = pending_take(t, r->req_id);
  if (p == NULL)
    return;
  int rc = translate(t, p, r);
  if (rc == TS_NEXT_STEP) { /* sent from on_deferred */
    p->stage = 1;
    p->member = (uint64_t)(r->a - 1);
    p->req_id = 0;
    p->due = true;
    pending_add(t, p);
    t->barrier_due = true;
    defer(t);
    return;
  }
  if (rc < 0) {
    close_later(t, rdzv_ts_op_name(p->op), rc);
    rdzv__ts_pending_free(p);
    defer(t);
    return;
  }
  rdzv__ts_pending_free(p);
  rdzv__ts_flush(t);
  if ((!t->reading && t->npending <= t->srv->max_pending / 2) ||
      (t->reading && t->rbuf.len > 0)) { /* read, or parse, what waits */
    t->resume_due = true;
    defer(t);
  }
}

/* ---- requests to the daemon ----------------------------------------------- */

/* Sends m for p, which is pending already (the answer may come back
 * inside this call). */
static int send_frame(struct ts_conn *t, struct ts_pending *p,
                      struct rdzv_msg *m) {
  struct ts_server *s = t->srv;
  p->req_id = ++t->next_req;
  if (p->req_id == 0)
    p->req_id = ++t->next_req;
  m->req_id = p->req_id;
  s->frame.len = 0;
  int rc = rdzv_msg_encode(m, &s->frame);
  if (rc < 0)
    return rc; /* closes the connection, p with it */
  return rdzv_daemon_inproc_send(t->in, s->frame.data, s->frame.len);
}

/* Sends m for q, keeping what its reply needs (COMPARE_SET: the expected
 * value; BARRIER: the key and the world size). The reply may come back
 * inside this call. */
static int send_rdzv(struct ts_conn *t, const struct rdzv_ts_req *q,
                     struct rdzv_msg *m) {
  /* m's keys: the request's, or the prefixed copies of them. */
  struct ts_pending *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return RDZV_ENOMEM;
  p->op = q->op;
  if (q->op == RDZV_TS_COMPARE_SET && q->vals[0].n > 0 &&
      rdzv_buf_append(&p->arg, q->vals[0].p, q->vals[0].n) < 0) {
    free(p);
    return RDZV_ENOMEM;
  }
  if (q->op == RDZV_TS_BARRIER) {
    p->world = q->delta;
    if (rdzv_buf_append(&p->arg, m->keys.v[0].p, m->keys.v[0].n) < 0) {
      free(p);
      return RDZV_ENOMEM;
    }
  }
  /* Pending before sending: the answer may come back inside the call. */
  pending_add(t, p);
  return send_frame(t, p, m);
}

/* A key space's request: m names the prefixed keys (built in s->kbuf);
 * LIST_KEYS and GETNUMKEYS become KEYS of the prefix (its count is
 * GETNUMKEYS's answer). 0 or RDZV_ENOMEM. */
static int prefix_keys(struct ts_server *s, const struct rdzv_ts_req *q,
                       struct rdzv_msg *m) {
  if (q->op == RDZV_TS_LIST_KEYS || q->op == RDZV_TS_GETNUMKEYS) {
    m->type = RDZV_MSG_KEYS;
    s->pkeys[0] = (struct rdzv_slice){(const uint8_t *)s->prefix, s->plen};
    m->keys.n = 1;
    m->keys.v = s->pkeys;
    return 0;
  }
  s->kbuf.len = 0;
  for (uint32_t i = 0; i < q->nkeys; i++)
    if (rdzv_buf_append(&s->kbuf, s->prefix, s->plen) < 0 ||
        rdzv_buf_append(&s->kbuf, q->keys[i].p, q->keys[i].n) < 0)
      return RDZV_ENOMEM;
  size_t off = 0; /* slices once the buffer no longer moves */
  for (uint32_t i = 0; i < q->nkeys; i++) {
    uint32_t n = s->plen + q->keys[i].n;
    s->pkeys[i] = (struct rdzv_slice){s->kbuf.data + off, n};
    off += n;
  }
  m->keys.v = s->pkeys;
  return 0;
}

/* One parsed request. Returns 0, or a status that closes the
 * connection. */
static int handle(struct ts_conn *t, const struct rdzv_ts_req *q) {
  struct rdzv_msg m;
  struct ts_pending *p;
  memset(&m, 0, sizeof(m));
  m.keys.n = q->nkeys;
  m.keys.v = q->keys;
  m.vals.n = q->nvals;
  m.vals.v = q->vals;
  switch (q->op) {
  case RDZV_TS_VALIDATE:
    return 0;
  case RDZV_TS_PING:
    if (rdzv_ts_put_u32(&t->out.buf, q->u32) < 0)
      return RDZV_ENOMEM;
    rdzv__ts_flush(t);
    return 0;
  case RDZV_TS_CANCEL_WAIT:
    for (p = t->pending; p != NULL; p = p->next)
      if (p->op == RDZV_TS_WAIT || p->op == RDZV_TS_BARRIER)
        p->cancelled = true; /* its answer, if any, is dropped */
    if (rdzv_ts_put_u8(&t->out.buf, RDZV_TS_WAIT_CANCELED) < 0)
      return RDZV_ENOMEM;
    rdzv__ts_flush(t);
    return 0;
  case RDZV_TS_SET:
    m.type = RDZV_MSG_SET;
    break;
  case RDZV_TS_APPEND:
    m.type = RDZV_MSG_APPEND;
    break;
  case RDZV_TS_MULTI_SET:
    m.type = RDZV_MSG_MSET;
    break;
  case RDZV_TS_GET:
    m.type = RDZV_MSG_GET;
    break;
  case RDZV_TS_CHECK:
  case RDZV_TS_MULTI_GET:
    m.type = RDZV_MSG_MGET;
    break;
  case RDZV_TS_ADD:
    m.type = RDZV_MSG_ADD;
    m.a = q->delta;
    break;
  case RDZV_TS_WAIT:
    if (q->nkeys == 0) { /* nothing to wait for */
      if (rdzv_ts_put_u8(&t->out.buf, RDZV_TS_STOP_WAITING) < 0)
        return RDZV_ENOMEM;
      rdzv__ts_flush(t);
      return 0;
    }
    m.type = RDZV_MSG_WAIT;
    m.a = TS_WAIT_FOREVER_MS;
    break;
  case RDZV_TS_GETNUMKEYS:
    m.type = RDZV_MSG_NKEYS;
    break;
  case RDZV_TS_DELETE_KEY:
    m.type = RDZV_MSG_DELETE;
    break;
  case RDZV_TS_COMPARE_SET:
    m.type = RDZV_MSG_CAS;
    break;
  case RDZV_TS_LIST_KEYS:
    m.type = RDZV_MSG_KEYS;
    break;
  case RDZV_TS_BARRIER: /* the counter first (see the header) */
    m.type = RDZV_MSG_ADD;
    m.a = 1;
    break;
  default:
    return RDZV_EPROTO;
  }
  if ((q->op == RDZV_TS_CHECK || q->op == RDZV_TS_MULTI_GET) &&
      q->nkeys == 0) { /* MGET needs a key: answer here */
    int rc =
        q->op == RDZV_TS_CHECK ? rdzv_ts_put_u8(&t->out.buf, RDZV_TS_READY) : 0;
    rdzv__ts_flush(t);
    return rc;
  }
  if (q->op == RDZV_TS_MULTI_SET && q->nkeys == 0)
    return 0;
  if (t->srv->plen > 0) {
    int rc = prefix_keys(t->srv, q, &m);
    if (rc < 0)
      return rc;
  }
  return send_rdzv(t, q, &m);
}

/* ---- parsing -------------------------------------------------------------- */

void rdzv__ts_parse_all(struct ts_conn *t) {
  struct ts_server *s = t->srv;
  size_t off = 0;
  bool held = false;
  while (!t->closing && t->npending < s->max_pending) {
    struct rdzv_ts_req q;
    size_t used = 0;
    /* On a copy: a request held back is parsed again later. */
    struct rdzv_ts_parser ps = t->ps;
    int rc = rdzv_ts_parse(&ps, t->rbuf.data + off, t->rbuf.len - off, &s->lim,
                           s->keys, s->vals, TS_KEYS_CAP, &q, &used);
    if (rc == 0)
      break;
    if (rc < 0) {
      t->broke_rule = true;
      rdzv__ts_close(t, rdzv_strerror(rc));
      return;
    }
    if (q.op == RDZV_TS_QUEUE_PUSH || q.op == RDZV_TS_QUEUE_POP ||
        q.op == RDZV_TS_QUEUE_LEN) {
      char why[160];
      snprintf(why, sizeof(why),
               "%s: not served (PyTorch's queues need a "
               "FIFO the tree does not have; see docs/pytorch.md)",
               rdzv_ts_op_name(q.op));
      t->broke_rule = true;
      rdzv__ts_close(t, why);
      return;
    }
    if (!may_go(t, q.op)) {
      held = true; /* rdzv__ts_on_reply picks it up once the way is clear */
      break;
    }
    t->ps = ps;
    rc = handle(t, &q);
    if (rc < 0) {
      char why[160];
      snprintf(why, sizeof(why), "%s: %s", rdzv_ts_op_name(q.op),
               rdzv_strerror(rc));
      t->broke_rule = true;
      rdzv__ts_close(t, why);
      return;
    }
    off += used;
  }
  if (!t->closing)
    rdzv_buf_consume(&t->rbuf, off);
  if (!t->closing && t->rbuf.len == 0)
    rdzv_buf_free(&t->rbuf); /* nothing unparsed: an idle connection holds
                                no buffer (what was handled was copied) */
  if (!t->closing && t->reading &&
      ((held && t->rbuf.len >= TS_HELD_READ_MAX) ||
       t->npending >= s->max_pending)) {
    uv_read_stop((uv_stream_t *)&t->tcp);
    t->reading = false;
  }
}
