/* rdzv-bench --etcd-drive: simulated ranks that run PyTorch's init
 * pattern against etcd's v3 JSON gateway, each with its own HTTP/1.1
 * keep-alive connection (a libcurl easy handle), all driven by one epoll
 * loop through libcurl's multi socket interface; bodies and answers from
 * the etcd client's codec (store/etcd/etcd_json.h). etcd has no atomic
 * add through the gateway (short of a compare-and-swap loop), so its
 * barrier is the count-poll of anchors.md §8:
 *   connect; put init/<rank>          (the worker's registration)
 *   rank 0: put uid (128 bytes); others: range uid until it is there
 *   put topo/<rank> (64 bytes)
 *   put barrier/<rank>; range barrier/ (count only) until it counts N
 * A rank polls every ETCD_POLL_S, one request in flight at a time.
 * Lines with the orchestrator as in ts_drive.c; "done OK FAIL UID_OK
 * SAW_ALL 0 0" (SAW_ALL: ranks whose last count was N). The client URL is
 * in <dir>/etcd.url. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "store/etcd/etcd_json.h"
#include "store/wire/wire.h"
#include "tools/bench/bench.h"
#include "tools/bench/incumbents.h"
#include "tools/bench/rank.h"

#define ETCD_POLL_S 0.01 /* between a rank's polls */

enum et_step { E_INIT, E_UID, E_TOPO, E_BPUT, E_BPOLL, E_DONE, E_FAILED };

struct et_rank {
  CURL *h;
  int64_t rank;
  enum et_step step;
  enum rdzv_etcd_kind kind; /* of the request in flight */
  char *body;
  struct rdzv_buf resp;
  bool uid_ok, saw_all;
  int retries; /* of requests etcd failed with a 5xx */
  double t_done;
};

struct et_driver {
  const struct bench_opts *o;
  CURLM *m;
  struct et_rank *rs;
  int64_t n, ndone, nfail;
  int ep;
  double timer_at; /* libcurl's timeout; < 0: none */
  char url[128];
  struct curl_slist *headers;
  /* Ranks waiting for their next poll, in time order (one delay). */
  int64_t *q;
  double *q_at;
  int64_t q_head, q_len;
  double t_go;
};

static void fail(struct et_driver *dv, struct et_rank *r, const char *why) {
  if (r->step == E_DONE || r->step == E_FAILED)
    return;
  r->step = E_FAILED;
  r->t_done = bench_now();
  dv->ndone++;
  if (dv->nfail++ < 3)
    fprintf(stderr, "rdzv-bench: etcd rank %" PRId64 ": %s\n", r->rank, why);
}

static size_t on_data(char *p, size_t size, size_t n, void *arg) {
  struct et_rank *r = arg;
  return rdzv_buf_append(&r->resp, p, size * n) == 0 ? size * n : 0;
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *arg,
                     void *sockp) {
  struct et_driver *dv = arg;
  (void)e;
  (void)sockp;
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(dv->ep, EPOLL_CTL_DEL, s, NULL);
    return 0;
  }
  struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0) |
                                     (what & CURL_POLL_OUT ? EPOLLOUT : 0),
                           .data.fd = s};
  if (epoll_ctl(dv->ep, EPOLL_CTL_MOD, s, &ev) < 0 && errno == ENOENT)
    epoll_ctl(dv->ep, EPOLL_CTL_ADD, s, &ev);
  return 0;
}

static int on_timer(CURLM *m, long ms, void *arg) {
  struct et_driver *dv = arg;
  (void)m;
  dv->timer_at = ms < 0 ? -1 : bench_now() + (double)ms / 1000.0;
  return 0;
}

/* Sends body (taken: freed when answered) to the gateway's path. */
static void issue(struct et_driver *dv, struct et_rank *r, const char *path,
                  char *body, size_t len, enum rdzv_etcd_kind kind) {
  char url[200];
  if (body == NULL) {
    fail(dv, r, "out of memory");
    return;
  }
  snprintf(url, sizeof(url), "%s%s", dv->url, path);
  free(r->body);
  r->body = body;
  r->kind = kind;
  r->resp.len = 0;
  curl_easy_setopt(r->h, CURLOPT_URL, url);
  curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(r->h, CURLOPT_POSTFIELDSIZE, (long)len);
  if (curl_multi_add_handle(dv->m, r->h) != CURLM_OK)
    fail(dv, r, "curl_multi_add_handle failed");
}

static void put(struct et_driver *dv, struct et_rank *r, const char *key,
                const void *v, size_t vlen) {
  size_t len = 0;
  char *b = rdzv_etcd_json_put(key, strlen(key), v, vlen, 0, &len);
  issue(dv, r, "/v3/kv/put", b, len, RDZV_ETCD_K_PUT);
}

