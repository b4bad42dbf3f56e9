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

enum up_state { UP_IDLE, UP_RESOLVING, UP_CONNECTING, UP_HELLO, UP_READY,
                UP_BACKOFF, UP_CLOSED };
static const char *const up_state_names[] = {
    "IDLE", "RESOLVING", "CONNECTING", "HELLO", "READY", "BACKOFF", "CLOSED"};

/* How often a request is sent again after the connection it went on
 * failed (to the next ancestor, or the same parent back), before it fails
 * with "outcome unknown". Mutations carry an op id, so the root applies a
 * re-sent one once. */
#define MAX_RESENDS 3

struct upreq {
  UT_hash_handle hh;
  uint32_t id;
  bool sent;
  uint8_t tries; /* times sent again after a failed connection */
  uint64_t seq;  /* submission order (u->seq): after a fence or not */
  upstream_cb cb;
  void *arg;
  struct rdzv_buf frame; /* the encoded request, kept until it completes */
  /* While queued (not sent): since when. */
  bool queued;
  uint64_t queued_ms;
  TAILQ_ENTRY(upreq) qlink;
  TAILQ_ENTRY(upreq) alink; /* u->all: every request, in submission order */
};
TAILQ_HEAD(upreq_queue, upreq);

struct upstream {
  struct daemon *d;
  char *job_id;
  enum up_state state;
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  bool have_stream;
  uv_connect_t creq;
  uv_getaddrinfo_t gai;
  uv_timer_t timer; /* the backoff; while an attempt runs, its deadline */
  uv_write_t wreq;
  bool write_active;
  struct rdzv_buf out;
  struct rdzv_buf writing;
  struct rdzv_buf in;
  struct upreq *reqs;
  struct upreq_queue queue; /* queued requests, oldest first */
  struct upreq_queue all;   /* every request, in submission order */
  uv_timer_t expire;        /* fails queued requests past the timeout */
  uv_timer_t beat;          /* every --heartbeat-ms: ping, or lose */
  uint64_t last_rx_ms;      /* bytes last came (or the attempt began) */
  uint64_t last_beat_ms;    /* when on_beat last ran */
  char why[300];            /* the last failure, for errors and logs */
  uint64_t down_since_ms;   /* since when the parent is not connected */
  bool was_up;              /* READY once: a loss is logged */
  uint32_t next_id;
  uint32_t hello_id; /* the hello's req_id, then (challenged) its proof's */
  /* This attempt's hello nonce, and whether the proof went out (the reply
   * awaited is then the RDZV_MSG_AUTH's). */
  uint8_t cnonce[RDZV_AUTH_NONCE_BYTES];
  bool auth_sent;
  /* Where to connect: addrs[0] = --parent, then the ancestors above it as
   * the parent last told them (nearest first); addr_idx the one in use.
   * incs[i]: the incarnation addrs[i] gave in its last hello reply, 0
   * before the first (a change means that daemon restarted). Each a copy
   * of its own (at most 255 bytes): a node holds one upstream a job, and
   * a 100k-rank simulation 12,500 of them. */
  char *addrs[RDZV_MAX_ANCESTORS + 1];
  uint64_t incs[RDZV_MAX_ANCESTORS + 1];
  uint64_t shared_inc; /* the last an etcd-backed root gave (0: none) */
  uint32_t naddrs;
  uint32_t addr_idx;
  /* This round's candidates for addrs[addr_idx]: the resolver's answer
   * (owned), the address tried (cand) and its port (port, of
   * port_first..port_last); next_cand: the next attempt takes the next
   * candidate instead of resolving again. cand_text: "IP:PORT" tried. */
  struct addrinfo *res;
  struct addrinfo *cand;
  int port, port_first, port_last;
  bool next_cand;
  uint32_t ncands_tried;
  uint32_t nother_job; /* this round's candidates that served another job */
  char cand_text[80];
  bool closing;            /* the stream's close has not completed yet */
  bool connect_after_close; /* ... and an attempt waits for it */
  bool stay;       /* the next reset retries the same address (the parent
                      closed us on purpose: it lives) */
  int loss_status; /* how the last ready connection ended */
  uint32_t parent_frame; /* its frame limit (hello reply a), 0 unknown */
  void (*on_restart)(void *arg);
  void (*on_reconnect)(void *arg);
  void *restart_arg;
  uint64_t backoff_ms;
  /* Copies of mutable keys (keys/copies.h, wire.h's RDZV_MSG_INVAL): the
   * lease the parent's ping replies gave (loop ms; 0: none), the ping
   * whose reply renews it and when it was sent, the newest invalidation
   * received on this connection and the last acknowledged, the INVAL
   * request in flight (0: none), and a number that changes with every
   * ready connection (an acknowledgment meant for an earlier one is not
   * sent). */
  uint64_t lease_until;
  uint32_t ping_id;
  uint64_t ping_sent_ms;
  uint64_t inval_recv;
  uint64_t inval_acked; /* the last sent in an INVAL request (b) */
  uint32_t inval_id;
  uint64_t conn_gen;
  void (*on_inval)(void *arg, uint64_t gen, const struct rdzv_msg *m);
  void (*on_lost)(void *arg);
  /* A standby root's hello refusal named the leader: addrs[redirect] is
   * tried next (-1: none); redirects in a row since the last ready
   * connection (past two, the backoff applies: standbys that disagree
   * must not make a node spin). */
  int redirect;
  uint32_t redirects;
  uint32_t attempts;
  uint32_t refs;
  /* /readyz's root_reachable: the parent's last ping reply said its own
   * link toward the root is down (RDZV_F_ROOT_AWAY); false until told,
   * and again on each new connection. */
  bool root_away;
  /* /readyz's not_fenced: the parent declared this node lost (an ERROR
   * frame, RDZV_ESILENT) or refused one of its requests as stale
   * (RDZV_EFENCED), at fenced_ms (loop ms), why in fence_why. It stays
   * fenced for --session-grace-ms (what the node held of its ranks'
   * sessions is settled by then, here and above) and until the parent
   * has answered a request submitted after the fence (seq > fence_seq)
   * or a ping sent after it (heard_after). */
  bool fenced, heard_after;
  uint64_t fenced_ms;
  uint64_t seq, fence_seq;
  char fence_why[200];
};

static void up_connect(struct upstream *u);
static void up_start_write(struct upstream *u);
static void on_expire(uv_timer_t *t);
static void on_backoff(uv_timer_t *t);
static void arm_expire(struct upstream *u);

/* The address in use: the parent, or an ancestor while reattached. */
static const char *up_addr(const struct upstream *u) {
  const char *a = u->addrs[u->addr_idx];
  return a != NULL ? a : "";
}

/* addrs[1..] from the ancestors the parent last told (daemon-wide). Out
 * of memory, the list ends before the ancestor it could not copy (fewer
 * places to reattach to, none wrong). */
