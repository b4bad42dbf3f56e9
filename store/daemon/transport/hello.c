/* rdzvd transport: a connection's hello (transport_int.h). Refused (a
 * peer of another job, this daemon itself, a standby root, a limit), or
 * challenged when the job has a secret (the peer's proof comes in an
 * RDZV_MSG_AUTH frame), then admitted: the connection is READY, bound to
 * its job, and the reply says this daemon's frame limit, incarnation,
 * liveness timeout and ancestors. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/auth/auth.h"
#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

/* A hello refused: status with why (keys[0]) and, from a standby root
 * (RDZV_ENOT_LEADER), the leader's address (vals[0], when known); then
 * the connection closes once it is written. */
static void refuse_hello(struct conn *c, const struct rdzv_msg *m, int status,
                         const char *text, const char *leader) {
  struct rdzv_slice t = {(const uint8_t *)text, (uint32_t)strlen(text)};
  struct rdzv_slice l = {(const uint8_t *)leader, (uint32_t)strlen(leader)};
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, status);
  r.flags = RDZV_F_REPLY;
  r.keys.n = 1;
  r.keys.v = &t;
  r.vals.n = l.n > 0 ? 1 : 0;
  r.vals.v = &l;
  rdzv__log(c->d, 2, "conn %s: hello refused: %s", c->name, text);
  rdzv__conn_last_frame(c, &r, CONN_CLOSING);
}

static void hello_admit(struct conn *c, const struct rdzv_msg *m,
                        const struct rdzv_msg *req);

/* This daemon's chain up to the root (chain: RDZV_MAX_ANCESTORS slices
 * at most, pointing into d), where a child goes when this daemon is
 * lost: its parent and the ancestors above it; a root its peers (the
 * other roots of an etcd-backed service). A child on another host gets
 * none of the addresses that mean this host only (there they would name
 * its own host's daemons). Returns how many. */
static uint32_t hello_chain(struct conn *c, struct rdzv_slice *chain) {
  struct daemon *d = c->d;
  uint32_t nchain = 0;
  bool remote = d->cfg.parent[0] != '\0' && rdzv__conn_peer_remote(c);
  if (d->cfg.parent[0] != '\0' &&
      !(remote && rdzv__conn_addr_local(d->cfg.parent))) {
    chain[nchain].p = (const uint8_t *)d->cfg.parent;
    chain[nchain++].n = (uint32_t)strlen(d->cfg.parent);
  }
  for (uint32_t i = 0; d->cfg.parent[0] != '\0' && i < d->nancestors &&
                       nchain < RDZV_MAX_ANCESTORS;
       i++) {
    if (remote && rdzv__conn_addr_local(d->ancestors[i]))
      continue;
    chain[nchain].p = (const uint8_t *)d->ancestors[i];
    chain[nchain++].n = (uint32_t)strlen(d->ancestors[i]);
  }
  for (uint32_t i = 0;
       d->cfg.parent[0] == '\0' && i < d->npeers && nchain < RDZV_MAX_ANCESTORS;
       i++) {
    if (remote && rdzv__conn_addr_local(d->peers[i]))
      continue;
    chain[nchain].p = (const uint8_t *)d->peers[i];
    chain[nchain++].n = (uint32_t)strlen(d->peers[i]);
  }
  return nchain;
}

/* A node's probe at its start (wire.h's RDZV_ROLE_PROBE): no job, no
 * proof; the chain of daemons above this one, then the connection
 * closes. Refused from this daemon itself, and by a daemon of one job
 * when the probe names another. */
