/* Membership chaos (issue 32): spares, extra hosts, the health gate and
 * NCCL shrink together, in rounds of random faults with real daemons.
 * A root (--spare-wait-ms 1500) and 4 nodes (spares_harness.h); 16 active
 * hosts a0..a15 in 4 domains d0..d3, 4 spares s0..s3 (s<k> in d<k>), 2
 * ranks a host. Every placed rank initializes its world communicator over
 * the FAKE NCCL (tests/fake_nccl/libfake_nccl.so, a test double loaded
 * through the production dlopen seam) before it reports its place; when
 * its generation ends it shrinks that communicator: the ranks of the
 * hosts the test killed are written first to "chaos/lost/g<G>", even
 * ranks propose them, odd ranks propose nothing and take the agreed list.
 *
 * ROUNDS (12) rounds (RDZV_TEST_SEED replays the choices, not the timing),
 * each one of:
 *   kill1      a random host of the world killed (-9);
 *   kill2      two at once;
 *   restart    one killed and restarted at once (it keeps its place);
 *   unhealthy  one killed and restarted at once failing its node's health
 *              check (it is quarantined; its place goes to a parked host);
 *   extra      an extra active host arrives while the world is full (it is
 *              parked, and no generation opens); one in the first three
 *              rounds.
 * A round that would leave fewer than 13 hosts, or more holes than
 * parked hosts while some are parked, becomes a restart.
 * Invariants after every round: one new generation (none for extra); on
 * every rank the same generation and world, ranks 0..W-1 once each and
 * contiguous per host; the world is full while parked hosts last (else
 * every hole closes up, the hosts after it moving down); the survivors
 * kept their node ranks; every hole is held by a host that was parked
 * (extra hosts before spares; with no extra parked and a spare of each
 * lost host's domain, exactly those spares, and every domain whole if
 * it was before); the
 * root's parked ranks are the model's parked hosts' (no spare counted as
 * waiting); every survivor of the generation that lost hosts shrank with
 * one exclude list, the lost ranks, its rank renumbered without them; a
 * quarantined host's ranks were refused naming it and its check's
 * output; no daemon died. No assertion depends on wall-clock time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/comm.h"
#include "rdzv/rdzv.h"
#include "spares_harness.h"

#define ROUNDS 12
#define FAKE "tests/fake_nccl/libfake_nccl.so"
#define MIN_HOSTS 13

/* ---- in the ranks ---------------------------------------------------------- */

static int rank_placed(rdzv_rendezvous_t *r, struct srep *rp, void **st) {
  struct rdzv_comm_opts co;
  rdzv_comm_t *world = NULL;
  struct ncclComm *nc = NULL;
  rdzv_comm_opts_init(&co);
  co.nccl_path = FAKE;
  int rc = rdzv_comm_world(r, &co, &world);
  if (rc == 0)
    rc = rdzv_comm_nccl(world, &nc, 120);
  if (rc < 0) {
    snprintf(rp->text, sizeof(rp->text), "world communicator: %s (%s)",
             rdzv_strerror(rc), world ? rdzv_comm_last_error(world) : "");
    rdzv_comm_destroy(world);
    return 3;
  }
  *st = world;
  return 0;
}

/* "3,5" into out; returns the count. */
static int parse_ranks(const char *v, size_t len, int32_t *out, int max) {
  int n = 0;
  char buf[600];
  snprintf(buf, sizeof(buf), "%.*s", (int)len, v);
  for (char *p = buf; *p != '\0' && n < max;) {
    out[n++] = (int32_t)strtol(p, &p, 10);
    if (*p == ',')
      p++;
  }
  return n;
}

static void rank_ended(rdzv_rendezvous_t *r, const struct srep *placed,
                       int wait_rc, void *st) {
  rdzv_comm_t *world = st, *s = NULL;
  rdzv_client_t *cl = rdzv_rendezvous_client(r);
  struct srep rp = *placed;
  char key[64];
  snprintf(key, sizeof(key), "chaos/lost/g%" PRId64, placed->gen);
  const char *keys[1] = {key};
  void *v = NULL;
  size_t len = 0;
  int rc = rdzv_store_wait(cl, keys, 1, 120);
  if (rc == 0)
    rc = rdzv_store_get(cl, key, &v, &len, 120);
  if (rc < 0) {
    rp.status = 3;
    snprintf(rp.text, sizeof(rp.text),
             "generation %" PRId64 " ended (wait: %s) without %s: %s",
             placed->gen, rdzv_err_name(wait_rc), key, rdzv_strerror(rc));
    send_rep(&rp);
    rdzv_comm_destroy(world);
    return;
  }
  int32_t lost[WORLD];
  int nlost = parse_ranks(v, len, lost, WORLD);
  rdzv_free(v);
  bool propose = placed->rank % 2 == 0;
  rc = rdzv_comm_shrink(world, propose ? lost : NULL, propose ? nlost : 0,
                        RDZV_COMM_SHRINK_ABORT, &s, 120);
  rp.status = 2;
  if (rc == 0) {
    const int32_t *ex = NULL;
    int32_t nex = rdzv_comm_excluded(s, &ex);
    int used = snprintf(rp.text, sizeof(rp.text),
                        "rank=%d size=%d ex=", (int)rdzv_comm_rank(s),
                        (int)rdzv_comm_size(s));
    for (int32_t i = 0; i < nex && used < (int)sizeof(rp.text) - 12; i++)
      used += snprintf(rp.text + used, sizeof(rp.text) - (size_t)used, "%s%d",
                       i ? "," : "", (int)ex[i]);
  } else {
    snprintf(rp.text, sizeof(rp.text), "shrink failed: %s: %s",
             rdzv_err_name(rc), rdzv_comm_last_error(world));
  }
  send_rep(&rp);
  rdzv_comm_destroy(s);
  rdzv_comm_destroy(world);
}

