/* comm/comm_init.c: the init paths of a communicator handle (see
 * rdzv/comm.h): the id exchange through the rendezvous, NCCL's init by one
 * id ("config") or one id per block ("scalable"), ncclCommSplit of the
 * parent ("split"), and the polling of a non-blocking init. Every function
 * here runs with the handle's lock held (comm.c takes it). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "rdzv/store.h"

_Static_assert(RDZV_UNIQUE_ID_BYTES == RDZV_NCCL_UNIQUE_ID_BYTES,
               "the rendezvous' ids are NCCL unique ids");

/* Longest sleep between two polls of a non-blocking init. */
#define POLL_MAX_NS (5 * 1000 * 1000)

static int set_failed(rdzv_comm_t *c, int rc) {
  c->error = rc; /* before state: see rdzv_comm_poll */
  c->state = RDZV_COMM_FAILED;
  return rc;
}

/* The world's NCCL table, loaded by the first init of any of its handles
 * (creating handles must stay free, and a process that never initializes
 * a communicator never maps libnccl). */
int rdzv__comm_load_api(rdzv_comm_t *c, const struct rdzv_nccl_api **api) {
  struct rdzv__comm_ctx *x = c->ctx;
  char err[768];
  int rc = 0;

  pthread_mutex_lock(&x->api_lock);
  if (x->api == NULL) {
    rc = rdzv_nccl_load(x->nccl_path, &x->api, err, sizeof(err));
    if (rc < 0)
      rdzv__comm_fail(c, rc, "%s: loading NCCL: %s", c->name, err);
  }
  *api = x->api;
  pthread_mutex_unlock(&x->api_lock);
  return rc;
}

/* rdzv_make_id_fn over the loaded library's ncclGetUniqueId. */
static int nccl_make_id(void *arg, uint8_t *id) {
  const struct rdzv_nccl_api *api = arg;
  rdzv_nccl_unique_id u;

  if (api->get_unique_id(&u) != RDZV_NCCL_SUCCESS)
    return RDZV_ENCCL;
  memcpy(id, u.internal, sizeof(u.internal));
  return 0;
}

/* Records that c's name starts its id exchange; refuses a name that
 * already did in this world (the same generation): its ids were made for
 * one init and would be handed out again (NCCL ids are single-use, NCCL
 * issue #1038). store_lock held. */
static int claim_name(rdzv_comm_t *c) {
  struct rdzv__comm_ctx *x = c->ctx;
  struct rdzv__used_name *u = NULL;

  HASH_FIND_STR(x->used, c->name, u);
  if (u != NULL)
    return rdzv__comm_fail(
        c, RDZV_ENAME_USED,
        "%s: this name was already initialized in generation %" PRId64
        " (a unique id serves one init): give the new communicator another "
        "name, or re-initialize in a new generation",
        c->name, c->gen);
  u = calloc(1, sizeof(*u));
  if (u == NULL)
    return rdzv__comm_fail(c, RDZV_ENOMEM, "%s: out of memory", c->name);
  snprintf(u->name, sizeof(u->name), "%s", c->name);
  HASH_ADD_STR(x->used, name, u);
  return 0;
}

/* The unique ids of c among its members, through the tree; only members
 * get here. Every member also checks in (rdzv_rendezvous_group_unique_ids):
 * a member that never comes is named at the deadline, publisher or not,
 * and NCCL's init, which would wait for it without saying who is missing,
 * is never started. Holds the world's store lock for the exchange. */
static int exchange_ids(rdzv_comm_t *c, const struct rdzv_nccl_api *api,
                        uint8_t **ids, int64_t *nids) {
  struct rdzv__comm_ctx *x = c->ctx;
  rdzv_make_id_fn make = x->make_id != NULL ? x->make_id : nccl_make_id;
  void *arg = x->make_id != NULL ? x->make_id_arg : (void *)api;
  double t0 = rdzv__comm_now();
  int rc;

  pthread_mutex_lock(&x->store_lock);
  rc = claim_name(c);
  if (rc < 0) {
    pthread_mutex_unlock(&x->store_lock);
    return rc;
  }
  rc = rdzv_rendezvous_group_unique_ids(x->r, c->name, c->members, c->size,
                                        x->ranks_per_root, make, arg, ids, nids,
                                        c->deadline - t0);
  if (rc < 0)
    rdzv__comm_fail(c, rc, "%s: %s", c->name, rdzv_rendezvous_last_error(x->r));
  pthread_mutex_unlock(&x->store_lock);
  if (rc == 0) {
    c->t.ids_s = rdzv__comm_now() - t0;
    c->t.nids = *nids;
  }
  return rc;
}

