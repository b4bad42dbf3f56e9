/* A node's connection to its parent for one job: connect (with backoff and
 * jitter, names resolved asynchronously), hello as role NODE, then many
 * outstanding requests multiplexed by request id. Requests submitted while
 * not connected wait in a queue, at most --upstream-timeout-ms: then they
 * complete with RDZV_EUNREACHABLE and a text naming the parent and the
 * last failure. Requests in flight when the connection fails complete with
 * RDZV_ECONN_CLOSED, also naming the parent. Losing and regaining the
 * parent is logged at the default level.
 *
 * Liveness: every --heartbeat-ms a ready connection sends a PING (the
 * parent, hearing nothing for --liveness-timeout-ms, closes this node);
 * a parent from which nothing came for --liveness-timeout-ms while
 * connecting, in the hello or ready (a stopped or wedged daemon whose
 * kernel still holds the connection open) is lost as if the connection
 * had failed, and what was in flight fails with RDZV_ESILENT.
 *
 * Candidates. An address is resolved afresh for every round of attempts
 * (no answer is cached: a name that did not resolve, or resolved to a
 * dead pod, may be right a moment later), and a round tries every address
 * the resolver returned and, for HOST:FIRST-LAST, every port of the range
 * (addresses outer, ports inner), each attempt (connect and hello) with
 * its own --connect-timeout-ms. An attempt fails over to the next
 * candidate at once when the connection is refused, reset or silent, or
 * when the daemon there serves another job (RDZV_EJOB_MISMATCH: a shared
 * host whose ports of the range other jobs' daemons hold). Only when every
 * candidate failed does the round fail as a whole: then the next ancestor,
 * or the backoff. */
#include <errno.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <uthash.h>

#include "store/auth/auth.h"
#include "store/daemon/blob.h"
#include "store/daemon/node/node_int.h"
#include "store/daemon/node/upstream_int.h"

const char *const rdzv__up_state_names[] = {
    "IDLE", "RESOLVING", "CONNECTING", "HELLO", "READY", "BACKOFF", "CLOSED"};

static void on_expire(uv_timer_t *t);
static void on_backoff(uv_timer_t *t);
static void arm_expire(struct upstream *u);

/* The address in use: the parent, or an ancestor while reattached. */
const char *rdzv__up_addr(const struct upstream *u) {
  const char *a = u->addrs[u->addr_idx];
  return a != NULL ? a : "";
}

/* addrs[1..] from the ancestors the parent last told (daemon-wide). Out
 * of memory, the list ends before the ancestor it could not copy (fewer
 * places to reattach to, none wrong). */
void rdzv__up_refresh_ancestors(struct upstream *u) {
  if (u->probe) /* the probe asks the parent only */
    return;
  const struct daemon *d = u->d;
  uint32_t n = d->nancestors;
  for (uint32_t i = 0; i < n; i++) {
    char **a = &u->addrs[i + 1];
    if (*a == NULL || strcmp(*a, d->ancestors[i]) != 0 || i + 1 >= u->naddrs) {
      char *s = strdup(d->ancestors[i]);
      if (s == NULL) {
        n = i;
        break;
      }
      free(*a);
      *a = s;
      u->incs[i + 1] = 0;
    }
  }
  u->naddrs = 1 + n;
}

void rdzv__up_set_state(struct upstream *u, enum up_state s) {
  rdzv__log_job(u->d, 2, u->job_id, "upstream: %s -> %s",
                rdzv__up_state_names[u->state], rdzv__up_state_names[s]);
  u->state = s;
}

void rdzv__up_free_cands(struct upstream *u) {
  if (u->res != NULL)
    uv_freeaddrinfo(u->res);
  u->res = u->cand = NULL;
  u->next_cand = false;
}

