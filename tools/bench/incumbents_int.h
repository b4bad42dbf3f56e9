/* rdzv-bench's incumbents' mode, private: the servers, one run's result,
 * and the report of the runs (incumbents_report.c: tables, JSON, the
 * plot). Private to tools/bench. */
#ifndef RDZV_BENCH_INCUMBENTS_INT_H
#define RDZV_BENCH_INCUMBENTS_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum { S_TORCH, S_FLAT, S_TREE, S_ETCD, S_TREE_NC, S_COUNT };

/* --incumbent-servers names, and their titles in tables and plots. */
extern const char *const server_names[S_COUNT];
extern const char *const server_titles[S_COUNT];

/* Most ranks a --pytorch flat run takes: its root's process holds a
 * connection per rank, and a process may open 20,000 files here. */
#define PT_FLAT_MAX 18000

struct inc_result {
  int server;
  int64_t ranks, nprocs, failed;
  bool verified, skipped;
  bool pytorch; /* --pytorch: PyTorch's traffic, the root's counts */
  int64_t root_msgs, root_bytes, root_wait, root_get, root_mget;
  int64_t root_ping, root_inval; /* pings (leases ride on them) and the
                                    children's invalidation polls */
  int64_t root_cas;              /* compare_sets (--pt-keepalive) */
  int64_t root_invals_sent, root_write_waits; /* the root's copies: keys
                     invalidated, writes that waited for invalidations */
  int64_t node_msgs, node_bytes;              /* the busiest node's */
  double wall_s, p50_s, p99_s, cpu_s;
  int64_t rss, rss_start; /* summed over the server's processes */
};

/* --pt-check-ms: the heartbeat checks' period (0: back to back). */
extern int pt_check_ms;
/* --pt-keepalive: each agent's state read followed by a compare_set. */
extern int pt_keepalive;
/* TCPStore connections a rank (--tcpstore-conns). */
extern int inc_conns;
/* Whether clients and servers are pinned to CPUs 0 and 1. */
bool bench_inc_pinning(void);

/* incumbents_report.c. The verified PyTorch server's row of n results at
 * ranks (NULL: none). */
const struct inc_result *bench_inc_torch_of(const struct inc_result *rs, int n,
                                            int64_t ranks);
/* The table of the incumbents at ranks, and of --pytorch at ranks. */
void bench_inc_print_table(const struct inc_result *rs, int n, int64_t ranks);
void bench_inc_print_pattern_table(const struct inc_result *rs, int n,
                                   int64_t ranks);
/* One run's JSON record (t: PyTorch's server's row at its N, or NULL). */
json_t *bench_inc_result_json(const struct inc_result *r,
                              const struct inc_result *t);
/* The incumbents' plot beside png (see bench_inc_run). 0 or -1. */
int bench_inc_plot(const char *png, const struct inc_result *rs, int n);
/* --pytorch's plot beside png (PNG-pytorch.png): the root's requests and
 * bytes against N, flat, tree and tree without copies. 0 or -1. */
int bench_inc_plot_pytorch(const char *png, const struct inc_result *rs, int n);

#endif
