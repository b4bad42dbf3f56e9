/* The durable root's jobs (durable_int.h): each job's state in memory,
 * its keys in etcd ("P/j/JOB/..."), and the state backend the root opens:
 * the in-memory one, with every change marked for the next batch. */
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
bool rdzv__du_job_decode(const uint8_t *p, size_t n, char *out, size_t outlen) {
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

struct djob *rdzv__du_job_get(struct rdzv_durable *du, const char *id) {
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

void rdzv__du_job_clear_dirty(struct rdzv_durable *du, struct djob *j) {
  struct dirty *x, *t;
  HASH_ITER (hh, j->dirty, x, t) {
    HASH_DEL(j->dirty, x);
    rdzv_buf_free(&x->ops);
    free(x);
  }
  du->ndirty -= j->ndirty;
  j->ndirty = 0;
  j->last = NULL;
  rdzv_buf_free(&j->lone_ops);
}

void rdzv__du_job_free(struct rdzv_durable *du, struct djob *j) {
  rdzv__du_job_clear_dirty(du, j);
  rdzv__du_bigs_drop_job(du, j);
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

void rdzv__du_jobs_free(struct rdzv_durable *du) {
  struct djob *j, *t;
  HASH_ITER (hh, du->jobs, j, t)
    rdzv__du_job_free(du, j);
}

/* Marks (tag, name) of j dirty, while leading. Out of memory is a failed
 * change: the caller's change already happened in memory, so the root
 * stands down (at the end of the loop iteration) rather than acknowledge
 * what etcd will not get. */
void rdzv__du_mark(struct rdzv_durable *du, struct djob *j, uint8_t tag,
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
    rdzv__du_mark(ds(st)->du, ds(st)->job, 'k', k, klen);
  return rc;
}

static int d_append(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                    const uint8_t *v, uint32_t vlen) {
  int rc = rdzv__state_append(MEM(st), k, klen, v, vlen);
  if (rc == 0)
    rdzv__du_mark(ds(st)->du, ds(st)->job, 'k', k, klen);
  return rc;
}

static int d_del(struct rdzv_state *st, const uint8_t *k, uint32_t klen) {
  int rc = rdzv__state_del(MEM(st), k, klen);
  if (rc == 1)
    rdzv__du_mark(ds(st)->du, ds(st)->job, 'k', k, klen);
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
    rdzv__du_mark(x->s->du, x->s->job, 'k', k, klen);
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
    rdzv__du_mark(ds(st)->du, ds(st)->job, (uint8_t)('0' + kind), name, nlen);
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
    rdzv__du_mark(ds(st)->du, ds(st)->job, (uint8_t)('0' + kind), name, nlen);
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
      rdzv__du_job_free(s->du, s->job);
  }
  free(s);
}

static void on_finish_done(void *arg, const struct rdzv_etcd_result *r) {
  struct rdzv_durable *du = arg;
  if (r->status < 0 && r->status != RDZV_ECANCELED)
    rdzv__du_dlog(du, 0,
                  "removing an ended job's state failed: %s%s%s (its lease "
                  "expires it within --etcd-job-ttl-s)",
                  rdzv_strerror(r->status), r->message[0] ? ": " : "",
                  r->message);
}

/* Job j ended: its etcd keys go (fenced by the leader key), then its
 * lease; memory goes now. */
void rdzv__du_job_remove(struct rdzv_durable *du, struct djob *j) {
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  char lk[300];
  int n = snprintf(lk, sizeof(lk), "%s/leader", du->prefix);
  if (t != NULL &&
      rdzv_etcd_txn_compare(t, lk, (size_t)n, RDZV_ETCD_CREATE, RDZV_ETCD_EQUAL,
                            du->leader_rev, NULL, 0) == 0 &&
      rdzv_etcd_txn_delete(t, true, j->ekey, j->eklen, true) == 0) {
    rdzv_etcd_txn(du->e, t, on_finish_done, du);
    t = NULL;
  }
  rdzv_etcd_txn_free(t);
  if (j->lease_granted)
    rdzv_etcd_lease_revoke(du->e, j->lease, on_finish_done, du);
  rdzv__du_dlog(du, 1, "job %s ended: its state is removed from etcd", j->id);
  if (j->open != NULL)
    j->open->job = NULL;
  rdzv__du_job_free(du, j);
}

static void d_finish(struct rdzv_state *st) {
  struct dstate *s = ds(st);
  struct rdzv_durable *du = s->du;
  if (s->job != NULL && du->role == DUR_LEADER) {
    rdzv__du_job_remove(du, s->job);
    s->job = NULL;
  }
  d_close(st);
}

static const struct rdzv_state_ops d_ops = {
    d_get,  d_set,     d_append,  d_del,     d_count, d_bytes,
    d_scan, d_rec_put, d_rec_get, d_rec_del, d_close, d_finish,
};

int rdzv__du_d_open(const struct rdzv_state_backend *b, const char *job,
                    struct rdzv_state **out) {
  struct rdzv_durable *du = (struct rdzv_durable *)b;
  *out = NULL;
  if (du->role != DUR_LEADER)
    return RDZV_ENOT_LEADER;
  struct djob *j = rdzv__du_job_get(du, job);
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
