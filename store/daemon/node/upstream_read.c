/* A node's link to its parent (upstream_int.h): the frames that come
 * from the parent. The hello's reply (a challenge answered with the
 * node's proof, a standby root's redirect to the leader, the parent's
 * frame limit, liveness and ancestors), ERROR frames, pings and
 * invalidations, and the replies that complete requests. */
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

/* ---- read path ------------------------------------------------------------- */

static void up_ready(struct upstream *u) {
  bool again = u->was_up;
  if (u->was_up)
    rdzv__log_job(u->d, 1, u->job_id, "parent %s back after %" PRIu64 " ms",
                  rdzv__up_addr(u), uv_now(u->d->loop) - u->down_since_ms);
  u->was_up = true;
  rdzv__up_set_state(u, UP_READY);
  uv_timer_stop(&u->timer); /* the attempt's deadline */
  rdzv__up_free_cands(u);
  u->backoff_ms = 10;
  u->attempts = 0;
  u->redirects = 0;
  if (u->addr_idx > 0)
    u->d->stats.reattached++;
  rdzv__up_home_ready(u);
  /* In the queue's order: what the lost connection carried first, then
   * what came meanwhile. */
  struct upreq *r;
  while ((r = TAILQ_FIRST(&u->queue)) != NULL) {
    rdzv__up_unqueue(u, r);
    if (rdzv_buf_append(&u->out, r->frame.data, r->frame.len) < 0) {
      rdzv__up_fail_one(u, r, RDZV_ENOMEM, "out of memory at the node");
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
    rdzv__up_send_inval(u, 0);
    rdzv__up_send_ping(u);
  }
  if (again && u->on_reconnect != NULL)
    u->on_reconnect(u->restart_arg);
  rdzv__up_start_write(u);
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
  rdzv__up_refresh_ancestors(u);
}

/* A standby root refused the hello naming the leader (vals[0]): it is
 * tried next, found among the addresses known or added to the ancestors
 * (the roots' list). */
static void follow_leader(struct upstream *u, const struct rdzv_msg *m) {
  struct daemon *d = u->d;
  struct rdzv_slice t = {NULL, 0}, l = {NULL, 0};
  rdzv_items_get(&m->keys, 0, &t);
  rdzv__log_job(d, 2, u->job_id, "root %s: %.*s", rdzv__up_addr(u),
                (int)(t.n < 300 ? t.n : 300), (const char *)t.p);
  char leader[256];
  if (rdzv_items_get(&m->vals, 0, &l) < 0 || l.n == 0 || l.n >= sizeof(leader))
    return;
  memcpy(leader, l.p, l.n);
  leader[l.n] = '\0';
  if (strcmp(leader, rdzv__up_addr(u)) == 0)
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
  rdzv__up_refresh_ancestors(u);
  u->redirect = (int)(u->naddrs - 1);
}

/* A parent with a shorter liveness timeout than this node's heartbeat
 * would declare it lost between two pings: ping at least three times
 * within the parent's timeout (said once, at the default level). */
static void adopt_parent_liveness(struct upstream *u,
                                  const struct rdzv_msg *m) {
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
                        rdzv__up_addr(u), live, u->d->cfg.name, beat,
                        u->d->cfg.heartbeat_ms);
  uv_timer_set_repeat(&u->beat, beat);
  uv_timer_again(&u->beat);
}

/* Whether this node holds its job's secret (and fills key). */
static bool up_secret(struct upstream *u, uint8_t *key, size_t *klen) {
  return u->d->auth && rdzv__job_secret(u->d, (const uint8_t *)u->job_id,
                                        strlen(u->job_id), key, klen) == 1;
}

bool rdzv__up_has_secret(struct upstream *u) {
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
                           (const uint8_t *)u->job_id, jn, parent_port,
                           u->cnonce, sn.p, want) < 0 ||
           !rdzv_auth_equal(want, proof.p, sizeof(want)))
    bad = "could not prove the job's secret (another job's daemon, another "
          "secret, or a fake)";
  if (bad != NULL) {
    rdzv_auth_wipe(key, sizeof(key));
    u->d->stats.auth_parent_refused++;
    rdzv__log_auth_job(u->d, u->job_id,
                       "%s %s: not trusted as this node's parent", u->cand_text,
                       bad);
    rdzv__up_attempt_failed(
        u, "a daemon that could not prove the job's secret at", RDZV_EAUTH);
    return false;
  }
  rdzv_auth_proof(key, klen, RDZV_AUTH_CLIENT, (const uint8_t *)u->job_id, jn,
                  parent_port, u->cnonce, sn.p, mine);
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
  rdzv__up_start_write(u);
  return true;
}

