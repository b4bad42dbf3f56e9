/* The durable root on etcd: the state backend over the in-memory one, the
 * batches that persist it behind the write gate, and the leader election.
 * See durable.h for the design and the etcd layout. */
#include "store/daemon/durable/durable.h"

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
#include "store/daemon/state/mem.h"
#include "store/daemon/transport/transport.h"
#include "store/etcd/etcd.h"

enum dur_role {
  DUR_IDLE = 0,  /* not attached yet */
  DUR_CAMPAIGN,  /* getting a lease, registering, asking for the leader key */
  DUR_STANDBY,   /* another root leads: watching its key */
  DUR_LOADING,   /* won: reading the state before serving */
  DUR_LEADER,
  DUR_STOPPED,
};

static const char *const role_names[] = {"idle",    "campaigning", "standby",
                                         "loading", "leader",      "stopped"};

/* A key of a job changed since the last batch: its tag ('k' for a key,
 * '0' + kind for a record) and name are the hash key. */
struct dirty {
  UT_hash_handle hh;
  /* The answers (RDZV_STATE_REC_OP records) of the mutations that
   * changed this key: persisted in the same transaction as the key, so
   * that a failover never finds one without the other. Each: op id (8
   * bytes), length (4, little-endian), the record. */
  struct rdzv_buf ops;
  size_t len;
  uint8_t id[]; /* tag, then the name */
};

/* A value over half of --etcd-max-request-bytes is persisted in parts:
 * "P/j/JOB/p/ID/NNNNNN" (ID unique per write), and under its key's name
 * with the tag in upper case ("K/", "R/N/", "O/") the text "ID:N:BYTES".
 * bigs maps each such key (its lower-case form) to its ID, so that a later
 * write or delete removes the old parts. */
struct bigval {
  UT_hash_handle hh;
  char id[25];
  size_t klen;
  uint8_t key[];
};

struct loadpart {
  UT_hash_handle hh;
  char name[40]; /* "ID/NNNNNN" */
  size_t len;
  uint8_t *data;
};

struct loadbig {
  struct loadbig *next;
  char id[25];
  uint32_t n;
  uint64_t total;
  size_t klen;
  int64_t lease;
  uint8_t key[]; /* the lower-case form */
};

/* A persisted group of op records ("P/j/JOB/o/HEX"): deleted once the
 * root's --dedup-window-ms has passed. */
struct opkey {
  uint8_t *key;
  size_t klen;
  uint64_t expire_ms;
  struct opkey *next;
};

/* A job: its state in memory (open or loaded), its lease, what changed. */
struct djob {
  UT_hash_handle hh;
  char *id;
  char *ekey; /* "P/j/JOB/" */
  size_t eklen;
  int64_t lease;       /* 0: none yet */
  bool lease_granted;  /* etcd has it */
  bool lease_put;      /* P/j/JOB/lease is persisted */
  struct rdzv_state *mem;
  struct dstate *open; /* the root's handle, NULL when not open */
  struct dirty *dirty;
  uint64_t ndirty;
  uint64_t loaded_ms;       /* loaded at an election; 0: opened since */
  struct dirty *last;       /* the key the latest mutation changed */
  struct rdzv_buf lone_ops; /* op records of mutations that changed no key */
  struct opkey *opkeys, **opkeys_tail; /* oldest first */
};

/* The root's handle on a job's state. */
struct dstate {
  struct rdzv_state base;
  struct rdzv_durable *du;
  struct djob *job;
};

/* One operation of a batch (owned copies). */
struct bop {
  bool glue;   /* in the same transaction as the operation before it */
  bool prefix; /* a delete of every key starting with key */
  uint8_t *key;
  size_t klen;
  uint8_t *val; /* NULL for a delete */
  size_t vlen;
  int64_t lease;
};

struct batch;
/* A request of a batch: a lease grant or a transaction over ops
 * [from, to). */
struct breq {
  struct batch *b;
  bool grant;
  bool parts; /* over b->pops, not b->ops */
  bool sent;  /* sent once (retries go from its timer) */
  int64_t lease, ttl;
  size_t from, to;
  uv_timer_t retry;
  bool timer_open;
  struct breq *next;
};

struct batch {
  struct rdzv_durable *du;
  /* The parts of values too large for one request (see emit): written
   * first, each under a fresh name, before the operations that point at
   * them. */
  struct bop *pops;
  size_t npops, pcap;
  struct bop *ops;
  size_t nops, cap;
  struct breq *reqs;
  uint32_t left;  /* requests not yet done in this phase */
  int phase;      /* 0 grants, 1 the parts, 2 the transactions, 3 done */
  uint32_t ntxn;
  uint32_t inflight; /* requests sent whose callback has not run */
  uint32_t timers;   /* retry timers not yet closed */
  bool finished;     /* done, or dropped (stood down, stopping) */
};

struct rdzv_durable {
  struct rdzv_state_backend backend; /* first: the role's context */
  uv_loop_t *loop;
  struct daemon *d;
  struct rdzv_daemon_config cfg;
  struct rdzv_etcd *e;
  char user[600], password[600];
  char prefix[256];
  char self[300]; /* this root's address as nodes reach it */
  enum dur_role role;
  uint64_t gen; /* bumped at every stand-down: older callbacks are stale */
  int64_t lease;
  uint64_t lease_deadline_ms; /* loop time the lease would expire by */
  bool keepalive_inflight;
  int64_t leader_rev; /* the leader key's create revision while leading */
  char leader[300];   /* the leader's address ("" unknown) */
  struct rdzv_etcd_watch *watch;
  uv_timer_t tick;      /* keepalives, deadline checks */
  uv_timer_t campaign;  /* the next campaign step */
  struct djob *jobs;
  uint64_t ndirty;
  struct batch *batch; /* being persisted */
  uint64_t load_rev;
  uint64_t opbase, opseq; /* names of op-record groups and of value parts:
                             unique per leader */
  struct bigval *bigs;    /* keys whose value is persisted in parts */
  struct loadpart *load_parts; /* while loading: parts met */
  struct loadbig *load_bigs;   /* while loading: values in parts met */
  int handles_open;   /* du's timers and the batches' retry timers */
  bool client_closed; /* the etcd client is closed: du goes with its
                         last handle */
  bool broken;        /* out of memory marking a change: stand down at
                         the end of the iteration */
  /* Campaign steps that failed in a row, and why the last did (told to
   * peers a standby refuses, and logged at the default level on the
   * first and every 20th). */
  uint32_t campaign_fails;
  char last_err[300];
  /* /readyz's not_fenced: this root led and a write of it was refused by
   * the leader key's compare (another root leads), why in fence_why;
   * until it won again or stands by knowing the leader. */
  bool fenced;
  char fence_why[300];
  bool own_key_unwatched; /* leading without a watch of its key: the tick
                             reads it again */
  /* Counters for logs and stats. */
  uint64_t batches, txns, ops_persisted, stand_downs, elections_won, errors;
  uint64_t lease_renewals, lease_failures; /* keepalives answered, failed */
  uint32_t lease_fails_in_row;             /* since the last answered */
};

static void campaign_later(struct rdzv_durable *du, uint64_t ms);
static void stand_down(struct rdzv_durable *du, int status, const char *why);
static void check_own_key(struct rdzv_durable *du);
static void batch_step(struct batch *b);

static uint64_t now_ms(struct rdzv_durable *du) { return uv_now(du->loop); }

/* The statistics rdzvctl stats shows under "etcd". */
static void stats_update(struct rdzv_durable *du) {
  if (du->d == NULL)
    return;
  struct stats *st = &du->d->stats;
  struct rdzv_etcd_stats es;
  rdzv_etcd_stats(du->e, &es);
  st->etcd_role = role_names[du->role];
  st->etcd_batches = du->batches;
  st->etcd_txns = du->txns;
  st->etcd_ops = du->ops_persisted;
  st->etcd_stand_downs = du->stand_downs;
  st->etcd_elections_won = du->elections_won;
  st->etcd_requests = es.requests;
  st->etcd_bytes_out = es.bytes_out;
  st->etcd_bytes_in = es.bytes_in;
  st->etcd_errors = du->errors;
  _Static_assert(sizeof(st->etcd_lat_hist) == sizeof(es.latency_hist),
                 "the latency histograms differ");
  memcpy(st->etcd_lat_hist, es.latency_hist, sizeof(st->etcd_lat_hist));
  st->etcd_lat_us_sum = es.latency_us_sum;
  st->etcd_lat_count = es.latency_count;
  st->etcd_lease_renewals = du->lease_renewals;
  st->etcd_lease_failures = du->lease_failures;
}

