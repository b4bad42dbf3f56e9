/* A node's link to its parent (upstream_int.h): probes of the parent
 * (the one at start, node.h's rdzv__node_probe, and a link's while it is
 * away) and back home after a reattachment (--home-after-ms).
 *
 * A job's link that lost the node's parent reattached to an ancestor
 * (upstream.c's reset); left there, a rolling restart of the interior
 * nodes would end with every child on the root. So while the link is
 * READY on an ancestor, it probes the parent (a hello of role probe,
 * wire.h's RDZV_ROLE_PROBE: one attempt, no job state touched there)
 * every quarter of --home-after-ms (at most every second). An answer
 * counts only when it says the parent is ready (no RDZV_F_ROOT_AWAY: its
 * own link toward the root for the job is up; a parent restarted under a
 * parent still dead would strand the link). Once every probe for
 * --home-after-ms has been answered ready (hysteresis: a parent that
 * flaps, or restarts between two probes, is not taken back), the link
 * moves: a reset of its own that goes to the parent at once and sends
 * again what was in flight, as a loss does (mutations carry op ids:
 * applied once). It moves only while nothing but reads and waits is in
 * flight: a join, barrier or gather moved would stand at the root on the
 * session grace (with --session-grace-ms 0 the generation would abort),
 * so the return waits for a tick when none is. The ancestor sees the
 * connection close as it sees a lost child: the node's ranks keep their
 * places for --session-grace-ms and come back through the parent.
 *
 * A return that fails (the parent refuses the job's hello: another
 * secret; or the connection is lost before READY) goes back to an
 * ancestor, is logged naming the parent and the job, and doubles the time
 * the parent must answer ready before the next one (at most 32 times
 * --home-after-ms; a parent that answers with another incarnation, one
 * restarted since, starts afresh). A move counts as a resend for what it
 * carries (only reads and waits, with a bound of their own), so moves are
 * bounded both in rate and per request. */
#include <inttypes.h>
#include <stdio.h>

#include "store/daemon/node/node.h"
#include "store/daemon/node/node_int.h"
#include "store/daemon/node/upstream_int.h"

/* ---- probes: a hello of role probe to the parent (wire.h) --------------- */

struct upstream *rdzv__up_probe_new(struct daemon *d, const char *job_id,
                                    bool once,
                                    void (*done)(void *arg, bool answered),
                                    void *arg) {
  struct upstream *u = rdzv__upstream_create(d, job_id, NULL, NULL, NULL);
  if (u == NULL)
    return NULL;
  /* Before its first connection's hello (connecting, resolving): asks
   * the parent only, sends no pings. */
  u->probe = true;
  u->probe_once = once;
  u->probe_done = done;
  u->probe_arg = arg;
  rdzv__addrs_truncate(u->addrs, &u->naddrs, 1);
  uv_timer_stop(&u->beat);
  return u;
}

/* The start probe's end: its slot in the daemon's parts is cleared. */
static void start_probe_done(void *arg, bool answered) {
  struct upstream **slot = arg;
  *slot = NULL;
  (void)answered;
}

struct upstream *rdzv__node_probe(struct daemon *d, struct upstream **slot) {
  *slot = NULL;
  if (d->cfg.parent[0] == '\0')
    return NULL;
  *slot = rdzv__up_probe_new(d, d->cfg.job, false, start_probe_done, slot);
  return *slot;
}

void rdzv__up_probe_end(struct upstream *u, bool answered) {
  void (*done)(void *, bool) = u->probe_done;
  u->probe_done = NULL;
  if (done != NULL)
    done(u->probe_arg, answered);
  rdzv__upstream_destroy(u, false);
}

/* ---- back home --------------------------------------------------------- */

/* How often a link away probes its parent: every quarter of
 * --home-after-ms, at most every second. */
static uint64_t tick_ms(const struct upstream *u) {
  uint64_t t = u->d->cfg.home_after_ms / 4;
  if (t > 1000)
    t = 1000;
  return t > 0 ? t : 1;
}

/* How long the parent must answer ready before a return: --home-after-ms,
 * doubled for each failed return since the last that worked (at most 32
 * times). */
static uint64_t home_wait_ms(const struct upstream *u) {
  uint32_t f = u->home_fails < 5 ? u->home_fails : 5;
  return (uint64_t)u->d->cfg.home_after_ms << f;
}

bool rdzv__up_req_is_read(const struct upreq *r) {
  if (r->frame.len < RDZV_WIRE_HEADER_BYTES)
    return false;
  switch (r->frame.data[5]) { /* the type (wire.h's frame header) */
  case RDZV_MSG_GET:
  case RDZV_MSG_MGET:
  case RDZV_MSG_WAIT:
  case RDZV_MSG_NKEYS:
  case RDZV_MSG_KEYS:
  case RDZV_MSG_STATS:
    return true;
  default:
    return false;
  }
}

/* The type of the first request in flight on u that is not a read or a
 * wait (a join, barrier, gather, mutation), or 0 when there is none. */
static int busy_type(struct upstream *u) {
  struct upreq *r;
  TAILQ_FOREACH (r, &u->all, alink)
    if (!rdzv__up_req_is_read(r))
      return r->frame.len > 5 ? r->frame.data[5] : -1;
  return 0;
}

/* Moves u's link to the parent: a reset that goes there at once. */
static void go_home(struct upstream *u) {
  struct daemon *d = u->d;
  rdzv__log_job(d, 1, u->job_id,
                "node %s returns to its parent %s, healthy for %" PRIu64
                " ms (it was on ancestor %s)",
                d->cfg.name, u->addrs[0], uv_now(d->loop) - u->home_since,
                rdzv__up_addr(u));
  d->stats.returned_home++;
  u->going_home = true;
  rdzv__up_reset(u, "returning to its own parent", 0);
}

