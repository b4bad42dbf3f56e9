/* A node's link to its parent (upstream_int.h): the parent's lease on
 * the node's copies of mutable keys, renewed by ping replies, and the
 * invalidation stream (RDZV_MSG_INVAL, keys/copies.h); and what /readyz
 * asks of the link: attached, the root reachable, not fenced. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <uthash.h>

#include "store/auth/auth.h"
#include "store/daemon/blob.h"
#include "store/daemon/node/node_int.h"
#include "store/daemon/node/upstream_int.h"

/* ---- copies: the lease and the invalidation stream ---------------------- */

/* A ready connection's lease and invalidation stream end (it failed):
 * the node drops its copies, and those below it go too. */
void rdzv__up_lease_end(struct upstream *u) {
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

void rdzv__up_send_ping(struct upstream *u) {
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
    rdzv__up_start_write(u);
  }
}

void rdzv__up_send_inval(struct upstream *u, uint64_t ack) {
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
    rdzv__up_start_write(u);
  }
}

/* A PING or INVAL reply on a ready connection: true when it was one
 * (consumed here). */
bool rdzv__up_copies_frame(struct upstream *u, const struct rdzv_msg *m) {
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
  if (m->type != RDZV_MSG_INVAL || m->req_id != u->inval_id || u->inval_id == 0)
    return false;
  u->inval_id = 0;
  if (m->status != 0) {
    /* A parent that keeps no invalidation stream for this node: no lease
     * will count (nothing is served from copies). */
    rdzv__log_job(u->d, 1, u->job_id,
                  "parent %s refused the invalidation "
                  "stream: %s",
                  rdzv__up_addr(u), rdzv_strerror(m->status));
    u->lease_until = 0;
    return true;
  }
  if ((uint64_t)m->a > u->inval_recv)
    u->inval_recv = (uint64_t)m->a;
  u->d->stats.invalidations_received++;
  if (u->on_inval != NULL)
    u->on_inval(u->restart_arg, u->conn_gen, m);
  else
    rdzv__up_send_inval(u, (uint64_t)m->a);
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
  rdzv__up_send_ping(u);
}

void rdzv__upstream_inval_ack(struct upstream *u, uint64_t gen, uint64_t seq) {
  if (u->state != UP_READY || gen != u->conn_gen || u->inval_id != 0)
    return;
  rdzv__up_send_inval(u, seq);
}

/* The parent refused this node as stale (declared lost, or a stale
 * request): what it said (n bytes of text). */
void rdzv__up_fence(struct upstream *u, const char *what, const uint8_t *text,
                    size_t n) {
  u->d->stats.fenced_here++;
  u->fenced = true;
  u->heard_after = false;
  u->fenced_ms = uv_now(u->d->loop);
  u->fence_seq = u->seq;
  snprintf(u->fence_why, sizeof(u->fence_why), "%s %s: %.*s", what,
           rdzv__up_addr(u), (int)(n < 150 ? n : 150), (const char *)text);
}

bool rdzv__upstream_root_reachable(const struct upstream *u, char *why,
                                   size_t n) {
  if (u->state != UP_READY) {
    if (why != NULL)
      snprintf(why, n, "parent %s not attached (%s)",
               rdzv__up_addr(u)[0] ? rdzv__up_addr(u) : "(none)",
               rdzv__up_state_names[u->state]);
    return false;
  }
  if (u->root_away && why != NULL)
    snprintf(why, n,
             "%s %s is attached but says its own link toward the "
             "root is down",
             u->addr_idx == 0 ? "parent" : "ancestor", rdzv__up_addr(u));
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
           rdzv__up_addr(u)[0] ? rdzv__up_addr(u) : "(none)",
           rdzv__up_state_names[u->state],
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
