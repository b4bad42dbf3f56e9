/* librdzv: a rank back at its own node. A rank whose node was lost resumed
 * its session at an ancestor (a fallback of its node's chain: c->target >
 * 0), and would stay there: after a rolling restart of the nodes every rank
 * would sit on the root. While it is away, the handle probes its node's
 * Unix socket every quarter of RDZV_HOME_AFTER_MS (default 5000, as
 * rdzvd's --home-after-ms for a node's link; at most every second; 0:
 * never):
 * a hello of role probe (store/wire/wire.h's RDZV_ROLE_PROBE), answered at
 * once by a node that is up, with RDZV_F_ROOT_AWAY when it cannot reach
 * the root itself. Once its answers have been "ready" for that long, and
 * only reads and waits are in flight (a join, barrier or gather is never
 * moved), the connection moves back: what is in flight is sent again on
 * the node, the session resumed there first. A move that does not stick
 * (the node refuses, or is lost again) doubles the wait, up to 32 times.
 *
 * A probe never blocks the caller: it connects to a Unix socket (an
 * instant answer: refused, or accepted by the node's loop), sends its
 * hello, and its answer is read on the steps that follow, the handle
 * asking to be driven every HOME_PROBE_POLL_MS meanwhile
 * (rdzv_client_timeout_ms), for at most HOME_PROBE_WAIT_MS; a node that
 * has not answered by then (stopped, wedged) counts as not ready. (A
 * probe that waited for its answer inside the call held up every handle
 * of a process that drives many from one loop, 100 ms per probe and per
 * handle away from a stopped node: with 128 of them, 12.8 s per pass of
 * the loop, their pings and liveness checks on the ancestor with it.) A
 * rank whose node is a TCP address does not come back (the probe would
 * have to wait on a connect). Called by client_conn.c's rdzv__conn_step and
 * hello_accepted, and client.c's rdzv_client_timeout_ms and destroy. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/client/client_int.h"

/* The default of RDZV_HOME_AFTER_MS (store/daemon/config.c's default of
 * --home-after-ms, the same return for a node's link), and the most a
 * probe waits for its answer. */
#define HOME_AFTER_DEFAULT_MS 5000
#define HOME_PROBE_WAIT_MS 100
/* While a probe waits for its answer, the handle looks for it this often
 * (the caller polls only the handle's own socket). */
#define HOME_PROBE_POLL_MS 5
/* The wait after moves that did not stick grows to at most this many
 * times RDZV_HOME_AFTER_MS. */
#define HOME_MAX_FACTOR 32
#define NS_PER_MS 1000000LL

void rdzv__home_init(struct rdzv_client *c) {
  const char *e = getenv("RDZV_HOME_AFTER_MS");
  long ms = HOME_AFTER_DEFAULT_MS;
  if (e != NULL && e[0] != '\0') {
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (end != e && *end == '\0' && v >= 0 && v <= 3600 * 1000)
      ms = v;
  }
  c->home_after_ns = (int64_t)ms * NS_PER_MS;
  c->home_wait_ns = c->home_after_ns;
  c->home_next = RDZV__NO_DEADLINE;
  c->home_since = 0;
  c->home_fd = -1;
}

/* Whether c is a rank away from its node, on a live connection, with a
 * node it can probe. */
static int away(const struct rdzv_client *c) {
  return c->home_after_ns > 0 && c->use_fallbacks && c->target != 0 &&
         c->state == RDZV__CS_READY && c->addr.is_unix;
}

int64_t rdzv__home_due(const struct rdzv_client *c) {
  if (!away(c))
    return RDZV__NO_DEADLINE;
  return c->home_fd >= 0 ? c->home_poll : c->home_next;
}

void rdzv__home_arrived(struct rdzv_client *c, int64_t now) {
  c->home_since = 0;
  if (c->target == 0) {
    c->home_wait_ns = c->home_after_ns; /* at home: the move stuck */
    c->home_next = RDZV__NO_DEADLINE;
    return;
  }
  int64_t every = c->home_after_ns / 4;
  c->home_next = now + (every < 1000 * NS_PER_MS ? every : 1000 * NS_PER_MS);
}

/* Ends the probe in flight, if any. */
void rdzv__home_probe_end(struct rdzv_client *c) {
  if (c->home_fd >= 0)
    close(c->home_fd);
  c->home_fd = -1;
  rdzv_buf_free(&c->home_in);
}

