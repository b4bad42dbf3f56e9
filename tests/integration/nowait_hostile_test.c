/* The nodes' short cuts (collectives at the subtree's last contribution,
 * joins when the subtree has joined) against wrong words and odd paths,
 * with real processes. 8 forked ranks, 4 a host.
 *
 * 1. Hostile member specs (keys[1] of a barrier or gather, from
 *    rdzv_store_barrier_of / gather_of): members that are not in the
 *    world, ranks listed twice, halves swapped, bytes that do not decode,
 *    800 bytes, the wrong kind, a key of no generation or of another one,
 *    INT32_MAX members, 64 runs, a spec that names fewer or more of a
 *    node's ranks than contribute there. The first contribution at a node
 *    carries the hostile spec (its sender goes first). Every collective
 *    completes for every member with the right result in member order (a
 *    wrong spec costs at most the nodes' guard, 200 ms here), and no
 *    daemon fails (ASan, under --config=asan).
 * 2. A spec is no key: a group barrier whose members need 8 runs (a
 *    105-byte spec) passes a root with --max-key-bytes=64.
 * 3. A second round of the same job: the child node's word that its
 *    subtree joined counts per round. root <- mid <- leaf0, root <- leaf1
 *    (mid sees half the world), guards of 10 minutes: round "second" must
 *    join within the ranks' 60 s deadline like the first.
 * 4. An abort while a collective is held for the member that aborts: the
 *    others hear RDZV_EABORTED (or RDZV_ESTALE_GENERATION) from the root
 *    within their 60 s deadline,
 *    not after a node's 10-minute guard, and everyone joins again. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"
#include "rendezvous/members.h"

#define WORLD 8
#define PER_HOST 4

static char dir[64];
static struct proc root, mid, leaf[2];
static char root_tcp[64], mid_tcp[64], leaf_tcp[2][64];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  return count_open_fds() != fds_before ? -1 : 0;
}

/* root <- mid <- leaf0 and leaf1 (split: leaf1 under the root). */
static void tree_start(const char *const *root_opts,
                       const char *const *mid_opts,
                       const char *const *leaf_opts, int split) {
  snprintf(dir, sizeof(dir), "/tmp/rdzv-nwh-XXXXXX");
  assert_non_null(mkdtemp(dir));
  assert_int_equal(daemon_start(&root, dir, "root", NULL, root_opts, root_tcp),
                   0);
  assert_int_equal(daemon_start(&mid, dir, "mid", root_tcp, mid_opts, mid_tcp),
                   0);
  assert_int_equal(
      daemon_start(&leaf[0], dir, "leaf0", mid_tcp, leaf_opts, leaf_tcp[0]), 0);
  assert_int_equal(daemon_start(&leaf[1], dir, "leaf1",
                                split ? root_tcp : mid_tcp, leaf_opts,
                                leaf_tcp[1]),
                   0);
}

static void tree_stop(void) {
  assert_int_equal(proc_stop(&leaf[1]), 0);
  assert_int_equal(proc_stop(&leaf[0]), 0);
  assert_int_equal(proc_stop(&mid), 0);
  assert_int_equal(proc_stop(&root), 0);
  assert_int_equal(rm_rf(dir), 0);
}

static rdzv_rendezvous_t *join_round(int idx, const char *round) {
  char addr[128], host[16], err[1024] = "";
  snprintf(host, sizeof(host), "host%d", idx / PER_HOST);
  char lf[16];
  snprintf(lf, sizeof(lf), "leaf%d", idx / PER_HOST);
  daemon_unix_addr(dir, lf, addr, sizeof(addr));
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = addr;
  o.job_id = "nwh";
  o.round = round;
  o.host = host;
  o.local_rank = idx % PER_HOST;
  o.local_size = PER_HOST;
  o.world_size = WORLD;
  o.timeout_s = 60;
  o.topology = "gpu_pci=none\n";
  rdzv_rendezvous_t *r = NULL;
  if (rdzv_rendezvous_join(&o, &r, err, sizeof(err)) < 0) {
    fprintf(stderr, "rank %d: join %s: %s\n", idx, round, err);
    return NULL;
  }
  return r;
}

