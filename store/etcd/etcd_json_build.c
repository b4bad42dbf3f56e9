/* The etcd client's request bodies (etcd_json.h): the JSON of each v3
 * gateway call, base64 for keys and values, and the transaction builder
 * of etcd.h (rdzv_etcd_txn_*). Pure: arguments in, text out. Reading the
 * answers is etcd_json.c's. */
#include "store/etcd/etcd_json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"

/* ---- base64 ------------------------------------------------------------- */

static const char b64tab[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Encodes n bytes into a malloc'd NUL-terminated string; NULL on ENOMEM. */
static char *b64_encode(const void *p, size_t n, size_t *olen) {
  const uint8_t *s = p;
  size_t i, m;
  char *out, *o;

  if (n > (SIZE_MAX - 4) / 4 * 3)
    return NULL;
  m = (n + 2) / 3 * 4;
  out = malloc(m + 1);
  if (out == NULL)
    return NULL;
  o = out;
  for (i = 0; i + 2 < n; i += 3) {
    *o++ = b64tab[s[i] >> 2];
    *o++ = b64tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
    *o++ = b64tab[((s[i + 1] & 15) << 2) | (s[i + 2] >> 6)];
    *o++ = b64tab[s[i + 2] & 63];
  }
  if (i < n) {
    *o++ = b64tab[s[i] >> 2];
    if (i + 1 < n) {
      *o++ = b64tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
      *o++ = b64tab[(s[i + 1] & 15) << 2];
    } else {
      *o++ = b64tab[(s[i] & 3) << 4];
      *o++ = '=';
    }
    *o++ = '=';
  }
  *o = 0;
  if (olen != NULL)
    *olen = m;
  return out;
}

/* ---- building requests --------------------------------------------------- */

/* obj[name] = base64 of p (n bytes); 0 or -1. */
static int set_b64(json_t *obj, const char *name, const void *p, size_t n) {
  size_t m;
  char *s = b64_encode(p, n, &m);
  if (s == NULL)
    return -1;
  json_t *v = json_stringn_nocheck(s, m);
  free(s);
  return json_object_set_new(obj, name, v);
}

/* obj[name] = int64 as a decimal string; 0 or -1. */
static int set_i64(json_t *obj, const char *name, int64_t x) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%lld", (long long)x);
  return json_object_set_new(obj, name, json_string(buf));
}

static int set_true(json_t *obj, const char *name) {
  return json_object_set_new(obj, name, json_true());
}

/* Dumps and frees o; NULL on ENOMEM. */
static char *finish(json_t *o, int bad, size_t *len) {
  char *s = NULL;
  if (o != NULL && !bad)
    s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (s != NULL && len != NULL)
    *len = strlen(s);
  return s;
}

size_t rdzv_etcd_prefix_end(const void *prefix, size_t klen, uint8_t *out) {
  const uint8_t *p = prefix;
  size_t n = klen;
  while (n > 0 && p[n - 1] == 0xff)
    n--;
  if (n == 0) {
    out[0] = 0;
    return 1;
  }
  memcpy(out, p, n);
  out[n - 1]++;
  return n;
}

/* Sets key and range_end (given, or the prefix's end). */
static int set_range(json_t *o, const void *key, size_t klen,
                     const void *range_end, size_t relen, bool prefix) {
  static const uint8_t zero = 0;
  int bad = 0;
  if (prefix && klen == 0) {
    /* every key: key "\0", range_end "\0" */
    bad |= set_b64(o, "key", &zero, 1);
    bad |= set_b64(o, "range_end", &zero, 1);
    return bad;
  }
  bad |= set_b64(o, "key", key, klen);
  if (prefix) {
    uint8_t *end = malloc(klen);
    if (end == NULL)
      return -1;
    size_t n = rdzv_etcd_prefix_end(key, klen, end);
    bad |= set_b64(o, "range_end", end, n);
    free(end);
  } else if (range_end != NULL && relen != 0) {
    bad |= set_b64(o, "range_end", range_end, relen);
  }
  return bad;
}

char *rdzv_etcd_json_put(const void *key, size_t klen, const void *value,
                         size_t vlen, int64_t lease, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad) {
    bad |= set_b64(o, "key", key, klen);
    if (vlen != 0)
      bad |= set_b64(o, "value", value, vlen);
    if (lease != 0)
      bad |= set_i64(o, "lease", lease);
  }
  return finish(o, bad, len);
}

