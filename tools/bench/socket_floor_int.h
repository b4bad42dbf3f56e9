/* rdzv-socket-floor, private to tools/bench: the tree's options, and what
 * the command line (socket_floor.c), the tree of processes
 * (socket_floor_tree.c) and the TCPStore floor (socket_floor_tcp.c) offer
 * each other. */
#ifndef RDZV_BENCH_SOCKET_FLOOR_INT_H
#define RDZV_BENCH_SOCKET_FLOOR_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

enum { ROUNDS = 4, MAX_PROCS = 64 };

struct opts {
  int64_t hosts, fanout, procs, table, rph;
};

/* The tree's shape and sizes (socket_floor_tree.c holds the defaults; the
 * command line sets them). */
extern struct opts O;

/* socket_floor.c. The monotonic clock, seconds. */
double floor_now_s(void);
/* Says what failed, with errno's text, and exits 1. */
_Noreturn void floor_die(const char *what);
/* The next events of epoll e (at most 256): retried on EINTR; after 60 s
 * with none the run is stuck, and who says so and exits 1. */
int floor_wait_events(int e, struct epoll_event *evs, const char *who);

/* socket_floor_tree.c. The bytes a host's up frame of round carries for
 * its subtree of below hosts. */
size_t floor_up_bytes(int round, int64_t below);
/* The tree run: O.procs processes and the root's, their links, the four
 * rounds; prints the floor's line. top: the largest frame but the id
 * table. Returns the exit status (0, or 1 on a failure, printed). */
int floor_tree_run(int64_t top);

/* socket_floor_tcp.c. --tcp-ranks n: the floor under a TCPStore server;
 * prints its line. Returns the exit status (0, or 1 on a failure). */
int floor_tcp_run(int64_t n);

#endif /* RDZV_BENCH_SOCKET_FLOOR_INT_H */
