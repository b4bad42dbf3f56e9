/* A manual probe (not a test: it prints timings, asserts nothing about
 * them) of the nodes' short cuts with real rdzvd processes and 8 forked
 * ranks (4 a host). Run from a directory holding tools/rdzvd (e.g. the
 * runfiles of this target), GUARD being every node's --flush-max-ms:
 *   brk_probe coll [PROBE|-1] [GUARD]   hostile member specs, per probe
 *   brk_probe maxkey [PROBE|-1] [GUARD] the same under a root with
 *                                       --max-key-bytes=64
 *   brk_probe join V [GUARD]            joins with wrong hints, variant V:
 *     A right hints; B mid --children too many; C mid --children=0;
 *     D leaves --local-ranks=2 (of 4); E leaves --local-ranks=6;
 *     F ranks claim local size 2; G both hosts on leaf0; H mid --children
 *     too many, --local-ranks auto; I leaves --children=1 (of 0);
 *     J rejoin after an abort; K J with B; L ranks claim local size 6;
 *     R a second round of the job; X leaf0 killed mid-round, restarted
 *     (leaf1 under the root: mid sees half the world; each host's last
 *     rank 300 ms late; "slowest join" per generation)
 *   brk_probe chaos mid|leaf1 [GUARD]   60 gathers while that node is
 *                                       killed (SIGKILL) after 1.2 s */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/members.h"

static char dir[64];
static int guard_ms = 1000;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* A raw spec: kind, nmembers, runs (first, stride, len) x n. */
static size_t raw_spec(uint8_t *out, int kind, uint32_t nm, int nruns,
                       const uint32_t *runs) {
  out[0] = (uint8_t)kind;
  put32(out + 1, nm);
  put32(out + 5, (uint32_t)nruns);
  for (int r = 0; r < nruns; r++) {
    put32(out + 9 + 12 * r, runs[3 * r]);
    put32(out + 13 + 12 * r, runs[3 * r + 1]);
    put32(out + 17 + 12 * r, runs[3 * r + 2]);
  }
  return 9 + 12 * (size_t)nruns;
}

#define WORLD 8
#define PER_HOST 4
#define NPROBES 16

/* Probe p's spec for rank me (len in *n), name suffix, and whether it is a
 * gather; returns the spec or NULL. */