void rdzv__up_unref(struct upstream *u) {
  if (--u->refs > 0)
    return;
  rdzv__up_free_cands(u);
  rdzv_buf_free(&u->out);
  rdzv_buf_free(&u->writing);
  rdzv_buf_free(&u->in);
  rdzv__up_tls_end(u);
  rdzv_buf_free(&u->cipher);
  for (size_t i = 0; i < sizeof(u->addrs) / sizeof(u->addrs[0]); i++)
    free(u->addrs[i]);
  free(u->job_id);
  free(u);
}

/* libuv's codes (errno, getaddrinfo) and ours: the text of either. */
static const char *err_text(int err) {
  return err <= -1000 && err > -2000 ? rdzv_strerror(err) : uv_strerror(err);
}

void rdzv__up_unqueue(struct upstream *u, struct upreq *r) {
  if (!r->queued)
    return;
  TAILQ_REMOVE(&u->queue, r, qlink);
  r->queued = false;
}

void rdzv__up_complete(struct upstream *u, struct upreq *r,
                       const struct rdzv_msg *reply) {
  rdzv__up_unqueue(u, r);
  HASH_DEL(u->reqs, r);
  TAILQ_REMOVE(&u->all, r, alink);
  upstream_cb cb = r->cb;
  void *arg = r->arg;
  rdzv_buf_free(&r->frame);
  free(r);
  if (cb != NULL)
    cb(u->d, reply, arg);
}

/* Completes r with a synthesized status and text (keys[0]; "" for
 * none). */
void rdzv__up_fail_one(struct upstream *u, struct upreq *r, int status,
                       const char *text) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.req_id = r->id;
  m.flags = RDZV_F_REPLY;
  m.status = status;
  m.keys.n = t.n > 0 ? 1 : 0;
  m.keys.v = &t;
  rdzv__up_complete(u, r, &m);
}

/* Completes every request (only those already sent, unless all) with a
 * synthesized status and text. */
static void fail_requests(struct upstream *u, int status, bool all,
                          const char *text) {
  struct upreq *r, *tmp;
  HASH_ITER (hh, u->reqs, r, tmp) {
    if (!r->sent && !all)
      continue;
    rdzv__up_fail_one(u, r, status, text);
  }
}

/* Fails the queued requests that have waited --upstream-timeout-ms (the
 * oldest first), then waits for the next one's turn. */
static void on_expire(uv_timer_t *t) {
  struct upstream *u = t->data;
  uint64_t now = uv_now(u->d->loop), limit = u->d->cfg.upstream_timeout_ms;
  char text[800], first[160];
  /* No round has failed yet: say which candidate the first one is at. */
  snprintf(first, sizeof(first),
           "not connected yet (%u of its addresses "
           "and ports tried; now %s)",
           u->ncands_tried, u->cand_text[0] ? u->cand_text : "resolving");
  snprintf(text, sizeof(text),
           "parent %s unreachable for %" PRIu64 " ms (node %s): %s",
           rdzv__up_addr(u), now - u->down_since_ms, u->d->cfg.name,
           u->why[0] ? u->why : first);
  /* One sent before (on a connection lost since) may have been applied. */
  char sent_text[900];
  snprintf(sent_text, sizeof(sent_text),
           "%s; it was sent before the connection was lost: its outcome is "
           "unknown",
           text);
  /* Not in time order (what a lost connection carried goes first, its
   * clock started at the loss), so every one is looked at. */
  struct upreq *r, *next;
  for (r = TAILQ_FIRST(&u->queue); r != NULL; r = next) {
    next = TAILQ_NEXT(r, qlink);
    if (r->queued_ms + limit > now)
      continue;
    if (r->tries > 0)
      rdzv__up_fail_one(u, r, u->loss_status, sent_text);
    else
      rdzv__up_fail_one(u, r, RDZV_EUNREACHABLE, text);
  }
  arm_expire(u);
}

