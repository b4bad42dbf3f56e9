/* PyTorch's own store traffic through the tree (rdzv-bench --pytorch,
 * torch 2.x's TCPStore protocol from the bench's C clients): ids of
 * NCCL's scalable init (a WAIT on all of them and a MULTI_GET each rank),
 * the one-root id (WAIT, GET), 60 heartbeat CHECKs of an absent key a
 * rank, 5 reads of torchrun's state by each host's agent. At 256 and 512
 * ranks over 4 hosts (64 and 128 ranks a host), against rdzvd flat, the
 * tree, and the tree without copies (--cache-mutable no):
 *   - every rank read every id right (the bench checks each byte);
 *   - the tree's root gets at most 4 wait/get/mget requests per child
 *     per phase (the root has one child here; 4 phases), whatever the
 *     ranks and ids;
 *   - 512 ranks cost the tree's root at most 1.2 times what 256 do;
 *   - the flat root gets a request per rank and step (O(ranks)), and the
 *     tree without copies more than the tree with them;
 *   - with the checks paced (--pt-check-ms 600, the steady state, past
 *     the copies' lease), the tree's root gets no more than that either;
 *   - with torchrun's keep-alive writes (--pt-keepalive on) the state key
 *     does not thrash: invalidations at most a tenth of the writes.
 * Counts only; no time is asserted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"

#define BENCH "tools/bench/rdzv-bench"

/* One bench run; extra: NULL, or two more arguments. */
static json_t *run(const char *ranks, const char *rph,
                   const char *const *extra) {
  char json_path[] = "/tmp/rdzv-pytorch-test-XXXXXX";
  int fd = mkstemp(json_path);
  assert_true(fd >= 0);
  close(fd);
  char *argv[16] = {BENCH,         "--mode",           "none",      "--pytorch",
                    (char *)ranks, "--ranks-per-host", (char *)rph, "--fanout",
                    "4",           "--json",           json_path,   NULL};
  for (int i = 0; extra != NULL && extra[i] != NULL; i++)
    argv[11 + i] = (char *)extra[i];
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *out = proc_read_all(&p);
  printf("%s", out ? out : "");
  free(out);
  assert_int_equal(proc_wait(&p), 0);
  json_t *all = json_load_file(json_path, 0, NULL);
  unlink(json_path);
  assert_non_null(all);
  return all;
}

/* The row of server s, and its root's wait+get+mget requests. */
static json_t *row(json_t *all, const char *server) {
  size_t i;
  json_t *r;
  json_array_foreach (all, i, r) {
    const char *mode = json_string_value(json_object_get(r, "mode"));
    const char *s = json_string_value(json_object_get(r, "server"));
    if (mode != NULL && strcmp(mode, "pytorch-traffic") == 0 && s != NULL &&
        strcmp(s, server) == 0)
      return r;
  }
  fail_msg("no pytorch-traffic row for %s", server);
  return NULL;
}

static int64_t root_reads(json_t *r) {
  json_t *root = json_object_get(r, "root");
  assert_non_null(root);
  return json_integer_value(json_object_get(root, "requests_wait_get_mget"));
}

static void test_root_requests(void **state) {
  (void)state;
  json_t *a = run("256", "64", NULL), *b = run("512", "128", NULL);
  static const char *const servers[] = {"flat", "tree", "tree-nocopies"};
  for (int k = 0; k < 3; k++) {
    assert_true(json_is_true(json_object_get(row(a, servers[k]), "verified")));
    assert_true(json_is_true(json_object_get(row(b, servers[k]), "verified")));
    assert_int_equal(
        json_integer_value(json_object_get(row(b, servers[k]), "failed")), 0);
  }
  int64_t t256 = root_reads(row(a, "tree")), t512 = root_reads(row(b, "tree"));
  int64_t f256 = root_reads(row(a, "flat"));
  int64_t n256 = root_reads(row(a, "tree-nocopies"));
  printf("root wait+get+mget: tree %lld (256 ranks), %lld (512); flat %lld; "
         "tree without copies %lld\n",
         (long long)t256, (long long)t512, (long long)f256, (long long)n256);
  assert_true(t256 >= 1 && t256 <= 4 * 1 * 4);
  assert_true(t512 >= 1 && t512 <= 4 * 1 * 4);
  assert_true(t512 * 10 <= t256 * 12);
  /* Flat: each rank's wait, multi_get and one-root wait and get at least,
   * and its 60 checks. */
  assert_true(f256 >= 256 * 64);
  assert_true(n256 > t256);
  json_decref(a);
  json_decref(b);
}

/* The steady state: the 60 checks 600 ms apart (the heartbeat monitor's
 * once a second, a little faster), 36 s, past the copies' 30 s lease
 * (half the bench's 60 s liveness timeout): the tree's root gets no more
 * wait/get/mget requests than at full speed (the nodes answer from the
 * absent key's copy while their pings, every 20 s, renew the lease). */
static void test_steady_checks(void **state) {
  (void)state;
  static const char *const paced[] = {"--pt-check-ms", "600",
                                      "--pytorch-servers", "tree", NULL};
  json_t *a = run("256", "64", paced);
  json_t *r = row(a, "tree");
  assert_true(json_is_true(json_object_get(r, "verified")));
  assert_int_equal(json_integer_value(json_object_get(r, "check_period_ms")),
                   600);
  int64_t reads = root_reads(r);
  printf("root wait+get+mget with checks 600 ms apart: %lld\n",
         (long long)reads);
  assert_true(reads >= 1 && reads <= 4 * 1 * 4);
  json_decref(a);
}

/* torchrun's keep-alive (--pt-keepalive on): every agent's read of the
 * state followed by a compare_set of it, 32 agents (256 ranks, 8 a
 * host) 5 times each: the key is written as often as read. It must not
 * thrash: after a write invalidates the copies, the key is not granted
 * again for the cooldown (1 s), so the root sends a few invalidations,
 * not one per write. */
static void test_keepalive_no_thrash(void **state) {
  (void)state;
  static const char *const ka[] = {"--pt-keepalive", "on", "--pytorch-servers",
                                   "tree", NULL};
  json_t *a = run("256", "8", ka);
  json_t *r = row(a, "tree");
  assert_true(json_is_true(json_object_get(r, "verified")));
  json_t *root = json_object_get(r, "root");
  int64_t cas = json_integer_value(json_object_get(root, "cas"));
  int64_t inv = json_integer_value(json_object_get(root, "invalidations_sent"));
  printf("keep-alive: %lld compare_sets at the root, %lld invalidations "
         "sent\n",
         (long long)cas, (long long)inv);
  assert_int_equal(cas, 32 * 5);
  assert_true(inv * 10 <= cas);
  json_decref(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keepalive_no_thrash),
      cmocka_unit_test(test_root_requests),
      cmocka_unit_test(test_steady_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