static void range(struct et_driver *dv, struct et_rank *r, const char *key,
                  bool prefix) {
  struct rdzv_etcd_range_opts ro = {.prefix = prefix, .count_only = prefix};
  size_t len = 0;
  char *b = rdzv_etcd_json_range(key, strlen(key), &ro, &len);
  issue(dv, r, "/v3/kv/range", b, len, RDZV_ETCD_K_RANGE);
}

static void uid_bytes(uint8_t *p) {
  for (int i = 0; i < BENCH_INC_UID_BYTES; i++)
    p[i] = (uint8_t)(i * 7 + 13);
}

static void poll_later(struct et_driver *dv, struct et_rank *r) {
  int64_t at = (dv->q_head + dv->q_len) % dv->n;
  dv->q[at] = r - dv->rs;
  dv->q_at[at] = bench_now() + ETCD_POLL_S;
  dv->q_len++;
}

static void poll_again(struct et_driver *dv, struct et_rank *r) {
  if (r->step == E_UID)
    range(dv, r, "uid", false);
  else
    range(dv, r, "barrier/", true);
}

/* The next request of r after the answer a. */
static void advance(struct et_driver *dv, struct et_rank *r,
                    const struct rdzv_etcd_answer *a) {
  char key[64], rec[BENCH_INC_TOPO_BYTES];
  uint8_t uid[BENCH_INC_UID_BYTES];
  uid_bytes(uid);
  switch (r->step) {
  case E_INIT:
    r->step = E_UID;
    if (r->rank == 0)
      put(dv, r, "uid", uid, sizeof(uid));
    else
      range(dv, r, "uid", false);
    return;
  case E_UID:
    if (r->rank != 0 && a->r.nkvs == 0) {
      poll_later(dv, r);
      return;
    }
    r->uid_ok =
        r->rank == 0 || (a->r.nkvs == 1 && a->r.kvs[0].vlen == sizeof(uid) &&
                         memcmp(a->r.kvs[0].value, uid, sizeof(uid)) == 0);
    if (!r->uid_ok) {
      fail(dv, r, "a wrong uid");
      return;
    }
    r->step = E_TOPO;
    snprintf(key, sizeof(key), "topo/%" PRId64, r->rank);
    memset(rec, ' ', sizeof(rec));
    snprintf(rec, sizeof(rec), "rank=%" PRId64 " gpu_pci=simulated", r->rank);
    put(dv, r, key, rec, sizeof(rec));
    return;
  case E_TOPO:
    r->step = E_BPUT;
    snprintf(key, sizeof(key), "barrier/%" PRId64, r->rank);
    put(dv, r, key, "1", 1);
    return;
  case E_BPUT:
    r->step = E_BPOLL;
    range(dv, r, "barrier/", true);
    return;
  case E_BPOLL:
    if (a->r.count < dv->o->ranks) {
      poll_later(dv, r);
      return;
    }
    r->saw_all = a->r.count == dv->o->ranks;
    r->step = E_DONE;
    r->t_done = bench_now();
    dv->ndone++;
    return;
  default:
    return;
  }
}

/* Answers of finished requests. */
static void finished(struct et_driver *dv) {
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(dv->m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    struct et_rank *r = NULL;
    long http = 0;
    CURLcode res = msg->data.result;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &http);
    curl_multi_remove_handle(dv->m, msg->easy_handle);
    if (res != CURLE_OK) {
      fail(dv, r, curl_easy_strerror(res));
      continue;
    }
    struct rdzv_etcd_answer a;
    memset(&a, 0, sizeof(a));
    int rc =
        rdzv_etcd_json_parse(r->kind, (int)http, r->resp.data, r->resp.len, &a);
    if (rc < 0 && http >= 500 && r->retries < 5) {
      /* etcd overloaded ("etcdserver: request timed out", seen once at
       * 9,000 ranks): the same request again, as a client would. */
      r->retries++;
      r->resp.len = 0;
      if (curl_multi_add_handle(dv->m, r->h) != CURLM_OK)
        fail(dv, r, "curl_multi_add_handle failed");
    } else if (rc < 0)
      fail(dv, r, a.r.message[0] ? a.r.message : rdzv_strerror(rc));
    else
      advance(dv, r, &a);
    rdzv_etcd_answer_free(&a);
  }
}

