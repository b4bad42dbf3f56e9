/* The etcd client's transfers: libcurl's multi interface driven from the
 * libuv loop. Sockets: CURLMOPT_SOCKETFUNCTION with one uv_poll_t per
 * socket; timeouts: CURLMOPT_TIMERFUNCTION with one uv_timer_t; then
 * curl_multi_socket_action. One easy handle per request (the multi's
 * connection cache reuses connections).
 *
 * This file owns a request's transfer (its URL, headers and options, the
 * bytes it gets, the next endpoint after a connection failure, what the
 * answer means), the latency histogram, the multi's sockets and timer, and
 * the end of the client's close (the multi and every handle closed). It
 * may call etcd_request.c (a request's end, auth, the delivery queue)
 * through etcd_int.h, and etcd_json.h to parse answers. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/etcd/etcd.h"
#include "store/etcd/etcd_int.h"
#include "store/etcd/etcd_json.h"

/* Most bytes one stream message, or one unary answer, may take. */
#define MAX_MESSAGE_BYTES ((size_t)64 << 20)
#define MAX_ANSWER_BYTES ((size_t)256 << 20)

static const char *const paths[RDZV_ETCD_K_COUNT_] = {
    [RDZV_ETCD_K_PUT] = "/v3/kv/put",
    [RDZV_ETCD_K_RANGE] = "/v3/kv/range",
    [RDZV_ETCD_K_DELETE] = "/v3/kv/deleterange",
    [RDZV_ETCD_K_TXN] = "/v3/kv/txn",
    [RDZV_ETCD_K_GRANT] = "/v3/lease/grant",
    [RDZV_ETCD_K_KEEPALIVE] = "/v3/lease/keepalive",
    [RDZV_ETCD_K_REVOKE] = "/v3/lease/revoke",
    [RDZV_ETCD_K_TTL] = "/v3/lease/timetolive",
    [RDZV_ETCD_K_AUTH] = "/v3/auth/authenticate",
    [RDZV_ETCD_K_COMPACT] = "/v3/kv/compaction",
    [RDZV_ETCD_K_WATCH] = "/v3/watch",
};

/* ---- libcurl callbacks --------------------------------------------------- */

/* The status for a libcurl failure (no answer came). */
static int curl_status(req_t *r, CURLcode res) {
  long oserr = 0;
  curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &oserr);
  switch (res) {
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
    if (oserr == EHOSTUNREACH || oserr == ENETUNREACH)
      return -EHOSTUNREACH;
    if (oserr == ETIMEDOUT)
      return -ETIMEDOUT;
    return -ECONNREFUSED;
  case CURLE_OPERATION_TIMEDOUT:
    return -ETIMEDOUT;
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
    return oserr > 0 ? -(int)oserr : -ECONNRESET;
  case CURLE_OUT_OF_MEMORY:
    return RDZV_ENOMEM;
  default:
    return RDZV_EETCD;
  }
}

static const char *curl_message(req_t *r, CURLcode res) {
  return r->errbuf[0] != 0 ? r->errbuf : curl_easy_strerror(res);
}

/* A connection failure before any answer: try the next endpoint? */
static bool failover_kind(CURLcode res) {
  return res == CURLE_COULDNT_CONNECT || res == CURLE_COULDNT_RESOLVE_HOST ||
         res == CURLE_SEND_ERROR || res == CURLE_RECV_ERROR ||
         res == CURLE_GOT_NOTHING;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *arg) {
  req_t *r = arg;
  size_t n = sz * nm;
  r->e->stats.bytes_in += n;
  if (r->is_watch) {
    long http = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    if (http == 200) {
      if (rdzv_etcd_lines_add(&r->lines, p, n, MAX_MESSAGE_BYTES) != 0)
        return 0; /* aborts: CURLE_WRITE_ERROR */
      rdzv__etcd_queue_push(r);
      return n;
    }
  }
  if (r->resp.n + n > MAX_ANSWER_BYTES)
    return 0;
  char *q = realloc(r->resp.p, r->resp.n + n + 1);
  if (q == NULL)
    return 0;
  memcpy(q + r->resp.n, p, n);
  r->resp.n += n;
  q[r->resp.n] = 0;
  r->resp.p = q;
  return n;
}

static void set_headers(req_t *r) {
  struct rdzv_etcd *e = r->e;
  struct curl_slist *h = NULL, *t;
  bool bad = false;
#define ADD(s)                                                                 \
  do {                                                                         \
    if ((t = curl_slist_append(h, (s))) == NULL)                               \
      bad = true;                                                              \
    else                                                                       \
      h = t;                                                                   \
  } while (0)
  ADD("Content-Type: application/json");
  if (r->is_watch)
    ADD("Grpc-Metadata-hasleader: true");
  else
    ADD("Expect:");
  if (!r->no_token && e->token != NULL) {
    size_t n = strlen(e->token) + 32;
    char *a = malloc(n);
    if (a == NULL) {
      bad = true;
    } else {
      snprintf(a, n, "Authorization: %s", e->token);
      ADD(a);
      free(a);
    }
  }
#undef ADD
  curl_slist_free_all(r->hdrs);
  r->hdrs = bad ? NULL : h;
  if (bad)
    curl_slist_free_all(h);
}

