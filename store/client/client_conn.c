/* librdzv: the established connection to the server: the hello's reply
 * (accepted, refused, a standby's redirect, the authentication's answer),
 * frames in and their dispatch, reads and writes (over TLS through
 * client_tls.c), requests moved from the queue to the socket, heartbeats,
 * a lost connection's requests sent again, and rdzv__conn_step, which
 * drives the state machine of client_connect.c (where the states and
 * their transitions are written down). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/auth/auth.h"
#include "store/client/client_int.h"

/* Stop moving queued requests into the output buffer past this size: the
 * rest stay queued (and so can be re-sent after a reconnect). */
#define OUT_HIGH_WATER (256u << 10)
/* The read buffer starts small and doubles while a frame needs more, and
 * is released when empty: a process may hold thousands of handles. */
#define READ_CHUNK (4u << 10)
/* Reads per step, so that a chatty server cannot starve timers. */
#define MAX_READS 64

/* ---- an established connection ------------------------------------------ */

static void hello_refused(struct rdzv_client *c, int status,
                          const char *detail) {
  struct rdzv__req_list l;

  if (status == 0)
    status = RDZV_EHELLO;
  if (c->target != 0 || status == RDZV_ENOT_LEADER) {
    /* A standby root that does not know the leader yet (an election is
     * under way) is tried again, like a daemon that is not up yet. */
    /* A fallback that will not take us is just one that failed. */
    char what[300];
    snprintf(what, sizeof(what), "hello refused: %s%s%s", rdzv_strerror(status),
             detail[0] != '\0' ? ": " : "", detail);
    rdzv__conn_attempt_failed(c, rdzv__now_ns(), ECONNREFUSED, what);
    return;
  }
  rdzv__conn_close(c);
  c->fatal = status;
  rdzv__set_error(c, "hello refused by %s: %s%s%s", rdzv__target_str(c),
                  rdzv_strerror(status), detail[0] != '\0' ? ": " : "", detail);
  rdzv__conn_to_state(c, RDZV__CS_FAILED, rdzv_err_name(status));
  l = c->queue;
  memset(&c->queue, 0, sizeof(c->queue));
  rdzv__finish_all(c, &l, status);
}

/* How often r may be sent again after lost connections: reads and waits
 * (safe to repeat) far more than the rest. */
static unsigned max_resends(const struct rdzv__req *r) {
  return rdzv__op_is_read(r->op) ? RDZV__MAX_READ_RESENDS : RDZV__MAX_RESENDS;
}

/* Ends the connection, keeping the session: every request in flight
 * goes back to the front of the queue, in order (a sent one counts a
 * resend), except one already sent max_resends times, or any when not
 * resend, which go to *fail; the session's resume request is detached
 * (the next connection sends it first). */
static void conn_drop(struct rdzv_client *c, int64_t now, int resend,
                      struct rdzv__req_list *fail) {
  struct rdzv__req *r;

  while (c->sent.tail != NULL) {
    r = c->sent.tail;
    rdzv__list_remove(&c->sent, r);
    if (r == c->resume) {
      r->where = RDZV__REQ_DETACHED;
    } else if (r->end_off <= c->sent_total &&
               (!resend || r->resends >= max_resends(r))) {
      rdzv__list_push_front(fail, r);
    } else {
      if (r->end_off <= c->sent_total)
        r->resends++;
      r->where = RDZV__REQ_QUEUED;
      rdzv__list_push_front(&c->queue, r);
    }
  }
  rdzv__tab_clear(c);
  rdzv__conn_close(c);
  c->resume_wait = false;
  c->lost_once = true; /* the session is resumed first on the next one */
  c->attempts = 0;
  c->first_attempt = now;
}