/* The expiry timer at the queue's first deadline (none if it is empty). */
static void arm_expire(struct upstream *u) {
  uint64_t now = uv_now(u->d->loop), limit = u->d->cfg.upstream_timeout_ms;
  uint64_t first = UINT64_MAX;
  struct upreq *r;
  TAILQ_FOREACH (r, &u->queue, qlink)
    if (r->queued_ms < first)
      first = r->queued_ms;
  if (first == UINT64_MAX) {
    uv_timer_stop(&u->expire);
    return;
  }
  uv_timer_start(&u->expire, on_expire,
                 first + limit > now ? first + limit - now : 0, 0);
}

static void on_stream_closed(uv_handle_t *h) {
  struct upstream *u = h->data;
  u->closing = false;
  if (u->connect_after_close && u->state == UP_BACKOFF) {
    u->connect_after_close = false;
    rdzv__up_connect(u);
  }
  rdzv__up_unref(u);
}

/* The attempt's stream (if any) closes; its TLS session goes. */
static void close_stream(struct upstream *u) {
  rdzv__up_tls_end(u);
  if (!u->have_stream)
    return;
  u->have_stream = false;
  u->closing = true;
  u->refs++;
  uv_close(&u->h.handle, on_stream_closed);
}

/* The next attempt reuses the stream's memory: it waits until the closing
 * of the last one has completed (a reattachment is due at once, maybe in
 * the same loop iteration as that close). */
static void on_backoff(uv_timer_t *t) {
  struct upstream *u = t->data;
  if (u->closing) {
    u->connect_after_close = true;
    return;
  }
  rdzv__up_connect(u);
}

/* The connection failed (or never came up): fail what was in flight and
 * try again after a jittered, growing delay. */