static const uint8_t *probe_spec(int p, int me, int64_t gen, char *name,
                                 size_t nn, size_t *n, int *gather,
                                 int *first) {
  static uint8_t s[2048];
  *gather = 0;
  *first = 0; /* rank 0 goes first */
  *n = 0;
  int good = rdzv_members_encode(NULL, WORLD, RDZV_MEMBERS_EACH, s, sizeof(s));
  snprintf(name, nn, "rdzv/world/g%" PRId64 "/barrier/p%d", gen, p);
  switch (p) {
  case 0: *n = (size_t)good; return s;
  case 1: return NULL;
  case 2: { /* rank 0: members that are not in the world */
    *first = 1;
    if (me != 0) { *n = (size_t)good; return s; }
    uint32_t runs[] = {100, 1, 8};
    *n = raw_spec(s, 0, 8, 1, runs);
    return s;
  }
  case 3: { /* everyone: 0..3 twice */
    uint32_t runs[] = {0, 1, 4, 0, 1, 4};
    *n = raw_spec(s, 0, 8, 2, runs);
    return s;
  }
  case 4: { /* rank 0 first: halves swapped */
    *first = 1;
    if (me != 0) { *n = (size_t)good; return s; }
    uint32_t runs[] = {4, 1, 4, 0, 1, 4};
    *n = raw_spec(s, 0, 8, 2, runs);
    return s;
  }
  case 5: /* rank 0 first: garbage that does not decode */
    *first = 1;
    if (me != 0) { *n = (size_t)good; return s; }
    memset(s, 0xAB, 20);
    *n = 20;
    return s;
  case 6: /* rank 0 first: 800 bytes */
    *first = 1;
    if (me != 0) { *n = (size_t)good; return s; }
    memset(s, 0x01, 800);
    *n = 800;
    return s;
  case 7: { /* BLOCKS kind on a barrier */
    uint32_t runs[] = {0, 1, 8};
    *n = raw_spec(s, 1, 8, 1, runs);
    return s;
  }
  case 8: /* not a generation's key */
    snprintf(name, nn, "plain/p%d", p);
    *n = (size_t)good;
    return s;
  case 9: /* another generation's key */
    snprintf(name, nn, "rdzv/world/g%" PRId64 "/barrier/p%d", gen + 7, p);
    *n = (size_t)good;
    return s;
  case 10: /* gather, good */
    *gather = 1;
    snprintf(name, nn, "rdzv/world/g%" PRId64 "/gather/p%d", gen, p);
    *n = (size_t)good;
    return s;
  case 11: { /* gather, rank 0 first with halves swapped */
    *gather = 1;
    *first = 1;
    snprintf(name, nn, "rdzv/world/g%" PRId64 "/gather/p%d", gen, p);
    if (me != 0) { *n = (size_t)good; return s; }
    uint32_t runs[] = {4, 1, 4, 0, 1, 4};
    *n = raw_spec(s, 0, 8, 2, runs);
    return s;
  }
  case 12: { /* nmembers INT32_MAX */
    uint32_t runs[] = {0, 1, INT32_MAX};
    *n = raw_spec(s, 0, INT32_MAX, 1, runs);
    return s;
  }
  case 13: { /* 64 runs of 1, ranks 0..7 then far away */
    uint32_t runs[64 * 3];
    for (int i = 0; i < 64; i++) {
      runs[3 * i] = i < 8 ? (uint32_t)i : (uint32_t)(1000 + i * 7);
      runs[3 * i + 1] = 1 + (uint32_t)i;
      runs[3 * i + 2] = 1;
    }
    *n = raw_spec(s, 0, 64, 64, runs);
    return s;
  }
  case 14: { /* rank 0 first: a spec naming only rank 0 (expected 1) */
    *first = 1;
    uint32_t runs[] = {0, 1, 1, 1000, 1, 7};
    if (me != 0) { *n = (size_t)good; return s; }
    *n = raw_spec(s, 0, 8, 2, runs);
    return s;
  }
  case 15: { /* gather, everyone: stride 2 claims 0,2,4,...,14 */
    *gather = 1;
    snprintf(name, nn, "rdzv/world/g%" PRId64 "/gather/p%d", gen, p);
    uint32_t runs[] = {0, 2, 8};
    *n = raw_spec(s, 0, 8, 1, runs);
    return s;
  }
  }
  return NULL;
}