/* Moves u home once the parent has answered ready for home_wait_ms,
 * unless a request other than a read or a wait is in flight (a join,
 * barrier or gather moved would lean on the session grace at the root):
 * then a later tick tries again. */
static void try_home(struct upstream *u) {
  struct daemon *d = u->d;
  uint64_t now = uv_now(d->loop);
  if (u->home_since == 0 || u->state != UP_READY || u->addr_idx == 0 ||
      now - u->home_since < home_wait_ms(u))
    return;
  int busy = busy_type(u);
  if (busy != 0) {
    if (!u->home_waiting) /* once a wait, not every tick */
      rdzv__log_job(d, 2, u->job_id,
                    "node %s puts off its return to its parent %s: a %s is "
                    "in flight on ancestor %s",
                    d->cfg.name, u->addrs[0],
                    busy > 0 ? rdzv_msg_type_name((uint8_t)busy) : "request",
                    rdzv__up_addr(u));
    u->home_deferred += !u->home_waiting;
    u->home_waiting = true;
    return;
  }
  u->home_waiting = false;
  go_home(u);
}

/* A probe of the parent ended: an answer that says it is ready counts
 * toward the return (and a new incarnation starts the count again), any
 * other ends the count. */
static void probe_done(void *arg, bool answered) {
  struct upstream *u = arg;
  struct daemon *d = u->d;
  struct upstream *p = u->home_probe; /* destroyed after this returns */
  u->home_probe = NULL;
  if (answered && p != NULL && p->probe_away) {
    u->home_not_ready++;
    rdzv__log_job(d, 2, u->job_id,
                  "node %s: parent %s answers, but its own link toward the "
                  "root is down: not returning to it yet",
                  d->cfg.name, u->addrs[0]);
  }
  if (!answered || p == NULL || p->probe_away) {
    u->home_since = 0;
    return;
  }
  uint64_t inc = p->probe_inc;
  if (inc != u->home_inc) /* restarted between two probes: a flap */
    u->home_since = 0;
  u->home_inc = inc;
  if (u->home_fails > 0 && inc != 0 && inc != u->home_fail_inc) {
    rdzv__log_job(d, 1, u->job_id,
                  "node %s: parent %s restarted since its return failed: the "
                  "next return waits --home-after-ms again",
                  d->cfg.name, u->addrs[0]);
    u->home_fails = 0;
  }
  if (u->home_since == 0)
    u->home_since = uv_now(d->loop);
  try_home(u);
}

/* Every tick while away: a return put off may go now; a probe of the
 * parent (one at a time). */
static void on_tick(uv_timer_t *t) {
  struct upstream *u = t->data;
  if (u->state != UP_READY || u->addr_idx == 0) {
    rdzv__up_home_stop(u);
    return;
  }
  try_home(u);
  if (u->state != UP_READY) /* gone home */
    return;
  if (u->home_probe == NULL)
    u->home_probe = rdzv__up_probe_new(u->d, u->job_id, true, probe_done, u);
}

void rdzv__up_home_failed(struct upstream *u) {
  struct daemon *d = u->d;
  u->home_fails++;
  u->home_failed_total++;
  u->home_fail_inc = u->home_inc;
  u->stay = false; /* back to an ancestor, not this parent again */
  rdzv__log_job(d, 1, u->job_id,
                "node %s: the return of job %s to its parent %s failed (%s); "
                "back to an ancestor, the next return after %" PRIu64
                " ms of ready probes (%u failed in a row)",
                d->cfg.name, u->job_id, u->addrs[0], u->why, home_wait_ms(u),
                u->home_fails);
}

bool rdzv__up_home_arrived(struct upstream *u, uint64_t inc) {
  u->home_fails = 0;
  bool restarted = u->home_inc != 0 && inc != u->home_inc;
  if (restarted)
    rdzv__log_job(u->d, 1, u->job_id,
                  "node %s: parent %s changed between its probes and the "
                  "return (incarnation %016" PRIx64 ", the probes said "
                  "%016" PRIx64 "): taken as a restart",
                  u->d->cfg.name, u->addrs[0], inc, u->home_inc);
  return restarted;
}

void rdzv__upstream_home_counts(const struct upstream *u,
                                struct rdzv_home_counts *out) {
  out->failed = u->home_failed_total;
  out->not_ready = u->home_not_ready;
  out->deferred = u->home_deferred;
  out->wait_ms = home_wait_ms(u);
}

void rdzv__up_home_ready(struct upstream *u) {
  if (u->probe || u->addr_idx == 0 || u->d->cfg.home_after_ms == 0) {
    rdzv__up_home_stop(u);
    return;
  }
  u->home_since = 0;
  u->home_inc = 0;
  u->home_waiting = false;
  uv_timer_start(&u->home, on_tick, tick_ms(u), tick_ms(u));
}

const char *rdzv__upstream_where(const struct upstream *u, uint32_t *hops,
                                 const char **state) {
  *hops = u->addr_idx;
  *state = rdzv__up_state_names[u->state];
  return rdzv__up_addr(u);
}

void rdzv__up_home_stop(struct upstream *u) {
  if (u->probe)
    return;
  uv_timer_stop(&u->home);
  u->home_since = 0;
  u->home_waiting = false;
  if (u->home_probe != NULL) {
    struct upstream *p = u->home_probe;
    u->home_probe = NULL;
    p->probe_done = NULL; /* it must not call back into u */
    rdzv__upstream_destroy(p, false);
  }
}