/* ---- in the test ----------------------------------------------------------- */

/* The shrink reports of the generation being checked, by old rank. */
static int64_t shrink_gen;
static struct srep shrinks[WORLD];
static int nshrinks;

static void on_report(const struct srep *rp) {
  if (rp->status != 2)
    fail_msg("%s local rank %d, generation %" PRId64 ": %s",
             hosts[rp->host].name, rp->lr, rp->gen, rp->text);
  if (rp->gen != shrink_gen)
    fail_msg("%s rank %d shrank generation %" PRId64 ", not %" PRId64 ": %s",
             hosts[rp->host].name, rp->rank, rp->gen, shrink_gen, rp->text);
  assert_true(rp->rank >= 0 && rp->rank < WORLD);
  assert_int_equal(shrinks[rp->rank].status, 0);
  shrinks[rp->rank] = *rp;
  nshrinks++;
}

static bool quarantined[MAXH];

/* Alive, not in the world, not quarantined: a host placement may use. */
static bool is_parked(int i) {
  return hosts[i].pid > 0 && hosts[i].node_rank < 0 && !quarantined[i];
}

static int count_parked(bool extras_only) {
  int n = 0;
  for (int i = 0; i < nhosts; i++)
    n += is_parked(i) && (!extras_only || !hosts[i].spare);
  return n;
}

/* Whether every domain in the world (as last checked) has 4 hosts. */
static bool world_whole(void) {
  int count[10] = {0};
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].node_rank >= 0)
      count[hosts[i].domain[1] - '0']++;
  for (int d = 0; d < 10; d++)
    if (count[d] != 0 && count[d] != 4)
      return false;
  return true;
}

static int world_hosts(void) {
  int n = 0;
  for (int i = 0; i < nhosts; i++)
    n += hosts[i].node_rank >= 0;
  return n;
}

/* A random host of the world, not one of avoid[0 .. navoid). */
static int pick_victim(const int *avoid, int navoid) {
  int pick[MAXH], n = 0;
  for (int i = 0; i < nhosts; i++) {
    bool skip = hosts[i].node_rank < 0;
    for (int k = 0; k < navoid; k++)
      skip |= avoid[k] == i;
    if (!skip)
      pick[n++] = i;
  }
  assert_true(n > 0);
  return pick[rand() % n];
}

static void parked_reach(int64_t want) {
  while (root_stat("parked_ranks") != want)
    usleep(50 * 1000);
}

/* Writes the lost ranks of generation gen ("3,5", ascending) at the root,
 * before the kill: the survivors' proposals. */
static void write_lost(int64_t gen, const int *victims, int nv, char *out,
                       size_t n) {
  int32_t ranks[WORLD];
  int nr = 0;
  for (int place = 0; place < MAXH; place++)
    for (int k = 0; k < nv; k++)
      if (hosts[victims[k]].node_rank == place)
        for (int lr = 0; lr < PER; lr++)
          ranks[nr++] = place * PER + lr;
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < nr; i++)
    used += (size_t)snprintf(out + used, n - used, "%s%d", i ? "," : "",
                             (int)ranks[i]);
  struct rdzv_client_opts co;
  rdzv_client_t *c = NULL;
  rdzv_client_opts_init(&co);
  co.addr = root_addr;
  co.job_id = JOB;
  assert_int_equal(rdzv_client_create(&co, &c), 0);
  char key[64];
  snprintf(key, sizeof(key), "chaos/lost/g%" PRId64, gen);
  assert_int_equal(rdzv_store_set(c, key, out, strlen(out), 0, 30), 0);
  rdzv_client_destroy(c);
}

/* Every survivor of generation `gen` (world of `size` ranks) shrank with
 * exactly the lost ranks `lost` (text) and took its rank without them. */
