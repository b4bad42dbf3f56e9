/* rdzvd transport: a connection's life (references, close, the linger
 * of a refused one) and its read path (framing, request validation and
 * limits, the daemon's own requests, then the role's handle hook). What
 * it queues goes through conn_send.c and is written by flush.c; the
 * hello, its admission and authentication are hello.c's, TLS
 * conn_tls.c's. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/auth/auth.h"
#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

static const char *const state_names[] = {"HELLO_WAIT", "AUTH_WAIT", "READY",
                                          "CLOSING",    "REFUSED",   "CLOSED"};

void rdzv__conn_set_state(struct conn *c, enum conn_state s) {
  rdzv__log(c->d, 2, "conn %s: %s -> %s", c->name, state_names[c->state],
            state_names[s]);
  c->state = s;
}

/* ---- connection lifetime ------------------------------------------------------ */

void rdzv__conn_ref(struct conn *c) { c->refs++; }

void rdzv__conn_auth_free(struct conn *c) {
  if (c->auth == NULL)
    return;
  rdzv_buf_free(&c->auth->hello);
  free(c->auth);
  c->auth = NULL;
}

static void conn_free(struct conn *c) {
  rdzv__conn_auth_free(c);
  rdzv_tls_free(c->tls);
  rdzv_buf_free(&c->in);
  rdzv__outq_release(&c->out);
  free(c);
}

void rdzv__conn_unref(struct conn *c) {
  if (--c->refs == 0)
    conn_free(c);
}

bool rdzv__conn_alive(const struct conn *c) { return c->state == CONN_READY; }

bool rdzv__conn_on_unix_socket(const struct conn *c) {
  return !c->tcp && !c->inproc;
}

void rdzv__conn_on_timer_freed(uv_handle_t *h) { free(h); }

static void on_timer_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  free(h);
  rdzv__conn_unref(c);
}

static void on_conn_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  uv_timer_t *t = c->timer;
  c->timer = NULL;
  if (t != NULL)
    uv_close((uv_handle_t *)t, on_timer_closed);
  else
    rdzv__conn_unref(c); /* the handles' reference */
}

void rdzv__conn_close_now(struct conn *c) {
  if (c->state == CONN_CLOSED)
    return;
  if (c->inproc) {
    struct daemon *d = c->d;
    rdzv__conn_set_state(c, CONN_CLOSED);
    TAILQ_REMOVE(&d->conns, c, link);
    rdzv__conn_unlist(c);
    d->nconns--;
    d->stats.conns_open--;
    /* What it held goes as for a socket peer (a TCPStore client that
     * hangs up in a WAIT must not keep it for its 24-day timeout). */
    if (!d->stopping && c->job != NULL && c->job->role_data != NULL)
      d->role->conn_closed(d, c);
    rdzv__job_detach(c);
    rdzv__conn_unref(c);
    return;
  }
  struct daemon *d = c->d;
  if (c->auth != NULL) {
    /* Challenged, and gone without a proof: a peer that found this
     * daemon could not prove its secret (another secret), or a prober. */
    char peer[96], jb[128] = "?";
    struct rdzv_msg h;
    struct rdzv_slice job = {NULL, 0};
    size_t used = 0;
    if (rdzv_msg_decode(c->auth->hello.data, c->auth->hello.len, UINT32_MAX, &h,
                        &used) == 0 &&
        rdzv_items_get(&h.keys, 0, &job) == 0)
      rdzv__conn_printable(&job, jb, sizeof(jb));
    d->stats.auth_refused++;
    rdzv__conn_peer_desc(c, peer, sizeof(peer));
    rdzv__log_auth(d,
                   "conn %s from %s (job %s): closed after the challenge, "
                   "without a proof (its secret differs, or it has none)",
                   c->name, peer, jb);
    rdzv__conn_auth_free(c);
  }
  rdzv__conn_set_state(c, CONN_CLOSED);
  TAILQ_REMOVE(&d->conns, c, link);
  rdzv__conn_unlist(c); /* frames not yet persisted are dropped with it */
  d->nconns--;
  d->stats.conns_open--;
  if (!d->stopping && c->job != NULL && c->job->role_data != NULL)
    d->role->conn_closed(d, c);
  rdzv__job_detach(c);
  /* Pending operations may hold c a while longer: nothing more is
   * written or read, so its buffers go now (a write in flight keeps its
   * own bytes and blobs; the input goes at the end of decode_frames when
   * a frame being handled may still point into it). */
  rdzv__outq_release(&c->out);
  if (!c->decoding)
    rdzv_buf_free(&c->in);
  /* Two handles (stream, timer) each hold the conn until closed; the
   * stream's close callback closes the timer (if it still has one), whose
   * callback drops the handle reference taken at accept. */
  uv_close(&c->h.handle, on_conn_closed);
}

