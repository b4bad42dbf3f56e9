/* A node's link to its parent (upstream_int.h): a round of attempts.
 * The address resolved afresh, each candidate (address, then port of a
 * range) connected with its own --connect-timeout-ms, then the hello as
 * role NODE. */
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
#include "store/wire/addr.h"

/* ---- connect --------------------------------------------------------------- */

static void send_hello(struct upstream *u) {
  struct rdzv_slice keys[2] = {
      {(const uint8_t *)u->job_id, (uint32_t)strlen(u->job_id)},
      {(const uint8_t *)u->d->cfg.name, (uint32_t)strlen(u->d->cfg.name)}};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.req_id = u->hello_id = u->next_id++;
  m.a = u->probe ? RDZV_ROLE_PROBE : RDZV_ROLE_NODE;
  m.b = (int64_t)u->d->incarnation; /* a daemon refuses itself as parent */
  m.keys.n = 2;
  m.keys.v = keys;
  /* With the job's secret: a fresh nonce, which the parent's proof must
   * bind; one this daemon recognizes, so that this hello, sent back to
   * this daemon's own port by a fake parent, is refused there. A probe
   * names no job: no proof either way. */
  struct rdzv_slice nonce = {u->cnonce, sizeof(u->cnonce)};
  u->auth_sent = false;
  if (u->d->auth && !u->probe) {
    /* A node with secrets takes no parent it cannot check: without this
     * job's (a --secret-dir file gone, unreadable), the ranks that proved
     * it earlier would be served by whatever asks no proof. */
    if (!rdzv__up_has_secret(u) ||
        rdzv_auth_own_nonce(u->d->own_key, u->cnonce) < 0) {
      u->d->stats.auth_parent_refused++;
      rdzv__log_auth_job(u->d, u->job_id,
                         "%s: this node holds no secret of the "
                         "job (its --secret-dir file is missing or unreadable) "
                         "to check a parent with: not connecting",
                         u->cand_text);
      rdzv__up_attempt_failed(u,
                              "no secret of the job (--secret-dir) to check "
                              "the parent with, at",
                              RDZV_EAUTH);
      return;
    }
    m.vals.n = 1;
    m.vals.v = &nonce;
  }
  rdzv_msg_encode(&m, &u->out);
  u->d->stats.frames_out++;
  rdzv__up_set_state(u, UP_HELLO);
  u->last_rx_ms = uv_now(u->d->loop);
  uv_read_start(&u->h.stream, rdzv__up_on_alloc, rdzv__up_on_read);
  rdzv__up_start_write(u);
}