static void refresh_ancestors(struct upstream *u) {
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

static void up_set_state(struct upstream *u, enum up_state s) {
  rdzv__log_job(u->d, 2, u->job_id, "upstream: %s -> %s",
                up_state_names[u->state], up_state_names[s]);
  u->state = s;
}

/* ---- copies: the lease and the invalidation stream ---------------------- */

/* A ready connection's lease and invalidation stream end (it failed):
 * the node drops its copies, and those below it go too. */
static void lease_end(struct upstream *u) {
  bool was_ready = u->state == UP_READY;
  u->root_away = false;
  u->lease_until = 0;
  u->inval_id = 0;
  u->inval_recv = 0;
  u->inval_acked = 0;
  u->ping_id = 0;
  u->conn_gen++; /* acknowledgments meant for it are not sent */
  if (was_ready && u->on_lost != NULL)
    u->on_lost(u->restart_arg);
}

static void send_ping(struct upstream *u) {
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_PING;
  m.req_id = u->next_id++;
  if (m.req_id == 0)
    m.req_id = u->next_id++;
  if (rdzv_msg_encode(&m, &u->out) == 0) {
    u->ping_id = m.req_id;
    u->ping_sent_ms = uv_now(u->d->loop);
    u->d->stats.frames_out++;
    u->d->stats.ops[RDZV_MSG_PING].forwarded++;
    up_start_write(u);
  }
}

static void send_inval(struct upstream *u, uint64_t ack) {
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_INVAL;
  m.b = (int64_t)ack;
  m.req_id = u->next_id++;
  if (m.req_id == 0)
    m.req_id = u->next_id++;
  if (rdzv_msg_encode(&m, &u->out) == 0) {
    u->inval_id = m.req_id;
    u->inval_acked = ack;
    u->d->stats.frames_out++;
    u->d->stats.ops[RDZV_MSG_INVAL].forwarded++;
    up_start_write(u);
  }
}

/* A PING or INVAL reply on a ready connection: true when it was one
 * (consumed here). */
static bool copies_frame(struct upstream *u, const struct rdzv_msg *m) {
  if (m->type == RDZV_MSG_PING) {
    /* The renewal counts only when this node had acknowledged every
     * invalidation issued before the parent answered (m->b: its INVAL
     * request carrying that went up before this ping), as the parent
     * counts it: a node that fell behind serves no copy until it caught
     * up. */
    if (m->req_id == u->ping_id && m->a > 0 &&
        (uint64_t)m->b <= u->inval_acked) {
      uint64_t until = u->ping_sent_ms + (uint64_t)m->a;
      if (until > u->lease_until)
        u->lease_until = until;
    }
    if (m->req_id == u->ping_id) {
      u->ping_id = 0; /* answered: the next may go */
      u->root_away = (m->flags & RDZV_F_ROOT_AWAY) != 0;
      if (u->fenced && u->ping_sent_ms > u->fenced_ms)
        u->heard_after = true;
    }
    return true;
  }
  if (m->type != RDZV_MSG_INVAL || m->req_id != u->inval_id ||
      u->inval_id == 0)
    return false;
  u->inval_id = 0;
  if (m->status != 0) {
    /* A parent that keeps no invalidation stream for this node: no lease
     * will count (nothing is served from copies). */
    rdzv__log_job(u->d, 1, u->job_id,
                  "parent %s refused the invalidation "
                  "stream: %s",
                  up_addr(u), rdzv_strerror(m->status));
    u->lease_until = 0;
    return true;
  }
  if ((uint64_t)m->a > u->inval_recv)
    u->inval_recv = (uint64_t)m->a;
  u->d->stats.invalidations_received++;
  if (u->on_inval != NULL)
    u->on_inval(u->restart_arg, u->conn_gen, m);
  else
    send_inval(u, (uint64_t)m->a);
  return true;
}

void rdzv__upstream_copies(struct upstream *u,
                           void (*on_inval)(void *arg, uint64_t gen,
                                            const struct rdzv_msg *m),
                           void (*on_lost)(void *arg)) {
  u->on_inval = on_inval;
  u->on_lost = on_lost;
}

void rdzv__upstream_want_lease(struct upstream *u) {
  if (u->state != UP_READY || u->ping_id != 0 || !u->d->cfg.cache_mutable)
    return;
  uint64_t now = uv_now(u->d->loop);
  if (u->lease_until > now)
    return;
  send_ping(u);
}

void rdzv__upstream_inval_ack(struct upstream *u, uint64_t gen, uint64_t seq) {
  if (u->state != UP_READY || gen != u->conn_gen || u->inval_id != 0)
    return;
  send_inval(u, seq);
}

/* The parent refused this node as stale (declared lost, or a stale
 * request): what it said (n bytes of text). */
static void fence(struct upstream *u, const char *what, const uint8_t *text,
                  size_t n) {
  u->d->stats.fenced_here++;
  u->fenced = true;
  u->heard_after = false;
  u->fenced_ms = uv_now(u->d->loop);
  u->fence_seq = u->seq;
  snprintf(u->fence_why, sizeof(u->fence_why), "%s %s: %.*s", what,
           up_addr(u), (int)(n < 150 ? n : 150), (const char *)text);
}

bool rdzv__upstream_root_reachable(const struct upstream *u, char *why,
                                   size_t n) {
  if (u->state != UP_READY) {
    if (why != NULL)
      snprintf(why, n, "parent %s not attached (%s)",
               up_addr(u)[0] ? up_addr(u) : "(none)",
               up_state_names[u->state]);
    return false;
  }
  if (u->root_away && why != NULL)
    snprintf(why, n, "%s %s is attached but says its own link toward the "
             "root is down", u->addr_idx == 0 ? "parent" : "ancestor",
             up_addr(u));
  return !u->root_away;
}

bool rdzv__upstream_fenced(const struct upstream *u, char *why, size_t n) {
  if (!u->fenced)
    return false;
  uint64_t ago = uv_now(u->d->loop) - u->fenced_ms;
  if (u->heard_after && ago >= u->d->cfg.session_grace_ms)
    return false; /* over: the parent answers it again */
  snprintf(why, n, "%s %llu ms ago (held --session-grace-ms %u, %s)",
           u->fence_why, (unsigned long long)ago, u->d->cfg.session_grace_ms,
           u->heard_after ? "the parent answers it again"
                          : "no answer from the parent since");
  return true;
}

bool rdzv__upstream_attached(const struct upstream *u, char *why, size_t n) {
  if (u->state == UP_READY)
    return true;
  snprintf(why, n, "parent %s (%s) not attached for %llu ms%s%s",
           up_addr(u)[0] ? up_addr(u) : "(none)", up_state_names[u->state],
           (unsigned long long)(uv_now(u->d->loop) - u->down_since_ms),
           u->why[0] ? ": " : "", u->why);
  return false;
}

uint64_t rdzv__upstream_lease_left(const struct upstream *u) {
  if (u->state != UP_READY || u->lease_until == 0)
    return 0;
  /* The time now, not the loop iteration's start (a long iteration, or a
   * stop in the middle of one, must not stretch the lease). */
  uv_update_time(u->d->loop);
  uint64_t now = uv_now(u->d->loop);
  if (u->d->mutant_serve_expired) /* the checker's mutant: no expiry */
    return rdzv_config_copy_lease_ms(&u->d->cfg);
  return u->lease_until > now ? u->lease_until - now : 0;
}

static void free_cands(struct upstream *u) {
  if (u->res != NULL)
    uv_freeaddrinfo(u->res);
  u->res = u->cand = NULL;
  u->next_cand = false;
}

static void up_unref(struct upstream *u) {
  if (--u->refs > 0)
    return;
  free_cands(u);
  rdzv_buf_free(&u->out);
  rdzv_buf_free(&u->writing);
  rdzv_buf_free(&u->in);
  for (size_t i = 0; i < sizeof(u->addrs) / sizeof(u->addrs[0]); i++)
    free(u->addrs[i]);
  free(u->job_id);
  free(u);
}

/* libuv's codes (errno, getaddrinfo) and ours: the text of either. */
static const char *err_text(int err) {
  return err <= -1000 && err > -2000 ? rdzv_strerror(err) : uv_strerror(err);
}

static void unqueue(struct upstream *u, struct upreq *r) {
  if (!r->queued)
    return;
  TAILQ_REMOVE(&u->queue, r, qlink);
  r->queued = false;
}

static void complete(struct upstream *u, struct upreq *r,
                     const struct rdzv_msg *reply) {
  unqueue(u, r);
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
static void fail_one(struct upstream *u, struct upreq *r, int status,
                     const char *text) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.req_id = r->id;
  m.flags = RDZV_F_REPLY;
  m.status = status;
  m.keys.n = t.n > 0 ? 1 : 0;
  m.keys.v = &t;
  complete(u, r, &m);
}

/* Completes every request (only those already sent, unless all) with a
 * synthesized status and text. */
static void fail_requests(struct upstream *u, int status, bool all,
                          const char *text) {
  struct upreq *r, *tmp;
  HASH_ITER(hh, u->reqs, r, tmp) {
    if (!r->sent && !all)
      continue;
    fail_one(u, r, status, text);
  }
}

/* Fails the queued requests that have waited --upstream-timeout-ms (the
 * oldest first), then waits for the next one's turn. */
static void on_expire(uv_timer_t *t) {
  struct upstream *u = t->data;
  uint64_t now = uv_now(u->d->loop), limit = u->d->cfg.upstream_timeout_ms;
  char text[800], first[160];
  /* No round has failed yet: say which candidate the first one is at. */
  snprintf(first, sizeof(first), "not connected yet (%u of its addresses "
           "and ports tried; now %s)", u->ncands_tried,
           u->cand_text[0] ? u->cand_text : "resolving");
  snprintf(text, sizeof(text),
           "parent %s unreachable for %" PRIu64 " ms (node %s): %s",
           up_addr(u), now - u->down_since_ms, u->d->cfg.name,
           u->why[0] ? u->why : first);
  /* One sent before (on a connection lost since) may have been applied. */
  char sent_text[900];
  snprintf(sent_text, sizeof(sent_text),
           "%s; it was sent before the connection was lost: its outcome is "
           "unknown", text);
  /* Not in time order (what a lost connection carried goes first, its
   * clock started at the loss), so every one is looked at. */
  struct upreq *r, *next;
  for (r = TAILQ_FIRST(&u->queue); r != NULL; r = next) {
    next = TAILQ_NEXT(r, qlink);
    if (r->queued_ms + limit > now)
      continue;
    if (r->tries > 0)
      fail_one(u, r, u->loss_status, sent_text);
    else
      fail_one(u, r, RDZV_EUNREACHABLE, text);
  }
  arm_expire(u);
}

/* The expiry timer at the queue's first deadline (none if it is empty). */
static void arm_expire(struct upstream *u) {
  uint64_t now = uv_now(u->d->loop), limit = u->d->cfg.upstream_timeout_ms;
  uint64_t first = UINT64_MAX;
  struct upreq *r;
  TAILQ_FOREACH(r, &u->queue, qlink)
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
    up_connect(u);
  }
  up_unref(u);
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
  up_connect(u);
}

