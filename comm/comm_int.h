/* comm/comm_int.h: the handle and world-context structs shared by comm.c
 * (handles: creation, accessors, abort, destroy) and comm_init.c (the
 * init paths). Private to comm/. */
#ifndef RDZV_COMM_COMM_INT_H
#define RDZV_COMM_COMM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uthash.h>

#include "comm/nccl_api.h"
#include "rdzv/comm.h"

#define RDZV_COMM_MAGIC 0x636f6d6du /* "comm" */

/* What every handle of one world shares. */
/* A communicator name whose id exchange this world has started. */
struct rdzv__used_name {
  UT_hash_handle hh;
  char name[RDZV_COMM_NAME_MAX + 1];
};

struct rdzv__comm_ctx {
  atomic_int refs; /* one per handle */
  rdzv_rendezvous_t *r;
  /* The rendezvous handle (its store connection) allows one thread at a
   * time: every id exchange holds this lock. */
  pthread_mutex_t store_lock;
  /* Names whose id exchange has started (under store_lock): a unique id is
   * single-use (NCCL), so a name is initialized once per generation. */
  struct rdzv__used_name *used;
  /* Guards the lazy load of `api`. */
  pthread_mutex_t api_lock;
  struct rdzv_nccl_api *api; /* NULL until the first init */
  char *nccl_path;           /* copy of opts.nccl_path, may be NULL */
  int64_t ranks_per_root;
  int nonblocking;
  int always_scalable;
  rdzv_make_id_fn make_id;
  void *make_id_arg;

  /* Background inits (rdzv_comm_prefetch; comm_bg.c): a FIFO of handles
   * and one worker thread, started by the first prefetch. All guarded by
   * bg_lock; bg_cond is broadcast when the queue grows, when the worker
   * finishes a handle, and to stop the worker. The worker holds no
   * reference on handles: rdzv_comm_destroy takes its handle out of the
   * queue and waits while it is bg_current, and the last ctx_unref (never
   * on the worker, which holds no references) stops and joins the worker.
   * Lock order: a handle's lock before bg_lock; the worker never holds
   * bg_lock while it waits for a handle's lock. */
  pthread_mutex_t bg_lock;
  pthread_cond_t bg_cond;
  pthread_t bg_thread;
  int bg_started;
  int bg_stop;
  struct rdzv_comm *bg_head, *bg_tail; /* queued handles, prefetch order */
  struct rdzv_comm *bg_current;        /* the handle the worker is on */
};

struct rdzv_comm {
  uint32_t magic;
  atomic_int refs; /* the caller's, plus one per child */
  struct rdzv__comm_ctx *ctx;
  struct rdzv_comm *parent; /* NULL for the world */
  char name[RDZV_COMM_NAME_MAX + 1];
  int64_t gen;
  int32_t size;
  int32_t rank;     /* -1: not a member */
  int32_t *members; /* world ranks by group rank; NULL for the world */
  /* For ncclCommSplit of the parent: this rank's color (NOCOLOR for a
   * non-member) and key (its group rank). */
  int32_t split_color;
  int32_t split_key;

  /* The background queue's links, guarded by ctx->bg_lock. */
  struct rdzv_comm *bg_next;
  int bg_queued;

