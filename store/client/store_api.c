/* librdzv: the blocking store calls of rdzv/store.h.
 *
 * Each call builds a struct rdzv_request, submits it with a completion
 * record on its own stack and a callback that copies out what the caller
 * gets, then drives the core until that callback has run. The request's
 * own deadline (timeout_s) guarantees that it does. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/rdzv.h"
#include "rdzv/store.h"
#include "store/client/client_int.h"

_Static_assert(RDZV_STORE_GIVE_UP == RDZV_F_GIVE_UP &&
                   RDZV_STORE_LEAVE == RDZV_F_LEAVE &&
                   RDZV_STORE_WRITE_ONCE == RDZV_F_WRITE_ONCE,
               "request flags are the wire's");
_Static_assert(RDZV_STORE_MISSING_MAX == RDZV_COLL_STATUS_MAX_IDS,
               "the API limit is the wire limit");

/* A blocking call in progress. */
struct call {
  int done;
  int status;
  enum rdzv_op op;
  int want_val;    /* copy vals[0] into val/len */
  size_t want_n;   /* MGET/GATHER: the number of values expected */
  int server_text; /* the failure came from the server, with its text */
  int64_t a;
  void *val;
  size_t len;
  struct rdzv_value *vals;
};

void rdzv_free(void *p) { free(p); }

const char *rdzv_version(void) { return RDZV_VERSION_STRING; }

void rdzv_values_free(struct rdzv_value *vals, size_t n) {
  size_t i;

  if (vals == NULL)
    return;
  for (i = 0; i < n; i++)
    free(vals[i].data);
  free(vals);
}