/* A refused peer's bytes are read and dropped; its hang-up (or a read
 * error) closes the connection. */
static void on_linger_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct conn *c = s->data;
  (void)buf;
  if (nread < 0)
    rdzv__conn_close_now(c);
}

static void on_linger_timeout(uv_timer_t *t) { rdzv__conn_close_now(t->data); }

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* The longest a refused connection stays open for its peer to read the
 * refusal (less when --hello-timeout-ms is): a client reads it at once. */
#define REFUSE_LINGER_MAX_MS 1000

/* The ERROR frame goes at once, but the connection stays open until the
 * peer hangs up (or REFUSE_LINGER_MAX_MS): a client writes its hello right
 * after connect(), and one whose write came after a close would see
 * EPIPE, not the refusal. What it sends meanwhile is dropped unread. */
void rdzv__conn_refuse(struct conn *c, int status, const char *text) {
  if (c->state != CONN_HELLO_WAIT || c->inproc)
    return;
  rdzv__conn_fail_sent(c, 0, status, text, CONN_REFUSED);
  if (c->state != CONN_REFUSED)
    return; /* the write failed: closed already */
  uv_read_start(&c->h.stream, on_alloc, on_linger_read);
  if (c->timer != NULL) {
    c->timer->data = c;
    uint64_t ms = c->d->cfg.hello_timeout_ms < REFUSE_LINGER_MAX_MS
                      ? c->d->cfg.hello_timeout_ms
                      : REFUSE_LINGER_MAX_MS;
    uv_timer_start(c->timer, on_linger_timeout, ms, 0);
  }
}

/* ---- read path --------------------------------------------------------------- */

/* A child node pings every --heartbeat-ms: one silent for
 * --liveness-timeout-ms is stopped, wedged or cut off (its TCP connection
 * may look healthy for minutes). Closing it withdraws what it carried, as
 * for a child that died. */
void rdzv__conn_on_child_check(uv_timer_t *t) {
  struct conn *c = t->data;
  struct daemon *d = c->d;
  uint64_t now = uv_now(d->loop);
  if (now - c->last_check_ms > 2 * c->check_every_ms + 100)
    c->last_rx_ms = now; /* this daemon did not run: the child's pings may
                            wait unread; it gets a full timeout again */
  c->last_check_ms = now;
  uint64_t silent = now - c->last_rx_ms;
  if (c->state != CONN_READY || silent < d->cfg.liveness_timeout_ms)
    return;
  d->stats.children_silent++;
  rdzv__log_event_job(d, c->job != NULL ? c->job->id : NULL,
                      "child node %s silent for %" PRIu64
                      " ms (--liveness-timeout-ms %u): closing its connection",
                      c->name, silent, d->cfg.liveness_timeout_ms);
  char text[400];
  snprintf(text, sizeof(text),
           "daemon %s heard nothing from %s for %" PRIu64 " ms: declared lost",
           d->cfg.name, c->name, silent);
  rdzv__conn_fail(c, RDZV_ESILENT, text);
}

/* Whether c's peer is on another host: a TCP peer whose address is
 * neither loopback nor the connection's own local address (what it sees
 * as "127.0.0.1:P" or unix:PATH is its own host's). */