static void on_connect(uv_connect_t *req, int status) {
  struct upstream *u = req->data;
  if (u->state != UP_CONNECTING) {
    rdzv__up_unref(u);
    return;
  }
  if (status < 0)
    rdzv__up_attempt_failed(u, "connect to", status);
  else
    send_hello(u);
  rdzv__up_unref(u);
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
  uv_timer_start(&u->timer, rdzv__up_on_attempt_timeout,
                 u->d->cfg.connect_timeout_ms, 0);
  if (!rdzv__up_tls_begin(u)) {
    rdzv__up_attempt_failed(u, "out of memory for a TLS session with",
                            RDZV_ENOMEM);
    return;
  }
  uv_tcp_init(u->d->loop, &u->h.tcp);
  u->h.handle.data = u;
  u->have_stream = true;
  uv_tcp_nodelay(&u->h.tcp, 1);
  rdzv__up_set_state(u, UP_CONNECTING);
  u->last_rx_ms = uv_now(u->d->loop);
  u->creq.data = u;
  u->refs++;
  int rc = uv_tcp_connect(&u->creq, &u->h.tcp, (const struct sockaddr *)&ss,
                          on_connect);
  if (rc < 0) {
    u->refs--;
    rdzv__up_attempt_failed(u, "connect to", rc);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  struct upstream *u = req->data;
  if (u->state != UP_RESOLVING) {
    uv_freeaddrinfo(res);
    rdzv__up_unref(u);
    return;
  }
  struct addrinfo *a = res;
  while (a != NULL && a->ai_family != AF_INET && a->ai_family != AF_INET6)
    a = a->ai_next;
  if (status < 0 || a == NULL) {
    uv_freeaddrinfo(res);
    u->cand_text[0] = '\0';
    rdzv__up_reset(u, "resolve", status < 0 ? status : RDZV_EBAD_ADDR);
  } else {
    u->res = res; /* freed when the round ends */
    u->cand = a;
    u->port = u->port_first;
    connect_cand(u);
  }
  rdzv__up_unref(u);
}

void rdzv__up_connect(struct upstream *u) {
  const char *a = rdzv__up_addr(u);
  if (u->next_cand && u->cand != NULL) {
    u->next_cand = false;
    connect_cand(u);
    return;
  }
  rdzv__up_free_cands(u);
  u->cand_text[0] = '\0';
  u->ncands_tried = 0;
  u->nother_job = 0;
  u->attempts++;
  if (strncmp(a, "unix:", 5) == 0) {
    rdzv__up_tls_end(u); /* a Unix socket stays plain */
    uv_pipe_init(u->d->loop, &u->h.pipe, 0);
    u->h.handle.data = u;
    u->have_stream = true;
    rdzv__up_set_state(u, UP_CONNECTING);
    u->last_rx_ms = uv_now(u->d->loop);
    u->creq.data = u;
    u->refs++;
    uv_pipe_connect(&u->creq, &u->h.pipe, a + 5, on_connect);
    return;
  }
  char host[RDZV_ADDR_HOST_MAX + 1];
  struct rdzv_addr_parts p;
  if (rdzv_addr_split(
          a, RDZV_ADDR_RANGE | RDZV_ADDR_BARE_V6 | RDZV_ADDR_NO_UNIX, &p) < 0 ||
      rdzv_addr_host(&p, host, sizeof(host)) < 0) {
    rdzv__up_reset(u, "parent address", RDZV_EBAD_ADDR);
    return;
  }
  u->port_first = p.port_first;
  u->port_last = p.port_last;
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  rdzv__up_set_state(u, UP_RESOLVING);
  u->gai.data = u;
  u->refs++;
  /* No service: the ports are set per candidate. */
  int rc = uv_getaddrinfo(u->d->loop, &u->gai, on_resolved, host, NULL, &hints);
  if (rc < 0) {
    u->refs--;
    rdzv__up_reset(u, "resolve", rc);
  }
}

/* ---- the round's candidates ---- */

/* The round's next usable address (IPv4 or IPv6) after u->cand, or
 * NULL. */
static struct addrinfo *next_addr(const struct upstream *u) {
  for (struct addrinfo *a = u->cand->ai_next; a != NULL; a = a->ai_next)
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
      return a;
  return NULL;
}

bool rdzv__up_cand_left(const struct upstream *u, bool skip_addr) {
  return u->cand != NULL &&
         ((!skip_addr && u->port < u->port_last) || next_addr(u) != NULL);
}

bool rdzv__up_cand_advance(struct upstream *u, bool skip_addr) {
  if (!rdzv__up_cand_left(u, skip_addr))
    return false;
  if (!skip_addr && u->port < u->port_last) {
    u->port++;
    return true;
  }
  u->cand = next_addr(u);
  u->port = u->port_first;
  return true;
}

void rdzv__up_on_attempt_timeout(uv_timer_t *t) {
  struct upstream *u = t->data;
  if (u->state != UP_CONNECTING && u->state != UP_HELLO)
    return;
  char why[120];
  if (u->state == UP_CONNECTING)
    snprintf(why, sizeof(why),
             "connect not done within %u ms "
             "(--connect-timeout-ms; a dropped SYN?) to",
             u->d->cfg.connect_timeout_ms);
  else
    snprintf(why, sizeof(why),
             "no hello reply within %u ms "
             "(--connect-timeout-ms) from",
             u->d->cfg.connect_timeout_ms);
  rdzv__up_attempt_failed(u, why, RDZV_EDEADLINE);
}
