/* rdzv-comm-bench: lazy against eager communicator init (not a test).
 *
 * Forks --ranks ranks spread evenly over the node addresses in --addrs
 * (one per simulated host; start the daemons first, see
 * tools/comm-bench.sh). Each rank joins, makes the world handle and three
 * sub-groups (tensor- and data-parallel mesh splits, tp = --tp, and the
 * first half of the world as an explicit list), then:
 *   lazy   stops the clock once the handles exist (usable: NCCL init waits
 *          for first use), then times the world's first use;
 *   eager  initializes the world and every sub-group it belongs to before
 *          stopping the clock (what a framework that inits up front does).
 * The clock starts when the rank's process starts (fork). NCCL is the
 * library in --nccl: on a CPU machine the FAKE test double
 * (bazel-bin/tests/fake_nccl/libfake_nccl.so), so the figures are the
 * rendezvous and id-exchange share of init, not NCCL's own.
 *
 *   rdzv-comm-bench --addrs A[,B...] --ranks N --nccl PATH
 *                   [--mode lazy|eager] [--tp T] [--job ID]
 *
 * Prints one JSON object: mode, ranks, and per-rank seconds to a usable
 * world (median, max), plus for lazy the world's first-use init (median,
 * max). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/comm.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

#define MAX_ADDRS 64

struct args {
  char *addrs[MAX_ADDRS];
  int naddrs, ranks, tp, eager;
  const char *nccl, *job;
};

struct result {
  double usable_s, first_use_s;
  int status;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse(int argc, char **argv, struct args *a) {
  static char job[64];
  snprintf(job, sizeof(job), "comm-bench-%ld", (long)getpid());
  *a = (struct args){.tp = 2, .job = job};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (strcmp(k, "--addrs") == 0) {
      /* Split in place at the commas (argv is ours to modify). */
      for (char *t = argv[i + 1]; t != NULL && a->naddrs < MAX_ADDRS;) {
        char *comma = strchr(t, ',');
        if (comma != NULL)
          *comma = '\0';
        a->addrs[a->naddrs++] = t;
        t = comma != NULL ? comma + 1 : NULL;
      }
    } else if (strcmp(k, "--ranks") == 0) {
      a->ranks = (int)strtol(v, NULL, 10);
    } else if (strcmp(k, "--tp") == 0) {
      a->tp = (int)strtol(v, NULL, 10);
    } else if (strcmp(k, "--nccl") == 0) {
      a->nccl = v;
    } else if (strcmp(k, "--job") == 0) {
      a->job = v;
    } else if (strcmp(k, "--mode") == 0) {
      a->eager = strcmp(v, "eager") == 0;
    } else {
      return -EINVAL;
    }
  }
  if (a->naddrs < 1 || a->ranks < 1 || a->ranks % a->naddrs != 0 || a->tp < 1 ||
      a->ranks % a->tp != 0 || a->nccl == NULL)
    return -EINVAL;
  return 0;
}

/* The sub-groups every rank describes: tp and dp mesh splits and the
 * first half of the world. */
static int make_groups(rdzv_comm_t *world, int n, int tp, rdzv_comm_t **g) {
  const int32_t dims[2] = {n / tp, tp};
  int32_t *half = malloc(sizeof(int32_t) * (size_t)(n / 2 + 1));
  int rc;
  if (half == NULL)
    return RDZV_ENOMEM;
  for (int i = 0; i < (n + 1) / 2; i++)
    half[i] = i;
  rc = rdzv_comm_split_mesh(world, "tp", 2, dims, 1u << 1, &g[0]);
  if (rc == 0)
    rc = rdzv_comm_split_mesh(world, "dp", 2, dims, 1u << 0, &g[1]);
  if (rc == 0)
    rc = rdzv_comm_group(world, "half", half, (n + 1) / 2, &g[2]);
  free(half);
  return rc;
}

static struct result run_rank(const struct args *a, int index, double t0) {
  struct result res = {0};
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_t *r = NULL;
  rdzv_comm_t *world = NULL, *g[3] = {NULL, NULL, NULL};
  struct rdzv_comm_opts co;
  struct ncclComm *nc;
  char host[32], err[512];
  int per_host = a->ranks / a->naddrs;