static int coll_rank(const char *leaf, int host, int lr, int probe_only,
                     int late_ms) {
  char addr[128], hname[16], err[1024] = "";
  snprintf(hname, sizeof(hname), "host%d", host);
  daemon_unix_addr(dir, leaf, addr, sizeof(addr));
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "brk";
  o.host = hname;
  o.local_rank = lr;
  o.local_size = PER_HOST;
  o.world_size = WORLD;
  o.timeout_s = 60;
  o.topology = "gpu_pci=none\n";
  rdzv_rendezvous_t *r = NULL;
  if (rdzv_rendezvous_join(&o, &r, err, sizeof(err)) < 0) {
    fprintf(stderr, "join: %s\n", err);
    return 1;
  }
  int me = rdzv_rendezvous_rank(r);
  int64_t gen = rdzv_rendezvous_generation(r);
  rdzv_client_t *c = rdzv_rendezvous_client(r);
  int bad = 0;
  for (int p = 0; p < NPROBES; p++) {
    if (probe_only >= 0 && p != probe_only)
      continue;
    char name[128];
    size_t n;
    int gather, first;
    const uint8_t *spec = probe_spec(p, me, gen, name, sizeof(name), &n,
                                     &gather, &first);
    /* align: a barrier without spec first */
    char al[64];
    snprintf(al, sizeof(al), "align/%d", p);
    rdzv_store_barrier(c, al, (uint64_t)me, WORLD, 60);
    if (first && me != 0)
      usleep(30 * 1000);
    if (lr == PER_HOST - 1)
      usleep((useconds_t)late_ms * 1000);
    double t0 = now_ms();
    int rc;
    if (gather) {
      char data[16];
      snprintf(data, sizeof(data), "m%d", me);
      struct rdzv_value *v = NULL;
      rc = rdzv_store_gather_of(c, name, (uint64_t)me, WORLD, data,
                                strlen(data), spec, n, &v, 60);
      if (rc == 0) {
        for (int i = 0; i < WORLD; i++) {
          char want[16];
          snprintf(want, sizeof(want), "m%d", i);
          if (v[i].member != (uint64_t)i || v[i].len != strlen(want) ||
              memcmp(v[i].data, want, v[i].len) != 0) {
            fprintf(stderr, "probe %d rank %d: value %d wrong\n", p, me, i);
            bad = 1;
          }
        }
        rdzv_values_free(v, WORLD);
      }
    } else {
      rc = rdzv_store_barrier_of(c, name, (uint64_t)me, WORLD, spec, n, 60);
    }
    double t1 = now_ms();
    printf("probe %2d rank %d rc %d (%s) %.1f ms\n", p, me, rc,
           rc ? rdzv_client_last_error(c) : "ok", t1 - t0);
    fflush(stdout);
    if (rc != 0)
      bad = 1;
  }
  rdzv_rendezvous_destroy(r);
  return bad;
}

static struct proc root, mid, leaf[2];
static int split_tree; /* leaf1 under the root: mid sees half */
static char root_tcp[64], mid_tcp[64], leaf_tcp[2][64];

static int tree_start(const char *const *root_opts,
                      const char *const *mid_opts,
                      const char *const *leaf_opts) {
  snprintf(dir, sizeof(dir), "/tmp/rdzv-brk-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, root_opts, root_tcp) < 0 ||
      daemon_start(&mid, dir, "mid", root_tcp, mid_opts, mid_tcp) < 0 ||
      daemon_start(&leaf[0], dir, "leaf0", mid_tcp, leaf_opts, leaf_tcp[0]) <
          0 ||
      daemon_start(&leaf[1], dir, "leaf1", split_tree ? root_tcp : mid_tcp,
                   leaf_opts, leaf_tcp[1]) <
          0)
    return -1;
  return 0;
}

static int tree_stop(void) {
  int st[4] = {proc_stop(&leaf[1]), proc_stop(&leaf[0]), proc_stop(&mid),
               proc_stop(&root)};
  printf("exit: leaf1 %d leaf0 %d mid %d root %d\n", st[0], st[1], st[2],
         st[3]);
  rm_rf(dir);
  return st[0] | st[1] | st[2] | st[3];
}

static int run_ranks(int probe_only, int late_ms) {
  pid_t pids[WORLD];
  for (int i = 0; i < WORLD; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char lf[16];
      snprintf(lf, sizeof(lf), "leaf%d", i / PER_HOST);
      _exit(coll_rank(lf, i / PER_HOST, i % PER_HOST, probe_only, late_ms));
    }
  }
  int bad = 0;
  for (int i = 0; i < WORLD; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      bad++;
  }
  printf("ranks failed: %d\n", bad);
  return bad;
}


/* ---- joins ------------------------------------------------------------ */

struct jopt {
  int local_size;  /* claimed local size (0: PER_HOST) */
  int two_hosts;   /* every rank on leaf0, hosts 0 and 1 */
  int late_ms;     /* local rank 3 comes this late */
  int rejoin;      /* join, barrier, rank 0 aborts, all join again */
  int second;      /* then join a second round, "second" */
  int kill_leaf0_ms; /* kill leaf0 this long after the start, restart it */
  const char *round;
};