/* The connection failed (or never came up): fail what was in flight and
 * try again after a jittered, growing delay. */
static void up_reset(struct upstream *u, const char *why, int err) {
  if (u->state == UP_CLOSED)
    return;
  snprintf(u->why, sizeof(u->why), "%s: %s", why,
           err ? err_text(err) : "closed");
  if (u->state == UP_READY) {
    /* Losing the parent is news: said at the default level. */
    rdzv__log_job(u->d, 1, u->job_id, "lost the parent %s: %s", up_addr(u),
                  u->why);
    u->down_since_ms = uv_now(u->d->loop);
  } else {
    rdzv__log_job(u->d, u->attempts % 50 == 1 ? 1 : 2, u->job_id,
                  "parent %s: %s (attempt %u)", up_addr(u), u->why,
                  u->attempts);
  }
  if (u->have_stream) {
    u->have_stream = false;
    u->closing = true;
    u->refs++;
    uv_close(&u->h.handle, on_stream_closed);
  }
  if (u->state == UP_READY)
    u->d->stats.upstream_reconnects++;
  lease_end(u);
  /* Not READY before the failure callbacks run: what they send again
   * waits in the queue for the next connection, never in u->out ahead of
   * its hello. */
  up_set_state(u, UP_BACKOFF);
  u->out.len = 0;
  u->in.len = 0;
  char text[800];
  snprintf(text, sizeof(text), "the connection of node %s to its parent %s "
           "failed: %s; the request's outcome is unknown",
           u->d->cfg.name, up_addr(u), u->why);
  /* What was sent goes again on the next connection (in its order, before
   * what was queued meanwhile), up to MAX_RESENDS times; the rest fail. */
  uint64_t now = uv_now(u->d->loop);
  struct upreq *r;
  struct upreq_queue keep;
  TAILQ_INIT(&keep);
  TAILQ_FOREACH(r, &u->all, alink) {
    if (!r->sent || r->tries >= MAX_RESENDS)
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
             u->d->cfg.name, up_addr(u), u->job_id, u->why);
    fail_requests(u, RDZV_EAUTH, true, at);
  }
  /* The next attempt goes to the next ancestor at once; after the last
   * one (the root), back to the node's own parent after a delay. A parent
   * that closed this node on purpose (an ERROR frame: it restarted above,
   * or declared this node lost) lives: it is asked again. */
  bool stay = u->stay;
  u->stay = false;
  if (u->redirect >= 0 && (uint32_t)u->redirect < u->naddrs) {
    u->addr_idx = (uint32_t)u->redirect;
    u->redirect = -1;
    rdzv__log_job(u->d, u->redirects < 2 ? 1 : 2, u->job_id,
                  "node %s goes to the leader root %s", u->d->cfg.name,
                  up_addr(u));
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
                  up_addr(u));
    uv_timer_start(&u->timer, on_backoff, 0, 0);
    return;
  }
  if (!stay)
    u->addr_idx = 0;
  refresh_ancestors(u);
  uint64_t b = u->backoff_ms;
  uint64_t jitter = b / 4 > 0 ? (uint64_t)rand() % (b / 2 + 1) : 0;
  uv_timer_start(&u->timer, on_backoff, b - b / 4 + jitter, 0);
  u->backoff_ms = b * 2 > 1000 ? 1000 : b * 2;
}