/* Takes the result of an NCCL init call that produced `comm`. */
int rdzv__comm_started(rdzv_comm_t *c, const struct rdzv_nccl_api *api,
                       rdzv_nccl_comm_t comm, rdzv_nccl_result res,
                       const char *what) {
  char err[768];
  int rc;

  if (res == RDZV_NCCL_SUCCESS || res == RDZV_NCCL_IN_PROGRESS) {
    c->nccl = comm;
    c->state = res == RDZV_NCCL_SUCCESS ? RDZV_COMM_READY : RDZV_COMM_PENDING;
    if (res == RDZV_NCCL_SUCCESS)
      c->t.init_s = rdzv__comm_now() - c->nccl_t0;
    return 0;
  }
  rc = rdzv_nccl_check(api, comm, res, what, err, sizeof(err));
  if (comm != NULL)
    api->comm_abort(comm); /* NCCL: a failed comm must still be released */
  rdzv__comm_fail(c, rc, "%s: %s", c->name, err);
  return set_failed(c, rc);
}

int rdzv__comm_start_locked(rdzv_comm_t *c, int nonblocking, double timeout_s) {
  const struct rdzv_nccl_api *api = NULL;
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t comm = NULL;
  rdzv_nccl_unique_id one;
  rdzv_nccl_result res;
  uint8_t *ids = NULL;
  int64_t nids = 0;
  int rc;

  c->deadline = rdzv__comm_now() + timeout_s;
  c->nonblocking = nonblocking;
  rc = rdzv__comm_load_api(c, &api);
  if (rc == 0)
    rc = exchange_ids(c, api, &ids, &nids);
  if (rc < 0)
    return set_failed(c, rc);
  rdzv_nccl_config_init(&cfg);
  cfg.blocking = nonblocking ? 0 : 1;
  cfg.commName = c->name;
  c->nccl_t0 = rdzv__comm_now();
  if (nids == 1 && !c->ctx->always_scalable) {
    c->path = "config";
    memcpy(one.internal, ids, sizeof(one.internal));
    res = api->comm_init_rank_config(&comm, c->size, one, c->rank, &cfg);
  } else {
    /* NCCL copies the ids before it returns, non-blocking or not. */
    c->path = "scalable";
    res = api->comm_init_rank_scalable(&comm, c->size, c->rank, (int)nids,
                                       (rdzv_nccl_unique_id *)ids, &cfg);
  }
  rdzv_free(ids);
  return rdzv__comm_started(c, api, comm, res,
                            c->path[0] == 'c' ? "ncclCommInitRankConfig"
                                              : "ncclCommInitRankScalable");
}

int rdzv__comm_poll_locked(rdzv_comm_t *c) {
  const struct rdzv_nccl_api *api = c->ctx->api;
  rdzv_nccl_result st = RDZV_NCCL_IN_PROGRESS, res;
  char err[768];
  int rc;

  res = api->comm_get_async_error(c->nccl, &st);
  if (res != RDZV_NCCL_SUCCESS)
    st = res;
  if (st == RDZV_NCCL_SUCCESS) {
    c->state = RDZV_COMM_READY;
    c->t.init_s = rdzv__comm_now() - c->nccl_t0;
    return 0;
  }
  if (st == RDZV_NCCL_IN_PROGRESS && rdzv__comm_now() < c->deadline)
    return -EAGAIN;
  if (st == RDZV_NCCL_IN_PROGRESS) {
    rc = rdzv__comm_fail(
        c, RDZV_EDEADLINE,
        "%s: NCCL init (%s) did not finish by the deadline, %.3f s after "
        "it started: a member may be missing or stuck (NCCL does not say "
        "which); the NCCL communicator was aborted",
        c->name, c->path, rdzv__comm_now() - c->nccl_t0);
  } else {
    rc = rdzv_nccl_check(api, c->nccl, st, "NCCL init", err, sizeof(err));
    rdzv__comm_fail(c, rc, "%s: %s", c->name, err);
  }
  api->comm_abort(c->nccl);
  c->nccl = NULL;
  return set_failed(c, rc);
}