static int join_once(const char *lfname, int host, int lr, const struct jopt *jo,
                     rdzv_rendezvous_t **out, double *ms) {
  char addr[128], hname[16], err[1024] = "";
  snprintf(hname, sizeof(hname), "host%d", host);
  daemon_unix_addr(dir, lfname, addr, sizeof(addr));
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "brk";
  o.host = hname;
  if (jo->round)
    o.round = jo->round;
  o.local_rank = lr;
  o.local_size = jo->local_size ? jo->local_size : PER_HOST;
  o.world_size = WORLD;
  o.timeout_s = 60;
  o.topology = "gpu_pci=none\n";
  double t0 = now_ms();
  int rc = rdzv_rendezvous_join(&o, out, err, sizeof(err));
  *ms = now_ms() - t0;
  fprintf(stderr, "T host %d lr %d join %.1f .. %.1f\n", host, lr,
          fmod(t0, 100000.0), fmod(now_ms(), 100000.0));
  if (rc < 0)
    fprintf(stderr, "host %d lr %d join: %d %s\n", host, lr, rc, err);
  return rc;
}

static int join_rank(int idx, const struct jopt *jo, int wfd) {
  int host = idx / PER_HOST, lr = idx % PER_HOST;
  char lf[16];
  snprintf(lf, sizeof(lf), "leaf%d", jo->two_hosts ? 0 : host);
  if (lr == PER_HOST - 1 && jo->late_ms)
    usleep((useconds_t)jo->late_ms * 1000);
  rdzv_rendezvous_t *r = NULL;
  double ms;
  if (join_once(lf, host, lr, jo, &r, &ms) < 0)
    return 1;
  char line[256];
  int n = snprintf(line, sizeof(line), "J %d %d %d %d %d %" PRId64 " %.1f\n",
                   idx, rdzv_rendezvous_rank(r), rdzv_rendezvous_local_rank(r),
                   rdzv_rendezvous_node_rank(r), rdzv_rendezvous_local_size(r),
                   rdzv_rendezvous_generation(r), ms);
  if (write(wfd, line, (size_t)n) != n)
    return 1;
  if (jo->second) {
    struct jopt j2 = *jo;
    j2.round = "second";
    rdzv_rendezvous_t *r2 = NULL;
    if (lr == PER_HOST - 1 && jo->late_ms)
      usleep((useconds_t)jo->late_ms * 1000);
    if (join_once(lf, host, lr, &j2, &r2, &ms) < 0)
      return 1;
    n = snprintf(line, sizeof(line), "J %d %d %d %d %d %d %.1f\n", idx,
                 rdzv_rendezvous_rank(r2), rdzv_rendezvous_local_rank(r2),
                 rdzv_rendezvous_node_rank(r2),
                 rdzv_rendezvous_local_size(r2),
                 10 + (int)rdzv_rendezvous_generation(r2), ms);
    if (write(wfd, line, (size_t)n) != n)
      return 1;
    rdzv_rendezvous_destroy(r2);
  }
  if (jo->rejoin) {
    int rc = rdzv_rendezvous_barrier(r, "before", 60);
    if (rc != 0)
      fprintf(stderr, "barrier before: %d\n", rc);
    if (rdzv_rendezvous_rank(r) == 0) {
      usleep(100 * 1000);
      rdzv_rendezvous_abort(r, "breaker abort", 10);
    } else {
      /* wait to see the abort */
      rc = rdzv_rendezvous_barrier(r, "never", 60);
      fprintf(stderr, "T host %d lr %d never -> %d at %.1f\n", host, lr, rc,
              fmod(now_ms(), 100000.0));
      if (rc != RDZV_EABORTED)
        fprintf(stderr, "idx %d: expected aborted, got %d\n", idx, rc);
    }
    rdzv_rendezvous_destroy(r);
    r = NULL;
    if (lr == PER_HOST - 1 && jo->late_ms)
      usleep((useconds_t)jo->late_ms * 1000);
    if (join_once(lf, host, lr, jo, &r, &ms) < 0)
      return 1;
    n = snprintf(line, sizeof(line), "J %d %d %d %d %d %" PRId64 " %.1f\n",
                 idx, rdzv_rendezvous_rank(r), rdzv_rendezvous_local_rank(r),
                 rdzv_rendezvous_node_rank(r), rdzv_rendezvous_local_size(r),
                 rdzv_rendezvous_generation(r), ms);
    if (write(wfd, line, (size_t)n) != n)
      return 1;
    rc = rdzv_rendezvous_barrier(r, "after", 60);
    if (rc != 0) {
      fprintf(stderr, "barrier after: %d %s\n", rc,
              rdzv_rendezvous_last_error(r));
      return 1;
    }
  }
  rdzv_rendezvous_destroy(r);
  return 0;
}

