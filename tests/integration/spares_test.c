/* Spares, parked hosts and replacement with real daemons: a root
 * (--spare-wait-ms 1500) and 4 nodes; 16 active hosts a0..a15 in 4
 * domains d0..d3 (a0-a3 in d0, ...) and 4 spares s0..s3 (s<k> in d<k>),
 * 2 ranks each (a forked process per host, a thread per rank, each a real
 * librdzv client joining round "world" of world size 32, minimum 24).
 * Every rank, once placed, waits for its generation's end
 * ("rdzv/world/g<G>/next" or its abort) and joins again; a spare waits
 * parked inside rdzv_rendezvous_join. Seven rounds, each checked:
 *   1. a host of d0 killed (-9): s0 takes its node rank and ranks;
 *   2. a host of d1 killed and restarted at once: it keeps its place
 *      (previous hosts first), no spare is used;
 *   3. two hosts (d1, d2) killed at once, the d2 one restarted at once but
 *      failing its node's health check (--health-cmd): it is quarantined
 *      (its ranks refused with RDZV_EQUARANTINED, naming it and the
 *      check's output), and s1 and s2 take the two places;
 *   4. an extra active host x0 (d3) arrives: it is parked (RDZV_EPARKED),
 *      no generation opens (it is not counted as waiting);
 *   5. a host of d3 killed: x0, an active host, takes the place; s3 stays
 *      parked;
 *   6. a host of d0 killed: s3, the last spare, takes it (another domain);
 *   7. a host killed with no spare left: the world shrinks to 30 ranks
 *      (within the minimum) and the hosts after the place move down.
 * Invariants after every round: one new generation, on every rank the
 * same generation and world, ranks 0..W-1 each once and contiguous per
 * host by node rank; the survivors kept their node ranks (and ranks); the
 * replacements hold the lost places; while a spare of the lost host's
 * domain was left, every domain in the world is whole (4 hosts); the root
 * lists the parked spares (rdzvctl members' data) and the replacements;
 * no daemon died. The nodes' health gate passes every host but one whose
 * marker file DIR/unhealthy-HOST exists. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

#define NODES 4
#define PER 2
#define ACTIVE 16
#define SPARES 4
#define MAXH (ACTIVE + 2 * SPARES + 2)
#define WORLD (ACTIVE * PER)

/* The job the ranks join: test_spares places hosts one by one,
 * test_segments places whole domains (segments of 4 hosts). */
static const char *g_job = "spares";
static int32_t g_segment;
#define JOB g_job
static int64_t g_domains_gen; /* see domains_seen */

struct host {
  char name[16], domain[16];
  bool spare;
  pid_t pid;
  int node_rank; /* in the last world, -1 if not in it */
};

struct srep {
  int32_t host, lr, status, rank, world, node_rank;
  int64_t gen;
  char text[600]; /* a write of the whole struct stays atomic (PIPE_BUF) */
};

static char dir[64];
static struct proc root, node[NODES];
static char root_tcp[64], root_addr[160], node_addr[NODES][160];
static struct host hosts[MAXH];
static int nhosts;
static int rep_r = -1, rep_w = -1;

/* ---- a host: a process, a thread per rank ------------------------------- */

struct rankarg {
  int h, lr;
};

static void send_rep(struct srep *r) {
  if (write(rep_w, r, sizeof(*r)) != (ssize_t)sizeof(*r))
    _exit(3);
}

