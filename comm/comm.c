/* comm/comm.c: communicator handles (see rdzv/comm.h): options, creation
 * of the world and of sub-groups, the public init calls (which lock the
 * handle and hand over to comm_init.c, or queue it for the world's
 * background worker, comm_bg.c), abort, destroy, accessors. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "comm/cuda_ctx.h"
#include "comm/groups.h"

#define CHECK_MAGIC(c) assert((c)->magic == RDZV_COMM_MAGIC)

/* ---- options ------------------------------------------------------------- */

void rdzv_comm_opts_init(struct rdzv_comm_opts *o) {
  memset(o, 0, sizeof(*o));
  o->size = sizeof(*o);
  o->version = RDZV_COMM_OPTS_VERSION;
  o->ranks_per_root = RDZV_COMM_RANKS_PER_ROOT;
}

int rdzv_comm_opts_from_env(struct rdzv_comm_opts *o, char *err,
                            size_t errlen) {
  static const char *const rpr_vars[] = {"RDZV_RANKS_PER_ROOT",
                                         "TORCH_NCCL_RANKS_PER_ROOT"};

  if (o == NULL)
    return -EINVAL;
  if (o->nccl_path == NULL)
    o->nccl_path = rdzv_nccl_default_path();
  if (o->ranks_per_root != RDZV_COMM_RANKS_PER_ROOT)
    return 0;
  for (size_t i = 0; i < sizeof(rpr_vars) / sizeof(rpr_vars[0]); i++) {
    const char *v = getenv(rpr_vars[i]);
    char *end = NULL;
    long long n;

    if (v == NULL || *v == '\0')
      continue;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1) {
      if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s='%s' is not a positive integer", rpr_vars[i],
                 v);
      return -EINVAL;
    }
    o->ranks_per_root = n;
    return 0;
  }
  return 0;
}

/* ---- helpers shared with comm_init.c ------------------------------------- */

double rdzv__comm_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int rdzv__comm_fail(rdzv_comm_t *c, int rc, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- world context and handle lifetime ----------------------------------- */

static void ctx_unref(struct rdzv__comm_ctx *x) {
  if (atomic_fetch_sub(&x->refs, 1) != 1)
    return;
  /* No handle is left, so none is queued or on the worker; and this is
   * never the worker's thread (it holds no references). */
  rdzv__comm_bg_fini(x);
  rdzv_nccl_unload(x->api);
  free(x->nccl_path);
  struct rdzv__used_name *u, *tmp;
  HASH_ITER (hh, x->used, u, tmp) {
    HASH_DEL(x->used, u);
    free(u);
  }
  pthread_mutex_destroy(&x->store_lock);
  pthread_mutex_destroy(&x->api_lock);
  free(x);
}

static void comm_unref(rdzv_comm_t *c) {
  while (c != NULL) {
    rdzv_comm_t *parent = c->parent;

    if (atomic_fetch_sub(&c->refs, 1) != 1)
      return;
    ctx_unref(c->ctx);
    free(c->members);
    free(c->excluded);
    pthread_mutex_destroy(&c->lock);
    c->magic = 0;
    free(c);
    c = parent; /* drop the reference this child held */
  }
}

/* A handle with everything but its membership (comm_int.h). */
rdzv_comm_t *rdzv__comm_new(struct rdzv__comm_ctx *ctx, rdzv_comm_t *parent,
                            const char *name, int64_t gen) {
  rdzv_comm_t *c = calloc(1, sizeof(*c));

  if (c == NULL)
    return NULL;
  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c);
    return NULL;
  }
  c->magic = RDZV_COMM_MAGIC;
  atomic_init(&c->refs, 1);
  c->ctx = ctx;
  atomic_fetch_add(&ctx->refs, 1);
  c->parent = parent;
  if (parent != NULL)
    atomic_fetch_add(&parent->refs, 1);
  snprintf(c->name, sizeof(c->name), "%s", name);
  c->gen = gen;
  atomic_init(&c->state, RDZV_COMM_IDLE);
  c->split_color = RDZV_NCCL_SPLIT_NOCOLOR;
  return c;
}

