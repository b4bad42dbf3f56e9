/* rdzv-bench: the main job. It builds a real tree of real rdzvd daemons on
 * this machine and drives N simulated ranks through the whole rendezvous
 * (join, assignment, unique ids, host table, final barrier), in tree mode
 * and in flat mode (every rank straight to one server, as with PyTorch's
 * TCPStore), and reports time to complete, messages and bytes at the root
 * and at the busiest node, peak memory, and a projection to a real
 * cluster. See usage() and docs/benchmarks.md ("The main job"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <curl/curl.h>
#include <jansson.h>

#include "store/etcd/etcd_json.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/topo.h"
#include "tools/bench/bench.h"
#include "tools/bench/delay.h"
#include "tools/bench/incumbents.h"
#include "tools/bench/rank.h"

struct child {
  pid_t pid;
  FILE *in, *out;
  int holds_ranks;
  int is_root;
  json_t *stats;
  struct rusage ru;
  double cpu_go; /* with hooks: a server's CPU seconds at "go" */
};

static int64_t jint(json_t *j, const char *k) {
  return (int64_t)json_integer_value(json_object_get(j, k));
}

struct run {
  struct bench_opts o;
  struct child ch[1024];
  int n;
  const char *transport;
};

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

static int spawn(struct run *rn, const char *kind, int64_t first, int64_t count,
                 int flags, int holds_ranks) {
  if (rn->n >= (int)(sizeof(rn->ch) / sizeof(rn->ch[0])))
    return -1;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0)
    return -errno;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    char a[16][64];
    const struct bench_opts *o = &rn->o;
    snprintf(a[0], 64, "%" PRId64, o->ranks);
    snprintf(a[1], 64, "%" PRId64, o->ranks_per_host);
    snprintf(a[2], 64, "%" PRId64, o->fanout);
    snprintf(a[3], 64, "%" PRId64, first);
    snprintf(a[4], 64, "%" PRId64, count);
    snprintf(a[5], 64, "%d", flags);
    snprintf(a[6], 64, "%u", o->flush_ms);
    snprintf(a[7], 64, "%.0f", o->timeout_s);
    snprintf(a[8], 64, "%" PRId64, o->ranks_per_root);
    snprintf(a[9], 64, "%u", o->heartbeat_ms);
    char *argv[] = {"rdzv-bench", (char *)kind,   "--dir",    (char *)o->dir,
                    "--job",      (char *)o->job, "--n",      a[0],
                    "--rph",      a[1],           "--fanout", a[2],
                    "--first",    a[3],           "--count",  a[4],
                    "--flags",    a[5],           "--flush",  a[6],
                    "--timeout",  a[7],           "--rpr",    a[8],
                    "--hb",       a[9],           NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  struct child *c = &rn->ch[rn->n++];
  memset(c, 0, sizeof(*c));
  c->pid = pid;
  c->in = fdopen(in[1], "w");
  c->out = fdopen(out[0], "r");
  c->holds_ranks = holds_ranks;
  c->is_root = (flags & 4) != 0;
  return 0;
}

/* Reads lines from c until one starts with prefix; returns it in buf. */
static int expect(struct child *c, const char *prefix, char *buf, size_t n) {
  while (fgets(buf, (int)n, c->out) != NULL)
    if (strncmp(buf, prefix, strlen(prefix)) == 0)
      return 0;
  return -1;
}

static void tell(struct run *rn, int which, const char *line) {
  /* which: 0 servers (no ranks, or in-process ranks), 1 socket drivers,
   * 2 all */
  for (int i = 0; i < rn->n; i++) {
    int driver = rn->ch[i].holds_ranks && !rn->o.inproc;
    if (which == 2 || (which == 1) == driver) {
      fprintf(rn->ch[i].in, "%s\n", line);
      fflush(rn->ch[i].in);
    }
  }
}

/* Starts the processes of one run. Tree: a root process, node processes
 * for chunks of hosts (with the ranks inside them in-process, or socket
 * drivers beside them). Flat: one root process (holding the ranks
 * in-process, or socket drivers). */
static int start_processes(struct run *rn, int tree) {
  struct bench_opts *o = &rn->o;
  int64_t hosts = bench_hosts(o);
  int inproc = o->inproc ? 2 : 0;
  if (!tree)
    return spawn(rn, "--serve", 0, 0, 4 | 1 | inproc, o->inproc) < 0 ? -1 : 0;
  if (spawn(rn, "--serve", 0, 0, 4, 0) < 0)
    return -1;
  /* fds per node: its listener, upstream, child nodes and (sockets) its
   * ranks; keep each process well under the 20,000-fd cap. */
  int64_t per_node = 2 + o->fanout + (o->inproc ? 0 : o->ranks_per_host);
  int64_t chunk = 15000 / per_node;
  for (int64_t h = 0; h < hosts; h += chunk)
    if (spawn(rn, "--serve", h, h + chunk <= hosts ? chunk : hosts - h, inproc,
              o->inproc) < 0)
      return -1;
  return 0;
}

