/* A simulated rank of the benchmark: the whole rendezvous as an
 * asynchronous state machine (join, unique ids, host table, final
 * barrier), the same requests rdzv/rendezvous.h makes, over any transport
 * that can submit a struct rdzv_request and report a struct rdzv_result. */
#ifndef RDZV_BENCH_RANK_H
#define RDZV_BENCH_RANK_H

#include <stdint.h>

#include "rdzv/client.h"
#include "rendezvous/assign.h"

struct bench_rank;

/* Submits req for rank r; the transport calls bench_rank_on_result with
 * the reply. Returns 0 or a negative status. */
typedef int (*bench_submit_fn)(struct bench_rank *r,
                               const struct rdzv_request *req,
                               double timeout_s);

struct bench_params {
  const char *round;
  int32_t world_size;
  int64_t ranks_per_root; /* unique ids: one per block of this many ranks */
  double timeout_s;
  bench_submit_fn submit;
};

enum bench_step {
  STEP_JOIN,
  STEP_IDS_GATHER, /* this rank makes its block's id */
  STEP_IDS_WAIT,
  STEP_IDS_GET,
  STEP_HOSTS,
  STEP_BARRIER,
  STEP_DONE,
  STEP_FAILED,
};

struct bench_rank {
  const struct bench_params *p;
  char host[32];
  int32_t local_rank, local_size;
  uint64_t claim;
  struct rdzv_assignment a;
  int64_t gen;
  int64_t nids;
  enum bench_step step;
  int status;
  double t_start, t_done; /* CLOCK_MONOTONIC seconds */
  void *transport;        /* the transport's per-rank state */
};

/* Starts rank r (fields p, host, local_rank, local_size, claim set). */
int bench_rank_start(struct bench_rank *r);
/* Advances r with the reply to its last request. */
void bench_rank_on_result(struct bench_rank *r, const struct rdzv_result *res);
double bench_now(void);

#endif /* RDZV_BENCH_RANK_H */