static void *rank_main(void *arg) {
  const struct rankarg *ra = arg;
  const struct host *h = &hosts[ra->h];
  for (;;) {
    struct rdzv_rendezvous_opts o;
    rdzv_rendezvous_opts_init(&o);
    o.addr = node_addr[ra->h % NODES];
    o.job_id = JOB;
    o.host = h->name;
    o.domain = h->domain;
    o.segment_hosts = g_segment;
    o.role = h->spare ? RDZV_MEMBER_SPARE : RDZV_MEMBER_ACTIVE;
    o.local_rank = ra->lr;
    o.local_size = PER;
    o.world_size = WORLD;
    o.min_size = WORLD - 8;
    o.last_call_s = 2; /* longer than --spare-wait-ms: the spare wait
                          decides when spares are placed */
    o.timeout_s = h->spare ? 600 : 60;
    o.topology = "gpu=test\n";
    rdzv_rendezvous_t *r = NULL;
    struct srep rp = {.host = ra->h, .lr = ra->lr, .rank = -1};
    rp.status = rdzv_rendezvous_join(&o, &r, rp.text, sizeof(rp.text));
    if (rp.status == 0) {
      rp.rank = rdzv_rendezvous_rank(r);
      rp.world = rdzv_rendezvous_world_size(r);
      rp.node_rank = rdzv_rendezvous_node_rank(r);
      rp.gen = rdzv_rendezvous_generation(r);
    }
    send_rep(&rp);
    if (r == NULL) {
      usleep(300 * 1000); /* parked (an active past the maximum), or the
                             generation formed failed: join again */
      continue;
    }
    /* Placed: the generation runs until it ends (a member lost, or a
     * newer one opened), then join again. */
    char key[64];
    snprintf(key, sizeof(key), "rdzv/world/g%" PRId64 "/next", rp.gen);
    if (rp.rank == 0) { /* the domains the world used, for the test */
      snprintf(rp.text, sizeof(rp.text), "domains ");
      char dk[64];
      snprintf(dk, sizeof(dk), "rdzv/world/g%" PRId64 "/domains", rp.gen);
      void *v = NULL;
      size_t vl = 0;
      if (rdzv_store_get(rdzv_rendezvous_client(r), dk, &v, &vl, 30) == 0)
        snprintf(rp.text + 8, sizeof(rp.text) - 8, "%.*s", (int)vl,
                 (const char *)v);
      rdzv_free(v);
      rp.status = 1; /* a second report: not a join's */
      send_rep(&rp);
    }
    const char *keys[1] = {key};
    rdzv_store_wait(rdzv_rendezvous_client(r), keys, 1, 3600);
    rdzv_rendezvous_destroy(r);
  }
  return NULL;
}

static void host_start(int i) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(rep_r);
    pthread_t t[PER];
    static struct rankarg ra[PER];
    for (int lr = 0; lr < PER; lr++) {
      ra[lr] = (struct rankarg){i, lr};
      pthread_create(&t[lr], NULL, rank_main, &ra[lr]);
    }
    for (int lr = 0; lr < PER; lr++)
      pthread_join(t[lr], NULL);
    _exit(0);
  }
  hosts[i].pid = pid;
}

/* kill -9 the hosts of idx (n of them) at once, then reap them. */
static void hosts_kill(const int *idx, int n) {
  for (int k = 0; k < n; k++) {
    assert_true(hosts[idx[k]].pid > 0);
    printf("killing %s (node rank %d)\n", hosts[idx[k]].name,
           hosts[idx[k]].node_rank);
    kill(hosts[idx[k]].pid, SIGKILL);
  }
  for (int k = 0; k < n; k++) {
    int st;
    waitpid(hosts[idx[k]].pid, &st, 0);
    hosts[idx[k]].pid = 0;
  }
}

static void host_kill(int i) { hosts_kill(&i, 1); }

static int add_host(const char *name, int domain, bool spare) {
  struct host *h = &hosts[nhosts];
  snprintf(h->name, sizeof(h->name), "%s", name);
  snprintf(h->domain, sizeof(h->domain), "d%d", domain);
  h->spare = spare;
  h->node_rank = -1;
  return nhosts++;
}

/* ---- daemons -------------------------------------------------------------- */

