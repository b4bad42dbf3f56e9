/* rdzv-bench's incumbents' mode (incumbents.c): the same fast C clients
 * run PyTorch's init pattern against PyTorch's own TCPStore server, rdzvd
 * flat and as a tree with a TCPStore front end per host (all over the
 * TCPStore protocol, ts_drive.c), and etcd's v3 JSON gateway
 * (etcd_drive.c). The small hook main.c calls. */
#ifndef RDZV_BENCH_INCUMBENTS_H
#define RDZV_BENCH_INCUMBENTS_H

#include <jansson.h>
#include <stdint.h>

#include "tools/bench/bench.h"

#define BENCH_INC_UID_BYTES 128 /* rank 0's unique id */
#define BENCH_INC_TOPO_BYTES 64 /* each rank's topology record */

/* Runs the child process of argv[1] when it is one of this mode's
 * (--ts-drive, --etcd-drive): returns 1 and its exit status in *rc; 0
 * when argv[1] is not one of them. */
int bench_inc_child(int argc, char **argv, int *rc);

/* Takes option k with value v when it is this mode's (--incumbents LIST |
 * none, --incumbent-servers LIST, --pin on|off): returns 1 (taken), -1
 * (taken, bad value: a message went to stderr) or 0 (not ours). */
int bench_inc_option(const char *k, const char *v);

/* The usage lines of these options. */
const char *bench_inc_usage(void);

/* Whether --incumbents was given (else the default applies). */
int bench_inc_given(void);
/* Sets the ranks of the default run (1000,4000). */
void bench_inc_default(void);

/* Runs every selected server at every N of --incumbents (nothing when
 * none), printing a table per N on stdout, appending one JSON record per
 * server and N to all (borrowed), and, with png (may be NULL), a plot of
 * them to PNG-incumbents.png beside it (FILE.png -> FILE-incumbents.png).
 * o gives ranks per host, fan-out, flush interval and timeout. Returns 0,
 * or -1 when a run failed, a rank failed or a check did not hold. */
int bench_inc_run(const struct bench_opts *o, json_t *all, const char *png);

/* For the drivers: writes n durations (seconds, negative for a failed
 * rank) to <dir>/durations.<pid>. */
void bench_inc_write_durations(const struct bench_opts *o, const double *d,
                               int64_t n);

int bench_ts_drive_main(struct bench_opts *o);
int bench_etcd_drive_main(struct bench_opts *o);

#endif /* RDZV_BENCH_INCUMBENTS_H */