void rdzv__up_reset(struct upstream *u, const char *why, int err) {
  if (u->state == UP_CLOSED)
    return;
  if (u->probe && u->probe_once) { /* one attempt, failed */
    rdzv__up_probe_end(u, false);
    return;
  }
  rdzv__up_home_stop(u);
  bool home = u->going_home, home_failed = u->home_hello && !home;
  u->going_home = false;
  u->home_hello = false;
  snprintf(u->why, sizeof(u->why), "%s: %s", why,
           err ? err_text(err) : "closed");
  if (home_failed) /* back to an ancestor, the next return later */
    rdzv__up_home_failed(u);
  if (home) {
    u->down_since_ms = uv_now(u->d->loop);
  } else if (u->state == UP_READY) {
    /* Losing the parent is news: said at the default level. */
    rdzv__log_job(u->d, 1, u->job_id, "lost the parent %s: %s",
                  rdzv__up_addr(u), u->why);
    u->down_since_ms = uv_now(u->d->loop);
  } else {
    rdzv__log_job(u->d, u->attempts % 50 == 1 ? 1 : 2, u->job_id,
                  "parent %s: %s (attempt %u)", rdzv__up_addr(u), u->why,
                  u->attempts);
  }
  close_stream(u);
  if (u->state == UP_READY)
    u->d->stats.upstream_reconnects++;
  rdzv__up_lease_end(u);
  /* Not READY before the failure callbacks run: what they send again
   * waits in the queue for the next connection, never in u->out ahead of
   * its hello. */
  rdzv__up_set_state(u, UP_BACKOFF);
  u->out.len = 0;
  u->in.len = 0;
  char text[800];
  snprintf(text, sizeof(text),
           "the connection of node %s to its parent %s "
           "failed: %s; the request's outcome is unknown",
           u->d->cfg.name, rdzv__up_addr(u), u->why);
  /* What was sent goes again on the next connection (in its order, before
   * what was queued meanwhile), up to MAX_RESENDS times (reads and waits
   * MAX_READ_RESENDS); the rest fail. A move home counts too (only reads
   * and waits are in flight then: upstream_home.c). */
  uint64_t now = uv_now(u->d->loop);
  struct upreq *r;
  struct upreq_queue keep;
  TAILQ_INIT(&keep);
  TAILQ_FOREACH (r, &u->all, alink) {
    if (!r->sent ||
        r->tries >= (rdzv__up_req_is_read(r) ? MAX_READ_RESENDS : MAX_RESENDS))
      continue;
    r->sent = false;
    r->tries++;
    r->queued = true;
    r->queued_ms = now;
    TAILQ_INSERT_TAIL(&keep, r, qlink);
    u->d->stats.resent++;
  }
  /* Those queued meanwhile keep their clocks: a parent that keeps
   * refusing fails them at --upstream-timeout-ms, however often the
   * node tries. */
  while ((r = TAILQ_FIRST(&u->queue)) != NULL) {
    TAILQ_REMOVE(&u->queue, r, qlink);
    TAILQ_INSERT_TAIL(&keep, r, qlink);
  }
  TAILQ_CONCAT(&u->queue, &keep, qlink);
  arm_expire(u);
  u->loss_status = err == RDZV_ESILENT ? RDZV_ESILENT : RDZV_ECONN_CLOSED;
  fail_requests(u, u->loss_status, false, text);
  /* The parent and every address of it refused this node's secret (or
   * could not prove it), and no ancestor is left to try: what waits fails
   * now with RDZV_EAUTH rather than at --upstream-timeout-ms as
   * "unreachable" (the node is tried again later all the same: a secret
   * put right, a parent restarted with the right one). */
  if (err == RDZV_EAUTH && u->redirect < 0 &&
      !(u->naddrs > 1 && u->addr_idx + 1 < u->naddrs)) {
    char at[900];
    snprintf(at, sizeof(at),
             "node %s and its parent %s do not share job %s's secret: %s "
             "(check the node's --secret-file and the parent's)",
             u->d->cfg.name, rdzv__up_addr(u), u->job_id, u->why);
    fail_requests(u, RDZV_EAUTH, true, at);
  }
  /* The next attempt goes to the next ancestor at once; after the last
   * one (the root), back to the node's own parent after a delay. A parent
   * that closed this node on purpose (an ERROR frame: it restarted above,
   * or declared this node lost) lives: it is asked again. */
  bool stay = u->stay;
  u->stay = false;
  if (home) { /* back to the parent, at once */
    u->addr_idx = 0;
    u->home_hello = true;
    u->redirect = -1;
    rdzv__up_refresh_ancestors(u);
    uv_timer_start(&u->timer, on_backoff, 0, 0);
    return;
  }
  if (u->redirect >= 0 && (uint32_t)u->redirect < u->naddrs) {
    u->addr_idx = (uint32_t)u->redirect;
    u->redirect = -1;
    rdzv__log_job(u->d, u->redirects < 2 ? 1 : 2, u->job_id,
                  "node %s goes to the leader root %s", u->d->cfg.name,
                  rdzv__up_addr(u));
    uint64_t delay = ++u->redirects > 2 ? u->backoff_ms : 0;
    uv_timer_start(&u->timer, on_backoff, delay, 0);
    if (delay > 0)
      u->backoff_ms = u->backoff_ms * 2 > 1000 ? 1000 : u->backoff_ms * 2;
    return;
  }
  if (!stay && u->naddrs > 1 && u->addr_idx + 1 < u->naddrs) {
    u->addr_idx++;
    rdzv__log_job(u->d, u->attempts % 50 == 1 ? 1 : 2, u->job_id,
                  "node %s reattaches to ancestor %s", u->d->cfg.name,
                  rdzv__up_addr(u));
    uv_timer_start(&u->timer, on_backoff, 0, 0);
    return;
  }
  if (!stay)
    u->addr_idx = 0;
  rdzv__up_refresh_ancestors(u);
  uint64_t b = u->backoff_ms;
  uint64_t jitter = b / 4 > 0 ? (uint64_t)rand() % (b / 2 + 1) : 0;
  uv_timer_start(&u->timer, on_backoff, b - b / 4 + jitter, 0);
  u->backoff_ms = b * 2 > 1000 ? 1000 : b * 2;
}