/* Socket drivers: at most ~15,000 ranks (fds) per process. */
static int start_drivers(struct run *rn, int tree) {
  struct bench_opts *o = &rn->o;
  int64_t hosts = bench_hosts(o);
  int64_t chunk = 15000 / o->ranks_per_host;
  for (int64_t h = 0; h < hosts; h += chunk)
    if (spawn(rn, "--drive", h, h + chunk <= hosts ? chunk : hosts - h,
              tree ? 0 : 1, 1) < 0)
      return -1;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Reads every durations.* file: sorted durations in *out, failures. */
static int64_t read_durations(const struct bench_opts *o, double **out,
                              int64_t *failed) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "cat %s/durations.* 2>/dev/null", o->dir);
  FILE *f = popen(cmd, "r");
  double *d = malloc((size_t)o->ranks * sizeof(*d));
  int64_t n = 0;
  *failed = 0;
  double v;
  while (f != NULL && d != NULL && n < o->ranks && fscanf(f, "%lf", &v) == 1) {
    if (v < 0)
      (*failed)++;
    else
      d[n++] = v;
  }
  if (f != NULL)
    pclose(f);
  qsort(d, (size_t)n, sizeof(*d), cmp_double);
  *out = d;
  return n;
}

static double cpu_of(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 +
         (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
}

static void wait_children(struct run *rn) {
  int verbose = getenv("RDZV_BENCH_VERBOSE") != NULL;
  for (int i = 0; i < rn->n; i++) {
    int st;
    fclose(rn->ch[i].in);
    wait4(rn->ch[i].pid, &st, 0, &rn->ch[i].ru);
    fclose(rn->ch[i].out);
    if (verbose)
      fprintf(stderr, "  process %d (%s%s): cpu %.3f s, max RSS %ld KiB\n", i,
              rn->ch[i].is_root ? "root" : "nodes",
              rn->ch[i].holds_ranks ? "+ranks" : "", cpu_of(&rn->ch[i].ru),
              rn->ch[i].ru.ru_maxrss);
  }
}

struct result {
  const char *mode, *transport;
  int64_t ranks, hosts, fanout, ranks_per_host, failed, depth;
  double wall_s, p50_s, p99_s, cpu_s, projection_s, rtt_us;
  int64_t root_msgs, root_bytes, max_node_msgs, max_node_bytes;
  int64_t root_rss, node_rss, all_msgs;
  /* The root's frames and the most any node handled, without heartbeats
   * (pings and their replies), which a rendezvous of milliseconds would
   * not see. */
  int64_t root_work_msgs, max_node_work_msgs, all_work_msgs;
  /* The projection's inputs: CPU per frame (the rendezvous window's CPU,
   * heartbeats' included, over the frames without them) and the busiest
   * daemon's frames without heartbeats. */
  double proj_frame_s;
  int64_t proj_busiest_frames;
  double max_proc_cpu_s; /* the busiest process's CPU */
  /* With hooks: CPU from "go" to the statistics after "done" (servers;
   * drivers: their whole life, which is mostly that), total and of the
   * busiest process. */
  double win_cpu_s, max_proc_win_cpu_s;
  /* Bytes the nodes kept once per process (blob.h: interning); hosts
   * whose local rank 0 had its id table checked (in-process ranks), and
   * of them those that got other bytes than the others. */
  int64_t interned_bytes, ids_checked, ids_mismatch;
  /* Frames per second while every rank is done and connected (heartbeats):
   * at the root and at the busiest node, over --idle-s; -1: not measured. */
  double idle_root_per_s, idle_node_per_s;
};

/* --idle-s: how long to measure the idle traffic after each run (0: not). */
static double idle_s;

static void collect(struct run *rn, struct result *r) {
  int64_t node_rss_per = 0;
  char ref[2][20] = {"", ""}; /* the first process's table hashes */
  for (int i = 0; i < rn->n; i++) {
    struct child *c = &rn->ch[i];
    r->cpu_s += cpu_of(&c->ru);
    if (cpu_of(&c->ru) > r->max_proc_cpu_s)
      r->max_proc_cpu_s = cpu_of(&c->ru);
    double win =
        c->stats != NULL
            ? json_real_value(json_object_get(c->stats, "cpu_s")) - c->cpu_go
            : cpu_of(&c->ru);
    r->win_cpu_s += win;
    if (getenv("RDZV_BENCH_VERBOSE") != NULL)
      fprintf(stderr, "  process %d: cpu %.3f s from go\n", i, win);
    if (win > r->max_proc_win_cpu_s)
      r->max_proc_win_cpu_s = win;
    if (c->stats == NULL)
      continue;
    r->interned_bytes += jint(c->stats, "interned");
    r->ids_checked += jint(c->stats, "ids_checked");
    r->ids_mismatch += jint(c->stats, "ids_mismatch");
    for (size_t f = 0; f < 2; f++) { /* every process got the same table */
      const char *hs = json_string_value(
          json_array_get(json_object_get(c->stats, "ids_hash"), f));
      if (hs == NULL || strcmp(hs, "0000000000000000") == 0)
        continue;
      if (ref[f][0] == '\0')
        snprintf(ref[f], sizeof(ref[f]), "%s", hs);
      else if (strcmp(ref[f], hs) != 0)
        r->ids_mismatch++;
    }
    if (c->is_root) {
      r->root_msgs = jint(c->stats, "root_msgs");
      r->root_bytes = jint(c->stats, "root_bytes");
      r->root_rss = c->ru.ru_maxrss * 1024;
      r->root_work_msgs = jint(c->stats, "root_work_msgs");
    }
    if (jint(c->stats, "max_node_work_msgs") > r->max_node_work_msgs)
      r->max_node_work_msgs = jint(c->stats, "max_node_work_msgs");
    r->all_msgs += jint(c->stats, "root_msgs") + jint(c->stats, "node_msgs");
    r->all_work_msgs += jint(c->stats, "work_msgs");
    if (jint(c->stats, "max_node_msgs") > r->max_node_msgs) {
      r->max_node_msgs = jint(c->stats, "max_node_msgs");
      r->max_node_bytes = jint(c->stats, "max_node_bytes");
    }
    int64_t nodes = jint(c->stats, "nodes");
    if (nodes > 0 && c->ru.ru_maxrss * 1024 / nodes > node_rss_per)
      node_rss_per = c->ru.ru_maxrss * 1024 / nodes;
    json_decref(c->stats);
  }
  r->node_rss = node_rss_per;
}

/* Projection to a real cluster, one node per host, all hosts in parallel,
 * with the model that rdzv-bench --delay-tree checks against a delayed
 * tree (delay.c): 4 round trips (join, ids, host table, barrier) through
 * the network links from the deepest host's node to the root (a rank's
 * hop to its own node is local: 2 frames of CPU each way), plus the serial
 * work of the busiest daemon (its messages at the CPU cost per message
 * measured here: the servers' CPU from the ranks' start to their end, as
 * delay.c's model takes it; not their whole life, whose start-up of
 * thousands of daemons is no cost per message). Frames leave out
 * heartbeats: on this machine the rendezvous takes seconds and each node
 * pings its parent every --heartbeat-ms, but one of milliseconds sees
 * none. Their CPU stays in, spread over the other frames, so that more
 * pings can only make the projection worse. No combining interval: the bench
 * tells every node the tree's shape (--children, --local-ranks) and the
 * collectives their members, so no node on the critical path waits one. Flat:
 * one link. */
static void project(struct result *r, const struct bench_opts *o, int tree) {
  double cpu = r->win_cpu_s > 0 ? r->win_cpu_s : r->cpu_s;
  int64_t frames = r->all_work_msgs > 0 ? r->all_work_msgs : r->all_msgs;
  double c = frames > 0 ? cpu / (double)frames : 0;
  int64_t busiest = r->root_work_msgs > r->max_node_work_msgs
                        ? r->root_work_msgs
                        : r->max_node_work_msgs;
  if (busiest <= 0) /* no statistics: the frames as counted */
    busiest = r->root_msgs > r->max_node_msgs ? r->root_msgs : r->max_node_msgs;
  r->proj_frame_s = c;
  r->proj_busiest_frames = busiest;
  struct bench_model_in in = {
      .local_s = tree ? 4 * c : 0,
      .levels = tree ? (double)rdzv_tree_depth(r->hosts - 1, o->fanout) : 1,
      .rtt_s = r->rtt_us * 1e-6,
      .trips = 4,
      .frame_s = c,
      .path_frames = 4,
      .busiest_frames = (double)busiest,
      .interval_s = o->flush_ms / 1000.0,
      .interval_levels = 0};
  struct bench_model_out m;
  bench_delay_model(&in, &m);
  r->projection_s = m.total_s;
}

/* --etcd: each run's root keeps its state under a prefix of its own
 * (RDZV_BENCH_ETCD_PREFIX, read by its serve process), removed from etcd
 * after the run: a POST to the first endpoint's /v3/kv/deleterange, its
 * body from the etcd client's codec. */
static void etcd_cleanup(const char *prefix) {
  const char *eps = getenv("RDZV_BENCH_ETCD");
  if (eps == NULL || eps[0] == '\0')
    return;
  char url[600], from[300];
  size_t ul = strcspn(eps, ",");
  snprintf(url, sizeof(url), "%.*s/v3/kv/deleterange", (int)ul, eps);
  int fl = snprintf(from, sizeof(from), "%s/", prefix);
  char *body = rdzv_etcd_json_delete(from, (size_t)fl, NULL, 0, true, NULL);
  CURL *h = body != NULL ? curl_easy_init() : NULL;
  if (h == NULL) {
    free(body);
    return;
  }
  FILE *sink = fopen("/dev/null", "w");
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  if (sink != NULL)
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
  CURLcode rc = curl_easy_perform(h);
  if (rc != CURLE_OK)
    fprintf(stderr, "  etcd: removing %s/ failed: %s\n", prefix,
            curl_easy_strerror(rc));
  curl_easy_cleanup(h);
  if (sink != NULL)
    fclose(sink);
  free(body);
}

/* The delay tree's (delay.c) additions to a run, or NULL. */
static const struct bench_hooks *hooks;

static int run_one(struct bench_opts *base, int64_t n, int tree,
                   const char *transport, double rtt_us, struct result *r) {
  static int runs;
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "rdzv-bench/%d-%d", (int)getpid(), ++runs);
  setenv("RDZV_BENCH_ETCD_PREFIX", prefix, 1);
  struct run *rn = calloc(1, sizeof(*rn));
  if (rn == NULL)
    return -1;
  rn->o = *base;
  rn->o.ranks = n;
  rn->o.inproc = strcmp(transport, "in-process") == 0;
  /* The run's Unix sockets (one per node: 12,500 at 100,000 ranks) and
   * their lock files live on tmpfs where there is one: on ext4, creating
   * that many files where many were just deleted (the previous run's)
   * costs seconds of system CPU that vary from run to run, and is not the
   * service's work. */
  snprintf(rn->o.dir, sizeof(rn->o.dir), "/dev/shm/rdzv-bench-XXXXXX");
  if (access("/dev/shm", W_OK) != 0 || mkdtemp(rn->o.dir) == NULL) {
    snprintf(rn->o.dir, sizeof(rn->o.dir), "/tmp/rdzv-bench-XXXXXX");
    if (mkdtemp(rn->o.dir) == NULL) {
      free(rn);
      return -1;
    }
  }
  memset(r, 0, sizeof(*r));
  r->mode = tree ? "tree" : "flat";
  r->transport = transport;
  r->ranks = n;
  r->hosts = bench_hosts(&rn->o);
  r->fanout = tree ? rn->o.fanout : 0;
  r->ranks_per_host = rn->o.ranks_per_host;
  r->rtt_us = rtt_us;
  r->depth = tree ? rdzv_tree_depth(r->hosts - 1, rn->o.fanout) + 1 : 1;
  char line[4096];
  int rc = hooks != NULL ? hooks->started(&rn->o, hooks->arg) : 0;
  if (rc == 0)
    rc = start_processes(rn, tree);
  if (rc == 0)
    for (int i = 0; i < rn->n && rc == 0; i++)
      rc = expect(&rn->ch[i], "ready", line, sizeof(line));
  if (rc == 0 && !rn->o.inproc)
    rc = start_drivers(rn, tree);
  for (int i = 0; rc == 0 && i < rn->n; i++)
    if (rn->ch[i].holds_ranks && !rn->o.inproc)
      rc = expect(&rn->ch[i], "ready", line, sizeof(line));
  /* Each server's CPU before the ranks start (its daemons' start-up is
   * not the rendezvous): cpu_s counts the whole life, rendezvous_cpu_s
   * from here on. */
  for (int i = 0; rc == 0 && i < rn->n; i++) {
    if (rn->ch[i].holds_ranks && !rn->o.inproc)
      continue;
    fprintf(rn->ch[i].in, "stats\n");
    fflush(rn->ch[i].in);
    if (expect(&rn->ch[i], "stats ", line, sizeof(line)) == 0) {
      json_t *j = json_loads(line + 6, 0, NULL);
      rn->ch[i].cpu_go = json_real_value(json_object_get(j, "cpu_s"));
      if (getenv("RDZV_BENCH_VERBOSE") != NULL)
        fprintf(stderr,
                "  process %d at go: cpu %.3f s, peak RSS %" PRId64 " KiB\n", i,
                rn->ch[i].cpu_go, jint(j, "rss") / 1024);
      json_decref(j);
    }
  }
  if (hooks != NULL && hooks->go != NULL && rc == 0)
    hooks->go(&rn->o, hooks->arg);
  double t0 = bench_now();
  if (getenv("RDZV_BENCH_VERBOSE") != NULL)
    fprintf(stderr, "  go at %.6f (CLOCK_MONOTONIC)\n", t0);
  if (rc == 0)
    tell(rn, 2, "go");
  for (int i = 0; rc == 0 && i < rn->n; i++)
    if (rn->ch[i].holds_ranks)
      rc = expect(&rn->ch[i], "done", line, sizeof(line));
  double t1 = bench_now();
  if (getenv("RDZV_BENCH_VERBOSE") != NULL)
    fprintf(stderr, "  done at %.6f (CLOCK_MONOTONIC)\n", t1);
  /* Statistics first, with every rank still connected: a rank's
   * disconnect makes its node send an ABORT up the tree, and on a busy
   * machine those reached the root before its statistics were read (400
   * ranks: 824 root messages instead of about 24). */
  for (int i = 0; i < rn->n; i++) {
    int driver = rn->ch[i].holds_ranks && !rn->o.inproc;
    if (driver || rc != 0)
      continue;
    fprintf(rn->ch[i].in, "stats\n");
    fflush(rn->ch[i].in);
    if (expect(&rn->ch[i], "stats ", line, sizeof(line)) == 0)
      rn->ch[i].stats = json_loads(line + 6, 0, NULL);
  }
  /* An etcd-backed root: what etcd was asked for this rendezvous. */
  for (int i = 0; i < rn->n; i++) {
    json_t *e = rn->ch[i].is_root && rn->ch[i].stats != NULL
                    ? json_object_get(rn->ch[i].stats, "etcd")
                    : NULL;
    if (e != NULL)
      fprintf(stderr,
              "  etcd (%" PRId64 " ranks): %" PRId64 " requests, %" PRId64
              " bytes out, %" PRId64 " bytes in, %" PRId64 " batches, %" PRId64
              " txns, %" PRId64 " ops, %" PRId64 " failed\n",
              rn->o.ranks, jint(e, "requests"), jint(e, "bytes_out"),
              jint(e, "bytes_in"), jint(e, "batches"), jint(e, "txns"),
              jint(e, "ops"), jint(e, "errors"));
  }
  /* The idle cost: with every rank done and still connected, the tree
   * only keeps itself alive (heartbeats). */
  r->idle_root_per_s = r->idle_node_per_s = -1;
  if (rc == 0 && idle_s > 0) {
    usleep((useconds_t)(idle_s * 1e6));
    int64_t root_d = 0, node_d = 0;
    for (int i = 0; i < rn->n; i++) {
      if (rn->ch[i].holds_ranks && !rn->o.inproc)
        continue;
      fprintf(rn->ch[i].in, "stats\n");
      fflush(rn->ch[i].in);
      if (expect(&rn->ch[i], "stats ", line, sizeof(line)) != 0)
        continue;
      json_t *j = json_loads(line + 6, 0, NULL);
      if (rn->ch[i].is_root)
        root_d = jint(j, "root_delta");
      if (jint(j, "max_node_delta") > node_d)
        node_d = jint(j, "max_node_delta");
      json_decref(j);
    }
    /* The frames of the first "stats" exchange itself count one way or
     * the other: a few, against thousands. */
    r->idle_root_per_s = (double)root_d / idle_s;
    r->idle_node_per_s = (double)node_d / idle_s;
  }
  if (hooks != NULL)
    hooks->finished(&rn->o, rc, hooks->arg);
  tell(rn, 1, "exit"); /* drivers disconnect */
  tell(rn, 0, "exit");
  wait_children(rn);
  etcd_cleanup(prefix);
  double *d = NULL;
  int64_t ok = read_durations(&rn->o, &d, &r->failed);
  r->failed += n - ok - r->failed > 0 ? n - ok - r->failed : 0;
  if (ok > 0) {
    r->p50_s = d[(ok - 1) / 2];
    r->p99_s = d[(int64_t)((double)(ok - 1) * 0.99)];
    r->wall_s = d[ok - 1];
  } else {
    r->wall_s = t1 - t0;
  }
  free(d);
  collect(rn, r);
  if (r->ids_mismatch > 0) {
    fprintf(stderr,
            "rdzv-bench: %" PRId64 " of %" PRId64 " hosts checked "
            "got another id table than the others\n",
            r->ids_mismatch, r->ids_checked);
    rc = rc ? rc : -1;
  }
  project(r, &rn->o, tree);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", rn->o.dir);
  if (system(cmd) != 0)
    rc = rc ? rc : -1;
  free(rn);
  return rc;
}