void rdzv__durable_checks(struct rdzv_durable *du, struct rdzv_checks *cs) {
  stats_update(du);
  const char *name = du->d != NULL ? du->d->cfg.name : "?";
  bool led = du->role == DUR_LEADER ||
             (du->role == DUR_STANDBY && du->leader[0] != '\0');
  rdzv__check_add(cs, "leader_or_standby", led,
                  "root %s is %s%s%s", name, role_names[du->role],
                  du->last_err[0] ? ": " : "", du->last_err);
  bool etcd_ok = du->campaign_fails == 0 && du->lease_fails_in_row == 0;
  rdzv__check_add(cs, "not_fenced", !du->fenced,
                  "root %s was deposed (%s) and knows no leader yet", name,
                  du->fence_why);
  rdzv__check_add(cs, "etcd", etcd_ok,
                  "root %s: etcd at %s: %s", name, rdzv_etcd_endpoint(du->e),
                  du->lease_fails_in_row > 0
                      ? "lease keepalives failing"
                      : du->last_err[0] ? du->last_err : "campaign failing");
}

static void dlog(struct rdzv_durable *du, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void dlog(struct rdzv_durable *du, int level, const char *fmt, ...) {
  char text[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (du->d != NULL)
    rdzv__log(du->d, level, "etcd: %s", text);
  else
    fprintf(stderr, "rdzvd: etcd: %s\n", text);
}

/* A random positive int64 (the kernel's generator), never 0. */
static int64_t random_i63(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
    v = (uint64_t)rand() << 32 ^ (uint64_t)rand() ^ (uint64_t)getpid();
  if (fd >= 0)
    close(fd);
  v &= INT64_MAX;
  return v != 0 ? (int64_t)v : 1;
}

/* ---- keys in etcd ------------------------------------------------------------ */

/* "P/j/JOB/" for job id (malloc'd), JOB percent-encoded. */
/* Buffers for a job's etcd keys: the prefix (under 256 bytes), "/j/",
 * the job id percent-encoded (at most 3 x 255), "/" and what follows (a
 * tag, an id: under 60 bytes) fit in 1100. */
static char *job_ekey(const char *prefix, const char *id, size_t *len) {
  size_t n = strlen(id);
  char *k = malloc(strlen(prefix) + 4 + 3 * n + 2);
  if (k == NULL)
    return NULL;
  size_t o = (size_t)sprintf(k, "%s/j/", prefix);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)id[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
        (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-')
      k[o++] = (char)ch;
    else
      o += (size_t)sprintf(k + o, "%%%02X", ch);
  }
  k[o++] = '/';
  k[o] = '\0';
  *len = o;
  return k;
}

/* The job id of an encoded one (n bytes) into out (outlen bytes). false
 * if it is not one. */
static bool job_decode(const uint8_t *p, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (o + 1 >= outlen)
      return false;
    if (p[i] != '%') {
      out[o++] = (char)p[i];
      continue;
    }
    if (i + 2 >= n)
      return false;
    char hex[3] = {(char)p[i + 1], (char)p[i + 2], 0};
    char *end;
    unsigned long v = strtoul(hex, &end, 16);
    if (*end != '\0' || v == 0)
      return false;
    out[o++] = (char)v;
    i += 2;
  }
  out[o] = '\0';
  return o > 0;
}

/* ---- jobs ---------------------------------------------------------------------- */

static struct djob *job_find(struct rdzv_durable *du, const char *id) {
  struct djob *j = NULL;
  HASH_FIND_STR(du->jobs, id, j);
  return j;
}

static struct djob *job_get(struct rdzv_durable *du, const char *id) {
  struct djob *j = job_find(du, id);
  if (j != NULL)
    return j;
  j = calloc(1, sizeof(*j));
  if (j == NULL)
    return NULL;
  j->id = strdup(id);
  j->ekey = job_ekey(du->prefix, id, &j->eklen);
  if (j->id == NULL || j->ekey == NULL ||
      rdzv__state_mem.open(&rdzv__state_mem, id, &j->mem) < 0) {
    free(j->id);
    free(j->ekey);
    free(j);
    return NULL;
  }
  j->opkeys_tail = &j->opkeys;
  HASH_ADD_KEYPTR(hh, du->jobs, j->id, strlen(j->id), j);
  return j;
}

static void job_clear_dirty(struct rdzv_durable *du, struct djob *j) {
  struct dirty *x, *t;
  HASH_ITER(hh, j->dirty, x, t) {
    HASH_DEL(j->dirty, x);
    rdzv_buf_free(&x->ops);
    free(x);
  }
  du->ndirty -= j->ndirty;
  j->ndirty = 0;
  j->last = NULL;
  rdzv_buf_free(&j->lone_ops);
}

static void bigs_drop_job(struct rdzv_durable *du, const struct djob *j);

static void job_free(struct rdzv_durable *du, struct djob *j) {
  job_clear_dirty(du, j);
  bigs_drop_job(du, j);
  while (j->opkeys != NULL) {
    struct opkey *o = j->opkeys;
    j->opkeys = o->next;
    free(o->key);
    free(o);
  }
  HASH_DEL(du->jobs, j);
  if (j->open != NULL)
    j->open->job = NULL;
  rdzv__state_close(j->mem);
  free(j->id);
  free(j->ekey);
  free(j);
}

static void jobs_free(struct rdzv_durable *du) {
  struct djob *j, *t;
  HASH_ITER(hh, du->jobs, j, t) job_free(du, j);
}

/* Marks (tag, name) of j dirty, while leading. Out of memory is a failed
 * change: the caller's change already happened in memory, so the root
 * stands down (at the end of the loop iteration) rather than acknowledge
 * what etcd will not get. */
static void mark(struct rdzv_durable *du, struct djob *j, uint8_t tag,
                 const uint8_t *name, uint32_t nlen) {
  if (du->role != DUR_LEADER || j == NULL)
    return;
  uint8_t idbuf[512];
  struct dirty *x = NULL;
  if (nlen + 1 <= sizeof(idbuf)) {
    idbuf[0] = tag;
    if (nlen > 0)
      memcpy(idbuf + 1, name, nlen);
    HASH_FIND(hh, j->dirty, idbuf, nlen + 1, x);
  } else {
    uint8_t *tmp = malloc(nlen + 1);
    if (tmp != NULL) {
      tmp[0] = tag;
      memcpy(tmp + 1, name, nlen);
      HASH_FIND(hh, j->dirty, tmp, nlen + 1, x);
      free(tmp);
    }
  }
  if (x != NULL) {
    if (tag == 'k')
      j->last = x;
    return;
  }
  x = calloc(1, sizeof(*x) + nlen + 1);
  if (x == NULL) {
    du->broken = true; /* not here: the root is inside a request */
    return;
  }
  x->len = nlen + 1;
  x->id[0] = tag;
  if (nlen > 0)
    memcpy(x->id + 1, name, nlen);
  HASH_ADD(hh, j->dirty, id, x->len, x);
  j->ndirty++;
  du->ndirty++;
  if (tag == 'k')
    j->last = x;
}

/* An op record: kept with the key its mutation changed (or alone). */
static void mark_op(struct rdzv_durable *du, struct djob *j,
                    const uint8_t *name, uint32_t nlen, const uint8_t *v,
                    uint32_t vlen) {
  if (du->role != DUR_LEADER || j == NULL || nlen != 8)
    return;
  struct rdzv_buf *b = j->last != NULL ? &j->last->ops : &j->lone_ops;
  bool first_lone = j->last == NULL && j->lone_ops.len == 0;
  uint8_t len[4] = {(uint8_t)vlen, (uint8_t)(vlen >> 8), (uint8_t)(vlen >> 16),
                    (uint8_t)(vlen >> 24)};
  if (rdzv_buf_append(b, name, 8) < 0 || rdzv_buf_append(b, len, 4) < 0 ||
      (vlen > 0 && rdzv_buf_append(b, v, vlen) < 0)) {
    du->broken = true;
    return;
  }
  if (first_lone) { /* counted as a change, so that a batch is sealed */
    j->ndirty++;
    du->ndirty++;
  }
}

/* ---- the state backend ----------------------------------------------------------- */

static struct dstate *ds(struct rdzv_state *st) { return (struct dstate *)st; }

/* The memory state under st; a closed job's handle has none (never
 * reached: the root closes its handle before it frees the job). */
#define MEM(st) (ds(st)->job->mem)

static int d_get(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                 struct rdzv_state_val *out) {
  return rdzv__state_get(MEM(st), k, klen, out);
}

static int d_set(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                 const uint8_t *v, uint32_t vlen, bool write_once) {
  int rc = rdzv__state_set(MEM(st), k, klen, v, vlen, write_once);
  if (rc == 0)
    mark(ds(st)->du, ds(st)->job, 'k', k, klen);
  return rc;
}

static int d_append(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                    const uint8_t *v, uint32_t vlen) {
  int rc = rdzv__state_append(MEM(st), k, klen, v, vlen);
  if (rc == 0)
    mark(ds(st)->du, ds(st)->job, 'k', k, klen);
  return rc;
}

static int d_del(struct rdzv_state *st, const uint8_t *k, uint32_t klen) {
  int rc = rdzv__state_del(MEM(st), k, klen);
  if (rc == 1)
    mark(ds(st)->du, ds(st)->job, 'k', k, klen);
  return rc;
}

static uint64_t d_count(struct rdzv_state *st) {
  return rdzv__state_count(MEM(st));
}

static uint64_t d_bytes(struct rdzv_state *st) {
  return rdzv__state_bytes(MEM(st));
}

struct scan_ctx {
  struct dstate *s;
  int (*cb)(void *, const uint8_t *, uint32_t, const struct rdzv_state_val *);
  void *arg;
};

static int scan_cb(void *arg, const uint8_t *k, uint32_t klen,
                   const struct rdzv_state_val *v) {
  struct scan_ctx *x = arg;
  int rc = x->cb(x->arg, k, klen, v);
  if (rc == RDZV_STATE_DELETE)
    mark(x->s->du, x->s->job, 'k', k, klen);
  return rc;
}

static int d_scan(struct rdzv_state *st, const uint8_t *prefix, uint32_t plen,
                  int (*cb)(void *, const uint8_t *, uint32_t,
                            const struct rdzv_state_val *),
                  void *arg) {
  struct scan_ctx x = {ds(st), cb, arg};
  return rdzv__state_scan(MEM(st), prefix, plen, scan_cb, &x);
}

static int d_rec_put(struct rdzv_state *st, enum rdzv_state_rec kind,
                     const uint8_t *name, uint32_t nlen, const uint8_t *v,
                     uint32_t vlen) {
  int rc = rdzv__state_rec_put(MEM(st), kind, name, nlen, v, vlen);
  if (rc == 0 && kind == RDZV_STATE_REC_OP)
    mark_op(ds(st)->du, ds(st)->job, name, nlen, v, vlen);
  else if (rc == 0)
    mark(ds(st)->du, ds(st)->job, (uint8_t)('0' + kind), name, nlen);
  return rc;
}

static int d_rec_get(struct rdzv_state *st, enum rdzv_state_rec kind,
                     const uint8_t *name, uint32_t nlen,
                     struct rdzv_state_val *out) {
  return rdzv__state_rec_get(MEM(st), kind, name, nlen, out);
}

static int d_rec_del(struct rdzv_state *st, enum rdzv_state_rec kind,
                     const uint8_t *name, uint32_t nlen) {
  struct rdzv_state_val v;
  bool had = rdzv__state_rec_get(MEM(st), kind, name, nlen, &v) == 0;
  int rc = rdzv__state_rec_del(MEM(st), kind, name, nlen);
  /* Op records go from etcd by their group's expiry, not one by one. */
  if (rc == 0 && had && kind != RDZV_STATE_REC_OP)
    mark(ds(st)->du, ds(st)->job, (uint8_t)('0' + kind), name, nlen);
  return rc;
}

/* The root closes its handle (it stops, stands down, or the job ended):
 * what memory holds goes with the job entry, except while leading, where
 * a job that is only closed (not finished) keeps it for the next open. */
static void d_close(struct rdzv_state *st) {
  struct dstate *s = ds(st);
  if (s->job != NULL) {
    s->job->open = NULL;
    if (s->du->role != DUR_LEADER)
      job_free(s->du, s->job);
  }
  free(s);
}

static void on_finish_done(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  if (r->status < 0 && r->status != RDZV_ECANCELED)
    dlog(du, 0, "removing an ended job's state failed: %s%s%s (its lease "
         "expires it within --etcd-job-ttl-s)", rdzv_strerror(r->status),
         r->message[0] ? ": " : "", r->message);
}

/* Job j ended: its etcd keys go (fenced by the leader key), then its
 * lease; memory goes now. */
static void job_remove(struct rdzv_durable *du, struct djob *j) {
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  char lk[300];
  int n = snprintf(lk, sizeof(lk), "%s/leader", du->prefix);
  if (t != NULL &&
      rdzv_etcd_txn_compare(t, lk, (size_t)n, RDZV_ETCD_CREATE,
                            RDZV_ETCD_EQUAL, du->leader_rev, NULL, 0) == 0 &&
      rdzv_etcd_txn_delete(t, true, j->ekey, j->eklen, true) == 0) {
    rdzv_etcd_txn(du->e, t, on_finish_done, du);
    t = NULL;
  }
  rdzv_etcd_txn_free(t);
  if (j->lease_granted)
    rdzv_etcd_lease_revoke(du->e, j->lease, on_finish_done, du);
  dlog(du, 1, "job %s ended: its state is removed from etcd", j->id);
  if (j->open != NULL)
    j->open->job = NULL;
  job_free(du, j);
}

static void d_finish(struct rdzv_state *st) {
  struct dstate *s = ds(st);
  struct rdzv_durable *du = s->du;
  if (s->job != NULL && du->role == DUR_LEADER) {
    job_remove(du, s->job);
    s->job = NULL;
  }
  d_close(st);
}

static const struct rdzv_state_ops d_ops = {
    d_get,     d_set,     d_append,  d_del,     d_count,  d_bytes,
    d_scan,    d_rec_put, d_rec_get, d_rec_del, d_close,  d_finish,
};

static int d_open(const struct rdzv_state_backend *b, const char *job,
                  struct rdzv_state **out) {
  struct rdzv_durable *du = (struct rdzv_durable *)b;
  *out = NULL;
  if (du->role != DUR_LEADER)
    return RDZV_ENOT_LEADER;
  struct djob *j = job_get(du, job);
  struct dstate *s = j != NULL ? calloc(1, sizeof(*s)) : NULL;
  if (s == NULL)
    return RDZV_ENOMEM;
  if (j->open != NULL) /* never: the root opens a job once */
    j->open->job = NULL;
  s->base.ops = &d_ops;
  s->du = du;
  s->job = j;
  j->open = s;
  j->loaded_ms = 0;
  *out = &s->base;
  return 0;
}

/* ---- batches: the dirty keys to etcd ---------------------------------------------- */

static void batch_free(struct batch *b) {
  for (size_t i = 0; i < b->nops; i++) {
    free(b->ops[i].key);
    free(b->ops[i].val);
  }
  free(b->ops);
  for (size_t i = 0; i < b->npops; i++) {
    free(b->pops[i].key);
    free(b->pops[i].val);
  }
  free(b->pops);
  struct breq *r = b->reqs;
  while (r != NULL) {
    struct breq *n = r->next;
    free(r);
    r = n;
  }
  free(b);
}

static int bop_push(struct bop **arr, size_t *n, size_t *cap, const void *k1,
                    size_t n1, const void *k2, size_t n2, const void *v1,
                    size_t m1, const void *v2, size_t m2, bool del,
                    int64_t lease) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 64;
    struct bop *o = realloc(*arr, c * sizeof(*o));
    if (o == NULL)
      return RDZV_ENOMEM;
    *arr = o;
    *cap = c;
  }
  struct bop *o = &(*arr)[*n];
  memset(o, 0, sizeof(*o));
  o->klen = n1 + n2;
  o->key = malloc(o->klen > 0 ? o->klen : 1);
  if (o->key == NULL)
    return RDZV_ENOMEM;
  memcpy(o->key, k1, n1);
  if (n2 > 0)
    memcpy(o->key + n1, k2, n2);
  if (!del) {
    o->vlen = m1 + m2;
    o->val = malloc(o->vlen > 0 ? o->vlen : 1);
    if (o->val == NULL) {
      free(o->key);
      return RDZV_ENOMEM;
    }
    if (m1 > 0)
      memcpy(o->val, v1, m1);
    if (m2 > 0)
      memcpy(o->val + m1, v2, m2);
  }
  o->lease = lease;
  (*n)++;
  return 0;
}

