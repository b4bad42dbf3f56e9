/* The durable root's election (durable_int.h): a lease, registration
 * among the peers, the leader key's compare-and-create; a standby watches
 * the leader's key; the winner loads every job's state (values in parts
 * put together) before it serves, then watches its own key. */
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

/* ---- the election ------------------------------------------------------------------ */

static void on_campaign_timer(uv_timer_t *t) {
  rdzv__du_campaign_step(t->data);
}

/* A campaign step failed (what: which, r: etcd's answer). */
static void campaign_failed(struct rdzv_durable *du, const char *what,
                            const struct rdzv_etcd_result *r) {
  du->errors++;
  snprintf(du->last_err, sizeof(du->last_err), "%s at %s: %s%s%.200s", what,
           rdzv_etcd_endpoint(du->e), rdzv_strerror(r->status),
           r->message[0] ? ": " : "", r->message);
  rdzv__du_dlog(du, du->campaign_fails++ % 20 == 0 ? 1 : 2,
                "root %s cannot campaign: %s (trying again)", du->d->cfg.name,
                du->last_err);
}

void rdzv__du_campaign_later(struct rdzv_durable *du, uint64_t ms) {
  if (du->role == DUR_STOPPED)
    return;
  rdzv__du_set_role(du, DUR_CAMPAIGN, "campaigns again");
  uv_timer_start(&du->campaign, on_campaign_timer, ms, 0);
}

struct cstep {
  struct rdzv_durable *du;
  uint64_t gen;
};

static struct cstep *cstep_new(struct rdzv_durable *du) {
  struct cstep *c = malloc(sizeof(*c));
  if (c != NULL) {
    c->du = du;
    c->gen = du->gen;
  }
  return c;
}

/* A campaign step's callback: frees the step; du, or NULL when the step
 * is stale (a stand-down or a stop since, or the request canceled). */
static struct rdzv_durable *cstep_take(void *arg,
                                       const struct rdzv_etcd_result *r) {
  struct cstep *c = arg;
  struct rdzv_durable *du = c->du;
  bool stale = c->gen != du->gen || du->role == DUR_STOPPED ||
               r->status == RDZV_ECANCELED;
  free(c);
  return stale ? NULL : du;
}

static void on_load(void *arg, const struct rdzv_etcd_result *r);

static void load_from(struct rdzv_durable *du, const uint8_t *key,
                      size_t klen) {
  char end[300];
  int n = snprintf(end, sizeof(end), "%s/j0", du->prefix); /* after "P/j/" */
  struct rdzv_etcd_range_opts o;
  memset(&o, 0, sizeof(o));
  o.range_end = end;
  o.relen = (size_t)n;
  o.limit = 1000;
  o.revision = du->load_rev;
  struct cstep *c = cstep_new(du);
  if (c == NULL || rdzv_etcd_range(du->e, key, klen, &o, on_load, c) < 0) {
    free(c);
    rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
  }
}

/* What a load left half done (a stand-down meanwhile) goes. */
void rdzv__du_load_bigs_finish_drop(struct rdzv_durable *du) {
  while (du->load_bigs != NULL) {
    struct loadbig *lb = du->load_bigs;
    du->load_bigs = lb->next;
    free(lb);
  }
  struct loadpart *lp, *t;
  HASH_ITER (hh, du->load_parts, lp, t) {
    HASH_DEL(du->load_parts, lp);
    free(lp->data);
    free(lp);
  }
}

static int load_value(struct rdzv_durable *du, struct djob *j,
                      const uint8_t *key, size_t klen, const uint8_t *rest,
                      size_t rl, const uint8_t *value, size_t vlen);