/* One attempt (one candidate) failed before the parent was ready: the
 * next candidate at once, else the round fails (up_reset). Nothing was
 * sent on the attempt but its hello, so nothing is failed or re-sent. */
void rdzv__up_attempt_failed(struct upstream *u, const char *why, int err) {
  char what[400];
  snprintf(what, sizeof(what), "%s %s", why, u->cand_text);
  bool skip_addr = u->state == UP_CONNECTING &&
                   (err == RDZV_EDEADLINE || err == UV_EHOSTUNREACH ||
                    err == UV_ENETUNREACH);
  /* Another job's daemon: one that says so, or (with secrets) one that
   * cannot prove this job's secret. */
  if (err == RDZV_EJOB_MISMATCH || err == RDZV_EAUTH)
    u->nother_job++;
  if ((u->state != UP_CONNECTING && u->state != UP_HELLO) ||
      !rdzv__up_cand_advance(u, skip_addr)) {
    if (u->ncands_tried > 1)
      snprintf(what, sizeof(what),
               "%s %s (the last of %u addresses and "
               "ports tried; %u of them served another job or could not prove "
               "its secret)",
               why, u->cand_text, u->ncands_tried, u->nother_job);
    rdzv__up_free_cands(u);
    rdzv__up_reset(u, u->cand_text[0] ? what : why, err);
    return;
  }
  rdzv__log_job(u->d, 2, u->job_id,
                "parent %s: %s: %s; trying the next of its "
                "addresses and ports",
                rdzv__up_addr(u), what, err ? err_text(err) : "closed");
  close_stream(u);
  rdzv__up_set_state(u, UP_BACKOFF);
  u->out.len = 0;
  u->in.len = 0;
  u->next_cand = true;
  uv_timer_start(&u->timer, on_backoff, 0, 0);
}

/* Every --heartbeat-ms: a parent silent past --liveness-timeout-ms is
 * lost; a ready one is pinged (its reply, matching no request, only
 * refreshes last_rx_ms). */
static void on_beat(uv_timer_t *t) {
  struct upstream *u = t->data;
  struct daemon *d = u->d;
  uint64_t now = uv_now(d->loop);
  uint64_t late = now - u->last_beat_ms;
  u->last_beat_ms = now; /* also while backing off: the timer ran */
  if (u->state != UP_CONNECTING && u->state != UP_HELLO && u->state != UP_READY)
    return;
  if (late > 2 * (uint64_t)d->cfg.heartbeat_ms) {
    /* This daemon did not run (stopped, starved): the parent's frames
     * may wait unread in the socket. It gets a full timeout again. */
    rdzv__log_event_job(d, u->job_id, "node %s did not run for %" PRIu64 " ms",
                        d->cfg.name, late);
    u->last_rx_ms = now;
  }
  uint64_t silent = now - u->last_rx_ms;
  if (silent >= d->cfg.liveness_timeout_ms) {
    char why[120];
    snprintf(why, sizeof(why),
             "nothing heard for %" PRIu64 " ms while %s "
             "(--liveness-timeout-ms %u)",
             silent,
             u->state == UP_READY   ? "ready"
             : u->state == UP_HELLO ? "waiting for the hello reply"
                                    : "connecting",
             d->cfg.liveness_timeout_ms);
    d->stats.parent_silent++;
    if (u->state == UP_READY)
      rdzv__up_reset(u, why, RDZV_ESILENT);
    else
      rdzv__up_attempt_failed(u, why, RDZV_ESILENT); /* the next candidate */
    return;
  }
  if (u->state != UP_READY)
    return;
  rdzv__up_send_ping(u);
}

static void on_write(uv_write_t *req, int status) {
  struct upstream *u = req->data;
  u->write_active = false;
  u->writing.len = 0;
  if (status < 0) {
    if (u->state == UP_HELLO)
      rdzv__up_attempt_failed(u, "write to", status);
    else if (u->state == UP_READY)
      rdzv__up_reset(u, "write", status);
  } else if (u->state == UP_READY || u->state == UP_HELLO)
    rdzv__up_start_write(u);
  rdzv__up_unref(u);
}

