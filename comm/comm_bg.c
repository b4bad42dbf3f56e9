/* comm/comm_bg.c: background inits for rdzv_comm_prefetch (see
 * rdzv/comm.h). One worker thread per world context, started by the
 * first prefetch, takes queued handles in prefetch order and runs each
 * one's whole init start (the id exchange, then a non-blocking NCCL init
 * call) under the handle's lock; polling the NCCL part to completion is
 * left to rdzv_comm_poll / rdzv_comm_nccl as before. Each handle's init
 * runs in the CUDA context rdzv_comm_prefetch captured on its caller's
 * thread (comm/cuda_ctx.h); the worker has no context current between
 * handles.
 *
 * The worker holds no reference on a handle. A queued handle's memory is
 * kept alive by rdzv_comm_destroy, which takes the handle out of the
 * queue and waits while the worker is on it (bg_current) before freeing
 * it; so the worker can never drop the last reference of a world and
 * have to join itself. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>

#include "comm/comm_int.h"
#include "comm/cuda_ctx.h"

int rdzv__comm_bg_init(struct rdzv__comm_ctx *x) {
  if (pthread_mutex_init(&x->bg_lock, NULL) != 0)
    return RDZV_ENOMEM;
  if (pthread_cond_init(&x->bg_cond, NULL) != 0) {
    pthread_mutex_destroy(&x->bg_lock);
    return RDZV_ENOMEM;
  }
  return 0;
}

void rdzv__comm_bg_fini(struct rdzv__comm_ctx *x) {
  if (x->bg_started) {
    pthread_mutex_lock(&x->bg_lock);
    x->bg_stop = 1;
    pthread_cond_broadcast(&x->bg_cond);
    pthread_mutex_unlock(&x->bg_lock);
    pthread_join(x->bg_thread, NULL);
  }
  pthread_cond_destroy(&x->bg_cond);
  pthread_mutex_destroy(&x->bg_lock);
}

/* bg_lock held. */
static void unlink_locked(struct rdzv__comm_ctx *x, rdzv_comm_t *c) {
  rdzv_comm_t **pp = &x->bg_head, *prev = NULL;

  if (!c->bg_queued)
    return;
  while (*pp != NULL && *pp != c) {
    prev = *pp;
    pp = &(*pp)->bg_next;
  }
  if (*pp == c) {
    *pp = c->bg_next;
    if (x->bg_tail == c)
      x->bg_tail = prev;
  }
  c->bg_next = NULL;
  c->bg_queued = 0;
}

void rdzv__comm_bg_remove(rdzv_comm_t *c) {
  struct rdzv__comm_ctx *x = c->ctx;

  pthread_mutex_lock(&x->bg_lock);
  unlink_locked(x, c);
  pthread_mutex_unlock(&x->bg_lock);
}

void rdzv__comm_bg_forget(rdzv_comm_t *c) {
  struct rdzv__comm_ctx *x = c->ctx;

  pthread_mutex_lock(&x->bg_lock);
  unlink_locked(x, c);
  while (x->bg_current == c)
    pthread_cond_wait(&x->bg_cond, &x->bg_lock);
  pthread_mutex_unlock(&x->bg_lock);
}

int rdzv__comm_bg_expire_locked(rdzv_comm_t *c) {
  double now = rdzv__comm_now();

  rdzv__comm_bg_remove(c);
  c->start_due = 0;
  c->error = RDZV_EDEADLINE; /* before state: see rdzv_comm_poll */
  c->state = RDZV_COMM_FAILED;
  return rdzv__comm_fail(
      c, RDZV_EDEADLINE,
      "%s: the deadline of rdzv_comm_prefetch passed while its init was "
      "still queued, %.3f s after the prefetch: the world's background "
      "worker was busy with earlier prefetched groups, and this group's id "
      "exchange never started",
      c->name, now - c->queued_at);
}

int rdzv__comm_bg_run_locked(rdzv_comm_t *c) {
  double left = c->deadline - rdzv__comm_now();

  if (!(left > 0))
    return rdzv__comm_bg_expire_locked(c);
  rdzv__comm_bg_remove(c); /* a caller taking it over: out of the queue */
  c->start_due = 0;
  return rdzv__comm_start_locked(c, 1, left);
}

/* On the worker, c->lock held, c->start_due set: runs the prefetched init
 * in the CUDA context of the thread that prefetched (NCCL inits on the
 * device current on its calling thread; none captured: the worker's is
 * left as it is, i.e. none, see worker_main). A context that cannot be
 * made current fails the handle (-ENODEV) before its id exchange. */
static void run_on_worker_locked(rdzv_comm_t *c) {
  char err[256];
  int rc;

  rc = rdzv__cuda_ctx_apply(c->cuda_ctx, err, sizeof(err));
  if (rc < 0) {
    c->start_due = 0;
    c->error = rc; /* before state: see rdzv_comm_poll */
    c->state = RDZV_COMM_FAILED;
    rdzv__comm_fail(c, rc,
                    "%s: the background worker could not make the CUDA "
                    "context of the thread that called rdzv_comm_prefetch "
                    "current: %s; the init was not started",
                    c->name, err);
    return;
  }
  rdzv__comm_bg_run_locked(c); /* the status is in c's state */
}

static void *worker_main(void *arg) {
  struct rdzv__comm_ctx *x = arg;
  rdzv_comm_t *c;

  pthread_mutex_lock(&x->bg_lock);
  for (;;) {
    while (!x->bg_stop && x->bg_head == NULL)
      pthread_cond_wait(&x->bg_cond, &x->bg_lock);
    if (x->bg_stop)
      break;
    c = x->bg_head;
    unlink_locked(x, c);
    x->bg_current = c;
    pthread_mutex_unlock(&x->bg_lock);

    /* c stays allocated while it is bg_current (rdzv__comm_bg_forget). */
    pthread_mutex_lock(&c->lock);
    if (c->start_due && c->state == RDZV_COMM_PENDING)
      run_on_worker_locked(c);
    pthread_mutex_unlock(&c->lock);
    /* No CUDA context current between handles (neither c's nor one NCCL's
     * init made current), so that a handle prefetched from a thread
     * without one does not run in the context of the one before it. After
     * c's lock: a caller waiting for c need not wait for this. */
    rdzv__cuda_ctx_clear();

    pthread_mutex_lock(&x->bg_lock);
    x->bg_current = NULL;
    pthread_cond_broadcast(&x->bg_cond);
  }
  pthread_mutex_unlock(&x->bg_lock);
  return NULL;
}

/* bg_lock held. The worker runs with every signal blocked, so that the
 * application's handlers keep running on its own threads. */
static int start_worker_locked(struct rdzv__comm_ctx *x) {
  sigset_t all, old;
  int rc;

  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&x->bg_thread, NULL, worker_main, x);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    return rc == EAGAIN || rc == ENOMEM ? RDZV_ENOMEM : -rc;
  x->bg_started = 1;
  return 0;
}

int rdzv__comm_bg_enqueue(rdzv_comm_t *c) {
  struct rdzv__comm_ctx *x = c->ctx;
  int rc = 0;

  pthread_mutex_lock(&x->bg_lock);
  if (!x->bg_started)
    rc = start_worker_locked(x);
  if (rc == 0) {
    c->bg_next = NULL;
    c->bg_queued = 1;
    if (x->bg_tail != NULL)
      x->bg_tail->bg_next = c;
    else
      x->bg_head = c;
    x->bg_tail = c;
    pthread_cond_broadcast(&x->bg_cond);
  }
  pthread_mutex_unlock(&x->bg_lock);
  return rc;
}