/* The connection ended (status for the requests in flight; what for
 * last_error). In HELLO_SENT this is just a failed attempt. In READY,
 * every request in flight goes back to the front of the queue, in order,
 * to be sent on the next connection (reads and waits are idempotent,
 * mutations carry op ids that the root applies once, joins and
 * contributions carry claims and member ids), except one already sent
 * max_resends(r) times, or any when a silent daemon has no fallback
 * (RDZV_ESILENT), which complete with status. The session's
 * resume request is not re-queued: the next connection sends it first. A
 * rank (use_fallbacks) moves on to the next daemon of its chain. */
static void conn_lost(struct rdzv_client *c, int status, const char *what) {
  struct rdzv__req_list fail = {0};
  int64_t now = rdzv__now_ns();
  int resend;

  if (c->state != RDZV__CS_READY && status == RDZV_ECONN_CLOSED) {
    rdzv__conn_attempt_failed(c, now, ECONNRESET, what);
    return;
  }
  if (c->state != RDZV__CS_READY) {
    /* Garbage or another protocol version instead of a hello reply: the
     * peer is not a server we can talk to, and retrying will not change
     * that. */
    hello_refused(c, status, what);
    return;
  }
  /* A daemon gone silent is stopped or wedged, and stays so as a rule:
   * without another daemon to go to, its requests fail now, naming it,
   * rather than wait for it until their deadlines. */
  resend = status != RDZV_ESILENT || (c->use_fallbacks && c->nfb > 0);
  rdzv__set_error(c, "%s: %s", rdzv__target_str(c), what);
  conn_drop(c, now, resend, &fail);
  (void)rdzv__conn_target_next(c);
  if (rdzv__conn_wanted(c))
    rdzv__conn_backoff_start(c, now, what);
  else
    rdzv__conn_to_state(c, RDZV__CS_IDLE, what);
  rdzv__finish_all(c, &fail, status);
}

void rdzv__conn_move(struct rdzv_client *c, int64_t now, int target,
                     const char *why) {
  struct rdzv__req_list fail = {0};

  conn_drop(c, now, 1, &fail);
  c->target = target;
  rdzv__conn_to_state(c, RDZV__CS_IDLE, why);
  rdzv__finish_all(c, &fail, RDZV_ECONN_CLOSED);
}

/* The hello reply's vals: the daemon's chain of ancestors, nearest first
 * (store/wire/wire.h), kept as this handle's fallbacks when it came from
 * addr itself. Entries that do not parse are skipped. */
static void fallbacks_take(struct rdzv_client *c, const struct rdzv_msg *m) {
  struct rdzv_slice v;
  size_t pos = 0;
  char s[320];

  if (c->target != 0)
    return;
  while (c->nfb > 0) {
    c->nfb--;
    free(c->fb[c->nfb].host);
    free(c->fb_str[c->nfb]);
  }
  while (c->nfb < RDZV__MAX_FALLBACKS && rdzv_items_next(&m->vals, &pos, &v)) {
    if (v.n == 0 || v.n >= sizeof(s) || memchr(v.p, '\0', v.n) != NULL)
      continue;
    memcpy(s, v.p, v.n);
    s[v.n] = '\0';
    if (rdzv__parse_addr(s, &c->fb[c->nfb]) < 0)
      continue;
    if ((c->fb_str[c->nfb] = strdup(s)) == NULL) {
      free(c->fb[c->nfb].host);
      break;
    }
    c->nfb++;
  }
}

/* The hello reply's keys[0]: the daemon's own liveness timeout (ms, u32
 * LE). A shorter one than ours is taken for this connection (with a
 * heartbeat of at most a quarter of it): a rank must notice a stopped
 * node as soon as the node's parent does, so that its session is resumed
 * elsewhere within the parent's --session-grace-ms. */
