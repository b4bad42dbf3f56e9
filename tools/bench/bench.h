/* rdzv-bench: shared definitions of the orchestrator (main.c), the server
 * processes (serve.c) and the socket rank drivers (drive.c). */
#ifndef RDZV_BENCH_BENCH_H
#define RDZV_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

struct bench_opts {
  char dir[128];         /* sockets and result files */
  char job[64];
  int64_t ranks;         /* N */
  int64_t ranks_per_host;
  int64_t fanout;
  int64_t ranks_per_root; /* unique ids: NCCL scalable-init block size */
  double timeout_s;
  int flat;              /* every rank on the root */
  int inproc;            /* ranks inside the server processes */
  int root;              /* serve: run the root daemon */
  int tcpstore;          /* serve: each daemon also serves the TCPStore
                            protocol on 127.0.0.1 (incumbents.c) */
  int64_t first, count;  /* serve/drive: host range */
  uint32_t flush_ms, flush_max_ms;
};

int64_t bench_hosts(const struct bench_opts *o);
/* Ranks on host h (the last host may have fewer). */
int64_t bench_host_ranks(const struct bench_opts *o, int64_t h);
/* Parses the options shared by every mode; returns the index of the
 * first argument it did not take, or -1 on a bad value. */
int bench_parse_common(struct bench_opts *o, int argc, char **argv, int i);
/* Host h's node socket path / parent address (unix:...). */
void bench_node_path(const struct bench_opts *o, int64_t h, char *out,
                     size_t n);
void bench_root_path(const struct bench_opts *o, char *out, size_t n);
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

int bench_serve_main(struct bench_opts *o);
int bench_drive_main(struct bench_opts *o);

#endif /* RDZV_BENCH_BENCH_H */