static int ctx_new(rdzv_rendezvous_t *r, const struct rdzv_comm_opts *o,
                   struct rdzv__comm_ctx **out) {
  struct rdzv__comm_ctx *x = calloc(1, sizeof(*x));

  if (x == NULL)
    return RDZV_ENOMEM;
  if (o->nccl_path != NULL && o->nccl_path[0] != '\0' &&
      (x->nccl_path = strdup(o->nccl_path)) == NULL) {
    free(x);
    return RDZV_ENOMEM;
  }
  if (pthread_mutex_init(&x->store_lock, NULL) != 0) {
    free(x->nccl_path);
    free(x);
    return RDZV_ENOMEM;
  }
  if (pthread_mutex_init(&x->api_lock, NULL) != 0) {
    pthread_mutex_destroy(&x->store_lock);
    free(x->nccl_path);
    free(x);
    return RDZV_ENOMEM;
  }
  if (rdzv__comm_bg_init(x) != 0) {
    pthread_mutex_destroy(&x->api_lock);
    pthread_mutex_destroy(&x->store_lock);
    free(x->nccl_path);
    free(x);
    return RDZV_ENOMEM;
  }
  atomic_init(&x->refs, 0); /* the world handle takes the first */
  x->r = r;
  x->ranks_per_root = o->ranks_per_root;
  x->nonblocking = o->nonblocking != 0;
  x->always_scalable = o->always_scalable != 0;
  x->make_id = o->make_id;
  x->make_id_arg = o->make_id_arg;
  *out = x;
  return 0;
}

/* ---- creation ------------------------------------------------------------ */

int rdzv_comm_world(rdzv_rendezvous_t *r, const struct rdzv_comm_opts *o,
                    rdzv_comm_t **out) {
  struct rdzv_comm_opts defaults;
  struct rdzv__comm_ctx *x = NULL;
  rdzv_comm_t *c;
  int rc;

  if (r == NULL || out == NULL)
    return -EINVAL;
  if (o == NULL) {
    rdzv_comm_opts_init(&defaults);
    o = &defaults;
  }
  if (o->size != sizeof(*o) || o->version != RDZV_COMM_OPTS_VERSION ||
      o->ranks_per_root < 1)
    return -EINVAL;
  rc = ctx_new(r, o, &x);
  if (rc < 0)
    return rc;
  c = rdzv__comm_new(x, NULL, "world", rdzv_rendezvous_generation(r));
  if (c == NULL) {
    atomic_fetch_add(&x->refs, 1);
    ctx_unref(x);
    return RDZV_ENOMEM;
  }
  c->size = rdzv_rendezvous_world_size(r);
  c->rank = rdzv_rendezvous_rank(r);
  *out = c;
  return 0;
}

/* Finishes a sub-group: maps the parent ranks in list[0 .. n) to world
 * ranks (taking `list`), sets rank and split color/key. */
static void child_members(rdzv_comm_t *c, const rdzv_comm_t *parent,
                          int32_t *list, int32_t n, int64_t index,
                          int32_t color) {
  for (int32_t i = 0; i < n; i++)
    list[i] = rdzv_comm_world_rank(parent, list[i]);
  c->members = list;
  c->size = n;
  c->rank = (int32_t)index;
  if (index >= 0) {
    c->split_color = color;
    c->split_key = (int32_t)index;
  }
}

int rdzv_comm_group(rdzv_comm_t *parent, const char *name, const int32_t *ranks,
                    int32_t n, rdzv_comm_t **out) {
  char full[RDZV_COMM_NAME_MAX + 1];
  int32_t *list;
  int64_t index;
  rdzv_comm_t *c;
  int rc;

  if (parent == NULL || ranks == NULL || out == NULL)
    return -EINVAL;
  CHECK_MAGIC(parent);
  rc = rdzv__comm_child_name(parent->name, name, -1, full, sizeof(full));
  if (rc < 0)
    return rc;
  index = rdzv__comm_list_index(ranks, n, parent->size, parent->rank);
  if (index < -1)
    return (int)index;
  list = malloc((size_t)n * sizeof(*list));
  if (list == NULL)
    return RDZV_ENOMEM;
  memcpy(list, ranks, (size_t)n * sizeof(*list));
  c = rdzv__comm_new(parent->ctx, parent, full, parent->gen);
  if (c == NULL) {
    free(list);
    return RDZV_ENOMEM;
  }
  child_members(c, parent, list, n, index, 0);
  *out = c;
  return 0;
}