int bench_run_tree(const struct bench_opts *base, int64_t ranks,
                   const struct bench_hooks *h, struct bench_tree_run *out) {
  struct bench_opts o = *base;
  struct result r;
  hooks = h;
  int rc = run_one(&o, ranks, 1, "sockets", 0, &r);
  hooks = NULL;
  *out = (struct bench_tree_run){.wall_s = r.wall_s,
                                 .p50_s = r.p50_s,
                                 .p99_s = r.p99_s,
                                 .cpu_s = r.cpu_s,
                                 .max_proc_cpu_s = r.max_proc_cpu_s,
                                 .win_cpu_s = r.win_cpu_s,
                                 .max_proc_win_cpu_s = r.max_proc_win_cpu_s,
                                 .depth = r.depth,
                                 .failed = r.failed,
                                 .hosts = r.hosts,
                                 .root_msgs = r.root_msgs,
                                 .max_node_msgs = r.max_node_msgs,
                                 .max_node_bytes = r.max_node_bytes,
                                 .all_msgs = r.all_msgs};
  return rc;
}

static json_t *result_json(const struct result *r) {
  return json_pack(
      "{s:s,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,"
      "s:I,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:f,s:I}",
      "mode", r->mode, "ranks", (json_int_t)r->ranks, "hosts",
      (json_int_t)r->hosts, "fanout", (json_int_t)r->fanout, "ranks_per_host",
      (json_int_t)r->ranks_per_host, "wall_s", r->wall_s, "p50_s", r->p50_s,
      "p99_s", r->p99_s, "root_msgs", (json_int_t)r->root_msgs, "root_bytes",
      (json_int_t)r->root_bytes, "max_node_msgs", (json_int_t)r->max_node_msgs,
      "max_node_bytes", (json_int_t)r->max_node_bytes, "root_rss_bytes",
      (json_int_t)r->root_rss, "node_rss_bytes", (json_int_t)r->node_rss,
      "transport", r->transport, "failed", (json_int_t)r->failed, "depth",
      (json_int_t)r->depth, "cpu_s", r->cpu_s, "rendezvous_cpu_s", r->win_cpu_s,
      "max_process_rendezvous_cpu_s", r->max_proc_win_cpu_s, "projection_s",
      r->projection_s, "projection_rtt_us", r->rtt_us, "interned_bytes",
      (json_int_t)r->interned_bytes, "id_tables_checked",
      (json_int_t)r->ids_checked, "id_table_mismatches",
      (json_int_t)r->ids_mismatch, "root_work_msgs",
      (json_int_t)r->root_work_msgs, "max_node_work_msgs",
      (json_int_t)r->max_node_work_msgs, "projection_frame_us",
      r->proj_frame_s * 1e6, "projection_busiest_frames",
      (json_int_t)r->proj_busiest_frames);
}