static void loop(struct et_driver *dv) {
  struct epoll_event evs[1024];
  int running = 0;
  double deadline = dv->t_go + dv->o->timeout_s;
  while (dv->ndone < dv->n) {
    double now = bench_now(), next = now + 0.1;
    if (dv->timer_at >= 0 && dv->timer_at < next)
      next = dv->timer_at;
    if (dv->q_len > 0 && dv->q_at[dv->q_head] < next)
      next = dv->q_at[dv->q_head];
    int ms = next > now ? (int)((next - now) * 1000) + 1 : 0;
    int got = epoll_wait(dv->ep, evs, 1024, ms);
    for (int k = 0; k < got; k++) {
      int f = (evs[k].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
              (evs[k].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
              (evs[k].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(dv->m, evs[k].data.fd, f, &running);
    }
    now = bench_now();
    if (dv->timer_at >= 0 && dv->timer_at <= now) {
      dv->timer_at = -1;
      curl_multi_socket_action(dv->m, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    finished(dv);
    while (dv->q_len > 0 && dv->q_at[dv->q_head] <= now) {
      struct et_rank *r = &dv->rs[dv->q[dv->q_head]];
      dv->q_head = (dv->q_head + 1) % dv->n;
      dv->q_len--;
      poll_again(dv, r);
    }
    if (now > deadline)
      for (int64_t i = 0; i < dv->n; i++)
        fail(dv, &dv->rs[i], "timed out (--timeout)");
  }
}

static int setup(struct et_driver *dv) {
  char path[200];
  snprintf(path, sizeof(path), "%s/etcd.url", dv->o->dir);
  FILE *f = fopen(path, "r");
  if (f == NULL || fgets(dv->url, sizeof(dv->url), f) == NULL) {
    fprintf(stderr, "rdzv-bench: no etcd URL in %s\n", path);
    if (f != NULL)
      fclose(f);
    return -1;
  }
  fclose(f);
  dv->url[strcspn(dv->url, "\r\n")] = '\0';
  curl_global_init(CURL_GLOBAL_DEFAULT);
  dv->m = curl_multi_init();
  dv->ep = epoll_create1(EPOLL_CLOEXEC);
  dv->timer_at = -1;
  dv->headers = curl_slist_append(NULL, "Content-Type: application/json");
  dv->headers = curl_slist_append(dv->headers, "Expect:");
  dv->rs = calloc((size_t)dv->n, sizeof(*dv->rs));
  dv->q = calloc((size_t)dv->n, sizeof(*dv->q));
  dv->q_at = calloc((size_t)dv->n, sizeof(*dv->q_at));
  if (dv->m == NULL || dv->ep < 0 || dv->rs == NULL || dv->q == NULL ||
      dv->q_at == NULL)
    return -1;
  curl_multi_setopt(dv->m, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(dv->m, CURLMOPT_SOCKETDATA, dv);
  curl_multi_setopt(dv->m, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(dv->m, CURLMOPT_TIMERDATA, dv);
  /* A connection per rank, kept alive between its requests. */
  curl_multi_setopt(dv->m, CURLMOPT_MAXCONNECTS, (long)dv->n + 16);
  int64_t k = 0;
  for (int64_t h = dv->o->first; h < dv->o->first + dv->o->count; h++)
    for (int64_t l = 0; l < bench_host_ranks(dv->o, h); l++, k++) {
      struct et_rank *r = &dv->rs[k];
      r->rank = h * dv->o->ranks_per_host + l;
      r->h = curl_easy_init();
      if (r->h == NULL)
        return -1;
      curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
      curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
      curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
      curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, dv->headers);
      curl_easy_setopt(r->h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
      curl_easy_setopt(r->h, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS,
                       (long)(dv->o->timeout_s * 1000));
    }
  return 0;
}

int bench_etcd_drive_main(struct bench_opts *o) {
  struct et_driver dv = {.o = o};
  for (int64_t h = o->first; h < o->first + o->count; h++)
    dv.n += bench_host_ranks(o, h);
  if (dv.n < 1 || setup(&dv) < 0)
    return 1;
  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof(line), stdin) == NULL)
    return 1;
  dv.t_go = bench_now();
  for (int64_t k = 0; k < dv.n; k++) {
    char key[64];
    snprintf(key, sizeof(key), "init/%" PRId64, dv.rs[k].rank);
    put(&dv, &dv.rs[k], key, NULL, 0);
  }
  loop(&dv);
  int64_t uid_ok = 0, saw_all = 0;
  double *d = malloc((size_t)dv.n * sizeof(*d));
  for (int64_t k = 0; k < dv.n; k++) {
    uid_ok += dv.rs[k].uid_ok && dv.rs[k].step == E_DONE;
    saw_all += dv.rs[k].saw_all;
    if (d != NULL)
      d[k] = dv.rs[k].step == E_DONE ? dv.rs[k].t_done - dv.t_go : -1;
  }
  if (d != NULL)
    bench_inc_write_durations(o, d, dv.n);
  free(d);
  printf("done %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " 0 0\n",
         dv.n - dv.nfail, dv.nfail, uid_ok, saw_all);
  fflush(stdout);
  if (fgets(line, sizeof(line), stdin) == NULL)
    line[0] = '\0';
  for (int64_t k = 0; k < dv.n; k++) {
    curl_multi_remove_handle(dv.m, dv.rs[k].h);
    curl_easy_cleanup(dv.rs[k].h);
    free(dv.rs[k].body);
    rdzv_buf_free(&dv.rs[k].resp);
  }
  curl_multi_cleanup(dv.m);
  curl_slist_free_all(dv.headers);
  free(dv.rs);
  free(dv.q);
  free(dv.q_at);
  close(dv.ep);
  return dv.nfail == 0 ? 0 : 1;
}