static int setup(void **state) {
  (void)state;
  static const char *const root_opts[] = {
      "--spare-wait-ms=1500", "--session-grace-ms=1000", NULL};
  snprintf(dir, sizeof(dir), "/tmp/rdzv-spares-XXXXXX");
  if (mkdtemp(dir) == NULL ||
      daemon_start(&root, dir, "root", NULL, root_opts, root_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  for (int n = 0; n < NODES; n++) {
    char name[16], tcp[64];
    snprintf(name, sizeof(name), "n%d", n);
    static char health[256];
    snprintf(health, sizeof(health),
             "--health-cmd=if [ -e %s/unhealthy-$RDZV_HEALTH_HOST ]; then "
             "echo 'GPU 0: uncorrectable ECC errors'; exit 1; fi",
             dir);
    static const char *const node_opts[] = {"--session-grace-ms=1000",
                                            health, NULL};
    if (daemon_start(&node[n], dir, name, root_tcp, node_opts, tcp) < 0)
      return -1;
    daemon_unix_addr(dir, name, node_addr[n], sizeof(node_addr[n]));
  }
  int fds[2];
  if (pipe(fds) < 0)
    return -1;
  rep_r = fds[0];
  rep_w = fds[1];
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].pid > 0)
      host_kill(i);
  for (int n = 0; n < NODES; n++)
    bad |= proc_stop(&node[n]) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  close(rep_r);
  close(rep_w);
  nhosts = 0;
  g_domains_gen = 0;
  return bad ? -1 : 0;
}

static void check_alive(void) {
  int st;
  assert_int_equal(waitpid(root.pid, &st, WNOHANG), 0);
  for (int n = 0; n < NODES; n++)
    if (waitpid(node[n].pid, &st, WNOHANG) != 0)
      fail_msg("node n%d died", n);
}

/* A number of the root's view of round "world" (its statistics as the
 * job sees them: rdzvctl members' and rounds' data), -1 if absent. */
static int64_t root_stat(const char *what) {
  char path[128];
  snprintf(path, sizeof(path), "rounds.%s.world.%s", JOB, what);
  return stats_at_job(root_addr, JOB, path);
}

/* ---- a round's outcome ----------------------------------------------------- */

struct world {
  int64_t gen;
  int size;
  int host_of_node[MAXH]; /* node rank -> host index */
  int nodes;
  int parked_reports[MAXH]; /* RDZV_EPARKED reports, by host */
  int quarantined_reports[MAXH]; /* RDZV_EQUARANTINED reports, by host */
  char quarantined_text[600];    /* the first one's */
};

/* The latest "rdzv/world/g<G>/domains" rank 0 reported, and its G. */
static char g_domains[600];

static void domains_seen(const struct srep *rp) {
  if (rp->gen > g_domains_gen) {
    g_domains_gen = rp->gen;
    memcpy(g_domains, rp->text + 8, sizeof(g_domains) - 8);
  }
}

/* Generation gen's domains (reports read until rank 0's comes). */
static const char *domains_of(int64_t gen) {
  while (g_domains_gen < gen) {
    struct srep rp;
    assert_int_equal(read(rep_r, &rp, sizeof(rp)), sizeof(rp));
    if (rp.status == 1)
      domains_seen(&rp);
  }
  assert_int_equal(g_domains_gen, gen);
  return g_domains;
}

/* Reads reports until every rank of one generation newer than after has
 * reported its place (want ranks); records parked reports on the way.
 * Checks ranks 0..W-1 each once, contiguous per host by node rank, one
 * world size and generation on all. */