static int bop_add(struct batch *b, const void *k1, size_t n1, const void *k2,
                   size_t n2, const void *v1, size_t m1, const void *v2,
                   size_t m2, bool del, int64_t lease) {
  return bop_push(&b->ops, &b->nops, &b->cap, k1, n1, k2, n2, v1, m1, v2, m2,
                  del, lease);
}

static struct bigval *big_find(struct rdzv_durable *du, const uint8_t *k,
                               size_t klen) {
  struct bigval *g = NULL;
  HASH_FIND(hh, du->bigs, k, klen, g);
  return g;
}

static int big_set(struct rdzv_durable *du, const uint8_t *k, size_t klen,
                   const char *id) {
  struct bigval *g = big_find(du, k, klen);
  if (g == NULL) {
    g = calloc(1, sizeof(*g) + klen);
    if (g == NULL)
      return RDZV_ENOMEM;
    memcpy(g->key, k, klen);
    g->klen = klen;
    HASH_ADD(hh, du->bigs, key, g->klen, g);
  }
  snprintf(g->id, sizeof(g->id), "%s", id);
  return 0;
}

/* The job's entries go with it (what etcd holds of it is removed or
 * expires with its lease; a later job of that id starts afresh). */
static void bigs_drop_job(struct rdzv_durable *du, const struct djob *j) {
  struct bigval *g, *t;
  HASH_ITER(hh, du->bigs, g, t) {
    if (g->klen > j->eklen && memcmp(g->key, j->ekey, j->eklen) == 0) {
      HASH_DEL(du->bigs, g);
      free(g);
    }
  }
}

