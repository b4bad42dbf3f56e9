/* The etcd v3 client (etcd.h): libcurl's multi interface driven from a
 * libuv loop. Sockets: CURLMOPT_SOCKETFUNCTION with one uv_poll_t per
 * socket; timeouts: CURLMOPT_TIMERFUNCTION with one uv_timer_t; then
 * curl_multi_socket_action. One easy handle per request (the multi's
 * connection cache reuses connections).
 *
 * Every callback to the user runs from a uv_idle_t (the delivery queue),
 * never from inside a libcurl callback nor inside the call that started
 * the request, so that a callback may start, cancel or close anything. */
#include "store/etcd/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/etcd/etcd_json.h"

/* Most bytes one stream message, or one unary answer, may take. */
#define MAX_MESSAGE_BYTES ((size_t)64 << 20)
#define MAX_ANSWER_BYTES ((size_t)256 << 20)

enum rstate {
  R_NEW = 0,
  R_WAIT_AUTH, /* waiting for a token */
  R_ACTIVE,    /* its easy handle is in the multi */
  R_EOF,       /* watch: transfer over, messages left to deliver */
  R_DONE,      /* final answer set, queued for delivery */
};

struct poll_ctx {
  uv_poll_t h;
  curl_socket_t fd;
  struct rdzv_etcd *e;
  struct poll_ctx *prev, *next;
};

struct buf {
  char *p;
  size_t n;
};

/* A request; a watch is one too. */
struct rdzv_etcd_watch {
  struct rdzv_etcd *e;
  enum rdzv_etcd_kind kind;
  bool is_watch;
  bool no_token; /* authenticate: sent without a token */
  bool internal; /* the client's own authenticate: no user callback */
  char *body;
  size_t blen;
  rdzv_etcd_cb cb;
  rdzv_etcd_watch_cb wcb;
  void *arg;

  CURL *easy;
  struct curl_slist *hdrs;
  char errbuf[CURL_ERROR_SIZE];
  bool in_multi;
  int ep, tries;
  bool reauthed;
  uint64_t token_gen;
  size_t delivered; /* watch messages delivered */
  struct buf resp;
  struct rdzv_etcd_lines lines;
  int eof_status; /* watch: how the transfer ended */
  char *eof_message;

  enum rstate st;
  struct rdzv_etcd_answer ans; /* the final answer */
  char *errmsg;                /* owned text for a synthetic answer */

  bool queued;
  struct rdzv_etcd_watch *qnext;      /* delivery queue */
  struct rdzv_etcd_watch *wnext;      /* waiting for auth */
  struct rdzv_etcd_watch *prev, *next; /* every request */
};
typedef struct rdzv_etcd_watch req_t;

struct rdzv_etcd {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  uv_idle_t idle;
  int open_handles;

  char *ep[RDZV_ETCD_MAX_ENDPOINTS];
  int nep, cur;
  uint32_t timeout_ms;
  char *user, *password, *ca_file, *cert_file, *key_file;

  char *token;
  uint64_t token_gen;
  bool auth_inflight;
  req_t *wait_head, *wait_tail;

  req_t *all;
  size_t nreqs;
  req_t *q_head, *q_tail;

  struct poll_ctx *polls;
  struct rdzv_etcd_stats stats;

  bool closing, close_started;
  void (*done)(void *);
  void *done_arg;
};

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

static void start_req(req_t *r);
static void on_idle(uv_idle_t *h);
static void maybe_finish_close(struct rdzv_etcd *e);

/* ---- small helpers ------------------------------------------------------ */

static char *dup_opt(const char *s, bool *bad) {
  if (s == NULL || s[0] == 0)
    return NULL;
  char *d = strdup(s);
  if (d == NULL)
    *bad = true;
  return d;
}

static void queue_push(req_t *r) {
  struct rdzv_etcd *e = r->e;
  if (r->queued)
    return;
  r->queued = true;
  r->qnext = NULL;
  if (e->q_tail != NULL)
    e->q_tail->qnext = r;
  else
    e->q_head = r;
  e->q_tail = r;
  if (!e->close_started)
    uv_idle_start(&e->idle, on_idle);
}