static void collect(int64_t after, int want, struct world *w) {
  memset(w, 0, sizeof(*w));
  static struct srep got[WORLD + 16];
  int n = 0;
  for (;;) {
    struct srep rp;
    ssize_t k = read(rep_r, &rp, sizeof(rp));
    assert_int_equal(k, sizeof(rp));
    if (rp.status == RDZV_EPARKED) {
      w->parked_reports[rp.host]++;
      continue;
    }
    if (rp.status == RDZV_EQUARANTINED) {
      if (w->quarantined_text[0] == '\0')
        memcpy(w->quarantined_text, rp.text, sizeof(w->quarantined_text));
      w->quarantined_reports[rp.host]++;
      continue;
    }
    if (rp.status == 1) { /* rank 0's domains of its generation */
      domains_seen(&rp);
      continue;
    }
    if (rp.status == RDZV_EABORTED || rp.status == RDZV_ESTALE_GENERATION ||
        rp.status == RDZV_EDUPLICATE_CLAIM)
      continue; /* a join that met the end of the generation it formed, or
                   a restarted host's whose killed self was still held */
    if (rp.status != 0)
      fail_msg("%s local rank %d: %s (%s)", hosts[rp.host].name, rp.lr,
               rdzv_strerror(rp.status), rp.text);
    if (rp.gen <= after)
      continue;
    if (n > 0 && rp.gen > got[0].gen)
      n = 0; /* a newer generation: the older one is gone */
    if (n > 0 && rp.gen < got[0].gen)
      continue;
    got[n++] = rp;
    if (n == want)
      break;
  }
  w->gen = got[0].gen;
  w->size = got[0].world;
  assert_int_equal(w->size, want);
  bool seen[WORLD] = {false};
  for (int i = 0; i < MAXH; i++)
    w->host_of_node[i] = -1;
  for (int i = 0; i < n; i++) {
    assert_int_equal(got[i].world, want);
    assert_int_equal(got[i].gen, w->gen);
    assert_true(got[i].rank >= 0 && got[i].rank < want);
    assert_false(seen[got[i].rank]);
    seen[got[i].rank] = true;
    /* hosts of PER ranks: rank = node_rank * PER + local rank */
    assert_int_equal(got[i].rank, got[i].node_rank * PER + got[i].lr);
    int *slot = &w->host_of_node[got[i].node_rank];
    assert_true(*slot == -1 || *slot == got[i].host);
    *slot = got[i].host;
  }
  w->nodes = want / PER;
}

/* The new world against the last: the hosts that were in it and not in
 * lost keep their node ranks (when keep); the rest of the places are
 * filled as fills lists (host taking lost[i]'s place), and every host's
 * recorded node rank is updated. */
static void check_places(const struct world *w, const int *lost, int nlost,
                         const int *fills, bool keep) {
  for (int i = 0; i < nhosts; i++) {
    bool was_lost = false;
    for (int k = 0; k < nlost; k++)
      was_lost |= lost[k] == i;
    if (keep && hosts[i].node_rank >= 0 && !was_lost &&
        w->host_of_node[hosts[i].node_rank] != i)
      fail_msg("host %s lost its node rank %d", hosts[i].name,
               hosts[i].node_rank);
  }
  for (int k = 0; fills != NULL && k < nlost; k++) {
    int place = hosts[lost[k]].node_rank;
    if (w->host_of_node[place] != fills[k])
      fail_msg("node rank %d (was %s) is held by %s, not %s", place,
               hosts[lost[k]].name,
               w->host_of_node[place] >= 0
                   ? hosts[w->host_of_node[place]].name
                   : "nobody",
               hosts[fills[k]].name);
  }
  for (int i = 0; i < nhosts; i++)
    hosts[i].node_rank = -1;
  for (int nr = 0; nr < w->nodes; nr++)
    hosts[w->host_of_node[nr]].node_rank = nr;
}

/* Every domain present in the world has 4 hosts. */
static void check_domains_whole(const struct world *w) {
  int count[10] = {0};
  for (int nr = 0; nr < w->nodes; nr++)
    count[hosts[w->host_of_node[nr]].domain[1] - '0']++;
  for (int d = 0; d < 10; d++)
    if (count[d] != 0 && count[d] != 4)
      fail_msg("domain d%d has %d hosts in the world", d, count[d]);
}

/* A host of domain d in the world, not a spare, chosen at random. */
static int victim_in(int d) {
  int pick[MAXH], n = 0;
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].node_rank >= 0 && hosts[i].domain[1] - '0' == d &&
        !hosts[i].spare && hosts[i].name[0] == 'a')
      pick[n++] = i;
  assert_true(n > 0);
  return pick[rand() % n];
}