static void bigs_free(struct rdzv_durable *du) {
  struct bigval *g, *t;
  HASH_ITER(hh, du->bigs, g, t) {
    HASH_DEL(du->bigs, g);
    free(g);
  }
}

/* One key's new value (v1 then v2) or its delete, for j (tag at offset
 * j->eklen of key: 'k', 'r' or 'o'), glued to the operation before it
 * when glue. A value over half of --etcd-max-request-bytes goes in parts
 * (struct bigval); a key that had parts loses them. */
static int emit(struct rdzv_durable *du, struct batch *b, struct djob *j,
                uint8_t *key, size_t klen, const uint8_t *v1, size_t m1,
                const uint8_t *v2, size_t m2, bool del, bool glue) {
  size_t part = du->cfg.etcd_max_request_bytes / 2;
  size_t total = m1 + m2;
  struct bigval *old = big_find(du, key, klen);
  char old_id[25] = "";
  if (old != NULL)
    snprintf(old_id, sizeof(old_id), "%s", old->id);
  size_t first = b->nops;
  int rc = 0;
  if (!del && total > part) {
    char id[25];
    snprintf(id, sizeof(id), "%016" PRIx64 "%08" PRIx64, du->opbase,
             ++du->opseq & 0xffffffffu);
    uint8_t *all = malloc(total);
    if (all == NULL)
      return RDZV_ENOMEM;
    if (m1 > 0)
      memcpy(all, v1, m1);
    if (m2 > 0)
      memcpy(all + m1, v2, m2);
    uint32_t n = (uint32_t)((total + part - 1) / part);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
      char pk[1100];
      int pn = snprintf(pk, sizeof(pk), "%.*sp/%s/%06u", (int)j->eklen,
                        j->ekey, id, i);
      size_t off = (size_t)i * part;
      size_t len = total - off < part ? total - off : part;
      rc = bop_push(&b->pops, &b->npops, &b->pcap, pk, (size_t)pn, NULL, 0,
                    all + off, len, NULL, 0, false, j->lease);
    }
    free(all);
    char mark[80];
    int mn = snprintf(mark, sizeof(mark), "%s:%u:%zu", id, n, total);
    key[j->eklen] = (uint8_t)(key[j->eklen] - 'a' + 'A');
    if (rc == 0)
      rc = bop_add(b, key, klen, NULL, 0, mark, (size_t)mn, NULL, 0, false,
                   j->lease);
    key[j->eklen] = (uint8_t)(key[j->eklen] - 'A' + 'a');
    if (rc == 0) /* the small form goes */
      rc = bop_add(b, key, klen, NULL, 0, NULL, 0, NULL, 0, true, 0);
    if (rc == 0)
      rc = big_set(du, key, klen, id);
  } else {
    rc = bop_add(b, key, klen, NULL, 0, v1, m1, v2, m2, del, j->lease);
    if (rc == 0 && old != NULL) { /* the large form goes */
      key[j->eklen] = (uint8_t)(key[j->eklen] - 'a' + 'A');
      rc = bop_add(b, key, klen, NULL, 0, NULL, 0, NULL, 0, true, 0);
      key[j->eklen] = (uint8_t)(key[j->eklen] - 'A' + 'a');
      HASH_DEL(du->bigs, old);
      free(old);
    }
  }
  if (rc == 0 && old_id[0] != '\0') { /* the old parts go */
    char pk[1100];
    int pn = snprintf(pk, sizeof(pk), "%.*sp/%s/", (int)j->eklen, j->ekey,
                      old_id);
    rc = bop_add(b, pk, (size_t)pn, NULL, 0, NULL, 0, NULL, 0, true, 0);
    if (rc == 0)
      b->ops[b->nops - 1].prefix = true;
  }
  for (size_t i = first; rc == 0 && i < b->nops; i++)
    b->ops[i].glue = i > first || glue;
  return rc;
}

/* The operation of one dirty entry: the current value put, or a delete. */
static int dirty_op(struct rdzv_durable *du, struct batch *b, struct djob *j,
                    const struct dirty *x) {
  const uint8_t *name = x->id + 1;
  uint32_t nlen = (uint32_t)(x->len - 1);
  struct rdzv_state_val v;
  char pre[1100];
  int pl;
  bool have;
  uint8_t flag = 'm';
  if (x->id[0] == 'k') {
    have = rdzv__state_get(j->mem, name, nlen, &v) == 0;
    flag = have && v.write_once ? 'w' : 'm';
    pl = snprintf(pre, sizeof(pre), "%.*sk/", (int)j->eklen, j->ekey);
  } else {
    int kind = x->id[0] - '0';
    have = rdzv__state_rec_get(j->mem, (enum rdzv_state_rec)kind, name, nlen,
                               &v) == 0;
    pl = snprintf(pre, sizeof(pre), "%.*sr/%d/", (int)j->eklen, j->ekey, kind);
  }
  if (pl < 0 || (size_t)pl >= sizeof(pre))
    return RDZV_ENOMEM;
  uint8_t *key = malloc((size_t)pl + nlen);
  if (key == NULL)
    return RDZV_ENOMEM;
  memcpy(key, pre, (size_t)pl);
  if (nlen > 0)
    memcpy(key + pl, name, nlen);
  /* A key's value is its flag byte, then its bytes; a record's its
   * bytes. */
  bool is_key = x->id[0] == 'k';
  int rc = emit(du, b, j, key, (size_t)pl + nlen, is_key ? &flag : NULL,
                is_key && have ? 1 : 0, have ? v.p : NULL, have ? v.n : 0,
                !have, false);
  free(key);
  return rc;
}

static void breq_send(struct breq *r);

static void maybe_free_du(struct rdzv_durable *du);

/* A batch goes once it is finished and nothing points at it any more. */
static void batch_maybe_free(struct batch *b) {
  if (b->finished && b->inflight == 0 && b->timers == 0)
    batch_free(b);
}

/* The batch is done or dropped: its retry timers close. */
static void batch_finish(struct batch *b);

static void on_retry_closed(uv_handle_t *h) {
  struct breq *r = h->data;
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  r->timer_open = false;
  b->timers--;
  du->handles_open--;
  batch_maybe_free(b);
  maybe_free_du(du);
}

static void batch_finish(struct batch *b) {
  b->finished = true;
  for (struct breq *x = b->reqs; x != NULL; x = x->next)
    if (x->timer_open && !uv_is_closing((uv_handle_t *)&x->retry))
      uv_close((uv_handle_t *)&x->retry, on_retry_closed);
  batch_maybe_free(b);
}

static void on_retry(uv_timer_t *t) {
  struct breq *r = t->data;
  if (r->b->finished)
    return;
  breq_send(r);
}

/* A request of the batch failed: again after a pause while the lease
 * holds; a transaction over its size limit splits in two. */
