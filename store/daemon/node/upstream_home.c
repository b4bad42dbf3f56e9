/* A node's link to its parent (upstream_int.h): probes of the parent
 * (the one at start, node.h's rdzv__node_probe, and a link's while it is
 * away) and back home after a reattachment (--home-after-ms).
 *
 * A job's link that lost the node's parent reattached to an ancestor
 * (upstream.c's reset); left there, a rolling restart of the interior
 * nodes would end with every child on the root. So while the link is
 * READY on an ancestor, it probes the parent (a hello of role probe,
 * wire.h's RDZV_ROLE_PROBE: one attempt, no job state touched there)
 * every quarter of --home-after-ms (at most every second). Once every
 * probe for --home-after-ms has been answered (hysteresis: a parent that
 * flaps is not taken back), the link moves: a reset of its own that
 * goes to the parent at once and sends again what was in flight, as a
 * loss does (mutations carry op ids: applied once), without spending a
 * request's resends. The ancestor sees the connection close as it sees a
 * lost child: the node's ranks keep their places for --session-grace-ms
 * and come back through the parent. */
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

static uint64_t tick_ms(const struct upstream *u) {
  uint64_t t = u->d->cfg.home_after_ms / 4;
  if (t > 1000)
    t = 1000;
  return t > 0 ? t : 1;
}

static void go_home(struct upstream *u) {
  struct daemon *d = u->d;
  rdzv__log_job(d, 1, u->job_id,
                "node %s returns to its parent %s, healthy for %" PRIu64
                " ms (it was on ancestor %s)",
                d->cfg.name, u->addrs[0],
                uv_now(d->loop) - u->home_since, rdzv__up_addr(u));
  d->stats.returned_home++;
  u->going_home = true;
  rdzv__up_reset(u, "returning to its own parent", 0);
}

static void probe_done(void *arg, bool answered) {
  struct upstream *u = arg;
  uint64_t now = uv_now(u->d->loop);
  u->home_probe = NULL;
  if (!answered) {
    u->home_since = 0;
    return;
  }
  if (u->home_since == 0)
    u->home_since = now;
  if (u->state == UP_READY && u->addr_idx > 0 &&
      now - u->home_since >= u->d->cfg.home_after_ms)
    go_home(u);
}

static void on_tick(uv_timer_t *t) {
  struct upstream *u = t->data;
  if (u->state != UP_READY || u->addr_idx == 0) {
    rdzv__up_home_stop(u);
    return;
  }
  if (u->home_probe == NULL)
    u->home_probe =
        rdzv__up_probe_new(u->d, u->job_id, true, probe_done, u);
}

void rdzv__up_home_ready(struct upstream *u) {
  if (u->probe || u->addr_idx == 0 || u->d->cfg.home_after_ms == 0) {
    rdzv__up_home_stop(u);
    return;
  }
  u->home_since = 0;
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
  if (u->home_probe != NULL) {
    struct upstream *p = u->home_probe;
    u->home_probe = NULL;
    p->probe_done = NULL; /* it must not call back into u */
    rdzv__upstream_destroy(p, false);
  }
}