/* The round's next usable address (IPv4 or IPv6) after u->cand, or
 * NULL. */
static struct addrinfo *next_addr(const struct upstream *u) {
  for (struct addrinfo *a = u->cand->ai_next; a != NULL; a = a->ai_next)
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
      return a;
  return NULL;
}

/* Whether the round has a candidate after this one (skip_addr: none of
 * this address's other ports count). */
static bool cand_left(const struct upstream *u, bool skip_addr) {
  return u->cand != NULL &&
         ((!skip_addr && u->port < u->port_last) || next_addr(u) != NULL);
}

/* Moves to the round's next candidate: the next port of the range, else
 * the next address at the range's first port. skip_addr: the address did
 * not answer at all (its TCP connect timed out, no route): its other ports
 * would cost a timeout each, so the next address. Returns false when none
 * is left. */
static bool advance_cand(struct upstream *u, bool skip_addr) {
  if (!cand_left(u, skip_addr))
    return false;
  if (!skip_addr && u->port < u->port_last) {
    u->port++;
    return true;
  }
  u->cand = next_addr(u);
  u->port = u->port_first;
  return true;
}

/* One attempt (one candidate) failed before the parent was ready: the
 * next candidate at once, else the round fails (up_reset). Nothing was
 * sent on the attempt but its hello, so nothing is failed or re-sent. */
static void up_attempt_failed(struct upstream *u, const char *why, int err) {
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
      !advance_cand(u, skip_addr)) {
    if (u->ncands_tried > 1)
      snprintf(what, sizeof(what), "%s %s (the last of %u addresses and "
               "ports tried; %u of them served another job or could not prove "
               "its secret)", why,
               u->cand_text, u->ncands_tried, u->nother_job);
    free_cands(u);
    up_reset(u, u->cand_text[0] ? what : why, err);
    return;
  }
  rdzv__log_job(u->d, 2, u->job_id,
                "parent %s: %s: %s; trying the next of its "
                "addresses and ports",
                up_addr(u), what, err ? err_text(err) : "closed");
  if (u->have_stream) {
    u->have_stream = false;
    u->closing = true;
    u->refs++;
    uv_close(&u->h.handle, on_stream_closed);
  }
  up_set_state(u, UP_BACKOFF);
  u->out.len = 0;
  u->in.len = 0;
  u->next_cand = true;
  uv_timer_start(&u->timer, on_backoff, 0, 0);
}

/* An attempt's --connect-timeout-ms passed without a hello reply (a
 * dropped SYN, a listener that accepts and says nothing). */
static void on_attempt_timeout(uv_timer_t *t) {
  struct upstream *u = t->data;
  if (u->state != UP_CONNECTING && u->state != UP_HELLO)
    return;
  char why[120];
  if (u->state == UP_CONNECTING)
    snprintf(why, sizeof(why), "connect not done within %u ms "
             "(--connect-timeout-ms; a dropped SYN?) to",
             u->d->cfg.connect_timeout_ms);
  else
    snprintf(why, sizeof(why), "no hello reply within %u ms "
             "(--connect-timeout-ms) from", u->d->cfg.connect_timeout_ms);
  up_attempt_failed(u, why, RDZV_EDEADLINE);
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
  if (u->state != UP_CONNECTING && u->state != UP_HELLO &&
      u->state != UP_READY)
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
             "(--liveness-timeout-ms %u)", silent,
             u->state == UP_READY ? "ready" :
             u->state == UP_HELLO ? "waiting for the hello reply" :
             "connecting", d->cfg.liveness_timeout_ms);
    d->stats.parent_silent++;
    if (u->state == UP_READY)
      up_reset(u, why, RDZV_ESILENT);
    else
      up_attempt_failed(u, why, RDZV_ESILENT); /* the next candidate */
    return;
  }
  if (u->state != UP_READY)
    return;
  send_ping(u);
}

static void on_write(uv_write_t *req, int status) {
  struct upstream *u = req->data;
  u->write_active = false;
  u->writing.len = 0;
  if (status < 0) {
    if (u->state == UP_HELLO)
      up_attempt_failed(u, "write to", status);
    else if (u->state == UP_READY)
      up_reset(u, "write", status);
  } else if (u->state == UP_READY || u->state == UP_HELLO)
    up_start_write(u);
  up_unref(u);
}

static void up_start_write(struct upstream *u) {
  if (u->write_active || u->out.len == 0 || !u->have_stream)
    return;
  /* Straight to the socket first (no write request, no watcher update:
   * an epoll_ctl saved per forwarded request); what does not fit, or a
   * failure, goes through uv_write below as before. */
  uv_buf_t now = uv_buf_init((char *)u->out.data, (unsigned)u->out.len);
  int n = uv_try_write(&u->h.stream, &now, 1);
  if (n > 0) {
    u->d->stats.bytes_out += (uint64_t)n;
    rdzv_buf_consume(&u->out, (size_t)n);
    if (u->out.len == 0)
      return;
  }
  struct rdzv_buf t = u->writing;
  u->writing = u->out;
  u->out = t;
  u->out.len = 0;
  uv_buf_t b = uv_buf_init((char *)u->writing.data, (unsigned)u->writing.len);
  u->wreq.data = u;
  if (uv_write(&u->wreq, &u->h.stream, &b, 1, on_write) < 0) {
    up_reset(u, "write", RDZV_ECONN_CLOSED);
    return;
  }
  u->d->stats.bytes_out += b.len;
  u->write_active = true;
  u->refs++;
}

/* ---- read path ------------------------------------------------------------- */

static void up_ready(struct upstream *u) {
  bool again = u->was_up;
  if (u->was_up)
    rdzv__log_job(u->d, 1, u->job_id, "parent %s back after %" PRIu64 " ms",
                  up_addr(u), uv_now(u->d->loop) - u->down_since_ms);
  u->was_up = true;
  up_set_state(u, UP_READY);
  uv_timer_stop(&u->timer); /* the attempt's deadline */
  free_cands(u);
  u->backoff_ms = 10;
  u->attempts = 0;
  u->redirects = 0;
  if (u->addr_idx > 0)
    u->d->stats.reattached++;
  /* In the queue's order: what the lost connection carried first, then
   * what came meanwhile. */
  struct upreq *r;
  while ((r = TAILQ_FIRST(&u->queue)) != NULL) {
    unqueue(u, r);
    if (rdzv_buf_append(&u->out, r->frame.data, r->frame.len) < 0) {
      fail_one(u, r, RDZV_ENOMEM, "out of memory at the node");
      continue;
    }
    r->sent = true;
  }
  uv_timer_stop(&u->expire);
  /* Copies: this connection's invalidation stream, and a lease at once
   * (what was granted through another connection went when it ended). */
  u->conn_gen++;
  u->inval_recv = 0;
  u->inval_acked = 0;
  u->lease_until = 0;
  if (u->d->cfg.cache_mutable) {
    send_inval(u, 0);
    send_ping(u);
  }
  if (again && u->on_reconnect != NULL)
    u->on_reconnect(u->restart_arg);
  up_start_write(u);
}

