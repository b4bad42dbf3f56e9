/* Test helper: a simulated host as one forked process with a thread per
 * rank, each a real librdzv rendezvous client of a real daemon, driven by
 * one-byte commands and answering with fixed-size reports on a pipe. */
#ifndef RDZV_TESTS_HOSTS_H
#define RDZV_TESTS_HOSTS_H

#include <stdint.h>
#include <sys/types.h>

/* What a rank reports (one write, atomic on a pipe). */
struct report {
  int32_t host, local_rank, rank, world;
  int64_t gen;
  int32_t cmd;    /* 0 or 'j': a join; else the command answered */
  int32_t status; /* the join's or the command's */
  int32_t count;  /* 'a': adds acknowledged */
  int32_t slow;   /* 'i': rdzv_client_process calls of 50 ms or more */
  char text[220]; /* last error, cut */
};

struct hostproc {
  pid_t pid;
  int cmd_w; /* commands to the host (one byte each) */
  int res_r; /* reports from its ranks */
};

/* Adds per 'a' command (read at host_start, in the child). */
extern int hosts_adds_per_cmd;

/* Forks host number idx, named name (NULL: "h<idx>"), with n ranks
 * (local ranks 0..n-1) that join round "world" of job with world size
 * world through addr, each then reporting its join (cmd 0). Commands
 * (every rank of the host runs each, in order; seq = the command's
 * number on this host, from 1):
 *   'b' barrier "b<seq>" of the generation (30 s); 'a' hosts_adds_per_cmd
 *   adds of 1 to "ctr" (count = acknowledged); 's' set "k-<rank>" to
 *   "<seq>"; 'j' leave cleanly and join again (a report like the first,
 *   cmd 'j'); 'i' idle for 3 s driving the handle (count = sessions
 *   resumed); 'q' leave and end the thread.
 * Closing the command pipe (host_end) quits every rank. */
struct hostproc host_start(const char *addr, const char *job, const char *name,
                           int idx, int n, int world);
void host_cmd(struct hostproc *hp, char c);
/* Reads one report (blocks). */
void host_read(struct hostproc *hp, struct report *rp);
/* Clean end: closes the commands, waits; returns the exit status. */
int host_end(struct hostproc *hp);
/* kill -9 and reap. */
void host_kill(struct hostproc *hp);

#endif