/* One key of the persisted state into memory. */
static int load_kv(struct rdzv_durable *du, const struct rdzv_etcd_kv *kv) {
  size_t pl = strlen(du->prefix) + 3; /* "P/j/" */
  if (kv->klen <= pl)
    return 0;
  const uint8_t *p = kv->key + pl, *e = kv->key + kv->klen;
  const uint8_t *slash = memchr(p, '/', (size_t)(e - p));
  char id[300];
  if (slash == NULL ||
      !rdzv__du_job_decode(p, (size_t)(slash - p), id, sizeof(id)))
    return 0; /* not ours: left alone */
  struct djob *j = rdzv__du_job_get(du, id);
  if (j == NULL)
    return RDZV_ENOMEM;
  const uint8_t *rest = slash + 1;
  size_t rl = (size_t)(e - rest);
  if (rl == 5 && memcmp(rest, "lease", 5) == 0) {
    j->lease = kv->lease;
    j->lease_granted = j->lease_put = kv->lease != 0;
    return 0;
  }
  if (j->lease == 0 && kv->lease != 0) {
    j->lease = kv->lease;
    j->lease_granted = true;
  }
  if (rl >= 2 && rest[0] == 'p' && rest[1] == '/') {
    /* A part of a large value: kept until its value is put together. */
    struct loadpart *lp = calloc(1, sizeof(*lp));
    if (lp == NULL || rl - 2 >= sizeof(lp->name) ||
        (kv->vlen > 0 && (lp->data = malloc(kv->vlen)) == NULL)) {
      bool oom = lp == NULL || rl - 2 < sizeof(lp->name);
      free(lp);
      return oom ? RDZV_ENOMEM : 0;
    }
    memcpy(lp->name, rest + 2, rl - 2);
    if (kv->vlen > 0)
      memcpy(lp->data, kv->value, kv->vlen);
    lp->len = kv->vlen;
    HASH_ADD_STR(du->load_parts, name, lp);
    return 0;
  }
  if (rl >= 2 && (rest[0] == 'K' || rest[0] == 'R' || rest[0] == 'O')) {
    /* A large value's head: "ID:N:BYTES"; put together at the end. */
    char rdzv__du_mark[80];
    unsigned n = 0;
    unsigned long long total = 0;
    char pid[25];
    if (kv->vlen >= sizeof(rdzv__du_mark))
      return 0;
    memcpy(rdzv__du_mark, kv->value, kv->vlen);
    rdzv__du_mark[kv->vlen] = '\0';
    if (sscanf(rdzv__du_mark, "%24[0-9a-f]:%u:%llu", pid, &n, &total) != 3 ||
        n == 0)
      return 0;
    struct loadbig *lb = calloc(1, sizeof(*lb) + kv->klen);
    if (lb == NULL)
      return RDZV_ENOMEM;
    snprintf(lb->id, sizeof(lb->id), "%s", pid);
    lb->n = n;
    lb->total = total;
    lb->klen = kv->klen;
    lb->lease = kv->lease;
    memcpy(lb->key, kv->key, kv->klen);
    lb->key[rest - kv->key] = (uint8_t)(rest[0] - 'A' + 'a');
    lb->next = du->load_bigs;
    du->load_bigs = lb;
    return 0;
  }
  return load_value(du, j, kv->key, kv->klen, rest, rl, kv->value, kv->vlen);
}

/* The large values met while loading, from their parts (a value whose
 * parts are not all there was never acknowledged: left out, said). */