static void detach(req_t *r) {
  if (r->in_multi) {
    curl_multi_remove_handle(r->e->multi, r->easy);
    r->in_multi = false;
  }
}

static void wait_remove(req_t *r) {
  struct rdzv_etcd *e = r->e;
  req_t **pp = &e->wait_head, *prev = NULL;
  while (*pp != NULL && *pp != r) {
    prev = *pp;
    pp = &(*pp)->wnext;
  }
  if (*pp == r) {
    *pp = r->wnext;
    if (e->wait_tail == r)
      e->wait_tail = prev;
    r->wnext = NULL;
  }
}

/* Sets r's final answer to a status with a copy of message. */
static void set_final(req_t *r, int status, const char *message, int http,
                      int grpc) {
  rdzv_etcd_answer_free(&r->ans);
  free(r->errmsg);
  r->errmsg = strdup(message != NULL ? message : "");
  r->ans.r.status = status;
  r->ans.r.message = r->errmsg != NULL ? r->errmsg : "";
  r->ans.r.http = http;
  r->ans.r.grpc_code = grpc;
}

/* Ends r with its final answer already set: queued for delivery. */
static void finish(req_t *r) {
  detach(r);
  if (r->st == R_WAIT_AUTH)
    wait_remove(r);
  r->st = R_DONE;
  queue_push(r);
}

static void fail(req_t *r, int status, const char *message) {
  set_final(r, status, message, 0, 0);
  finish(r);
}

static void req_free(req_t *r) {
  struct rdzv_etcd *e = r->e;
  detach(r);
  if (r->easy != NULL)
    curl_easy_cleanup(r->easy);
  curl_slist_free_all(r->hdrs);
  free(r->body);
  free(r->resp.p);
  rdzv_etcd_lines_free(&r->lines);
  rdzv_etcd_answer_free(&r->ans);
  free(r->errmsg);
  free(r->eof_message);
  if (r->prev != NULL)
    r->prev->next = r->next;
  else
    e->all = r->next;
  if (r->next != NULL)
    r->next->prev = r->prev;
  e->nreqs--;
  free(r);
}

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

/* ---- auth ---------------------------------------------------------------- */

static void wait_push(req_t *r) {
  struct rdzv_etcd *e = r->e;
  r->st = R_WAIT_AUTH;
  r->wnext = NULL;
  if (e->wait_tail != NULL)
    e->wait_tail->wnext = r;
  else
    e->wait_head = r;
  e->wait_tail = r;
}

static req_t *req_new(struct rdzv_etcd *e, enum rdzv_etcd_kind kind,
                      char *body, size_t blen);

/* Starts the client's own authenticate, unless one is on its way. */
static void ensure_auth(struct rdzv_etcd *e) {
  if (e->auth_inflight || e->closing)
    return;
  char *body = rdzv_etcd_json_auth(e->user, e->password, NULL);
  req_t *a = body != NULL ? req_new(e, RDZV_ETCD_K_AUTH, body, strlen(body))
                          : NULL;
  if (a == NULL) {
    /* fail whoever waits */
    while (e->wait_head != NULL)
      fail(e->wait_head, RDZV_ENOMEM, "out of memory authenticating");
    return;
  }
  a->no_token = true;
  a->internal = true;
  e->auth_inflight = true;
  start_req(a);
}

/* The client's authenticate ended with answer ans. */
static void auth_done(struct rdzv_etcd *e, const struct rdzv_etcd_result *res) {
  e->auth_inflight = false;
  if (res->status == 0 && res->token != NULL) {
    char *t = strdup(res->token);
    if (t != NULL) {
      free(e->token);
      e->token = t;
      e->token_gen++;
      req_t *w = e->wait_head;
      e->wait_head = e->wait_tail = NULL;
      while (w != NULL) {
        req_t *nx = w->wnext;
        w->wnext = NULL;
        w->st = R_NEW;
        start_req(w);
        w = nx;
      }
      return;
    }
  }
  while (e->wait_head != NULL) {
    req_t *w = e->wait_head;
    set_final(w, res->status != 0 ? res->status : RDZV_ENOMEM,
              res->message[0] != 0 ? res->message : "authentication failed",
              res->http, res->grpc_code);
    finish(w);
  }
}