static void answer_probe(struct conn *c, const struct rdzv_msg *m,
                         struct rdzv_slice job) {
  struct daemon *d = c->d;
  char text[1024];
  if (m->b != 0 && (uint64_t)m->b == d->incarnation) {
    snprintf(text, sizeof(text),
             "daemon %s at %s is this node itself: a node cannot be its own "
             "parent",
             d->cfg.name, d->bound_addr);
    refuse_hello(c, m, RDZV_EHELLO, text, "");
    return;
  }
  if (d->cfg.job[0] != '\0' && job.n > 0 &&
      (job.n != strlen(d->cfg.job) || memcmp(job.p, d->cfg.job, job.n) != 0)) {
    snprintf(text, sizeof(text),
             "daemon %s at %s serves job %s only, not job %.*s", d->cfg.name,
             d->bound_addr[0] ? d->bound_addr : d->cfg.unix_path, d->cfg.job,
             (int)(job.n < 255 ? job.n : 255), (const char *)job.p);
    refuse_hello(c, m, RDZV_EJOB_MISMATCH, text, "");
    return;
  }
  struct rdzv_slice chain[RDZV_MAX_ANCESTORS + 1];
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  r.flags = RDZV_F_REPLY;
  /* a = 1: a standby root (it would refuse a job's hello): its chain
   * helps, but a link must not come back to it. */
  char why[400], leader[256];
  why[0] = leader[0] = '\0';
  r.a = d->admit != NULL &&
        !d->admit(d->admit_arg, why, sizeof(why), leader, sizeof(leader));
  /* b: the incarnation a job's hello would get now (hello_admit), so that
   * a link coming back to this daemon knows whether it changed between
   * the probes and the hello; ROOT_AWAY: this daemon's own link toward
   * the root for the job is down (the role says): no place to return to
   * yet. */
  struct job *j;
  for (j = job.n > 0 ? d->jobs : NULL; j != NULL; j = j->next)
    if (strlen(j->id) == job.n && memcmp(j->id, job.p, job.n) == 0)
      break;
  uint64_t epoch = j != NULL && d->role->hello_epoch != NULL
                       ? d->role->hello_epoch(d, j)
                       : 0;
  r.b = (int64_t)(d->incarnation ^ (epoch * 0x9E3779B97F4A7C15ull));
  if (d->role->probe_ready != NULL && !d->role->probe_ready(d, j))
    r.flags |= RDZV_F_ROOT_AWAY;
  r.vals.n = hello_chain(c, chain);
  r.vals.v = chain;
  d->stats.probes_answered++;
  rdzv__log(d, 2, "conn %s: a node's probe answered (%u daemons above)",
            c->name, r.vals.n);
  rdzv__conn_last_frame(c, &r, CONN_CLOSING);
}

/* Who is on the other end, for a log line: "ADDR:PORT" or "unix pid N". */
void rdzv__conn_peer_desc(struct conn *c, char *buf, size_t n) {
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (!c->tcp) {
    snprintf(buf, n, "unix pid %d", c->peer_pid);
    return;
  }
  if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&sa, &len) == 0) {
    if (sa.ss_family == AF_INET) {
      const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
      port = ntohs(a->sin_port);
    } else if (sa.ss_family == AF_INET6) {
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
      port = ntohs(a->sin6_port);
    }
  }
  snprintf(buf, n, "%s:%d", host, port);
}

/* A peer-given string made printable for a log line. */
void rdzv__conn_printable(const struct rdzv_slice *s, char *buf, size_t n) {
  size_t i;
  for (i = 0; s->p != NULL && i < s->n && i + 1 < n; i++)
    buf[i] = s->p[i] >= 0x20 && s->p[i] < 0x7f ? (char)s->p[i] : '?';
  buf[i] = '\0';
}

/* Refuses an authentication: counted, logged (rate-limited) with why
 * (never a secret or a proof), and the same words to every peer, whatever
 * the cause: they tell nothing of the job. */
static void auth_refuse(struct conn *c, uint32_t req_id, struct rdzv_slice job,
                        const char *why) {
  struct daemon *d = c->d;
  char peer[96], jb[128];
  rdzv__conn_printable(&job, jb,
                       sizeof(jb)); /* job may lie in c->auth's hello */
  rdzv__conn_auth_free(c);          /* counted here, not again at the close */
  d->stats.auth_refused++;
  rdzv__conn_peer_desc(c, peer, sizeof(peer));
  rdzv__log_auth(d, "conn %s from %s (job %s): authentication refused: %s",
                 c->name, peer, jb, why);
  rdzv__conn_fail_sent(
      c, req_id, RDZV_EAUTH,
      "authentication failed: this daemon serves only peers that "
      "prove their job's secret (rdzvd --secret-file; the client's "
      "RDZV_SECRET_FILE)",
      CONN_CLOSING);
}

/* With a secret: answers a hello with a challenge (this daemon's nonce
 * and its proof), whether it holds the job's secret or not (then the
 * proof is random, and the peer's answer is refused): a stranger learns
 * nothing of the job. */