/* The probe's answer (u->probe, UP_HELLO): the chain above the parent,
 * learned; a refusal that means another candidate (another job's daemon,
 * this node itself) or a parent that is not ready, tried again; a parent
 * that knows no probes (an older rdzvd: RDZV_EBAD_ROLE), given up (the
 * first job's hello tells the chain). Always false: the probe's
 * connection is over. */
static bool probe_frame(struct upstream *u, const struct rdzv_msg *m) {
  struct daemon *d = u->d;
  bool reply = m->type == RDZV_MSG_HELLO && (m->flags & RDZV_F_REPLY) &&
               m->req_id == u->hello_id;
  if (reply && m->status == 0) {
    /* A link away from the parent asks only whether it is back (and
     * whether the parent reaches the root, which incarnation it is): the
     * chain stays what the job's hellos told (they are authenticated). */
    u->probe_inc = (uint64_t)m->b;
    u->probe_away = (m->flags & RDZV_F_ROOT_AWAY) != 0;
    if (!u->probe_once) {
      learn_ancestors(u, m);
      d->parent_answered = true;
    }
    char list[600];
    size_t used = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < d->nancestors && used + 260 < sizeof(list); i++)
      used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
                               i ? ", " : "", d->ancestors[i]);
    /* A link away from the parent probes it often: said at debug level. */
    rdzv__log(d, u->probe_once ? 2 : 1,
              "node %s: parent %s answered its probe%s%s; above it: %s",
              d->cfg.name, rdzv__up_addr(u),
              m->a == 1 ? " (a standby root)" : "",
              u->probe_away ? " (its own link toward the root is down)" : "",
              d->nancestors ? list : "none (it is the root)");
    d->stats.probes_learned++;
    /* A standby root told the chain, but is no place to come back to. */
    rdzv__up_probe_end(u, m->a != 1);
    return false;
  }
  /* An older rdzvd refuses the role, or (an empty job) the job id first. */
  if (m->status == RDZV_EBAD_ROLE || m->status == RDZV_EJOB_ID_MISSING) {
    rdzv__log(d, u->probe_once ? 2 : 1,
              "node %s: parent %s answers no probe (an older rdzvd): the "
              "daemons above it are learned with the first job",
              d->cfg.name, rdzv__up_addr(u));
    if (!u->probe_once)
      d->parent_answered = true; /* it lives all the same */
    rdzv__up_probe_end(u, false);
    return false;
  }
  rdzv__up_attempt_failed(u,
                          m->type == RDZV_MSG_ERROR ? "an ERROR frame from"
                          : reply                   ? "probe refused by"
                                                    : "not a probe reply from",
                          m->status ? m->status : RDZV_EHELLO);
  return false;
}

/* Returns false when the connection was reset. */
static bool up_frame(struct upstream *u, const struct rdzv_msg *m) {
  u->d->stats.frames_in++;
  if (u->probe && u->state == UP_HELLO)
    return probe_frame(u, m);
  /* Before the hello reply, anything but that reply (an ERROR frame: the
   * daemon there is full or refuses us; a frame no rdzvd sends: not a
   * parent) ends this attempt: the next candidate, if the round has one. */
  if (u->state == UP_HELLO && rdzv__up_cand_left(u, false) &&
      !(m->type == (u->auth_sent ? RDZV_MSG_AUTH : RDZV_MSG_HELLO) &&
        (m->flags & RDZV_F_REPLY) && m->req_id == u->hello_id)) {
    rdzv__up_attempt_failed(u,
                            m->type == RDZV_MSG_ERROR
                                ? "an ERROR frame from"
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
      rdzv__up_fence(u, "declared lost by", t.p, t.n);
    if (bad != NULL) {
      char text[400];
      snprintf(text, sizeof(text), "parent %s refused it: %.*s",
               rdzv__up_addr(u), (int)(t.n < 300 ? t.n : 300),
               (const char *)t.p);
      rdzv__up_fail_one(u, bad, m->status ? m->status : RDZV_EPROTO, text);
    }
    u->stay = true;
    rdzv__up_reset(u, "error frame", m->status ? m->status : RDZV_EPROTO);
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
      rdzv__up_reset(u, why, RDZV_ENOT_LEADER);
      return false;
    }
    if (m->type == hello_type && m->req_id == u->hello_id && m->status != 0 &&
        (m->status == RDZV_EJOB_MISMATCH || rdzv__up_cand_left(u, false))) {
      /* Another job's daemon, this daemon itself (its range holds its own
       * port), or another refusal: the next candidate. */
      struct rdzv_slice t = {NULL, 0};
      rdzv_items_get(&m->keys, 0, &t);
      rdzv__log_job(u->d, 2, u->job_id, "%s: %.*s", u->cand_text,
                    (int)(t.n < 300 ? t.n : 300), (const char *)t.p);
      rdzv__up_attempt_failed(u,
                              m->status == RDZV_EJOB_MISMATCH
                                  ? "another job's daemon at"
                                  : "hello refused by",
                              m->status);
      return false;
    }
    if (m->type != hello_type || m->req_id != u->hello_id || m->status != 0) {
      rdzv__up_reset(u, "hello refused", m->status ? m->status : RDZV_EHELLO);
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
      rdzv__up_attempt_failed(u,
                              "a daemon that asks for no job secret (not "
                              "trusted) at",
                              RDZV_EAUTH);
      return false;
    }
    if (m->a > 0 && m->a <= UINT32_MAX)
      u->parent_frame = (uint32_t)m->a;
    adopt_parent_liveness(u, m);
    uint64_t inc = (uint64_t)m->b;
    uint64_t *known = &u->incs[u->addr_idx];
    bool restarted = u->home_hello ? rdzv__up_home_arrived(u, inc)
                                   : *known != 0 && inc != *known;
    *known = inc;
    u->home_hello = false;
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
      u->state == UP_READY && rdzv__up_copies_frame(u, m))
    return true;
  struct upreq *r = NULL;
  uint32_t id = m->req_id;
  HASH_FIND(hh, u->reqs, &id, sizeof(id), r);
  if (r != NULL && m->status == RDZV_EFENCED) {
    struct rdzv_slice t = {NULL, 0};
    rdzv_items_get(&m->keys, 0, &t);
    rdzv__up_fence(u, "a request refused as stale by", t.p, t.n);
  } else if (r != NULL && u->fenced && !u->heard_after &&
             r->seq > u->fence_seq) {
    u->heard_after = true; /* any answer but a fence: it is heard again */
  }
  if (r != NULL && (m->flags & RDZV_F_PARTIAL) && r->cb != NULL)
    r->cb(u->d, m, r->arg); /* more replies will follow */
  else if (r != NULL)
    rdzv__up_complete(u, r, m);
  return true;
}

