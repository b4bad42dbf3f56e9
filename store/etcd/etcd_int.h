/* What the three files of the etcd client share: etcd.c (the client's
 * life and the public calls), etcd_request.c (a request's queues, end,
 * auth and delivery) and etcd_curl.c (its transfer, and libcurl's multi
 * on the loop). The request and client structs, and the functions one
 * calls in another; everything else stays static in its file. Private. */
#ifndef RDZV_STORE_ETCD_INT_H
#define RDZV_STORE_ETCD_INT_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/etcd/etcd.h"
#include "store/etcd/etcd_json.h"

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
  struct rdzv_etcd_watch *qnext;       /* delivery queue */
  struct rdzv_etcd_watch *wnext;       /* waiting for auth */
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

/* ---- etcd.c ------------------------------------------------------------- */

/* A new request of e (takes body, freed on failure), in e's list of
 * every request, to be started. NULL: out of memory. */
req_t *rdzv__etcd_req_new(struct rdzv_etcd *e, enum rdzv_etcd_kind kind,
                          char *body, size_t blen);

/* ---- etcd_request.c ----------------------------------------------------- */

/* Queues r for delivery (once), and wakes the delivery queue unless the
 * close has begun. */
void rdzv__etcd_queue_push(req_t *r);
/* Takes r's easy handle out of the multi, if it is in. */
void rdzv__etcd_detach(req_t *r);
/* Sets r's final answer to a status with a copy of message. */
void rdzv__etcd_set_final(req_t *r, int status, const char *message, int http,
                          int grpc);
/* Ends r with its final answer already set: queued for delivery. */
void rdzv__etcd_finish(req_t *r);
/* Ends r with status and message. */
void rdzv__etcd_fail(req_t *r, int status, const char *message);
/* Frees r, taking it out of e's list. */
void rdzv__etcd_req_free(req_t *r);
/* Puts r in the queue of requests that wait for a token. */
void rdzv__etcd_wait_push(req_t *r);
/* Starts the client's own authenticate, unless one is on its way. */
void rdzv__etcd_ensure_auth(struct rdzv_etcd *e);
/* The client's authenticate ended with answer ans. */
void rdzv__etcd_auth_done(struct rdzv_etcd *e,
                          const struct rdzv_etcd_result *res);
/* r got "invalid auth token": re-authenticate once and retry it. */
bool rdzv__etcd_reauth_retry(req_t *r);
/* The delivery queue's idle callback. */
void rdzv__etcd_on_idle(uv_idle_t *h);

/* ---- etcd_curl.c -------------------------------------------------------- */

/* Sends r (again) to endpoint r->ep; waits for a token first when auth is
 * on and there is none. Failures end r through the queue. */
void rdzv__etcd_start_req(req_t *r);
/* CURLMOPT_SOCKETFUNCTION and CURLMOPT_TIMERFUNCTION (userp: e). */
int rdzv__etcd_on_socket(CURL *easy, curl_socket_t s, int what, void *userp,
                         void *socketp);
int rdzv__etcd_on_timer_set(CURLM *m, long timeout_ms, void *userp);
/* Once e is closing with no request left: cleans up the multi and closes
 * every handle (the last one's close frees e). */
void rdzv__etcd_maybe_finish_close(struct rdzv_etcd *e);

/* etcd.c: frees e and the strings it owns (endpoints, credentials, TLS
 * files, the auth token); its handles and transfers must be gone. */
void rdzv__etcd_free(struct rdzv_etcd *e);

#endif /* RDZV_STORE_ETCD_INT_H */