/* Starts a probe of the node: connects to its Unix socket and sends a
 * hello of role probe, neither of which waits (a Unix socket connects at
 * once or not at all, and a fresh one takes the small frame whole).
 * Returns -1 when the probe is in flight (its answer is read by
 * probe_answer on the next steps), 0 when it failed at once (the node
 * is not there: refused, no socket file, its backlog full). */
static int probe_start(struct rdzv_client *c, int64_t now) {
  struct rdzv_slice keys[2] = {
      {(const uint8_t *)c->job_id, (uint32_t)strlen(c->job_id)},
      {(const uint8_t *)c->name, (uint32_t)strlen(c->name)}};
  struct rdzv_msg m;
  struct rdzv_buf out = {0};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int sent;

  if (fd < 0)
    return 0;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.req_id = 1;
  m.a = RDZV_ROLE_PROBE;
  m.keys.n = 2;
  m.keys.v = keys;
  sent = connect(fd, (const struct sockaddr *)&c->addr.sun, c->addr.sun_len) ==
             0 &&
         rdzv_msg_encode(&m, &out) == 0 &&
         send(fd, out.data, out.len, MSG_NOSIGNAL) == (ssize_t)out.len;
  rdzv_buf_free(&out);
  if (!sent) {
    close(fd);
    return 0;
  }
  c->home_fd = fd;
  c->home_probe_end = now + HOME_PROBE_WAIT_MS * NS_PER_MS;
  c->home_poll = now + HOME_PROBE_POLL_MS * NS_PER_MS;
  return -1;
}

/* The probe in flight: reads what its socket has, without waiting.
 * Returns 1 when the node answered ready for c's job (no standby, no
 * RDZV_F_ROOT_AWAY), 0 when it answered otherwise, closed, or did not
 * answer within HOME_PROBE_WAIT_MS (the probe ends), -1 while the answer
 * may still come (the next look is due at c->home_poll). */
static int probe_answer(struct rdzv_client *c, int64_t now) {
  struct rdzv_msg r;
  size_t used = 0;
  int ready = 0;

  for (;;) {
    int rc =
        rdzv_msg_decode(c->home_in.data, c->home_in.len, 1u << 20, &r, &used);
    if (rc == 0) {
      ready = (r.flags & RDZV_F_REPLY) && r.type == RDZV_MSG_HELLO &&
              r.status == 0 && r.a != 1 && !(r.flags & RDZV_F_ROOT_AWAY);
      break;
    }
    if (rc != RDZV_ENEEDMORE || rdzv_buf_reserve(&c->home_in, 4096) < 0)
      break;
    ssize_t n = recv(c->home_fd, c->home_in.data + c->home_in.len,
                     c->home_in.cap - c->home_in.len, 0);
    if (n > 0) {
      c->home_in.len += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        now < c->home_probe_end) {
      int64_t next = now + HOME_PROBE_POLL_MS * NS_PER_MS;
      c->home_poll = next < c->home_probe_end ? next : c->home_probe_end;
      return -1;
    }
    break; /* closed, failed, or no answer in time */
  }
  rdzv__home_probe_end(c);
  return ready;
}

/* Whether only reads and waits are in flight (a move sends them again
 * on the node; anything else waits for its reply first). */
static int only_reads(const struct rdzv_client *c) {
  if (c->resume_wait)
    return 0;
  for (const struct rdzv__req *r = c->sent.head; r != NULL; r = r->next)
    if (!rdzv__op_is_read(r->op))
      return 0;
  return 1;
}

void rdzv__home_tick(struct rdzv_client *c, int64_t now) {
  int ready;

  if (!away(c)) {
    rdzv__home_probe_end(c);
    return;
  }
  if (c->home_fd >= 0) {
    if (now < c->home_poll)
      return;
    ready = probe_answer(c, now);
  } else {
    if (now < c->home_next)
      return;
    int64_t every = c->home_after_ns / 4;
    c->home_next = now + (every < 1000 * NS_PER_MS ? every : 1000 * NS_PER_MS);
    ready = probe_start(c, now);
  }
  if (ready < 0)
    return; /* the answer is read on a later step */
  if (!ready) {
    c->home_since = 0;
    return;
  }
  if (c->home_since == 0)
    c->home_since = now;
  if (now - c->home_since < c->home_wait_ns || !only_reads(c))
    return;
  /* Until it sticks (hello_accepted at home resets it), the next return
   * waits twice as long. */
  if (c->home_wait_ns < HOME_MAX_FACTOR * c->home_after_ns)
    c->home_wait_ns *= 2;
  c->home_returns++;
  rdzv__conn_move(c, now, 0, "back to its own node");
}
