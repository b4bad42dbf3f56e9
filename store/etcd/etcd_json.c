/* The etcd client's pure codec (etcd_json.h), its reading side: the v3
 * gateway's answers, watch events and the watch stream's lines into
 * structs (bodies in, results out, no I/O). The requests' bodies are
 * etcd_json_build.c's. */
#include "store/etcd/etcd_json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"

/* ---- arena: every block of an answer, freed at once -------------------- */

struct rdzv_etcd_arena {
  struct rdzv_etcd_arena *next;
  max_align_t data[];
};

static void *arena_alloc(struct rdzv_etcd_answer *a, size_t n) {
  struct rdzv_etcd_arena *b;
  if (n > SIZE_MAX - sizeof(*b) - 1)
    return NULL;
  b = malloc(sizeof(*b) + n + 1);
  if (b == NULL)
    return NULL;
  b->next = a->arena;
  a->arena = b;
  return b->data;
}

void rdzv_etcd_answer_free(struct rdzv_etcd_answer *a) {
  struct rdzv_etcd_arena *b = a->arena, *nx;
  for (; b != NULL; b = nx) {
    nx = b->next;
    free(b);
  }
  memset(a, 0, sizeof(*a));
}

/* A copy of n bytes of s, NUL-terminated, in the arena ("" on ENOMEM). */
static const char *arena_str(struct rdzv_etcd_answer *a, const char *s,
                             size_t n) {
  char *p = arena_alloc(a, n);
  if (p == NULL)
    return "";
  if (n != 0)
    memcpy(p, s, n);
  p[n] = 0;
  return p;
}

/* ---- base64 ------------------------------------------------------------- */

static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

/* Decodes s (n chars, padded base64) into out (room for n / 4 * 3).
 * Returns the decoded length, or -1 when s is not base64. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
  size_t i, o = 0;
  if (n % 4 != 0)
    return -1;
  for (i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      unsigned char c = (unsigned char)s[i + k];
      if (c == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
        continue;
      }
      if (pad != 0 || (v[k] = b64_val(c)) < 0)
        return -1;
    }
    uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) |
                 ((uint32_t)v[2] << 6) | (uint32_t)v[3];
    out[o++] = (uint8_t)(w >> 16);
    if (pad < 2)
      out[o++] = (uint8_t)(w >> 8);
    if (pad < 1)
      out[o++] = (uint8_t)w;
  }
  return (long)o;
}

/* ---- reading fields ----------------------------------------------------- */

/* int64 field: missing or null 0; a decimal string or a JSON integer.
 * 0 or RDZV_EPROTO. */
static int get_i64(const json_t *o, const char *name, int64_t *out) {
  const json_t *v = json_object_get(o, name);
  *out = 0;
  if (v == NULL || json_is_null(v))
    return 0;
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return 0;
  }
  if (!json_is_string(v))
    return RDZV_EPROTO;
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  if (n == 0 || n > 20 || strlen(s) != n)
    return RDZV_EPROTO;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (i == 0 && s[i] == '-' && n > 1)))
      return RDZV_EPROTO;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno != 0 || *end != 0)
    return RDZV_EPROTO;
  *out = (int64_t)x;
  return 0;
}

static int get_bool(const json_t *o, const char *name, bool *out) {
  const json_t *v = json_object_get(o, name);
  *out = false;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_boolean(v))
    return RDZV_EPROTO;
  *out = json_is_true(v);
  return 0;
}

/* A string field (NULL when missing); RDZV_EPROTO when not a string. */
static int get_str(const json_t *o, const char *name, const char **s,
                   size_t *n) {
  const json_t *v = json_object_get(o, name);
  *s = NULL;
  *n = 0;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_string(v))
    return RDZV_EPROTO;
  *s = json_string_value(v);
  *n = json_string_length(v);
  return 0;
}

/* A base64 bytes field decoded into the arena (NULL, 0 when missing or
 * empty). 0, RDZV_EPROTO, RDZV_ENOMEM. */
