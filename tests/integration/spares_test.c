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

#include "rdzv/rdzv.h"
#include "spares_harness.h"

static void test_spares(void **state) {
  (void)state;
  test_seed(); /* RDZV_TEST_SEED replays a run (its victims; not its timing) */
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
      read_rep(&q);
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
    read_rep(&rp);
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
      cmocka_unit_test_setup_teardown(test_spares, spares_setup,
                                      spares_teardown),
      cmocka_unit_test_setup_teardown(test_segments, spares_setup,
                                      spares_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
