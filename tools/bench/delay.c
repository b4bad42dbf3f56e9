/* rdzv-bench --delay-tree HOSTS --delay-us D[,D...]: the projection
 * checked against latency. This kernel has no netem, so every
 * node-to-parent link of the tree goes through tools/delay-relay, which
 * holds each chunk D microseconds each way. For each D:
 *   1. the link: a ping-pong of 64-byte messages between two processes,
 *      straight and through the relay (at 0 and at D): the relay's own
 *      cost, and the round trip of one delayed link (rtt_link);
 *   2. the tree: HOSTS nodes (fan-out --fanout, --ranks-per-host ranks
 *      each, over sockets) running the whole rendezvous, relays on every
 *      uplink; then, with the tree up and idle, lone sequential round
 *      trips from a client of the deepest node: a get of a missing
 *      mutable key (forwarded at once by every node: d links) and an add
 *      (combined at each node: d links and, today, d combining
 *      intervals), and the same get at the root (no link);
 *   3. the model (bench_delay_model) for the same shape and delay, and
 *      its projection to 100,000 and 1,000,000 ranks at --rtt-us.
 * It prints one row per delay and writes them, with the projections, as
 * JSON (docs/benchmarks.md, "The projection checked against latency"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdzv/rdzv.h"
#include "rendezvous/topo.h"
#include "tools/bench/bench.h"
#include "tools/bench/delay.h"
#include "tools/bench/rank.h"

#define PING_BYTES 64
#define PING_COUNT 2000
#define LONE_COUNT 200

struct relay_proc {
  pid_t pid;
  FILE *out;
  json_t *stats; /* its "stats" line at exit */
};

/* What one delay measured. */
struct delay_row {
  int64_t delay_us;
  double link_direct_us, link_relay0_us, link_us; /* ping-pong p50s */
  double link_us_p99;
  struct bench_tree_run tree;
  double get_root_us, get_us, add_us; /* lone round trips, medians */
  double get_us_p90, add_us_p90;
  /* Lone sets of a key no node holds a copy of, and of one every host's
   * node holds (each waits for the invalidations down and back). */
  double set_us, set_us_p90, set_held_us, set_held_us_p90;
  double set_us_p99, set_held_us_p99;
  int lone_failed;
  double relay_cpu_s, relay_late_p50_us, relay_late_p99_us;
  double relay_win_cpu_s; /* the relay's CPU during the rendezvous */
  int64_t relay_chunks;
  struct bench_model_out model_rdzv, model_get, model_add;
};

/* ---- the relay process ------------------------------------------------- */

static void relay_path(char *out, size_t n) {
  const char *env = getenv("RDZV_DELAY_RELAY");
  if (env != NULL && env[0] != '\0') {
    snprintf(out, n, "%s", env);
    return;
  }
  /* Built beside rdzv-bench: bazel-bin/tools/delay-relay. */
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[k > 0 ? k : 0] = '\0';
  snprintf(out, n, "%s/../delay-relay", dirname(self));
}

/* Starts delay-relay with a pairs file; waits for its "ready". */
static int relay_start(struct relay_proc *rp, int64_t delay_us,
                       const char *pairs) {
  char exe[PATH_MAX + 32], d[32];
  relay_path(exe, sizeof(exe));
  snprintf(d, sizeof(d), "%" PRId64, delay_us);
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  memset(rp, 0, sizeof(*rp));
  rp->pid = fork();
  if (rp->pid < 0)
    return -errno;
  if (rp->pid == 0) {
    dup2(out[1], 1);
    /* --realtime: the wire goes before the daemons on a busy machine. */
    char *argv[] = {exe,           "--delay-us", d,   "--pairs",
                    (char *)pairs, "--realtime", NULL};
    execv(exe, argv);
    fprintf(stderr, "rdzv-bench: cannot run %s: %s (set RDZV_DELAY_RELAY)\n",
            exe, strerror(errno));
    _exit(127);
  }
  close(out[1]);
  rp->out = fdopen(out[0], "r");
  char line[512];
  if (rp->out == NULL || fgets(line, sizeof(line), rp->out) == NULL ||
      strncmp(line, "ready", 5) != 0)
    return -1;
  return 0;
}

