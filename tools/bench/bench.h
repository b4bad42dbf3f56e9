/* rdzv-bench: shared definitions of the orchestrator (main.c, run.c), the
 * server processes (serve.c) and the socket rank drivers (drive.c). */
#ifndef RDZV_BENCH_BENCH_H
#define RDZV_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

struct bench_opts {
  char dir[128]; /* sockets and result files */
  char job[64];
  int64_t ranks; /* N */
  int64_t ranks_per_host;
  int64_t fanout;
  int64_t ranks_per_root; /* unique ids: NCCL scalable-init block size */
  double timeout_s;
  int flat;             /* every rank on the root */
  int inproc;           /* ranks inside the server processes */
  int root;             /* serve: run the root daemon */
  int tcpstore;         /* serve: each daemon also serves the TCPStore
                           protocol on 127.0.0.1 (incumbents.c) */
  int pytorch;          /* ts-drive: PyTorch's own store traffic
                           (--pattern pytorch, ts_drive.c) */
  int no_copies;        /* serve: nodes keep no copies of mutable keys
                           (--cache-mutable no) */
  int64_t first, count; /* serve: a range of positions in the tree's
                           depth-first order (bench_host_at); drive:
                           a range of host indexes */
  uint32_t flush_ms, flush_max_ms;
  /* The nodes' --heartbeat-ms; 0: a third of their liveness timeout. */
  uint32_t heartbeat_ms;
};

int64_t bench_hosts(const struct bench_opts *o);
/* The host at position pos (0 <= pos < bench_hosts) of the tree's hosts in
 * depth-first preorder, -1 out of range. The server processes of the tree
 * each run a range of positions: whole subtrees, so that each process
 * writes to its own hosts' nodes (what a parent sends its children, above
 * all the 100 KB id table to every host) instead of one process running
 * every interior node and writing to every other process's nodes. */
int64_t bench_host_at(const struct bench_opts *o, int64_t pos);
/* Ranks on host h (the last host may have fewer). */
int64_t bench_host_ranks(const struct bench_opts *o, int64_t h);
/* Parses the options shared by every mode; returns the index of the
 * first argument it did not take, or -1 on a bad value. */
int bench_parse_common(struct bench_opts *o, int argc, char **argv, int i);
/* Host h's node socket path / parent address (unix:...). */
void bench_node_path(const struct bench_opts *o, int64_t h, char *out,
                     size_t n);
void bench_root_path(const struct bench_opts *o, char *out, size_t n);
/* Where host h's node connects to its parent when RDZV_BENCH_UPLINK is
 * set (rdzv-bench --delay-tree): the delay relay's listener for that
 * link, which forwards to the parent's socket. */
void bench_uplink_path(const struct bench_opts *o, int64_t h, char *out,
                       size_t n);
/* The file holding the TCPStore port of host h's daemon, or (h < 0) of the
 * root's (--flags 8; incumbents.c). */
void bench_ts_port_path(const struct bench_opts *o, int64_t h, char *out,
                        size_t n);
/* Appends each finished rank's duration (t_done - t_go, seconds; negative
 * for a failed rank) to <dir>/durations.<pid>, one per line. ranks is an
 * array of structs of `stride` bytes that begin with a struct bench_rank. */
void bench_write_durations(const struct bench_opts *o, const void *ranks,
                           size_t stride, int64_t n, double t_go);
/* Peak resident set of this process, bytes (VmHWM). */
int64_t bench_peak_rss(void);

/* What one tree run reports to bench_run_tree's caller (run.c's run
 * record, the fields delay.c needs). */
struct bench_tree_run {
  double wall_s, p50_s, p99_s, cpu_s; /* seconds; cpu_s: every process */
  double max_proc_cpu_s;              /* the busiest process's CPU */
  /* CPU from the start of the ranks to their end (servers; drivers'
   * whole life), in all and of the busiest process */
  double win_cpu_s, max_proc_win_cpu_s;
  int64_t depth, failed, hosts;
  int64_t root_msgs, max_node_msgs, max_node_bytes; /* frames in + out */
  int64_t all_msgs; /* frames in + out summed over every daemon */
};

/* Additions to a run: started() once the run's directory exists and
 * before any process starts (nonzero: the run fails); go() (may be NULL)
 * when every process is ready, just before the ranks start; finished() after
 * every rank is done and the statistics are read, with the tree and the
 * ranks still up (rc: the run's status so far). */
struct bench_hooks {
  int (*started)(const struct bench_opts *o, void *arg);
  void (*go)(const struct bench_opts *o, void *arg);
  void (*finished)(const struct bench_opts *o, int rc, void *arg);
  void *arg;
};

/* Runs the tree mode once at `ranks` ranks over sockets with the hooks
 * (may be NULL); fills *out. Returns 0, or nonzero if a process failed
 * (out is filled either way; out->failed counts failed ranks). */
int bench_run_tree(const struct bench_opts *base, int64_t ranks,
                   const struct bench_hooks *h, struct bench_tree_run *out);

/* rdzv-bench --delay-tree (delay.c). */
struct bench_delay_opts {
  int64_t hosts;        /* nodes in the tree (>= 2) */
  int64_t delays_us[8]; /* each direction of every uplink */
  int ndelays;
  double rtt_us; /* the projections' round trip per level */
  /* The model's combining-interval term: whether (1) or not (0) each
   * step waits --flush-ms at a node whose subtree has not given all of
   * it: the join, the id gather, the barrier, a lone add (all 1 while
   * nodes held every collective and add for the interval; all 0 since
   * nodes are told their subtree's shape and send lone adds at once). */
  double waits_join, waits_ids, waits_barrier, waits_add;
  const char *json_path; /* NULL: none */
};

/* Link round trips through the relay, the delayed tree at each delay,
 * against the model; projections. Returns the process exit status. */
int bench_delay_main(struct bench_opts *o, const struct bench_delay_opts *d);

int bench_serve_main(struct bench_opts *o);
int bench_drive_main(struct bench_opts *o);

#endif /* RDZV_BENCH_BENCH_H */
