/* rdzv-bench's incumbents' mode: the same fast C clients (ts_drive.c,
 * etcd_drive.c) run PyTorch's init pattern against
 *   torch  PyTorch's own TCPStore server (torch 1.13 through
 *          /usr/bin/python3: is_master, wait_for_workers=False);
 *   flat   rdzvd's root with its TCPStore front end;
 *   tree   an rdzvd tree, a node with a front end per simulated host
 *          (8 ranks a host, fan-out 16), each rank on its host's;
 *   etcd   etcd's v3 JSON gateway (when `etcd` is installed), with the
 *          same steps as puts and ranges and a count-poll barrier;
 * at each N of --incumbents, clients pinned to CPU 0 and every server
 * process to CPU 1 (when there are two), and reports wall time, p99 per
 * rank, the server processes' CPU and peak RSS, and the speed-up over
 * PyTorch's server. With --pytorch N[,N...] the clients send PyTorch's
 * own store traffic instead (ts_pattern.c) to rdzvd flat, tree, and
 * tree-nocopies (nodes started --cache-mutable no), and each run reports
 * the root's wait/get/mget requests and bytes and the busiest node's
 * frames. See incumbents.h and docs/benchmarks.md ("The incumbents", "PyTorch's
 * own store traffic"). */
#include "tools/bench/incumbents.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/topo.h"
#include "tools/bench/incumbents_int.h"
#include "tools/bench/rank.h"

const char *const server_names[S_COUNT] = {"torch", "flat", "tree", "etcd",
                                           "tree-nocopies"};
const char *const server_titles[S_COUNT] = {
    "PyTorch TCPStore (1.13)", "rdzvd flat + front end",
    "rdzvd tree + front ends", "etcd gateway (3.4)", "rdzvd tree, no copies"};

#define MAX_NS 8
#define MAX_PROCS 64
/* Ranks one driver process holds (a socket or two each; the open-file
 * cap is 20,000 per process here). */
#define RANKS_PER_DRIVER (18000 / inc_conns)
/* fds a tree node's process needs per node: its Unix listener, its
 * upstream, its child nodes, its TCPStore listener and its host's ranks'
 * connections. */
#define NODE_FDS(o) (3 + (o)->fanout + inc_conns * (o)->ranks_per_host)

static int64_t inc_ns[MAX_NS];
static int inc_nn = -1; /* -1: not given */
static unsigned inc_servers = (1u << S_COUNT) - 1 - (1u << S_TREE_NC);
/* --pytorch: PyTorch's own store traffic (ts_drive.c) at these N, with
 * rdzvd flat, tree and tree without copies. */
static int64_t pt_ns[MAX_NS];
static int pt_nn = 0;
static unsigned pt_servers_mask =
    (1u << S_FLAT) | (1u << S_TREE) | (1u << S_TREE_NC);
/* --pt-check-ms: the heartbeat checks' period (0: back to back). */
int pt_check_ms = 0;
/* --pt-keepalive: each agent's state read followed by a compare_set. */
int pt_keepalive = 0;
static int inc_pin = 1;
/* TCPStore connections a rank: 1 (as torch 2.x's client), or 2 (as torch
 * 1.13's: its idle callback connection too; its own server resets
 * connections when 9,000 such ranks connect at once). */
int inc_conns = 1;

struct proc {
  pid_t pid;
  FILE *in, *out;
  bool server;
  double cpu0; /* CPU seconds at "go" */
};

struct inc_run {
  struct bench_opts o;
  struct proc p[MAX_PROCS];
  int np;
  char etcd_dir[64];
  char why[200]; /* a failure */
};

/* ---- options ------------------------------------------------------------- */

const char *bench_inc_usage(void) {
  return "       [--incumbents N[,N...]|none] (PyTorch's init pattern with\n"
         "       TCPStore's protocol against torch's server, rdzvd flat and\n"
         "       tree, and etcd) [--incumbent-servers torch,flat,tree,etcd]\n"
         "       [--pin on|off] (clients on CPU 0, servers on CPU 1)\n"
         "       [--tcpstore-conns 1|2] (a rank's connections; 2 as torch\n"
         "       1.13's client: the store's and an idle callback one)\n"
         "       [--pytorch N[,N...]] (PyTorch's own store traffic, torch\n"
         "       2.x's protocol: scalable-init ids, the one-root id, 60\n"
         "       heartbeat checks a rank, torchrun's state reads by each\n"
         "       host's agent; rdzvd flat, tree and tree-nocopies: the\n"
         "       root's requests and bytes, the busiest node's, wall time)\n"
         "       [--pytorch-servers flat,tree,tree-nocopies] (default all)\n"
         "       [--pt-check-ms MS] (the checks MS apart, as the heartbeat\n"
         "       monitor's once a second: the steady state; default 0,\n"
         "       back to back; give --timeout past 60 checks' time)\n"
         "       [--pt-keepalive on|off] (each state read followed by a\n"
         "       compare_set of it, as torchrun's keep-alive: a key written\n"
         "       as often as read; default off)\n";
}

