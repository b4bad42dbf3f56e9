/* The harness of the communicator integration tests (comm_test.c,
 * comm_prefetch_test.c, comm_field_test.c): a real root and two node
 * daemons (hostA, hostB) as processes, ranks as forked children that join
 * a rendezvous, make their world handle over the FAKE NCCL library
 * tests/fake_nccl/libfake_nccl.so (a test double, loaded through the
 * production dlopen seam; each rank's FAKE_NCCL_LOG shows what was called
 * with which ids) and run a scenario; each reports one line back to the
 * test parent, which asserts on it and on the fake's logs. Where the real
 * libnccl.so.2 is installed and a world asks for it, the unique ids come
 * from its ncclGetUniqueId (works without a GPU) while init goes to the
 * fake. Nothing here depends on wall-clock time. */
#ifndef RDZV_TESTS_COMM_HARNESS_H
#define RDZV_TESTS_COMM_HARNESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/nccl_api.h"
#include "rdzv/comm.h"
#include "rdzv/rendezvous.h"

#define NHOSTS 2
#define RDZVD "tools/rdzvd"
#define FAKE "tests/fake_nccl/libfake_nccl.so"
#define REAL_NCCL "/usr/local/cuda/lib64/libnccl.so.2"
#define MAX_RANKS 64
#define REPORT_MAX 2300

/* Daemons: cmocka group setup and teardown (the teardown also checks that
 * the test parent leaked no file descriptor). */
int setup(void **state);
int teardown(void **state);

/* What a rank runs once it has joined and made its world handle. A
 * scenario that joins again may replace r and world (destroying the old
 * ones, world first, or setting world to NULL once destroyed): the rank
 * reports r's generation, then destroys world and r. */
struct rank_ctx {
  rdzv_rendezvous_t *r;
  rdzv_comm_t *world;
  /* The options of the rank's join (borrowed, valid while the scenario
   * runs): a scenario joins again with a copy. */
  const struct rdzv_rendezvous_opts *opts;
  int32_t rank;
  int failed;
  char text[2000];
  size_t len;
};
typedef void (*scenario_fn)(struct rank_ctx *k);

/* A world of n ranks, per_host ranks on each host (rank i is launch index
 * i: hosts are ordered by name, ranks by local rank). */
struct world_spec {
  const char *job;
  int n, per_host;
  int64_t ranks_per_root; /* 0: default */
  int nonblocking;
  const char *polls; /* FAKE_NCCL_INIT_POLLS, or NULL */
  const char *fail;  /* FAKE_NCCL_FAIL_INIT, or NULL */
  int real_ids;      /* ids from the real libnccl where installed */
  scenario_fn fn;
  int always_scalable;
};

/* Appends to the rank's report (safe from several threads of a rank:
 * opts.make_id runs on the world's worker thread after a prefetch). */
void say(struct rank_ctx *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A check inside a rank: records what failed; the parent asserts on it. */
int check(struct rank_ctx *k, int ok, const char *what);

/* Every rank's opts.make_id records the ids it makes in its report as
 * "made=<label>:<first 8 bytes in hex>", with the label current when the
 * id was made (set it before the init that makes the id, and leave it
 * while a background init may run), followed by "made-bg=<label>" when it
 * ran on another thread than the rank's own (the world's worker).
 * ids_made counts them. Under ASan a rank whose memory leaked exits 5. */
extern const char *made_label;
extern atomic_int ids_made;

/* Ranks that must stay joined without taking part call hold(): it reads
 * go_pipe[0] until EOF; the parent opens it before launch and closes the
 * write end (go_pipe[1], and sets it to -1) when the others are done. */
extern int go_pipe[2];
void hold(void);

/* A one-way signal between two ranks: the parent calls sig_open() before
 * launch and sig_close() after it; one rank calls sig_send(), the other
 * sig_wait(), which returns 1 once the byte came, 0 if every sender
 * exited without sending. */
extern int sig_pipe[2];
void sig_open(void);
void sig_close(void);
void sig_send(void);
int sig_wait(void);

/* Ranks as forked children; a rank reports "status rank gen text\n". */
struct rank_proc {
  pid_t pid;
  int fd;
};
void launch(const struct world_spec *w, struct rank_proc *rp);
/* Forks one rank of w for launch index `index` (0 .. w->n-1: its host and
 * local rank), running w->fn: e.g. a replacement for a rank that died,
 * with a scenario of its own (a copy of the spec with another fn). */
void launch_one(const struct world_spec *w, int index, struct rank_proc *rp);
/* Reads rank i's report into buf and waits for it to exit; returns the
 * report's status. */
int finish(struct rank_proc *rp, char *buf, size_t n);
/* Runs a world whose ranks must all report success; reports[i] receives
 * rank i's line. */
void run_world(const struct world_spec *w, char reports[][REPORT_MAX]);

/* The fake's log of rank `index` of job, whole (malloc'd, "" when
 * absent). */
char *fake_log(const char *job, int index);
/* Occurrences of needle in hay. */
int count(const char *hay, const char *needle);
/* Copies the value of "key=" from the first line containing `line_has`
 * (the value ends at a space or the end of the line). */
int field(const char *text, const char *line_has, const char *key, char *out,
          size_t n);
/* The id a rank made for `label`, from its report ("made=label:hex"). */
int made_id(const char *report, const char *label, char *out, size_t n);
/* Whether key exists in job's store (asked at the root). */
int key_exists(const char *job, const char *key);

#endif