static void report(const char *what, const struct world *w) {
  printf("%s: generation %" PRId64 ", %d ranks; parked at the root: %" PRId64
         " ranks; spares promoted %" PRId64 "\n",
         what, w->gen, w->size, root_stat("parked_ranks"),
         root_stat("spares_promoted"));
  fflush(stdout);
}

static void test_spares(void **state) {
  (void)state;
  /* RDZV_TEST_SEED replays a run (its victims; not its timing). */
  const char *env_seed = getenv("RDZV_TEST_SEED");
  unsigned seed = env_seed != NULL ? (unsigned)strtoul(env_seed, NULL, 10)
                                   : (unsigned)time(NULL);
  srand(seed);
  printf("seed %u\n", seed);
  for (int i = 0; i < ACTIVE; i++) {
    char name[16];
    snprintf(name, sizeof(name), "a%d", i);
    add_host(name, i / 4, false);
  }
  int spare[SPARES];
  for (int k = 0; k < SPARES; k++) {
    char name[16];
    snprintf(name, sizeof(name), "s%d", k);
    spare[k] = add_host(name, k, true);
  }
  for (int i = 0; i < ACTIVE; i++)
    host_start(i);
  struct world w;
  collect(0, WORLD, &w);
  for (int nr = 0; nr < w.nodes; nr++) /* natural order: a0 .. a15 */
    assert_int_equal(w.host_of_node[nr], nr);
  check_places(&w, NULL, 0, NULL, false);
  int64_t gen = w.gen;
  /* The spares come once the world runs: parked at once, and no
   * generation opens for them. */
  for (int k = 0; k < SPARES; k++)
    host_start(spare[k]);
  while (root_stat("parked_ranks") < SPARES * PER)
    usleep(50 * 1000);
  assert_int_equal(root_stat("generation"), gen);
  report("start", &w);

  /* 1: a host of d0 lost; s0 takes its place. */
  int v = victim_in(0);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, &v, 1, &spare[0], true);
  check_domains_whole(&w);
  assert_int_equal(root_stat("spares_promoted"), 1);
  gen = w.gen;
  report("1 (a host of d0 lost)", &w);

  /* 2: a host of d1 killed and restarted at once: its place is its own
   * again, before the spare wait ends. */
  v = victim_in(1);
  host_kill(v);
  host_start(v);
  collect(gen, WORLD, &w);
  check_places(&w, NULL, 0, NULL, true);
  assert_int_equal(w.host_of_node[hosts[v].node_rank], v);
  assert_int_equal(root_stat("spares_promoted"), 0);
  gen = w.gen;
  report("2 (a host restarted)", &w);

  /* 3: two hosts lost at once (d1, d2), the d2 one back at once but
   * unhealthy: quarantined; s1 and s2 take both places. */
  int two[2] = {victim_in(1), victim_in(2)};
  int fills3[2] = {spare[1], spare[2]};
  char marker[160];
  snprintf(marker, sizeof(marker), "%s/unhealthy-%s", dir, hosts[two[1]].name);
  FILE *mf = fopen(marker, "w");
  assert_non_null(mf);
  fclose(mf);
  int64_t failed_before = 0;
  for (int n = 0; n < NODES; n++)
    failed_before += stats_at_job(node_addr[n], JOB, "health_failed");
  hosts_kill(two, 2);
  host_start(two[1]);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, two, 2, fills3, true);
  check_domains_whole(&w);
  assert_int_equal(root_stat("spares_promoted"), 2);
  /* The unhealthy host was refused, named with its check's reason, and
   * the root lists it as quarantined. */
  if (w.quarantined_reports[two[1]] == 0) { /* its ranks' first word */
    struct srep q;
    do
      assert_int_equal(read(rep_r, &q, sizeof(q)), sizeof(q));
    while (q.host != two[1] || q.status != RDZV_EQUARANTINED);
    memcpy(w.quarantined_text, q.text, sizeof(q.text));
  }
  printf("3: %s\n", w.quarantined_text);
  assert_non_null(strstr(w.quarantined_text, hosts[two[1]].name));
  assert_non_null(strstr(w.quarantined_text, "uncorrectable ECC errors"));
  int64_t failed_after = 0;
  for (int n = 0; n < NODES; n++)
    failed_after += stats_at_job(node_addr[n], JOB, "health_failed");
  assert_true(failed_after > failed_before);
  char qpath[64];
  snprintf(qpath, sizeof(qpath), "quarantine.%s.quarantined_hosts", JOB);
  assert_int_equal(stats_at_job(root_addr, JOB, qpath), 1);
  assert_true(hosts[two[1]].node_rank < 0);
  gen = w.gen;
  report("3 (two hosts lost, one back unhealthy)", &w);

  /* 4: an extra active host past the maximum: parked, no generation. */
  int x0 = add_host("x0", 3, false);
  int64_t parked = root_stat("parked_ranks");
  host_start(x0);
  struct srep rp;
  do { /* its ranks' first reports */
    assert_int_equal(read(rep_r, &rp, sizeof(rp)), sizeof(rp));
  } while (rp.host != x0);
  assert_int_equal(rp.status, RDZV_EPARKED);
  assert_non_null(strstr(rp.text, "parked as a spare"));
  while (root_stat("parked_ranks") < parked + PER)
    usleep(50 * 1000);
  assert_int_equal(root_stat("generation"), gen);
  printf("4 (an extra host): parked: %s\n", rp.text);

  /* 5: a host of d3 lost: x0, active, takes its place before s3. */
  v = victim_in(3);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, &v, 1, &x0, true);
  check_domains_whole(&w);
  assert_true(hosts[spare[3]].node_rank < 0);
  gen = w.gen;
  report("5 (a host of d3 lost)", &w);

  /* 6: a host of d0 lost: s3, the last spare, takes it. */
  v = victim_in(0);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, &v, 1, &spare[3], true);
  gen = w.gen;
  report("6 (a host of d0 lost, the last spare)", &w);

  /* 7: no spare left: the world shrinks, the places after close up. */
  v = victim_in(2);
  int place = hosts[v].node_rank;
  int before[MAXH];
  for (int i = 0; i < nhosts; i++)
    before[i] = hosts[i].node_rank;
  host_kill(v);
  collect(gen, WORLD - PER, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, &v, 1, NULL, false);
  for (int i = 0; i < nhosts; i++) {
    if (i == v || before[i] < 0)
      continue;
    int want = before[i] < place ? before[i] : before[i] - 1;
    if (hosts[i].node_rank != want)
      fail_msg("host %s: node rank %d, want %d", hosts[i].name,
               hosts[i].node_rank, want);
  }
  report("7 (no spare left)", &w);
  check_alive();
}