void rdzv__up_start_write(struct upstream *u) {
  if (u->write_active || !u->have_stream)
    return;
  struct rdzv_buf *src = &u->out; /* over TLS: its ciphertext */
  if (u->tls != NULL) {
    int rc = rdzv__up_tls_seal(u);
    if (rc < 0) {
      rdzv__up_tls_failed(u, rc);
      return;
    }
    src = &u->cipher;
  }
  if (src->len == 0)
    return;
  /* Straight to the socket first (no write request, no watcher update:
   * an epoll_ctl saved per forwarded request); what does not fit, or a
   * failure, goes through uv_write below as before. */
  uv_buf_t now = uv_buf_init((char *)src->data, (unsigned)src->len);
  int n = uv_try_write(&u->h.stream, &now, 1);
  if (n > 0) {
    u->d->stats.bytes_out += (uint64_t)n;
    rdzv_buf_consume(src, (size_t)n);
    if (src->len == 0)
      return;
  }
  struct rdzv_buf t = u->writing;
  u->writing = *src;
  *src = t;
  src->len = 0;
  uv_buf_t b = uv_buf_init((char *)u->writing.data, (unsigned)u->writing.len);
  u->wreq.data = u;
  if (uv_write(&u->wreq, &u->h.stream, &b, 1, on_write) < 0) {
    rdzv__up_reset(u, "write", RDZV_ECONN_CLOSED);
    return;
  }
  u->d->stats.bytes_out += b.len;
  u->write_active = true;
  u->refs++;
}

/* ---- public (daemon-internal) API -------------------------------------------- */

struct upstream *rdzv__upstream_create(struct daemon *d, const char *job_id,
                                       void (*on_restart)(void *arg),
                                       void (*on_reconnect)(void *arg),
                                       void *arg) {
  struct upstream *u = calloc(1, sizeof(*u));
  if (u == NULL)
    return NULL;
  u->job_id = strdup(job_id);
  if (u->job_id == NULL) {
    free(u);
    return NULL;
  }
  u->d = d;
  u->on_restart = on_restart;
  u->on_reconnect = on_reconnect;
  u->restart_arg = arg;
  u->refs = 1;
  u->next_id = 1;
  u->addrs[0] = strndup(d->cfg.parent, 255);
  if (u->addrs[0] == NULL) {
    free(u->job_id);
    free(u);
    return NULL;
  }
  u->naddrs = 1;
  rdzv__up_refresh_ancestors(u);
  u->backoff_ms = 10;
  u->redirect = -1;
  TAILQ_INIT(&u->queue);
  TAILQ_INIT(&u->all);
  u->down_since_ms = uv_now(d->loop);
  uv_timer_init(d->loop, &u->timer);
  u->timer.data = u;
  u->refs++; /* the timer's */
  uv_timer_init(d->loop, &u->expire);
  u->expire.data = u;
  u->refs++; /* the expiry timer's */
  uv_timer_init(d->loop, &u->beat);
  u->beat.data = u;
  u->refs++; /* the heartbeat timer's */
  uv_timer_init(d->loop, &u->home);
  u->home.data = u;
  u->refs++; /* the back-home timer's */
  u->last_beat_ms = uv_now(d->loop);
  uv_timer_start(&u->beat, on_beat, d->cfg.heartbeat_ms, d->cfg.heartbeat_ms);
  rdzv__up_connect(u);
  return u;
}

static void on_timer_closed(uv_handle_t *h) { rdzv__up_unref(h->data); }

static void on_final_shutdown(uv_shutdown_t *req, int status) {
  struct upstream *u = req->data;
  (void)status;
  free(req);
  uv_close(&u->h.handle, on_stream_closed); /* holds the ref taken below */
}