/* Sends r (again) to endpoint r->ep; waits for a token first when auth is
 * on and there is none. Failures end r through the queue. */
void rdzv__etcd_start_req(req_t *r) {
  struct rdzv_etcd *e = r->e;
  char url[320];

  if (e->closing) {
    rdzv__etcd_fail(r, RDZV_ECANCELED, "client closed");
    return;
  }
  if (e->user != NULL && e->token == NULL && !r->no_token) {
    rdzv__etcd_wait_push(r);
    rdzv__etcd_ensure_auth(e);
    return;
  }
  if (r->easy == NULL && (r->easy = curl_easy_init()) == NULL) {
    rdzv__etcd_fail(r, RDZV_ENOMEM, "curl_easy_init failed");
    return;
  }
  CURL *c = r->easy;
  set_headers(r);
  if (r->hdrs == NULL) {
    rdzv__etcd_fail(r, RDZV_ENOMEM, "out of memory for headers");
    return;
  }
  snprintf(url, sizeof(url), "%s%s", e->ep[r->ep], paths[r->kind]);
  r->errbuf[0] = 0;
  r->resp.n = 0;
  r->token_gen = e->token_gen;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_PRIVATE, r);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->blen);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->hdrs);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
  if (r->is_watch) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
  }
  if (e->ca_file != NULL)
    curl_easy_setopt(c, CURLOPT_CAINFO, e->ca_file);
  if (e->cert_file != NULL)
    curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert_file);
  if (e->key_file != NULL)
    curl_easy_setopt(c, CURLOPT_SSLKEY, e->key_file);
  e->stats.requests++;
  e->stats.bytes_out += r->blen;
  CURLMcode mc = curl_multi_add_handle(e->multi, c);
  if (mc != CURLM_OK) {
    rdzv__etcd_fail(r, mc == CURLM_OUT_OF_MEMORY ? RDZV_ENOMEM : RDZV_EETCD,
                    curl_multi_strerror(mc));
    return;
  }
  r->in_multi = true;
  r->st = R_ACTIVE;
}

/* Tries r on the next endpoint after a connection failure; false when
 * each one was tried. */
static bool failover(req_t *r) {
  struct rdzv_etcd *e = r->e;
  if (++r->tries >= e->nep || e->closing)
    return false;
  rdzv__etcd_detach(r);
  r->ep = (r->ep + 1) % e->nep;
  e->stats.failovers++;
  rdzv__etcd_start_req(r);
  return true;
}

/* A transfer of r ended with res. */
static void transfer_done(req_t *r, CURLcode res) {
  struct rdzv_etcd *e = r->e;
  long http = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
  if (http <= 0 || (res != CURLE_OK && !(r->is_watch && http == 200))) {
    if (http <= 0 && failover_kind(res) && failover(r))
      return;
    int st = curl_status(r, res);
    const char *m = curl_message(r, res);
    if (r->internal) {
      struct rdzv_etcd_result fake;
      memset(&fake, 0, sizeof(fake));
      fake.status = st;
      fake.message = m;
      rdzv__etcd_detach(r);
      rdzv__etcd_auth_done(e, &fake);
      rdzv__etcd_req_free(r);
      return;
    }
    rdzv__etcd_fail(r, st, m);
    return;
  }
  e->cur = r->ep;
  if (r->is_watch && http == 200) {
    /* messages left are delivered, then how it ended */
    rdzv__etcd_detach(r);
    r->eof_status = res == CURLE_OK ? RDZV_EETCD : curl_status(r, res);
    free(r->eof_message);
    r->eof_message = strdup(res == CURLE_OK ? "watch stream ended by etcd"
                                            : curl_message(r, res));
    r->st = R_EOF;
    rdzv__etcd_queue_push(r);
    return;
  }
  rdzv_etcd_answer_free(&r->ans);
  rdzv_etcd_json_parse(r->kind, (int)http, r->resp.p, r->resp.n, &r->ans);
  if (http == 401 && rdzv__etcd_reauth_retry(r))
    return;
  if (r->internal) {
    rdzv__etcd_detach(r);
    rdzv__etcd_auth_done(e, &r->ans.r);
    rdzv__etcd_req_free(r);
    return;
  }
  if (r->kind == RDZV_ETCD_K_AUTH && r->ans.r.status == 0 &&
      r->ans.r.token != NULL) {
    char *t = strdup(r->ans.r.token);
    if (t != NULL) {
      free(e->token);
      e->token = t;
      e->token_gen++;
    }
  }
  rdzv__etcd_finish(r);
}

const uint64_t rdzv_etcd_latency_bounds_us[RDZV_ETCD_LAT_BUCKETS] = {
    1000, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, UINT64_MAX};

