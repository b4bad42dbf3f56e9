/* The etcd client's requests (a watch is one too), apart from their
 * transfer: the delivery queue and the queue of those waiting for a
 * token, a request's end and its freeing, the client's own authenticate
 * and the one re-authentication of a request etcd refused for its token,
 * and the delivery of answers and watch messages to the user.
 *
 * Every callback to the user runs from the client's uv_idle_t (the
 * delivery queue), never from inside a libcurl callback nor inside the
 * call that started the request, so that a callback may start, cancel or
 * close anything. It may call etcd_curl.c (a request's start, the close's
 * end) and etcd.c (a new request) through etcd_int.h, and etcd_json.h. */
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/etcd/etcd.h"
#include "store/etcd/etcd_int.h"
#include "store/etcd/etcd_json.h"

/* ---- small helpers ------------------------------------------------------ */

void rdzv__etcd_queue_push(req_t *r) {
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
    uv_idle_start(&e->idle, rdzv__etcd_on_idle);
}

void rdzv__etcd_detach(req_t *r) {
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
void rdzv__etcd_set_final(req_t *r, int status, const char *message, int http,
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
void rdzv__etcd_finish(req_t *r) {
  rdzv__etcd_detach(r);
  if (r->st == R_WAIT_AUTH)
    wait_remove(r);
  r->st = R_DONE;
  rdzv__etcd_queue_push(r);
}

void rdzv__etcd_fail(req_t *r, int status, const char *message) {
  rdzv__etcd_set_final(r, status, message, 0, 0);
  rdzv__etcd_finish(r);
}

void rdzv__etcd_req_free(req_t *r) {
  struct rdzv_etcd *e = r->e;
  rdzv__etcd_detach(r);
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

/* ---- auth ---------------------------------------------------------------- */

void rdzv__etcd_wait_push(req_t *r) {
  struct rdzv_etcd *e = r->e;
  r->st = R_WAIT_AUTH;
  r->wnext = NULL;
  if (e->wait_tail != NULL)
    e->wait_tail->wnext = r;
  else
    e->wait_head = r;
  e->wait_tail = r;
}

/* Starts the client's own authenticate, unless one is on its way. */
void rdzv__etcd_ensure_auth(struct rdzv_etcd *e) {
  if (e->auth_inflight || e->closing)
    return;
  char *body = rdzv_etcd_json_auth(e->user, e->password, NULL);
  req_t *a = body != NULL
                 ? rdzv__etcd_req_new(e, RDZV_ETCD_K_AUTH, body, strlen(body))
                 : NULL;
  if (a == NULL) {
    /* fail whoever waits */
    while (e->wait_head != NULL)
      rdzv__etcd_fail(e->wait_head, RDZV_ENOMEM,
                      "out of memory authenticating");
    return;
  }
  a->no_token = true;
  a->internal = true;
  e->auth_inflight = true;
  rdzv__etcd_start_req(a);
}

/* The client's authenticate ended with answer ans. */
void rdzv__etcd_auth_done(struct rdzv_etcd *e,
                          const struct rdzv_etcd_result *res) {
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
        rdzv__etcd_start_req(w);
        w = nx;
      }
      return;
    }
  }
  while (e->wait_head != NULL) {
    req_t *w = e->wait_head;
    rdzv__etcd_set_final(w, res->status != 0 ? res->status : RDZV_ENOMEM,
                         res->message[0] != 0 ? res->message
                                              : "authentication failed",
                         res->http, res->grpc_code);
    rdzv__etcd_finish(w);
  }
}

/* r got "invalid auth token": re-authenticate once and retry it. */
bool rdzv__etcd_reauth_retry(req_t *r) {
  struct rdzv_etcd *e = r->e;
  if (e->user == NULL || r->reauthed || r->no_token || e->closing)
    return false;
  r->reauthed = true;
  rdzv__etcd_detach(r);
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
    rdzv__etcd_start_req(r); /* another request already got a fresh token */
  } else {
    rdzv__etcd_wait_push(r);
    rdzv__etcd_ensure_auth(e);
  }
  return true;
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
      if (rdzv__etcd_reauth_retry(w))
        return;
      st = RDZV_EETCD;
      rdzv_etcd_json_parse_watch(msg, n, &a);
    }
    if (st != 0) {
      rdzv__etcd_detach(w);
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
    rdzv__etcd_set_final(w, w->eof_status, w->eof_message, 200, 0);
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

void rdzv__etcd_on_idle(uv_idle_t *h) {
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
      rdzv__etcd_req_free(r);
    } else {
      r->queued = false;
    }
  }
  uv_idle_stop(&e->idle);
  rdzv__etcd_maybe_finish_close(e);
}