/* result_json and, when measured, the idle frame rates. */
static json_t *result_json_all(const struct result *r) {
  json_t *j = result_json(r);
  if (r->idle_root_per_s >= 0) {
    json_object_set_new(j, "idle_root_frames_per_s",
                        json_real(r->idle_root_per_s));
    json_object_set_new(j, "idle_max_node_frames_per_s",
                        json_real(r->idle_node_per_s));
  }
  return j;
}

static void print_row(const struct result *r) {
  printf("%-4s %7" PRId64 " ranks %6" PRId64 " hosts %-10s wall %7.3f s  "
         "p50 %7.3f  p99 %7.3f  root msgs %9" PRId64 "  busiest node %7" PRId64
         "  root RSS %5.1f MiB  failed %" PRId64 "  projected %.3f s\n",
         r->mode, r->ranks, r->hosts, r->transport, r->wall_s, r->p50_s,
         r->p99_s, r->root_msgs, r->max_node_msgs,
         (double)r->root_rss / 1048576.0, r->failed, r->projection_s);
  if (r->idle_root_per_s >= 0)
    printf("     idle (ranks done, connected): root %.1f frames/s, busiest "
           "node %.1f frames/s\n",
           r->idle_root_per_s, r->idle_node_per_s);
  fflush(stdout);
}