static void breq_failed(struct breq *r, const struct rdzv_etcd_result *res) {
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  du->errors++;
  if (!r->grant && res->status == RDZV_ETOO_LARGE && r->to - r->from > 1) {
    struct breq *h = calloc(1, sizeof(*h));
    if (h != NULL) {
      *h = *r;
      h->timer_open = false;
      size_t mid = r->from + (r->to - r->from) / 2;
      struct bop *arr = r->parts ? b->pops : b->ops;
      while (mid > r->from + 1 && arr[mid].glue)
        mid--;
      h->from = mid;
      r->to = mid;
      h->next = b->reqs;
      b->reqs = h;
      b->left++;
      dlog(du, 1, "a transaction over etcd's limits (%s): split in two",
           res->message);
      breq_send(r);
      breq_send(h);
      return;
    }
  }
  /* What etcd will refuse however often it is asked (an unknown lease, a
   * part over its size limit, a permission it lacks) ends the leadership,
   * saying why: a new leader loads what etcd has. */
  bool transient = res->status != RDZV_ENOKEY && res->status != RDZV_ETOO_LARGE &&
                   !(res->status == RDZV_EETCD && res->http >= 400 &&
                     res->http < 500 && res->http != 408 && res->http != 429);
  if (!transient) {
    char why[600];
    snprintf(why, sizeof(why), "etcd refused a %s: %s%s%s%s",
             r->grant ? "lease grant" : "transaction", rdzv_strerror(res->status),
             res->message[0] ? ": " : "", res->message,
             res->status == RDZV_ETOO_LARGE
                 ? " (is --etcd-max-request-bytes above etcd's "
                   "--max-request-bytes?)"
                 : "");
    stand_down(du, res->status, why);
    return;
  }
  if (now_ms(du) >= du->lease_deadline_ms) {
    char why[600];
    snprintf(why, sizeof(why), "etcd lease lost: persisting failed past the "
             "lease's %u s: %s%s%s", du->cfg.etcd_lease_ttl_s,
             rdzv_strerror(res->status), res->message[0] ? ": " : "",
             res->message);
    stand_down(du, RDZV_ELEASE_LOST, why);
    return;
  }
  dlog(du, 2, "%s failed (%s%s%s): again", r->grant ? "a lease grant" :
       "a transaction", rdzv_strerror(res->status),
       res->message[0] ? ": " : "", res->message);
  if (!r->timer_open) {
    uv_timer_init(du->loop, &r->retry);
    r->retry.data = r;
    r->timer_open = true;
    b->timers++;
    du->handles_open++;
  }
  uv_timer_start(&r->retry, on_retry, 100, 0);
}

static void on_breq(void *arg, const struct rdzv_etcd_result *res) {
  struct breq *r = arg;
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  b->inflight--;
  if (b->finished || res->status == RDZV_ECANCELED) {
    batch_maybe_free(b); /* stood down or stopping: the batch is dropped */
    return;
  }
  if (r->grant && res->status == RDZV_EETCD && res->http == 412)
    res = NULL; /* "lease already exists": an earlier try got through */
  if (res != NULL && res->status < 0) {
    breq_failed(r, res);
    return;
  }
  if (!r->grant && res != NULL && !res->succeeded) {
    stand_down(du, RDZV_ENOT_LEADER,
               "fenced: the leader key changed (another root leads now)");
    return;
  }
  if (r->grant) {
    struct djob *j, *t;
    HASH_ITER(hh, du->jobs, j, t) {
      if (j->lease == r->lease)
        j->lease_granted = true;
    }
  } else {
    du->txns++;
    du->ops_persisted += r->to - r->from;
  }
  if (--b->left == 0)
    batch_step(b);
}

static void breq_send(struct breq *r) {
  struct batch *b = r->b;
  struct rdzv_durable *du = b->du;
  int rc;
  r->sent = true;
  if (r->grant) {
    rc = rdzv_etcd_lease_grant(du->e, r->ttl, r->lease, on_breq, r);
  } else {
    struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
    char lk[300];
    int n = snprintf(lk, sizeof(lk), "%s/leader", du->prefix);
    rc = t != NULL ? rdzv_etcd_txn_compare(t, lk, (size_t)n, RDZV_ETCD_CREATE,
                                           RDZV_ETCD_EQUAL, du->leader_rev,
                                           NULL, 0)
                   : RDZV_ENOMEM;
    struct bop *arr = r->parts ? b->pops : b->ops;
    for (size_t i = r->from; rc == 0 && i < r->to; i++) {
      struct bop *o = &arr[i];
      rc = o->val != NULL ? rdzv_etcd_txn_put(t, true, o->key, o->klen, o->val,
                                              o->vlen, o->lease)
                          : rdzv_etcd_txn_delete(t, true, o->key, o->klen,
                                                 o->prefix);
    }
    if (rc == 0) {
      rc = rdzv_etcd_txn(du->e, t, on_breq, r);
      t = NULL;
    }
    rdzv_etcd_txn_free(t);
  }
  if (rc == 0)
    b->inflight++;
  else
    stand_down(du, rc, "out of memory sending to etcd");
}

/* Phase 1: the leases of jobs new to etcd; phase 2: the transactions;
 * then the gate opens. */
/* The transactions over b->pops (parts) or b->ops, each below
 * --etcd-max-txn-ops and --etcd-max-request-bytes, a glued group never
 * cut (a group alone over the limits goes whole: etcd refuses it, and it
 * is split then). Returns how many, or RDZV_ENOMEM. */
static int chunk(struct batch *b, bool parts) {
  struct rdzv_durable *du = b->du;
  struct bop *arr = parts ? b->pops : b->ops;
  size_t n = parts ? b->npops : b->nops;
  size_t max_ops = du->cfg.etcd_max_txn_ops > 1 ? du->cfg.etcd_max_txn_ops - 1
                                                : 1; /* one is the compare */
  size_t max_bytes = du->cfg.etcd_max_request_bytes;
  size_t i = 0;
  int made = 0;
  while (i < n) {
    size_t from = i, bytes = 64;
    while (i < n && i - from < max_ops &&
           (i == from || bytes + arr[i].klen + arr[i].vlen + 32 <= max_bytes)) {
      bytes += arr[i].klen + arr[i].vlen + 32;
      i++;
    }
    if (i < n && arr[i].glue) {
      size_t g = i;
      while (g > from && arr[g].glue)
        g--;
      if (g > from)
        i = g; /* the group starts the next transaction */
      else
        while (i < n && arr[i].glue)
          i++;
    }
    struct breq *r = calloc(1, sizeof(*r));
    if (r == NULL)
      return RDZV_ENOMEM;
    r->b = b;
    r->parts = parts;
    r->from = from;
    r->to = i;
    r->next = b->reqs;
    b->reqs = r;
    b->left++;
    b->ntxn++;
    made++;
  }
  return made;
}

/* Phase 0: the leases of jobs new to etcd (sent by gate_start); 1: the
 * parts of large values; 2: the transactions; then the gate opens. */
static void batch_step(struct batch *b) {
  struct rdzv_durable *du = b->du;
  while (b->phase < 2) {
    b->phase++;
    bool parts = b->phase == 1;
    int made = chunk(b, parts);
    if (made < 0) {
      stand_down(du, RDZV_ENOMEM, "out of memory building a transaction");
      return;
    }
    if (made > 0) {
      /* Sent after the loop: a callback never runs inside a send. */
      for (struct breq *r = b->reqs; r != NULL && !b->finished; r = r->next)
        if (!r->grant && r->parts == parts && !r->sent)
          breq_send(r);
      return;
    }
  }
  /* Done: what waited for it goes out. */
  b->phase = 3;
  du->batches++;
  du->batch = NULL;
  batch_finish(b);
  stats_update(du);
  rdzv__gate_done(du->d);
}

/* Remembers a persisted group of op records for its expiry. */
static int opkey_add(struct djob *j, const uint8_t *k, size_t klen,
                     uint64_t expire_ms) {
  struct opkey *o = calloc(1, sizeof(*o));
  if (o == NULL || (o->key = malloc(klen)) == NULL) {
    free(o);
    return RDZV_ENOMEM;
  }
  memcpy(o->key, k, klen);
  o->klen = klen;
  o->expire_ms = expire_ms;
  *j->opkeys_tail = o;
  j->opkeys_tail = &o->next;
  return 0;
}

/* The op records ops (see struct dirty) as one etcd key of j, glued to
 * the operation before it when glue. */
static int ops_group(struct rdzv_durable *du, struct batch *b, struct djob *j,
                     const struct rdzv_buf *ops, bool glue) {
  char k[1100];
  int n = snprintf(k, sizeof(k), "%.*so/%016" PRIx64 "%08" PRIx64,
                   (int)j->eklen, j->ekey, du->opbase, ++du->opseq);
  if (n < 0 || (size_t)n >= sizeof(k))
    return RDZV_ENOMEM;
  int rc = emit(du, b, j, (uint8_t *)k, (size_t)n, ops->data, ops->len, NULL,
                0, false, glue);
  if (rc == 0)
    rc = opkey_add(j, (const uint8_t *)k, (size_t)n,
                   now_ms(du) + du->cfg.dedup_window_ms);
  return rc;
}

static bool gate_pending(void *arg) {
  struct rdzv_durable *du = arg;
  return du->role == DUR_LEADER && (du->ndirty > 0 || du->broken);
}

