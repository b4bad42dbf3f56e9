/* A 100,000-rank rendezvous persisted by an etcd-backed root, under
 * etcd's default limits (a throwaway member started by the harness):
 * rdzv-bench --etcd at 100,000 ranks completes with no rank failed and no
 * etcd request failed or refused (stats etcd.errors), and the bench
 * leaves nothing in etcd after. The figures it prints (requests, bytes) are for
 * the record; none is asserted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "tests/etcd/etcd_harness.h"

#define BENCH "tools/bench/rdzv-bench"

static void test_100k_under_default_limits(void **state) {
  (void)state;
  struct etcdh eh;
  assert_int_equal(etcdh_start(&eh, NULL, NULL), 0);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd),
           "exec %s --ranks 100000 --mode tree --etcd %s 2>&1", BENCH,
           etcdh_endpoints(&eh));
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *out = proc_read_all(&p);
  int rc = proc_wait(&p);
  printf("%s", out != NULL ? out : "");
  assert_int_equal(rc, 0);
  assert_non_null(out);
  /* The tree run's line, and the root's etcd line. */
  assert_non_null(strstr(out, "failed 0"));
  const char *e = strstr(out, "etcd (100000 ranks): ");
  assert_non_null(e);
  assert_non_null(strstr(e, " ops, 0 failed"));
  long long reqs = atoll(e + strlen("etcd (100000 ranks): "));
  assert_true(reqs > 0);
  /* The bench removes its run's prefix (rdzv-bench/PID-N) after it. */
  char *k = etcdh_b64("rdzv-bench/", 11), *end = etcdh_b64("rdzv-bench0", 11);
  char body[300], *resp = NULL;
  snprintf(body, sizeof(body),
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", k, end);
  free(k);
  free(end);
  assert_int_equal(etcdh_post(&eh, 0, "/v3/kv/range", body, NULL, &resp), 200);
  assert_null(strstr(resp, "\"count\""));
  free(resp);
  free(out);
  etcdh_stop_all(&eh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_100k_under_default_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