/* Three panels against N (log-log), tree against flat: the root's
 * messages, the root's bytes, and the time: projected on a cluster (the
 * model that --delay-tree checks) beside what this machine measured,
 * labelled as such; gnuplot's png terminal. */
static int plot(const char *png, const struct result *rs, int n) {
  char dat[] = "/tmp/rdzv-bench-plot-XXXXXX";
  int fd = mkstemp(dat);
  if (fd < 0)
    return -errno;
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(dat);
    return -1;
  }
  /* Two series, tree and flat, whatever the rank hop's transport. */
  static const char *const modes[2] = {"tree", "flat"};
  for (int m = 0; m < 2; m++) {
    fprintf(f, "# %s: ranks wall_s root_msgs root_bytes projection_s\n",
            modes[m]);
    int any = 0;
    for (int i = 0; i < n; i++)
      if (strcmp(rs[i].mode, modes[m]) == 0) {
        fprintf(f, "%" PRId64 " %f %" PRId64 " %" PRId64 " %f\n", rs[i].ranks,
                rs[i].wall_s, rs[i].root_msgs, rs[i].root_bytes,
                rs[i].projection_s);
        any = 1;
      }
    if (!any)
      fprintf(f, "NaN NaN NaN NaN NaN\n");
    fprintf(f, "\n\n");
  }
  fclose(f);
  FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
  if (g == NULL) {
    unlink(dat);
    return -errno;
  }
  fprintf(g,
          "set terminal png size 1500,470 noenhanced\nset output '%s'\n"
          "set multiplot layout 1,3 title 'rdzv-bench: the rendezvous "
          "through the tree and flat (every rank to one server)'\n"
          "set logscale xy\nset grid\nset key top left font ',9'\n"
          "set xlabel 'ranks'\nset ylabel 'messages at the root'\n"
          "plot '%s' index 0 using 1:3 with linespoints lt 1 pt 7 "
          "title 'tree', '' index 1 using 1:3 with linespoints lt 2 pt 7 "
          "title 'flat'\n"
          "set ylabel 'bytes in and out of the root'\n"
          "plot '%s' index 0 using 1:4 with linespoints lt 1 pt 7 "
          "title 'tree', '' index 1 using 1:4 with linespoints lt 2 pt 7 "
          "title 'flat'\n"
          "set ylabel 'seconds'\nset key bottom right font ',8'\n"
          "plot '%s' index 0 using 1:5 with linespoints lt 1 pt 7 "
          "title 'tree, projected on a cluster', "
          "'' index 1 using 1:5 with linespoints lt 2 pt 7 "
          "title 'flat, projected on a cluster', "
          "'' index 0 using 1:2 with linespoints lt 1 pt 6 dt 2 "
          "title 'tree, measured on this machine (every daemon on it)', "
          "'' index 1 using 1:2 with linespoints lt 2 pt 6 dt 2 "
          "title 'flat, measured on this machine'\n"
          "unset multiplot\n",
          png, dat, dat, dat);
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}

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
  int64_t ns[16] = {1000, 10000, 100000};
  int nn = 3, modes = 3, ranks_given = 0;
  const char *json_path = NULL, *png = NULL, *transport = "auto";
  int64_t sockets_max = 20000;
  double rtt_us = 50;
  struct bench_delay_opts dl = {.delays_us = {25, 250},
                                .ndelays = 2,
                                .waits_join = 0,
                                .waits_ids = 0,
                                .waits_barrier = 0,
                                .waits_add = 0};
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
    if (strcmp(k, "--ranks") == 0) {
      nn = parse_list(v, ns, 16);
      ranks_given = 1;
    } else if (strcmp(k, "--ranks-per-host") == 0) {
      o.ranks_per_host = strtoll(v, &end, 10);
    } else if (strcmp(k, "--fanout") == 0) {
      o.fanout = strtoll(v, &end, 10);
    } else if (strcmp(k, "--ranks-per-root") == 0) {
      o.ranks_per_root = strtoll(v, &end, 10);
    } else if (strcmp(k, "--mode") == 0) {
      modes = !strcmp(v, "tree")   ? 1
              : !strcmp(v, "flat") ? 2
              : !strcmp(v, "both") ? 3
              : !strcmp(v, "none") ? 4
                                   : 0;
    } else if (strcmp(k, "--json") == 0) {
      json_path = v;
    } else if (strcmp(k, "--plot") == 0) {
      png = v;
    } else if (strcmp(k, "--transport") == 0) {
      transport = v;
    } else if (strcmp(k, "--sockets-max") == 0) {
      sockets_max = strtoll(v, &end, 10);
    } else if (strcmp(k, "--rtt-us") == 0) {
      rtt_us = strtod(v, &end);
    } else if (strcmp(k, "--flush-ms") == 0) {
      long long f = strtoll(v, &end, 10);
      o.flush_ms = f >= 0 && f <= 10000 ? (uint32_t)f : UINT32_MAX;
    } else if (strcmp(k, "--timeout") == 0) {
      o.timeout_s = strtod(v, &end);
    } else if (strcmp(k, "--heartbeat-ms") == 0) {
      long long hb = strtoll(v, &end, 10);
      /* Above a third of the bench's 60 s liveness timeout a node pings
       * at that third anyway (rdzvd's rule), so more is refused. */
      o.heartbeat_ms = hb >= 1 && hb <= 20000 ? (uint32_t)hb : 0;
      if (o.heartbeat_ms == 0)
        end = (char *)v; /* out of range: the usage */
    } else if (strcmp(k, "--etcd") == 0) {
      /* The root persists to etcd at these URLs (its children read it). */
      setenv("RDZV_BENCH_ETCD", v, 1);
      end = (char *)v + strlen(v);
    } else if (strcmp(k, "--idle-s") == 0) {
      idle_s = strtod(v, &end);
    } else if (strcmp(k, "--delay-tree") == 0) {
      dl.hosts = strtoll(v, &end, 10);
      if (dl.hosts < 2 || dl.hosts > 4000)
        end = (char *)"bad"; /* one relay process, a pair per host */
    } else if (strcmp(k, "--delay-us") == 0) {
      /* parse_list refuses 0: the undelayed link is measured anyway */
      dl.ndelays = parse_list(v, dl.delays_us, 8);
      if (dl.ndelays < 1)
        end = (char *)"bad";
    } else if (strcmp(k, "--model-waits") == 0) {
      if (sscanf(v, "%lf,%lf,%lf,%lf", &dl.waits_join, &dl.waits_ids,
                 &dl.waits_barrier, &dl.waits_add) != 4 ||
          !(dl.waits_join >= 0 && dl.waits_join <= 1) ||
          !(dl.waits_ids >= 0 && dl.waits_ids <= 1) ||
          !(dl.waits_barrier >= 0 && dl.waits_barrier <= 1) ||
          !(dl.waits_add >= 0 && dl.waits_add <= 1))
        end = (char *)"bad";
      else
        end = (char *)v + strlen(v);
    } else {
      fprintf(stderr, "rdzv-bench: unknown option %s\n", k);
      usage();
      return 2;
    }
    int bad_transport = strcmp(transport, "auto") != 0 &&
                        strcmp(transport, "sockets") != 0 &&
                        strcmp(transport, "inproc") != 0;
    if ((end != NULL && *end != '\0') || nn < 1 || modes == 0 ||
        o.ranks_per_host < 1 || o.fanout < 1 || o.ranks_per_root < 1 ||
        bad_transport || o.flush_ms == UINT32_MAX || !(o.timeout_s > 0) ||
        !(rtt_us >= 0) || !(idle_s >= 0 && idle_s <= 3600) || sockets_max < 1) {
      fprintf(stderr, "rdzv-bench: bad value '%s' for %s\n", v, k);
      usage();
      return 2;
    }
  }
  if (dl.hosts > 0) {
    dl.rtt_us = rtt_us;
    dl.json_path = json_path;
    return bench_delay_main(&o, &dl);
  }
  /* One flat server holds every rank's socket: keep it under the
   * 20,000-open-files cap of this kind of machine. */
  for (int i = 0; i < nn; i++)
    if ((modes & 2) && ns[i] > 18000 &&
        (strcmp(transport, "sockets") == 0 ||
         (strcmp(transport, "auto") == 0 && ns[i] <= sockets_max))) {
      fprintf(stderr,
              "rdzv-bench: flat mode over sockets at %" PRId64
              " ranks needs more than the ~20,000 open files one "
              "process may hold; use --transport inproc or fewer "
              "ranks\n",
              ns[i]);
      return 2;
    }
  if (!ranks_given && !bench_inc_given())
    bench_inc_default();
  /* Say what runs, so a bare `rdzv-bench` is not a silent minute. */
  if (modes != 4) {
    fprintf(stderr, "rdzv-bench: %s at",
            modes == 3   ? "tree and flat"
            : modes == 1 ? "tree"
                         : "flat");
    for (int i = 0; i < nn; i++)
      fprintf(stderr, "%s %" PRId64, i ? "," : "", ns[i]);
    fprintf(stderr,
            " ranks, %" PRId64 " ranks per host, fan-out %" PRId64
            " (rdzv-bench --help for the options)\n",
            (int64_t)o.ranks_per_host, (int64_t)o.fanout);
  }
  signal(SIGPIPE, SIG_IGN);
  struct result rs[32];
  int nr = 0, bad = 0;
  json_t *all = json_array();
  for (int i = 0; i < nn; i++) {
    const char *t = strcmp(transport, "auto") == 0
                        ? (ns[i] <= sockets_max ? "sockets" : "in-process")
                    : strcmp(transport, "inproc") == 0 ? "in-process"
                                                       : "sockets";
    for (int m = 0; m < 2; m++) {
      if (!(modes & (1 << m)))
        continue;
      int rc = run_one(&o, ns[i], m == 0, t, rtt_us, &rs[nr]);
      print_row(&rs[nr]);
      json_array_append_new(all, result_json_all(&rs[nr]));
      bad |= rc != 0 || rs[nr].failed != 0;
      nr++;
    }
  }
  if (bench_inc_run(&o, all, png) < 0) /* incumbents.c; nothing if none */
    bad = 1;
  if (json_path != NULL && json_dump_file(all, json_path, JSON_INDENT(1)) < 0) {
    fprintf(stderr, "rdzv-bench: cannot write %s: %s\n", json_path,
            strerror(errno));
    bad = 1;
  }
  json_decref(all);
  if (png != NULL && nr > 0 && plot(png, rs, nr) < 0) {
    fprintf(stderr, "rdzv-bench: gnuplot failed to write %s\n", png);
    bad = 1;
  }
  return bad ? 1 : 0;
}