static void gate_start(void *arg) {
  struct rdzv_durable *du = arg;
  if (du->broken) {
    du->broken = false;
    stand_down(du, RDZV_ENOMEM, "out of memory marking a change");
    return;
  }
  struct batch *b = calloc(1, sizeof(*b));
  if (b == NULL) {
    stand_down(du, RDZV_ENOMEM, "out of memory sealing a batch");
    return;
  }
  b->du = du;
  struct djob *j, *jt;
  int rc = 0;
  HASH_ITER(hh, du->jobs, j, jt) {
    if (j->ndirty == 0)
      continue;
    if (j->lease == 0)
      j->lease = random_i63();
    if (!j->lease_granted) {
      struct breq *r = calloc(1, sizeof(*r));
      if (r == NULL) {
        rc = RDZV_ENOMEM;
        break;
      }
      r->b = b;
      r->grant = true;
      r->lease = j->lease;
      r->ttl = du->cfg.etcd_job_ttl_s;
      r->next = b->reqs;
      b->reqs = r;
      b->left++;
    }
    if (!j->lease_put) {
      char v[24];
      int n = snprintf(v, sizeof(v), "%" PRId64, j->lease);
      rc = bop_add(b, j->ekey, j->eklen, "lease", 5, v, (size_t)n, NULL, 0,
                   false, j->lease);
      j->lease_put = rc == 0;
    }
    /* Groups past the dedup window go (before this batch adds its own:
     * a key must not be put and deleted in one transaction). */
    uint64_t now = now_ms(du);
    while (rc == 0 && j->opkeys != NULL && j->opkeys->expire_ms <= now) {
      struct opkey *o = j->opkeys;
      rc = emit(du, b, j, o->key, o->klen, NULL, 0, NULL, 0, true, false);
      if (rc < 0)
        break;
      j->opkeys = o->next;
      if (j->opkeys == NULL)
        j->opkeys_tail = &j->opkeys;
      free(o->key);
      free(o);
    }
    struct dirty *x, *xt;
    HASH_ITER(hh, j->dirty, x, xt) {
      if (rc == 0)
        rc = dirty_op(du, b, j, x);
      if (rc == 0 && x->ops.len > 0)
        rc = ops_group(du, b, j, &x->ops, true);
    }
    if (rc == 0 && j->lone_ops.len > 0)
      rc = ops_group(du, b, j, &j->lone_ops, false);
    job_clear_dirty(du, j);
    if (rc < 0)
      break;
  }
  if (rc < 0) {
    batch_free(b);
    stand_down(du, rc, "out of memory sealing a batch");
    return;
  }
  du->batch = b;
  if (b->left == 0) {
    batch_step(b);
    return;
  }
  for (struct breq *r = b->reqs; r != NULL && !b->finished; r = r->next)
    breq_send(r);
}

static const struct rdzv_gate gate = {gate_pending, gate_start};

/* ---- admission ------------------------------------------------------------------ */

static int admit(void *arg, char *text, size_t textlen, char *leader,
                 size_t leaderlen) {
  struct rdzv_durable *du = arg;
  if (du->role == DUR_LEADER)
    return 1;
  snprintf(leader, leaderlen, "%s", du->role == DUR_STANDBY ? du->leader : "");
  if (du->role == DUR_CAMPAIGN && du->last_err[0] != '\0')
    snprintf(text, textlen,
             "root %s (%s) is not the leader of %s/leader: no leader known; "
             "etcd: %s", du->d->cfg.name, du->self, du->prefix, du->last_err);
  else
    snprintf(text, textlen,
             "root %s (%s) is not the leader of %s/leader: it is %s%s%s",
             du->d->cfg.name, du->self, du->prefix, role_names[du->role],
             leader[0] ? "; the leader is " : "", leader);
  return 0;
}

/* What a load left half done (a stand-down meanwhile) goes. */
static void load_bigs_finish_drop(struct rdzv_durable *du) {
  while (du->load_bigs != NULL) {
    struct loadbig *lb = du->load_bigs;
    du->load_bigs = lb->next;
    free(lb);
  }
  struct loadpart *lp, *t;
  HASH_ITER(hh, du->load_parts, lp, t) {
    HASH_DEL(du->load_parts, lp);
    free(lp->data);
    free(lp);
  }
}

/* ---- standing down ---------------------------------------------------------------- */