static int get_bytes(struct rdzv_etcd_answer *a, const json_t *o,
                     const char *name, const uint8_t **p, size_t *n) {
  const char *s;
  size_t sn;
  int rc = get_str(o, name, &s, &sn);
  *p = NULL;
  *n = 0;
  if (rc != 0 || s == NULL || sn == 0)
    return rc;
  uint8_t *out = arena_alloc(a, sn / 4 * 3);
  if (out == NULL)
    return RDZV_ENOMEM;
  long m = b64_decode(s, sn, out);
  if (m < 0)
    return RDZV_EPROTO;
  out[m] = 0;
  if (m > 0) {
    *p = out;
    *n = (size_t)m;
  }
  return 0;
}

/* An object field: NULL when missing; RDZV_EPROTO when not an object. */
static int get_obj(const json_t *o, const char *name, const json_t **out) {
  const json_t *v = json_object_get(o, name);
  *out = NULL;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_object(v))
    return RDZV_EPROTO;
  *out = v;
  return 0;
}

/* An array field: NULL when missing; RDZV_EPROTO when not an array. */
static int get_arr(const json_t *o, const char *name, const json_t **out) {
  const json_t *v = json_object_get(o, name);
  *out = NULL;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_array(v))
    return RDZV_EPROTO;
  *out = v;
  return 0;
}

static int parse_kv(struct rdzv_etcd_answer *a, const json_t *o,
                    struct rdzv_etcd_kv *kv) {
  int rc;
  memset(kv, 0, sizeof(*kv));
  if (!json_is_object(o))
    return RDZV_EPROTO;
  if ((rc = get_bytes(a, o, "key", &kv->key, &kv->klen)) != 0 ||
      (rc = get_bytes(a, o, "value", &kv->value, &kv->vlen)) != 0 ||
      (rc = get_i64(o, "create_revision", &kv->create_revision)) != 0 ||
      (rc = get_i64(o, "mod_revision", &kv->mod_revision)) != 0 ||
      (rc = get_i64(o, "version", &kv->version)) != 0 ||
      (rc = get_i64(o, "lease", &kv->lease)) != 0)
    return rc;
  return 0;
}

static int parse_header(const json_t *o, int64_t *rev) {
  const json_t *h;
  int rc = get_obj(o, "header", &h);
  *rev = 0;
  if (rc != 0 || h == NULL)
    return rc;
  return get_i64(h, "revision", rev);
}

/* Appends the kvs of array arr (may be NULL) to a->r.kvs, whose room is
 * *cap entries. */
static int add_kvs(struct rdzv_etcd_answer *a, const json_t *arr,
                   struct rdzv_etcd_kv *kvs, size_t cap) {
  size_t i;
  const json_t *v;
  if (arr == NULL)
    return 0;
  json_array_foreach (arr, i, v) {
    if (a->r.nkvs >= cap)
      return RDZV_EPROTO;
    int rc = parse_kv(a, v, &kvs[a->r.nkvs]);
    if (rc != 0)
      return rc;
    a->r.nkvs++;
  }
  return 0;
}

/* Counts the kvs of the response_range parts of txn responses (nested
 * txns included), checking their shapes. */
static int txn_count(const json_t *resps, size_t *n) {
  size_t i;
  const json_t *v, *p;
  int rc;
  if (resps == NULL)
    return 0;
  json_array_foreach (resps, i, v) {
    if (!json_is_object(v))
      return RDZV_EPROTO;
    if ((rc = get_obj(v, "response_range", &p)) != 0)
      return rc;
    if (p != NULL) {
      const json_t *kvs;
      if ((rc = get_arr(p, "kvs", &kvs)) != 0)
        return rc;
      if (kvs != NULL)
        *n += json_array_size(kvs);
    }
    if ((rc = get_obj(v, "response_txn", &p)) != 0)
      return rc;
    if (p != NULL) {
      const json_t *sub;
      if ((rc = get_arr(p, "responses", &sub)) != 0 ||
          (rc = txn_count(sub, n)) != 0)
        return rc;
    }
  }
  return 0;
}