static void liveness_take(struct rdzv_client *c, const struct rdzv_msg *m) {
  struct rdzv_slice k;
  int64_t ns;

  c->heartbeat_ns = c->heartbeat_cfg_ns;
  c->liveness_ns = c->liveness_cfg_ns;
  if (c->liveness_cfg_ns == RDZV__NO_DEADLINE ||
      rdzv_items_get(&m->keys, 0, &k) < 0 || k.n != 4)
    return;
  ns = (int64_t)((uint32_t)k.p[0] | (uint32_t)k.p[1] << 8 |
                 (uint32_t)k.p[2] << 16 | (uint32_t)k.p[3] << 24) *
       1000000;
  if (ns <= 0 || ns >= c->liveness_ns)
    return;
  c->liveness_ns = ns;
  if (c->heartbeat_ns > ns / 4)
    c->heartbeat_ns = ns / 4 > 0 ? ns / 4 : 1;
}

static void hello_accepted(struct rdzv_client *c, const struct rdzv_msg *m) {
  c->redirects = 0;
  fallbacks_take(c, m);
  liveness_take(c, m);
  if (c->resume != NULL && c->lost_once &&
      c->resume->where == RDZV__REQ_DETACHED) {
    c->resume->where = RDZV__REQ_QUEUED;
    rdzv__list_push_front(&c->queue, c->resume);
  }
  c->lost_once = false;
  c->last_rx = rdzv__now_ns();
  c->last_ping = c->last_rx;
  c->attempts = 0;
  c->backoff_cur = c->backoff_initial;
  c->timer = RDZV__NO_DEADLINE;
  c->conn_err[0] = '\0';
  rdzv__conn_to_state(c, RDZV__CS_READY, NULL);
  rdzv__home_arrived(c, c->last_rx);
}

/* Text of an ERROR frame's keys[0], if any, made printable. */
static void error_text(const struct rdzv_msg *m, char *buf, size_t n) {
  struct rdzv_slice s;
  size_t i;

  buf[0] = '\0';
  if (rdzv_items_get(&m->keys, 0, &s) < 0)
    return;
  for (i = 0; i < s.n && i + 1 < n; i++)
    buf[i] = s.p[i] >= 0x20 && s.p[i] < 0x7f ? (char)s.p[i] : '?';
  buf[i] = '\0';
}

/* A standby root of an etcd-backed service refused the hello naming its
 * leader (vals[0]): the leader becomes this handle's address and is tried
 * at once. At most 8 times between two accepted hellos (standbys that
 * disagree must not make a client spin). 1 when followed. */
static int follow_leader(struct rdzv_client *c, const struct rdzv_msg *m) {
  struct rdzv_slice v;
  struct rdzv__addr a;
  char s[320];
  char *str;

  if (rdzv_items_get(&m->vals, 0, &v) < 0 || v.n == 0 || v.n >= sizeof(s) ||
      memchr(v.p, '\0', v.n) != NULL || c->redirects >= 8)
    return 0;
  memcpy(s, v.p, v.n);
  s[v.n] = '\0';
  if (strcmp(s, rdzv__target_str(c)) == 0)
    return 0;
  memset(&a, 0, sizeof(a));
  if (rdzv__parse_addr(s, &a) < 0)
    return 0;
  if ((str = strdup(s)) == NULL) {
    free(a.host);
    return 0;
  }
  if (c->debug)
    fprintf(stderr, "rdzv client %s: a standby root; its leader is %s\n",
            rdzv__target_str(c), s);
  rdzv__conn_close(c);
  if (!c->redirected) { /* kept, to go back to */
    c->home = c->addr;
    c->home_str = c->addr_str;
    c->redirected = true;
  } else {
    free(c->addr.host);
    free(c->addr_str);
  }
  c->addr = a;
  c->addr_str = str;
  c->target = 0;
  c->redirects++;
  rdzv__conn_round_start(c, rdzv__now_ns());
  return 1;
}

/* A challenge (the hello reply with RDZV_F_CHALLENGE): checks the
 * daemon's proof of the job's secret, then sends this handle's own
 * (RDZV_MSG_AUTH), whose reply stands for the hello's. Returns 1 if the
 * connection was closed. */