/* A malloc'd, NUL-terminated copy of p[0..n). */
static void *copy_z(const void *p, size_t n) {
  char *d = malloc(n + 1);

  if (d == NULL)
    return NULL;
  if (n > 0)
    memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

/* last_error = "<op>: <what>: k1, k2, ..." (truncated with "..."). */
static void keys_error(rdzv_client_t *c, const char *op, const char *what,
                       const struct rdzv_result *res) {
  size_t used;
  size_t i;
  int n;

  n = snprintf(c->last_error, sizeof(c->last_error), "%s: %s: ", op, what);
  used = n > 0 ? (size_t)n : 0;
  for (i = 0; i < res->nkeys && used < sizeof(c->last_error); i++) {
    n = snprintf(c->last_error + used, sizeof(c->last_error) - used, "%s%.*s",
                 i > 0 ? ", " : "", (int)res->keys[i].len,
                 (const char *)res->keys[i].data);
    used += n > 0 ? (size_t)n : 0;
  }
  if (used >= sizeof(c->last_error))
    memcpy(c->last_error + sizeof(c->last_error) - 4, "...", 4);
}

/* GATHER items are { u64 member id (LE), data }. MGET items are data. */
static int values_copy(struct call *k, const struct rdzv_result *res) {
  size_t skip = k->op == RDZV_OP_GATHER ? 8 : 0;
  size_t i;

  if (res->nvals != k->want_n)
    return RDZV_EPROTO;
  k->vals = calloc(res->nvals != 0 ? res->nvals : 1, sizeof(*k->vals));
  if (k->vals == NULL)
    return RDZV_ENOMEM;
  for (i = 0; i < res->nvals; i++) {
    if (res->vals[i].len < skip)
      return RDZV_EPROTO;
    if (skip != 0)
      k->vals[i].member = rdzv_load_u64le(res->vals[i].data);
    k->vals[i].len = res->vals[i].len - skip;
    k->vals[i].data =
        copy_z((const uint8_t *)res->vals[i].data + skip, k->vals[i].len);
    if (k->vals[i].data == NULL)
      return RDZV_ENOMEM;
  }
  return 0;
}

static int result_copy(rdzv_client_t *c, struct call *k,
                       const struct rdzv_result *res) {
  if (res->status == RDZV_EDEADLINE && k->op == RDZV_OP_WAIT)
    keys_error(c, "wait", "missing keys", res);
  if (res->status == RDZV_ENOKEY && k->op == RDZV_OP_MGET)
    keys_error(c, "mget", "missing keys", res);
  else if (res->status < 0 && res->nkeys > 0 &&
           !(k->op == RDZV_OP_WAIT && res->status == RDZV_EDEADLINE))
    /* The server's reason (an aborted generation, ...) in keys[0]. */
    snprintf(c->last_error, sizeof(c->last_error), "%s: %.*s",
             rdzv_err_name(res->status), (int)res->keys[0].len,
             (const char *)res->keys[0].data);
  if (res->status != 0 &&
      !(k->op == RDZV_OP_CAS && res->status == RDZV_ECAS_FAILED))
    return res->status;
  if (k->want_val) {
    if (res->nvals < 1)
      return RDZV_EPROTO;
    k->len = res->vals[0].len;
    k->val = copy_z(res->vals[0].data, k->len);
    if (k->val == NULL)
      return RDZV_ENOMEM;
  }
  if (k->op == RDZV_OP_MGET || k->op == RDZV_OP_GATHER)
    return values_copy(k, res);
  return res->status;
}

static void call_cb(rdzv_client_t *c, const struct rdzv_result *res,
                    void *arg) {
  struct call *k = arg;

  k->a = res->a;
  k->server_text = res->status < 0 && res->nkeys > 0;
  k->status = result_copy(c, k, res);
  if (k->status != 0 && k->status != RDZV_ECAS_FAILED) {
    free(k->val);
    k->val = NULL;
    rdzv_values_free(k->vals, k->want_n);
    k->vals = NULL;
  }
  k->done = 1;
}

static int call_done(struct rdzv_client *c, void *arg) {
  (void)c;
  return ((struct call *)arg)->done;
}

/* Submits req and drives the core until its callback has run. */
static int call_run(rdzv_client_t *c, const struct rdzv_request *req,
                    double timeout_s, struct call *k) {
  int err;

  if (c == NULL)
    return -EINVAL;
  if (c->in_cb > 0)
    return RDZV_EWOULDBLOCK_CB;
  k->op = req->op;
  err = rdzv_client_submit(c, req, timeout_s, call_cb, k);
  if (err < 0)
    return err;
  /* Never give up before the callback: it writes into *k, on our stack. */
  while (!k->done)
    rdzv__client_drive(c, call_done, k, RDZV__NO_DEADLINE);
  return k->status;
}

static int key_ok(const char *key) { return key != NULL && key[0] != '\0'; }

static struct rdzv_bytes key_bytes(const char *key) {
  return (struct rdzv_bytes){key, strlen(key)};
}

/* Byte strings of n keys (malloc'd), or NULL with *err set. */
static struct rdzv_bytes *keys_array(const char *const *keys, size_t n,
                                     int *err) {
  struct rdzv_bytes *b;
  size_t i;

  *err = -EINVAL;
  if (keys == NULL || n == 0)
    return NULL;
  for (i = 0; i < n; i++) {
    if (!key_ok(keys[i]))
      return NULL;
  }
  *err = RDZV_ENOMEM;
  b = malloc(n * sizeof(*b));
  if (b == NULL)
    return NULL;
  for (i = 0; i < n; i++)
    b[i] = key_bytes(keys[i]);
  *err = 0;
  return b;
}

int rdzv_store_set(rdzv_client_t *c, const char *key, const void *val,
                   size_t len, unsigned flags, double timeout_s) {
  struct rdzv_bytes k = {0};
  struct rdzv_bytes v = {val, len};
  struct rdzv_request req = {.op = RDZV_OP_SET, .flags = flags};
  struct call call = {0};

  if (!key_ok(key) || (val == NULL && len != 0))
    return -EINVAL;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  req.nvals = 1;
  req.vals = &v;
  return call_run(c, &req, timeout_s, &call);
}

int rdzv_store_get(rdzv_client_t *c, const char *key, void **val, size_t *len,
                   double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_request req = {.op = RDZV_OP_GET};
  struct call call = {.want_val = 1};
  int err;

  if (!key_ok(key) || val == NULL || len == NULL)
    return -EINVAL;
  *val = NULL;
  *len = 0;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  err = call_run(c, &req, timeout_s, &call);
  if (err == RDZV_ENOKEY)
    rdzv__set_error(c, "get: no key '%s'", key);
  if (err < 0)
    return err;
  *val = call.val;
  *len = call.len;
  return 0;
}

int rdzv_store_wait(rdzv_client_t *c, const char *const *keys, size_t nkeys,
                    double timeout_s) {
  struct rdzv_request req = {.op = RDZV_OP_WAIT};
  struct call call = {0};
  struct rdzv_bytes *kb;
  int err;

  if (nkeys > 65536)
    return -EINVAL;
  kb = keys_array(keys, nkeys, &err);
  if (kb == NULL)
    return err;
  req.nkeys = nkeys;
  req.keys = kb;
  err = call_run(c, &req, timeout_s, &call);
  free(kb);
  return err;
}

int rdzv_store_add(rdzv_client_t *c, const char *key, int64_t delta,
                   int64_t *out, double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_request req = {.op = RDZV_OP_ADD, .a = delta};
  struct call call = {0};
  int err;

  if (!key_ok(key))
    return -EINVAL;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0 && out != NULL)
    *out = call.a;
  return err;
}

