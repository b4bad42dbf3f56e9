/* rdzv-bench's main job: one run. It owns the run's processes (the
 * servers and socket rank drivers it starts as `rdzv-bench --serve` and
 * `--drive`, and talks to over pipes), the measurement (the clock from
 * "go" to every "done", the statistics, the idle traffic), and the
 * result: the ranks' durations, the processes' CPU and memory, and the
 * projection to a cluster. It calls serve.c and drive.c only through
 * those processes, delay.c's model (bench_delay_model), its hooks
 * (bench_run_tree), and the etcd client's codec; main.c runs it, and
 * run_report.c prints what it fills (run_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <curl/curl.h>
#include <jansson.h>

#include "store/etcd/etcd_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/topo.h"
#include "tools/bench/bench.h"
#include "tools/bench/delay.h"
#include "tools/bench/rank.h"
#include "tools/bench/run_int.h"

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

double bench_idle_s;

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

/* A run's record: the etcd prefix of its root (in prefix, and in the
 * environment its serve processes read), the options at n ranks, the
 * run's directory, and what *r knows before the run starts. NULL if it
 * cannot be made. */
static struct run *run_new(struct bench_opts *base, int64_t n, int tree,
                           const char *transport, double rtt_us,
                           struct result *r, char *prefix, size_t prefix_n) {
  static int runs;
  snprintf(prefix, prefix_n, "rdzv-bench/%d-%d", (int)getpid(), ++runs);
  setenv("RDZV_BENCH_ETCD_PREFIX", prefix, 1);
  struct run *rn = calloc(1, sizeof(*rn));
  if (rn == NULL)
    return NULL;
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
      return NULL;
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
  return rn;
}

/* The set-up: the hooks' start, the servers, then (over sockets) the rank
 * drivers, each process ready. 0 or nonzero. */
static int run_start(struct run *rn, int tree) {
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
  return rc;
}

/* Each server's CPU before the ranks start (its daemons' start-up is
 * not the rendezvous): cpu_s counts the whole life, rendezvous_cpu_s
 * from here on. */
static void read_cpu_go(struct run *rn) {
  char line[4096];
  for (int i = 0; i < rn->n; i++) {
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
}

/* The measurement: the hooks' go, "go" to every process, and every rank
 * holder's "done"; *t0 and *t1 the clock at each. rc: the run's status so
 * far (nonzero: nothing is sent or awaited); returns it. */
static int run_measure(struct run *rn, int rc, double *t0, double *t1) {
  char line[4096];
  if (hooks != NULL && hooks->go != NULL && rc == 0)
    hooks->go(&rn->o, hooks->arg);
  *t0 = bench_now();
  if (getenv("RDZV_BENCH_VERBOSE") != NULL)
    fprintf(stderr, "  go at %.6f (CLOCK_MONOTONIC)\n", *t0);
  if (rc == 0)
    tell(rn, 2, "go");
  for (int i = 0; rc == 0 && i < rn->n; i++)
    if (rn->ch[i].holds_ranks)
      rc = expect(&rn->ch[i], "done", line, sizeof(line));
  *t1 = bench_now();
  if (getenv("RDZV_BENCH_VERBOSE") != NULL)
    fprintf(stderr, "  done at %.6f (CLOCK_MONOTONIC)\n", *t1);
  return rc;
}

/* Statistics first, with every rank still connected: a rank's
 * disconnect makes its node send an ABORT up the tree, and on a busy
 * machine those reached the root before its statistics were read (400
 * ranks: 824 root messages instead of about 24). */
static void read_stats(struct run *rn, int rc) {
  char line[4096];
  for (int i = 0; i < rn->n; i++) {
    int driver = rn->ch[i].holds_ranks && !rn->o.inproc;
    if (driver || rc != 0)
      continue;
    fprintf(rn->ch[i].in, "stats\n");
    fflush(rn->ch[i].in);
    if (expect(&rn->ch[i], "stats ", line, sizeof(line)) == 0)
      rn->ch[i].stats = json_loads(line + 6, 0, NULL);
  }
}

/* An etcd-backed root: what etcd was asked for this rendezvous. */
static void print_etcd(const struct run *rn) {
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
}

/* The idle cost: with every rank done and still connected, the tree
 * only keeps itself alive (heartbeats). */
static void measure_idle(struct run *rn, int rc, struct result *r) {
  char line[4096];
  r->idle_root_per_s = r->idle_node_per_s = -1;
  if (rc == 0 && bench_idle_s > 0) {
    usleep((useconds_t)(bench_idle_s * 1e6));
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
    r->idle_root_per_s = (double)root_d / bench_idle_s;
    r->idle_node_per_s = (double)node_d / bench_idle_s;
  }
}

/* The ranks' times from their durations files (wall: the slowest rank;
 * with none, t1 - t0), and the ranks that failed or never reported. */
static void read_times(struct run *rn, int64_t n, double t0, double t1,
                       struct result *r) {
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
}

/* The end of a run, its processes gone: the result (times, statistics,
 * the id tables' check, the projection), the run's directory removed, rn
 * freed. Returns rc, or -1 if it was 0 and something failed here. */
static int run_end(struct run *rn, int64_t n, int tree, double t0, double t1,
                   int rc, struct result *r) {
  read_times(rn, n, t0, t1, r);
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

int bench_run_one(struct bench_opts *base, int64_t n, int tree,
                  const char *transport, double rtt_us, struct result *r) {
  char prefix[64];
  struct run *rn =
      run_new(base, n, tree, transport, rtt_us, r, prefix, sizeof(prefix));
  if (rn == NULL)
    return -1;
  int rc = run_start(rn, tree);
  if (rc == 0)
    read_cpu_go(rn);
  double t0, t1;
  rc = run_measure(rn, rc, &t0, &t1);
  read_stats(rn, rc);
  print_etcd(rn);
  measure_idle(rn, rc, r);
  if (hooks != NULL)
    hooks->finished(&rn->o, rc, hooks->arg);
  tell(rn, 1, "exit"); /* drivers disconnect */
  tell(rn, 0, "exit");
  wait_children(rn);
  etcd_cleanup(prefix);
  return run_end(rn, n, tree, t0, t1, rc, r);
}

int bench_run_tree(const struct bench_opts *base, int64_t ranks,
                   const struct bench_hooks *h, struct bench_tree_run *out) {
  struct bench_opts o = *base;
  struct result r;
  hooks = h;
  int rc = bench_run_one(&o, ranks, 1, "sockets", 0, &r);
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