static int auth_answer(struct rdzv_client *c, const struct rdzv_msg *m) {
  struct rdzv_slice sn, proof, pv;
  uint8_t want[RDZV_AUTH_PROOF_BYTES], mine[RDZV_AUTH_PROOF_BYTES];
  const uint8_t *job = (const uint8_t *)c->job_id;
  size_t jn = strlen(c->job_id), before;
  uint16_t port;
  struct rdzv_msg a;
  char what[800];

  if (c->secret == NULL) {
    snprintf(what, sizeof(what),
             "daemon %s asks for job %s's secret and this client has none "
             "(set RDZV_SECRET_FILE)",
             rdzv__target_str(c), c->job_id);
    hello_refused(c, RDZV_EAUTH, what);
    return 1;
  }
  if (c->auth_sent || rdzv_items_get(&m->vals, 0, &sn) < 0 ||
      rdzv_items_get(&m->vals, 1, &proof) < 0 || m->vals.n != 2 ||
      sn.n != RDZV_AUTH_NONCE_BYTES || proof.n != RDZV_AUTH_PROOF_BYTES) {
    snprintf(what, sizeof(what), "daemon %s sent a malformed challenge",
             rdzv__target_str(c));
    hello_refused(c, RDZV_EAUTH, what);
    return 1;
  }
  /* The daemon's port as this handle dialed it (0: a Unix socket): the
   * proofs are bound to it (store/auth/auth.h). */
  {
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    port = 0;
    if (getpeername(c->fd, (struct sockaddr *)&sa, &salen) == 0)
      port = rdzv_auth_port_of(&sa);
  }
  if (rdzv_auth_proof(c->secret, c->secret_len, RDZV_AUTH_SERVER, job, jn, port,
                      c->cnonce, sn.p, want) < 0 ||
      !rdzv_auth_equal(want, proof.p, sizeof(want))) {
    snprintf(what, sizeof(what),
             "daemon %s could not prove job %s's secret as this client "
             "holds it (%s): the two differ (a wrong file, another job's), "
             "or it is not this job's daemon",
             rdzv__target_str(c), c->job_id, c->secret_src);
    hello_refused(c, RDZV_EAUTH, what);
    return 1;
  }
  rdzv_auth_proof(c->secret, c->secret_len, RDZV_AUTH_CLIENT, job, jn, port,
                  c->cnonce, sn.p, mine);
  memset(&a, 0, sizeof(a));
  a.type = RDZV_MSG_AUTH;
  pv = (struct rdzv_slice){mine, sizeof(mine)};
  a.vals.n = 1;
  a.vals.v = &pv;
  before = c->out.len;
  if (rdzv_msg_encode(&a, &c->out) < 0) {
    rdzv__conn_attempt_failed(c, rdzv__now_ns(), ENOBUFS,
                              "out of memory encoding the hello's proof");
    return 1;
  }
  c->out_total += c->out.len - before;
  c->auth_sent = true;
  return 0;
}