static int load_bigs_finish(struct rdzv_durable *du) {
  int rc = 0;
  size_t pl = strlen(du->prefix) + 3;
  while (du->load_bigs != NULL) {
    struct loadbig *lb = du->load_bigs;
    du->load_bigs = lb->next;
    uint8_t *all = rc == 0 ? malloc(lb->total > 0 ? lb->total : 1) : NULL;
    uint64_t got = 0;
    bool whole = all != NULL;
    for (uint32_t i = 0; whole && i < lb->n; i++) {
      char name[40];
      snprintf(name, sizeof(name), "%s/%06u", lb->id, i);
      struct loadpart *lp = NULL;
      HASH_FIND_STR(du->load_parts, name, lp);
      if (lp == NULL || got + lp->len > lb->total) {
        whole = false;
        break;
      }
      if (lp->len > 0)
        memcpy(all + got, lp->data, lp->len);
      got += lp->len;
    }
    const uint8_t *p = lb->key + pl, *e = lb->key + lb->klen;
    const uint8_t *slash = memchr(p, '/', (size_t)(e - p));
    char id[300];
    struct djob *j = NULL;
    if (whole && got == lb->total && slash != NULL &&
        rdzv__du_job_decode(p, (size_t)(slash - p), id, sizeof(id)) &&
        (j = rdzv__du_job_get(du, id)) != NULL) {
      rc = load_value(du, j, lb->key, lb->klen, slash + 1,
                      (size_t)(e - slash - 1), all, lb->total);
      if (rc == 0)
        rc = rdzv__du_big_set(du, lb->key, lb->klen, lb->id);
    } else if (rc == 0 && all == NULL) {
      rc = RDZV_ENOMEM;
    } else if (rc == 0) {
      rdzv__du_dlog(du, 0, "a large value in etcd lacks parts (%s): left out",
                    lb->id);
    }
    free(all);
    free(lb);
  }
  struct loadpart *lp, *t;
  HASH_ITER (hh, du->load_parts, lp, t) {
    HASH_DEL(du->load_parts, lp);
    free(lp->data);
    free(lp);
  }
  return rc;
}

/* A value of j in its lower-case form (rest: "k/KEY", "o/ID", "r/N/NAME";
 * key: the whole etcd key) into memory. */
static int load_value(struct rdzv_durable *du, struct djob *j,
                      const uint8_t *key, size_t klen, const uint8_t *rest,
                      size_t rl, const uint8_t *value, size_t vlen) {
  if (rl >= 2 && rest[0] == 'k' && rest[1] == '/') {
    if (vlen < 1)
      return 0;
    bool wo = value[0] == 'w';
    return rdzv__state_set(j->mem, rest + 2, (uint32_t)(rl - 2), value + 1,
                           (uint32_t)(vlen - 1), wo);
  }
  if (rl >= 2 && rest[0] == 'o' && rest[1] == '/') {
    /* A group of op records: each into memory; the group expires. */
    size_t pos = 0;
    while (pos + 12 <= vlen) {
      const uint8_t *e8 = value + pos;
      uint32_t vl = (uint32_t)e8[8] | (uint32_t)e8[9] << 8 |
                    (uint32_t)e8[10] << 16 | (uint32_t)e8[11] << 24;
      if (vl > vlen - pos - 12)
        break;
      int rc =
          rdzv__state_rec_put(j->mem, RDZV_STATE_REC_OP, e8, 8, e8 + 12, vl);
      if (rc < 0)
        return rc;
      pos += 12 + vl;
    }
    return rdzv__du_opkey_add(j, key, klen,
                              rdzv__du_now_ms(du) + du->cfg.dedup_window_ms);
  }
  if (rl >= 4 && rest[0] == 'r' && rest[1] == '/' && rest[3] == '/' &&
      rest[2] >= '1' && rest[2] <= '9')
    return rdzv__state_rec_put(j->mem, (enum rdzv_state_rec)(rest[2] - '0'),
                               rest + 4, (uint32_t)(rl - 4), value,
                               (uint32_t)vlen);
  return 0;
}

static void watch_own_key_from(struct rdzv_durable *du, int64_t rev);

/* The leader watches its own key too: one deleted or replaced behind its
 * back (an operator, an expiry it did not see) deposes it when the watch
 * event arrives, not only at its next write's fence, so that it stops
 * answering reads of a state another root now changes. */
static void on_own_watch(void *arg, int status, const char *message,
                         int64_t revision, int64_t compact_revision,
                         const struct rdzv_etcd_event *ev, size_t n) {
  struct cstep *c = arg;
  struct rdzv_durable *du = c->du;
  (void)revision;
  (void)compact_revision;
  bool mine = c->gen == du->gen && du->role == DUR_LEADER;
  if (status < 0) {
    free(c);
    if (mine) {
      du->watch = NULL;
      rdzv__du_dlog(du, 2, "the watch of the leader's own key ended: %s%s%s",
                    rdzv_strerror(status), message && message[0] ? ": " : "",
                    message ? message : "");
      rdzv__du_check_own_key(du); /* read it, then watch again from there */
    }
    return;
  }
  if (!mine)
    return;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].type == RDZV_ETCD_DELETE ||
        ev[i].kv.create_revision != du->leader_rev) {
      rdzv__du_stand_down(du, RDZV_ENOT_LEADER,
                          "deposed: the leader key was deleted or replaced");
      return;
    }
  }
}

