/* What spares_test.c and spares_chaos_test.c share: a root
 * (--spare-wait-ms 1500, --session-grace-ms 1000) and NODES node daemons
 * (each with a --health-cmd that fails a host whose marker file
 * DIR/unhealthy-HOST exists), hosts as forked processes with a thread per
 * rank (each a real librdzv client joining round "world" of job JOB, world
 * size WORLD, minimum WORLD - 8), the ranks' reports on one pipe, and the
 * checks of a generation's world against the last one.
 *
 * A rank, once placed, reports its place (status 0), waits for its
 * generation's end ("rdzv/world/g<G>/next" or its abort) and joins again;
 * a spare (or an extra host) waits parked inside rdzv_rendezvous_join and
 * reports RDZV_EPARKED. Hooks (spares_hooks) let a test do more at the
 * two points of a generation a rank sees. Nothing here depends on
 * wall-clock time. */
#ifndef RDZV_TESTS_SPARES_HARNESS_H
#define RDZV_TESTS_SPARES_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc.h"
#include "rdzv/rendezvous.h"

#define NODES 4
#define PER 2
#define ACTIVE 16
#define SPARES 4
#define MAXH (ACTIVE + 2 * SPARES + 4)
#define WORLD (ACTIVE * PER)

/* The job the ranks join, and its segment size (0: hosts one by one). */
extern const char *g_job;
extern int32_t g_segment;
#define JOB g_job

struct host {
  char name[16], domain[16];
  bool spare;
  pid_t pid;
  int node_rank; /* in the last world, -1 if not in it */
};

/* A rank's report. status: a join's (0 placed, or its error), 1 rank 0's
 * "domains <text>" of its generation, 2 and up a hook's (spares_hooks'
 * report receives them). A write of the whole struct stays atomic
 * (PIPE_BUF). */
struct srep {
  int32_t host, lr, status, rank, world, node_rank;
  int64_t gen;
  char text[600];
};

extern char dir[64];
extern struct proc root, node[NODES];
extern char root_tcp[64], root_addr[160], node_addr[NODES][160];
extern struct host hosts[MAXH];
extern int nhosts;

/* Optional hooks, set before the first host_start (the host processes
 * inherit them):
 *   placed: in the rank's thread once it is placed, before it reports;
 *     may fill rp->text and keep state in *st; returns 0 to go on,
 *     non-zero to report that status instead (the rank then joins again).
 *   ended: in the rank's thread when the generation ended (the wait on
 *     its "next" key returned wait_rc), r still open; may send reports
 *     of its own (send_rep, status >= 2); frees what placed kept.
 *   report: in the test process, for each report of status >= 2 that
 *     collect reads. */
struct spares_hooks {
  int (*placed)(rdzv_rendezvous_t *r, struct srep *rp, void **st);
  void (*ended)(rdzv_rendezvous_t *r, const struct srep *rp, int wait_rc,
                void *st);
  void (*report)(const struct srep *rp);
};
extern struct spares_hooks spares_hooks;

/* cmocka setup and teardown: the daemons, the report pipe; teardown kills
 * the hosts left and stops the daemons. */
int spares_setup(void **state);
int spares_teardown(void **state);

/* Sends one report (from a rank). */
void send_rep(struct srep *r);
/* Reads one report (in the test process). */
void read_rep(struct srep *r);

/* A host: add_host names it (domain d<domain>) and returns its index;
 * host_start forks its process; hosts_kill kill -9s n hosts at once and
 * reaps them. */
int add_host(const char *name, int domain, bool spare);
void host_start(int i);
void hosts_kill(const int *idx, int n);
void host_kill(int i);

/* No daemon died. */
void check_alive(void);
/* A number of the root's view of round "world" (rdzvctl members' and
 * rounds' data: "generation", "parked_ranks", "spares_promoted"), -1 if
 * absent. */
int64_t root_stat(const char *what);

/* A generation's world, as its ranks reported it. */
struct world {
  int64_t gen;
  int size;
  int host_of_node[MAXH]; /* node rank -> host index */
  int nodes;
  int parked_reports[MAXH];      /* RDZV_EPARKED reports, by host */
  int quarantined_reports[MAXH]; /* RDZV_EQUARANTINED reports, by host */
  char quarantined_text[600];    /* the first one's */
};

/* The latest RDZV_EQUARANTINED report's text of each host ("" before
 * one), kept by collect. */
extern char quarantined_text_of[MAXH][600];

/* Reads reports until every rank of one generation newer than after has
 * reported its place (want ranks); records parked and quarantined reports
 * on the way. Checks ranks 0..W-1 each once, contiguous per host by node
 * rank, one world size and generation on all. */
void collect(int64_t after, int want, struct world *w);
/* Generation gen's domains (reports read until rank 0's comes). */
const char *domains_of(int64_t gen);
/* The new world against the last: the hosts that were in it and not in
 * lost keep their node ranks (when keep); lost[i]'s place is held by
 * fills[i] (when fills); every host's recorded node rank is updated. */
void check_places(const struct world *w, const int *lost, int nlost,
                  const int *fills, bool keep);
/* Every domain present in the world has 4 hosts. */
void check_domains_whole(const struct world *w);
/* An active host ("a...") of domain d in the world, chosen at random. */
int victim_in(int d);
/* Prints a round's outcome. */
void report(const char *what, const struct world *w);

#endif
