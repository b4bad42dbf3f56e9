/* Fuzz target for the etcd client's JSON codec (store/etcd/etcd_json.h).
 *
 * Input: one selector byte, then a body.
 *   selector & 0x80: the body is a watch stream: cut into messages by the
 *     splitter, fed in chunks of (selector & 7) + 1 bytes, and each message
 *     parsed as a watch message;
 *   else: the body is a unary answer of kind (selector & 15) % kinds with
 *     HTTP status {200,400,401,403,404,412,429,503}[(selector >> 4) & 7].
 * Then, whatever the selector, the body is used as a key and value: the
 * bodies built for it are valid JSON, and a put body inside a range answer
 * parses back to the same bytes.
 *
 * Properties (abort on failure): no crash, leak or over-read; the status
 * is 0 or one of the codec's; every pointer the result has for a nonzero
 * length is readable; a failed parse carries no kvs or events; the
 * splitter yields every non-blank line once, in order. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/etcd/etcd_json.h"

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "etcd_json_fuzz: property failed: %s (line %d)\n", #c,   \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static volatile unsigned sink;

static void touch(const void *p, size_t n) {
  const uint8_t *b = p;
  unsigned s = 0;
  for (size_t i = 0; i < n; i++)
    s += b[i];
  sink += s;
}

static void touch_kv(const struct rdzv_etcd_kv *kv) {
  CHECK(kv->klen == 0 || kv->key != NULL);
  CHECK(kv->vlen == 0 || kv->value != NULL);
  touch(kv->key, kv->klen);
  touch(kv->value, kv->vlen);
}

static void check_answer(const struct rdzv_etcd_answer *a) {
  const struct rdzv_etcd_result *r = &a->r;
  int st = r->status;
  CHECK(st == 0 || st == RDZV_EPROTO || st == RDZV_ENOMEM || st == RDZV_EETCD ||
        st == RDZV_ETOO_LARGE || st == RDZV_ENOKEY || st == RDZV_ECOMPACTED ||
        st == RDZV_ELEASE_LOST);
  CHECK(r->message != NULL);
  touch(r->message, strlen(r->message));
  CHECK(r->nkvs == 0 || r->kvs != NULL);
  for (size_t i = 0; i < r->nkvs; i++)
    touch_kv(&r->kvs[i]);
  CHECK(a->nev == 0 || a->ev != NULL);
  for (size_t i = 0; i < a->nev; i++) {
    CHECK(a->ev[i].type == RDZV_ETCD_PUT || a->ev[i].type == RDZV_ETCD_DELETE);
    touch_kv(&a->ev[i].kv);
    touch_kv(&a->ev[i].prev_kv);
  }
  if (r->token != NULL)
    touch(r->token, strlen(r->token));
  if (st != 0) {
    CHECK(r->nkvs == 0);
    CHECK(a->nev == 0);
  }
}

static void fuzz_stream(const uint8_t *p, size_t n, unsigned chunk) {
  struct rdzv_etcd_lines l;
  memset(&l, 0, sizeof(l));
  size_t off = 0, got = 0, want = 0;
  /* non-blank lines in the input */
  for (size_t s = 0; s <= n;) {
    const uint8_t *nl = s < n ? memchr(p + s, '\n', n - s) : NULL;
    size_t e = nl != NULL ? (size_t)(nl - p) : n;
    bool blank = true;
    for (size_t i = s; i < e; i++)
      if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
        blank = false;
    if (!blank)
      want++;
    if (nl == NULL)
      break;
    s = e + 1;
  }
  while (off <= n) {
    size_t c = n - off < chunk ? n - off : chunk;
    bool eof = off + c == n;
    CHECK(rdzv_etcd_lines_add(&l, p + off, c, (size_t)1 << 20) == 0);
    off += c;
    const char *m;
    size_t mn;
    while (rdzv_etcd_lines_next(&l, eof, &m, &mn)) {
      CHECK(mn > 0 && memchr(m, '\n', mn) == NULL);
      struct rdzv_etcd_answer a;
      rdzv_etcd_json_parse_watch(m, mn, &a);
      check_answer(&a);
      rdzv_etcd_answer_free(&a);
      got++;
    }
    if (eof)
      break;
  }
  CHECK(got == want);
  rdzv_etcd_lines_free(&l);
}