/* Most bytes one frame's header may make the read buffer reserve at once
 * (bigger frames grow it by doubling as they arrive). */
#define UP_RESERVE_MAX ((size_t)64 << 20)

void rdzv__up_on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf) {
  struct upstream *u = h->data;
  (void)sz;
  if (u->tls != NULL) {
    rdzv__up_tls_alloc(u, buf);
    return;
  }
  /* Once a big frame's header is in (a frame starts the buffer: what was
   * decoded went), room for exactly the rest of it, and a read of no more:
   * a big reply (a 100 KB id table) then lands alone in one allocation
   * that becomes its shared buffer (up_on_read), with no regrowth. */
  size_t want = u->in.len > 4096 ? u->in.len : 4096, limit = 0;
  if (u->in.len >= RDZV_WIRE_HEADER_BYTES) {
    const uint8_t *p = u->in.data + 12; /* body_len (wire.h) */
    size_t frame =
        RDZV_WIRE_HEADER_BYTES + ((size_t)p[0] | (size_t)p[1] << 8 |
                                  (size_t)p[2] << 16 | (size_t)p[3] << 24);
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

void rdzv__up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct upstream *u = s->data;
  (void)buf;
  if (nread < 0) {
    int err = nread == UV_EOF ? RDZV_ECONN_CLOSED : (int)nread;
    if (u->state == UP_HELLO)
      rdzv__up_attempt_failed(u, "read from",
                              err); /* closed before its hello */
    else
      rdzv__up_reset(u, "read", err);
    return;
  }
  u->d->stats.bytes_in += (uint64_t)nread;
  u->last_rx_ms = uv_now(u->d->loop);
  if (u->tls == NULL)
    u->in.len += (size_t)nread;
  else if (!rdzv__up_tls_in(u, (size_t)nread))
    return; /* the session failed: the attempt or the link did */
  size_t off = 0;
  u->refs++;
  for (;;) {
    struct rdzv_msg m;
    size_t used;
    /* Replies may exceed the request limit (a gather returns count
     * contributions); the parent is one of ours, so only the u32 length
     * bounds them. */
    int rc = rdzv_msg_decode(u->in.data + off, u->in.len - off, UINT32_MAX, &m,
                             &used);
    if (rc == RDZV_ENEEDMORE)
      break;
    if (rc < 0) {
      if (u->state == UP_HELLO)
        rdzv__up_attempt_failed(u, "undecodable bytes (not rdzvd?) from", rc);
      else
        rdzv__up_reset(u, "undecodable reply", rc);
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
          off == 0 && used == u->in.len && used >= RDZV_BLOB_INTERN_MIN_BYTES
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
      rdzv__up_reset(u, "out of memory reading", RDZV_ENOMEM);
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
  rdzv__up_unref(u);
}