static int txn_walk(struct rdzv_etcd_answer *a, const json_t *resps,
                    struct rdzv_etcd_kv *kvs, size_t cap) {
  size_t i;
  const json_t *v, *p;
  int rc;
  if (resps == NULL)
    return 0;
  json_array_foreach (resps, i, v) {
    if ((rc = get_obj(v, "response_range", &p)) != 0)
      return rc;
    if (p != NULL) {
      const json_t *arr;
      if ((rc = get_arr(p, "kvs", &arr)) != 0 ||
          (rc = add_kvs(a, arr, kvs, cap)) != 0)
        return rc;
    }
    if ((rc = get_obj(v, "response_delete_range", &p)) != 0)
      return rc;
    if (p != NULL) {
      int64_t d;
      if ((rc = get_i64(p, "deleted", &d)) != 0)
        return rc;
      a->r.deleted += d;
    }
    if ((rc = get_obj(v, "response_txn", &p)) != 0)
      return rc;
    if (p != NULL) {
      const json_t *sub;
      if ((rc = get_arr(p, "responses", &sub)) != 0 ||
          (rc = txn_walk(a, sub, kvs, cap)) != 0)
        return rc;
    }
  }
  return 0;
}

static int parse_ok(struct rdzv_etcd_answer *a, enum rdzv_etcd_kind kind,
                    const json_t *o) {
  struct rdzv_etcd_result *r = &a->r;
  const json_t *arr, *res;
  const char *s;
  size_t n;
  int rc;

  if (kind == RDZV_ETCD_K_KEEPALIVE) {
    /* {"result":{...}} or the stream's {"error":{...}} */
    const json_t *err;
    if ((rc = get_obj(o, "error", &err)) != 0)
      return rc;
    if (err != NULL) {
      int64_t g, h;
      if ((rc = get_i64(err, "grpc_code", &g)) != 0 ||
          (rc = get_i64(err, "http_code", &h)) != 0 ||
          (rc = get_str(err, "message", &s, &n)) != 0)
        return rc;
      r->grpc_code = (int)g;
      if (s != NULL)
        r->message = arena_str(a, s, n);
      return RDZV_EETCD;
    }
    if ((rc = get_obj(o, "result", &res)) != 0)
      return rc;
    if (res != NULL)
      o = res;
  }
  if ((rc = parse_header(o, &r->revision)) != 0)
    return rc;
  switch (kind) {
  case RDZV_ETCD_K_RANGE: {
    if ((rc = get_arr(o, "kvs", &arr)) != 0 ||
        (rc = get_i64(o, "count", &r->count)) != 0 ||
        (rc = get_bool(o, "more", &r->more)) != 0)
      return rc;
    size_t cap = arr != NULL ? json_array_size(arr) : 0;
    struct rdzv_etcd_kv *kvs = NULL;
    if (cap != 0 && (kvs = arena_alloc(a, cap * sizeof(*kvs))) == NULL)
      return RDZV_ENOMEM;
    r->kvs = kvs;
    return add_kvs(a, arr, kvs, cap);
  }
  case RDZV_ETCD_K_DELETE:
    return get_i64(o, "deleted", &r->deleted);
  case RDZV_ETCD_K_TXN: {
    size_t cap = 0;
    if ((rc = get_bool(o, "succeeded", &r->succeeded)) != 0 ||
        (rc = get_arr(o, "responses", &arr)) != 0 ||
        (rc = txn_count(arr, &cap)) != 0)
      return rc;
    struct rdzv_etcd_kv *kvs = NULL;
    if (cap != 0) {
      if (cap > SIZE_MAX / sizeof(*kvs))
        return RDZV_EPROTO;
      if ((kvs = arena_alloc(a, cap * sizeof(*kvs))) == NULL)
        return RDZV_ENOMEM;
    }
    r->kvs = kvs;
    return txn_walk(a, arr, kvs, cap);
  }
  case RDZV_ETCD_K_GRANT:
    if ((rc = get_i64(o, "ID", &r->lease_id)) != 0 ||
        (rc = get_i64(o, "TTL", &r->ttl_s)) != 0 ||
        (rc = get_str(o, "error", &s, &n)) != 0)
      return rc;
    if (s != NULL && n != 0) {
      r->message = arena_str(a, s, n);
      return RDZV_EETCD;
    }
    return 0;
  case RDZV_ETCD_K_KEEPALIVE:
    if ((rc = get_i64(o, "ID", &r->lease_id)) != 0 ||
        (rc = get_i64(o, "TTL", &r->ttl_s)) != 0)
      return rc;
    if (r->ttl_s <= 0) {
      r->message = "lease not found (keepalive answered without a TTL)";
      return RDZV_ELEASE_LOST;
    }
    return 0;
  case RDZV_ETCD_K_TTL:
    if ((rc = get_i64(o, "ID", &r->lease_id)) != 0 ||
        (rc = get_i64(o, "TTL", &r->ttl_s)) != 0 ||
        (rc = get_i64(o, "grantedTTL", &r->granted_ttl_s)) != 0)
      return rc;
    if (r->ttl_s < 0) {
      r->message = "lease not found (time-to-live -1)";
      return RDZV_ELEASE_LOST;
    }
    return 0;
  case RDZV_ETCD_K_AUTH:
    if ((rc = get_str(o, "token", &s, &n)) != 0)
      return rc;
    if (s == NULL || n == 0 || strlen(s) != n)
      return RDZV_EPROTO;
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
        return RDZV_EPROTO; /* it goes into a header */
    r->token = arena_str(a, s, n);
    return r->token[0] != 0 ? 0 : RDZV_ENOMEM;
  default:
    return 0;
  }
}

