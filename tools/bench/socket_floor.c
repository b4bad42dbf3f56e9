/* rdzv-socket-floor: what the tree's socket traffic alone costs on this
 * machine (a benchmark, not a test; see docs/benchmarks.md, "The socket
 * floor").
 *
 *   rdzv-socket-floor [--hosts N] [--fanout F] [--procs P]
 *                     [--table-bytes B] [--ranks-per-host R]
 *   rdzv-socket-floor --tcp-ranks N
 *
 * The same tree as rdzv-bench --mode tree (N hosts, default 12,500; host 0
 * under the root, host h's children F*h+1 .. F*h+F, default F 16; the
 * hosts split over P processes, default 16, in preorder blocks as the
 * bench's node processes hold them; the root in a process of its own).
 * Every host connects to its parent's process over a Unix socket, as a
 * node opens its upstream for a job, and then the links carry the frames
 * a rendezvous of R ranks a host (default 8) puts on them, with no store
 * behind them: four rounds, each up the tree (a node sends up once all
 * its children have) and back down from the root:
 *   join     up 48 B a rank below, down 32 B a rank below;
 *   ids      up 64 B, down the id table (default 106,352 B: 782 ids of
 *            136 B, the table of 100,000 ranks at 128 ranks per root);
 *   topology up 64 B, down 128 B;
 *   barrier  up 64 B, down 64 B.
 * A frame is an 8-byte header (length, round) and its body; a process
 * reads into one buffer (a link keeps only a frame's unread part) and
 * writes each frame with one write(2), one epoll loop a process. What it
 * measures is the floor under any daemon that keeps this tree's links as
 * sockets: the kernel's work for the connections, the frames and their bytes,
 * and the least user-space work that moves them.
 *
 * With --tcp-ranks N (at most 18,000) it is a TCPStore server that only
 * answers, for rdzv-bench --incumbents: one client process on CPU 0 opens
 * N loopback TCP connections at once, as the bench's driver does, and
 * each makes the init pattern's 5 round trips in turn, with the sizes the
 * bench's clients put on the wire (see tcp_req_bytes), answered at once by
 * a server process on CPU 1 that does nothing else: no store, no waits,
 * no parsing. It prints the wall time from the first connect to the last
 * reply and each process's CPU.
 *
 * Prints one line: wall seconds from the first connect to the root's last
 * answer, the CPU seconds of all processes (user and system, from
 * getrusage of the children) and the bytes and frames moved. Exit status
 * 0, 1 on a failure (printed), 2 on a usage error.
 *
 * This file owns the command line (the usage, the options and their
 * limits) and the helpers the others share; it calls the tree run
 * (socket_floor_tree.c) and the TCPStore floor (socket_floor_tcp.c)
 * through socket_floor_int.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "tools/bench/socket_floor_int.h"

double floor_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

_Noreturn void floor_die(const char *what) {
  fprintf(stderr, "rdzv-socket-floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

int floor_wait_events(int e, struct epoll_event *evs, const char *who) {
  for (;;) {
    int n = epoll_wait(e, evs, 256, 60000);
    if (n > 0)
      return n;
    if (n == 0) {
      fprintf(stderr, "rdzv-socket-floor: %s: no progress in 60 s\n", who);
      exit(1);
    }
    if (errno != EINTR)
      floor_die("epoll_wait");
  }
}

static void usage_to(FILE *f) {
  fprintf(
      f,
      "usage: rdzv-socket-floor [--hosts N] [--fanout F] [--procs P]\n"
      "                         [--table-bytes B] [--ranks-per-host R]\n"
      "       rdzv-socket-floor --tcp-ranks N\n"
      "The tree's links with no store behind them (default 12,500 hosts,\n"
      "fan-out 16, 16 processes, a 106,352-byte id table, 8 ranks a host),\n"
      "or with --tcp-ranks N a TCPStore server that only answers. Limits:\n"
      "hosts 1-1,000,000; fan-out 2-1,000,000; procs 1-%d; table-bytes\n"
      "1-67,108,864; ranks-per-host 1-1,024 (48 x hosts x ranks-per-host\n"
      "at most 1 GiB); tcp-ranks 1-18,000 (alone; an open file a rank in each "
      "of 2 processes).\n",
      MAX_PROCS);
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "rdzv-socket-floor: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage_to(stderr);
  return 2;
}

/* Reads the command line into O and *tcp_ranks. Returns -1 to go on, or
 * the exit status: 0 after --help, 2 on a usage error (said on stderr). */
static int parse_args(int argc, char **argv, int64_t *tcp_ranks) {
  struct {
    const char *name;
    int64_t *dst, max;
  } opts[] = {
      {"--hosts", &O.hosts, 1000000},     {"--fanout", &O.fanout, 1000000},
      {"--procs", &O.procs, MAX_PROCS},   {"--table-bytes", &O.table, 1 << 26},
      {"--ranks-per-host", &O.rph, 1024}, {"--tcp-ranks", tcp_ranks, 18000},
  };
  bool tree_opt = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage_to(stdout);
      return 0;
    }
    size_t k = 0;
    while (k < sizeof(opts) / sizeof(opts[0]) &&
           strcmp(argv[i], opts[k].name) != 0)
      k++;
    if (k == sizeof(opts) / sizeof(opts[0]))
      return usage_error("unknown option '%s'", argv[i]);
    if (i + 1 >= argc)
      return usage_error("%s needs a value", argv[i]);
    char *end;
    errno = 0;
    long long v = strtoll(argv[i + 1], &end, 10);
    if (errno != 0 || end == argv[i + 1] || *end != '\0' || v < 1 ||
        v > opts[k].max || (opts[k].dst == &O.fanout && v < 2))
      return usage_error("%s: value out of range (see the limits below)",
                         argv[i]);
    *opts[k].dst = v;
    tree_opt |= opts[k].dst != tcp_ranks;
    i++;
  }
  if (*tcp_ranks > 0 && tree_opt)
    return usage_error("%s takes no tree options", "--tcp-ranks");
  return -1;
}

int main(int argc, char **argv) {
  int64_t tcp_ranks = 0;
  int rc = parse_args(argc, argv, &tcp_ranks);
  if (rc >= 0)
    return rc;
  if (tcp_ranks > 0)
    return floor_tcp_run(tcp_ranks);
  int64_t top =
      floor_up_bytes(0, O.hosts); /* the largest frame but the table */
  if (top > (int64_t)1 << 30)
    return usage_error("%s: the join's top frame (48 bytes a rank) would "
                       "pass 1 GiB",
                       "--hosts times --ranks-per-host");
  return floor_tree_run(top);
}