/* The parent's hello reply lists the daemons above it (vals, nearest
 * first): this node's ancestors after its parent, kept daemon-wide (every
 * job's connection goes to the same parent). */
static void learn_ancestors(struct upstream *u, const struct rdzv_msg *m) {
  struct daemon *d = u->d;
  struct rdzv_slice v;
  size_t pos = 0;
  uint32_t n = 0;
  while (n < RDZV_MAX_ANCESTORS && rdzv_items_next(&m->vals, &pos, &v)) {
    if (v.n == 0 || v.n > 255)
      continue;
    /* A loop (a misconfigured tree naming this node above itself) ends
     * the list; so does a lack of memory (fewer places to reattach to). */
    if ((v.n == strlen(d->cfg.parent) &&
         memcmp(v.p, d->cfg.parent, v.n) == 0) ||
        rdzv__addrs_set(d->ancestors, n, v.p, v.n) < 0)
      break;
    n++;
  }
  rdzv__addrs_truncate(d->ancestors, &d->nancestors, n);
  /* A parent that tells none (a root without peers yet) leaves the chain
   * the launcher gave (--parent P,A1,...: the roots' list). */
  if (n == 0)
    rdzv__ancestors_configured(d);
  refresh_ancestors(u);
}

/* A standby root refused the hello naming the leader (vals[0]): it is
 * tried next, found among the addresses known or added to the ancestors
 * (the roots' list). */
static void follow_leader(struct upstream *u, const struct rdzv_msg *m) {
  struct daemon *d = u->d;
  struct rdzv_slice t = {NULL, 0}, l = {NULL, 0};
  rdzv_items_get(&m->keys, 0, &t);
  rdzv__log_job(d, 2, u->job_id, "root %s: %.*s", up_addr(u),
                (int)(t.n < 300 ? t.n : 300), (const char *)t.p);
  char leader[256];
  if (rdzv_items_get(&m->vals, 0, &l) < 0 || l.n == 0 || l.n >= sizeof(leader))
    return;
  memcpy(leader, l.p, l.n);
  leader[l.n] = '\0';
  if (strcmp(leader, up_addr(u)) == 0)
    return;
  for (uint32_t i = 0; i < u->naddrs; i++) {
    if (strcmp(u->addrs[i], leader) == 0) {
      u->redirect = (int)i;
      return;
    }
  }
  if (d->nancestors >= RDZV_MAX_ANCESTORS ||
      rdzv__addrs_set(d->ancestors, d->nancestors, leader, strlen(leader)) < 0)
    return;
  d->nancestors++;
  refresh_ancestors(u);
  u->redirect = (int)(u->naddrs - 1);
}

/* A parent with a shorter liveness timeout than this node's heartbeat
 * would declare it lost between two pings: ping at least three times
 * within the parent's timeout (said once, at the default level). */
static void adopt_parent_liveness(struct upstream *u, const struct rdzv_msg *m) {
  struct rdzv_slice k;
  if (rdzv_items_get(&m->keys, 0, &k) < 0 || k.n != 4)
    return;
  uint32_t live = (uint32_t)k.p[0] | (uint32_t)k.p[1] << 8 |
                  (uint32_t)k.p[2] << 16 | (uint32_t)k.p[3] << 24;
  uint64_t want = live / 3 > 0 ? live / 3 : 1;
  uint64_t beat = u->d->cfg.heartbeat_ms < want ? u->d->cfg.heartbeat_ms : want;
  if (beat == uv_timer_get_repeat(&u->beat))
    return;
  if (beat < u->d->cfg.heartbeat_ms)
    rdzv__log_event_job(u->d, u->job_id,
                        "parent %s has --liveness-timeout-ms %u: "
                        "node %s pings it every %" PRIu64 " ms, not every "
                        "--heartbeat-ms %u",
                        up_addr(u), live, u->d->cfg.name, beat,
                        u->d->cfg.heartbeat_ms);
  uv_timer_set_repeat(&u->beat, beat);
  uv_timer_again(&u->beat);
}

/* Whether this node holds its job's secret (and fills key). */
static bool up_secret(struct upstream *u, uint8_t *key, size_t *klen) {
  return u->d->auth &&
         rdzv__job_secret(u->d, (const uint8_t *)u->job_id,
                          strlen(u->job_id), key, klen) == 1;
}

static bool up_has_secret(struct upstream *u) {
  uint8_t key[RDZV_AUTH_SECRET_MAX_BYTES];
  size_t klen;
  bool has = up_secret(u, key, &klen);
  rdzv_auth_wipe(key, sizeof(key));
  return has;
}


/* The parent's challenge: its proof of the job's secret is checked (a
 * fake parent or root cannot feed this node), then this node's own goes
 * up (RDZV_MSG_AUTH), whose reply stands for the hello's. Returns false
 * when this attempt failed. */
static bool up_auth_answer(struct upstream *u, const struct rdzv_msg *m) {
  uint8_t key[RDZV_AUTH_SECRET_MAX_BYTES], want[RDZV_AUTH_PROOF_BYTES],
      mine[RDZV_AUTH_PROOF_BYTES];
  size_t klen = 0, jn = strlen(u->job_id);
  struct rdzv_slice sn, proof;
  /* The parent's port as this node dialed it (0: a Unix socket): the
   * proofs are bound to it, so a forwarder on another port cannot relay
   * the exchange. */
  uint16_t parent_port = 0;
  struct sockaddr_storage sa;
  int salen = sizeof(sa);
  if (u->h.handle.type == UV_TCP &&
      uv_tcp_getpeername(&u->h.tcp, (struct sockaddr *)&sa, &salen) == 0)
    parent_port = rdzv_auth_port_of(&sa);
  const char *bad = NULL;
  if (!up_secret(u, key, &klen))
    bad = "asks for a job secret and this node has none (--secret-file)";
  else if (m->vals.n != 2 || rdzv_items_get(&m->vals, 0, &sn) < 0 ||
           rdzv_items_get(&m->vals, 1, &proof) < 0 ||
           sn.n != RDZV_AUTH_NONCE_BYTES || proof.n != RDZV_AUTH_PROOF_BYTES)
    bad = "sent a malformed challenge";
  else if (rdzv_auth_proof(key, klen, RDZV_AUTH_SERVER,
                           (const uint8_t *)u->job_id, jn, parent_port, u->cnonce, sn.p,
                           want) < 0 ||
           !rdzv_auth_equal(want, proof.p, sizeof(want)))
    bad = "could not prove the job's secret (another job's daemon, another "
          "secret, or a fake)";
  if (bad != NULL) {
    rdzv_auth_wipe(key, sizeof(key));
    u->d->stats.auth_parent_refused++;
    rdzv__log_auth_job(u->d, u->job_id,
                       "%s %s: not trusted as this node's parent", u->cand_text,
                       bad);
    up_attempt_failed(u, "a daemon that could not prove the job's secret at",
                      RDZV_EAUTH);
    return false;
  }
  rdzv_auth_proof(key, klen, RDZV_AUTH_CLIENT, (const uint8_t *)u->job_id, jn, parent_port,
                  u->cnonce, sn.p, mine);
  rdzv_auth_wipe(key, sizeof(key));
  struct rdzv_slice pv = {mine, sizeof(mine)};
  struct rdzv_msg a;
  memset(&a, 0, sizeof(a));
  a.type = RDZV_MSG_AUTH;
  a.req_id = u->hello_id = u->next_id++;
  a.vals.n = 1;
  a.vals.v = &pv;
  rdzv_msg_encode(&a, &u->out);
  u->d->stats.frames_out++;
  u->auth_sent = true;
  up_start_write(u);
  return true;
}

