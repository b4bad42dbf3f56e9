/* rdzv-bench's model of the rendezvous on a real cluster (delay.c), kept
 * apart so that its terms are named and each is a parameter. */
#ifndef RDZV_BENCH_DELAY_H
#define RDZV_BENCH_DELAY_H

#include <stdint.h>

struct bench_model_in {
  double local_s;         /* a rank's round trip to its own node (same host) */
  double levels;          /* network links from the deepest node to the root */
  double rtt_s;           /* round trip of one link, seconds */
  double trips;           /* sequential round trips through every level */
  double frame_s;         /* CPU per frame at a daemon, seconds */
  double path_frames;     /* frames each daemon on the path handles per trip */
  double busiest_frames;  /* every frame of the busiest daemon */
  double interval_s;      /* the combining interval (--flush-ms), seconds */
  double interval_levels; /* times a step on the critical path waits it */
};

struct bench_model_out {
  double total_s;
  double local_s;    /* trips * local */
  double network_s;  /* trips * levels * rtt */
  double path_cpu_s; /* trips * (levels + 1) * path_frames * frame_s */
  double busy_s;     /* busiest_frames * frame_s */
  double interval_s; /* interval_levels * interval */
};

/* total = local + network + max(path CPU, busiest daemon's CPU) +
 * intervals. */
void bench_delay_model(const struct bench_model_in *in,
                       struct bench_model_out *out);

#endif /* RDZV_BENCH_DELAY_H */