int bench_inc_given(void) { return inc_nn >= 0 || pt_nn > 0; }

void bench_inc_default(void) {
  inc_ns[0] = 1000;
  inc_ns[1] = 4000;
  inc_nn = 2;
}

static int parse_servers(const char *v, unsigned *mask) {
  unsigned m = 0;
  while (*v != '\0') {
    size_t len = strcspn(v, ",");
    int k = 0;
    while (k < S_COUNT && (strlen(server_names[k]) != len ||
                           strncmp(v, server_names[k], len) != 0))
      k++;
    if (k == S_COUNT)
      return -1;
    m |= 1u << k;
    v += len + (v[len] == ',');
  }
  if (m == 0)
    return -1;
  *mask = m;
  return 0;
}

int bench_inc_option(const char *k, const char *v) {
  int bad = 0;
  if (strcmp(k, "--incumbents") == 0) {
    inc_nn = 0;
    if (strcmp(v, "none") != 0)
      for (const char *p = v; *p != '\0' && !bad;) {
        char *end = NULL;
        long long n = strtoll(p, &end, 10);
        bad = end == p || n < 2 || n > 100000 || inc_nn == MAX_NS ||
              (*end != ',' && *end != '\0');
        if (!bad)
          inc_ns[inc_nn++] = n;
        p = end != NULL && *end == ',' ? end + 1 : end;
      }
  } else if (strcmp(k, "--pytorch") == 0) {
    pt_nn = 0;
    for (const char *p = v; *p != '\0' && !bad;) {
      char *end = NULL;
      long long n = strtoll(p, &end, 10);
      bad = end == p || n < 2 || n > 100000 || pt_nn == MAX_NS ||
            (*end != ',' && *end != '\0');
      if (!bad)
        pt_ns[pt_nn++] = n;
      p = end != NULL && *end == ',' ? end + 1 : end;
    }
  } else if (strcmp(k, "--pt-keepalive") == 0) {
    bad = strcmp(v, "on") != 0 && strcmp(v, "off") != 0;
    pt_keepalive = strcmp(v, "on") == 0;
  } else if (strcmp(k, "--pt-check-ms") == 0) {
    char *end = NULL;
    long ms = strtol(v, &end, 10);
    bad = end == v || *end != '\0' || ms < 0 || ms > 60000;
    pt_check_ms = bad ? 0 : (int)ms;
  } else if (strcmp(k, "--incumbent-servers") == 0) {
    bad = parse_servers(v, &inc_servers) < 0;
  } else if (strcmp(k, "--pytorch-servers") == 0) {
    bad = parse_servers(v, &pt_servers_mask) < 0 ||
          (pt_servers_mask &
           ~((1u << S_FLAT) | (1u << S_TREE) | (1u << S_TREE_NC))) != 0;
  } else if (strcmp(k, "--tcpstore-conns") == 0) {
    bad = strcmp(v, "1") != 0 && strcmp(v, "2") != 0;
    inc_conns = strcmp(v, "1") == 0 ? 1 : 2;
  } else if (strcmp(k, "--pin") == 0) {
    bad = strcmp(v, "on") != 0 && strcmp(v, "off") != 0;
    inc_pin = strcmp(v, "on") == 0;
  } else {
    return 0;
  }
  if (bad)
    fprintf(stderr,
            "rdzv-bench: bad value '%s' for %s (--incumbents: 2 to "
            "100000 ranks, at most %d values, or none; "
            "--incumbent-servers: torch,flat,tree,etcd)\n",
            v, k, MAX_NS);
  return bad ? -1 : 1;
}

/* ---- processes ------------------------------------------------------------ */