bool rdzv__conn_peer_remote(struct conn *c) {
  struct sockaddr_storage peer, self;
  int plen = sizeof(peer), slen = sizeof(self);
  if (!c->tcp ||
      uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&peer, &plen) != 0 ||
      uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&self, &slen) != 0)
    return false;
  if (peer.ss_family == AF_INET && self.ss_family == AF_INET) {
    uint32_t pa = ((struct sockaddr_in *)&peer)->sin_addr.s_addr;
    uint32_t sa = ((struct sockaddr_in *)&self)->sin_addr.s_addr;
    return (ntohl(pa) >> 24) != 127 && pa != sa;
  }
  if (peer.ss_family == AF_INET6 && self.ss_family == AF_INET6) {
    const struct in6_addr *pa = &((struct sockaddr_in6 *)&peer)->sin6_addr;
    const struct in6_addr *sa = &((struct sockaddr_in6 *)&self)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(pa) || memcmp(pa, sa, sizeof(*pa)) == 0)
      return false;
    if (IN6_IS_ADDR_V4MAPPED(pa))
      return pa->s6_addr[12] != 127;
    return true;
  }
  return false;
}

/* An address that means this host only (unix:, loopback, localhost). */
bool rdzv__conn_addr_local(const char *a) {
  if (strncmp(a, "unix:", 5) == 0)
    return true;
  if (strncmp(a, "tcp:", 4) == 0)
    a += 4;
  return strncmp(a, "127.", 4) == 0 || strncmp(a, "localhost:", 10) == 0 ||
         strncmp(a, "[::1]:", 6) == 0;
}

static void reply_ungated(struct conn *c, struct rdzv_msg *r) {
  r->flags |= RDZV_F_REPLY;
  if (c->outstanding > 0)
    c->outstanding--;
  rdzv__conn_send_ungated(c, r);
}

void rdzv__conn_handle_frame(struct conn *c, const struct rdzv_msg *m) {
  struct daemon *d = c->d;
  d->stats.frames_in++;
  if (c->state == CONN_AUTH_WAIT) {
    d->stats.ops[RDZV_MSG_AUTH].received++;
    rdzv__conn_handle_auth(c, m);
    return;
  }
  if (c->state == CONN_HELLO_WAIT) {
    d->stats.ops[RDZV_MSG_HELLO].received++;
    rdzv__conn_handle_hello(c, m);
    return;
  }
  int rc = rdzv_msg_validate_request(m, &d->limits);
  if (rc < 0) {
    char text[96];
    snprintf(text, sizeof(text), "%s request rejected",
             rdzv_msg_type_name(m->type));
    rdzv__conn_fail_req(c, m->req_id, rc, text);
    return;
  }
  if (m->type == RDZV_MSG_HELLO || m->type == RDZV_MSG_AUTH) {
    rdzv__conn_fail(c, RDZV_EPROTO,
                    m->type == RDZV_MSG_HELLO
                        ? "a second hello"
                        : "an auth frame after the hello");
    return;
  }
  if (++c->outstanding > d->cfg.max_outstanding) {
    rdzv__conn_fail_req(c, m->req_id, RDZV_ETOO_MANY_REQUESTS,
                        "over --max-outstanding requests");
    return;
  }
  d->stats.ops[m->type].received++;
  if (m->type == RDZV_MSG_STATS) { /* the daemon's, not a job's */
    d->stats.ops[m->type].local++;
    rdzv__reply_stats(c, m);
    return;
  }
  if (m->type == RDZV_MSG_TS_SPACE) { /* this daemon's, not the tree's */
    d->stats.ops[m->type].local++;
    if (d->ts_space != NULL) {
      d->ts_space(d->ts_space_arg, c, m);
    } else {
      rdzv__conn_reply_textf(c, m, RDZV_EBAD_ROLE,
                             "daemon %s serves no "
                             "TCPStore key spaces (--tcpstore-spaces 0, or "
                             "an etcd-backed root)",
                             d->cfg.name);
    }
    return;
  }
  if (m->type == RDZV_MSG_PING) { /* liveness: no job state */
    struct rdzv_msg r;
    d->stats.ops[m->type].local++;
    rdzv__reply_init(&r, m, 0);
    if (d->role->ping != NULL && c->role == RDZV_ROLE_NODE && c->job != NULL)
      d->role->ping(d, c, &r);
    if (d->gate != NULL && !c->inproc)
      reply_ungated(c, &r); /* depends on nothing a gate holds */
    else
      rdzv__conn_reply(c, &r);
    return;
  }
  d->role->handle(d, c, m);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct conn *c = h->data;
  (void)suggested;
  if (c->tls != NULL) {
    rdzv__conn_tls_alloc(c, buf);
    return;
  }
  if (rdzv_buf_reserve(&c->in, c->in.len > READ_MIN ? c->in.len : READ_MIN) <
      0) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = (char *)c->in.data + c->in.len;
  buf->len = c->in.cap - c->in.len;
}

