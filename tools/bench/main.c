/* rdzv-bench: the main job. It builds a real tree of real rdzvd daemons on
 * this machine and drives N simulated ranks through the whole rendezvous
 * (join, assignment, unique ids, host table, final barrier), in tree mode
 * and in flat mode (every rank straight to one server, as with PyTorch's
 * TCPStore), and reports time to complete, messages and bytes at the root
 * and at the busiest node, peak memory, and a projection to a cluster.
 * See usage() and docs/benchmarks.md ("The main job").
 *
 * This file owns the command line: the usage, the options, and the order
 * of the runs. It calls the modes' entry points: the child processes
 * (serve.c, drive.c, and incumbents.c's bench_inc_child), the delay tree
 * (delay.c), one run of the main job (run.c) and its report
 * (run_report.c), and the incumbents (incumbents.c). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench.h"
#include "tools/bench/incumbents.h"
#include "tools/bench/run_int.h"

static void usage_to(FILE *f) {
  fprintf(
      f,
      "usage: rdzv-bench [--ranks N[,N...]] [--ranks-per-host R] [--fanout F]\n"
      "       [--ranks-per-root K] (ranks a unique id serves, as PyTorch's\n"
      "       TORCH_NCCL_RANKS_PER_ROOT: ceil(N / K) ids; default 128)\n"
      "       [--mode tree|flat|both] [--json FILE] [--plot FILE.png]\n"
      "       [--transport auto|sockets|inproc] [--sockets-max N]\n"
      "       [--rtt-us US] [--flush-ms MS] [--timeout S] [--idle-s S]\n"
      "       [--heartbeat-ms MS] (the nodes' pings to their parents, 1 to\n"
      "       20000; default 20000, a third of the 60 s liveness timeout the\n"
      "       bench gives them; rdzvd's own default is 1000)\n"
      "       [--etcd URL[,URL...]] (an etcd-backed root: etcd's requests\n"
      "       and bytes per rendezvous are printed)\n"
      "       [--delay-tree HOSTS [--delay-us US[,US...]]] (a tree of HOSTS\n"
      "       nodes with a delay-relay on every node-to-parent link: the\n"
      "       rendezvous and lone round trips, measured against the model)\n"
      "       [--model-waits J,I,B,A] (1 or 0: whether the join, the id\n"
      "       gather, the barrier, a lone add wait --flush-ms at a node;\n"
      "       default 0,0,0,0: nodes told the tree's shape wait for none)\n"
      "defaults: --ranks 1000,10000,100000 --ranks-per-host 8 --fanout 16\n"
      "  --mode both --transport auto (sockets up to --sockets-max 20000\n"
      "  ranks, in-process rank hop above) --rtt-us 50 --flush-ms 2\n"
      "  --idle-s 0 (else: after each run, S seconds with every rank done\n"
      "  and connected, reporting the root's and the busiest node's frames\n"
      "  per second: the heartbeat cost; use --heartbeat-ms 1000 for\n"
      "  rdzvd's)\n");
  fputs(bench_inc_usage(), f);
  fprintf(f, "  --mode none: only the incumbents. Default --incumbents\n"
             "  1000,4000 when neither --ranks nor --incumbents is given\n");
}

static void usage(void) { usage_to(stderr); }

static int parse_list(const char *s, int64_t *out, int max) {
  int n = 0;
  const char *p = s;
  while (*p) {
    if (n == max)
      return -1; /* more values than fit: refuse rather than drop */
    char *end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 1)
      return -1;
    out[n++] = v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0')
      return -1;
  }
  return n;
}

/* The main job's command line (the runs' own options are a struct
 * bench_opts beside it). */
struct cmdline {
  int64_t ns[16]; /* --ranks */
  int nn, modes, ranks_given;
  const char *json_path, *png, *transport;
  int64_t sockets_max;
  double rtt_us;
  struct bench_delay_opts dl;
};

/* Takes option k's value v into o or c; *end is where its number ended
 * (left NULL for a value that is not a number). Returns false for an
 * option that is not the main job's. */