static void hello_challenge(struct conn *c, const struct rdzv_msg *m,
                            struct rdzv_slice job) {
  struct daemon *d = c->d;
  struct rdzv_slice cn;
  uint8_t key[RDZV_AUTH_SECRET_MAX_BYTES], sn[RDZV_AUTH_NONCE_BYTES],
      proof[RDZV_AUTH_PROOF_BYTES];
  size_t klen = 0;
  if (rdzv_items_get(&m->vals, 0, &cn) < 0 || cn.n != RDZV_AUTH_NONCE_BYTES) {
    d->stats.auth_no_nonce++;
    auth_refuse(c, 0, job,
                cn.n == 0 || m->vals.n == 0
                    ? "its hello carried no nonce: the peer has no secret"
                    : "its hello's nonce is not 32 bytes");
    return;
  }
  if (rdzv_auth_is_own_nonce(d->own_key, cn.p)) {
    /* This daemon's own hello to a parent, come back to it: its --parent
     * range holds its own port, or whoever took that connection reflects
     * it (a fake parent, which would relay this daemon's proofs between
     * its two sides holding no secret itself). No challenge: its proof
     * is what this daemon, as a child, would take for its parent's. */
    auth_refuse(c, 0, job,
                "its nonce is this daemon's own: its hello to a parent came "
                "back (its --parent range holds its own port, or a fake "
                "parent reflects it)");
    return;
  }
  /* What the hello's admission needs of it, kept until the proof comes:
   * no more (its other items, up to --max-hello-bytes, are not held). */
  struct rdzv_slice keep[2] = {job, {NULL, 0}};
  rdzv_items_get(&m->keys, 1, &keep[1]);
  if (keep[1].n > HELLO_NAME_KEEP)
    keep[1].n = HELLO_NAME_KEEP;
  struct rdzv_msg hk;
  memset(&hk, 0, sizeof(hk));
  hk.type = RDZV_MSG_HELLO;
  hk.req_id = m->req_id;
  hk.a = m->a;
  hk.b = m->b;
  hk.keys.n = 2;
  hk.keys.v = keep;
  struct conn_auth *a = calloc(1, sizeof(*a));
  if (a == NULL || rdzv_msg_encode(&hk, &a->hello) < 0) {
    if (a != NULL)
      rdzv_buf_free(&a->hello);
    free(a);
    rdzv__conn_fail(c, RDZV_ENOMEM, "out of memory");
    return;
  }
  a->known = rdzv__job_secret(d, job.p, job.n, key, &klen) == 1;
  /* The port the peer reached this daemon on (0: a Unix socket): the
   * proofs are bound to it (store/auth/auth.h). */
  uint16_t port = 0;
  struct sockaddr_storage sa;
  int salen = sizeof(sa);
  if (c->tcp &&
      uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&sa, &salen) == 0)
    port = rdzv_auth_port_of(&sa);
  if (!a->known) { /* the same work with a key nobody holds */
    klen = 32;
    rdzv_auth_nonce(key, klen);
  }
  if (rdzv_auth_nonce(sn, sizeof(sn)) < 0 ||
      rdzv_auth_proof(key, klen, RDZV_AUTH_SERVER, job.p, job.n, port, cn.p, sn,
                      proof) < 0 ||
      rdzv_auth_proof(key, klen, RDZV_AUTH_CLIENT, job.p, job.n, port, cn.p, sn,
                      a->expect) < 0) {
    rdzv_auth_wipe(key, sizeof(key));
    rdzv_buf_free(&a->hello);
    free(a);
    rdzv__conn_fail(c, RDZV_EAUTH, "no random numbers for a challenge");
    return;
  }
  rdzv_auth_wipe(key, sizeof(key));
  c->auth = a;
  rdzv__conn_set_state(c, CONN_AUTH_WAIT);
  d->stats.auth_challenged++;
  struct rdzv_slice v[2] = {{sn, sizeof(sn)}, {proof, sizeof(proof)}};
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  r.flags = RDZV_F_REPLY | RDZV_F_CHALLENGE;
  r.vals.n = 2;
  r.vals.v = v;
  if (d->gate != NULL)
    rdzv__conn_send_ungated(c, &r); /* depends on no state the gate holds */
  else
    rdzv__conn_send(c, &r);
}

/* The frame after a challenge: the peer's proof. Right: the hello goes on
 * as it would have without authentication, its reply answering m. */