static void stand_down(struct rdzv_durable *du, int status, const char *why) {
  if (du->role == DUR_STOPPED)
    return;
  bool was_leader = du->role == DUR_LEADER || du->role == DUR_LOADING;
  du->gen++;
  du->role = DUR_CAMPAIGN;
  du->leader_rev = 0;
  du->leader[0] = '\0';
  if (du->watch != NULL) {
    rdzv_etcd_watch_cancel(du->watch);
    du->watch = NULL;
  }
  if (du->batch != NULL) { /* dropped: its callbacks only free it */
    struct batch *b = du->batch;
    du->batch = NULL;
    batch_finish(b);
  }
  struct daemon *d = du->d;
  if (was_leader && status == RDZV_ENOT_LEADER) {
    du->fenced = true;
    snprintf(du->fence_why, sizeof(du->fence_why), "%s", why);
  }
  if (was_leader) {
    du->stand_downs++;
    dlog(du, 0, "root %s stands down: %s", d->cfg.name, why);
    rdzv__gate_drop(d);
    char text[800];
    snprintf(text, sizeof(text), "root %s stood down (%s): reconnect to the "
             "leader", d->cfg.name, why);
    /* A lost lease is said to every waiting caller (the job's state in
     * etcd may be gone with it); a root that was only deposed leaves its
     * callers' requests to be sent again to the new leader. Then every
     * connection closes. */
    for (struct job *j = d->jobs; status == RDZV_ELEASE_LOST && j != NULL;
         j = j->next)
      if (d->role->fail_all != NULL)
        d->role->fail_all(d, j, status, text);
    rdzv__gate_release(d);
    struct conn *c, *next;
    for (c = TAILQ_FIRST(&d->conns); c != NULL; c = next) {
      next = TAILQ_NEXT(c, link);
      if (c->state == CONN_READY && !c->inproc)
        rdzv__conn_fail(c, status, text);
    }
    for (struct job *j = d->jobs; j != NULL; j = j->next)
      d->role->job_free(d, j);
    rdzv__addrs_truncate(d->peers, &d->npeers, 0);
  }
  jobs_free(du);
  bigs_free(du);
  load_bigs_finish_drop(du);
  du->ndirty = 0;
  campaign_later(du, 200);
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
    dlog(du, 0, "a job's etcd lease (%" PRId64 ") is gone: that job's "
         "persisted state expired", r->lease_id);
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

static void peers_refresh(struct rdzv_durable *du) {
  char k[300];
  int n = snprintf(k, sizeof(k), "%s/roots/", du->prefix);
  struct rdzv_etcd_range_opts o;
  memset(&o, 0, sizeof(o));
  o.prefix = true;
  rdzv_etcd_range(du->e, k, (size_t)n, &o, on_peers, du);
}

static void on_tick(uv_timer_t *t) {
  struct rdzv_durable *du = t->data;
  stats_update(du);
  if (du->role == DUR_STOPPED || du->lease == 0)
    return;
  if ((du->role == DUR_LEADER || du->role == DUR_LOADING) &&
      now_ms(du) >= du->lease_deadline_ms) {
    char why[300];
    snprintf(why, sizeof(why), "etcd lease lost: etcd did not answer a "
             "keepalive for the lease's %u s", du->cfg.etcd_lease_ttl_s);
    stand_down(du, RDZV_ELEASE_LOST, why);
    return;
  }
  if (!du->keepalive_inflight) {
    struct ka *k = malloc(sizeof(*k));
    if (k != NULL) {
      k->du = du;
      k->gen = du->gen;
      k->sent_ms = now_ms(du);
      if (rdzv_etcd_lease_keepalive(du->e, du->lease, on_keepalive, k) == 0)
        du->keepalive_inflight = true;
      else
        free(k);
    }
  }
  if (du->role == DUR_LEADER && du->own_key_unwatched && du->watch == NULL) {
    du->own_key_unwatched = false;
    check_own_key(du);
  }
  if (du->role == DUR_LEADER) {
    struct djob *j, *jt;
    uint64_t now = now_ms(du);
    HASH_ITER(hh, du->jobs, j, jt) {
      /* A job loaded at the election that nobody reopened within
       * --job-linger-ms ended, as it would have at the old leader. */
      if (j->open == NULL && j->loaded_ms != 0 &&
          now - j->loaded_ms > du->cfg.job_linger_ms) {
        job_remove(du, j);
        continue;
      }
      if (j->lease_granted)
        rdzv_etcd_lease_keepalive(du->e, j->lease, on_job_keepalive, du);
    }
    peers_refresh(du);
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
    stats_update(du);
    return;
  }
  du->lease_failures++;
  du->lease_fails_in_row++;
  stats_update(du);
  if (r->status == RDZV_ELEASE_LOST) {
    if (du->role == DUR_LEADER || du->role == DUR_LOADING)
      stand_down(du, RDZV_ELEASE_LOST,
                 "etcd lease lost: etcd says the lease expired or was "
                 "revoked");
    else {
      du->lease = 0; /* a new one at the next campaign */
      stand_down(du, RDZV_ELEASE_LOST, "lease lost while standing by");
    }
    return;
  }
  du->errors++;
  dlog(du, 2, "keepalive failed: %s%s%s", rdzv_strerror(r->status),
       r->message[0] ? ": " : "", r->message);
}

/* ---- the election ------------------------------------------------------------------ */

static void campaign_step(struct rdzv_durable *du);

static void on_campaign_timer(uv_timer_t *t) {
  campaign_step(t->data);
}

/* A campaign step failed (what: which, r: etcd's answer). */
static void campaign_failed(struct rdzv_durable *du, const char *what,
                            const struct rdzv_etcd_result *r) {
  du->errors++;
  snprintf(du->last_err, sizeof(du->last_err), "%s at %s: %s%s%.200s", what,
           rdzv_etcd_endpoint(du->e), rdzv_strerror(r->status),
           r->message[0] ? ": " : "", r->message);
  dlog(du, du->campaign_fails++ % 20 == 0 ? 1 : 2,
       "root %s cannot campaign: %s (trying again)", du->d->cfg.name,
       du->last_err);
}

static void campaign_later(struct rdzv_durable *du, uint64_t ms) {
  if (du->role == DUR_STOPPED)
    return;
  du->role = DUR_CAMPAIGN;
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

static void load_from(struct rdzv_durable *du, const uint8_t *key, size_t klen) {
  char end[300];
  int n = snprintf(end, sizeof(end), "%s/j0", du->prefix); /* after "P/j/" */
  struct rdzv_etcd_range_opts o;
  memset(&o, 0, sizeof(o));
  o.range_end = end;
  o.relen = (size_t)n;
  o.limit = 1000;
  o.revision = du->load_rev;
  struct cstep *c = cstep_new(du);
  if (c == NULL ||
      rdzv_etcd_range(du->e, key, klen, &o, on_load, c) < 0) {
    free(c);
    stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
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
  if (slash == NULL || !job_decode(p, (size_t)(slash - p), id, sizeof(id)))
    return 0; /* not ours: left alone */
  struct djob *j = job_get(du, id);
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
    char mark[80];
    unsigned n = 0;
    unsigned long long total = 0;
    char pid[25];
    if (kv->vlen >= sizeof(mark))
      return 0;
    memcpy(mark, kv->value, kv->vlen);
    mark[kv->vlen] = '\0';
    if (sscanf(mark, "%24[0-9a-f]:%u:%llu", pid, &n, &total) != 3 || n == 0)
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
        job_decode(p, (size_t)(slash - p), id, sizeof(id)) &&
        (j = job_get(du, id)) != NULL) {
      rc = load_value(du, j, lb->key, lb->klen, slash + 1,
                      (size_t)(e - slash - 1), all, lb->total);
      if (rc == 0)
        rc = big_set(du, lb->key, lb->klen, lb->id);
    } else if (rc == 0 && all == NULL) {
      rc = RDZV_ENOMEM;
    } else if (rc == 0) {
      dlog(du, 0, "a large value in etcd lacks parts (%s): left out",
           lb->id);
    }
    free(all);
    free(lb);
  }
  struct loadpart *lp, *t;
  HASH_ITER(hh, du->load_parts, lp, t) {
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
      int rc = rdzv__state_rec_put(j->mem, RDZV_STATE_REC_OP, e8, 8, e8 + 12,
                                   vl);
      if (rc < 0)
        return rc;
      pos += 12 + vl;
    }
    return opkey_add(j, key, klen, now_ms(du) + du->cfg.dedup_window_ms);
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
      dlog(du, 2, "the watch of the leader's own key ended: %s%s%s",
           rdzv_strerror(status), message && message[0] ? ": " : "",
           message ? message : "");
      check_own_key(du); /* read it, then watch again from there */
    }
    return;
  }
  if (!mine)
    return;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].type == RDZV_ETCD_DELETE ||
        ev[i].kv.create_revision != du->leader_rev) {
      stand_down(du, RDZV_ENOT_LEADER,
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
  if (w == NULL ||
      rdzv_etcd_watch(du->e, k, (size_t)n, &o, on_own_watch, w, &du->watch) <
          0) {
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
    stand_down(du, RDZV_ENOT_LEADER,
               "deposed: the leader key was deleted or replaced");
    return;
  }
  watch_own_key_from(du, r->revision + 1);
}

/* Reads the leader key (a watch of it ended: compacted, or etcd lost). */
static void check_own_key(struct rdzv_durable *du) {
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
  du->role = DUR_LEADER;
  uint64_t now = now_ms(du);
  d->leader_since_ms = now > 0 ? now : 1;
  struct djob *lj, *lt;
  HASH_ITER(hh, du->jobs, lj, lt) lj->loaded_ms = now > 0 ? now : 1;
  watch_own_key_from(du, du->leader_rev + 1);
  du->fenced = false;
  du->elections_won++;
  stats_update(du);
  uint64_t keys = 0;
  struct djob *j, *t;
  HASH_ITER(hh, du->jobs, j, t) keys += rdzv__state_count(j->mem);
  dlog(du, 1, "root %s (%s) leads %s/leader (revision %" PRId64 "): %u "
       "jobs, %" PRIu64 " keys loaded", d->cfg.name, du->self, du->prefix,
       du->leader_rev, HASH_COUNT(du->jobs), keys);
  peers_refresh(du);
}

static void on_load(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    dlog(du, 1, "loading the state: %s%s%s", rdzv_strerror(r->status),
         r->message[0] ? ": " : "", r->message);
    stand_down(du, r->status, "loading the state failed");
    return;
  }
  if (du->load_rev == 0)
    du->load_rev = r->revision;
  for (size_t i = 0; i < r->nkvs; i++) {
    if (load_kv(du, &r->kvs[i]) < 0) {
      stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
      return;
    }
  }
  if (r->more && r->nkvs > 0) {
    const struct rdzv_etcd_kv *last = &r->kvs[r->nkvs - 1];
    uint8_t *next = malloc(last->klen + 1);
    if (next == NULL) {
      stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
      return;
    }
    memcpy(next, last->key, last->klen);
    next[last->klen] = 0;
    load_from(du, next, last->klen + 1);
    free(next);
    return;
  }
  if (load_bigs_finish(du) < 0) {
    stand_down(du, RDZV_ENOMEM, "out of memory loading the state");
    return;
  }
  become_leader(du);
}

static void on_incarnation(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    stand_down(du, r->status, "reading the incarnation failed");
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
    if (c2 == NULL || rdzv_etcd_range(du->e, k, (size_t)n, &o,
                                      on_incarnation, c2) < 0) {
      free(c2);
      stand_down(du, RDZV_ENOMEM, "out of memory");
    }
    return;
  }
  du->d->incarnation = inc;
  du->load_rev = 0;
  du->opbase = (uint64_t)random_i63();
  du->opseq = 0;
  char from[300];
  int n = snprintf(from, sizeof(from), "%s/j/", du->prefix);
  load_from(du, (const uint8_t *)from, (size_t)n);
}

/* Won the leader key: the incarnation (created once), then the state. */
static void start_loading(struct rdzv_durable *du) {
  du->role = DUR_LOADING;
  jobs_free(du);
  bigs_free(du);
  char k[300], v[24];
  int n = snprintf(k, sizeof(k), "%s/incarnation", du->prefix);
  int vn = snprintf(v, sizeof(v), "%" PRIu64, (uint64_t)random_i63());
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  struct cstep *c = cstep_new(du);
  if (t == NULL || c == NULL ||
      rdzv_etcd_txn_compare(t, k, (size_t)n, RDZV_ETCD_CREATE, RDZV_ETCD_EQUAL,
                            0, NULL, 0) < 0 ||
      rdzv_etcd_txn_put(t, true, k, (size_t)n, v, (size_t)vn, 0) < 0 ||
      rdzv_etcd_txn_range(t, false, k, (size_t)n, false) < 0) {
    rdzv_etcd_txn_free(t);
    free(c);
    stand_down(du, RDZV_ENOMEM, "out of memory");
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
      dlog(du, 2, "the watch of the leader key ended: %s%s%s",
           rdzv_strerror(status), message && message[0] ? ": " : "",
           message ? message : "");
      campaign_later(du, 200);
    }
    return;
  }
  if (c->gen != du->gen || du->role != DUR_STANDBY)
    return;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].type == RDZV_ETCD_DELETE) {
      dlog(du, 1, "the leader key is gone: campaigning");
      rdzv_etcd_watch_cancel(du->watch);
      du->watch = NULL;
      campaign_later(du, 0);
      return;
    }
    if (ev[i].kv.vlen < sizeof(du->leader)) {
      memcpy(du->leader, ev[i].kv.value, ev[i].kv.vlen);
      du->leader[ev[i].kv.vlen] = '\0';
    }
  }
}

