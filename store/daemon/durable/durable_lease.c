/* The durable root's admission of peers, its standing down (leadership
 * lost, or fenced by another root's leader key), and its lease: the tick
 * that sends keepalives, renews the jobs' leases and checks deadlines. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uthash.h>

#include "rdzv/error.h"
#include "store/daemon/durable/durable_int.h"

/* ---- admission ------------------------------------------------------------------ */

int rdzv__du_admit(void *arg, char *text, size_t textlen, char *leader,
                   size_t leaderlen) {
  struct rdzv_durable *du = arg;
  if (du->role == DUR_LEADER)
    return 1;
  snprintf(leader, leaderlen, "%s", du->role == DUR_STANDBY ? du->leader : "");
  if (du->role == DUR_CAMPAIGN && du->last_err[0] != '\0')
    snprintf(text, textlen,
             "root %s (%s) is not the leader of %s/leader: no leader known; "
             "etcd: %s",
             du->d->cfg.name, du->self, du->prefix, du->last_err);
  else
    snprintf(text, textlen,
             "root %s (%s) is not the leader of %s/leader: it is %s%s%s",
             du->d->cfg.name, du->self, du->prefix,
             rdzv__du_role_names[du->role], leader[0] ? "; the leader is " : "",
             leader);
  return 0;
}

/* ---- standing down ---------------------------------------------------------------- */

void rdzv__du_stand_down(struct rdzv_durable *du, int status, const char *why) {
  if (du->role == DUR_STOPPED)
    return;
  bool was_leader = du->role == DUR_LEADER || du->role == DUR_LOADING;
  du->gen++;
  rdzv__du_set_role(du, DUR_CAMPAIGN, why);
  du->leader_rev = 0;
  du->leader[0] = '\0';
  if (du->watch != NULL) {
    rdzv_etcd_watch_cancel(du->watch);
    du->watch = NULL;
  }
  if (du->batch != NULL) { /* dropped: its callbacks only free it */
    struct batch *b = du->batch;
    du->batch = NULL;
    rdzv__du_batch_finish(b);
  }
  struct daemon *d = du->d;
  if (was_leader && status == RDZV_ENOT_LEADER) {
    du->fenced = true;
    snprintf(du->fence_why, sizeof(du->fence_why), "%s", why);
  }
  if (was_leader) {
    du->stand_downs++;
    rdzv__du_dlog(du, 0, "root %s stands down: %s", d->cfg.name, why);
    rdzv__gate_drop(d);
    char text[800];
    snprintf(text, sizeof(text),
             "root %s stood down (%s): reconnect to the "
             "leader",
             d->cfg.name, why);
    /* A lost lease is said to every waiting caller (the job's state in
     * etcd may be gone with it); a root that was only deposed leaves its
     * callers' requests to be sent again to the new leader. Then every
     * connection closes. */
    for (struct job *j = d->jobs; status == RDZV_ELEASE_LOST && j != NULL;
         j = j->next)
      if (d->role->fail_all != NULL)
        d->role->fail_all(d, j, status, text);
    rdzv__gate_release(d);
    rdzv__close_all_peers(d, status, text);
    for (struct job *j = d->jobs; j != NULL; j = j->next)
      d->role->job_free(d, j);
    rdzv__addrs_truncate(d->peers, &d->npeers, 0);
  }
  rdzv__du_jobs_free(du);
  rdzv__du_bigs_free(du);
  rdzv__du_load_bigs_finish_drop(du);
  du->ndirty = 0;
  rdzv__du_campaign_later(du, 200);
}

/* ---- the lease, keepalives ------------------------------------------------------- */

static void on_keepalive(void *arg, const struct rdzv_etcd_result *r);

struct ka {
  struct rdzv_durable *du;
  uint64_t gen, sent_ms;
};

static void on_job_keepalive(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  /* A job's lease outlives the leader's (--etcd-job-ttl-s is longer):
   * lost, it means keepalives failed far past the leader's lease, which
   * stood down first; said in case. */
  if (r->status == RDZV_ELEASE_LOST)
    rdzv__du_dlog(du, 0,
                  "a job's etcd lease (%" PRId64 ") is gone: that job's "
                  "persisted state expired",
                  r->lease_id);
}