int rdzv_comm_split(rdzv_comm_t *parent, const char *name,
                    rdzv_comm_color_fn color_of, void *arg, rdzv_comm_t **out) {
  char full[RDZV_COMM_NAME_MAX + 1];
  int32_t *list = NULL, n = 0, index = -1, color = -1;
  rdzv_comm_t *c;
  int rc;

  if (parent == NULL || color_of == NULL || out == NULL)
    return -EINVAL;
  CHECK_MAGIC(parent);
  if (rdzv__comm_name_check(name) < 0)
    return -EINVAL;
  rc = rdzv__comm_split_members(parent->size, color_of, arg, parent->rank,
                                &list, &n, &index, &color);
  if (rc < 0)
    return rc;
  /* A rank in no group still gets a name: the split's, without color. */
  rc = rdzv__comm_child_name(parent->name, name, color, full, sizeof(full));
  if (rc < 0) {
    free(list);
    return rc;
  }
  c = rdzv__comm_new(parent->ctx, parent, full, parent->gen);
  if (c == NULL) {
    free(list);
    return RDZV_ENOMEM;
  }
  child_members(c, parent, list, n, index, color);
  *out = c;
  return 0;
}

int rdzv_comm_split_mesh(rdzv_comm_t *parent, const char *name, int32_t ndims,
                         const int32_t *dims, uint32_t group_dims,
                         rdzv_comm_t **out) {
  struct rdzv__mesh m;

  if (parent == NULL)
    return -EINVAL;
  CHECK_MAGIC(parent);
  if (rdzv__comm_mesh_init(&m, ndims, dims, group_dims, parent->size) < 0)
    return -EINVAL;
  return rdzv_comm_split(parent, name, rdzv__comm_mesh_color, &m, out);
}

/* ---- init calls ---------------------------------------------------------- */

/* The status a settled state reports. */
static int state_status(const rdzv_comm_t *c) {
  switch (c->state) {
  case RDZV_COMM_READY:
    return 0;
  case RDZV_COMM_PENDING:
    return -EAGAIN;
  case RDZV_COMM_FAILED:
  case RDZV_COMM_ABORTED:
    return c->error;
  case RDZV_COMM_IDLE:
    break;
  }
  return -EINVAL;
}