static void fuzz_build(const uint8_t *p, size_t n) {
  if (n > 4096)
    n = 4096;
  size_t len;
  char *b;
  json_t *j;
  /* a put body is a KeyValue: inside a range answer it parses back */
  b = rdzv_etcd_json_put(p, n, p, n, 7, &len);
  if (b == NULL)
    return;
  CHECK(strlen(b) == len);
  size_t wn = len + 32;
  char *w = malloc(wn);
  CHECK(w != NULL);
  snprintf(w, wn, "{\"kvs\":[%s],\"count\":\"1\"}", b);
  free(b);
  struct rdzv_etcd_answer a;
  int st = rdzv_etcd_json_parse(RDZV_ETCD_K_RANGE, 200, w, strlen(w), &a);
  free(w);
  if (st != RDZV_ENOMEM) {
    CHECK(st == 0);
    CHECK(a.r.nkvs == 1 && a.r.count == 1);
    CHECK(a.r.kvs[0].klen == n && a.r.kvs[0].vlen == n);
    CHECK(n == 0 || memcmp(a.r.kvs[0].key, p, n) == 0);
    CHECK(n == 0 || memcmp(a.r.kvs[0].value, p, n) == 0);
    CHECK(a.r.kvs[0].lease == 7);
  }
  rdzv_etcd_answer_free(&a);

  /* the other bodies are JSON objects */
  struct rdzv_etcd_range_opts ro = {
      .prefix = n & 1, .limit = (int64_t)n, .keys_only = true};
  struct rdzv_etcd_watch_opts wo = {
      .prefix = n & 2, .prev_kv = true, .start_revision = -(int64_t)n};
  char *bodies[6] = {
      rdzv_etcd_json_range(p, n, &ro, NULL),
      rdzv_etcd_json_delete(p, n, p, n / 2, (n & 4) != 0, NULL),
      rdzv_etcd_json_watch(p, n, &wo, NULL),
      rdzv_etcd_json_lease_grant((int64_t)n, INT64_MIN, NULL),
      rdzv_etcd_json_compact(INT64_MAX, true, NULL),
      NULL,
  };
  struct rdzv_etcd_txn *t = rdzv_etcd_txn_new();
  if (t != NULL) {
    rdzv_etcd_txn_compare(t, p, n, (enum rdzv_etcd_target)(n % 5),
                          (enum rdzv_etcd_result_op)(n % 5), -1, p, n);
    rdzv_etcd_txn_put(t, true, p, n, p, n, 0);
    rdzv_etcd_txn_delete(t, false, p, n, true);
    struct rdzv_etcd_txn *sub = rdzv_etcd_txn_new();
    if (sub != NULL)
      rdzv_etcd_txn_range(sub, false, p, n, false);
    rdzv_etcd_txn_nest(t, true, sub);
    CHECK(rdzv_etcd_txn_ops(t) <= 2);
    CHECK(rdzv_etcd_txn_bytes(t) >= 3 * n);
    bodies[5] = rdzv_etcd_json_txn(t, NULL);
    rdzv_etcd_txn_free(t);
  }
  for (int i = 0; i < 6; i++) {
    if (bodies[i] == NULL)
      continue;
    j = json_loads(bodies[i], 0, NULL);
    CHECK(j != NULL && json_is_object(j));
    json_decref(j);
    free(bodies[i]);
  }
  uint8_t *end = malloc(n + 1);
  CHECK(end != NULL);
  size_t en = rdzv_etcd_prefix_end(p, n, end);
  CHECK(en >= 1 && en <= (n > 0 ? n : 1));
  free(end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int statuses[8] = {200, 400, 401, 403, 404, 412, 429, 503};
  if (size == 0)
    return 0;
  uint8_t sel = data[0];
  const uint8_t *body = data + 1;
  size_t n = size - 1;

  if (sel & 0x80) {
    fuzz_stream(body, n, (sel & 7u) + 1);
  } else {
    struct rdzv_etcd_answer a;
    enum rdzv_etcd_kind kind =
        (enum rdzv_etcd_kind)((sel & 15) % RDZV_ETCD_K_COUNT_);
    int http = statuses[(sel >> 4) & 7];
    int st = rdzv_etcd_json_parse(kind, http, body, n, &a);
    CHECK(st == a.r.status);
    CHECK(a.r.http == http);
    check_answer(&a);
    if (http != 200)
      CHECK(st != 0);
    rdzv_etcd_answer_free(&a);
  }
  fuzz_build(body, n);
  return 0;
}
