/* rdzv-bench's main job, private to tools/bench: one run's result record
 * (filled by run.c), the run itself, and the report of the runs
 * (run_report.c: rows, JSON, the plot), which main.c calls in turn. */
#ifndef RDZV_BENCH_RUN_INT_H
#define RDZV_BENCH_RUN_INT_H

#include <jansson.h>
#include <stdint.h>

#include "tools/bench/bench.h"

struct result {
  const char *mode, *transport;
  int64_t ranks, hosts, fanout, ranks_per_host, failed, depth;
  double wall_s, p50_s, p99_s, cpu_s, projection_s, rtt_us;
  int64_t root_msgs, root_bytes, max_node_msgs, max_node_bytes;
  int64_t root_rss, node_rss, all_msgs;
  /* The root's frames and the most any node handled, without heartbeats
   * (pings and their replies), which a rendezvous of milliseconds would
   * not see. */
  int64_t root_work_msgs, max_node_work_msgs, all_work_msgs;
  /* The projection's inputs: CPU per frame (the rendezvous window's CPU,
   * heartbeats' included, over the frames without them) and the busiest
   * daemon's frames without heartbeats. */
  double proj_frame_s;
  int64_t proj_busiest_frames;
  double max_proc_cpu_s; /* the busiest process's CPU */
  /* With hooks: CPU from "go" to the statistics after "done" (servers;
   * drivers: their whole life, which is mostly that), total and of the
   * busiest process. */
  double win_cpu_s, max_proc_win_cpu_s;
  /* Bytes the nodes kept once per process (blob.h: interning); hosts
   * whose local rank 0 had its id table checked (in-process ranks), and
   * of them those that got other bytes than the others. */
  int64_t interned_bytes, ids_checked, ids_mismatch;
  /* Frames per second while every rank is done and connected (heartbeats):
   * at the root and at the busiest node, over --idle-s; -1: not measured. */
  double idle_root_per_s, idle_node_per_s;
};

/* --idle-s: how long to measure the idle traffic after each run (0: not).
 * Set by main.c's options, read by every run (run.c). */
extern double bench_idle_s;

/* run.c. Runs the main job once at n ranks, tree (1) or flat (0), its rank
 * hop over transport ("sockets" or "in-process"), and fills *r (rtt_us:
 * the projection's round trip per level). Returns 0, or nonzero if a
 * process failed (r is filled either way; r->failed counts failed
 * ranks). */
int bench_run_one(struct bench_opts *base, int64_t n, int tree,
                  const char *transport, double rtt_us, struct result *r);

/* run_report.c. One run's row on stdout (and, when measured, its idle
 * frame rates). */
void bench_report_row(const struct result *r);
/* One run's JSON record, with the idle frame rates when measured. */
json_t *bench_report_json(const struct result *r);
/* The plot of the n runs rs to png with gnuplot: 0, or a negative value
 * if it failed. */
int bench_report_plot(const char *png, const struct result *rs, int n);

#endif /* RDZV_BENCH_RUN_INT_H */