static void on_campaign(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = cstep_take(arg, r);
  if (du == NULL)
    return;
  if (r->status < 0) {
    campaign_failed(du, "the leader key", r);
    campaign_later(du, 500);
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
  du->role = DUR_STANDBY;
  du->leader[0] = '\0';
  if (r->nkvs > 0 && r->kvs[0].vlen < sizeof(du->leader)) {
    memcpy(du->leader, r->kvs[0].value, r->kvs[0].vlen);
    du->leader[r->kvs[0].vlen] = '\0';
  }
  if (du->leader[0] != '\0')
    du->fenced = false; /* a standby of the root that leads now */
  dlog(du, 1, "root %s stands by; the leader is %s", du->d->cfg.name,
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
    campaign_later(du, 500);
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
    campaign_later(du, 500);
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
    campaign_later(du, 500);
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
    campaign_later(du, 500);
    return;
  }
  du->lease = r->lease_id;
  du->lease_deadline_ms =
      now_ms(du) + (uint64_t)(r->ttl_s > 0 ? r->ttl_s : 1) * 1000;
  campaign_step(du);
}

/* One step: a lease if none, this root's address under it, then the
 * leader key if absent. */
static void campaign_step(struct rdzv_durable *du) {
  if (du->role == DUR_STOPPED)
    return;
  du->role = DUR_CAMPAIGN;
  struct cstep *c = cstep_new(du);
  if (c == NULL) {
    campaign_later(du, 500);
    return;
  }
  if (du->lease == 0) {
    if (rdzv_etcd_lease_grant(du->e, du->cfg.etcd_lease_ttl_s, 0, on_lease,
                              c) < 0) {
      free(c);
      campaign_later(du, 500);
    }
    return;
  }
  char k[600];
  int n = snprintf(k, sizeof(k), "%s/roots/%s", du->prefix, du->self);
  if (rdzv_etcd_put(du->e, k, (size_t)n, du->self, strlen(du->self),
                    du->lease, on_registered, c) < 0) {
    free(c);
    campaign_later(du, 500);
  }
}

/* ---- life cycle ---------------------------------------------------------------------- */

static int read_credentials(struct rdzv_durable *du, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    int e = errno;
    fprintf(stderr, "rdzvd: --etcd-credentials %s: %s\n", path, strerror(e));
    return -e;
  }
  char line[600];
  bool ok = fgets(line, sizeof(line), f) != NULL;
  fclose(f);
  char *colon = ok ? strchr(line, ':') : NULL;
  if (colon == NULL || colon == line) {
    fprintf(stderr, "rdzvd: --etcd-credentials %s: no USER:PASSWORD line\n",
            path);
    return RDZV_EPROTO;
  }
  line[strcspn(line, "\r\n")] = '\0';
  *colon = '\0';
  snprintf(du->user, sizeof(du->user), "%s", line);
  snprintf(du->password, sizeof(du->password), "%s", colon + 1);
  return 0;
}

int rdzv__durable_new(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct rdzv_durable **out) {
  *out = NULL;
  struct rdzv_durable *du = calloc(1, sizeof(*du));
  if (du == NULL)
    return RDZV_ENOMEM;
  du->backend.name = "etcd";
  du->backend.durable = true;
  du->backend.open = d_open;
  du->loop = loop;
  if (rdzv_config_copy(&du->cfg, cfg) < 0) {
    free(du);
    return RDZV_ENOMEM;
  }
  snprintf(du->prefix, sizeof(du->prefix), "%s", cfg->etcd_prefix);
  size_t pl = strlen(du->prefix);
  while (pl > 1 && du->prefix[pl - 1] == '/')
    du->prefix[--pl] = '\0';
  if (cfg->etcd_credentials[0] != '\0') {
    int rc = read_credentials(du, cfg->etcd_credentials);
    if (rc < 0) {
      rdzv_config_free(&du->cfg);
      free(du);
      return rc;
    }
  }
  struct rdzv_etcd_config ec;
  memset(&ec, 0, sizeof(ec));
  ec.endpoints = cfg->etcd;
  ec.timeout_ms = cfg->etcd_timeout_ms;
  ec.user = du->user;
  ec.password = du->password;
  ec.ca_file = cfg->etcd_ca;
  ec.cert_file = cfg->etcd_cert;
  ec.key_file = cfg->etcd_key;
  int rc = rdzv_etcd_new(loop, &ec, &du->e);
  if (rc < 0) {
    fprintf(stderr,
            "rdzvd: --etcd '%s': %s (each endpoint an http:// or https:// "
            "URL, comma-separated)\n",
            cfg->etcd, rdzv_strerror(rc));
    rdzv_config_free(&du->cfg);
    free(du);
    return rc;
  }
  uv_timer_init(loop, &du->tick);
  du->tick.data = du;
  uv_timer_init(loop, &du->campaign);
  du->campaign.data = du;
  du->handles_open = 2;
  *out = du;
  return 0;
}

const struct rdzv_state_backend *rdzv__durable_backend(struct rdzv_durable *du) {
  return &du->backend;
}

void rdzv__durable_attach(struct rdzv_durable *du, struct daemon *d) {
  du->d = d;
  if (du->cfg.advertise[0] != '\0')
    snprintf(du->self, sizeof(du->self), "%s", du->cfg.advertise);
  else
    snprintf(du->self, sizeof(du->self), "%s", d->bound_addr);
  rdzv__gate_install(d, &gate, du);
  d->admit = admit;
  d->admit_arg = du;
  uint64_t every = (uint64_t)du->cfg.etcd_lease_ttl_s * 1000 / 4;
  if (every < 100)
    every = 100;
  uv_timer_start(&du->tick, on_tick, every, every);
  dlog(du, 1, "root %s (%s) campaigns at %s/leader on %s", d->cfg.name,
       du->self, du->prefix, du->cfg.etcd);
  campaign_step(du);
}

static void maybe_free_du(struct rdzv_durable *du) {
  if (du->client_closed && du->handles_open == 0) {
    bigs_free(du);
    load_bigs_finish_drop(du);
    jobs_free(du);
    rdzv_config_free(&du->cfg);
    free(du);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  struct rdzv_durable *du = h->data;
  du->handles_open--;
  maybe_free_du(du);
}

static void on_client_closed(void *arg) {
  struct rdzv_durable *du = arg;
  du->client_closed = true;
  maybe_free_du(du);
}

static void on_resigned(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  (void)r;
  rdzv_etcd_close(du->e, on_client_closed, du);
}

void rdzv__durable_stop(struct rdzv_durable *du) {
  if (du->role == DUR_STOPPED)
    return;
  bool leading = du->role == DUR_LEADER || du->role == DUR_LOADING;
  du->role = DUR_STOPPED;
  du->gen++;
  if (du->d != NULL) {
    du->d->gate = NULL; /* what waits is not persisted: it is not sent */
    du->d->admit = NULL;
  }
  if (du->watch != NULL)
    rdzv_etcd_watch_cancel(du->watch);
  du->watch = NULL;
  uv_close((uv_handle_t *)&du->tick, on_handle_closed);
  uv_close((uv_handle_t *)&du->campaign, on_handle_closed);
  if (du->batch != NULL) {
    struct batch *b = du->batch;
    du->batch = NULL;
    batch_finish(b);
  }
  /* The lease goes (with the leader key and this root's address on it),
   * so a standby takes over now, not after the TTL. */
  if (du->lease != 0 &&
      rdzv_etcd_lease_revoke(du->e, du->lease, on_resigned, du) == 0) {
    if (leading)
      dlog(du, 1, "root %s resigns: its lease is revoked", du->d->cfg.name);
    return;
  }
  rdzv_etcd_close(du->e, on_client_closed, du);
}

void rdzv__durable_free(struct rdzv_durable *du) {
  if (du == NULL)
    return;
  if (du->d == NULL) {
    uv_close((uv_handle_t *)&du->tick, on_handle_closed);
    uv_close((uv_handle_t *)&du->campaign, on_handle_closed);
    du->role = DUR_STOPPED;
    rdzv_etcd_close(du->e, on_client_closed, du);
    return;
  }
  rdzv__durable_stop(du);
}