static void watch_own_key_from(struct rdzv_durable *du, int64_t rev) {
  if (du->role != DUR_LEADER && du->role != DUR_LOADING)
    return;
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/leader", du->prefix);
  struct rdzv_etcd_watch_opts o;
  memset(&o, 0, sizeof(o));
  o.start_revision = rev;
  struct cstep *w = cstep_new(du);
  if (w == NULL || rdzv_etcd_watch(du->e, k, (size_t)n, &o, on_own_watch, w,
                                   &du->watch) < 0) {
    free(w);
    du->watch = NULL;
  }
}

static void on_own_key(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL || du->role != DUR_LEADER)
    return;
  if (r->status < 0) { /* etcd trouble: the lease rules decide; the next
                          tick looks again */
    du->errors++;
    du->own_key_unwatched = true;
    return;
  }
  if (r->nkvs == 0 || r->kvs[0].create_revision != du->leader_rev) {
    rdzv__du_stand_down(du, RDZV_ENOT_LEADER,
                        "deposed: the leader key was deleted or replaced");
    return;
  }
  watch_own_key_from(du, r->revision + 1);
}

/* Reads the leader key (a watch of it ended: compacted, or etcd lost). */
void rdzv__du_check_own_key(struct rdzv_durable *du) {
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/leader", du->prefix);
  struct rdzv_etcd_range_opts o;
  memset(&o, 0, sizeof(o));
  struct cstep *c = cstep_new(du);
  if (c == NULL || rdzv_etcd_range(du->e, k, (size_t)n, &o, on_own_key, c) < 0)
    free(c);
}

static void become_leader(struct rdzv_durable *du) {
  struct daemon *d = du->d;
  rdzv__du_set_role(du, DUR_LEADER, "the state is loaded");
  uint64_t now = rdzv__du_now_ms(du);
  d->leader_since_ms = now > 0 ? now : 1;
  struct djob *lj, *lt;
  HASH_ITER (hh, du->jobs, lj, lt)
    lj->loaded_ms = now > 0 ? now : 1;
  watch_own_key_from(du, du->leader_rev + 1);
  du->fenced = false;
  du->elections_won++;
  rdzv__du_stats_update(du);
  uint64_t keys = 0;
  struct djob *j, *t;
  HASH_ITER (hh, du->jobs, j, t)
    keys += rdzv__state_count(j->mem);
  rdzv__du_dlog(du, 1,
                "root %s (%s) leads %s/leader (revision %" PRId64 "): %u "
                "jobs, %" PRIu64 " keys loaded",
                d->cfg.name, du->self, du->prefix, du->leader_rev,
                HASH_COUNT(du->jobs), keys);
  rdzv__du_peers_refresh(du);
}

static void on_load(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    rdzv__du_dlog(du, 1, "loading the state: %s%s%s", rdzv_strerror(r->status),
                  r->message[0] ? ": " : "", r->message);
    rdzv__du_stand_down(du, r->status, "loading the state failed");
    return;
  }
  if (du->load_rev == 0)
    du->load_rev = r->revision;
  for (size_t i = 0; i < r->nkvs; i++) {
    if (load_kv(du, &r->kvs[i]) < 0) {
      rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
      return;
    }
  }
  if (r->more && r->nkvs > 0) {
    const struct rdzv_etcd_kv *last = &r->kvs[r->nkvs - 1];
    uint8_t *next = malloc(last->klen + 1);
    if (next == NULL) {
      rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
      return;
    }
    memcpy(next, last->key, last->klen);
    next[last->klen] = 0;
    load_from(du, next, last->klen + 1);
    free(next);
    return;
  }
  if (load_bigs_finish(du) < 0) {
    rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
    return;
  }
  become_leader(du);
}