int rdzv_store_cas(rdzv_client_t *c, const char *key, const void *expected,
                   size_t expected_len, const void *desired, size_t desired_len,
                   void **cur, size_t *cur_len, double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_bytes v[2] = {{expected, expected_len}, {desired, desired_len}};
  struct rdzv_request req = {.op = RDZV_OP_CAS};
  struct call call = {.want_val = 1};
  int err;

  if (!key_ok(key) || (expected == NULL && expected_len != 0) ||
      (desired == NULL && desired_len != 0))
    return -EINVAL;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  req.nvals = 2;
  req.vals = v;
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0 || err == RDZV_ECAS_FAILED) {
    if (cur != NULL)
      *cur = call.val;
    else
      free(call.val);
    if (cur_len != NULL)
      *cur_len = call.len;
  }
  return err;
}

int rdzv_store_delete(rdzv_client_t *c, const char *key, int *deleted,
                      double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_request req = {.op = RDZV_OP_DELETE};
  struct call call = {0};
  int err;

  if (!key_ok(key))
    return -EINVAL;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0 && deleted != NULL)
    *deleted = call.a != 0;
  return err;
}

int rdzv_store_mget(rdzv_client_t *c, const char *const *keys, size_t nkeys,
                    struct rdzv_value **vals, double timeout_s) {
  struct rdzv_request req = {.op = RDZV_OP_MGET};
  struct call call = {.want_n = nkeys};
  struct rdzv_bytes *kb;
  int err;

  if (vals == NULL)
    return -EINVAL;
  *vals = NULL;
  kb = keys_array(keys, nkeys, &err);
  if (kb == NULL)
    return err;
  req.nkeys = nkeys;
  req.keys = kb;
  err = call_run(c, &req, timeout_s, &call);
  free(kb);
  if (err == 0)
    *vals = call.vals;
  return err;
}

int rdzv_store_mset(rdzv_client_t *c, const char *const *keys,
                    const struct rdzv_value *vals, size_t n, unsigned flags,
                    double timeout_s) {
  struct rdzv_request req = {.op = RDZV_OP_MSET, .flags = flags};
  struct call call = {0};
  struct rdzv_bytes *kb;
  struct rdzv_bytes *vb;
  size_t i;
  int err;

  if (vals == NULL)
    return -EINVAL;
  kb = keys_array(keys, n, &err);
  if (kb == NULL)
    return err;
  vb = malloc(n * sizeof(*vb));
  if (vb == NULL) {
    free(kb);
    return RDZV_ENOMEM;
  }
  for (i = 0; i < n; i++)
    vb[i] = (struct rdzv_bytes){vals[i].data, vals[i].len};
  req.nkeys = n;
  req.keys = kb;
  req.nvals = n;
  req.vals = vb;
  err = call_run(c, &req, timeout_s, &call);
  free(kb);
  free(vb);
  return err;
}