/* Forks WORLD ranks running fn(idx); every one must exit 0. */
static void run_ranks(int (*fn)(int idx)) {
  pid_t pids[WORLD];
  for (int i = 0; i < WORLD; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0)
      _exit(fn(i));
  }
  for (int i = 0; i < WORLD; i++) {
    int st = 0;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
}

/* ---- 1. hostile specs --------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* A spec as raw bytes: kind, nmembers, then runs (first, stride, len). */
static size_t raw_spec(uint8_t *out, int kind, uint32_t nm, int nruns,
                       const uint32_t *runs) {
  out[0] = (uint8_t)kind;
  put32(out + 1, nm);
  put32(out + 5, (uint32_t)nruns);
  for (int r = 0; r < nruns; r++)
    for (int k = 0; k < 3; k++)
      put32(out + 9 + 12 * r + 4 * k, runs[3 * r + k]);
  return 9 + 12 * (size_t)nruns;
}

#define NPROBES 15

/* Probe p: the collective's name, this rank's spec, whether it is a
 * gather, whether rank 0 goes first (its spec is then the one a node
 * learns), and the group (members; NULL: the world) and its size. */
struct probe {
  char name[128];
  uint8_t spec[1024];
  size_t spec_len;
  int gather, first;
  int32_t group[WORLD];
  int ngroup; /* 0: the world */
};

static void probe_make(int p, int me, int64_t gen, struct probe *pr) {
  uint8_t good[RDZV_MEMBERS_MAX_BYTES];
  int gl =
      rdzv_members_encode(NULL, WORLD, RDZV_MEMBERS_EACH, good, sizeof(good));
  assert_true(gl > 0);
  memset(pr, 0, sizeof(*pr));
  memcpy(pr->spec, good, (size_t)gl);
  pr->spec_len = (size_t)gl;
  snprintf(pr->name, sizeof(pr->name), "rdzv/world/g%" PRId64 "/hostile/p%d",
           gen, p);
  pr->gather = p % 2;
  int hostile = 1; /* rank 0's spec only, rank 0 first */
  uint32_t runs[64 * 3];
  size_t n = 0;
  switch (p) {
  case 0: {
    uint32_t r[] = {100, 1, 8};
    n = raw_spec(pr->spec, 0, 8, 1, r);
    break;
  }
  case 1: {
    uint32_t r[] = {0, 1, 4, 0, 1, 4};
    n = raw_spec(pr->spec, 0, 8, 2, r);
    hostile = 0;
    break;
  }
  case 2: {
    uint32_t r[] = {4, 1, 4, 0, 1, 4};
    n = raw_spec(pr->spec, 0, 8, 2, r);
    break;
  }
  case 3:
    memset(pr->spec, 0xAB, 20);
    n = 20;
    break;
  case 4:
    memset(pr->spec, 0x01, 800);
    n = 800;
    break;
  case 5: {
    uint32_t r[] = {0, 1, 8};
    n = raw_spec(pr->spec, RDZV_MEMBERS_BLOCKS, 8, 1, r);
    hostile = 0;
    break;
  }
  case 6:
    snprintf(pr->name, sizeof(pr->name), "plain/p%d", p);
    n = (size_t)gl;
    hostile = 0;
    break;
  case 7:
    snprintf(pr->name, sizeof(pr->name), "rdzv/world/g%" PRId64 "/p%d", gen + 7,
             p);
    n = (size_t)gl;
    hostile = 0;
    break;
  case 8: {
    uint32_t r[] = {0, 1, INT32_MAX};
    n = raw_spec(pr->spec, 0, INT32_MAX, 1, r);
    hostile = 0;
    break;
  }
  case 9:
    for (int i = 0; i < 64; i++) {
      runs[3 * i] = i < 8 ? (uint32_t)i : (uint32_t)(1000 + 7 * i);
      runs[3 * i + 1] = 1 + (uint32_t)i;
      runs[3 * i + 2] = 1;
    }
    n = raw_spec(pr->spec, 0, 64, 64, runs);
    hostile = 0;
    break;
  case 10: {
    uint32_t r[] = {0, 1, 1, 1000, 1, 7};
    n = raw_spec(pr->spec, 0, 8, 2, r);
    break;
  }
  case 11: {
    uint32_t r[] = {0, 2, 8};
    n = raw_spec(pr->spec, 0, 8, 1, r);
    hostile = 0;
    break;
  }
  case 12: /* group {0, 4}; rank 0 says it is {0, 1}: leaf0 waits its guard */
  case 13: /* group {0, 4}; rank 0 says it is {1, 5} */
    pr->ngroup = 2;
    pr->group[0] = 0;
    pr->group[1] = 4;
    {
      uint32_t r12[] = {0, 1, 2}, r13[] = {1, 4, 2};
      n = raw_spec(pr->spec, 0, 2, 1, p == 12 ? r12 : r13);
    }
    if (me != 0)
      n = raw_spec(pr->spec, 0, 2, 1, (uint32_t[]){0, 4, 2});
    hostile = 0; /* specs set above */
    pr->first = 1;
    break;
  case 14: /* no spec at all beside specs */
    n = me % 2 ? 0 : (size_t)gl;
    hostile = 0;
    break;
  }
  pr->spec_len = n;
  if (hostile) {
    pr->first = 1;
    if (me != 0) {
      memcpy(pr->spec, good, (size_t)gl);
      pr->spec_len = (size_t)gl;
    }
  }
}

