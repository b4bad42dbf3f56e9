/* The etcd test harness on its own: a member starts healthy and serves
 * posts; a 3-member cluster keeps serving with one member killed, a
 * stopped member is not healthy until continued, a terminated member
 * restarts on its data and sees what was written meanwhile; stop_all
 * leaves no process and no directory behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/etcd/etcd_harness.h"

static struct etcdh h;

static int teardown(void **state) {
  (void)state;
  etcdh_stop_all(&h);
  return 0;
}

/* A put through member i of key=value; the HTTP status. */
static int put(int i, const char *key, const char *value) {
  char body[256];
  char *k = etcdh_b64(key, strlen(key)), *v = etcdh_b64(value, strlen(value));
  snprintf(body, sizeof(body), "{\"key\":\"%s\",\"value\":\"%s\"}", k, v);
  free(k);
  free(v);
  return etcdh_post(&h, i, "/v3/kv/put", body, NULL, NULL);
}

/* put, again while etcd answers 503 (a leader election after a kill),
 * for up to about 30 s. */
static int put_retry(int i, const char *key, const char *value) {
  int code = 0;
  for (int t = 0; t < 300; t++) {
    if ((code = put(i, key, value)) != 503)
      break;
    usleep(100000);
  }
  return code;
}

/* Does a range of key through member i answer with value? */
static int has(int i, const char *key, const char *value) {
  char body[256], *resp = NULL;
  char *k = etcdh_b64(key, strlen(key)), *v = etcdh_b64(value, strlen(value));
  snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
  int code = etcdh_post(&h, i, "/v3/kv/range", body, NULL, &resp);
  int ok = code == 200 && resp != NULL && strstr(resp, v) != NULL;
  free(k);
  free(v);
  free(resp);
  return ok;
}

static void test_single(void **state) {
  (void)state;
  const char *extra[] = {"--max-txn-ops", "8", NULL};
  assert_int_equal(etcdh_start(&h, extra, NULL), 0);
  assert_int_equal(h.n, 1);
  assert_true(etcdh_pid(&h, 0) > 0);
  assert_true(strncmp(etcdh_url(&h, 0), "http://127.0.0.1:", 17) == 0);
  assert_string_equal(etcdh_endpoints(&h), etcdh_url(&h, 0));
  assert_int_equal(put(0, "k", "v1"), 200);
  assert_true(has(0, "k", "v1"));
  char dir[64];
  snprintf(dir, sizeof(dir), "%s", h.m[0].dir);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  pid_t pid = etcdh_pid(&h, 0);
  etcdh_stop_all(&h);
  assert_int_not_equal(stat(dir, &st), 0);
  assert_int_equal(kill(pid, 0), -1);
  etcdh_stop_all(&h); /* twice is fine */
}

static void test_cluster(void **state) {
  (void)state;
  assert_int_equal(etcdh_start_cluster(&h, 3, NULL, NULL), 0);
  assert_int_equal(h.n, 3);
  assert_non_null(strchr(etcdh_endpoints(&h), ','));
  for (int i = 0; i < 3; i++)
    assert_true(etcdh_pid(&h, i) > 0);
  assert_int_equal(put(0, "a", "1"), 200);
  assert_true(has(2, "a", "1"));

  /* Member 0 killed: the other two keep a quorum. */
  pid_t p0 = etcdh_pid(&h, 0);
  assert_int_equal(etcdh_kill(&h, 0), 0);
  assert_int_equal(etcdh_pid(&h, 0), 0);
  assert_int_equal(kill(p0, 0), -1);
  assert_int_equal(
      etcdh_post(&h, 0, "/v3/kv/range", "{\"key\":\"YQ==\"}", NULL, NULL), 0);
  /* (a new leader may still be in election: health first) */
  assert_int_equal(etcdh_wait_healthy(&h, 1, 60.0), 0);
  assert_int_equal(put_retry(1, "a", "2"), 200);
  assert_true(has(2, "a", "2"));

  /* Member 2 stopped: member 1 alone has no quorum, so no health, once
   * it notices (a leader steps down after its election timeout; under
   * load that takes a while: seen healthy for the first second). */
  assert_int_equal(etcdh_stop(&h, 2), 0);
  int unhealthy = 0;
  for (int i = 0; i < 100 && !unhealthy; i++)
    unhealthy = etcdh_wait_healthy(&h, 1, 0.3) != 0;
  assert_true(unhealthy);
  assert_int_equal(etcdh_cont(&h, 2), 0);
  assert_int_equal(etcdh_wait_healthy(&h, 1, 60.0), 0);

  /* Member 0 back on its data: it catches up. */
  assert_int_equal(etcdh_restart(&h, 0), 0);
  assert_int_equal(etcdh_wait_healthy(&h, 0, 60.0), 0);
  assert_true(has(0, "a", "2"));

  /* SIGTERM and wait. */
  pid_t p1 = etcdh_pid(&h, 1);
  assert_int_equal(etcdh_term(&h, 1), 0);
  assert_int_equal(kill(p1, 0), -1);
  assert_int_equal(etcdh_wait_healthy(&h, 0, 60.0), 0);
  assert_int_equal(put_retry(0, "b", "3"), 200);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_single, teardown),
      cmocka_unit_test_teardown(test_cluster, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