int rdzv_store_append(rdzv_client_t *c, const char *key, const void *val,
                      size_t len, double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_bytes v = {val, len};
  struct rdzv_request req = {.op = RDZV_OP_APPEND};
  struct call call = {0};

  if (!key_ok(key) || (val == NULL && len != 0))
    return -EINVAL;
  k = key_bytes(key);
  req.nkeys = 1;
  req.keys = &k;
  req.nvals = 1;
  req.vals = &v;
  return call_run(c, &req, timeout_s, &call);
}

int rdzv_store_num_keys(rdzv_client_t *c, int64_t *out, double timeout_s) {
  struct rdzv_request req = {.op = RDZV_OP_NKEYS};
  struct call call = {0};
  int err;

  if (out == NULL)
    return -EINVAL;
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0)
    *out = call.a;
  return err;
}

/* BARRIER and GATHER: one contribution { u64 member, data }; keys[1] =
 * spec when spec_len > 0. */
static int collective(rdzv_client_t *c, enum rdzv_op op, const char *name,
                      uint64_t member, uint64_t count, const void *data,
                      size_t len, const void *spec, size_t spec_len,
                      struct call *call, double timeout_s) {
  struct rdzv_bytes k[2];
  struct rdzv_bytes v;
  struct rdzv_request req = {.op = op, .b = (int64_t)count};
  uint8_t *contrib;
  int err;

  if (!key_ok(name) || count == 0 || count > INT64_MAX ||
      (data == NULL && len != 0) || len > SIZE_MAX - 8 ||
      (spec == NULL && spec_len != 0) || spec_len > UINT32_MAX)
    return -EINVAL;
  contrib = malloc(8 + len);
  if (contrib == NULL)
    return RDZV_ENOMEM;
  rdzv_store_u64le(contrib, member);
  if (len > 0)
    memcpy(contrib + 8, data, len);
  k[0] = key_bytes(name);
  k[1] = (struct rdzv_bytes){spec, spec_len};
  v = (struct rdzv_bytes){contrib, 8 + len};
  req.nkeys = spec_len > 0 ? 2 : 1;
  req.keys = k;
  req.nvals = 1;
  req.vals = &v;
  err = call_run(c, &req, timeout_s, call);
  free(contrib);
  return err;
}

/* The answer to a COLL_STATUS. */
struct status_call {
  int done, status;
  uint64_t arrived, count;
  uint64_t *missing;
  size_t max, n;
};

static void status_cb(rdzv_client_t *c, const struct rdzv_result *res,
                      void *arg) {
  struct status_call *k = arg;
  size_t i;

  (void)c;
  k->status = res->status;
  if (res->status == 0) {
    k->arrived = (uint64_t)res->a;
    k->count = (uint64_t)res->b;
    for (i = 0; i < res->nvals && k->n < k->max; i++) {
      if (res->vals[i].len != 8) {
        k->status = RDZV_EPROTO;
        break;
      }
      k->missing[k->n++] = rdzv_load_u64le(res->vals[i].data);
    }
  }
  k->done = 1;
}

static int status_done(struct rdzv_client *c, void *arg) {
  (void)c;
  return ((struct status_call *)arg)->done;
}