char *rdzv_etcd_json_range(const void *key, size_t klen,
                           const struct rdzv_etcd_range_opts *op, size_t *len) {
  static const struct rdzv_etcd_range_opts none;
  const struct rdzv_etcd_range_opts *o = op != NULL ? op : &none;
  json_t *j = json_object();
  int bad = j == NULL;
  if (!bad) {
    bad |= set_range(j, key, klen, o->range_end, o->relen, o->prefix);
    if (o->limit != 0)
      bad |= set_i64(j, "limit", o->limit);
    if (o->revision != 0)
      bad |= set_i64(j, "revision", o->revision);
    if (o->count_only)
      bad |= set_true(j, "count_only");
    if (o->keys_only)
      bad |= set_true(j, "keys_only");
    if (o->serializable)
      bad |= set_true(j, "serializable");
  }
  return finish(j, bad, len);
}

char *rdzv_etcd_json_delete(const void *key, size_t klen, const void *range_end,
                            size_t relen, bool prefix, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad)
    bad |= set_range(o, key, klen, range_end, relen, prefix);
  return finish(o, bad, len);
}

char *rdzv_etcd_json_lease_grant(int64_t ttl_s, int64_t id, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad) {
    bad |= set_i64(o, "TTL", ttl_s);
    if (id != 0)
      bad |= set_i64(o, "ID", id);
  }
  return finish(o, bad, len);
}

char *rdzv_etcd_json_lease_id(int64_t id, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad)
    bad |= set_i64(o, "ID", id);
  return finish(o, bad, len);
}

char *rdzv_etcd_json_auth(const char *user, const char *password, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad) {
    /* json_string checks UTF-8; a name that is not is refused by NULL. */
    json_t *u = json_string(user != NULL ? user : "");
    json_t *p = json_string(password != NULL ? password : "");
    bad |= u == NULL || p == NULL;
    bad |= json_object_set_new(o, "name", u);
    bad |= json_object_set_new(o, "password", p);
  }
  return finish(o, bad, len);
}

char *rdzv_etcd_json_compact(int64_t revision, bool physical, size_t *len) {
  json_t *o = json_object();
  int bad = o == NULL;
  if (!bad) {
    bad |= set_i64(o, "revision", revision);
    if (physical)
      bad |= set_true(o, "physical");
  }
  return finish(o, bad, len);
}

char *rdzv_etcd_json_watch(const void *key, size_t klen,
                           const struct rdzv_etcd_watch_opts *op, size_t *len) {
  static const struct rdzv_etcd_watch_opts none;
  const struct rdzv_etcd_watch_opts *o = op != NULL ? op : &none;
  json_t *top = json_object(), *c = json_object();
  int bad = top == NULL || c == NULL;
  if (!bad) {
    bad |= set_range(c, key, klen, o->range_end, o->relen, o->prefix);
    if (o->start_revision != 0)
      bad |= set_i64(c, "start_revision", o->start_revision);
    if (o->prev_kv)
      bad |= set_true(c, "prev_kv");
    if (o->progress_notify)
      bad |= set_true(c, "progress_notify");
    bad |= json_object_set(top, "create_request", c);
  }
  json_decref(c);
  return finish(top, bad, len);
}

/* ---- transactions -------------------------------------------------------- */

struct rdzv_etcd_txn {
  json_t *cmp, *succ, *fail;
  size_t nsucc, nfail;
  size_t bytes;
  bool bad;
};

/* Rough protobuf sizes: a field tag and length per part. */
#define TXN_OP_OVERHEAD 16u

struct rdzv_etcd_txn *rdzv_etcd_txn_new(void) {
  struct rdzv_etcd_txn *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NULL;
  t->cmp = json_array();
  t->succ = json_array();
  t->fail = json_array();
  if (t->cmp == NULL || t->succ == NULL || t->fail == NULL) {
    rdzv_etcd_txn_free(t);
    return NULL;
  }
  return t;
}

void rdzv_etcd_txn_free(struct rdzv_etcd_txn *t) {
  if (t == NULL)
    return;
  json_decref(t->cmp);
  json_decref(t->succ);
  json_decref(t->fail);
  free(t);
}

