/* The etcd v3 client (etcd.h): libcurl's multi interface driven from a
 * libuv loop (etcd_curl.c), every callback to the user run from the
 * delivery queue (etcd_request.c).
 *
 * This file owns the client's life (rdzv_etcd_new, rdzv_etcd_close) and
 * the public calls of etcd.h: each builds its body with etcd_json.h and
 * hands a new request to etcd_curl.c. A request's queues, its end, auth
 * and delivery are etcd_request.c's; its transfer, the multi's sockets
 * and timer, and the close's end are etcd_curl.c's. It may call both
 * through etcd_int.h. */
#include "store/etcd/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/etcd/etcd_int.h"
#include "store/etcd/etcd_json.h"

/* ---- client ------------------------------------------------------------- */

static char *dup_opt(const char *s, bool *bad) {
  if (s == NULL || s[0] == 0)
    return NULL;
  char *d = strdup(s);
  if (d == NULL)
    *bad = true;
  return d;
}

req_t *rdzv__etcd_req_new(struct rdzv_etcd *e, enum rdzv_etcd_kind kind,
                          char *body, size_t blen) {
  req_t *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    free(body);
    return NULL;
  }
  r->e = e;
  r->kind = kind;
  r->body = body;
  r->blen = blen;
  r->ep = e->cur;
  r->ans.r.message = "";
  r->next = e->all;
  if (e->all != NULL)
    e->all->prev = r;
  e->all = r;
  e->nreqs++;
  return r;
}

static int submit(struct rdzv_etcd *e, enum rdzv_etcd_kind kind, char *body,
                  size_t blen, rdzv_etcd_cb cb, void *arg) {
  if (body == NULL)
    return RDZV_ENOMEM;
  req_t *r = rdzv__etcd_req_new(e, kind, body, blen);
  if (r == NULL)
    return RDZV_ENOMEM;
  r->cb = cb;
  r->arg = arg;
  if (kind == RDZV_ETCD_K_AUTH)
    r->no_token = true;
  rdzv__etcd_start_req(r);
  return 0;
}

void rdzv__etcd_free(struct rdzv_etcd *e) {
  for (int i = 0; i < e->nep; i++)
    free(e->ep[i]);
  free(e->user);
  free(e->password);
  free(e->ca_file);
  free(e->cert_file);
  free(e->key_file);
  free(e->token);
  free(e);
}

int rdzv_etcd_new(uv_loop_t *loop, const struct rdzv_etcd_config *cfg,
                  struct rdzv_etcd **out) {
  *out = NULL;
  if (cfg == NULL || cfg->endpoints == NULL || loop == NULL)
    return RDZV_EBAD_ADDR;
  struct rdzv_etcd *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return RDZV_ENOMEM;
  e->loop = loop;
  /* endpoints */
  const char *s = cfg->endpoints;
  int rc = 0;
  for (;;) {
    const char *end = strchr(s, ',');
    size_t n = end != NULL ? (size_t)(end - s) : strlen(s);
    while (n > 0 && (*s == ' ' || *s == '\t')) {
      s++;
      n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
      n--;
    while (n > 0 && s[n - 1] == '/')
      n--;
    size_t scheme = strncmp(s, "http://", 7) == 0    ? 7
                    : strncmp(s, "https://", 8) == 0 ? 8
                                                     : 0;
    if (n == 0 || n >= 256 || scheme == 0 || n <= scheme ||
        e->nep >= RDZV_ETCD_MAX_ENDPOINTS) {
      rc = RDZV_EBAD_ADDR;
      break;
    }
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
        rc = RDZV_EBAD_ADDR;
        break;
      }
    if (rc != 0)
      break;
    if ((e->ep[e->nep] = strndup(s, n)) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    e->nep++;
    if (end == NULL)
      break;
    s = end + 1;
  }
  bool bad = false;
  e->timeout_ms = cfg->timeout_ms != 0 ? cfg->timeout_ms : 5000;
  e->user = dup_opt(cfg->user, &bad);
  e->password = dup_opt(cfg->password, &bad);
  e->ca_file = dup_opt(cfg->ca_file, &bad);
  e->cert_file = dup_opt(cfg->cert_file, &bad);
  e->key_file = dup_opt(cfg->key_file, &bad);
  if (rc == 0 && bad)
    rc = RDZV_ENOMEM;
  if (rc == 0) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    e->multi = curl_multi_init();
    if (e->multi == NULL)
      rc = RDZV_ENOMEM;
  }
  if (rc == 0 && (uv_timer_init(loop, &e->timer) != 0 ||
                  uv_idle_init(loop, &e->idle) != 0))
    rc = RDZV_ENOMEM; /* not reached with libuv's own loop */
  if (rc != 0) {
    if (e->multi != NULL)
      curl_multi_cleanup(e->multi);
    rdzv__etcd_free(e);
    return rc;
  }
  e->timer.data = e;
  e->idle.data = e;
  e->open_handles = 2;
  curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, rdzv__etcd_on_socket);
  curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
  curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, rdzv__etcd_on_timer_set);
  curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
  *out = e;
  return 0;
}