static void check_shrinks(int size, const char *lost) {
  bool is_lost[WORLD] = {false};
  int32_t l[WORLD];
  int nl = parse_ranks(lost, strlen(lost), l, WORLD);
  for (int i = 0; i < nl; i++)
    is_lost[l[i]] = true;
  assert_int_equal(nshrinks, size - nl);
  int new_rank = 0;
  for (int r = 0; r < size; r++) {
    if (is_lost[r]) {
      assert_int_equal(shrinks[r].status, 0);
      continue;
    }
    char want[700];
    snprintf(want, sizeof(want), "rank=%d size=%d ex=%s", new_rank++, size - nl,
             lost);
    if (shrinks[r].status != 2 || strcmp(shrinks[r].text, want) != 0)
      fail_msg("generation %" PRId64 " rank %d: want '%s', got '%s'",
               shrink_gen, r, want,
               shrinks[r].status ? shrinks[r].text : "no report");
  }
}

enum event { KILL1, KILL2, RESTART, UNHEALTHY, EXTRA };
static const char *const event_name[] = {"kill1", "kill2", "restart",
                                         "unhealthy", "extra"};

static void test_chaos(void **state) {
  (void)state;
  g_job = "chaos";
  spares_hooks = (struct spares_hooks){rank_placed, rank_ended, on_report};
  test_seed();
  for (int i = 0; i < ACTIVE; i++) {
    char name[16];
    snprintf(name, sizeof(name), "a%d", i);
    add_host(name, i / 4, false);
  }
  for (int k = 0; k < SPARES; k++) {
    char name[16];
    snprintf(name, sizeof(name), "s%d", k);
    add_host(name, k, true);
  }
  for (int i = 0; i < ACTIVE; i++)
    host_start(i);
  struct world w;
  collect(0, WORLD, &w);
  check_places(&w, NULL, 0, NULL, false);
  int64_t gen = w.gen;
  for (int i = ACTIVE; i < ACTIVE + SPARES; i++)
    host_start(i);
  parked_reach(SPARES * PER);
  assert_int_equal(root_stat("generation"), gen);
  report("start", &w);

  /* Every kind once, the rest at random, in a random order. */
  enum event plan[ROUNDS] = {KILL1, KILL2, RESTART, UNHEALTHY, EXTRA};
  for (int i = 5; i < ROUNDS; i++)
    plan[i] = (enum event)(rand() % 5);
  for (int i = ROUNDS - 1; i > 0; i--) {
    int j = rand() % (i + 1);
    enum event t = plan[i];
    plan[i] = plan[j];
    plan[j] = t;
  }
  /* An extra host arrives early, while the world is surely full. */
  for (int i = 3; i < ROUNDS; i++)
    if (plan[i] == EXTRA) {
      int j = rand() % 3;
      plan[i] = plan[j];
      plan[j] = EXTRA;
    }
  int nextra = 0;
  for (int round = 1; round <= ROUNDS; round++) {
    enum event e = plan[round - 1];
    int inworld = world_hosts(), parked = count_parked(false);
    int holes = e == KILL2 ? 2 : e == KILL1 || e == UNHEALTHY ? 1 : 0;
    int after = inworld - holes + (parked < holes ? parked : holes);
    if (holes > 0 && (after < MIN_HOSTS || (parked > 0 && parked < holes)))
      e = RESTART;
    if (e == EXTRA && inworld < ACTIVE)
      e = RESTART;
    holes = e == KILL2 ? 2 : e == KILL1 || e == UNHEALTHY ? 1 : 0;

    if (e == EXTRA) {
      char name[16];
      snprintf(name, sizeof(name), "x%d", nextra++);
      int x = add_host(name, rand() % 4, false);
      int64_t before = root_stat("parked_ranks");
      host_start(x);
      printf("round %d: extra: %s (%s) arrives\n", round, hosts[x].name,
             hosts[x].domain);
      fflush(stdout);
      parked_reach(before + PER);
      assert_int_equal(root_stat("generation"), gen);
      continue;
    }

    int v[2];
    v[0] = pick_victim(NULL, 0);
    if (e == KILL2)
      v[1] = pick_victim(v, 1);
    int nv = e == KILL2 ? 2 : 1;
    printf("round %d: %s: %s (node rank %d)", round, event_name[e],
           hosts[v[0]].name, hosts[v[0]].node_rank);
    if (nv == 2)
      printf(" and %s (node rank %d)", hosts[v[1]].name, hosts[v[1]].node_rank);
    printf("; %d hosts parked\n", parked);
    fflush(stdout);

    /* The model before: places, candidates. */
    int before[MAXH];
    bool cand[MAXH];
    for (int i = 0; i < nhosts; i++) {
      before[i] = hosts[i].node_rank;
      cand[i] = is_parked(i);
    }
    int size_before = inworld * PER, extras = count_parked(true);
    bool whole = world_whole();
    char lost[600];
    shrink_gen = gen;
    nshrinks = 0;
    memset(shrinks, 0, sizeof(shrinks));
    write_lost(gen, v, nv, lost, sizeof(lost));
    if (e == UNHEALTHY) {
      char marker[160];
      snprintf(marker, sizeof(marker), "%s/unhealthy-%s", dir,
               hosts[v[0]].name);
      FILE *mf = fopen(marker, "w");
      assert_non_null(mf);
      fclose(mf);
      quarantined[v[0]] = true;
    }
    hosts_kill(v, nv);
    if (e == RESTART || e == UNHEALTHY)
      host_start(v[0]);

    int filled = holes < parked ? holes : parked;
    int want_size = (inworld - holes + filled) * PER;
    collect(gen, want_size, &w);
    if (e != RESTART)
      assert_int_equal(w.gen, gen + 1);
    check_shrinks(size_before, lost);

    /* Places: survivors keep theirs (or move down past holes nobody
     * filled); each hole goes to a parked host, the restarted one's to
     * itself. */
    int hole_of[2] = {-1, -1};
    for (int k = 0; k < nv; k++)
      hole_of[k] = before[v[k]];
    if (filled == holes) {
      check_places(&w, v, nv, e == RESTART ? v : NULL, true);
      bool used[MAXH] = {false};
      int by_extras = 0;
      for (int k = 0; k < nv && e != RESTART; k++) {
        int f = w.host_of_node[hole_of[k]];
        if (f < 0 || !cand[f] || used[f])
          fail_msg("node rank %d (was %s) went to %s, not a parked host",
                   hole_of[k], hosts[v[k]].name,
                   f >= 0 ? hosts[f].name : "nobody");
        used[f] = true;
        by_extras += !hosts[f].spare;
      }
      if (e != RESTART && by_extras != (extras < nv ? extras : nv))
        fail_msg("%d of %d places went to extra hosts, %d of them parked: "
                 "extra hosts come before spares",
                 by_extras, nv, extras);
      /* With no extra parked and a spare of each lost host's domain:
       * exactly those spares, and whole domains. */
      bool exact = extras == 0 && e != RESTART;
      int fill_want[2] = {-1, -1};
      for (int k = 0; exact && k < nv; k++) {
        for (int i = 0; i < nhosts; i++)
          if (cand[i] && hosts[i].spare &&
              strcmp(hosts[i].domain, hosts[v[k]].domain) == 0 &&
              (k == 0 || fill_want[0] != i))
            fill_want[k] = i;
        exact = fill_want[k] >= 0;
      }
      if (exact) {
        for (int k = 0; k < nv; k++)
          if (w.host_of_node[hole_of[k]] != fill_want[k])
            fail_msg("node rank %d (was %s, %s) went to %s, not %s", hole_of[k],
                     hosts[v[k]].name, hosts[v[k]].domain,
                     hosts[w.host_of_node[hole_of[k]]].name,
                     hosts[fill_want[k]].name);
        if (whole) /* an extra host may have broken a domain before */
          check_domains_whole(&w);
      }
    } else { /* nobody parked: every hole closes up */
      assert_int_equal(filled, 0);
      check_places(&w, v, nv, NULL, false);
      for (int i = 0; i < nhosts; i++) {
        bool gone = false;
        for (int k = 0; k < nv; k++)
          gone |= v[k] == i;
        if (gone || before[i] < 0)
          continue;
        int want = before[i];
        for (int k = 0; k < nv; k++)
          want -= hole_of[k] < before[i];
        if (hosts[i].node_rank != want)
          fail_msg("host %s: node rank %d, want %d", hosts[i].name,
                   hosts[i].node_rank, want);
      }
    }
    if (e == UNHEALTHY) { /* refused, named with its check's output */
      /* Its own refusal's text (an earlier quarantined host's ranks
       * keep being refused too). */
      const char *qt = quarantined_text_of[v[0]];
      if (qt[0] == '\0') {
        struct srep q;
        do
          read_rep(&q);
        while (q.host != v[0] || q.status != RDZV_EQUARANTINED);
        memcpy(quarantined_text_of[v[0]], q.text, sizeof(q.text));
      }
      assert_non_null(strstr(qt, hosts[v[0]].name));
      assert_non_null(strstr(qt, "uncorrectable ECC errors"));
      assert_true(hosts[v[0]].node_rank < 0);
    }
    parked_reach(count_parked(false) * PER);
    gen = w.gen;
    char what[700];
    snprintf(what, sizeof(what), "round %d (%s; excluded %s)", round,
             event_name[e], lost);
    report(what, &w);
    check_alive();
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_chaos, spares_setup,
                                      spares_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