/* Runs the 8 ranks; checks the assignments (ranks 0..7 once each per
 * generation, local ranks within a node rank distinct). */
static int run_joins(const struct jopt *jo) {
  int pfd[2];
  if (pipe(pfd) < 0)
    return 1;
  pid_t pids[WORLD];
  for (int i = 0; i < WORLD; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      close(pfd[0]);
      _exit(join_rank(i, jo, pfd[1]));
    }
  }
  close(pfd[1]);
  int bad = 0;
  if (jo->kill_leaf0_ms) {
    usleep((useconds_t)jo->kill_leaf0_ms * 1000);
    kill(leaf[0].pid, SIGKILL);
    printf("killed leaf0: %d\n", proc_wait(&leaf[0]));
    usleep(200 * 1000);
    const char *lo[] = {"--flush-ms=5", "--flush-max-ms=1500", "--children=0",
                        NULL};
    if (daemon_start(&leaf[0], dir, "leaf0", mid_tcp, lo, leaf_tcp[0]) < 0)
      printf("restart failed\n");
  }
  for (int i = 0; i < WORLD; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      bad++;
  }
  char buf[8192];
  ssize_t n = read(pfd[0], buf, sizeof(buf) - 1);
  close(pfd[0]);
  buf[n > 0 ? n : 0] = '\0';
  int seen[64][WORLD] = {{0}};
  double maxms[64] = {0};
  for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
    int idx, rank, lr, nr, ls;
    int64_t gen;
    double ms;
    if (sscanf(l, "J %d %d %d %d %d %" SCNd64 " %lf", &idx, &rank, &lr, &nr,
               &ls, &gen, &ms) != 7 || gen < 0 || gen >= 64 || rank < 0 ||
        rank >= WORLD) {
      printf("bad line: %s\n", l);
      bad++;
      continue;
    }
    if (seen[gen][rank]++)
      printf("gen %" PRId64 ": rank %d twice\n", gen, rank), bad++;
    if (ms > maxms[gen])
      maxms[gen] = ms;
    printf("  idx %d -> rank %d local %d node %d lsize %d gen %" PRId64
           " %.1f ms\n", idx, rank, lr, nr, ls, gen, ms);
  }
  for (int g = 0; g < 64; g++)
    if (maxms[g] > 0)
      printf("gen %d: slowest join %.1f ms\n", g, maxms[g]);
  printf("ranks failed: %d\n", bad);
  return bad;
}


/* ---- chaos: collectives while a node dies ---------------------------- */

static struct proc top;
static char top_tcp[64];

