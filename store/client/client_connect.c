/* librdzv: connecting to the server, and the connection's explicit state
 * machine. rdzv__conn_to_state is the only place that changes c->state
 * after create. This file owns the states before READY (resolving, each
 * attempt, backoff, the choice of daemon among addr and its fallbacks);
 * client_conn.c the established connection, which calls in here.
 *
 *   IDLE       -> CONNECTING, or HELLO_SENT (a Unix socket connects at
 *                 once), when requests are queued or rdzv_client_connect
 *                 waits; -> BACKOFF when that first attempt fails
 *   CONNECTING -> HELLO_SENT (connected) | BACKOFF (failed, timed out)
 *   HELLO_SENT -> READY (hello accepted) | FAILED (refused, or the peer
 *                 does not speak our protocol) | BACKOFF (closed, no reply
 *                 within attempt_timeout_s)
 *   READY      -> BACKOFF (connection lost, requests queued) | IDLE (lost,
 *                 nothing queued)
 *   BACKOFF    -> (timer) as IDLE, or IDLE when nothing needs a connection
 *   FAILED     final: every request completes with the hello's status
 *   any        -> IDLE on a failure retrying cannot cure (EACCES, ...):
 *                 queued requests complete with -errno
 *
 * A round of attempts resolves the address once and tries each resulting
 * socket address in turn; when all fail, BACKOFF waits before the next
 * round (delay doubling from backoff_initial to backoff_max, +-25%
 * jitter). */
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

static const char *const state_names[] = {
    [RDZV__CS_IDLE] = "IDLE",
    [RDZV__CS_CONNECTING] = "CONNECTING",
    [RDZV__CS_HELLO_SENT] = "HELLO_SENT",
    [RDZV__CS_READY] = "READY",
    [RDZV__CS_BACKOFF] = "BACKOFF",
    [RDZV__CS_FAILED] = "FAILED",
};

const char *rdzv__conn_state_name(enum rdzv__conn_state s) {
  return state_names[s];
}

const struct rdzv__addr *rdzv__target(const struct rdzv_client *c) {
  return c->target > 0 ? &c->fb[c->target - 1] : &c->addr;
}

const char *rdzv__target_str(const struct rdzv_client *c) {
  return c->target > 0 ? c->fb_str[c->target - 1] : c->addr_str;
}

/* After a lost connection or a failed round of attempts: the next daemon
 * to try (the one after the current in addr, fb[0], fb[1], ...). Returns
 * 1 when it wrapped round to addr (or there is no other), 0 otherwise. */
int rdzv__conn_target_next(struct rdzv_client *c) {
  if (!c->use_fallbacks || c->nfb == 0) {
    c->target = 0;
    return 1;
  }
  c->target = (c->target + 1) % (c->nfb + 1);
  return c->target == 0;
}

void rdzv__conn_to_state(struct rdzv_client *c, enum rdzv__conn_state s,
                         const char *why) {
  if (c->debug)
    fprintf(stderr, "rdzv client %s: %s -> %s%s%s\n", rdzv__target_str(c),
            state_names[c->state], state_names[s], why != NULL ? ": " : "",
            why != NULL ? why : "");
  c->state = s;
}

int rdzv__conn_wanted(const struct rdzv_client *c) {
  /* A session lost with its connection is resumed as soon as the core
   * runs, not at the next request: the daemons keep it for a grace only. */
  return c->queue.n > 0 || c->want_conn > 0 ||
         (c->resume != NULL && c->lost_once);
}

void rdzv__conn_close(struct rdzv_client *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  rdzv__ctls_end(c);
  rdzv_buf_free(&c->in);
  rdzv_buf_free(&c->out);
  c->out_total = 0;
  c->sent_total = 0;
}

/* xorshift64*: jitter only, not security. */
static double rand01(struct rdzv_client *c) {
  c->rng ^= c->rng >> 12;
  c->rng ^= c->rng << 25;
  c->rng ^= c->rng >> 27;
  return (double)((c->rng * 0x2545F4914F6CDD1Du) >> 11) / 9007199254740992.0;
}