/* r got "invalid auth token": re-authenticate once and retry it. */
static bool reauth_retry(req_t *r) {
  struct rdzv_etcd *e = r->e;
  if (e->user == NULL || r->reauthed || r->no_token || e->closing)
    return false;
  r->reauthed = true;
  detach(r);
  if (r->token_gen == e->token_gen && e->token != NULL) {
    free(e->token);
    e->token = NULL;
    e->stats.reauths++;
  }
  r->resp.n = 0;
  rdzv_etcd_lines_free(&r->lines);
  r->tries = 0;
  if (e->token != NULL) {
    r->st = R_NEW;
    start_req(r); /* another request already got a fresh token */
  } else {
    wait_push(r);
    ensure_auth(e);
  }
  return true;
}

/* ---- libcurl callbacks --------------------------------------------------- */

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
      queue_push(r);
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
static void start_req(req_t *r) {
  struct rdzv_etcd *e = r->e;
  char url[320];

  if (e->closing) {
    fail(r, RDZV_ECANCELED, "client closed");
    return;
  }
  if (e->user != NULL && e->token == NULL && !r->no_token) {
    wait_push(r);
    ensure_auth(e);
    return;
  }
  if (r->easy == NULL && (r->easy = curl_easy_init()) == NULL) {
    fail(r, RDZV_ENOMEM, "curl_easy_init failed");
    return;
  }
  CURL *c = r->easy;
  set_headers(r);
  if (r->hdrs == NULL) {
    fail(r, RDZV_ENOMEM, "out of memory for headers");
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
    fail(r, mc == CURLM_OUT_OF_MEMORY ? RDZV_ENOMEM : RDZV_EETCD,
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
  detach(r);
  r->ep = (r->ep + 1) % e->nep;
  e->stats.failovers++;
  start_req(r);
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
      detach(r);
      auth_done(e, &fake);
      req_free(r);
      return;
    }
    fail(r, st, m);
    return;
  }
  e->cur = r->ep;
  if (r->is_watch && http == 200) {
    /* messages left are delivered, then how it ended */
    detach(r);
    r->eof_status = res == CURLE_OK ? RDZV_EETCD : curl_status(r, res);
    free(r->eof_message);
    r->eof_message = strdup(res == CURLE_OK ? "watch stream ended by etcd"
                                            : curl_message(r, res));
    r->st = R_EOF;
    queue_push(r);
    return;
  }
  rdzv_etcd_answer_free(&r->ans);
  rdzv_etcd_json_parse(r->kind, (int)http, r->resp.p, r->resp.n, &r->ans);
  if (http == 401 && reauth_retry(r))
    return;
  if (r->internal) {
    detach(r);
    auth_done(e, &r->ans.r);
    req_free(r);
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
  finish(r);
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

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp,
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

static int on_timer_set(CURLM *m, long timeout_ms, void *userp) {
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

/* ---- delivery ----------------------------------------------------------- */

/* Delivers the whole messages of watch w (all of them with eof). Ends w
 * (R_DONE, final set) on a message with status < 0. */
static void deliver_lines(req_t *w, bool eof) {
  const char *msg;
  size_t n;
  while ((w->st == R_ACTIVE || w->st == R_EOF) &&
         rdzv_etcd_lines_next(&w->lines, eof, &msg, &n)) {
    struct rdzv_etcd_answer a;
    int st = rdzv_etcd_json_parse_watch(msg, n, &a);
    if (st == RDZV_EETCD && w->delivered == 0 && a.canceled &&
        strstr(a.r.message, "invalid auth token") != NULL) {
      rdzv_etcd_answer_free(&a);
      if (reauth_retry(w))
        return;
      st = RDZV_EETCD;
      rdzv_etcd_json_parse_watch(msg, n, &a);
    }
    if (st != 0) {
      detach(w);
      rdzv_etcd_answer_free(&w->ans);
      w->ans = a;
      w->st = R_DONE;
      return;
    }
    w->delivered++;
    w->wcb(w->arg, 0, "", a.r.revision, 0, a.ev, a.nev);
    rdzv_etcd_answer_free(&a);
  }
  if (eof && w->st == R_EOF) {
    set_final(w, w->eof_status, w->eof_message, 200, 0);
    w->st = R_DONE;
  }
}

static void deliver_final(req_t *r) {
  const struct rdzv_etcd_result *res = &r->ans.r;
  if (r->internal)
    return;
  if (r->is_watch)
    r->wcb(r->arg, res->status, res->message != NULL ? res->message : "",
           res->revision, res->compact_revision, NULL, 0);
  else if (r->cb != NULL)
    r->cb(r->arg, res);
}

static void on_idle(uv_idle_t *h) {
  struct rdzv_etcd *e = h->data;
  req_t *r;
  while ((r = e->q_head) != NULL) {
    e->q_head = r->qnext;
    if (e->q_head == NULL)
      e->q_tail = NULL;
    r->qnext = NULL;
    /* r->queued stays true while r is handled: nothing re-queues it */
    if (r->is_watch && (r->st == R_ACTIVE || r->st == R_EOF))
      deliver_lines(r, r->st == R_EOF);
    if (r->st == R_DONE) {
      deliver_final(r);
      if (r->internal && e->auth_inflight && e->closing)
        e->auth_inflight = false;
      req_free(r);
    } else {
      r->queued = false;
    }
  }
  uv_idle_stop(&e->idle);
  maybe_finish_close(e);
}

/* ---- client ------------------------------------------------------------- */

static req_t *req_new(struct rdzv_etcd *e, enum rdzv_etcd_kind kind,
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
  req_t *r = req_new(e, kind, body, blen);
  if (r == NULL)
    return RDZV_ENOMEM;
  r->cb = cb;
  r->arg = arg;
  if (kind == RDZV_ETCD_K_AUTH)
    r->no_token = true;
  start_req(r);
  return 0;
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
    for (int i = 0; i < e->nep; i++)
      free(e->ep[i]);
    free(e->user);
    free(e->password);
    free(e->ca_file);
    free(e->cert_file);
    free(e->key_file);
    free(e);
    return rc;
  }
  e->timer.data = e;
  e->idle.data = e;
  e->open_handles = 2;
  curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
  curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
  curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
  *out = e;
  return 0;
}

static void maybe_finish_close(struct rdzv_etcd *e) {
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

void rdzv_etcd_close(struct rdzv_etcd *e, void (*done)(void *arg), void *arg) {
  if (e->closing)
    return;
  e->closing = true;
  e->done = done;
  e->done_arg = arg;
  for (req_t *r = e->all; r != NULL; r = r->next) {
    if (r->st == R_DONE)
      continue;
    set_final(r, RDZV_ECANCELED, "client closed", 0, 0);
    finish(r);
  }
  e->wait_head = e->wait_tail = NULL;
  uv_idle_start(&e->idle, on_idle);
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

int rdzv_etcd_txn(struct rdzv_etcd *e, struct rdzv_etcd_txn *t,
                  rdzv_etcd_cb cb, void *arg) {
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

int rdzv_etcd_lease_keepalive(struct rdzv_etcd *e, int64_t id,
                              rdzv_etcd_cb cb, void *arg) {
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
                    const struct rdzv_etcd_watch_opts *o,
                    rdzv_etcd_watch_cb cb, void *arg,
                    struct rdzv_etcd_watch **out) {
  size_t n = 0;
  *out = NULL;
  char *b = rdzv_etcd_json_watch(key, klen, o, &n);
  if (b == NULL)
    return RDZV_ENOMEM;
  req_t *w = req_new(e, RDZV_ETCD_K_WATCH, b, n);
  if (w == NULL)
    return RDZV_ENOMEM;
  w->is_watch = true;
  w->wcb = cb;
  w->arg = arg;
  *out = w;
  start_req(w);
  return 0;
}

void rdzv_etcd_watch_cancel(struct rdzv_etcd_watch *w) {
  if (w == NULL || w->st == R_DONE)
    return;
  set_final(w, RDZV_ECANCELED, "watch canceled", 0, 0);
  finish(w);
}