static void decode_frames(struct conn *c) {
  struct daemon *d = c->d;
  size_t off = 0;
  /* A reference keeps c valid while handlers run, even if one closes it. */
  rdzv__conn_ref(c);
  c->decoding = true;
  while (c->state == CONN_HELLO_WAIT || c->state == CONN_AUTH_WAIT ||
         c->state == CONN_READY) {
    struct rdzv_msg m;
    size_t used = 0;
    /* Until the hello is admitted (the hello, and its proof), a peer is
     * nobody: it gets --max-hello-bytes of this daemon's memory, not
     * --max-frame-bytes until --hello-timeout-ms. */
    bool before = c->state != CONN_READY;
    uint32_t limit = before && d->cfg.max_hello_bytes < d->cfg.max_frame_bytes
                         ? d->cfg.max_hello_bytes
                         : d->cfg.max_frame_bytes;
    int rc =
        rdzv_msg_decode(c->in.data + off, c->in.len - off, limit, &m, &used);
    if (rc == RDZV_ENEEDMORE)
      break;
    if (rc < 0) {
      bool tls = before && c->tcp && off == 0 && c->in.len > 0 &&
                 c->in.data[0] == RDZV_TLS_HANDSHAKE_BYTE;
      rdzv__conn_fail(c, rc,
                      tls ? "a TLS handshake on a plain port (this daemon "
                            "runs without --tls-*)"
                      : rc == RDZV_EFRAME_TOO_BIG && before
                          ? "a frame before the hello was admitted over "
                            "--max-hello-bytes"
                          : "undecodable frame");
      break;
    }
    if (m.flags & RDZV_F_REPLY) {
      rdzv__conn_fail(c, RDZV_EPROTO, "a reply frame sent as a request");
      break;
    }
    rdzv__conn_handle_frame(c, &m);
    off += used;
  }
  c->decoding = false;
  if (c->state != CONN_CLOSED)
    rdzv_buf_consume(&c->in, off);
  if (c->in.len == 0 || c->state == CONN_CLOSED)
    rdzv_buf_free(&c->in); /* idle or closed connections hold no buffer */
  rdzv__conn_unref(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct conn *c = s->data;
  (void)buf;
  if (nread < 0) {
    if (nread != UV_EOF)
      rdzv__log(c->d, 2, "conn %s: read: %s", c->name, uv_strerror((int)nread));
    rdzv__conn_close_now(c);
    return;
  }
  if (nread == 0)
    return;
  c->d->stats.bytes_in += (uint64_t)nread;
  c->last_rx_ms = uv_now(c->d->loop);
  if (c->tls != NULL) {
    if (!rdzv__conn_tls_in(c, (size_t)nread))
      return;
  } else {
    c->in.len += (size_t)nread;
  }
  decode_frames(c);
}

static void on_hello_timeout(uv_timer_t *t) {
  struct conn *c = t->data;
  rdzv__conn_fail(c, RDZV_EHELLO, "no hello before --hello-timeout-ms");
}

void rdzv__conn_start_reading(struct conn *c) {
  uv_timer_start(c->timer, on_hello_timeout, c->d->cfg.hello_timeout_ms, 0);
  uv_read_start(&c->h.stream, on_alloc, on_read);
}