/* Returns false when the connection was reset. */
static bool up_frame(struct upstream *u, const struct rdzv_msg *m) {
  u->d->stats.frames_in++;
  /* Before the hello reply, anything but that reply (an ERROR frame: the
   * daemon there is full or refuses us; a frame no rdzvd sends: not a
   * parent) ends this attempt: the next candidate, if the round has one. */
  if (u->state == UP_HELLO && cand_left(u, false) &&
      !(m->type == (u->auth_sent ? RDZV_MSG_AUTH : RDZV_MSG_HELLO) &&
        (m->flags & RDZV_F_REPLY) && m->req_id == u->hello_id)) {
    up_attempt_failed(u, m->type == RDZV_MSG_ERROR ? "an ERROR frame from"
                                                   : "not a hello reply from",
                      m->status ? m->status : RDZV_EHELLO);
    return false;
  }
  if (m->type == RDZV_MSG_ERROR || !(m->flags & RDZV_F_REPLY)) {
    struct rdzv_slice t = {NULL, 0};
    rdzv_items_get(&m->keys, 0, &t);
    rdzv__log_job(u->d, 0, u->job_id, "parent says %s: %.*s",
                  rdzv_strerror(m->status), (int)t.n, (const char *)t.p);
    /* The request that broke the parent's rule fails with its reason
     * (sending it again would only break the rule again). */
    struct upreq *bad = NULL;
    uint32_t bid = m->req_id;
    if (bid != 0 && m->type == RDZV_MSG_ERROR)
      HASH_FIND(hh, u->reqs, &bid, sizeof(bid), bad);
    if (m->status == RDZV_ESILENT)
      fence(u, "declared lost by", t.p, t.n);
    if (bad != NULL) {
      char text[400];
      snprintf(text, sizeof(text), "parent %s refused it: %.*s", up_addr(u),
               (int)(t.n < 300 ? t.n : 300), (const char *)t.p);
      fail_one(u, bad, m->status ? m->status : RDZV_EPROTO, text);
    }
    u->stay = true;
    up_reset(u, "error frame", m->status ? m->status : RDZV_EPROTO);
    return false;
  }
  if (u->state == UP_HELLO) {
    int hello_type = u->auth_sent ? RDZV_MSG_AUTH : RDZV_MSG_HELLO;
    if (m->type == RDZV_MSG_HELLO && !u->auth_sent &&
        m->req_id == u->hello_id && m->status == 0 &&
        (m->flags & RDZV_F_CHALLENGE))
      return up_auth_answer(u, m);
    if (m->type == hello_type && m->req_id == u->hello_id &&
        m->status == RDZV_ENOT_LEADER) {
      /* The root's own words (which leader, or why none is known: etcd
       * unreachable) go with the reason /readyz and errors give. */
      struct rdzv_slice t = {NULL, 0};
      char why[260];
      rdzv_items_get(&m->keys, 0, &t);
      snprintf(why, sizeof(why), "refused by a standby root: %.*s",
               (int)(t.n < 220 ? t.n : 220), t.n ? (const char *)t.p : "");
      follow_leader(u, m);
      up_reset(u, why, RDZV_ENOT_LEADER);
      return false;
    }
    if (m->type == hello_type && m->req_id == u->hello_id &&
        m->status != 0 && (m->status == RDZV_EJOB_MISMATCH ||
                           cand_left(u, false))) {
      /* Another job's daemon, this daemon itself (its range holds its own
       * port), or another refusal: the next candidate. */
      struct rdzv_slice t = {NULL, 0};
      rdzv_items_get(&m->keys, 0, &t);
      rdzv__log_job(u->d, 2, u->job_id, "%s: %.*s", u->cand_text,
                    (int)(t.n < 300 ? t.n : 300), (const char *)t.p);
      up_attempt_failed(u, m->status == RDZV_EJOB_MISMATCH
                               ? "another job's daemon at"
                               : "hello refused by",
                        m->status);
      return false;
    }
    if (m->type != hello_type || m->req_id != u->hello_id ||
        m->status != 0) {
      up_reset(u, "hello refused", m->status ? m->status : RDZV_EHELLO);
      return false;
    }
    if (u->d->auth && !u->auth_sent) {
      /* It asked for no proof: it does not hold the job's secret (a fake
       * parent, or one started without --secret-file): not trusted. */
      u->d->stats.auth_parent_refused++;
      rdzv__log_auth_job(u->d, u->job_id,
                         "%s asked for no proof of the job's "
                         "secret: not trusted as this node's parent",
                         u->cand_text);
      up_attempt_failed(u, "a daemon that asks for no job secret (not "
                           "trusted) at", RDZV_EAUTH);
      return false;
    }
    if (m->a > 0 && m->a <= UINT32_MAX)
      u->parent_frame = (uint32_t)m->a;
    adopt_parent_liveness(u, m);
    uint64_t inc = (uint64_t)m->b;
    uint64_t *known = &u->incs[u->addr_idx];
    bool restarted = *known != 0 && inc != *known;
    *known = inc;
    /* The roots of an etcd-backed service share one incarnation: moving
     * to another of them with a different one is a restart too (its
     * state was lost: etcd wiped, another prefix). */
    if (m->flags & RDZV_F_SHARED_INC) {
      restarted = restarted || (u->shared_inc != 0 && inc != u->shared_inc);
      u->shared_inc = inc;
    }
    if (u->addr_idx == 0)
      learn_ancestors(u, m);
    if (restarted && u->on_restart != NULL)
      u->on_restart(u->restart_arg);
    up_ready(u);
    return true;
  }
  if ((m->type == RDZV_MSG_PING || m->type == RDZV_MSG_INVAL) &&
      u->state == UP_READY && copies_frame(u, m))
    return true;
  struct upreq *r = NULL;
  uint32_t id = m->req_id;
  HASH_FIND(hh, u->reqs, &id, sizeof(id), r);
  if (r != NULL && m->status == RDZV_EFENCED) {
    struct rdzv_slice t = {NULL, 0};
    rdzv_items_get(&m->keys, 0, &t);
    fence(u, "a request refused as stale by", t.p, t.n);
  } else if (r != NULL && u->fenced && !u->heard_after &&
             r->seq > u->fence_seq) {
    u->heard_after = true; /* any answer but a fence: it is heard again */
  }
  if (r != NULL && (m->flags & RDZV_F_PARTIAL) && r->cb != NULL)
    r->cb(u->d, m, r->arg); /* more replies will follow */
  else if (r != NULL)
    complete(u, r, m);
  return true;
}

/* Most bytes one frame's header may make the read buffer reserve at once
 * (bigger frames grow it by doubling as they arrive). */