static void on_incarnation(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    rdzv__du_stand_down(du, r->status, "reading the incarnation failed");
    return;
  }
  uint64_t inc = 0;
  if (r->nkvs > 0 && r->kvs[0].vlen > 0 && r->kvs[0].vlen < 24) {
    char v[24];
    memcpy(v, r->kvs[0].value, r->kvs[0].vlen);
    v[r->kvs[0].vlen] = '\0';
    inc = strtoull(v, NULL, 10);
  }
  if (inc == 0) { /* ours was created: read it back */
    char k[300];
    int n = snprintf(k, sizeof(k), "%s/incarnation", du->prefix);
    struct rdzv_etcd_range_opts o;
    memset(&o, 0, sizeof(o));
    struct cstep *c2 = cstep_new(du);
    if (c2 == NULL ||
        rdzv_etcd_range(du->e, k, (size_t)n, &o, on_incarnation, c2) < 0) {
      free(c2);
      rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory");
    }
    return;
  }
  du->d->incarnation = inc;
  du->load_rev = 0;
  du->opbase = (uint64_t)rdzv__du_random_i63();
  du->opseq = 0;
  char from[300];
  int n = snprintf(from, sizeof(from), "%s/j/", du->prefix);
  load_from(du, (const uint8_t *)from, (size_t)n);
}

/* Won the leader key: the incarnation (created once), then the state. */
static void start_loading(struct rdzv_durable *du) {
  rdzv__du_set_role(du, DUR_LOADING, "won the leader key");
  rdzv__du_jobs_free(du);
  rdzv__du_bigs_free(du);
  char k[300], v[24];
  int n = snprintf(k, sizeof(k), "%s/incarnation", du->prefix);
  int vn = snprintf(v, sizeof(v), "%" PRIu64, (uint64_t)rdzv__du_random_i63());
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  struct cstep *c = cstep_new(du);
  if (t == NULL || c == NULL ||
      rdzv_etcd_txn_compare(t, k, (size_t)n, RDZV_ETCD_CREATE, RDZV_ETCD_EQUAL,
                            0, NULL, 0) < 0 ||
      rdzv_etcd_txn_put(t, true, k, (size_t)n, v, (size_t)vn, 0) < 0 ||
      rdzv_etcd_txn_range(t, false, k, (size_t)n, false) < 0) {
    rdzv_etcd_txn_free(t);
    free(c);
    rdzv__du_stand_down(du, RDZV_ENOMEM, "out of memory");
    return;
  }
  rdzv_etcd_txn(du->e, t, on_incarnation, c);
}

static void on_watch(void *arg, int status, const char *message,
                     int64_t revision, int64_t compact_revision,
                     const struct rdzv_etcd_event *ev, size_t n) {
  struct cstep *c = arg;
  struct rdzv_durable *du = c->du;
  (void)revision;
  (void)compact_revision;
  if (status < 0) {
    bool mine = c->gen == du->gen && du->role == DUR_STANDBY;
    free(c);
    if (mine) {
      du->watch = NULL;
      rdzv__du_dlog(du, 2, "the watch of the leader key ended: %s%s%s",
                    rdzv_strerror(status), message && message[0] ? ": " : "",
                    message ? message : "");
      rdzv__du_campaign_later(du, 200);
    }
    return;
  }
  if (c->gen != du->gen || du->role != DUR_STANDBY)
    return;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].type == RDZV_ETCD_DELETE) {
      rdzv__du_dlog(du, 1, "the leader key is gone: campaigning");
      rdzv_etcd_watch_cancel(du->watch);
      du->watch = NULL;
      rdzv__du_campaign_later(du, 0);
      return;
    }
    if (ev[i].kv.vlen < sizeof(du->leader)) {
      memcpy(du->leader, ev[i].kv.value, ev[i].kv.vlen);
      du->leader[ev[i].kv.vlen] = '\0';
      du->fenced = false; /* it knows who leads now */
    }
  }
}