/* COLL_STATUS, with GIVE_UP when why is not NULL. */
static int coll_status(rdzv_client_t *c, const char *name, int gather,
                       const char *why, uint64_t *missing, size_t max,
                       size_t *nmissing, uint64_t *arrived, uint64_t *count,
                       double timeout_s) {
  struct rdzv_bytes k[2];
  struct rdzv_request req = {.op = RDZV_OP_COLL_STATUS};
  struct status_call call = {0};
  int err;

  if (c == NULL || !key_ok(name) || missing == NULL || nmissing == NULL ||
      max < 1 || max > RDZV_STORE_MISSING_MAX)
    return -EINVAL;
  if (c->in_cb > 0)
    return RDZV_EWOULDBLOCK_CB;
  k[0] = key_bytes(name);
  req.nkeys = 1;
  req.keys = k;
  if (why != NULL) {
    req.flags = RDZV_STORE_GIVE_UP;
    if (why[0] != '\0') {
      k[1] = key_bytes(why);
      req.nkeys = 2;
    }
  }
  req.a = gather ? RDZV_OP_GATHER : RDZV_OP_BARRIER;
  req.b = (int64_t)max;
  call.missing = missing;
  call.max = max;
  err = rdzv_client_submit(c, &req, timeout_s, status_cb, &call);
  if (err < 0)
    return err;
  while (!call.done)
    rdzv__client_drive(c, status_done, &call, RDZV__NO_DEADLINE);
  if (call.status < 0)
    return call.status;
  *nmissing = call.n;
  if (arrived != NULL)
    *arrived = call.arrived;
  if (count != NULL)
    *count = call.count;
  return 0;
}

int rdzv_store_collective_missing(rdzv_client_t *c, const char *name,
                                  int gather, uint64_t *missing, size_t max,
                                  size_t *nmissing, uint64_t *arrived,
                                  uint64_t *count, double timeout_s) {
  return coll_status(c, name, gather, NULL, missing, max, nmissing, arrived,
                     count, timeout_s);
}

int rdzv_store_collective_give_up(rdzv_client_t *c, const char *name,
                                  int gather, const char *why, int *completed,
                                  double timeout_s) {
  uint64_t one, arrived = 0, count = 0;
  size_t n = 0;
  int err;

  if (completed == NULL)
    return -EINVAL;
  *completed = 0;
  err = coll_status(c, name, gather, why != NULL ? why : "", &one, 1, &n,
                    &arrived, &count, timeout_s);
  if (err == 0)
    *completed = count > 0 && arrived == count;
  return err;
}

/* A collective whose own deadline passed (not one the server failed):
 * asks the root to fail it for every member unless it completed, and with
 * the same question who is missing, which goes to last_error ("barrier
 * 'x': deadline passed; 2 of 8 members missing: 3, 5"). Returns 1 when it
 * had completed (the caller fetches the result again), else 0. */
static int give_up(rdzv_client_t *c, const char *op, const char *name,
                   int gather, uint64_t member, uint64_t count,
                   double timeout_s) {
  uint64_t ids[16], arrived = 0, known = 0;
  size_t n = 0, used, i;
  char why[160], was[RDZV__ERR_BYTES];
  int err, w;

  snprintf(was, sizeof(was), "%s", c->last_error);
  snprintf(why, sizeof(why), "member %llu gave up at its deadline of %.3g s",
           (unsigned long long)member, timeout_s);
  err = coll_status(c, name, gather, why, ids, 16, &n, &arrived, &known, 2.0);
  if (err == 0 && known > 0 && arrived == known)
    return 1;
  if (err < 0) {
    snprintf(c->last_error, sizeof(c->last_error),
             "%s '%.200s': deadline passed (%.200s); could not ask who is "
             "missing: %s",
             op, name, was, rdzv_strerror(err));
    return 0;
  }
  if (known == 0) {
    snprintf(c->last_error, sizeof(c->last_error),
             "%s '%.300s': deadline passed; no contribution of the %llu "
             "members reached the root",
             op, name, (unsigned long long)count);
    return 0;
  }
  w = snprintf(
      c->last_error, sizeof(c->last_error),
      "%s '%.300s': deadline passed; %llu of %llu members missing: ", op, name,
      (unsigned long long)(known - arrived), (unsigned long long)known);
  used = w > 0 ? (size_t)w : 0;
  for (i = 0; i < n && used < sizeof(c->last_error); i++) {
    w = snprintf(c->last_error + used, sizeof(c->last_error) - used, "%s%llu",
                 i > 0 ? ", " : "", (unsigned long long)ids[i]);
    used += w > 0 ? (size_t)w : 0;
  }
  if (known - arrived > n && used < sizeof(c->last_error))
    snprintf(c->last_error + used, sizeof(c->last_error) - used,
             " and %llu more", (unsigned long long)(known - arrived - n));
  return 0;
}