static int hostile_rank(int idx) {
  rdzv_rendezvous_t *r = join_round(idx, "world");
  if (r == NULL)
    return 1;
  int me = rdzv_rendezvous_rank(r);
  int64_t gen = rdzv_rendezvous_generation(r);
  rdzv_client_t *c = rdzv_rendezvous_client(r);
  int bad = 0;
  for (int p = 0; p < NPROBES && !bad; p++) {
    struct probe pr;
    probe_make(p, me, gen, &pr);
    int mid_of = -1, count = pr.ngroup ? pr.ngroup : WORLD;
    for (int i = 0; i < count; i++)
      if ((pr.ngroup ? pr.group[i] : i) == me)
        mid_of = i;
    char al[32];
    snprintf(al, sizeof(al), "align/%d", p);
    if (rdzv_store_barrier(c, al, (uint64_t)me, WORLD, 60) != 0) {
      bad = 1;
      break;
    }
    if (mid_of < 0)
      continue;
    if (pr.first && me != 0)
      usleep(50 * 1000); /* rank 0's spec reaches leaf0 first */
    int rc;
    if (pr.gather) {
      char data[32];
      snprintf(data, sizeof(data), "m%d.%d", mid_of, p);
      struct rdzv_value *v = NULL;
      rc = rdzv_store_gather_of(
          c, pr.name, (uint64_t)mid_of, (uint64_t)count, data, strlen(data),
          pr.spec_len ? pr.spec : NULL, pr.spec_len, &v, 60);
      for (int i = 0; rc == 0 && i < count; i++) {
        char want[32];
        snprintf(want, sizeof(want), "m%d.%d", i, p);
        if (v[i].member != (uint64_t)i || v[i].len != strlen(want) ||
            memcmp(v[i].data, want, v[i].len) != 0)
          rc = -1;
      }
      rdzv_values_free(v, rc == 0 ? (size_t)count : 0);
    } else {
      rc = rdzv_store_barrier_of(c, pr.name, (uint64_t)mid_of, (uint64_t)count,
                                 pr.spec_len ? pr.spec : NULL, pr.spec_len, 60);
    }
    if (rc != 0) {
      fprintf(stderr, "rank %d probe %d: %d %s\n", me, p, rc,
              rdzv_client_last_error(c));
      bad = 1;
    }
  }
  rdzv_rendezvous_destroy(r);
  return bad;
}

static void test_hostile_specs(void **state) {
  (void)state;
  const char *mo[] = {"--flush-ms=5", "--flush-max-ms=200", "--children=2",
                      "--local-ranks=0", NULL};
  const char *lo[] = {"--flush-ms=5", "--flush-max-ms=200", "--children=0",
                      NULL};
  tree_start(NULL, mo, lo, 0);
  run_ranks(hostile_rank);
  tree_stop();
}