static void on_campaign(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    campaign_failed(du, "the leader key", r);
    rdzv__du_campaign_later(du, 500);
    return;
  }
  du->campaign_fails = 0;
  du->last_err[0] = '\0';
  if (r->succeeded || (r->nkvs > 0 && r->kvs[0].lease == du->lease)) {
    /* Won (or an earlier try of ours did). */
    du->leader_rev = r->succeeded ? r->revision : r->kvs[0].create_revision;
    snprintf(du->leader, sizeof(du->leader), "%s", du->self);
    start_loading(du);
    return;
  }
  rdzv__du_set_role(du, DUR_STANDBY, "another root holds the leader key");
  du->leader[0] = '\0';
  if (r->nkvs > 0 && r->kvs[0].vlen < sizeof(du->leader)) {
    memcpy(du->leader, r->kvs[0].value, r->kvs[0].vlen);
    du->leader[r->kvs[0].vlen] = '\0';
  }
  if (du->leader[0] != '\0')
    du->fenced = false; /* a standby of the root that leads now */
  rdzv__du_dlog(du, 1, "root %s stands by; the leader is %s", du->d->cfg.name,
                du->leader[0] ? du->leader : "(unknown)");
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/leader", du->prefix);
  struct rdzv_etcd_watch_opts o;
  memset(&o, 0, sizeof(o));
  o.start_revision = r->revision + 1;
  struct cstep *w = cstep_new(du);
  if (w == NULL ||
      rdzv_etcd_watch(du->e, k, (size_t)n, &o, on_watch, w, &du->watch) < 0) {
    free(w);
    rdzv__du_campaign_later(du, 500);
  }
}

static void on_registered(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    campaign_failed(du, "registering this root", r);
    if (r->status == RDZV_ENOKEY)
      du->lease = 0; /* expired meanwhile (etcd was away): a new one */
    rdzv__du_campaign_later(du, 500);
    return;
  }
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/leader", du->prefix);
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  struct cstep *c2 = cstep_new(du);
  if (t == NULL || c2 == NULL ||
      rdzv_etcd_txn_compare(t, k, (size_t)n, RDZV_ETCD_CREATE, RDZV_ETCD_EQUAL,
                            0, NULL, 0) < 0 ||
      rdzv_etcd_txn_put(t, true, k, (size_t)n, du->self, strlen(du->self),
                        du->lease) < 0 ||
      rdzv_etcd_txn_range(t, false, k, (size_t)n, false) < 0) {
    rdzv_etcd_txn_free(t);
    free(c2);
    rdzv__du_campaign_later(du, 500);
    return;
  }
  rdzv_etcd_txn(du->e, t, on_campaign, c2);
}

static void on_lease(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0 || r->lease_id == 0) {
    campaign_failed(du, "a lease grant", r);
    rdzv__du_campaign_later(du, 500);
    return;
  }
  du->lease = r->lease_id;
  du->lease_deadline_ms =
      rdzv__du_now_ms(du) + (uint64_t)(r->ttl_s > 0 ? r->ttl_s : 1) * 1000;
  rdzv__du_campaign_step(du);
}

/* One step: a lease if none, this root's address under it, then the
 * leader key if absent. */
void rdzv__du_campaign_step(struct rdzv_durable *du) {
  if (du->role == DUR_STOPPED)
    return;
  rdzv__du_set_role(du, DUR_CAMPAIGN, "a campaign step");
  struct cstep *c = cstep_new(du);
  if (c == NULL) {
    rdzv__du_campaign_later(du, 500);
    return;
  }
  if (du->lease == 0) {
    if (rdzv_etcd_lease_grant(du->e, du->cfg.etcd_lease_ttl_s, 0, on_lease, c) <
        0) {
      free(c);
      rdzv__du_campaign_later(du, 500);
    }
    return;
  }
  char k[600];
  int n = snprintf(k, sizeof(k), "%s/roots/%s", du->prefix, du->self);
  if (rdzv_etcd_put(du->e, k, (size_t)n, du->self, strlen(du->self), du->lease,
                    on_registered, c) < 0) {
    free(c);
    rdzv__du_campaign_later(du, 500);
  }
}