static bool take_option(struct bench_opts *o, struct cmdline *c, const char *k,
                        const char *v, char **end) {
  if (strcmp(k, "--ranks") == 0) {
    c->nn = parse_list(v, c->ns, 16);
    c->ranks_given = 1;
  } else if (strcmp(k, "--ranks-per-host") == 0) {
    o->ranks_per_host = strtoll(v, end, 10);
  } else if (strcmp(k, "--fanout") == 0) {
    o->fanout = strtoll(v, end, 10);
  } else if (strcmp(k, "--ranks-per-root") == 0) {
    o->ranks_per_root = strtoll(v, end, 10);
  } else if (strcmp(k, "--mode") == 0) {
    c->modes = !strcmp(v, "tree")   ? 1
               : !strcmp(v, "flat") ? 2
               : !strcmp(v, "both") ? 3
               : !strcmp(v, "none") ? 4
                                    : 0;
  } else if (strcmp(k, "--json") == 0) {
    c->json_path = v;
  } else if (strcmp(k, "--plot") == 0) {
    c->png = v;
  } else if (strcmp(k, "--transport") == 0) {
    c->transport = v;
  } else if (strcmp(k, "--sockets-max") == 0) {
    c->sockets_max = strtoll(v, end, 10);
  } else if (strcmp(k, "--rtt-us") == 0) {
    c->rtt_us = strtod(v, end);
  } else if (strcmp(k, "--flush-ms") == 0) {
    long long f = strtoll(v, end, 10);
    o->flush_ms = f >= 0 && f <= 10000 ? (uint32_t)f : UINT32_MAX;
  } else if (strcmp(k, "--timeout") == 0) {
    o->timeout_s = strtod(v, end);
  } else if (strcmp(k, "--heartbeat-ms") == 0) {
    long long hb = strtoll(v, end, 10);
    /* Above a third of the bench's 60 s liveness timeout a node pings
     * at that third anyway (rdzvd's rule), so more is refused. */
    o->heartbeat_ms = hb >= 1 && hb <= 20000 ? (uint32_t)hb : 0;
    if (o->heartbeat_ms == 0)
      *end = (char *)v; /* out of range: the usage */
  } else if (strcmp(k, "--etcd") == 0) {
    /* The root persists to etcd at these URLs (its children read it). */
    setenv("RDZV_BENCH_ETCD", v, 1);
    *end = (char *)v + strlen(v);
  } else if (strcmp(k, "--idle-s") == 0) {
    bench_idle_s = strtod(v, end);
  } else if (strcmp(k, "--delay-tree") == 0) {
    c->dl.hosts = strtoll(v, end, 10);
    if (c->dl.hosts < 2 || c->dl.hosts > 4000)
      *end = (char *)"bad"; /* one relay process, a pair per host */
  } else if (strcmp(k, "--delay-us") == 0) {
    /* parse_list refuses 0: the undelayed link is measured anyway */
    c->dl.ndelays = parse_list(v, c->dl.delays_us, 8);
    if (c->dl.ndelays < 1)
      *end = (char *)"bad";
  } else if (strcmp(k, "--model-waits") == 0) {
    struct bench_delay_opts *dl = &c->dl;
    if (sscanf(v, "%lf,%lf,%lf,%lf", &dl->waits_join, &dl->waits_ids,
               &dl->waits_barrier, &dl->waits_add) != 4 ||
        !(dl->waits_join >= 0 && dl->waits_join <= 1) ||
        !(dl->waits_ids >= 0 && dl->waits_ids <= 1) ||
        !(dl->waits_barrier >= 0 && dl->waits_barrier <= 1) ||
        !(dl->waits_add >= 0 && dl->waits_add <= 1))
      *end = (char *)"bad";
    else
      *end = (char *)v + strlen(v);
  } else {
    return false;
  }
  return true;
}

/* Whether every value taken so far is good; end: where the last number
 * ended (NULL: not a number). */
static bool values_ok(const struct bench_opts *o, const struct cmdline *c,
                      const char *end) {
  int bad_transport = strcmp(c->transport, "auto") != 0 &&
                      strcmp(c->transport, "sockets") != 0 &&
                      strcmp(c->transport, "inproc") != 0;
  return !((end != NULL && *end != '\0') || c->nn < 1 || c->modes == 0 ||
           o->ranks_per_host < 1 || o->fanout < 1 || o->ranks_per_root < 1 ||
           bad_transport || o->flush_ms == UINT32_MAX || !(o->timeout_s > 0) ||
           !(c->rtt_us >= 0) || !(bench_idle_s >= 0 && bench_idle_s <= 3600) ||
           c->sockets_max < 1);
}

/* Reads the command line into o and c. Returns -1 to go on, or the exit
 * status: 0 after --help, 2 on a usage error (said on stderr). */
static int parse_args(int argc, char **argv, struct bench_opts *o,
                      struct cmdline *c) {
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
      usage_to(stdout);
      return 0;
    }
    if (v == NULL) {
      fprintf(stderr, "rdzv-bench: %s needs a value\n", k);
      usage();
      return 2;
    }
    i++;
    int inc = bench_inc_option(k, v); /* incumbents.c's own options */
    if (inc < 0) {
      usage();
      return 2;
    }
    if (inc > 0)
      continue;
    if (!take_option(o, c, k, v, &end)) {
      fprintf(stderr, "rdzv-bench: unknown option %s\n", k);
      usage();
      return 2;
    }
    if (!values_ok(o, c, end)) {
      fprintf(stderr, "rdzv-bench: bad value '%s' for %s\n", v, k);
      usage();
      return 2;
    }
  }
  return -1;
}

/* One flat server holds every rank's socket: keep it under the
 * 20,000-open-files cap of this kind of machine. Returns false, having
 * said why, when a flat run over sockets would pass it. */