void rdzv__conn_backoff_start(struct rdzv_client *c, int64_t now,
                              const char *why) {
  double d = c->backoff_cur * (0.75 + 0.5 * rand01(c));

  c->timer = rdzv__deadline_after(now, d);
  c->backoff_cur *= 2;
  if (c->backoff_cur > c->backoff_max)
    c->backoff_cur = c->backoff_max;
  rdzv__conn_to_state(c, RDZV__CS_BACKOFF, why);
}

/* Failures worth another attempt: the server is not (yet) there, or a
 * resource shortage on our side that may pass. */
static int retryable(int err) {
  switch (err) {
  case ECONNREFUSED:
  case ECONNRESET:
  case ENOENT:
  case ETIMEDOUT:
  case EHOSTUNREACH:
  case ENETUNREACH:
  case ECONNABORTED:
  case EPIPE:
  case EAGAIN: /* a Unix socket's backlog is full */
  case EINTR:
  case EADDRNOTAVAIL: /* out of ephemeral ports */
  case ENETDOWN:
  case EHOSTDOWN:
  case ENOBUFS:
  case EMFILE:
  case ENFILE:
    return 1;
  default:
    return 0;
  }
}

static void try_connect(struct rdzv_client *c, int64_t now);

/* One attempt failed with errno err (what describes it). Tries the next
 * address of the round, else backs off, else (not retryable) gives up on
 * the queued requests. */
void rdzv__conn_attempt_failed(struct rdzv_client *c, int64_t now, int err,
                               const char *what) {
  struct rdzv__req_list l;
  double over = (double)(now - c->first_attempt) / 1e9;

  rdzv__conn_close(c);
  c->attempts++;
  snprintf(c->conn_err, sizeof(c->conn_err),
           "connect %s: %s (%u attempt%s over %.1f s)", rdzv__target_str(c),
           what, c->attempts, c->attempts == 1 ? "" : "s", over);
  rdzv__set_error(c, "%s", c->conn_err);
  if (!retryable(err)) {
    c->hard_err = -err;
    rdzv__conn_to_state(c, RDZV__CS_IDLE, what);
    l = c->queue;
    memset(&c->queue, 0, sizeof(c->queue));
    rdzv__finish_all(c, &l, -err);
    return;
  }
  if (c->ai_idx + 1 < c->ai_n) {
    c->ai_idx++;
    try_connect(c, now);
    return;
  }
  /* A rank whose daemon is gone tries its fallbacks before it waits. */
  if (!rdzv__conn_target_next(c)) {
    rdzv__conn_round_start(c, now);
    return;
  }
  /* A leader a standby named is gone too: back to the address given
   * (which names the next leader once one is elected). */
  if (c->redirected) {
    free(c->addr.host);
    free(c->addr_str);
    c->addr = c->home;
    c->addr_str = c->home_str;
    c->home_str = NULL;
    c->redirected = false;
  }
  rdzv__conn_backoff_start(c, now, what);
}

/* Appends the hello and waits for its reply. */
static void connected(struct rdzv_client *c, int64_t now) {
  struct rdzv_slice keys[2], nonce;
  struct rdzv_msg m;

  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.a = RDZV_ROLE_CLIENT;
  keys[0] = (struct rdzv_slice){(const uint8_t *)c->job_id,
                                (uint32_t)strlen(c->job_id)};
  keys[1] =
      (struct rdzv_slice){(const uint8_t *)c->name, (uint32_t)strlen(c->name)};
  m.keys.n = 2;
  m.keys.v = keys;
  c->auth_sent = false;
  if (c->secret != NULL) { /* a fresh nonce: the daemon's proof binds it */
    if (rdzv_auth_nonce(c->cnonce, sizeof(c->cnonce)) < 0) {
      rdzv__conn_attempt_failed(c, now, EIO,
                                "no random numbers for the hello's nonce");
      return;
    }
    nonce = (struct rdzv_slice){c->cnonce, sizeof(c->cnonce)};
    m.vals.n = 1;
    m.vals.v = &nonce;
  }
  if (rdzv_msg_encode(&m, &c->out) < 0) {
    rdzv__conn_attempt_failed(c, now, ENOBUFS,
                              "out of memory encoding the hello");
    return;
  }
  c->out_total = c->out.len;
  rdzv__conn_to_state(c, RDZV__CS_HELLO_SENT, NULL);
}