  snprintf(host, sizeof(host), "host%03d", index / per_host);
  rdzv_rendezvous_opts_init(&o);
  o.addr = a->addrs[index / per_host];
  o.job_id = a->job;
  o.host = host;
  o.local_rank = index % per_host;
  o.local_size = per_host;
  o.world_size = a->ranks;
  o.topology = "gpu_pci=none\n";
  res.status = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  rdzv_comm_opts_init(&co);
  co.nccl_path = a->nccl;
  if (res.status == 0)
    res.status = rdzv_comm_world(r, &co, &world);
  if (res.status == 0)
    res.status = make_groups(world, a->ranks, a->tp, g);
  for (int i = 0; a->eager && res.status == 0 && i < 4; i++) {
    rdzv_comm_t *c = i == 0 ? world : g[i - 1];
    if (rdzv_comm_rank(c) >= 0)
      res.status = rdzv_comm_nccl(c, &nc, 60);
  }
  res.usable_s = now_s() - t0;
  if (!a->eager && res.status == 0) {
    double t1 = now_s();
    res.status = rdzv_comm_nccl(world, &nc, 60);
    res.first_use_s = now_s() - t1;
  }
  if (res.status < 0)
    fprintf(stderr, "rank %d: %s: %s\n", index, rdzv_strerror(res.status),
            world ? rdzv_comm_last_error(world) : err);
  for (int i = 2; i >= 0; i--)
    rdzv_comm_destroy(g[i]);
  rdzv_comm_destroy(world);
  rdzv_rendezvous_destroy(r);
  return res;
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static void stats(double *v, int n, double *median, double *max) {
  qsort(v, (size_t)n, sizeof(*v), by_value);
  *median = v[n / 2];
  *max = v[n - 1];
}

int main(int argc, char **argv) {
  struct args a;
  if (parse(argc, argv, &a) < 0) {
    fprintf(stderr, "usage: rdzv-comm-bench --addrs A[,B...] --ranks N "
                    "--nccl PATH [--mode lazy|eager] [--tp T] [--job ID]\n"
                    "(ranks a multiple of the addresses and of tp)\n");
    return 2;
  }
  int(*pipes)[2] = calloc((size_t)a.ranks, sizeof(*pipes));
  double *usable = calloc((size_t)a.ranks, sizeof(double));
  double *first = calloc((size_t)a.ranks, sizeof(double));
  pid_t *pids = calloc((size_t)a.ranks, sizeof(pid_t));
  if (!pipes || !usable || !first || !pids)
    return 1;
  for (int i = 0; i < a.ranks; i++) {
    if (pipe(pipes[i]) < 0)
      return 1;
    pids[i] = fork();
    if (pids[i] == 0) {
      double t0 = now_s();
      struct result res = run_rank(&a, i, t0);
      ssize_t w = write(pipes[i][1], &res, sizeof(res));
      _exit(w == (ssize_t)sizeof(res) && res.status == 0 ? 0 : 1);
    }
    close(pipes[i][1]);
  }
  int bad = 0;
  for (int i = 0; i < a.ranks; i++) {
    struct result res = {.status = -1};
    int st = 0;
    if (read(pipes[i][0], &res, sizeof(res)) != (ssize_t)sizeof(res))
      res.status = -1;
    close(pipes[i][0]);
    waitpid(pids[i], &st, 0);
    bad |= res.status != 0;
    usable[i] = res.usable_s;
    first[i] = res.first_use_s;
  }
  double um, ux, fm, fx;
  stats(usable, a.ranks, &um, &ux);
  stats(first, a.ranks, &fm, &fx);
  printf("{\"mode\":\"%s\",\"ranks\":%d,\"hosts\":%d,\"subgroups\":3,"
         "\"usable_median_s\":%.6f,\"usable_max_s\":%.6f",
         a.eager ? "eager" : "lazy", a.ranks, a.naddrs, um, ux);
  if (!a.eager)
    printf(",\"first_use_median_s\":%.6f,\"first_use_max_s\":%.6f", fm, fx);
  printf(",\"ok\":%s}\n", bad ? "false" : "true");
  return bad ? 1 : 0;
}