static void on_final_write(uv_write_t *req, int status) {
  struct upstream *u = req->data;
  (void)status;
  free(req);
  rdzv__up_unref(u);
}

/* Writes u->out after what is being written, then shuts the write side
 * down and closes the stream. Returns false if it could not start (then
 * nothing was taken). */
static bool flush_and_close(struct upstream *u) {
  uv_shutdown_t *sreq = malloc(sizeof(*sreq));
  if (sreq == NULL)
    return false;
  struct rdzv_buf *src = &u->out; /* over TLS: its ciphertext */
  if (u->tls != NULL) {
    if (rdzv__up_tls_seal(u) < 0) {
      free(sreq);
      return false;
    }
    src = &u->cipher;
  }
  if (src->len > 0) {
    uv_write_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init((char *)src->data, (unsigned)src->len);
    if (w == NULL || uv_write(w, &u->h.stream, &b, 1, on_final_write) < 0) {
      free(w);
      free(sreq);
      return false;
    }
    /* libuv writes from the buffer later: it stays with u until u goes
     * (up_unref frees it), and u stays until the write completes. */
    w->data = u;
    u->refs++;
    u->d->stats.bytes_out += b.len;
  }
  sreq->data = u;
  if (uv_shutdown(sreq, &u->h.stream, on_final_shutdown) < 0) {
    free(sreq);
    return false;
  }
  u->refs++; /* dropped by on_stream_closed */
  return true;
}

void rdzv__upstream_destroy(struct upstream *u, bool flush) {
  if (u == NULL)
    return;
  /* Closed before the callbacks run: one that sends again is refused
   * (RDZV_ECANCELED) instead of queueing a request nobody would end. */
  bool ready = u->state == UP_READY;
  rdzv__up_home_stop(u);
  rdzv__up_set_state(u, UP_CLOSED);
  fail_requests(u, RDZV_ECANCELED, true, "");
  uv_close((uv_handle_t *)&u->expire, on_timer_closed);
  uv_close((uv_handle_t *)&u->beat, on_timer_closed);
  uv_close((uv_handle_t *)&u->home, on_timer_closed);
  if (u->have_stream) {
    u->have_stream = false;
    if (!(flush && ready && flush_and_close(u))) {
      u->refs++;
      uv_close(&u->h.handle, on_stream_closed);
    }
  }
  uv_close((uv_handle_t *)&u->timer, on_timer_closed);
  rdzv__up_unref(u);
}

int rdzv__upstream_send(struct upstream *u, const struct rdzv_msg *m,
                        upstream_cb cb, void *arg) {
  if (u->state == UP_CLOSED) /* e.g. from a callback of its destroy */
    return RDZV_ECANCELED;
  struct upreq *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return RDZV_ENOMEM;
  struct rdzv_msg copy = *m;
  copy.req_id = u->next_id++;
  if (copy.req_id == 0)
    copy.req_id = u->next_id++;
  copy.flags &= (uint16_t)~RDZV_F_REPLY;
  bool ready = u->state == UP_READY;
  int rc = rdzv_msg_encode(&copy, &r->frame);
  if (rc == 0 && ready)
    rc = rdzv_buf_append(&u->out, r->frame.data, r->frame.len);
  if (rc < 0) {
    rdzv_buf_free(&r->frame);
    free(r);
    return rc;
  }
  r->id = copy.req_id;
  r->seq = ++u->seq;
  r->sent = ready;
  r->cb = cb;
  r->arg = arg;
  HASH_ADD(hh, u->reqs, id, sizeof(r->id), r);
  TAILQ_INSERT_TAIL(&u->all, r, alink);
  if (!ready) {
    r->queued = true;
    r->queued_ms = uv_now(u->d->loop);
    if (TAILQ_EMPTY(&u->queue))
      uv_timer_start(&u->expire, on_expire, u->d->cfg.upstream_timeout_ms, 0);
    TAILQ_INSERT_TAIL(&u->queue, r, qlink);
  }
  u->d->stats.frames_out++;
  if (m->type <= RDZV_MSG_TYPE_MAX)
    u->d->stats.ops[m->type].forwarded++;
  if (ready)
    rdzv__up_start_write(u);
  return 0;
}