void rdzv_etcd_close(struct rdzv_etcd *e, void (*done)(void *arg), void *arg) {
  if (e->closing)
    return;
  e->closing = true;
  e->done = done;
  e->done_arg = arg;
  for (req_t *r = e->all; r != NULL; r = r->next) {
    if (r->st == R_DONE)
      continue;
    rdzv__etcd_set_final(r, RDZV_ECANCELED, "client closed", 0, 0);
    rdzv__etcd_finish(r);
  }
  e->wait_head = e->wait_tail = NULL;
  uv_idle_start(&e->idle, rdzv__etcd_on_idle);
}

const char *rdzv_etcd_endpoint(const struct rdzv_etcd *e) {
  return e->ep[e->cur];
}

void rdzv_etcd_stats(const struct rdzv_etcd *e, struct rdzv_etcd_stats *out) {
  *out = e->stats;
}

int rdzv_etcd_put(struct rdzv_etcd *e, const void *key, size_t klen,
                  const void *value, size_t vlen, int64_t lease,
                  rdzv_etcd_cb cb, void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_put(key, klen, value, vlen, lease, &n);
  return submit(e, RDZV_ETCD_K_PUT, b, n, cb, arg);
}

int rdzv_etcd_range(struct rdzv_etcd *e, const void *key, size_t klen,
                    const struct rdzv_etcd_range_opts *o, rdzv_etcd_cb cb,
                    void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_range(key, klen, o, &n);
  return submit(e, RDZV_ETCD_K_RANGE, b, n, cb, arg);
}

int rdzv_etcd_delete(struct rdzv_etcd *e, const void *key, size_t klen,
                     const void *range_end, size_t relen, bool prefix,
                     rdzv_etcd_cb cb, void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_delete(key, klen, range_end, relen, prefix, &n);
  return submit(e, RDZV_ETCD_K_DELETE, b, n, cb, arg);
}

int rdzv_etcd_txn(struct rdzv_etcd *e, struct rdzv_etcd_txn *t, rdzv_etcd_cb cb,
                  void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_txn(t, &n);
  rdzv_etcd_txn_free(t);
  return submit(e, RDZV_ETCD_K_TXN, b, n, cb, arg);
}

int rdzv_etcd_compact(struct rdzv_etcd *e, int64_t revision, bool physical,
                      rdzv_etcd_cb cb, void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_compact(revision, physical, &n);
  return submit(e, RDZV_ETCD_K_COMPACT, b, n, cb, arg);
}

int rdzv_etcd_lease_grant(struct rdzv_etcd *e, int64_t ttl_s, int64_t id,
                          rdzv_etcd_cb cb, void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_lease_grant(ttl_s, id, &n);
  return submit(e, RDZV_ETCD_K_GRANT, b, n, cb, arg);
}

int rdzv_etcd_lease_keepalive(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                              void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_lease_id(id, &n);
  return submit(e, RDZV_ETCD_K_KEEPALIVE, b, n, cb, arg);
}

int rdzv_etcd_lease_revoke(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                           void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_lease_id(id, &n);
  return submit(e, RDZV_ETCD_K_REVOKE, b, n, cb, arg);
}

int rdzv_etcd_lease_ttl(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                        void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_lease_id(id, &n);
  return submit(e, RDZV_ETCD_K_TTL, b, n, cb, arg);
}

int rdzv_etcd_authenticate(struct rdzv_etcd *e, rdzv_etcd_cb cb, void *arg) {
  size_t n = 0;
  char *b = rdzv_etcd_json_auth(e->user, e->password, &n);
  return submit(e, RDZV_ETCD_K_AUTH, b, n, cb, arg);
}

int rdzv_etcd_watch(struct rdzv_etcd *e, const void *key, size_t klen,
                    const struct rdzv_etcd_watch_opts *o, rdzv_etcd_watch_cb cb,
                    void *arg, struct rdzv_etcd_watch **out) {
  size_t n = 0;
  *out = NULL;
  char *b = rdzv_etcd_json_watch(key, klen, o, &n);
  if (b == NULL)
    return RDZV_ENOMEM;
  req_t *w = rdzv__etcd_req_new(e, RDZV_ETCD_K_WATCH, b, n);
  if (w == NULL)
    return RDZV_ENOMEM;
  w->is_watch = true;
  w->wcb = cb;
  w->arg = arg;
  *out = w;
  rdzv__etcd_start_req(w);
  return 0;
}

void rdzv_etcd_watch_cancel(struct rdzv_etcd_watch *w) {
  if (w == NULL || w->st == R_DONE)
    return;
  rdzv__etcd_set_final(w, RDZV_ECANCELED, "watch canceled", 0, 0);
  rdzv__etcd_finish(w);
}