#define UP_RESERVE_MAX ((size_t)64 << 20)

static void up_on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf) {
  struct upstream *u = h->data;
  (void)sz;
  /* Once a big frame's header is in (a frame starts the buffer: what was
   * decoded went), room for exactly the rest of it, and a read of no more:
   * a big reply (a 100 KB id table) then lands alone in one allocation
   * that becomes its shared buffer (up_on_read), with no regrowth. */
  size_t want = u->in.len > 4096 ? u->in.len : 4096, limit = 0;
  if (u->in.len >= RDZV_WIRE_HEADER_BYTES) {
    const uint8_t *p = u->in.data + 12; /* body_len (wire.h) */
    size_t frame = RDZV_WIRE_HEADER_BYTES + ((size_t)p[0] | (size_t)p[1] << 8 |
                                             (size_t)p[2] << 16 |
                                             (size_t)p[3] << 24);
    if (frame > u->in.len && frame - u->in.len <= UP_RESERVE_MAX &&
        frame >= u->d->cfg.share_min_bytes) {
      want = limit = frame - u->in.len;
      if (u->in.cap < frame + 1) { /* the frame and a NUL */
        size_t cap = 0;
        uint8_t *np = rdzv__blob_spare_take(frame + 1, &cap);
        if (np != NULL) { /* warm memory a big frame left (up_on_read) */
          memcpy(np, u->in.data, u->in.len);
          free(u->in.data);
        } else if ((np = realloc(u->in.data, frame + 1)) != NULL) {
          cap = frame + 1;
        }
        if (np != NULL) {
          u->in.data = np;
          u->in.cap = cap;
        }
      }
    }
  }
  if (rdzv_buf_reserve(&u->in, want) < 0) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = (char *)u->in.data + u->in.len;
  buf->len = u->in.cap - u->in.len;
  if (limit > 0 && buf->len > limit)
    buf->len = limit;
}

/* Moves the items' bytes from the buffer from to the one at to, whose
 * bytes at the same offsets are equal. */
static void repoint(struct rdzv_items *it, const uint8_t *from,
                    const uint8_t *to) {
  if (it->raw != NULL)
    it->raw = to + (it->raw - from);
}

static void up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct upstream *u = s->data;
  (void)buf;
  if (nread < 0) {
    int err = nread == UV_EOF ? RDZV_ECONN_CLOSED : (int)nread;
    if (u->state == UP_HELLO)
      up_attempt_failed(u, "read from", err); /* closed before its hello */
    else
      up_reset(u, "read", err);
    return;
  }
  u->in.len += (size_t)nread;
  u->d->stats.bytes_in += (uint64_t)nread;
  u->last_rx_ms = uv_now(u->d->loop);
  size_t off = 0;
  u->refs++;
  for (;;) {
    struct rdzv_msg m;
    size_t used;
    /* Replies may exceed the request limit (a gather returns count
     * contributions); the parent is one of ours, so only the u32 length
     * bounds them. */
    int rc = rdzv_msg_decode(u->in.data + off, u->in.len - off, UINT32_MAX,
                             &m, &used);
    if (rc == RDZV_ENEEDMORE)
      break;
    if (rc < 0) {
      if (u->state == UP_HELLO)
        up_attempt_failed(u, "undecodable bytes (not rdzvd?) from", rc);
      else
        up_reset(u, "undecodable reply", rc);
      off = 0;
      break;
    }
    /* A big frame is handled from a blob (the read buffer itself when it
     * holds only this frame, else a copy), so that what the node passes
     * on from it is written from that one buffer: to its children, its
     * ranks, its cache (store/daemon/transport: frame_blob). */
    struct rdzv_blob *fb = NULL;
    if (used >= u->d->cfg.share_min_bytes && used > 0) {
      uint64_t h = 0;
      struct rdzv_blob *same =
          off == 0 && used == u->in.len &&
                  used >= RDZV_BLOB_INTERN_MIN_BYTES
              ? rdzv__blob_intern_find(u->in.data, (uint32_t)used,
                                       RDZV_WIRE_HEADER_BYTES, &h)
              : NULL;
      if (same != NULL) {
        /* Another daemon of this thread holds the same body (blob.h:
         * interning): m refers to its copy at the same offsets (the
         * header, already decoded, may differ), and the read buffer is
         * left warm for the next big frame. */
        fb = rdzv__blob_ref(same);
        u->d->stats.bytes_interned += used;
        repoint(&m.keys, u->in.data, fb->data);
        repoint(&m.vals, u->in.data, fb->data);
        rdzv__blob_spare_give(u->in.data, u->in.cap);
        u->in = (struct rdzv_buf){0};
      } else if (off == 0 && used == u->in.len) {
        fb = rdzv__blob_take(u->in.data, (uint32_t)used, u->in.cap);
        if (fb != NULL && used >= RDZV_BLOB_INTERN_MIN_BYTES)
          rdzv__blob_intern_add(fb, RDZV_WIRE_HEADER_BYTES, h);
        u->in = (struct rdzv_buf){0}; /* the blob's now (or freed: lost) */
      } else if ((fb = rdzv__blob_new(u->in.data + off, (uint32_t)used)) !=
                 NULL) {
        rdzv_msg_decode(fb->data, used, UINT32_MAX, &m, &used);
      }
    }
    off += used;
    bool alive = true;
    if (fb == NULL && u->in.data == NULL) {
      /* Out of memory while taking the buffer: the frame is gone; the
       * connection is reset (its requests are sent again). */
      up_reset(u, "out of memory reading", RDZV_ENOMEM);
      alive = false;
    } else {
      struct rdzv_blob *saved = u->d->frame_blob;
      if (fb != NULL)
        u->d->frame_blob = fb;
      alive = up_frame(u, &m);
      u->d->frame_blob = saved;
      rdzv__blob_unref(fb);
    }
    if (!alive || u->in.data == NULL) {
      off = 0; /* reset, or the buffer went with the frame: nothing left */
      break;
    }
  }
  if (off > 0)
    rdzv_buf_consume(&u->in, off);
  if (u->in.len == 0)
    rdzv_buf_free(&u->in);
  up_unref(u);
}

/* ---- connect --------------------------------------------------------------- */