static bool contains(const char *s, const char *what) {
  return s != NULL && strstr(s, what) != NULL;
}

/* A printable copy of at most 200 bytes of a non-JSON error body. */
static const char *plain_text(struct rdzv_etcd_answer *a, const char *s,
                              size_t n) {
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
    n--;
  if (n > 200)
    n = 200;
  char *p = arena_alloc(a, n);
  if (p == NULL)
    return "";
  for (size_t i = 0; i < n; i++)
    p[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  p[n] = 0;
  return p;
}

static int parse_error(struct rdzv_etcd_answer *a, int http, const char *body,
                       size_t n) {
  struct rdzv_etcd_result *r = &a->r;
  json_t *o = json_loadb(body, n, 0, NULL);
  const char *msg = NULL;

  if (o != NULL && json_is_object(o)) {
    const char *s;
    size_t sn;
    int64_t code = 0;
    if (get_str(o, "message", &s, &sn) == 0 && s != NULL)
      msg = arena_str(a, s, sn);
    else if (get_str(o, "error", &s, &sn) == 0 && s != NULL)
      msg = arena_str(a, s, sn);
    if (get_i64(o, "code", &code) == 0 && code >= 0 && code < 1000)
      r->grpc_code = (int)code;
  } else if (n != 0) {
    msg = plain_text(a, body, n);
  }
  json_decref(o);
  if (msg == NULL || msg[0] == 0) {
    msg = http == 404 ? "not found (HTTP 404)" : "etcd answered an error";
  }
  r->message = msg;
  if ((r->grpc_code == 3 &&
       (contains(msg, "too large") || contains(msg, "too many operations"))) ||
      (http == 429 && contains(msg, "larger than max")))
    return RDZV_ETOO_LARGE;
  if (r->grpc_code == 5)
    return RDZV_ENOKEY;
  if (r->grpc_code == 11 && contains(msg, "compacted"))
    return RDZV_ECOMPACTED;
  return RDZV_EETCD;
}

static void answer_init(struct rdzv_etcd_answer *a) {
  memset(a, 0, sizeof(*a));
  a->r.message = "";
}

int rdzv_etcd_json_parse(enum rdzv_etcd_kind kind, int http, const void *body,
                         size_t n, struct rdzv_etcd_answer *a) {
  answer_init(a);
  a->r.http = http;
  if (body == NULL)
    n = 0;
  if (http != 200) {
    a->r.status = parse_error(a, http, body != NULL ? body : "", n);
    return a->r.status;
  }
  json_t *o = json_loadb(body != NULL ? body : "", n, 0, NULL);
  int rc;
  if (o == NULL || !json_is_object(o) || kind < 0 || kind >= RDZV_ETCD_K_COUNT_)
    rc = RDZV_EPROTO;
  else
    rc = parse_ok(a, kind, o);
  json_decref(o);
  if (rc != 0) {
    /* On failure only status, message, http, grpc_code are meant. */
    const char *m = a->r.message;
    int g = a->r.grpc_code;
    int64_t lease = a->r.lease_id;
    memset(&a->r, 0, sizeof(a->r));
    a->r.http = http;
    a->r.grpc_code = g;
    a->r.lease_id = lease;
    a->r.message = m[0] != 0           ? m
                   : rc == RDZV_EPROTO ? "answer is not the gateway's JSON"
                                       : "";
  }
  a->r.status = rc;
  return rc;
}

static int parse_events(struct rdzv_etcd_answer *a, const json_t *res) {
  const json_t *arr, *v;
  size_t i;
  int rc;

  if ((rc = get_arr(res, "events", &arr)) != 0 || arr == NULL)
    return rc;
  size_t cap = json_array_size(arr);
  if (cap == 0)
    return 0;
  if (cap > SIZE_MAX / sizeof(*a->ev))
    return RDZV_EPROTO;
  a->ev = arena_alloc(a, cap * sizeof(*a->ev));
  if (a->ev == NULL)
    return RDZV_ENOMEM;
  memset(a->ev, 0, cap * sizeof(*a->ev));
  json_array_foreach (arr, i, v) {
    struct rdzv_etcd_event *e = &a->ev[i];
    const json_t *kv, *prev, *t;
    if (!json_is_object(v))
      return RDZV_EPROTO;
    t = json_object_get(v, "type");
    if (t == NULL || json_is_null(t))
      e->type = RDZV_ETCD_PUT;
    else if (json_is_string(t) && strcmp(json_string_value(t), "PUT") == 0)
      e->type = RDZV_ETCD_PUT;
    else if (json_is_string(t) && strcmp(json_string_value(t), "DELETE") == 0)
      e->type = RDZV_ETCD_DELETE;
    else if (json_is_integer(t) &&
             (json_integer_value(t) == 0 || json_integer_value(t) == 1))
      e->type = (enum rdzv_etcd_event_type)json_integer_value(t);
    else
      return RDZV_EPROTO;
    if ((rc = get_obj(v, "kv", &kv)) != 0 ||
        (rc = get_obj(v, "prev_kv", &prev)) != 0)
      return rc;
    if (kv == NULL)
      return RDZV_EPROTO;
    if ((rc = parse_kv(a, kv, &e->kv)) != 0)
      return rc;
    if (prev != NULL && (rc = parse_kv(a, prev, &e->prev_kv)) != 0)
      return rc;
    a->nev = i + 1;
  }
  return 0;
}

static int parse_watch(struct rdzv_etcd_answer *a, const json_t *o) {
  struct rdzv_etcd_result *r = &a->r;
  const json_t *err, *res;
  const char *s;
  size_t n;
  int rc;

  if ((rc = get_obj(o, "error", &err)) != 0)
    return rc;
  if (err != NULL) {
    int64_t g, h;
    if ((rc = get_i64(err, "grpc_code", &g)) != 0 ||
        (rc = get_i64(err, "http_code", &h)) != 0 ||
        (rc = get_str(err, "message", &s, &n)) != 0)
      return rc;
    r->grpc_code = g >= 0 && g < 1000 ? (int)g : 0;
    r->http = h >= 0 && h < 1000 ? (int)h : 0;
    r->message = s != NULL && n != 0 ? arena_str(a, s, n)
                                     : "watch stream ended with an error";
    return RDZV_EETCD;
  }
  if ((rc = get_obj(o, "result", &res)) != 0)
    return rc;
  if (res == NULL)
    return RDZV_EPROTO;
  if ((rc = parse_header(res, &r->revision)) != 0 ||
      (rc = get_i64(res, "watch_id", &a->watch_id)) != 0 ||
      (rc = get_bool(res, "created", &a->created)) != 0 ||
      (rc = get_bool(res, "canceled", &a->canceled)) != 0 ||
      (rc = get_i64(res, "compact_revision", &r->compact_revision)) != 0 ||
      (rc = get_str(res, "cancel_reason", &s, &n)) != 0)
    return rc;
  if (a->canceled) {
    if (r->compact_revision > 0) {
      r->message = "mvcc: required revision has been compacted";
      return RDZV_ECOMPACTED;
    }
    r->message =
        s != NULL && n != 0 ? arena_str(a, s, n) : "watch canceled by etcd";
    return RDZV_EETCD;
  }
  return parse_events(a, res);
}

int rdzv_etcd_json_parse_watch(const void *msg, size_t n,
                               struct rdzv_etcd_answer *a) {
  answer_init(a);
  json_t *o = msg != NULL ? json_loadb(msg, n, 0, NULL) : NULL;
  int rc = o != NULL && json_is_object(o) ? parse_watch(a, o) : RDZV_EPROTO;
  json_decref(o);
  if (rc != 0) {
    a->ev = NULL;
    a->nev = 0;
    if (rc == RDZV_EPROTO)
      a->r.message = "watch message is not the gateway's JSON";
    else if (rc == RDZV_ENOMEM)
      a->r.message = "";
  }
  a->r.status = rc;
  return rc;
}

/* ---- stream splitting -------------------------------------------------- */

int rdzv_etcd_lines_add(struct rdzv_etcd_lines *l, const void *p, size_t n,
                        size_t max) {
  if (n == 0)
    return 0;
  if (l->off != 0 && l->off == l->len) {
    l->off = l->len = 0;
  }
  size_t held = l->len - l->off;
  /* a message longer than max (no '\n' in sight) is refused */
  if ((held > max || n > max - held) && memchr(p, '\n', n) == NULL)
    return RDZV_ETOO_LARGE;
  if (n > SIZE_MAX / 4 - l->len)
    return RDZV_ENOMEM;
  if (l->off != 0 && l->len + n > l->cap) {
    memmove(l->p, l->p + l->off, held);
    l->len = held;
    l->off = 0;
  }
  if (l->len + n > l->cap) {
    size_t cap = l->cap != 0 ? l->cap : 4096;
    while (cap < l->len + n) {
      if (cap > SIZE_MAX / 2)
        return RDZV_ENOMEM;
      cap *= 2;
    }
    char *q = realloc(l->p, cap);
    if (q == NULL)
      return RDZV_ENOMEM;
    l->p = q;
    l->cap = cap;
  }
  memcpy(l->p + l->len, p, n);
  l->len += n;
  return 0;
}

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
      return false;
  return true;
}

bool rdzv_etcd_lines_next(struct rdzv_etcd_lines *l, bool eof, const char **msg,
                          size_t *n) {
  while (l->off < l->len) {
    const char *s = l->p + l->off;
    size_t left = l->len - l->off;
    const char *nl = memchr(s, '\n', left);
    size_t m;
    if (nl != NULL) {
      m = (size_t)(nl - s);
      l->off += m + 1;
    } else if (eof) {
      m = left;
      l->off = l->len;
    } else {
      return false;
    }
    if (!blank(s, m)) {
      *msg = s;
      *n = m;
      return true;
    }
  }
  return false;
}

void rdzv_etcd_lines_free(struct rdzv_etcd_lines *l) {
  free(l->p);
  memset(l, 0, sizeof(*l));
}