void rdzv__conn_handle_auth(struct conn *c, const struct rdzv_msg *m) {
  struct daemon *d = c->d;
  struct conn_auth *a = c->auth;
  struct rdzv_msg h;
  struct rdzv_slice p = {NULL, 0}, job = {NULL, 0};
  size_t used = 0;
  if (rdzv_msg_decode(a->hello.data, a->hello.len, UINT32_MAX, &h, &used) <
      0) { /* cannot be: this daemon encoded it */
    rdzv__conn_auth_free(c);
    rdzv__conn_fail(c, RDZV_EPROTO, "hello lost");
    return;
  }
  rdzv_items_get(&h.keys, 0, &job);
  if (m->type != RDZV_MSG_AUTH || (m->flags & RDZV_F_REPLY) || m->vals.n != 1 ||
      rdzv_items_get(&m->vals, 0, &p) < 0 || p.n != RDZV_AUTH_PROOF_BYTES) {
    auth_refuse(c, m->req_id, job,
                m->type != RDZV_MSG_AUTH
                    ? "a challenged hello not followed by its proof"
                    : "a malformed proof");
    return;
  }
  if (!a->known || !rdzv_auth_equal(p.p, a->expect, RDZV_AUTH_PROOF_BYTES)) {
    auth_refuse(c, m->req_id, job,
                a->known ? "a wrong proof: not the job's secret"
                         : "this daemon holds no secret of that job");
    return;
  }
  d->stats.auth_accepted++;
  /* Proved: no longer a challenged connection (a refusal by the admission
   * that follows, a standby's redirect, another job's node, is not one of
   * the authentication's). h points into the hello kept, freed after. */
  struct rdzv_buf hello = a->hello;
  a->hello = (struct rdzv_buf){0};
  rdzv__conn_auth_free(c);
  rdzv__conn_set_state(c, CONN_HELLO_WAIT);
  hello_admit(c, &h, m);
  rdzv_buf_free(&hello);
}

void rdzv__conn_handle_hello(struct conn *c, const struct rdzv_msg *m) {
  struct daemon *d = c->d;
  struct rdzv_slice job;
  if (m->type != RDZV_MSG_HELLO) {
    rdzv__conn_fail(c, RDZV_EHELLO, "the first frame must be a hello");
    return;
  }
  if (c->tls != NULL && m->a != RDZV_ROLE_CLIENT &&
      !rdzv_tls_peer_verified(c->tls)) {
    /* Between daemons authentication is mutual: a rank may come without
     * a certificate (its job secret proves it), a node may not. */
    d->stats.tls_no_cert++;
    refuse_hello(c, m, RDZV_ETLS,
                 "a node must show a certificate of this daemon's CA "
                 "(rdzvd --tls-cert/--tls-key or --tls-dir)",
                 "");
    return;
  }
  if (m->a == RDZV_ROLE_PROBE && !c->inproc &&
      rdzv_items_get(&m->keys, 0, &job) == 0 && job.n <= 255) {
    answer_probe(c, m, job);
    return;
  }
  if (rdzv_items_get(&m->keys, 0, &job) < 0 || job.n == 0 || job.n > 255 ||
      memchr(job.p, '\0', job.n) != NULL) {
    rdzv__conn_fail(c, RDZV_EJOB_ID_MISSING,
                    "hello: job id missing, empty, over 255 bytes or with a "
                    "NUL byte");
    return;
  }
  if (m->a != RDZV_ROLE_CLIENT && m->a != RDZV_ROLE_NODE) {
    rdzv__conn_fail(c, RDZV_EBAD_ROLE, "hello: unknown peer role");
    return;
  }
  if (d->auth && !c->inproc) {
    hello_challenge(c, m, job);
    return;
  }
  hello_admit(c, m, m);
}

/* A hello (m) that passed its checks, and its authentication: the
 * daemon's own checks, then the reply, which answers req (m itself, or
 * the RDZV_MSG_AUTH that proved the peer). */