int rdzv__comm_wait_locked(rdzv_comm_t *c) {
  struct timespec pause = {0, 50 * 1000};
  int rc;

  while (c->state == RDZV_COMM_PENDING) {
    rc = rdzv__comm_poll_locked(c);
    if (rc != -EAGAIN)
      return rc;
    /* Sleep unlocked: rdzv_comm_abort and other pollers may come in. */
    pthread_mutex_unlock(&c->lock);
    nanosleep(&pause, NULL);
    if (pause.tv_nsec < POLL_MAX_NS / 2)
      pause.tv_nsec *= 2;
    pthread_mutex_lock(&c->lock);
  }
  if (c->state == RDZV_COMM_READY)
    return 0;
  return c->error != 0 ? c->error : -EINVAL;
}

/* A non-member's part in a non-blocking split: NCCL reports its progress
 * on the parent. */
static int wait_parent(const struct rdzv_nccl_api *api, rdzv_nccl_comm_t p,
                       double deadline) {
  struct timespec pause = {0, 100 * 1000};
  rdzv_nccl_result st = RDZV_NCCL_IN_PROGRESS;

  while (st == RDZV_NCCL_IN_PROGRESS && rdzv__comm_now() < deadline) {
    if (api->comm_get_async_error(p, &st) != RDZV_NCCL_SUCCESS)
      return RDZV_ENCCL;
    if (st == RDZV_NCCL_IN_PROGRESS)
      nanosleep(&pause, NULL);
  }
  if (st == RDZV_NCCL_IN_PROGRESS)
    return RDZV_EDEADLINE;
  return st == RDZV_NCCL_SUCCESS ? 0 : RDZV_ENCCL;
}

int rdzv__comm_split_locked(rdzv_comm_t *c, double timeout_s) {
  const struct rdzv_nccl_api *api;
  struct rdzv_comm *p = c->parent;
  struct rdzv_nccl_config cfg;
  rdzv_nccl_comm_t child = NULL;
  struct ncclComm *pc = NULL;
  rdzv_nccl_result res;
  double deadline = rdzv__comm_now() + timeout_s;
  int member = c->rank >= 0, rc;

  rc = rdzv_comm_nccl(p, &pc, timeout_s);
  if (rc < 0) {
    rdzv__comm_fail(c, rc, "%s: parent %s: %s", c->name, p->name,
                    rdzv_comm_last_error(p));
    return member ? set_failed(c, rc) : rc;
  }
  api = c->ctx->api; /* loaded by the parent's init */
  rdzv_nccl_config_init(&cfg);
  cfg.blocking = c->ctx->nonblocking ? 0 : 1;
  cfg.commName = c->name;
  c->nonblocking = c->ctx->nonblocking;
  c->deadline = deadline;
  c->path = "split";
  c->nccl_t0 = rdzv__comm_now();
  /* Under the parent's lock: its communicator must not be aborted or
   * destroyed while NCCL splits it. */
  pthread_mutex_lock(&p->lock);
  if (p->state != RDZV_COMM_READY || p->nccl == NULL) {
    rc = rdzv__comm_fail(c, RDZV_EABORTED,
                         "%s: parent %s was aborted or "
                         "destroyed",
                         c->name, p->name);
    pthread_mutex_unlock(&p->lock);
    return member ? set_failed(c, rc) : rc;
  }
  res = api->comm_split(p->nccl,
                        member ? c->split_color : RDZV_NCCL_SPLIT_NOCOLOR,
                        member ? c->split_key : 0, &child, &cfg);
  if (!member && res == RDZV_NCCL_IN_PROGRESS)
    res = wait_parent(api, p->nccl, deadline) == 0 ? RDZV_NCCL_SUCCESS
                                                   : RDZV_NCCL_INTERNAL_ERROR;
  pthread_mutex_unlock(&p->lock);
  if (member)
    return rdzv__comm_started(c, api, child, res, "ncclCommSplit");
  if (res == RDZV_NCCL_SUCCESS)
    return 0;
  return rdzv__comm_fail(c, RDZV_ENCCL,
                         "%s: ncclCommSplit (no color) "
                         "failed: %s",
                         c->name, api->get_error_string(res));
}