/* The hosts of domain d in the world, in node-rank order. */
static int in_domain(int d, int *out) {
  int n = 0;
  for (int nr = 0; nr < MAXH; nr++)
    for (int i = 0; i < nhosts; i++)
      if (hosts[i].node_rank == nr && hosts[i].domain[1] - '0' == d)
        out[n++] = i;
  return n;
}

/* Parked ranks at the root reach want. */
static void parked_reach(int64_t want) {
  while (root_stat("parked_ranks") != want)
    usleep(50 * 1000);
}

/* Whether every host of idx (n) is listed at the root (its members'
 * data: the world, parked hosts and replacements name hosts). */
static bool root_lists(const int *idx, int n) {
  char *json = stats_json_at_job(root_addr, JOB);
  bool all = json != NULL;
  for (int k = 0; all && k < n; k++) {
    char want[40];
    snprintf(want, sizeof(want), "\"%s\"", hosts[idx[k]].name);
    all = strstr(json, want) != NULL;
  }
  rdzv_free(json);
  return all;
}

/* Whole domains (segment_hosts 4): the same 16 hosts in 4 domains, a
 * spare t0 of d0 and four spares u0..u3 of d4, later v0..v3 of d5.
 *   1. a host of d0 lost: t0 repairs d0 in place (the others keep their
 *      node ranks and ranks);
 *   2. a host of d1 lost and d1 has no spare: d1 is given up whole, u0..u3
 *      take its node ranks 4-7 in order, its 3 survivors are parked;
 *   3. (the survivors stopped) v0..v3 come as spares, a host of d2 lost:
 *      v0..v3 take node ranks 8-11.
 * After each round, the checks of test_spares, every domain in the world
 * whole, and rdzv/world/g<G>/domains naming the domains by node rank. */