/* ---- 2. a spec is no key ------------------------------------------------- */

static int rev_rank(int idx) {
  rdzv_rendezvous_t *r = join_round(idx, "world");
  if (r == NULL)
    return 1;
  int32_t rev[WORLD];
  for (int i = 0; i < WORLD; i++)
    rev[i] = WORLD - 1 - i; /* 8 runs: a 105-byte spec */
  int rc = rdzv_rendezvous_group_barrier(r, "rev", rev, WORLD, 60);
  if (rc != 0)
    fprintf(stderr, "rank %d: rev: %d %s\n", idx, rc,
            rdzv_rendezvous_last_error(r));
  rdzv_rendezvous_destroy(r);
  return rc != 0;
}

static void test_spec_is_no_key(void **state) {
  (void)state;
  const char *ro[] = {"--max-key-bytes=64", NULL};
  const char *no[] = {"--max-key-bytes=64", "--flush-ms=5", NULL};
  tree_start(ro, no, no, 0);
  run_ranks(rev_rank);
  tree_stop();
}

/* ---- 3. a second round; 4. an abort while a collective is held ----------- */

static const char *const split_mid[] = {"--flush-ms=5", "--flush-max-ms=600000",
                                        "--children=1", "--local-ranks=0",
                                        NULL};
static const char *const split_leaf[] = {
    "--flush-ms=5", "--flush-max-ms=600000", "--children=0", NULL};

static int two_rounds_rank(int idx) {
  const char *rounds[] = {"world", "second"};
  for (int k = 0; k < 2; k++) {
    if (idx % PER_HOST == PER_HOST - 1)
      usleep(300 * 1000); /* each host's last rank comes late */
    rdzv_rendezvous_t *r = join_round(idx, rounds[k]);
    if (r == NULL)
      return 1;
    rdzv_rendezvous_destroy(r);
  }
  return 0;
}

static void test_second_round(void **state) {
  (void)state;
  tree_start(NULL, split_mid, split_leaf, 1);
  run_ranks(two_rounds_rank);
  /* mid forwarded each round's joins once, at its subtree's last. */
  assert_int_equal(stats_at(mid_tcp, "ops.join.forwarded"), 2);
  assert_int_equal(stats_at(mid_tcp, "join_subtree_flushes"), 2);
  tree_stop();
}

static int abort_rank(int idx) {
  rdzv_rendezvous_t *r = join_round(idx, "world");
  if (r == NULL)
    return 1;
  int rc = rdzv_rendezvous_barrier(r, "before", 60);
  if (rc == 0 && rdzv_rendezvous_rank(r) == 0) {
    usleep(200 * 1000); /* the others' barrier is held for rank 0 */
    rc = rdzv_rendezvous_abort(r, "rank 0 gives up", 30);
  } else if (rc == 0) {
    /* Aborted (or, when the abort got to the root first, from a
     * generation that is over): at once, not after a guard. */
    rc = rdzv_rendezvous_barrier(r, "never", 60);
    rc = rc == RDZV_EABORTED || rc == RDZV_ESTALE_GENERATION
             ? 0
             : (rc == 0 ? -1 : rc);
  }
  if (rc != 0)
    fprintf(stderr, "rank %d: %d %s\n", idx, rc, rdzv_rendezvous_last_error(r));
  rdzv_rendezvous_destroy(r);
  if (rc != 0)
    return 1;
  /* Everyone again: a new generation, and its barrier. */
  r = join_round(idx, "world");
  if (r == NULL)
    return 1;
  rc = rdzv_rendezvous_generation(r) == 2 ? 0 : -1;
  if (rc == 0)
    rc = rdzv_rendezvous_barrier(r, "after", 60);
  rdzv_rendezvous_destroy(r);
  return rc != 0;
}

static void test_abort_while_held(void **state) {
  (void)state;
  tree_start(NULL, split_mid, split_leaf, 1);
  run_ranks(abort_rank);
  tree_stop();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hostile_specs),
      cmocka_unit_test(test_spec_is_no_key),
      cmocka_unit_test(test_second_round),
      cmocka_unit_test(test_abort_while_held),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
