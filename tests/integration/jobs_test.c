/* Jobs end: 50 back-to-back jobs (each a rank joining through rank ->
 * leaf -> mid -> root, a 100 KB write-once value and a mutable key, a
 * clean leave) leave every daemon with the open files and about the
 * memory it had after the first: each job is freed everywhere, its
 * node's connection to the parent included, --job-linger-ms after its
 * last connection closed. A relaunch within the linger keeps the job's
 * state (generation 2). Asking a daemon for statistics is no job: the
 * job named in that hello never shows. Real daemons. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

#define JOBS 50
#define LINGER_MS "300"

static char dir[64];
static struct proc procs[3]; /* root, mid, leaf */
static char tcp[3][64];
static char leaf_addr[160];
static int fds_before;

/* An extra option of the root (setup_cap), or NULL. */
static const char *root_extra;

static int start(int i, const char *name, const char *parent) {
  const char *extra[] = {"--job-linger-ms=" LINGER_MS,
                         parent == NULL ? root_extra : NULL, NULL};
  return daemon_start(&procs[i], dir, name, parent, extra, tcp[i]);
}

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-jobs-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  if (start(0, "root", NULL) < 0 || start(1, "mid", tcp[0]) < 0 ||
      start(2, "leaf", tcp[1]) < 0)
    return -1;
  daemon_unix_addr(dir, "leaf", leaf_addr, sizeof(leaf_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = 0;
  for (int i = 2; i >= 0; i--)
    bad |= proc_stop(&procs[i]) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* One job: a rank of a world of 1 joins, writes, leaves. Returns its
 * generation. */
static int64_t run_job(const char *job, int with_data) {
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.addr = leaf_addr;
  o.job_id = job;
  o.host = "hostJ";
  o.local_rank = 0;
  o.local_size = 1;
  o.world_size = 1;
  o.timeout_s = 30;
  o.topology = "gpu=test\n";
  rdzv_rendezvous_t *r = NULL;
  char err[512] = "";
  int rc = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  if (rc != 0)
    fail_msg("job %s: %s (%s)", job, rdzv_strerror(rc), err);
  int64_t gen = rdzv_rendezvous_generation(r);
  if (with_data) {
    struct rdzv_client_opts co;
    rdzv_client_opts_init(&co);
    co.addr = leaf_addr;
    co.job_id = job;
    rdzv_client_t *c = NULL;
    assert_int_equal(rdzv_client_create(&co, &c), 0);
    static char big[100 * 1024];
    memset(big, 'v', sizeof(big));
    assert_int_equal(
        rdzv_store_set(c, "blob", big, sizeof(big), RDZV_STORE_WRITE_ONCE, 30),
        0);
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(rdzv_store_get(c, "blob", &v, &n, 30), 0); /* cached */
    assert_int_equal(n, sizeof(big));
    rdzv_free(v);
    assert_int_equal(rdzv_store_set(c, "counter", "7", 1, 0, 30), 0);
    rdzv_client_destroy(c);
  }
  rdzv_rendezvous_destroy(r);
  return gen;
}

/* Waits until no daemon holds a job (each asked for its statistics),
 * then until the daemons' open files stop changing (the statistics
 * readers' own connections close asynchronously). */
static void wait_no_jobs(void) {
  int tries = 0;
  for (; tries < 600; tries++) {
    int busy = 0;
    for (int i = 0; i < 3; i++)
      busy |= stats_at(tcp[i], "jobs") != 0;
    if (!busy)
      break;
    usleep(100 * 1000);
  }
  if (tries == 600)
    fail_msg("jobs still held a minute after their last connection closed");
  int last = -1;
  for (tries = 0; tries < 100; tries++) {
    usleep(100 * 1000);
    int n = fds_of(procs[0].pid) + fds_of(procs[1].pid) + fds_of(procs[2].pid);
    if (n == last)
      return;
    last = n;
  }
}

static void test_jobs_end(void **state) {
  (void)state;
  run_job("warm-up", 1);
  wait_no_jobs();
  int fds0[3];
  long rss0[3];
  for (int i = 0; i < 3; i++) {
    fds0[i] = fds_of(procs[i].pid);
    rss0[i] = rss_kb(procs[i].pid);
  }
  for (int k = 0; k < JOBS; k++) {
    char job[32];
    snprintf(job, sizeof(job), "job-%d", k);
    assert_int_equal(run_job(job, 1), 1);
  }
  wait_no_jobs();
  static const char *const names[] = {"root", "mid", "leaf"};
  for (int i = 0; i < 3; i++) {
    int fds = fds_of(procs[i].pid);
    long rss = rss_kb(procs[i].pid);
    printf("%-4s fds %d -> %d, RSS %ld KB -> %ld KB after %d jobs\n", names[i],
           fds0[i], fds, rss0[i], rss, JOBS);
    assert_int_equal(fds, fds0[i]);
#ifndef __SANITIZE_ADDRESS__ /* ASan holds freed memory in quarantine */
    /* Each job kept would cost every daemon its 100 KB value (5 MB). */
    assert_true(rss - rss0[i] < 1024);
#endif
  }
}

static void test_relaunch_within_linger(void **state) {
  (void)state;
  /* Back to back (well within the linger): the job's state is kept, so
   * the second launch is generation 2. */
  assert_int_equal(run_job("steps", 0), 1);
  assert_int_equal(run_job("steps", 0), 2);
  wait_no_jobs();
  /* After the linger it is a new job. */
  assert_int_equal(run_job("steps", 0), 1);
}

#define CAP 20000
static int setup_cap(void **state) {
  root_extra = "--max-job-bytes=20000";
  int rc = setup(state);
  root_extra = NULL;
  return rc;
}

static rdzv_client_t *leaf_client(const char *job) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = leaf_addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

/* --max-job-bytes at the root, asked two node levels down: a write past
 * the cap fails with RDZV_EJOB_FULL (the text says which cap), nothing of
 * it is kept, other jobs are not affected, and room made by a smaller
 * value is room again. */
static void test_job_memory_cap(void **state) {
  (void)state;
  static char big[CAP];
  memset(big, 'v', sizeof(big));
  rdzv_client_t *c = leaf_client("capped");
  assert_int_equal(rdzv_store_set(c, "a", big, 10000, 0, 20), 0);
  assert_int_equal(rdzv_store_set(c, "b", big, 12000, 0, 20), RDZV_EJOB_FULL);
  if (strstr(rdzv_client_last_error(c), "--max-job-bytes") == NULL)
    fail_msg("the error names no cap: %s", rdzv_client_last_error(c));
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(c, "b", &v, &n, 20), RDZV_ENOKEY);
  assert_int_equal(rdzv_store_append(c, "a", big, 10001, 20), RDZV_EJOB_FULL);
  struct rdzv_value *out = NULL;
  assert_int_equal(rdzv_store_gather(c, "g", 0, 2, big, 10001, &out, 20),
                   RDZV_EJOB_FULL);
  /* Another job has a cap of its own. */
  rdzv_client_t *o = leaf_client("other");
  assert_int_equal(rdzv_store_set(o, "b", big, 12000, 0, 20), 0);
  rdzv_client_destroy(o);
  /* A smaller value makes room. */
  assert_int_equal(rdzv_store_set(c, "a", big, 100, 0, 20), 0);
  assert_int_equal(rdzv_store_set(c, "b", big, 12000, 0, 20), 0);
  assert_int_equal(rdzv_store_get(c, "b", &v, &n, 20), 0);
  assert_int_equal(n, 12000);
  rdzv_free(v);
  rdzv_client_destroy(c);
}

static void test_stats_is_no_job(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) {
    struct rdzv_client_opts o;
    rdzv_client_opts_init(&o);
    o.addr = tcp[i];
    o.job_id = "only-stats";
    rdzv_client_t *c = NULL;
    char *json = NULL;
    assert_int_equal(rdzv_client_create(&o, &c), 0);
    assert_int_equal(rdzv_store_stats(c, &json, 10), 0);
    /* Asked while its connection is open: still no job. */
    assert_int_equal(stats_get(json, "jobs"), 0);
    rdzv_free(json);
    rdzv_client_destroy(c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_jobs_end, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relaunch_within_linger, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stats_is_no_job, setup, teardown),
      cmocka_unit_test_setup_teardown(test_job_memory_cap, setup_cap, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