  /* Everything below is guarded by `lock`; `state` is also atomic, so
   * that rdzv_comm_state can read it without waiting for an init step. */
  pthread_mutex_t lock;
  atomic_int state; /* enum rdzv_comm_state */
  int error;        /* the final status once FAILED or ABORTED */
  int nonblocking;  /* the NCCL communicator's mode, once started */
  rdzv_nccl_comm_t nccl;
  const char *path; /* "config", "scalable", "split" or NULL */
  double deadline;  /* of the running init, monotonic seconds (for a
                     prefetched handle, set by rdzv_comm_prefetch) */
  /* 1 from rdzv_comm_prefetch until its init is started (by the worker,
   * or taken over by rdzv_comm_nccl / rdzv_comm_init_split) or given up
   * (abort, destroy, a deadline passed while queued): the handle is
   * PENDING with no NCCL communicator yet. */
  int start_due;
  double queued_at; /* when rdzv_comm_prefetch queued it */
  /* The CUcontext current on the thread that called rdzv_comm_prefetch
   * (comm/cuda_ctx.h), NULL when none or when the process has no CUDA
   * driver loaded; the worker makes it current before it runs the init. */
  void *cuda_ctx;
  double nccl_t0; /* when the NCCL init call was made */
  struct rdzv_comm_timings t;
  /* Shrink and grow (shrink_grow.c), under `lock`: how many of each have
   * succeeded on this handle (the next one's number is one more), and
   * whether a shrink with RDZV_COMM_SHRINK_ABORT terminated this
   * communicator's operations (destroy then aborts, never finalizes). */
  int32_t nshrinks;
  int32_t ngrows;
  int shrunk_abort;
  /* For a handle made by rdzv_comm_shrink: the agreed exclude list (ranks
   * of the parent, ascending); NULL otherwise. Fixed at creation. */
  int32_t *excluded;
  int32_t nexcluded;
  char last_error[1024];
};

/* Monotonic seconds. */
double rdzv__comm_now(void);

/* Records a failure in c->last_error (printf format) and returns rc. */
int rdzv__comm_fail(rdzv_comm_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A handle with everything but its membership (comm.c). Takes a
 * reference on ctx and on parent (may be NULL). NULL when out of memory. */
rdzv_comm_t *rdzv__comm_new(struct rdzv__comm_ctx *ctx, rdzv_comm_t *parent,
                            const char *name, int64_t gen);

/* comm_init.c, for shrink_grow.c too: the world's NCCL table, loaded on
 * first use (records a failure in c); and the outcome of an NCCL call
 * that made c's communicator (READY, PENDING for a non-blocking one in
 * progress, or FAILED with the comm aborted and last_error set; `what`
 * names the call). c->nccl_t0 must be set before the call. */
int rdzv__comm_load_api(rdzv_comm_t *c, const struct rdzv_nccl_api **api);
int rdzv__comm_started(rdzv_comm_t *c, const struct rdzv_nccl_api *api,
                       rdzv_nccl_comm_t comm, rdzv_nccl_result res,
                       const char *what);

/* The init entry points, comm_init.c. Each is called with c->lock held and
 * returns with it held (it may drop and retake it while it sleeps). */
int rdzv__comm_start_locked(rdzv_comm_t *c, int nonblocking, double timeout_s);
int rdzv__comm_poll_locked(rdzv_comm_t *c);
int rdzv__comm_wait_locked(rdzv_comm_t *c);
int rdzv__comm_split_locked(rdzv_comm_t *c, double timeout_s);

/* Background inits, comm_bg.c. */
/* Sets up / tears down the ctx's queue (ctx creation and the last
 * unref; teardown stops and joins the worker if it was started). */
int rdzv__comm_bg_init(struct rdzv__comm_ctx *x);
void rdzv__comm_bg_fini(struct rdzv__comm_ctx *x);
/* Queues c (c->lock held, c->start_due set), starting the world's
 * worker on first use. Returns 0 or RDZV_ENOMEM / -errno when the
 * thread cannot be started (then nothing was queued). */
int rdzv__comm_bg_enqueue(rdzv_comm_t *c);
/* Takes c out of the queue if it is there (any lock state). */
void rdzv__comm_bg_remove(rdzv_comm_t *c);
/* For rdzv_comm_destroy, c->lock NOT held: takes c out of the queue and
 * waits while the worker is working on it. Afterwards the worker never
 * touches c again. */
void rdzv__comm_bg_forget(rdzv_comm_t *c);
/* c->lock held, c->start_due set: runs the prefetched init now (on the
 * worker or on a caller that takes it over) with the deadline prefetch
 * set, or fails it with RDZV_EDEADLINE if that passed while queued. */
int rdzv__comm_bg_run_locked(rdzv_comm_t *c);
/* c->lock held, c->start_due set, the deadline passed: fails the queued
 * init with RDZV_EDEADLINE (takes it out of the queue). */
int rdzv__comm_bg_expire_locked(rdzv_comm_t *c);

#endif /* RDZV_COMM_COMM_INT_H */
