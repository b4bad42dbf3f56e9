/* The etcd client's pure codec (etcd_json.h) and the transaction builder
 * of etcd.h (rdzv_etcd_txn_*), which only builds JSON. */
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
  json_array_foreach(arr, i, v) {
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
  json_array_foreach(resps, i, v) {
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
  json_array_foreach(resps, i, v) {
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
    a->r.message = m[0] != 0 ? m
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
  json_array_foreach(arr, i, v) {
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
    else if (json_is_integer(t) && (json_integer_value(t) == 0 ||
                                    json_integer_value(t) == 1))
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
    r->message = s != NULL && n != 0 ? arena_str(a, s, n)
                                     : "watch canceled by etcd";
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
                           const struct rdzv_etcd_range_opts *op,
                           size_t *len) {
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

char *rdzv_etcd_json_delete(const void *key, size_t klen,
                            const void *range_end, size_t relen, bool prefix,
                            size_t *len) {
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

char *rdzv_etcd_json_auth(const char *user, const char *password,
                          size_t *len) {
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
                           const struct rdzv_etcd_watch_opts *op,
                           size_t *len) {
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

int rdzv_etcd_txn_compare(struct rdzv_etcd_txn *t, const void *key,
                          size_t klen, enum rdzv_etcd_target target,
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

bool rdzv_etcd_lines_next(struct rdzv_etcd_lines *l, bool eof,
                          const char **msg, size_t *n) {
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