static size_t sat_add(size_t a, size_t b) {
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

int rdzv_etcd_txn_compare(struct rdzv_etcd_txn *t, const void *key, size_t klen,
                          enum rdzv_etcd_target target,
                          enum rdzv_etcd_result_op result, int64_t num,
                          const void *value, size_t vlen) {
  static const char *const targets[] = {"CREATE", "MOD", "VERSION", "VALUE"};
  static const char *const results[] = {"EQUAL", "GREATER", "LESS",
                                        "NOT_EQUAL"};
  static const char *const fields[] = {"create_revision", "mod_revision",
                                       "version"};
  if (t->bad)
    return RDZV_ENOMEM;
  json_t *c = json_object();
  int bad = c == NULL;
  if (!bad) {
    bad |= set_b64(c, "key", key, klen);
    if ((unsigned)target < 4)
      bad |= json_object_set_new(c, "target", json_string(targets[target]));
    else
      bad |= json_object_set_new(c, "target", json_integer((int)target));
    if ((unsigned)result < 4)
      bad |= json_object_set_new(c, "result", json_string(results[result]));
    else
      bad |= json_object_set_new(c, "result", json_integer((int)result));
    if ((unsigned)target < 3)
      bad |= set_i64(c, fields[target], num);
    else
      bad |= set_b64(c, "value", value, vlen);
    bad |= json_array_append(t->cmp, c);
  }
  json_decref(c);
  if (bad) {
    t->bad = true;
    return RDZV_ENOMEM;
  }
  t->bytes = sat_add(t->bytes, sat_add(klen, sat_add(vlen, TXN_OP_OVERHEAD)));
  return 0;
}

/* Appends {"name":req} to a branch. */
static int add_op(struct rdzv_etcd_txn *t, bool then, const char *name,
                  json_t *req, size_t bytes) {
  json_t *op = json_object();
  int bad = op == NULL || req == NULL;
  if (!bad) {
    bad |= json_object_set(op, name, req);
    bad |= json_array_append(then ? t->succ : t->fail, op);
  }
  json_decref(op);
  json_decref(req);
  if (bad) {
    t->bad = true;
    return RDZV_ENOMEM;
  }
  if (then)
    t->nsucc++;
  else
    t->nfail++;
  t->bytes = sat_add(t->bytes, sat_add(bytes, TXN_OP_OVERHEAD));
  return 0;
}

int rdzv_etcd_txn_put(struct rdzv_etcd_txn *t, bool then, const void *key,
                      size_t klen, const void *value, size_t vlen,
                      int64_t lease) {
  if (t->bad)
    return RDZV_ENOMEM;
  json_t *r = json_object();
  int bad = r == NULL;
  if (!bad) {
    bad |= set_b64(r, "key", key, klen);
    if (vlen != 0)
      bad |= set_b64(r, "value", value, vlen);
    if (lease != 0)
      bad |= set_i64(r, "lease", lease);
  }
  if (bad) {
    json_decref(r);
    t->bad = true;
    return RDZV_ENOMEM;
  }
  return add_op(t, then, "request_put", r,
                sat_add(klen, sat_add(vlen, lease != 0 ? 10 : 0)));
}

int rdzv_etcd_txn_delete(struct rdzv_etcd_txn *t, bool then, const void *key,
                         size_t klen, bool prefix) {
  if (t->bad)
    return RDZV_ENOMEM;
  json_t *r = json_object();
  if (r == NULL || set_range(r, key, klen, NULL, 0, prefix) != 0) {
    json_decref(r);
    t->bad = true;
    return RDZV_ENOMEM;
  }
  return add_op(t, then, "request_delete_range", r,
                prefix ? sat_add(klen, klen) : klen);
}

int rdzv_etcd_txn_range(struct rdzv_etcd_txn *t, bool then, const void *key,
                        size_t klen, bool prefix) {
  if (t->bad)
    return RDZV_ENOMEM;
  json_t *r = json_object();
  if (r == NULL || set_range(r, key, klen, NULL, 0, prefix) != 0) {
    json_decref(r);
    t->bad = true;
    return RDZV_ENOMEM;
  }
  return add_op(t, then, "request_range", r,
                prefix ? sat_add(klen, klen) : klen);
}

/* The request_txn object of sub (compare, success, failure). */
static json_t *txn_object(const struct rdzv_etcd_txn *t) {
  json_t *o = json_object();
  if (o == NULL)
    return NULL;
  int bad = 0;
  if (json_array_size(t->cmp) != 0)
    bad |= json_object_set(o, "compare", t->cmp);
  if (json_array_size(t->succ) != 0)
    bad |= json_object_set(o, "success", t->succ);
  if (json_array_size(t->fail) != 0)
    bad |= json_object_set(o, "failure", t->fail);
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int rdzv_etcd_txn_nest(struct rdzv_etcd_txn *t, bool then,
                       struct rdzv_etcd_txn *sub) {
  int rc;
  if (t->bad || sub == NULL || sub->bad) {
    rdzv_etcd_txn_free(sub);
    t->bad = true;
    return RDZV_ENOMEM;
  }
  json_t *o = txn_object(sub);
  size_t bytes = sub->bytes;
  rdzv_etcd_txn_free(sub);
  if (o == NULL) {
    t->bad = true;
    return RDZV_ENOMEM;
  }
  rc = add_op(t, then, "request_txn", o, bytes);
  return rc;
}

size_t rdzv_etcd_txn_ops(const struct rdzv_etcd_txn *t) {
  return t->nsucc > t->nfail ? t->nsucc : t->nfail;
}

size_t rdzv_etcd_txn_bytes(const struct rdzv_etcd_txn *t) {
  return sat_add(t->bytes, 8);
}

char *rdzv_etcd_json_txn(const struct rdzv_etcd_txn *t, size_t *len) {
  if (t == NULL || t->bad)
    return NULL;
  return finish(txn_object(t), 0, len);
}