/* Handles one decoded frame. Returns 1 if the connection was closed. */
static int dispatch(struct rdzv_client *c, const struct rdzv_msg *m) {
  struct rdzv__req *r;
  char text[256];
  char what[320];

  if (m->type == RDZV_MSG_ERROR) {
    error_text(m, text, sizeof(text));
    if (c->state == RDZV__CS_HELLO_SENT) {
      hello_refused(c, m->status, text);
      return 1;
    }
    snprintf(what, sizeof(what), "server error %s%s%s",
             rdzv_err_name(m->status), text[0] != '\0' ? ": " : "", text);
    /* The request that broke the rule (req_id != 0) gets the server's
     * status; the others were merely on the same connection. */
    r = m->req_id != 0 ? rdzv__tab_find(c, m->req_id) : NULL;
    if (r != NULL) {
      rdzv__set_error(c, "%s", what);
      rdzv__req_finish(c, r, NULL, m->status != 0 ? m->status : RDZV_EPROTO);
      conn_lost(c, RDZV_ECONN_CLOSED, what);
      return 1;
    }
    conn_lost(c, m->status != 0 ? m->status : RDZV_EPROTO, what);
    return 1;
  }
  /* In HELLO_SENT only the hello's reply, then (after a challenge) the
   * proof's. */
  if ((m->flags & RDZV_F_REPLY) == 0 ||
      (m->type == RDZV_MSG_HELLO || m->type == RDZV_MSG_AUTH) !=
          (c->state == RDZV__CS_HELLO_SENT) ||
      (c->state == RDZV__CS_HELLO_SENT &&
       m->type != (c->auth_sent ? RDZV_MSG_AUTH : RDZV_MSG_HELLO))) {
    snprintf(what, sizeof(what), "unexpected %s frame from the server",
             rdzv_msg_type_name(m->type));
    conn_lost(c, RDZV_EPROTO, what);
    return 1;
  }
  if (c->state == RDZV__CS_HELLO_SENT) {
    if (m->type == RDZV_MSG_HELLO && (m->flags & RDZV_F_CHALLENGE) &&
        m->status == 0)
      return auth_answer(c, m);
    if (m->status == RDZV_ENOT_LEADER && follow_leader(c, m))
      return 1;
    if (m->status != 0) {
      error_text(m, text, sizeof(text));
      hello_refused(c, m->status, text);
      return 1;
    }
    if (c->secret != NULL && !c->auth_sent) {
      /* A daemon that asks for no secret cannot prove it holds the job's:
       * it is not to be trusted with the job (a fake node or root). */
      snprintf(what, sizeof(what),
               "daemon %s asked for no proof of job %s's secret (it runs "
               "without --secret-file), and this client holds one: not "
               "trusted",
               rdzv__target_str(c), c->job_id);
      hello_refused(c, RDZV_EAUTH, what);
      return 1;
    }
    hello_accepted(c, m);
    return 0;
  }
  r = rdzv__tab_find(c, m->req_id);
  if (r == NULL)
    return 0; /* its deadline passed: the late reply is dropped */
  if (r->op != m->type) {
    snprintf(what, sizeof(what), "reply of type %s to a %s request",
             rdzv_msg_type_name(m->type), rdzv_msg_type_name(r->op));
    conn_lost(c, RDZV_EPROTO, what);
    return 1;
  }
  rdzv__req_finish(c, r, m, m->status);
  return 0;
}

/* Decodes and dispatches every whole frame in `in`. Returns 1 if the
 * connection was closed. */
static int frames_handle(struct rdzv_client *c) {
  struct rdzv_msg m;
  size_t off = 0;
  size_t used;
  char what[128];
  int err;

  for (;;) {
    err = rdzv_msg_decode(c->in.data + off, c->in.len - off, c->max_frame, &m,
                          &used);
    if (err == RDZV_ENEEDMORE)
      break;
    if (err < 0) {
      if (err == RDZV_EFRAME_TOO_BIG)
        snprintf(what, sizeof(what),
                 "frame from the server larger than max_frame_bytes (%u)",
                 c->max_frame);
      else
        snprintf(what, sizeof(what), "bad frame from the server: %s",
                 rdzv_strerror(err));
      conn_lost(c, err, what);
      return 1;
    }
    off += used;
    if (dispatch(c, &m))
      return 1;
  }
  rdzv_buf_consume(&c->in, off);
  return 0;
}