static void on_peers(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  if (r->status < 0 || du->role != DUR_LEADER)
    return;
  struct daemon *d = du->d;
  uint32_t n = 0;
  for (size_t i = 0; i < r->nkvs && n < RDZV_MAX_ANCESTORS; i++) {
    const struct rdzv_etcd_kv *kv = &r->kvs[i];
    if (kv->vlen == 0 || kv->vlen > 255 ||
        (kv->vlen == strlen(du->self) &&
         memcmp(kv->value, du->self, kv->vlen) == 0))
      continue;
    if (rdzv__addrs_set(d->peers, n, kv->value, kv->vlen) < 0)
      break; /* out of memory: fewer peers told */
    n++;
  }
  rdzv__addrs_truncate(d->peers, &d->npeers, n);
}

void rdzv__du_peers_refresh(struct rdzv_durable *du) {
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/roots/", du->prefix);
  struct rdzv_etcd_range_opts o;
  memset(&o, 0, sizeof(o));
  o.prefix = true;
  rdzv_etcd_range(du->e, k, (size_t)n, &o, on_peers, du);
}

void rdzv__du_on_tick(uv_timer_t *t) {
  struct rdzv_durable *du = t->data;
  rdzv__du_stats_update(du);
  if (du->role == DUR_STOPPED || du->lease == 0)
    return;
  if ((du->role == DUR_LEADER || du->role == DUR_LOADING) &&
      rdzv__du_now_ms(du) >= du->lease_deadline_ms) {
    char why[300];
    snprintf(why, sizeof(why),
             "etcd lease lost: etcd did not answer a "
             "keepalive for the lease's %u s",
             du->cfg.etcd_lease_ttl_s);
    rdzv__du_stand_down(du, RDZV_ELEASE_LOST, why);
    return;
  }
  if (!du->keepalive_inflight) {
    struct ka *k = malloc(sizeof(*k));
    if (k != NULL) {
      k->du = du;
      k->gen = du->gen;
      k->sent_ms = rdzv__du_now_ms(du);
      if (rdzv_etcd_lease_keepalive(du->e, du->lease, on_keepalive, k) == 0)
        du->keepalive_inflight = true;
      else
        free(k);
    }
  }
  if (du->role == DUR_LEADER && du->own_key_unwatched && du->watch == NULL) {
    du->own_key_unwatched = false;
    rdzv__du_check_own_key(du);
  }
  if (du->role == DUR_LEADER) {
    struct djob *j, *jt;
    uint64_t now = rdzv__du_now_ms(du);
    HASH_ITER (hh, du->jobs, j, jt) {
      /* A job loaded at the election that nobody reopened within
       * --job-linger-ms ended, as it would have at the old leader. */
      if (j->open == NULL && j->loaded_ms != 0 &&
          now - j->loaded_ms > du->cfg.job_linger_ms) {
        rdzv__du_job_remove(du, j);
        continue;
      }
      if (j->lease_granted)
        rdzv_etcd_lease_keepalive(du->e, j->lease, on_job_keepalive, du);
    }
    rdzv__du_peers_refresh(du);
  }
}

static void on_keepalive(void *arg, const struct rdzv_etcd_result *r) {
  struct ka *k = arg;
  struct rdzv_durable *du = k->du;
  uint64_t sent = k->sent_ms;
  free(k);
  du->keepalive_inflight = false;
  if (r->status == RDZV_ECANCELED || du->role == DUR_STOPPED)
    return;
  if (r->status == 0 && r->ttl_s > 0) {
    du->lease_deadline_ms = sent + (uint64_t)r->ttl_s * 1000;
    du->lease_renewals++;
    du->lease_fails_in_row = 0;
    rdzv__du_stats_update(du);
    return;
  }
  du->lease_failures++;
  du->lease_fails_in_row++;
  rdzv__du_stats_update(du);
  if (r->status == RDZV_ELEASE_LOST) {
    if (du->role == DUR_LEADER || du->role == DUR_LOADING)
      rdzv__du_stand_down(du, RDZV_ELEASE_LOST,
                          "etcd lease lost: etcd says the lease expired or was "
                          "revoked");
    else {
      du->lease = 0; /* a new one at the next campaign */
      rdzv__du_stand_down(du, RDZV_ELEASE_LOST, "lease lost while standing by");
    }
    return;
  }
  du->errors++;
  rdzv__du_dlog(du, 2, "keepalive failed: %s%s%s", rdzv_strerror(r->status),
                r->message[0] ? ": " : "", r->message);
}