static int not_member(rdzv_comm_t *c) {
  int rc;

  pthread_mutex_lock(&c->lock);
  rc = rdzv__comm_fail(c, RDZV_ENOT_MEMBER,
                       "%s: this rank is not one of its %d members", c->name,
                       (int)c->size);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

/* -EINVAL for a bad argument of a call on a valid handle, saying which. */
static int bad_arg(rdzv_comm_t *c, const char *call, const char *what) {
  pthread_mutex_lock(&c->lock);
  rdzv__comm_fail(c, -EINVAL, "%s: %s: %s", c->name, call, what);
  pthread_mutex_unlock(&c->lock);
  return -EINVAL;
}

int rdzv_comm_nccl(rdzv_comm_t *c, struct ncclComm **out, double timeout_s) {
  int rc = 0;

  if (c == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  if (out == NULL || !(timeout_s > 0))
    return bad_arg(c, "rdzv_comm_nccl",
                   out == NULL ? "out is NULL" : "timeout_s must be > 0");
  if (c->rank < 0)
    return not_member(c);
  pthread_mutex_lock(&c->lock);
  if (c->state == RDZV_COMM_IDLE)
    rc = rdzv__comm_start_locked(c, c->ctx->nonblocking, timeout_s);
  else if (c->start_due) /* prefetched, still queued: start it here */
    rc = rdzv__comm_bg_run_locked(c);
  if (rc == 0 && c->state == RDZV_COMM_PENDING)
    rc = rdzv__comm_wait_locked(c);
  if (rc == 0)
    rc = state_status(c);
  if (rc == 0)
    *out = (struct ncclComm *)c->nccl;
  pthread_mutex_unlock(&c->lock);
  return rc;
}

int rdzv_comm_prefetch(rdzv_comm_t *c, double timeout_s) {
  int rc = 0;

  if (c == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  if (!(timeout_s > 0))
    return bad_arg(c, "rdzv_comm_prefetch", "timeout_s must be > 0");
  if (c->rank < 0)
    return not_member(c);
  /* Already started and held by another thread (the worker's exchange, a
   * caller's init step): running, so nothing to wait for. */
  if (pthread_mutex_trylock(&c->lock) != 0) {
    if (atomic_load(&c->state) == RDZV_COMM_PENDING)
      return 0;
    pthread_mutex_lock(&c->lock);
  }
  if (c->state == RDZV_COMM_IDLE) {
    c->deadline = rdzv__comm_now() + timeout_s;
    c->queued_at = rdzv__comm_now();
    c->nonblocking = 1;
    c->start_due = 1;
    /* NCCL inits on the device current on the calling thread: carry this
     * thread's CUDA context to the worker (comm_bg.c). */
    c->cuda_ctx = rdzv__cuda_ctx_capture();
    rc = rdzv__comm_bg_enqueue(c);
    if (rc == 0)
      c->state = RDZV_COMM_PENDING;
    else
      c->start_due = 0; /* no worker: the handle stays idle */
  } else if (c->state != RDZV_COMM_PENDING) {
    rc = state_status(c);
  }
  pthread_mutex_unlock(&c->lock);
  return rc;
}

int rdzv_comm_poll(rdzv_comm_t *c) {
  int rc;

  if (c == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  if (c->rank < 0)
    return not_member(c);
  /* A settled state answers without the lock (the worker may still hold
   * it for a moment after settling); error is written before state. */
  switch (atomic_load(&c->state)) {
  case RDZV_COMM_READY:
    return 0;
  case RDZV_COMM_FAILED:
  case RDZV_COMM_ABORTED:
    return c->error;
  default:
    break;
  }
  if (pthread_mutex_trylock(&c->lock) != 0)
    return -EAGAIN; /* another thread (or the worker) is initializing it */
  if (c->state == RDZV_COMM_PENDING && c->start_due)
    /* Queued for the worker: fails only once its deadline has passed. */
    rc = rdzv__comm_now() < c->deadline ? -EAGAIN
                                        : rdzv__comm_bg_expire_locked(c);
  else if (c->state == RDZV_COMM_PENDING && c->nccl == NULL)
    rc = -EAGAIN; /* not reached: a started PENDING init has a comm */
  else if (c->state == RDZV_COMM_PENDING)
    rc = rdzv__comm_poll_locked(c);
  else if (c->state == RDZV_COMM_IDLE)
    rc = rdzv__comm_fail(c, -EINVAL,
                         "%s: no init started (call "
                         "rdzv_comm_prefetch or rdzv_comm_nccl)",
                         c->name);
  else
    rc = state_status(c);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

int rdzv_comm_init_split(rdzv_comm_t *c, double timeout_s) {
  int rc = 0;

  if (c == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  if (!(timeout_s > 0))
    return bad_arg(c, "rdzv_comm_init_split", "timeout_s must be > 0");
  if (c->parent == NULL)
    return bad_arg(c, "rdzv_comm_init_split",
                   "a world has no parent to split from");
  pthread_mutex_lock(&c->lock);
  if (c->state == RDZV_COMM_IDLE && c->path == NULL)
    rc = rdzv__comm_split_locked(c, timeout_s);
  else if (c->start_due) /* prefetched, still queued: start it here */
    rc = rdzv__comm_bg_run_locked(c);
  if (rc == 0 && c->state == RDZV_COMM_PENDING)
    rc = rdzv__comm_wait_locked(c);
  if (rc == 0 && c->rank >= 0)
    rc = state_status(c);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

/* ---- abort and destroy --------------------------------------------------- */

int rdzv_comm_abort(rdzv_comm_t *c) {
  if (c == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  pthread_mutex_lock(&c->lock);
  if (c->start_due) { /* queued: never started */
    rdzv__comm_bg_remove(c);
    c->start_due = 0;
  }
  if (c->nccl != NULL)
    c->ctx->api->comm_abort(c->nccl);
  c->nccl = NULL;
  c->error = RDZV_EABORTED; /* before state: see rdzv_comm_poll */
  c->state = RDZV_COMM_ABORTED;
  rdzv__comm_fail(c, RDZV_EABORTED, "%s: aborted (rdzv_comm_abort)", c->name);
  pthread_mutex_unlock(&c->lock);
  return 0;
}

/* Finalizes then destroys a ready NCCL communicator; a non-blocking
 * finalize is polled for RDZV_COMM_FINALIZE_TIMEOUT_S, then aborted. */
static void finalize_and_destroy(const struct rdzv_nccl_api *api,
                                 rdzv_nccl_comm_t comm) {
  rdzv_nccl_result res = api->comm_finalize(comm), st = res;
  double until = rdzv__comm_now() + RDZV_COMM_FINALIZE_TIMEOUT_S;
  struct timespec pause = {0, 1000 * 1000};

  while (st == RDZV_NCCL_IN_PROGRESS && rdzv__comm_now() < until) {
    if (api->comm_get_async_error(comm, &st) != RDZV_NCCL_SUCCESS)
      break;
    if (st == RDZV_NCCL_IN_PROGRESS)
      nanosleep(&pause, NULL);
  }
  if (st == RDZV_NCCL_SUCCESS)
    api->comm_destroy(comm);
  else
    api->comm_abort(comm);
}

void rdzv_comm_destroy(rdzv_comm_t *c) {
  if (c == NULL)
    return;
  CHECK_MAGIC(c);
  /* Out of the worker's queue, and not on the worker any more (this
   * waits for an exchange the worker is running for c). */
  rdzv__comm_bg_forget(c);
  pthread_mutex_lock(&c->lock);
  c->start_due = 0;
  /* A communicator whose operations a shrink terminated
   * (RDZV_COMM_SHRINK_ABORT) is aborted: a finalize could wait for the
   * lost member. */
  if (c->nccl != NULL && c->state == RDZV_COMM_READY && !c->shrunk_abort)
    finalize_and_destroy(c->ctx->api, c->nccl);
  else if (c->nccl != NULL)
    c->ctx->api->comm_abort(c->nccl);
  c->nccl = NULL;
  /* Children may keep this memory alive; they must see it is gone. */
  c->error = RDZV_ECANCELED; /* before state: see rdzv_comm_poll */
  c->state = RDZV_COMM_FAILED;
  rdzv__comm_fail(c, RDZV_ECANCELED, "%s: destroyed", c->name);
  pthread_mutex_unlock(&c->lock);
  comm_unref(c);
}

/* ---- accessors ----------------------------------------------------------- */

enum rdzv_comm_state rdzv_comm_state(rdzv_comm_t *c) {
  CHECK_MAGIC(c);
  return (enum rdzv_comm_state)atomic_load(&c->state);
}

int32_t rdzv_comm_rank(const rdzv_comm_t *c) { return c->rank; }
int32_t rdzv_comm_size(const rdzv_comm_t *c) { return c->size; }

int32_t rdzv_comm_world_rank(const rdzv_comm_t *c, int32_t rank) {
  if (rank < 0 || rank >= c->size)
    return -1;
  return c->members != NULL ? c->members[rank] : rank;
}

const char *rdzv_comm_name(const rdzv_comm_t *c) { return c->name; }
int64_t rdzv_comm_generation(const rdzv_comm_t *c) { return c->gen; }

const char *rdzv_comm_init_path(rdzv_comm_t *c) {
  const char *p;

  CHECK_MAGIC(c);
  pthread_mutex_lock(&c->lock);
  p = c->path;
  pthread_mutex_unlock(&c->lock);
  return p;
}

int rdzv_comm_timings(rdzv_comm_t *c, struct rdzv_comm_timings *t) {
  if (c == NULL || t == NULL)
    return -EINVAL;
  CHECK_MAGIC(c);
  pthread_mutex_lock(&c->lock);
  *t = c->t;
  pthread_mutex_unlock(&c->lock);
  return 0;
}

const char *rdzv_comm_last_error(const rdzv_comm_t *c) { return c->last_error; }