static void send_hello(struct upstream *u) {
  struct rdzv_slice keys[2] = {
      {(const uint8_t *)u->job_id, (uint32_t)strlen(u->job_id)},
      {(const uint8_t *)u->d->cfg.name, (uint32_t)strlen(u->d->cfg.name)}};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.req_id = u->hello_id = u->next_id++;
  m.a = RDZV_ROLE_NODE;
  m.b = (int64_t)u->d->incarnation; /* a daemon refuses itself as parent */
  m.keys.n = 2;
  m.keys.v = keys;
  /* With the job's secret: a fresh nonce, which the parent's proof must
   * bind; one this daemon recognizes, so that this hello, sent back to
   * this daemon's own port by a fake parent, is refused there. */
  struct rdzv_slice nonce = {u->cnonce, sizeof(u->cnonce)};
  u->auth_sent = false;
  if (u->d->auth) {
    /* A node with secrets takes no parent it cannot check: without this
     * job's (a --secret-dir file gone, unreadable), the ranks that proved
     * it earlier would be served by whatever asks no proof. */
    if (!up_has_secret(u) ||
        rdzv_auth_own_nonce(u->d->own_key, u->cnonce) < 0) {
      u->d->stats.auth_parent_refused++;
      rdzv__log_auth_job(u->d, u->job_id,
                         "%s: this node holds no secret of the "
                         "job (its --secret-dir file is missing or unreadable) "
                         "to check a parent with: not connecting",
                         u->cand_text);
      up_attempt_failed(u, "no secret of the job (--secret-dir) to check "
                           "the parent with, at", RDZV_EAUTH);
      return;
    }
    m.vals.n = 1;
    m.vals.v = &nonce;
  }
  rdzv_msg_encode(&m, &u->out);
  u->d->stats.frames_out++;
  up_set_state(u, UP_HELLO);
  u->last_rx_ms = uv_now(u->d->loop);
  uv_read_start(&u->h.stream, up_on_alloc, up_on_read);
  up_start_write(u);
}

static void on_connect(uv_connect_t *req, int status) {
  struct upstream *u = req->data;
  if (u->state != UP_CONNECTING) {
    up_unref(u);
    return;
  }
  if (status < 0)
    up_attempt_failed(u, "connect to", status);
  else
    send_hello(u);
  up_unref(u);
}

/* Connects to the round's current candidate (u->cand at u->port), with
 * its own deadline. */
static void connect_cand(struct upstream *u) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  memcpy(&ss, u->cand->ai_addr,
         u->cand->ai_addrlen < sizeof(ss) ? u->cand->ai_addrlen : sizeof(ss));
  /* sin_port and sin6_port sit at the same offset. */
  ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)u->port);
  char ip[64] = "?";
  if (ss.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
    snprintf(u->cand_text, sizeof(u->cand_text), "[%s]:%d", ip, u->port);
  } else {
    uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
    snprintf(u->cand_text, sizeof(u->cand_text), "%s:%d", ip, u->port);
  }
  u->ncands_tried++;
  uv_timer_start(&u->timer, on_attempt_timeout, u->d->cfg.connect_timeout_ms,
                 0);
  uv_tcp_init(u->d->loop, &u->h.tcp);
  u->h.handle.data = u;
  u->have_stream = true;
  uv_tcp_nodelay(&u->h.tcp, 1);
  up_set_state(u, UP_CONNECTING);
  u->last_rx_ms = uv_now(u->d->loop);
  u->creq.data = u;
  u->refs++;
  int rc = uv_tcp_connect(&u->creq, &u->h.tcp, (const struct sockaddr *)&ss,
                          on_connect);
  if (rc < 0) {
    u->refs--;
    up_attempt_failed(u, "connect to", rc);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  struct upstream *u = req->data;
  if (u->state != UP_RESOLVING) {
    uv_freeaddrinfo(res);
    up_unref(u);
    return;
  }
  struct addrinfo *a = res;
  while (a != NULL && a->ai_family != AF_INET && a->ai_family != AF_INET6)
    a = a->ai_next;
  if (status < 0 || a == NULL) {
    uv_freeaddrinfo(res);
    u->cand_text[0] = '\0';
    up_reset(u, "resolve", status < 0 ? status : RDZV_EBAD_ADDR);
  } else {
    u->res = res; /* freed when the round ends */
    u->cand = a;
    u->port = u->port_first;
    connect_cand(u);
  }
  up_unref(u);
}

static void up_connect(struct upstream *u) {
  const char *a = up_addr(u);
  if (u->next_cand && u->cand != NULL) {
    u->next_cand = false;
    connect_cand(u);
    return;
  }
  free_cands(u);
  u->cand_text[0] = '\0';
  u->ncands_tried = 0;
  u->nother_job = 0;
  u->attempts++;
  if (strncmp(a, "unix:", 5) == 0) {
    uv_pipe_init(u->d->loop, &u->h.pipe, 0);
    u->h.handle.data = u;
    u->have_stream = true;
    up_set_state(u, UP_CONNECTING);
    u->last_rx_ms = uv_now(u->d->loop);
    u->creq.data = u;
    u->refs++;
    uv_pipe_connect(&u->creq, &u->h.pipe, a + 5, on_connect);
    return;
  }
  if (strncmp(a, "tcp:", 4) == 0)
    a += 4;
  char host[256];
  const char *colon = strrchr(a, ':');
  size_t hl = colon ? (size_t)(colon - a) : 0;
  if (hl >= 2 && a[0] == '[' && a[hl - 1] == ']') {
    a++;
    hl -= 2;
  }
  if (colon == NULL || hl == 0 || hl >= sizeof(host) ||
      rdzv_config_port_range(colon + 1, &u->port_first, &u->port_last) < 0 ||
      u->port_first == 0) {
    up_reset(u, "parent address", RDZV_EBAD_ADDR);
    return;
  }
  memcpy(host, a, hl);
  host[hl] = '\0';
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  up_set_state(u, UP_RESOLVING);
  u->gai.data = u;
  u->refs++;
  /* No service: the ports are set per candidate. */
  int rc = uv_getaddrinfo(u->d->loop, &u->gai, on_resolved, host, NULL,
                          &hints);
  if (rc < 0) {
    u->refs--;
    up_reset(u, "resolve", rc);
  }
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
  refresh_ancestors(u);
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
  u->last_beat_ms = uv_now(d->loop);
  uv_timer_start(&u->beat, on_beat, d->cfg.heartbeat_ms, d->cfg.heartbeat_ms);
  up_connect(u);
  return u;
}

static void on_timer_closed(uv_handle_t *h) { up_unref(h->data); }

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
  up_unref(u);
}

/* Writes u->out after what is being written, then shuts the write side
 * down and closes the stream. Returns false if it could not start (then
 * nothing was taken). */
static bool flush_and_close(struct upstream *u) {
  uv_shutdown_t *sreq = malloc(sizeof(*sreq));
  if (sreq == NULL)
    return false;
  if (u->out.len > 0) {
    uv_write_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init((char *)u->out.data, (unsigned)u->out.len);
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
  up_set_state(u, UP_CLOSED);
  fail_requests(u, RDZV_ECANCELED, true, "");
  uv_close((uv_handle_t *)&u->expire, on_timer_closed);
  uv_close((uv_handle_t *)&u->beat, on_timer_closed);
  if (u->have_stream) {
    u->have_stream = false;
    if (!(flush && ready && flush_and_close(u))) {
      u->refs++;
      uv_close(&u->h.handle, on_stream_closed);
    }
  }
  uv_close((uv_handle_t *)&u->timer, on_timer_closed);
  up_unref(u);
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
    up_start_write(u);
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
               up_addr(u), limit);
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
    snprintf(err, sizeof(err), "node %s could not send a %s to its parent %s: "
             "%s", u->d->cfg.name, rdzv_msg_type_name(m->type), up_addr(u),
             rdzv_strerror(rc));
    return split_failed(u, cb, arg, rc, err);
  }
  return 0;
}
