/* The spares tests' harness: see spares_harness.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spares_harness.h"
#include "rdzv/rdzv.h"

const char *g_job = "spares";
int32_t g_segment;
static int64_t g_domains_gen; /* see domains_seen */

char dir[64];
struct proc root, node[NODES];
char root_tcp[64], root_addr[160], node_addr[NODES][160];
struct host hosts[MAXH];
int nhosts;
static int rep_r = -1, rep_w = -1;
struct spares_hooks spares_hooks;
char quarantined_text_of[MAXH][600];

/* ---- a host: a process, a thread per rank ------------------------------- */

struct rankarg {
  int h, lr;
};

void send_rep(struct srep *r) {
  if (write(rep_w, r, sizeof(*r)) != (ssize_t)sizeof(*r))
    _exit(3);
}

void read_rep(struct srep *r) {
  assert_int_equal(read(rep_r, r, sizeof(*r)), sizeof(*r));
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
    void *st = NULL;
    if (rp.status == 0 && spares_hooks.placed != NULL) {
      int hs = spares_hooks.placed(r, &rp, &st);
      if (hs != 0) { /* the hook failed: say so, and join again */
        rp.status = hs;
        rdzv_rendezvous_destroy(r);
        r = NULL;
      }
    }
    struct srep placed = rp;
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
    int wrc = rdzv_store_wait(rdzv_rendezvous_client(r), keys, 1, 3600);
    if (spares_hooks.ended != NULL)
      spares_hooks.ended(r, &placed, wrc, st);
    rdzv_rendezvous_destroy(r);
  }
  return NULL;
}

void host_start(int i) {
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
void hosts_kill(const int *idx, int n) {
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

void host_kill(int i) { hosts_kill(&i, 1); }

int add_host(const char *name, int domain, bool spare) {
  struct host *h = &hosts[nhosts];
  snprintf(h->name, sizeof(h->name), "%s", name);
  snprintf(h->domain, sizeof(h->domain), "d%d", domain);
  h->spare = spare;
  h->node_rank = -1;
  return nhosts++;
}

/* ---- daemons -------------------------------------------------------------- */

int spares_setup(void **state) {
  (void)state;
  static const char *const root_opts[] = {"--spare-wait-ms=1500",
                                          "--session-grace-ms=1000", NULL};
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
    static const char *const node_opts[] = {"--session-grace-ms=1000", health,
                                            NULL};
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

int spares_teardown(void **state) {
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
  memset(quarantined_text_of, 0, sizeof(quarantined_text_of));
  g_domains_gen = 0;
  return bad ? -1 : 0;
}

void check_alive(void) {
  int st;
  assert_int_equal(waitpid(root.pid, &st, WNOHANG), 0);
  for (int n = 0; n < NODES; n++)
    if (waitpid(node[n].pid, &st, WNOHANG) != 0)
      fail_msg("node n%d died", n);
}

int64_t root_stat(const char *what) {
  char path[128];
  snprintf(path, sizeof(path), "rounds.%s.world.%s", JOB, what);
  return stats_at_job(root_addr, JOB, path);
}

/* ---- a round's outcome ----------------------------------------------------- */

/* The latest "rdzv/world/g<G>/domains" rank 0 reported, and its G. */
static char g_domains[600];

static void domains_seen(const struct srep *rp) {
  if (rp->gen > g_domains_gen) {
    g_domains_gen = rp->gen;
    memcpy(g_domains, rp->text + 8, sizeof(g_domains) - 8);
  }
}

const char *domains_of(int64_t gen) {
  while (g_domains_gen < gen) {
    struct srep rp;
    assert_int_equal(read(rep_r, &rp, sizeof(rp)), sizeof(rp));
    if (rp.status == 1)
      domains_seen(&rp);
  }
  assert_int_equal(g_domains_gen, gen);
  return g_domains;
}

void collect(int64_t after, int want, struct world *w) {
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
      memcpy(quarantined_text_of[rp.host], rp.text, sizeof(rp.text));
      w->quarantined_reports[rp.host]++;
      continue;
    }
    if (rp.status == 1) { /* rank 0's domains of its generation */
      domains_seen(&rp);
      continue;
    }
    if (rp.status >= 2) { /* a hook's */
      if (spares_hooks.report == NULL)
        fail_msg("%s local rank %d: report %d without a hook: %s",
                 hosts[rp.host].name, rp.lr, rp.status, rp.text);
      spares_hooks.report(&rp);
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
void check_places(const struct world *w, const int *lost, int nlost,
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
               w->host_of_node[place] >= 0 ? hosts[w->host_of_node[place]].name
                                           : "nobody",
               hosts[fills[k]].name);
  }
  for (int i = 0; i < nhosts; i++)
    hosts[i].node_rank = -1;
  for (int nr = 0; nr < w->nodes; nr++)
    hosts[w->host_of_node[nr]].node_rank = nr;
}

/* Every domain present in the world has 4 hosts. */
void check_domains_whole(const struct world *w) {
  int count[10] = {0};
  for (int nr = 0; nr < w->nodes; nr++)
    count[hosts[w->host_of_node[nr]].domain[1] - '0']++;
  for (int d = 0; d < 10; d++)
    if (count[d] != 0 && count[d] != 4)
      fail_msg("domain d%d has %d hosts in the world", d, count[d]);
}

/* A host of domain d in the world, not a spare, chosen at random. */
int victim_in(int d) {
  int pick[MAXH], n = 0;
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].node_rank >= 0 && hosts[i].domain[1] - '0' == d &&
        !hosts[i].spare && hosts[i].name[0] == 'a')
      pick[n++] = i;
  assert_true(n > 0);
  return pick[rand() % n];
}

void report(const char *what, const struct world *w) {
  printf("%s: generation %" PRId64 ", %d ranks; parked at the root: %" PRId64
         " ranks; spares promoted %" PRId64 "\n",
         what, w->gen, w->size, root_stat("parked_ranks"),
         root_stat("spares_promoted"));
  fflush(stdout);
}