/* SIGUSR1: its statistics now (NULL if it does not answer). */
static json_t *relay_poll(struct relay_proc *rp) {
  char line[1024];
  if (rp->pid <= 0 || kill(rp->pid, SIGUSR1) < 0)
    return NULL;
  while (fgets(line, sizeof(line), rp->out) != NULL)
    if (strncmp(line, "stats ", 6) == 0)
      return json_loads(line + 6, 0, NULL);
  return NULL;
}

/* SIGTERM; reads its last statistics line. */
static void relay_stop(struct relay_proc *rp) {
  if (rp->pid <= 0)
    return;
  kill(rp->pid, SIGTERM);
  char line[1024];
  while (rp->out != NULL && fgets(line, sizeof(line), rp->out) != NULL)
    if (strncmp(line, "stats ", 6) == 0) {
      json_decref(rp->stats);
      rp->stats = json_loads(line + 6, 0, NULL);
    }
  if (rp->out != NULL)
    fclose(rp->out);
  rp->out = NULL;
  waitpid(rp->pid, NULL, 0);
  rp->pid = 0;
}

/* ---- the link: ping-pong ----------------------------------------------- */

static int unix_socket(const char *path, int do_listen) {
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int rc = do_listen ? bind(fd, (struct sockaddr *)&un, sizeof(un))
                     : connect(fd, (struct sockaddr *)&un, sizeof(un));
  if (rc == 0 && do_listen)
    rc = listen(fd, 4);
  if (rc < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int full_io(int fd, uint8_t *p, size_t n, int wr) {
  for (size_t done = 0; done < n;) {
    ssize_t k =
        wr ? write(fd, p + done, n - done) : read(fd, p + done, n - done);
    if (k <= 0 && !(k < 0 && errno == EINTR))
      return -1;
    if (k > 0)
      done += (size_t)k;
  }
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Round trips of PING_BYTES through addr (the echo's own socket, or a
 * relay in front of it): p50 and p99 in microseconds. */
static int pingpong(const char *path, double *p50, double *p99) {
  int fd = -1;
  for (int i = 0; i < 200 && fd < 0; i++) {
    fd = unix_socket(path, 0);
    if (fd < 0)
      usleep(5000);
  }
  if (fd < 0)
    return -1;
  static double t[PING_COUNT];
  uint8_t buf[PING_BYTES];
  memset(buf, 'p', sizeof(buf));
  int rc = 0;
  for (int i = 0; i < PING_COUNT + 100 && rc == 0; i++) {
    double t0 = bench_now();
    rc = full_io(fd, buf, sizeof(buf), 1);
    if (rc == 0)
      rc = full_io(fd, buf, sizeof(buf), 0);
    if (i >= 100) /* after a warm-up */
      t[i - 100] = (bench_now() - t0) * 1e6;
  }
  close(fd);
  if (rc < 0)
    return -1;
  qsort(t, PING_COUNT, sizeof(t[0]), cmp_d);
  *p50 = t[PING_COUNT / 2];
  *p99 = t[PING_COUNT * 99 / 100];
  return 0;
}

/* A child process echoing what each connection sends (one at a time). */
static pid_t echo_start(const char *path) {
  unlink(path);
  int lfd = unix_socket(path, 1);
  if (lfd < 0)
    return -1;
  pid_t pid = fork();
  if (pid != 0) {
    close(lfd);
    return pid;
  }
  for (;;) {
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
      _exit(0);
    uint8_t buf[4096];
    ssize_t k;
    while ((k = read(c, buf, sizeof(buf))) > 0)
      if (full_io(c, buf, (size_t)k, 1) < 0)
        break;
    close(c);
  }
}

/* The link alone: straight, through a relay at 0 and at D. */
static int measure_link(struct delay_row *row) {
  char dir[] = "/tmp/rdzv-link-XXXXXX";
  if (mkdtemp(dir) == NULL)
    return -1;
  char echo[64], lis[64], pairs[64], spec[160];
  snprintf(echo, sizeof(echo), "%s/echo.sock", dir);
  snprintf(lis, sizeof(lis), "%s/relay.sock", dir);
  snprintf(pairs, sizeof(pairs), "%s/pairs", dir);
  snprintf(spec, sizeof(spec), "unix:%s=unix:%s\n", lis, echo);
  FILE *f = fopen(pairs, "w");
  pid_t ep = echo_start(echo);
  int rc = f != NULL && ep > 0 ? 0 : -1;
  if (f != NULL) {
    fputs(spec, f);
    fclose(f);
  }
  double p99;
  if (rc == 0)
    rc = pingpong(echo, &row->link_direct_us, &p99);
  int64_t ds[2] = {0, row->delay_us};
  for (int i = 0; i < 2 && rc == 0; i++) {
    struct relay_proc rp;
    rc = relay_start(&rp, ds[i], pairs);
    if (rc == 0)
      rc = pingpong(lis, i == 0 ? &row->link_relay0_us : &row->link_us,
                    i == 0 ? &p99 : &row->link_us_p99);
    relay_stop(&rp);
    json_decref(rp.stats);
  }
  if (ep > 0) {
    kill(ep, SIGTERM);
    waitpid(ep, NULL, 0);
  }
  unlink(echo);
  unlink(pairs);
  unlink(lis);
  rmdir(dir);
  return rc;
}

/* ---- the tree ---------------------------------------------------------- */

struct tree_ctx {
  struct delay_row *row;
  struct relay_proc relay;
  double cpu_go; /* the relay's CPU when the ranks start */
};

static double jreal(json_t *j, const char *k);

static void on_go(const struct bench_opts *o, void *arg) {
  struct tree_ctx *tc = arg;
  json_t *s = relay_poll(&tc->relay);
  (void)o;
  tc->cpu_go = s != NULL ? jreal(s, "cpu_s") : 0;
  json_decref(s);
}

/* Every host's uplink through the relay: <dir>/up-h<N>.sock forwards to
 * its parent's socket. */
static int on_started(const struct bench_opts *o, void *arg) {
  struct tree_ctx *tc = arg;
  char pairs[200], up[200], parent[200];
  snprintf(pairs, sizeof(pairs), "%s/relay-pairs", o->dir);
  FILE *f = fopen(pairs, "w");
  if (f == NULL)
    return -1;
  int64_t hosts = bench_hosts(o);
  for (int64_t h = 0; h < hosts; h++) {
    int64_t p = rdzv_tree_parent(h, hosts, o->fanout);
    bench_uplink_path(o, h, up, sizeof(up));
    if (p == RDZV_TREE_ROOT)
      bench_root_path(o, parent, sizeof(parent));
    else
      bench_node_path(o, p, parent, sizeof(parent));
    fprintf(f, "unix:%s=unix:%s\n", up, parent);
  }
  fclose(f);
  return relay_start(&tc->relay, tc->row->delay_us, pairs);
}

static int cmp_u(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* LONE_COUNT sequential round trips of one kind through the node (or
 * root) at path: median and p90 in microseconds; -1 when one failed. */
static int lone_ops(const struct bench_opts *o, const char *path, int add,
                    double *p50, double *p90) {
  char addr[220];
  snprintf(addr, sizeof(addr), "unix:%s", path);
  struct rdzv_client_opts co;
  rdzv_client_opts_init(&co);
  co.addr = addr;
  co.job_id = o->job;
  rdzv_client_t *c = NULL;
  if (rdzv_client_create(&co, &c) < 0)
    return -1;
  static double t[LONE_COUNT];
  int rc = 0;
  for (int i = 0; i < LONE_COUNT + 10 && rc == 0; i++) {
    double t0 = bench_now();
    if (add) {
      rc = rdzv_store_add(c, "lone/counter", 1, NULL, 10);
    } else {
      void *v = NULL;
      size_t n = 0;
      char key[48];
      /* A key never read before: the node holds no copy of it (not even
       * of its absence), so the read goes up to the root. */
      snprintf(key, sizeof(key), "lone/missing/%d", i);
      rc = rdzv_store_get(c, key, &v, &n, 10);
      rc = rc == RDZV_ENOKEY ? 0 : -1; /* absent: the answer expected */
      rdzv_free(v);
    }
    if (i >= 10) /* the first ones connect */
      t[i - 10] = (bench_now() - t0) * 1e6;
  }
  rdzv_client_destroy(c);
  if (rc < 0)
    return -1;
  qsort(t, LONE_COUNT, sizeof(t[0]), cmp_u);
  *p50 = t[LONE_COUNT / 2];
  *p90 = t[LONE_COUNT * 9 / 10];
  return 0;
}

/* LONE_COUNT sequential sets from the deepest host's node. held: before
 * each, a client on every host's node reads the key, so that every node
 * holds a copy (the tree's daemons grant again at once: no cooldown) and
 * the set is answered only once all of them are invalidated; else a key
 * nobody reads. Median, p90 and p99 in microseconds; -1 when one
 * failed. */
static int lone_sets(const struct bench_opts *o, int held, double *p50,
                     double *p90, double *p99) {
  int64_t nh = bench_hosts(o);
  rdzv_client_t **cs = calloc((size_t)nh, sizeof(*cs));
  if (cs == NULL)
    return -1;
  int rc = 0;
  for (int64_t h = 0; h < nh && rc == 0; h++) {
    char path[200], addr[220];
    bench_node_path(o, h, path, sizeof(path));
    snprintf(addr, sizeof(addr), "unix:%s", path);
    struct rdzv_client_opts co;
    rdzv_client_opts_init(&co);
    co.addr = addr;
    co.job_id = o->job;
    rc = rdzv_client_create(&co, &cs[h]);
  }
  const char *key = held ? "lone/held" : "lone/unread";
  static double t[LONE_COUNT];
  for (int i = 0; i < LONE_COUNT + 10 && rc == 0; i++) {
    for (int64_t h = 0; held && h < nh && rc == 0; h++) {
      void *v = NULL;
      size_t n = 0;
      int g = rdzv_store_get(cs[h], key, &v, &n, 10);
      rc = g == 0 || g == RDZV_ENOKEY ? 0 : -1;
      rdzv_free(v);
    }
    char val[32];
    snprintf(val, sizeof(val), "v%d", i);
    double t0 = bench_now();
    if (rc == 0)
      rc = rdzv_store_set(cs[nh - 1], key, val, strlen(val), 0, 10) == 0 ? 0
                                                                         : -1;
    if (i >= 10) /* the first ones connect */
      t[i - 10] = (bench_now() - t0) * 1e6;
  }
  for (int64_t h = 0; h < nh; h++)
    rdzv_client_destroy(cs[h]);
  free(cs);
  if (rc < 0)
    return -1;
  qsort(t, LONE_COUNT, sizeof(t[0]), cmp_u);
  *p50 = t[LONE_COUNT / 2];
  *p90 = t[LONE_COUNT * 9 / 10];
  *p99 = t[LONE_COUNT * 99 / 100];
  return 0;
}

static double jreal(json_t *j, const char *k) {
  json_t *v = json_object_get(j, k);
  return json_is_integer(v) ? (double)json_integer_value(v)
                            : json_real_value(v);
}

/* The tree is up and idle: lone round trips from the deepest host's node
 * (the highest index: the tree is numbered level by level) and at the
 * root; then the relay's statistics. */
static void on_finished(const struct bench_opts *o, int rc, void *arg) {
  struct tree_ctx *tc = arg;
  struct delay_row *row = tc->row;
  char path[200];
  double p90;
  json_t *now = relay_poll(&tc->relay);
  row->relay_win_cpu_s = now != NULL ? jreal(now, "cpu_s") - tc->cpu_go : 0;
  json_decref(now);
  bench_node_path(o, bench_hosts(o) - 1, path, sizeof(path));
  if (rc == 0 && tc->relay.pid > 0) {
    row->lone_failed |= lone_ops(o, path, 0, &row->get_us, &row->get_us_p90);
    row->lone_failed |= lone_ops(o, path, 1, &row->add_us, &row->add_us_p90);
    row->lone_failed |=
        lone_sets(o, 0, &row->set_us, &row->set_us_p90, &row->set_us_p99);
    row->lone_failed |= lone_sets(o, 1, &row->set_held_us,
                                  &row->set_held_us_p90, &row->set_held_us_p99);
    bench_root_path(o, path, sizeof(path));
    row->lone_failed |= lone_ops(o, path, 0, &row->get_root_us, &p90);
  } else {
    row->lone_failed = 1;
  }
  relay_stop(&tc->relay);
  json_t *s = tc->relay.stats;
  if (s != NULL) {
    row->relay_cpu_s = jreal(s, "cpu_s");
    row->relay_late_p50_us = jreal(s, "late_p50_us");
    row->relay_late_p99_us = jreal(s, "late_p99_us");
    row->relay_chunks = (int64_t)jreal(s, "chunks");
    json_decref(s);
    tc->relay.stats = NULL;
  }
}

/* ---- the model --------------------------------------------------------- */

void bench_delay_model(const struct bench_model_in *in,
                       struct bench_model_out *out) {
  out->local_s = in->trips * in->local_s;
  out->network_s = in->trips * in->levels * in->rtt_s;
  out->path_cpu_s =
      in->trips * (in->levels + 1) * in->path_frames * in->frame_s;
  out->busy_s = in->busiest_frames * in->frame_s;
  out->interval_s = in->interval_levels * in->interval_s;
  out->total_s =
      out->local_s + out->network_s +
      (out->path_cpu_s > out->busy_s ? out->path_cpu_s : out->busy_s) +
      out->interval_s;
}

/* ---- the run ----------------------------------------------------------- */

static json_t *model_json(const struct bench_model_out *m) {
  return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "total_s", m->total_s,
                   "local_s", m->local_s, "network_s", m->network_s,
                   "path_cpu_s", m->path_cpu_s, "busiest_cpu_s", m->busy_s,
                   "interval_s", m->interval_s);
}

static json_t *row_json(const struct delay_row *r, const struct bench_opts *o) {
  json_t *j = json_pack(
      "{s:s,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,"
      "s:I,s:f,s:f,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:I}",
      "mode", "delay-tree", "delay_us", (json_int_t)r->delay_us, "hosts",
      (json_int_t)r->tree.hosts, "ranks",
      (json_int_t)(r->tree.hosts * o->ranks_per_host), "fanout",
      (json_int_t)o->fanout, "depth", (json_int_t)r->tree.depth,
      "link_direct_rtt_us", r->link_direct_us, "link_relay0_rtt_us",
      r->link_relay0_us, "link_rtt_us", r->link_us, "link_rtt_p99_us",
      r->link_us_p99, "wall_s", r->tree.wall_s, "p50_s", r->tree.p50_s, "p99_s",
      r->tree.p99_s, "cpu_s", r->tree.cpu_s, "failed",
      (json_int_t)r->tree.failed, "root_msgs", (json_int_t)r->tree.root_msgs,
      "max_node_msgs", (json_int_t)r->tree.max_node_msgs, "lone_get_root_us",
      r->get_root_us, "lone_get_us", r->get_us, "lone_get_p90_us",
      r->get_us_p90, "lone_add_us", r->add_us, "lone_add_p90_us", r->add_us_p90,
      "lone_failed", r->lone_failed, "relay_cpu_s", r->relay_cpu_s,
      "relay_late_p50_us", r->relay_late_p50_us, "relay_late_p99_us",
      r->relay_late_p99_us, "relay_chunks", (json_int_t)r->relay_chunks);
  json_object_set_new(j, "lone_set_us", json_real(r->set_us));
  json_object_set_new(j, "lone_set_p90_us", json_real(r->set_us_p90));
  json_object_set_new(j, "lone_set_held_us", json_real(r->set_held_us));
  json_object_set_new(j, "lone_set_held_p90_us", json_real(r->set_held_us_p90));
  json_object_set_new(j, "lone_set_p99_us", json_real(r->set_us_p99));
  json_object_set_new(j, "lone_set_held_p99_us", json_real(r->set_held_us_p99));
  json_object_set_new(j, "relay_rendezvous_cpu_s",
                      json_real(r->relay_win_cpu_s));
  json_object_set_new(j, "rendezvous_cpu_s", json_real(r->tree.win_cpu_s));
  json_object_set_new(j, "busiest_process_cpu_s",
                      json_real(r->tree.max_proc_win_cpu_s));
  json_object_set_new(j, "model_rendezvous", model_json(&r->model_rdzv));
  json_object_set_new(j, "model_lone_get", model_json(&r->model_get));
  json_object_set_new(j, "model_lone_add", model_json(&r->model_add));
  return j;
}

static double ratio(double measured, double modelled) {
  return modelled > 0 ? measured / modelled : 0;
}

static void print_row(const struct delay_row *r) {
  printf("delay-tree %" PRId64 " hosts depth %" PRId64 " delay %" PRId64
         " us: link rtt %.1f us (straight %.1f, relay at 0 %.1f, p99 %.1f)"
         "%s\n",
         r->tree.hosts, r->tree.depth, r->delay_us, r->link_us,
         r->link_direct_us, r->link_relay0_us, r->link_us_p99,
         r->tree.failed || r->lone_failed ? "  FAILED" : "");
  printf("  rendezvous: wall %.4f s (p50 %.4f)  model %.4f s (network "
         "%.4f, cpu %.4f, intervals %.4f)  measured/model %.2f\n",
         r->tree.wall_s, r->tree.p50_s, r->model_rdzv.total_s,
         r->model_rdzv.network_s,
         r->model_rdzv.busy_s > r->model_rdzv.path_cpu_s
             ? r->model_rdzv.busy_s
             : r->model_rdzv.path_cpu_s,
         r->model_rdzv.interval_s,
         ratio(r->tree.wall_s, r->model_rdzv.total_s));
  printf("  lone get: %.0f us (p90 %.0f; at the root %.0f)  model %.0f us"
         "  measured/model %.2f\n",
         r->get_us, r->get_us_p90, r->get_root_us, r->model_get.total_s * 1e6,
         ratio(r->get_us, r->model_get.total_s * 1e6));
  printf("  lone add: %.0f us (p90 %.0f)  model %.0f us  measured/model "
         "%.2f\n",
         r->add_us, r->add_us_p90, r->model_add.total_s * 1e6,
         ratio(r->add_us, r->model_add.total_s * 1e6));
  printf("  lone set: %.0f us (p90 %.0f, p99 %.0f); with a copy on every "
         "host's node: %.0f us (p90 %.0f, p99 %.0f)\n",
         r->set_us, r->set_us_p90, r->set_us_p99, r->set_held_us,
         r->set_held_us_p90, r->set_held_us_p99);
  printf("  relay: %.3f s CPU for %" PRId64 " chunks (%.1f us each), "
         "written late by p50 %.0f us, p99 %.0f us\n",
         r->relay_cpu_s, r->relay_chunks,
         r->relay_chunks > 0 ? r->relay_cpu_s / (double)r->relay_chunks * 1e6
                             : 0,
         r->relay_late_p50_us, r->relay_late_p99_us);
  fflush(stdout);
}

/* How many times the rendezvous waits the combining interval on its
 * critical path. A node holds a collective's contributions for the
 * interval unless its subtree has given all of them; the top node's
 * subtree is the whole tree, so it never waits: a collective waits at
 * levels - 1 levels (the joins, the barrier), and the id gather only when
 * it has more than one contributor (one id: every node holds all of it).
 * d->waits_* say which steps still wait at all (1) or not (0). */
static double rdzv_interval_levels(double levels, int64_t ranks,
                                   const struct bench_opts *o,
                                   const struct bench_delay_opts *d) {
  double below_top = levels > 1 ? levels - 1 : 0;
  int64_t nids = rdzv_nccl_nids(ranks, o->ranks_per_root);
  return below_top *
         (d->waits_join + d->waits_barrier + (nids > 1 ? d->waits_ids : 0));
}

/* The model for row r's shape, delay and measured costs. */
static void model_row(struct delay_row *r, const struct bench_opts *o,
                      const struct bench_delay_opts *d) {
  const struct bench_tree_run *t = &r->tree;
  /* CPU per frame in the rendezvous's own window. */
  double frame = t->all_msgs > 0 ? t->win_cpu_s / (double)t->all_msgs : 0;
  double local = r->get_root_us * 1e-6;
  double levels = (double)rdzv_tree_depth(t->hosts - 1, o->fanout);
  struct bench_model_in in = {.local_s = local,
                              .levels = levels,
                              .rtt_s = r->link_us * 1e-6,
                              .trips = 4,
                              .frame_s = frame,
                              .path_frames = 4,
                              .interval_s = o->flush_ms / 1000.0,
                              .interval_levels = rdzv_interval_levels(
                                  levels, t->hosts * o->ranks_per_host, o, d)};
  /* On this machine every daemon shares its cores, and with them the
   * relay (the "network" here costs CPU): the busiest process (all the
   * nodes run in one) is the serial work, or all of it (the relay's
   * included) spread over the cores, whichever is more. */
  double cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
  double all = t->win_cpu_s + r->relay_win_cpu_s;
  double serial =
      t->max_proc_win_cpu_s > all / cores ? t->max_proc_win_cpu_s : all / cores;
  in.busiest_frames = frame > 0 ? serial / frame : 0;
  bench_delay_model(&in, &r->model_rdzv);
  /* A lone round trip: the local hop (as measured at the root), then one
   * link per level. No CPU term: the link's ping-pong already holds a
   * process's wake-up, read and write at each end, which is most of what
   * a forwarding node does (measured: a few us a level more). A lone add
   * waits the interval at every node (none knows no other add comes). */
  struct bench_model_in lone = {.local_s = local,
                                .levels = levels,
                                .rtt_s = r->link_us * 1e-6,
                                .trips = 1,
                                .frame_s = frame,
                                .path_frames = 0,
                                .interval_s = o->flush_ms / 1000.0,
                                .interval_levels = 0};
  bench_delay_model(&lone, &r->model_get);
  lone.interval_levels = levels * d->waits_add;
  bench_delay_model(&lone, &r->model_add);
}

/* The model's projection to a cluster of `ranks` ranks (one node per
 * host, every daemon on its own host), with the costs measured here. */
static json_t *project(int64_t ranks, const struct bench_opts *o,
                       const struct bench_delay_opts *d,
                       const struct delay_row *rows, int nrows) {
  int64_t hosts = (ranks + o->ranks_per_host - 1) / o->ranks_per_host;
  double frame = 0, busiest = 0, local = 0;
  for (int i = 0; i < nrows; i++) {
    const struct bench_tree_run *t = &rows[i].tree;
    double f = t->all_msgs > 0 ? t->win_cpu_s / (double)t->all_msgs : 0;
    double b = (double)(t->root_msgs > t->max_node_msgs ? t->root_msgs
                                                        : t->max_node_msgs);
    frame = f > frame ? f : frame;
    busiest = b > busiest ? b : busiest;
    local =
        rows[i].get_root_us * 1e-6 > local ? rows[i].get_root_us * 1e-6 : local;
  }
  double levels = (double)rdzv_tree_depth(hosts - 1, o->fanout);
  struct bench_model_in in = {.local_s = local,
                              .levels = levels,
                              .rtt_s = d->rtt_us * 1e-6,
                              .trips = 4,
                              .frame_s = frame,
                              .path_frames = 4,
                              .busiest_frames = busiest,
                              .interval_s = o->flush_ms / 1000.0,
                              .interval_levels =
                                  rdzv_interval_levels(levels, ranks, o, d)};
  struct bench_model_out m;
  bench_delay_model(&in, &m);
  printf("projection: %" PRId64 " ranks (%" PRId64 " hosts, %.0f levels) at "
         "%.0f us RTT: %.4f s (network %.4f, local %.4f, cpu %.4f, "
         "intervals %.4f)\n",
         ranks, hosts, levels, d->rtt_us, m.total_s, m.network_s, m.local_s,
         m.busy_s > m.path_cpu_s ? m.busy_s : m.path_cpu_s, m.interval_s);
  json_t *j = model_json(&m);
  json_object_set_new(j, "ranks", json_integer(ranks));
  json_object_set_new(j, "hosts", json_integer(hosts));
  json_object_set_new(j, "levels", json_integer((json_int_t)levels));
  json_object_set_new(j, "rtt_us", json_real(d->rtt_us));
  json_object_set_new(j, "frame_cpu_us", json_real(frame * 1e6));
  json_object_set_new(j, "busiest_frames", json_real(busiest));
  json_object_set_new(j, "interval_levels", json_real(in.interval_levels));
  return j;
}

int bench_delay_main(struct bench_opts *o, const struct bench_delay_opts *d) {
  struct delay_row rows[8];
  int bad = 0;
  int64_t ranks = d->hosts * o->ranks_per_host;
  fprintf(stderr,
          "rdzv-bench: delayed tree of %" PRId64 " nodes (%" PRId64
          " ranks, fan-out %" PRId64 "), a delay-relay on every "
          "uplink\n",
          d->hosts, ranks, o->fanout);
  signal(SIGPIPE, SIG_IGN);
  /* The serve processes' nodes connect to their parent through the
   * relay (serve.c). */
  setenv("RDZV_BENCH_UPLINK", "1", 1);
  json_t *all = json_array();
  for (int i = 0; i < d->ndelays; i++) {
    struct delay_row *r = &rows[i];
    memset(r, 0, sizeof(*r));
    r->delay_us = d->delays_us[i];
    if (measure_link(r) < 0) {
      fprintf(stderr, "rdzv-bench: the link ping-pong failed\n");
      bad = 1;
    }
    struct tree_ctx tc = {.row = r};
    struct bench_hooks h = {on_started, on_go, on_finished, &tc};
    if (bench_run_tree(o, ranks, &h, &r->tree) != 0 || r->tree.failed ||
        r->lone_failed)
      bad = 1;
    relay_stop(&tc.relay); /* when the run failed before finished() */
    model_row(r, o, d);
    print_row(r);
    json_array_append_new(all, row_json(r, o));
  }
  unsetenv("RDZV_BENCH_UPLINK");
  json_t *proj = json_array();
  json_array_append_new(proj, project(100000, o, d, rows, d->ndelays));
  json_array_append_new(proj, project(1000000, o, d, rows, d->ndelays));
  json_t *top = json_pack("{s:o,s:o}", "delay_tree", all, "projection", proj);
  if (d->json_path != NULL &&
      json_dump_file(top, d->json_path, JSON_INDENT(1)) < 0) {
    fprintf(stderr, "rdzv-bench: cannot write %s: %s\n", d->json_path,
            strerror(errno));
    bad = 1;
  }
  json_decref(top);
  return bad ? 1 : 0;
}