/* A request that ended: its time, from libcurl, in the histogram. */
static void count_latency(struct rdzv_etcd *e, CURL *c) {
  curl_off_t us = 0;
  if (curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &us) != CURLE_OK || us < 0)
    return;
  e->stats.latency_us_sum += (uint64_t)us;
  e->stats.latency_count++;
  for (int i = 0; i < RDZV_ETCD_LAT_BUCKETS; i++)
    if ((uint64_t)us <= rdzv_etcd_latency_bounds_us[i]) {
      e->stats.latency_hist[i]++;
      break;
    }
}

static void check_info(struct rdzv_etcd *e) {
  CURLMsg *m;
  int left;
  while (e->multi != NULL && (m = curl_multi_info_read(e->multi, &left))) {
    if (m->msg != CURLMSG_DONE)
      continue;
    CURL *c = m->easy_handle;
    CURLcode res = m->data.result;
    req_t *r = NULL;
    curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&r);
    if (r != NULL && !r->is_watch)
      count_latency(e, c);
    if (r != NULL && r->st == R_ACTIVE)
      transfer_done(r, res);
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  struct poll_ctx *pc = h->data;
  struct rdzv_etcd *e = pc->e;
  curl_socket_t fd = pc->fd;
  int flags = 0, running;
  if (status < 0)
    flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE)
    flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE)
    flags |= CURL_CSELECT_OUT;
  if (e->multi == NULL)
    return;
  curl_multi_socket_action(e->multi, fd, flags, &running);
  check_info(e);
}

/* One of e's uv handles is closed; the last one ends the close. */
static void handle_gone(struct rdzv_etcd *e) {
  if (--e->open_handles == 0 && e->close_started) {
    if (e->done != NULL)
      e->done(e->done_arg); /* e is freed after done returns */
    rdzv__etcd_free(e);
  }
}

static void on_handle_closed(uv_handle_t *h) { handle_gone(h->data); }

static void on_poll_closed(uv_handle_t *h) {
  struct poll_ctx *pc = h->data;
  struct rdzv_etcd *e = pc->e;
  free(pc);
  handle_gone(e);
}

static void poll_close(struct poll_ctx *pc) {
  struct rdzv_etcd *e = pc->e;
  uv_poll_stop(&pc->h);
  if (pc->prev != NULL)
    pc->prev->next = pc->next;
  else
    e->polls = pc->next;
  if (pc->next != NULL)
    pc->next->prev = pc->prev;
  uv_close((uv_handle_t *)&pc->h, on_poll_closed);
}

int rdzv__etcd_on_socket(CURL *easy, curl_socket_t s, int what, void *userp,
                         void *socketp) {
  struct rdzv_etcd *e = userp;
  struct poll_ctx *pc = socketp;
  (void)easy;
  if (what == CURL_POLL_REMOVE) {
    if (pc != NULL) {
      if (!e->close_started)
        curl_multi_assign(e->multi, s, NULL);
      poll_close(pc);
    }
    return 0;
  }
  if (pc == NULL) {
    pc = calloc(1, sizeof(*pc));
    if (pc == NULL)
      return -1;
    if (uv_poll_init_socket(e->loop, &pc->h, s) != 0) {
      free(pc);
      return -1;
    }
    pc->fd = s;
    pc->e = e;
    pc->h.data = pc;
    pc->next = e->polls;
    if (e->polls != NULL)
      e->polls->prev = pc;
    e->polls = pc;
    e->open_handles++;
    curl_multi_assign(e->multi, s, pc);
  }
  int ev = 0;
  if (what & CURL_POLL_IN)
    ev |= UV_READABLE;
  if (what & CURL_POLL_OUT)
    ev |= UV_WRITABLE;
  uv_poll_start(&pc->h, ev, on_poll);
  return 0;
}

static void on_timer(uv_timer_t *t) {
  struct rdzv_etcd *e = t->data;
  int running;
  if (e->multi == NULL)
    return;
  curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_info(e);
}

int rdzv__etcd_on_timer_set(CURLM *m, long timeout_ms, void *userp) {
  struct rdzv_etcd *e = userp;
  (void)m;
  if (e->close_started)
    return 0;
  if (timeout_ms < 0)
    uv_timer_stop(&e->timer);
  else
    uv_timer_start(&e->timer, on_timer, (uint64_t)timeout_ms, 0);
  return 0;
}

void rdzv__etcd_maybe_finish_close(struct rdzv_etcd *e) {
  if (!e->closing || e->close_started || e->nreqs != 0 || e->q_head != NULL)
    return;
  e->close_started = true;
  uv_idle_stop(&e->idle);
  uv_timer_stop(&e->timer);
  CURLM *m = e->multi;
  e->multi = NULL;
  curl_multi_cleanup(m); /* removes its sockets: poll_close for each */
  while (e->polls != NULL)
    poll_close(e->polls);
  uv_close((uv_handle_t *)&e->timer, on_handle_closed);
  uv_close((uv_handle_t *)&e->idle, on_handle_closed);
}