int rdzv_store_barrier_of(rdzv_client_t *c, const char *name, uint64_t member,
                          uint64_t count, const void *spec, size_t spec_len,
                          double timeout_s) {
  struct call call = {0};
  int err;

  err = collective(c, RDZV_OP_BARRIER, name, member, count, NULL, 0, spec,
                   spec_len, &call, timeout_s);
  if (err == RDZV_EDEADLINE && !call.server_text) {
    if (give_up(c, "barrier", name, 0, member, count, timeout_s)) {
      struct call again = {0}; /* completed at the root: answered at once */
      return collective(c, RDZV_OP_BARRIER, name, member, count, NULL, 0, spec,
                        spec_len, &again, 2.0);
    }
  }
  return err;
}

int rdzv_store_barrier(rdzv_client_t *c, const char *name, uint64_t member,
                       uint64_t count, double timeout_s) {
  return rdzv_store_barrier_of(c, name, member, count, NULL, 0, timeout_s);
}

int rdzv_store_gather_of(rdzv_client_t *c, const char *name, uint64_t member,
                         uint64_t count, const void *data, size_t len,
                         const void *spec, size_t spec_len,
                         struct rdzv_value **out, double timeout_s) {
  struct call call = {0};
  int err;

  if (out == NULL || count > SIZE_MAX)
    return -EINVAL;
  *out = NULL;
  call.want_n = (size_t)count;
  err = collective(c, RDZV_OP_GATHER, name, member, count, data, len, spec,
                   spec_len, &call, timeout_s);
  if (err == RDZV_EDEADLINE && !call.server_text) {
    if (give_up(c, "gather", name, 1, member, count, timeout_s)) {
      call = (struct call){.want_n = (size_t)count};
      err = collective(c, RDZV_OP_GATHER, name, member, count, data, len, spec,
                       spec_len, &call, 2.0);
    }
  }
  if (err == 0)
    *out = call.vals;
  return err;
}

int rdzv_store_gather(rdzv_client_t *c, const char *name, uint64_t member,
                      uint64_t count, const void *data, size_t len,
                      struct rdzv_value **out, double timeout_s) {
  return rdzv_store_gather_of(c, name, member, count, data, len, NULL, 0, out,
                              timeout_s);
}

int rdzv_store_stats(rdzv_client_t *c, char **json, double timeout_s) {
  struct rdzv_request req = {.op = RDZV_OP_STATS};
  struct call call = {.want_val = 1};
  int err;

  if (json == NULL)
    return -EINVAL;
  *json = NULL;
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0)
    *json = call.val;
  return err;
}

int rdzv_store_tcpstore_space(rdzv_client_t *c, const char *prefix,
                              int32_t *port, double timeout_s) {
  return rdzv_store_tcpstore_space_held(c, prefix, 0, port, timeout_s);
}

int rdzv_store_tcpstore_space_held(rdzv_client_t *c, const char *prefix,
                                   int32_t holder_pid, int32_t *port,
                                   double timeout_s) {
  struct rdzv_bytes k;
  struct rdzv_request req = {
      .op = RDZV_OP_TS_SPACE, .nkeys = 1, .keys = &k, .b = holder_pid};
  struct call call = {0};
  int err;

  if (port == NULL || prefix == NULL || prefix[0] == '\0' ||
      strlen(prefix) > 200 || holder_pid < 0)
    return -EINVAL;
  k.data = prefix;
  k.len = strlen(prefix);
  err = call_run(c, &req, timeout_s, &call);
  if (err == 0 && (call.a < 1 || call.a > 65535))
    err = RDZV_EPROTO;
  if (err == 0)
    *port = (int32_t)call.a;
  return err;
}