/* Reads what the socket has. Returns 1 if the connection was closed. */
static int conn_read(struct rdzv_client *c) {
  ssize_t n;
  int i;

  for (i = 0; i < MAX_READS; i++) {
    if (c->tls != NULL) {
      char what[RDZV_TLS_ERR_MAX + 200];
      n = rdzv__ctls_recv(c, what, sizeof(what));
      if (n == -2 && c->state == RDZV__CS_HELLO_SENT) {
        hello_refused(c, RDZV_ETLS, what); /* no use trying again */
        return 1;
      }
      if (n < -1) {
        conn_lost(c, n == -2 ? RDZV_ETLS : RDZV_ENOMEM, what);
        return 1;
      }
    } else {
      if (rdzv_buf_reserve(&c->in,
                           c->in.len > READ_CHUNK ? c->in.len : READ_CHUNK) < 0)
        return 0; /* try again later; nothing is lost */
      n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
      if (n > 0)
        c->in.len += (size_t)n;
    }
    if (n > 0) {
      c->last_rx = rdzv__now_ns();
      if (frames_handle(c))
        return 1;
      if (c->in.len == 0)
        rdzv_buf_free(&c->in);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    conn_lost(c, RDZV_ECONN_CLOSED,
              n == 0 ? "connection closed by the server"
                     : rdzv_strerror(-errno));
    return 1;
  }
  return 0;
}

/* Writes what the kernel takes. Returns 1 if the connection was closed. */
static int conn_flush(struct rdzv_client *c) {
  struct rdzv_buf *src = &c->out; /* over TLS: its ciphertext */
  size_t off = 0;
  ssize_t n;
  int err;

  if (c->tls != NULL) {
    err = rdzv__ctls_seal(c);
    if (err < 0) {
      conn_lost(c, err,
                err == RDZV_ETLS ? rdzv_tls_error(c->tls)
                                 : "out of memory sealing");
      return 1;
    }
    src = &c->cipher;
  }
  while (off < src->len) {
    n = send(c->fd, src->data + off, src->len - off, MSG_NOSIGNAL);
    if (n >= 0) {
      off += (size_t)n;
      if (src == &c->out)
        c->sent_total += (uint64_t)n;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      break;
    err = errno;
    rdzv_buf_consume(src, off);
    conn_lost(c, RDZV_ECONN_CLOSED, rdzv_strerror(-err));
    return 1;
  }
  rdzv_buf_consume(src, off);
  if (src->len == 0)
    rdzv_buf_free(src);
  return 0;
}

/* READY: moves queued requests into the output buffer. A WAIT carries its
 * remaining time (frame bytes 20..27 are the body's `a`, see wire.h), so a
 * re-sent WAIT does not outlive its caller on the server. */
static void pump(struct rdzv_client *c, int64_t now) {
  struct rdzv__req *r;
  int64_t ms;

  while (c->queue.head != NULL && c->out.len < OUT_HIGH_WATER &&
         !c->resume_wait) {
    r = c->queue.head;
    if (r->op == RDZV_OP_WAIT && r->deadline != RDZV__NO_DEADLINE) {
      ms = r->deadline > now ? (r->deadline - now + 999999) / 1000000 : 0;
      if (ms > INT32_MAX)
        ms = INT32_MAX;
      rdzv_store_u64le(r->frame.data + RDZV_WIRE_HEADER_BYTES + 4,
                       (uint64_t)ms);
    }
    if (rdzv__tab_put(c, r) < 0 ||
        rdzv_buf_append(&c->out, r->frame.data, r->frame.len) < 0) {
      rdzv__tab_del(c, r->id);
      rdzv__req_finish(c, r, NULL, RDZV_ENOMEM);
      continue;
    }
    rdzv__list_remove(&c->queue, r);
    r->where = RDZV__REQ_SENT;
    if (c->sent.n == 0) {
      /* Silence while nothing was asked is no sign of a stopped daemon
       * (nor is a caller that did not drive us): the liveness clock
       * starts with the first request in flight. */
      c->last_rx = now;
      c->last_ping = now;
    }
    rdzv__list_push_back(&c->sent, r);
    c->out_total += r->frame.len;
    r->end_off = c->out_total;
    if (r == c->resume)
      c->resume_wait = true; /* the rest waits for the session's answer */
  }
}

int64_t rdzv__conn_heartbeat_due(const struct rdzv_client *c) {
  int64_t ping, lost;

  /* A rank with a session pings even while idle (when its caller drives
   * the core), so that a stopped node is left for its parent within the
   * parent's --session-grace-ms. */
  if (c->state != RDZV__CS_READY || (c->sent.n == 0 && c->resume == NULL) ||
      c->liveness_ns == RDZV__NO_DEADLINE)
    return RDZV__NO_DEADLINE;
  ping =
      (c->last_rx > c->last_ping ? c->last_rx : c->last_ping) + c->heartbeat_ns;
  lost = c->last_rx + c->liveness_ns;
  return ping < lost ? ping : lost;
}

/* READY, requests awaiting replies (or a session set): a daemon silent
 * for the liveness
 * timeout is lost (returns 1: the connection was closed); one silent for
 * a heartbeat is pinged (its reply matches no request and is dropped; it
 * only refreshes last_rx). */
static int heartbeat(struct rdzv_client *c, int64_t now) {
  struct rdzv_msg m;
  char what[200];
  size_t before;

  if (rdzv__conn_heartbeat_due(c) > now)
    return 0;
  if (now - c->last_rx >= c->liveness_ns) {
    snprintf(what, sizeof(what),
             "the daemon sent nothing for %.3g s (liveness_timeout_s), not "
             "even a heartbeat reply: %s",
             (double)(now - c->last_rx) / 1e9, rdzv_strerror(RDZV_ESILENT));
    conn_lost(c, RDZV_ESILENT, what);
    return 1;
  }
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_PING;
  do
    m.req_id = c->next_id++;
  while (m.req_id == 0 || rdzv__tab_find(c, m.req_id) != NULL);
  before = c->out.len;
  if (rdzv_msg_encode(&m, &c->out) == 0)
    c->out_total += c->out.len - before;
  c->last_ping = now;
  return 0;
}

static void conn_io(struct rdzv_client *c, int64_t now) {
  if (conn_flush(c) || conn_read(c))
    return;
  if (c->state == RDZV__CS_HELLO_SENT && now >= c->timer) {
    rdzv__conn_attempt_failed(c, now, ETIMEDOUT, "no hello reply");
    return;
  }
  if (c->state != RDZV__CS_READY)
    return;
  pump(c, now);
  if (heartbeat(c, now))
    return;
  conn_flush(c);
}

void rdzv__conn_step(struct rdzv_client *c, int64_t now) {
  if (c->state == RDZV__CS_READY && c->last_step != 0 &&
      c->liveness_ns != RDZV__NO_DEADLINE &&
      now - c->last_step > c->liveness_ns / 2) {
    /* The caller did not drive us for half the liveness timeout (our own
     * poll loop wakes at every heartbeat), so pings did not go out: the
     * daemon's silence meanwhile proves nothing. The clock restarts, a
     * ping due now. */
    c->last_rx = now - c->heartbeat_ns;
    c->last_ping = c->last_rx;
  }
  c->last_step = now;
  switch (c->state) {
  case RDZV__CS_IDLE:
    if (rdzv__conn_wanted(c))
      rdzv__conn_round_start(c, now);
    break;
  case RDZV__CS_BACKOFF:
    if (now < c->timer)
      break;
    if (rdzv__conn_wanted(c))
      rdzv__conn_round_start(c, now);
    else
      rdzv__conn_to_state(c, RDZV__CS_IDLE, "nothing to send");
    break;
  case RDZV__CS_CONNECTING:
    rdzv__conn_connect_check(c, now);
    break;
  case RDZV__CS_HELLO_SENT:
  case RDZV__CS_READY:
    conn_io(c, now);
    break;
  case RDZV__CS_FAILED:
    break;
  }
  /* Away from its node: a probe of it (in any state, so that a probe in
   * flight ends with the connection it was made from). */
  rdzv__home_tick(c, now);
  /* A connect that finished at once (Unix sockets do) sends its hello
   * now rather than after another poll. */
  if (c->state == RDZV__CS_HELLO_SENT && (c->out.len > 0 || c->tls != NULL))
    conn_flush(c);
}