static bool flat_fits(const struct cmdline *c) {
  for (int i = 0; i < c->nn; i++)
    if ((c->modes & 2) && c->ns[i] > 18000 &&
        (strcmp(c->transport, "sockets") == 0 ||
         (strcmp(c->transport, "auto") == 0 && c->ns[i] <= c->sockets_max))) {
      fprintf(stderr,
              "rdzv-bench: flat mode over sockets at %" PRId64
              " ranks needs more than the ~20,000 open files one "
              "process may hold; use --transport inproc or fewer "
              "ranks\n",
              c->ns[i]);
      return false;
    }
  return true;
}

/* Say what runs, so a bare `rdzv-bench` is not a silent minute. */
static void announce(const struct bench_opts *o, const struct cmdline *c) {
  if (c->modes != 4) {
    fprintf(stderr, "rdzv-bench: %s at",
            c->modes == 3   ? "tree and flat"
            : c->modes == 1 ? "tree"
                            : "flat");
    for (int i = 0; i < c->nn; i++)
      fprintf(stderr, "%s %" PRId64, i ? "," : "", c->ns[i]);
    fprintf(stderr,
            " ranks, %" PRId64 " ranks per host, fan-out %" PRId64
            " (rdzv-bench --help for the options)\n",
            (int64_t)o->ranks_per_host, (int64_t)o->fanout);
  }
}

/* The runs: each N of --ranks in each mode asked for (a row and a JSON
 * record each), then the incumbents; the JSON file and the plot. Returns
 * the exit status: 1 if anything failed. */
static int run_all(struct bench_opts *o, const struct cmdline *c) {
  struct result rs[32];
  int nr = 0, bad = 0;
  json_t *all = json_array();
  for (int i = 0; i < c->nn; i++) {
    const char *t =
        strcmp(c->transport, "auto") == 0
            ? (c->ns[i] <= c->sockets_max ? "sockets" : "in-process")
        : strcmp(c->transport, "inproc") == 0 ? "in-process"
                                              : "sockets";
    for (int m = 0; m < 2; m++) {
      if (!(c->modes & (1 << m)))
        continue;
      int rc = bench_run_one(o, c->ns[i], m == 0, t, c->rtt_us, &rs[nr]);
      bench_report_row(&rs[nr]);
      json_array_append_new(all, bench_report_json(&rs[nr]));
      bad |= rc != 0 || rs[nr].failed != 0;
      nr++;
    }
  }
  if (bench_inc_run(o, all, c->png) < 0) /* incumbents.c; nothing if none */
    bad = 1;
  if (c->json_path != NULL &&
      json_dump_file(all, c->json_path, JSON_INDENT(1)) < 0) {
    fprintf(stderr, "rdzv-bench: cannot write %s: %s\n", c->json_path,
            strerror(errno));
    bad = 1;
  }
  json_decref(all);
  if (c->png != NULL && nr > 0 && bench_report_plot(c->png, rs, nr) < 0) {
    fprintf(stderr, "rdzv-bench: gnuplot failed to write %s\n", c->png);
    bad = 1;
  }
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  struct bench_opts o = {.ranks_per_host = 8,
                         .fanout = 16,
                         .ranks_per_root = 128,
                         .timeout_s = 300,
                         .flush_ms = 2,
                         .flush_max_ms = 20};
  snprintf(o.job, sizeof(o.job), "bench");
  int child_rc;
  if (bench_inc_child(argc, argv, &child_rc))
    return child_rc;
  if (argc > 1 &&
      (strcmp(argv[1], "--serve") == 0 || strcmp(argv[1], "--drive") == 0)) {
    if (bench_parse_common(&o, argc, argv, 2) != argc)
      return 2;
    signal(SIGPIPE, SIG_IGN);
    return argv[1][2] == 's' ? bench_serve_main(&o) : bench_drive_main(&o);
  }
  struct cmdline c = {.ns = {1000, 10000, 100000},
                      .nn = 3,
                      .modes = 3,
                      .ranks_given = 0,
                      .json_path = NULL,
                      .png = NULL,
                      .transport = "auto",
                      .sockets_max = 20000,
                      .rtt_us = 50,
                      .dl = {.delays_us = {25, 250},
                             .ndelays = 2,
                             .waits_join = 0,
                             .waits_ids = 0,
                             .waits_barrier = 0,
                             .waits_add = 0}};
  int rc = parse_args(argc, argv, &o, &c);
  if (rc >= 0)
    return rc;
  if (c.dl.hosts > 0) {
    c.dl.rtt_us = c.rtt_us;
    c.dl.json_path = c.json_path;
    return bench_delay_main(&o, &c.dl);
  }
  if (!flat_fits(&c))
    return 2;
  if (!c.ranks_given && !bench_inc_given())
    bench_inc_default();
  announce(&o, &c);
  signal(SIGPIPE, SIG_IGN);
  return run_all(&o, &c);
}