static void test_segments(void **state) {
  (void)state;
  g_job = "segments";
  g_segment = 4;
  for (int i = 0; i < ACTIVE; i++) {
    char name[16];
    snprintf(name, sizeof(name), "a%d", i);
    add_host(name, i / 4, false);
  }
  int t0 = add_host("t0", 0, true), u[4], v4[4];
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof(name), "u%d", k);
    u[k] = add_host(name, 4, true);
  }
  for (int i = 0; i < ACTIVE; i++)
    host_start(i);
  struct world w;
  collect(0, WORLD, &w);
  for (int nr = 0; nr < w.nodes; nr++)
    assert_int_equal(w.host_of_node[nr], nr);
  check_places(&w, NULL, 0, NULL, false);
  int64_t gen = w.gen;
  assert_string_equal(domains_of(gen), "0 4 0 8 d0\n4 4 8 8 d1\n"
                                       "8 4 16 8 d2\n12 4 24 8 d3\n");
  host_start(t0);
  for (int k = 0; k < 4; k++)
    host_start(u[k]);
  parked_reach(5 * PER);
  assert_int_equal(root_stat("generation"), gen);
  report("segments: start", &w);

  /* 1: d0 repaired in place by its own spare. */
  int v = victim_in(0);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, &v, 1, &t0, true);
  check_domains_whole(&w);
  gen = w.gen;
  assert_string_equal(domains_of(gen), "0 4 0 8 d0\n4 4 8 8 d1\n"
                                       "8 4 16 8 d2\n12 4 24 8 d3\n");
  report("segments 1 (d0 repaired by its spare)", &w);

  /* 2: d1 given up whole for u0..u3; its survivors parked. */
  int d1[4];
  assert_int_equal(in_domain(1, d1), 4);
  v = victim_in(1);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, d1, 4, u, true);
  check_domains_whole(&w);
  gen = w.gen;
  assert_string_equal(domains_of(gen), "0 4 0 8 d0\n4 4 8 8 d4\n"
                                       "8 4 16 8 d2\n12 4 24 8 d3\n");
  parked_reach(3 * PER); /* d1's survivors */
  report("segments 2 (d1 given up for d4)", &w);

  /* 3: the survivors stop; v0..v3 of d5 come as spares; d2 loses a host
   * and is given up for them. */
  int surv[3], ns = 0;
  for (int k = 0; k < 4; k++)
    if (d1[k] != v)
      surv[ns++] = d1[k];
  hosts_kill(surv, 3);
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof(name), "v%d", k);
    v4[k] = add_host(name, 5, true);
    host_start(v4[k]);
  }
  while (!root_lists(v4, 4)) /* parked: the only place they can be */
    usleep(50 * 1000);
  int d2[4];
  assert_int_equal(in_domain(2, d2), 4);
  v = victim_in(2);
  host_kill(v);
  collect(gen, WORLD, &w);
  assert_int_equal(w.gen, gen + 1);
  check_places(&w, d2, 4, v4, true);
  check_domains_whole(&w);
  gen = w.gen;
  assert_string_equal(domains_of(gen), "0 4 0 8 d0\n4 4 8 8 d4\n"
                                       "8 4 16 8 d5\n12 4 24 8 d3\n");
  report("segments 3 (d2 given up for d5)", &w);
  check_alive();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_spares, setup, teardown),
      cmocka_unit_test_setup_teardown(test_segments, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