static void try_connect(struct rdzv_client *c, int64_t now) {
  const struct sockaddr *sa = (const struct sockaddr *)&c->ai[c->ai_idx];
  int one = 1;
  int fd;

  fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    rdzv__conn_attempt_failed(c, now, errno, rdzv_strerror(-errno));
    return;
  }
  c->fd = fd;
  if (!rdzv__target(c)->is_unix)
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (rdzv__ctls_begin(c) < 0) {
    rdzv__conn_attempt_failed(c, now, ENOBUFS,
                              "out of memory for a TLS session");
    return;
  }
  c->timer = rdzv__deadline_after(now, c->attempt_timeout);
  if (connect(fd, sa, c->ai_len[c->ai_idx]) == 0) {
    connected(c, now);
    return;
  }
  if (errno == EINPROGRESS) {
    rdzv__conn_to_state(c, RDZV__CS_CONNECTING, NULL);
    return;
  }
  rdzv__conn_attempt_failed(c, now, errno, rdzv_strerror(-errno));
}

/* Resolves the address into c->ai. Returns 0, or a positive errno (and
 * fills what) when there is nothing to connect to yet. */
static int resolve(struct rdzv_client *c, char *what, size_t n) {
  const struct rdzv__addr *a = rdzv__target(c);
  struct addrinfo hints;
  struct addrinfo *res;
  struct addrinfo *p;
  int err;

  c->ai_n = 0;
  c->ai_idx = 0;
  if (a->is_unix) {
    memcpy(&c->ai[0], &a->sun, sizeof(a->sun));
    c->ai_len[0] = a->sun_len;
    c->ai_n = 1;
    return 0;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  err = getaddrinfo(a->host, a->port, &hints, &res);
  if (err != 0) {
    /* EAI_AGAIN and EAI_NONAME are "not resolvable yet" (a pod's DNS name
     * appears late); other resolver failures are retried as well, since a
     * resolver that fails now may answer later. */
    snprintf(what, n, "resolve %s: %s", a->host,
             err == EAI_SYSTEM ? rdzv_strerror(-errno) : gai_strerror(err));
    return EAGAIN;
  }
  for (p = res; p != NULL && c->ai_n < RDZV__MAX_ADDRS; p = p->ai_next) {
    if (p->ai_addrlen > sizeof(c->ai[0]))
      continue;
    memcpy(&c->ai[c->ai_n], p->ai_addr, p->ai_addrlen);
    c->ai_len[c->ai_n++] = p->ai_addrlen;
  }
  freeaddrinfo(res);
  if (c->ai_n == 0) {
    snprintf(what, n, "resolve %s: no usable address", a->host);
    return EAGAIN;
  }
  return 0;
}

void rdzv__conn_round_start(struct rdzv_client *c, int64_t now) {
  char what[300];
  int err;

  if (c->attempts == 0)
    c->first_attempt = now;
  err = resolve(c, what, sizeof(what));
  if (err != 0) {
    c->ai_n = 0;
    rdzv__conn_attempt_failed(c, now, err, what);
    return;
  }
  try_connect(c, now);
}

/* CONNECTING: has the non-blocking connect finished? */
void rdzv__conn_connect_check(struct rdzv_client *c, int64_t now) {
  struct pollfd p = {.fd = c->fd, .events = POLLOUT, .revents = 0};
  socklen_t len = sizeof(int);
  int err = 0;
  char what[64];
  int ready = poll(&p, 1, 0);

  if (ready < 0)
    return; /* EINTR and the like: look again on the next step */
  if (ready == 0) {
    if (now >= c->timer) {
      snprintf(what, sizeof(what), "connect timed out after %.3g s",
               c->attempt_timeout);
      rdzv__conn_attempt_failed(c, now, ETIMEDOUT, what);
    }
    return;
  }
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err != 0) {
    rdzv__conn_attempt_failed(c, now, err, rdzv_strerror(-err));
    return;
  }
  connected(c, now);
}