static void hello_admit(struct conn *c, const struct rdzv_msg *m,
                        const struct rdzv_msg *req) {
  struct daemon *d = c->d;
  struct rdzv_slice job, name = {NULL, 0};
  rdzv_items_get(&m->keys, 0, &job);
  /* A daemon of one job (--job): a child node of another job that reached
   * this port (a shared host, ports from one range) moves on to its
   * parent's next port. (Clients are not refused: `rdzvctl stats` names
   * no job.) */
  if (d->cfg.job[0] != '\0' && m->a == RDZV_ROLE_NODE &&
      (job.n != strlen(d->cfg.job) || memcmp(job.p, d->cfg.job, job.n) != 0)) {
    char text[1024];
    snprintf(text, sizeof(text),
             "daemon %s at %s serves job %s only, not job %.*s", d->cfg.name,
             d->bound_addr[0] ? d->bound_addr : d->cfg.unix_path, d->cfg.job,
             (int)job.n, (const char *)job.p);
    refuse_hello(c, req, RDZV_EJOB_MISMATCH, text, "");
    return;
  }
  /* This daemon's own hello (its --parent range holds its own port, or
   * names its own address): refused, so that it tries its next
   * candidate instead of forwarding to itself. */
  if (m->a == RDZV_ROLE_NODE && m->b != 0 && (uint64_t)m->b == d->incarnation) {
    char text[600];
    snprintf(text, sizeof(text),
             "daemon %s at %s is this node itself: a node cannot be its own "
             "parent",
             d->cfg.name, d->bound_addr);
    refuse_hello(c, req, RDZV_EHELLO, text, "");
    return;
  }
  if (d->admit != NULL && !c->inproc) {
    char text[400], leader[256];
    text[0] = leader[0] = '\0';
    if (!d->admit(d->admit_arg, text, sizeof(text), leader, sizeof(leader))) {
      refuse_hello(c, req, RDZV_ENOT_LEADER, text, leader);
      return;
    }
  }
  struct job *j = rdzv__job_get(d, job.p, job.n);
  if (j == NULL) {
    rdzv__conn_fail(c, RDZV_ENOMEM, "out of memory");
    return;
  }
  if (rdzv_items_get(&m->keys, 1, &name) == 0 && name.n > 0) {
    size_t n = name.n < sizeof(c->name) - 1 ? name.n : sizeof(c->name) - 1;
    memcpy(c->name, name.p, n);
    c->name[n] = '\0';
  }
  c->role = (int)m->a;
  c->last_check_ms = uv_now(d->loop);
  if (c->timer != NULL)
    uv_timer_stop(c->timer);
  if (c->role == RDZV_ROLE_NODE && c->timer != NULL) {
    /* Often enough to see a silence soon after the timeout. */
    uint64_t every =
        d->cfg.liveness_timeout_ms / 4 > 0 ? d->cfg.liveness_timeout_ms / 4 : 1;
    if (every > d->cfg.heartbeat_ms)
      every = d->cfg.heartbeat_ms;
    c->check_every_ms = every;
    uv_timer_start(c->timer, rdzv__conn_on_child_check, every, every);
  } else if (c->timer != NULL) {
    /* A client needs no timer from now on: an idle one holds none. */
    uv_close((uv_handle_t *)c->timer, rdzv__conn_on_timer_freed);
    c->timer = NULL;
  }
  rdzv__job_attach(c, j);
  rdzv__conn_set_state(c, CONN_READY);
  struct rdzv_msg r;
  rdzv__reply_init(&r, req, 0);
  uint64_t epoch =
      d->role->hello_epoch != NULL ? d->role->hello_epoch(d, j) : 0;
  r.b = (int64_t)(d->incarnation ^ (epoch * 0x9E3779B97F4A7C15ull));
  r.a = (int64_t)d->cfg.max_frame_bytes; /* what a child may send */
  /* This daemon's chain up to the root: where a child goes when this
   * daemon is lost. */
  struct rdzv_slice chain[RDZV_MAX_ANCESTORS + 1];
  r.vals.n = hello_chain(c, chain);
  r.vals.v = chain;
  /* Its --liveness-timeout-ms, so that a child pings often enough. */
  uint8_t live[4];
  for (int i = 0; i < 4; i++)
    live[i] = (uint8_t)(d->cfg.liveness_timeout_ms >> (8 * i));
  struct rdzv_slice lk = {live, sizeof(live)};
  r.keys.n = 1;
  r.keys.v = &lk;
  r.flags = RDZV_F_REPLY | (d->admit != NULL ? RDZV_F_SHARED_INC : 0);
  if (d->gate != NULL && !c->inproc)
    rdzv__conn_send_ungated(c, &r); /* depends on no state the gate holds */
  else
    rdzv__conn_send(c, &r);
}