static int chaos_rank(int idx, int iters) {
  int host = idx / PER_HOST, lr = idx % PER_HOST;
  char lf[16];
  snprintf(lf, sizeof(lf), "leaf%d", host);
  struct jopt jo = {0};
  rdzv_rendezvous_t *r = NULL;
  double ms;
  if (join_once(lf, host, lr, &jo, &r, &ms) < 0)
    return 1;
  int me = rdzv_rendezvous_rank(r);
  int64_t gen = rdzv_rendezvous_generation(r);
  rdzv_client_t *c = rdzv_rendezvous_client(r);
  uint8_t spec[RDZV_MEMBERS_MAX_BYTES];
  int sl = rdzv_members_encode(NULL, WORLD, RDZV_MEMBERS_EACH, spec,
                               sizeof(spec));
  int bad = 0;
  double worst = 0;
  for (int it = 0; it < iters && !bad; it++) {
    char name[128], data[16];
    snprintf(name, sizeof(name), "rdzv/world/g%" PRId64 "/gather/c%d", gen,
             it);
    snprintf(data, sizeof(data), "m%d.%d", me, it);
    if (lr == (it % PER_HOST))
      usleep(20 * 1000);
    struct rdzv_value *v = NULL;
    double t0 = now_ms();
    int rc = rdzv_store_gather_of(c, name, (uint64_t)me, WORLD, data,
                                  strlen(data), spec, (size_t)sl, &v, 60);
    double dt = now_ms() - t0;
    if (dt > worst)
      worst = dt;
    if (rc != 0) {
      fprintf(stderr, "rank %d iter %d: %d %s\n", me, it, rc,
              rdzv_client_last_error(c));
      bad = 1;
      break;
    }
    for (int i = 0; i < WORLD; i++) {
      char want[16];
      snprintf(want, sizeof(want), "m%d.%d", i, it);
      if (v[i].member != (uint64_t)i || v[i].len != strlen(want) ||
          memcmp(v[i].data, want, v[i].len) != 0) {
        fprintf(stderr, "rank %d iter %d: value %d wrong\n", me, it, i);
        bad = 1;
      }
    }
    rdzv_values_free(v, WORLD);
    if (dt > 200)
      fprintf(stderr, "rank %d iter %d: %.1f ms\n", me, it, dt);
    usleep(30 * 1000);
  }
  printf("rank %d worst %.1f ms bad %d\n", me, worst, bad);
  rdzv_rendezvous_destroy(r);
  return bad;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "coll";
  int probe = argc > 2 ? atoi(argv[2]) : -1;
  if (argc > 3)
    guard_ms = atoi(argv[3]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  char g[64];
  snprintf(g, sizeof(g), "--flush-max-ms=%d", guard_ms);
  if (strcmp(mode, "coll") == 0) {
    const char *mo[] = {"--flush-ms=5", g, "--children=2", "--local-ranks=0",
                        NULL};
    const char *lo[] = {"--flush-ms=5", g, "--children=0", NULL};
    if (tree_start(NULL, mo, lo) < 0)
      return 2;
    int bad = run_ranks(probe, 100);
    printf("mid coll_subtree_flushes %" PRId64 " leaf0 %" PRId64 "\n",
           stats_at(mid_tcp, "coll_subtree_flushes"),
           stats_at(leaf_tcp[0], "coll_subtree_flushes"));
    return tree_stop() | bad;
  }
  if (strcmp(mode, "maxkey") == 0) {
    const char *ro[] = {"--max-key-bytes=64", NULL};
    const char *mo[] = {"--flush-ms=5", g, NULL};
    if (tree_start(ro, mo, mo) < 0)
      return 2;
    int bad = run_ranks(probe, 0);
    return tree_stop() | bad;
  }


  if (strcmp(mode, "chaos") == 0) {
    const char *victim = argc > 2 ? argv[2] : "mid";
    const char *to[] = {"--flush-ms=5", g, "--children=1", "--local-ranks=0",
                        NULL};
    const char *mo[] = {"--flush-ms=5", g, "--children=2", "--local-ranks=0",
                        NULL};
    const char *lo[] = {"--flush-ms=5", g, "--children=0", NULL};
    snprintf(dir, sizeof(dir), "/tmp/rdzv-brk-XXXXXX");
    char anc[200];
    if (mkdtemp(dir) == NULL ||
        daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0 ||
        daemon_start(&top, dir, "top", root_tcp, to, top_tcp) < 0 ||
        daemon_start(&mid, dir, "mid", top_tcp, mo, mid_tcp) < 0)
      return 2;
    for (int i = 0; i < 2; i++) {
      char nm[16];
      snprintf(nm, sizeof(nm), "leaf%d", i);
      snprintf(anc, sizeof(anc), "%s", mid_tcp);
      if (daemon_start(&leaf[i], dir, nm, anc, lo, leaf_tcp[i]) < 0)
        return 2;
    }
    pid_t pids[WORLD];
    for (int i = 0; i < WORLD; i++)
      if ((pids[i] = fork()) == 0)
        _exit(chaos_rank(i, 60));
    usleep(1200 * 1000);
    struct proc *vp = strcmp(victim, "mid") == 0 ? &mid : &leaf[1];
    kill(vp->pid, SIGKILL);
    int vst = proc_wait(vp);
    printf("killed %s (%d)\n", victim, vst);
    int bad = 0;
    for (int i = 0; i < WORLD; i++) {
      int st = 0;
      waitpid(pids[i], &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad++;
    }
    printf("ranks failed: %d\n", bad);
    int st[4] = {vp == &leaf[1] ? 0 : proc_stop(&leaf[1]), proc_stop(&leaf[0]),
                 vp == &mid ? 0 : proc_stop(&mid), proc_stop(&top)};
    int rs = proc_stop(&root);
    printf("exit: leaf1 %d leaf0 %d mid %d top %d root %d\n", st[0], st[1],
           st[2], st[3], rs);
    rm_rf(dir);
    return bad | st[0] | st[1] | st[2] | st[3] | rs;
  }
  if (strcmp(mode, "join") == 0) {
    /* argv[2] a variant letter */
    const char *v = argc > 2 ? argv[2] : "A";
    const char *mo_ok[] = {"--flush-ms=5", g, "--children=2",
                           "--local-ranks=0", NULL};
    const char *mo_3[] = {"--flush-ms=5", g, "--children=3",
                          "--local-ranks=0", NULL};
    const char *mo_1[] = {"--flush-ms=5", g, "--children=1",
                          "--local-ranks=0", NULL};
    const char *mo_auto[] = {"--flush-ms=5", g, "--children=2", NULL};
    const char *lo_ok[] = {"--flush-ms=5", g, "--children=0", NULL};
    const char *lo_l2[] = {"--flush-ms=5", g, "--children=0",
                           "--local-ranks=2", NULL};
    const char *lo_l6[] = {"--flush-ms=5", g, "--children=0",
                           "--local-ranks=6", NULL};
    const char *lo_c1[] = {"--flush-ms=5", g, "--children=1", NULL};
    const char *const *mo = mo_ok, *const *lo = lo_ok;
    struct jopt jo = {.late_ms = 300};
    split_tree = 1;
    const char *ms_1[] = {"--flush-ms=5", g, "--children=1",
                          "--local-ranks=0", NULL};
    const char *ms_0[] = {"--flush-ms=5", g, "--children=0",
                          "--local-ranks=0", NULL};
    mo_ok[2] = "--children=1";
    mo_3[2] = "--children=2";
    switch (v[0]) {
    case 'A': break;
    case 'B': mo = mo_3; break;
    case 'C': mo = ms_0; break;
    case 'M': mo = ms_1; (void)mo_1; break;
    case 'D': lo = lo_l2; break;
    case 'E': lo = lo_l6; break;
    case 'F': jo.local_size = 2; break;
    case 'G': jo.two_hosts = 1; break;
    case 'H': mo = mo_auto; break;
    case 'I': lo = lo_c1; break;
    case 'J': jo.rejoin = 1; break;
    case 'K': jo.rejoin = 1; mo = mo_3; break;
    case 'L': jo.local_size = 6; break;
    case 'R': jo.second = 1; break;
    case 'X': jo.kill_leaf0_ms = 1000; jo.late_ms = 2500; break;
    }
    if (tree_start(NULL, mo, lo) < 0)
      return 2;
    int bad = run_joins(&jo);
    printf("join forwarded: leaf0 %" PRId64 " leaf1 %" PRId64 " mid %" PRId64
           "; subtree flushes leaf0 %" PRId64 " mid %" PRId64 "\n",
           stats_at(leaf_tcp[0], "ops.join.forwarded"),
           stats_at(leaf_tcp[1], "ops.join.forwarded"),
           stats_at(mid_tcp, "ops.join.forwarded"),
           stats_at(leaf_tcp[0], "join_subtree_flushes"),
           stats_at(mid_tcp, "join_subtree_flushes"));
    return tree_stop() | bad;
  }
  fprintf(stderr, "unknown mode\n");
  return 2;
}