uint32_t rdzv__upstream_frame_limit(const struct upstream *u) {
  return u->parent_frame != 0 ? u->parent_frame : u->d->cfg.max_frame_bytes;
}

/* Runs cb (if any) with a failure of status and text, as a reply would. */
static int split_failed(struct upstream *u, upstream_cb cb, void *arg,
                        int status, const char *text) {
  if (cb != NULL) {
    struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
    struct rdzv_msg r;
    memset(&r, 0, sizeof(r));
    r.flags = RDZV_F_REPLY;
    r.status = status;
    r.keys.n = t.n > 0;
    r.keys.v = &t;
    cb(u->d, &r, arg);
  }
  return status;
}

int rdzv__upstream_send_split(struct upstream *u, const struct rdzv_msg *m,
                              const struct rdzv_slice *head, upstream_cb cb,
                              void *arg) {
  char err[400];
  uint64_t limit = rdzv__upstream_frame_limit(u);
  /* What every request's body holds besides its share of the items. */
  uint64_t fixed = RDZV_WIRE_MIN_BODY_BYTES + (head ? 4u + head->n : 0);
  size_t pos = 0;
  struct rdzv_slice s;
  while (rdzv_items_next(&m->keys, &pos, &s))
    fixed += 4u + s.n;
  pos = 0;
  while (rdzv_items_next(&m->vals, &pos, &s)) {
    if (fixed + 4u + s.n > limit) {
      snprintf(err, sizeof(err),
               "a %s contribution of %u bytes cannot go up from node %s: its "
               "parent %s takes frames of at most %" PRIu64 " bytes",
               rdzv_msg_type_name(m->type), s.n, u->d->cfg.name,
               rdzv__up_addr(u), limit);
      return split_failed(u, cb, arg, RDZV_EFRAME_TOO_BIG, err);
    }
  }
  int rc;
  if (fixed + m->vals.raw_len <= limit && head == NULL) {
    rc = rdzv__upstream_send(u, m, cb, arg); /* the usual case: one */
    goto out;
  }
  struct rdzv_msg part = *m;
  size_t start = 0, end = 0;
  uint32_t n = 0;
  pos = 0;
  for (;;) {
    size_t before = pos;
    bool more = rdzv_items_next(&m->vals, &pos, &s);
    if (more && fixed + (end - start) + (pos - before) <= limit) {
      end = pos;
      n++;
      continue;
    }
    /* Send items [start, end), then start the next part with this one. */
    struct rdzv_buf vals = {0};
    if ((head != NULL && rdzv_items_append(&vals, head->p, head->n) < 0) ||
        rdzv_buf_append(&vals, m->vals.raw + start, end - start) < 0) {
      rdzv_buf_free(&vals);
      rc = RDZV_ENOMEM;
      goto out;
    }
    part.vals.n = n + (head != NULL);
    part.vals.raw = vals.data;
    part.vals.raw_len = vals.len;
    part.vals.v = NULL;
    rc = rdzv__upstream_send(u, &part, cb, arg);
    rdzv_buf_free(&vals);
    if (rc < 0 || !more)
      goto out;
    u->d->stats.split_frames++;
    start = before;
    end = pos;
    n = 1;
  }
out:
  if (rc < 0) {
    snprintf(err, sizeof(err),
             "node %s could not send a %s to its parent %s: "
             "%s",
             u->d->cfg.name, rdzv_msg_type_name(m->type), rdzv__up_addr(u),
             rdzv_strerror(rc));
    return split_failed(u, cb, arg, rc, err);
  }
  return 0;
}