/* CPU seconds (user + system, every thread) of a live process. */
static double proc_cpu(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f != NULL)
    fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the name may hold spaces */
  unsigned long ut = 0, st = 0;
  if (p == NULL || sscanf(p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                          "%*u %lu %lu",
                          &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A line of /proc/PID/status in bytes ("VmHWM", "VmRSS"). */
static int64_t proc_mem(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  int64_t kb = 0;
  size_t fl = strlen(field);
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
      kb = strtoll(line + fl + 1, NULL, 10);
      break;
    }
  if (f != NULL)
    fclose(f);
  return kb * 1024;
}

bool bench_inc_pinning(void) {
  return inc_pin && sysconf(_SC_NPROCESSORS_ONLN) >= 2;
}

/* Starts argv with pipes on stdin and stdout (stdout to log when not
 * NULL), on CPU cpu (< 0: anywhere). */
static int spawn(struct inc_run *rn, char *const argv[], int cpu, bool server,
                 const char *log) {
  if (rn->np == MAX_PROCS)
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
    if (log != NULL) {
      int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
    }
    if (cpu >= 0 && bench_inc_pinning()) {
      cpu_set_t s;
      CPU_ZERO(&s);
      CPU_SET(cpu, &s);
      sched_setaffinity(0, sizeof(s), &s);
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  struct proc *p = &rn->p[rn->np++];
  memset(p, 0, sizeof(*p));
  p->pid = pid;
  p->in = fdopen(in[1], "w");
  p->out = fdopen(out[0], "r");
  p->server = server;
  return 0;
}

/* Reads lines of p until one starts with prefix (into buf). */
static int expect(struct proc *p, const char *prefix, char *buf, size_t n) {
  while (fgets(buf, (int)n, p->out) != NULL)
    if (strncmp(buf, prefix, strlen(prefix)) == 0)
      return 0;
  return -1;
}

static void tell(struct proc *p, const char *line) {
  fprintf(p->in, "%s\n", line);
  fflush(p->in);
}

/* A bench child process (--serve, --ts-drive, --etcd-drive) for hosts
 * [first, first + count) with flags. */
static int spawn_bench(struct inc_run *rn, const char *kind, int64_t first,
                       int64_t count, int flags, bool server) {
  char a[9][32];
  const struct bench_opts *o = &rn->o;
  snprintf(a[0], 32, "%" PRId64, o->ranks);
  snprintf(a[1], 32, "%" PRId64, o->ranks_per_host);
  snprintf(a[2], 32, "%" PRId64, o->fanout);
  snprintf(a[3], 32, "%" PRId64, first);
  snprintf(a[4], 32, "%" PRId64, count);
  snprintf(a[5], 32, "%d", flags);
  snprintf(a[6], 32, "%u", o->flush_ms);
  snprintf(a[7], 32, "%.0f", o->timeout_s);
  snprintf(a[8], 32, "%u", o->heartbeat_ms);
  char *argv[] = {"/proc/self/exe",
                  (char *)kind,
                  "--dir",
                  (char *)o->dir,
                  "--job",
                  (char *)o->job,
                  "--n",
                  a[0],
                  "--rph",
                  a[1],
                  "--fanout",
                  a[2],
                  "--first",
                  a[3],
                  "--count",
                  a[4],
                  "--flags",
                  a[5],
                  "--flush",
                  a[6],
                  "--timeout",
                  a[7],
                  "--hb",
                  a[8],
                  NULL};
  return spawn(rn, argv, server ? 1 : 0, server, NULL);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return -1;
  fputs(text, f);
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- the servers ---------------------------------------------------------- */

/* PyTorch's server in a python process, which prints its port and lives
 * until its stdin closes. */
static int start_torch(struct inc_run *rn) {
  static const char script[] =
      "import sys, datetime\n"
      "import torch.distributed as d\n"
      "s = d.TCPStore('127.0.0.1', 0, None, True,\n"
      "               datetime.timedelta(seconds=3600),\n"
      "               wait_for_workers=False)\n"
      "print('port', s.port, flush=True)\n"
      "sys.stdin.read()\n";
  char *argv[] = {"/usr/bin/python3", "-c", (char *)script, NULL};
  char line[128], path[200];
  if (access(argv[0], X_OK) != 0 || spawn(rn, argv, 1, true, NULL) < 0 ||
      expect(&rn->p[rn->np - 1], "port ", line, sizeof(line)) < 0) {
    snprintf(rn->why, sizeof(rn->why),
             "PyTorch's TCPStore did not start "
             "(/usr/bin/python3 with torch: apt-get install python3-torch)");
    return -1;
  }
  bench_ts_port_path(&rn->o, -1, path, sizeof(path));
  return write_text(path, line + 5);
}

/* A throwaway etcd member on loopback, its data in /dev/shm; its client
 * URL goes to <dir>/etcd.url. */
static int start_etcd(struct inc_run *rn) {
  char cu[64], pu[64], cl[80], dir[64], log[200], path[200];
  int cp = free_port(), pp = free_port();
  snprintf(dir, sizeof(dir), "/dev/shm/rdzv-bench-etcd-XXXXXX");
  if (cp < 0 || pp < 0 || mkdtemp(dir) == NULL)
    return -1;
  snprintf(rn->etcd_dir, sizeof(rn->etcd_dir), "%s", dir);
  snprintf(cu, sizeof(cu), "http://127.0.0.1:%d", cp);
  snprintf(pu, sizeof(pu), "http://127.0.0.1:%d", pp);
  snprintf(cl, sizeof(cl), "b=%s", pu);
  snprintf(log, sizeof(log), "%s/etcd.log", rn->o.dir);
  char *argv[] = {"etcd",  "--name",
                  "b",     "--data-dir",
                  dir,     "--listen-client-urls",
                  cu,      "--advertise-client-urls",
                  cu,      "--listen-peer-urls",
                  pu,      "--initial-advertise-peer-urls",
                  pu,      "--initial-cluster",
                  cl,      "--initial-cluster-state",
                  "new",   "--heartbeat-interval",
                  "10",    "--election-timeout",
                  "100",   "--logger",
                  "zap",   "--log-level",
                  "error", NULL};
  if (spawn(rn, argv, 1, true, log) < 0)
    return -1;
  snprintf(path, sizeof(path), "%s/etcd.url", rn->o.dir);
  if (write_text(path, cu) < 0)
    return -1;
  /* Ready when /health says so (etcd-gateway.md §1: 40-130 ms). */
  char cmd[200];
  snprintf(cmd, sizeof(cmd),
           "curl -s -m 1 %s/health 2>/dev/null | "
           "grep -q '\"health\":\"true\"'",
           cu);
  for (int i = 0; i < 300; i++) {
    if (system(cmd) == 0)
      return 0;
    usleep(20000);
  }
  snprintf(rn->why, sizeof(rn->why),
           "etcd did not become healthy (its log: "
           "%.150s)",
           log);
  return -1;
}

/* rdzvd: flat, one root with the front end; tree, a root and node
 * processes (NODE_FDS per node under the 20,000-file cap), a front end on
 * every node. */
static int start_rdzvd(struct inc_run *rn, bool tree, bool nocopies) {
  const struct bench_opts *o = &rn->o;
  int64_t hosts = bench_hosts(o);
  char line[256];
  int first = rn->np;
  if (spawn_bench(rn, "--serve", 0, 0, tree ? 4 : 4 | 8, true) < 0)
    return -1;
  int64_t chunk = 15000 / NODE_FDS(o);
  for (int64_t h = 0; tree && h < hosts; h += chunk)
    if (spawn_bench(rn, "--serve", h, h + chunk <= hosts ? chunk : hosts - h,
                    8 | (nocopies ? 32 : 0), true) < 0)
      return -1;
  for (int i = first; i < rn->np; i++)
    if (expect(&rn->p[i], "ready", line, sizeof(line)) < 0) {
      snprintf(rn->why, sizeof(rn->why), "an rdzvd process did not start");
      return -1;
    }
  return 0;
}

static void stop_all(struct inc_run *rn) {
  for (int i = 0; i < rn->np; i++)
    if (!rn->p[i].server)
      tell(&rn->p[i], "exit"); /* drivers disconnect first */
  for (int i = 0; i < rn->np; i++) {
    struct proc *p = &rn->p[i];
    if (p->server)
      tell(p, "exit"); /* serve; python reads to EOF below */
    fclose(p->in);
    if (p->server && rn->etcd_dir[0] != '\0')
      kill(p->pid, SIGTERM);
    int st;
    waitpid(p->pid, &st, 0);
    fclose(p->out);
  }
  rn->np = 0;
  if (rn->etcd_dir[0] != '\0') {
    char cmd[120];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", rn->etcd_dir);
    if (system(cmd) != 0)
      fprintf(stderr, "rdzv-bench: cannot remove %s\n", rn->etcd_dir);
  }
}

/* ---- one run -------------------------------------------------------------- */

void bench_inc_write_durations(const struct bench_opts *o, const double *d,
                               int64_t n) {
  char path[200];
  snprintf(path, sizeof(path), "%s/durations.%d", o->dir, (int)getpid());
  FILE *f = fopen(path, "w");
  for (int64_t i = 0; f != NULL && i < n; i++)
    fprintf(f, "%.6f\n", d[i]);
  if (f != NULL)
    fclose(f);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Wall (the last rank), p50 and p99 from every driver's durations. */
static void durations(struct inc_run *rn, struct inc_result *r) {
  char pat[200];
  glob_t g;
  int64_t n = 0;
  double *d = malloc((size_t)rn->o.ranks * sizeof(*d)), v;
  snprintf(pat, sizeof(pat), "%s/durations.*", rn->o.dir);
  if (d != NULL && glob(pat, 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      FILE *f = fopen(g.gl_pathv[i], "r");
      while (f != NULL && n < rn->o.ranks && fscanf(f, "%lf", &v) == 1)
        if (v >= 0)
          d[n++] = v;
      if (f != NULL)
        fclose(f);
    }
    globfree(&g);
  }
  if (d != NULL && n > 0) {
    qsort(d, (size_t)n, sizeof(*d), cmp_double);
    r->wall_s = d[n - 1];
    r->p50_s = d[(n - 1) / 2];
    r->p99_s = d[(int64_t)((double)(n - 1) * 0.99)];
  }
  free(d);
}

/* The drivers: ranks of hosts in chunks of at most RANKS_PER_DRIVER. */
static int start_drivers(struct inc_run *rn, int s) {
  const struct bench_opts *o = &rn->o;
  int64_t hosts = bench_hosts(o), chunk = RANKS_PER_DRIVER / o->ranks_per_host;
  const char *kind = s == S_ETCD ? "--etcd-drive" : "--ts-drive";
  char line[64];
  int first = rn->np;
  for (int64_t h = 0; h < hosts; h += chunk)
    if (spawn_bench(rn, kind, h, h + chunk <= hosts ? chunk : hosts - h,
                    (s == S_TREE || s == S_TREE_NC ? 0 : 1) |
                        (rn->o.pytorch ? 16 : 0),
                    false) < 0)
      return -1;
  for (int i = first; i < rn->np; i++)
    if (expect(&rn->p[i], "ready", line, sizeof(line)) < 0) {
      snprintf(rn->why, sizeof(rn->why), "a rank driver did not start");
      return -1;
    }
  return 0;
}

/* Go, and the drivers' "done" lines: failures and the checks. */
static int go(struct inc_run *rn, int s, struct inc_result *r) {
  int64_t ok = 0, fail = 0, uid = 0, last = 0, add = 0, init = 0;
  char line[256];
  for (int i = 0; i < rn->np; i++) {
    rn->p[i].cpu0 = rn->p[i].server ? proc_cpu(rn->p[i].pid) : 0;
    if (rn->p[i].server)
      r->rss_start += proc_mem(rn->p[i].pid, "VmRSS");
  }
  for (int i = 0; i < rn->np; i++)
    if (!rn->p[i].server)
      tell(&rn->p[i], "go");
  for (int i = 0; i < rn->np; i++) {
    int64_t v[6];
    if (rn->p[i].server)
      continue;
    if (expect(&rn->p[i], "done ", line, sizeof(line)) < 0 ||
        sscanf(line + 5,
               "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64
               " %" SCNd64,
               &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) {
      snprintf(rn->why, sizeof(rn->why), "a rank driver died");
      return -1;
    }
    ok += v[0], fail += v[1], uid += v[2], last += v[3], add += v[4];
    init += v[5];
  }
  for (int i = 0; i < rn->np; i++)
    if (rn->p[i].server) {
      r->cpu_s += proc_cpu(rn->p[i].pid) - rn->p[i].cpu0;
      r->rss += proc_mem(rn->p[i].pid, "VmHWM");
      r->nprocs++;
    }
  int64_t n = rn->o.ranks, tri = n * (n + 1) / 2;
  r->failed = n - ok;
  /* Every rank has the uid; exactly one saw the counter reach N; every
   * add counted once (replies 1..N). etcd has no counters: its barrier
   * counts keys, and every rank must have seen all N. */
  if (rn->o.pytorch) /* every id right, every init/ add once */
    r->verified = fail == 0 && ok == n && uid == n && init == tri;
  else if (s == S_ETCD)
    r->verified = fail == 0 && ok == n && uid == n && last == n;
  else
    r->verified = fail == 0 && ok == n && uid == n && last == 1 && add == tri &&
                  init == tri;
  if (!r->verified)
    snprintf(rn->why, sizeof(rn->why),
             "checks: %" PRId64 " ok, %" PRId64 " failed, %" PRId64
             " with the uid, %" PRId64 " saw the last "
             "add, add sums %" PRId64 " and %" PRId64 " (want %" PRId64 ")",
             ok, fail, uid, last, add, init, tri);
  return 0;
}

static int64_t jint(json_t *j, const char *k) {
  return (int64_t)json_integer_value(json_object_get(j, k));
}

/* The rdzvd processes' "stats": the root's requests and bytes, the
 * busiest node's frames (--pytorch). */
static void server_stats(struct inc_run *rn, struct inc_result *r) {
  char line[2048];
  for (int i = 0; i < rn->np; i++) {
    if (!rn->p[i].server)
      continue;
    tell(&rn->p[i], "stats");
    if (expect(&rn->p[i], "stats ", line, sizeof(line)) < 0)
      continue;
    json_t *j = json_loads(line + 6, 0, NULL);
    if (j == NULL)
      continue;
    if (json_is_true(json_object_get(j, "root")) || jint(j, "root") == 1) {
      json_t *ops = json_object_get(j, "root_ops");
      r->root_msgs = jint(j, "root_work_msgs");
      r->root_bytes = jint(j, "root_bytes");
      r->root_wait = jint(ops, "wait");
      r->root_get = jint(ops, "get");
      r->root_mget = jint(ops, "mget");
      r->root_ping = jint(ops, "ping");
      r->root_inval = jint(ops, "inval");
      r->root_cas = jint(ops, "cas");
      r->root_invals_sent = jint(j, "root_invalidations_sent");
      r->root_write_waits = jint(j, "root_write_waits");
    }
    if (jint(j, "max_node_msgs") > r->node_msgs) {
      r->node_msgs = jint(j, "max_node_msgs");
      r->node_bytes = jint(j, "max_node_bytes");
    }
    json_decref(j);
  }
}

static int run_one(const struct bench_opts *base, int s, int64_t n,
                   bool pytorch, struct inc_result *r) {
  struct inc_run *rn = calloc(1, sizeof(*rn));
  if (rn == NULL)
    return -1;
  memset(r, 0, sizeof(*r));
  r->server = s;
  r->ranks = n;
  r->pytorch = pytorch;
  rn->o = *base;
  rn->o.ranks = n;
  rn->o.pytorch = pytorch;
  snprintf(rn->o.dir, sizeof(rn->o.dir), "/tmp/rdzv-bench-inc-XXXXXX");
  if (mkdtemp(rn->o.dir) == NULL) {
    free(rn);
    return -1;
  }
  int rc = s == S_TORCH  ? start_torch(rn)
           : s == S_ETCD ? start_etcd(rn)
                         : start_rdzvd(rn, s != S_FLAT, s == S_TREE_NC);
  if (rc == 0)
    rc = start_drivers(rn, s);
  if (rc == 0)
    rc = go(rn, s, r);
  if (rc == 0 && s != S_TORCH && s != S_ETCD)
    server_stats(rn, r);
  stop_all(rn);
  durations(rn, r);
  if (rc < 0 || !r->verified)
    fprintf(stderr, "rdzv-bench: %s at %" PRId64 " ranks: %s\n",
            server_names[s], n, rn->why[0] ? rn->why : "failed");
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", rn->o.dir);
  if (system(cmd) != 0)
    rc = -1;
  free(rn);
  return rc < 0 || !r->verified ? -1 : 0;
}

/* ---- output --------------------------------------------------------------- */

int bench_inc_run(const struct bench_opts *o, json_t *all, const char *png) {
  struct inc_result rs[2 * MAX_NS * S_COUNT];
  int nr = 0, bad = 0;
  setenv("RDZV_BENCH_TS_CONNS", inc_conns == 1 ? "1" : "2", 1);
  char pc[16];
  snprintf(pc, sizeof(pc), "%d", pt_check_ms);
  setenv("RDZV_BENCH_PT_CHECK_MS", pc, 1);
  setenv("RDZV_BENCH_PT_KEEPALIVE", pt_keepalive ? "1" : "0", 1);
  bool have_etcd = system("command -v etcd >/dev/null 2>&1") == 0;
  for (int i = 0; i < inc_nn; i++) {
    for (int s = 0; s < S_COUNT; s++) {
      if (!(inc_servers & (1u << s)))
        continue;
      struct inc_result *r = &rs[nr++];
      if (s == S_ETCD && !have_etcd) {
        memset(r, 0, sizeof(*r));
        r->server = s;
        r->ranks = inc_ns[i];
        r->skipped = true;
        continue;
      }
      fprintf(stderr, "rdzv-bench: incumbents: %s at %" PRId64 " ranks\n",
              server_names[s], inc_ns[i]);
      bad |= run_one(o, s, inc_ns[i], false, r) < 0;
    }
    bench_inc_print_table(rs, nr, inc_ns[i]);
  }
  /* PyTorch's own traffic: rdzvd flat, tree, and tree without copies. */
  static const int pt_servers[] = {S_FLAT, S_TREE, S_TREE_NC};
  int pt_first = nr;
  for (int i = 0; i < pt_nn; i++) {
    for (size_t k = 0; k < sizeof(pt_servers) / sizeof(pt_servers[0]); k++) {
      if (!(pt_servers_mask & (1u << pt_servers[k])))
        continue;
      struct inc_result *r = &rs[nr++];
      if (pt_servers[k] == S_FLAT && pt_ns[i] > PT_FLAT_MAX) {
        /* One root process holds every rank's connection: past the open
         * files one process may hold here, it cannot. */
        memset(r, 0, sizeof(*r));
        r->server = S_FLAT;
        r->ranks = pt_ns[i];
        r->pytorch = true;
        r->skipped = true;
        continue;
      }
      fprintf(stderr, "rdzv-bench: pytorch traffic: %s at %" PRId64 " ranks\n",
              server_names[pt_servers[k]], pt_ns[i]);
      bad |= run_one(o, pt_servers[k], pt_ns[i], true, r) < 0;
      fprintf(stderr,
              "rdzv-bench: pytorch traffic: %s at %" PRId64
              " ranks: %s, %.3f s, root wait+get+mget %" PRId64
              ", root bytes %" PRId64 "\n",
              server_names[pt_servers[k]], pt_ns[i],
              r->verified ? "verified" : "FAILED", r->wall_s,
              r->root_wait + r->root_get + r->root_mget, r->root_bytes);
    }
    bench_inc_print_pattern_table(rs + pt_first, nr - pt_first, pt_ns[i]);
  }
  for (int i = 0; i < nr; i++)
    json_array_append_new(
        all,
        bench_inc_result_json(&rs[i], bench_inc_torch_of(rs, nr, rs[i].ranks)));
  if (png != NULL && inc_nn > 0 && nr > 0 && bench_inc_plot(png, rs, nr) < 0) {
    fprintf(stderr, "rdzv-bench: gnuplot failed to write the incumbents' "
                    "plot\n");
    bad = 1;
  }
  if (png != NULL && pt_nn > 0 && bench_inc_plot_pytorch(png, rs, nr) < 0) {
    fprintf(stderr, "rdzv-bench: gnuplot failed to write the pytorch "
                    "plot\n");
    bad = 1;
  }
  return bad ? -1 : 0;
}

int bench_inc_child(int argc, char **argv, int *rc) {
  if (argc < 2 || (strcmp(argv[1], "--ts-drive") != 0 &&
                   strcmp(argv[1], "--etcd-drive") != 0))
    return 0;
  struct bench_opts o = {.ranks_per_host = 8,
                         .fanout = 16,
                         .ranks_per_root = 128,
                         .timeout_s = 300};
  snprintf(o.job, sizeof(o.job), "bench");
  if (bench_parse_common(&o, argc, argv, 2) != argc) {
    *rc = 2;
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  *rc = argv[1][2] == 't' ? bench_ts_drive_main(&o) : bench_etcd_drive_main(&o);
  return 1;
}
