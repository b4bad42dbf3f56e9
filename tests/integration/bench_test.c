/* rdzv-bench end to end at a small scale, with both rank transports: every
 * rank completes in both modes, the JSON holds the documented fields, and
 * the root of the tree handles a small fraction of the flat root's
 * messages (each flat rank costs the root at least 8: 4 requests, 4
 * replies). With a 28 KB id table (--ranks-per-root 2) the nodes of a
 * process keep one copy of it (interned bytes), and every host's rank 0
 * got the same table, in both modes. */
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

/* The integer field key of a JSON record (0 when absent). */
static json_int_t field(const json_t *r, const char *key) {
  return json_integer_value(json_object_get(r, key));
}

/* Runs rdzv-bench with argv plus "--json FILE", checks it exits 0, and
 * returns the JSON it wrote (the caller decrefs). */
static json_t *bench_json(char **argv, size_t argc) {
  char json_path[] = "/tmp/rdzv-bench-test-XXXXXX";
  int fd = mkstemp(json_path);
  assert_true(fd >= 0);
  close(fd);
  char *full[32];
  assert_true(argc + 3 <= 32);
  memcpy(full, argv, argc * sizeof(*argv));
  full[argc] = "--json";
  full[argc + 1] = json_path;
  full[argc + 2] = NULL;
  struct proc p;
  assert_int_equal(proc_start(&p, full, 1), 0);
  char *out = proc_read_all(&p);
  printf("%s", out ? out : "");
  free(out);
  assert_int_equal(proc_wait(&p), 0);
  json_t *all = json_load_file(json_path, 0, NULL);
  unlink(json_path);
  assert_non_null(all);
  return all;
}

static void run_bench(const char *transport) {
  char *argv[] = {BENCH,
                  "--ranks",
                  "400",
                  "--ranks-per-host",
                  "8",
                  "--fanout",
                  "4",
                  "--mode",
                  "both",
                  "--transport",
                  (char *)transport};
  json_t *all = bench_json(argv, sizeof(argv) / sizeof(*argv));
  assert_int_equal(json_array_size(all), 2);
  int64_t msgs[2] = {0, 0};
  for (size_t i = 0; i < 2; i++) {
    json_t *r = json_array_get(all, i);
    const char *mode = json_string_value(json_object_get(r, "mode"));
    assert_non_null(mode);
    int tree = strcmp(mode, "tree") == 0;
    assert_int_equal(field(r, "ranks"), 400);
    assert_int_equal(field(r, "hosts"), 50);
    assert_int_equal(field(r, "failed"), 0);
    assert_true(json_real_value(json_object_get(r, "wall_s")) > 0);
    assert_true(json_real_value(json_object_get(r, "p99_s")) >=
                json_real_value(json_object_get(r, "p50_s")));
    assert_true(field(r, "root_rss_bytes") > 0);
    assert_string_equal(json_string_value(json_object_get(r, "transport")),
                        strcmp(transport, "inproc") == 0 ? "in-process"
                                                         : "sockets");
    msgs[tree] = field(r, "root_msgs");
    if (tree)
      assert_true(field(r, "max_node_msgs") > 0);
    /* The projection's busiest daemon: the root's or the busiest node's
     * frames without heartbeats, never more than all its frames. */
    json_int_t rw = field(r, "root_work_msgs"),
               nw = field(r, "max_node_work_msgs");
    assert_true(rw > 0 && rw <= msgs[tree]);
    assert_true(nw >= 0 && nw <= field(r, "max_node_msgs"));
    assert_true(!tree || nw > 0);
    assert_int_equal(field(r, "projection_busiest_frames"), rw > nw ? rw : nw);
    assert_true(json_real_value(json_object_get(r, "projection_frame_us")) > 0);
  }
  json_decref(all);
  assert_true(msgs[0] >= 8 * 400);
  assert_true(msgs[1] > 0 && msgs[1] * 20 < msgs[0]);
}

static void test_sockets(void **state) {
  (void)state;
  run_bench("sockets");
}

static void test_in_process(void **state) {
  (void)state;
  run_bench("inproc");
}

/* --heartbeat-ms reaches the nodes, and the projection's busiest daemon
 * leaves their pings out: at 1 ms every node pings many times a run. */
static void test_heartbeats(void **state) {
  (void)state;
  char *argv[] = {BENCH,  "--ranks",     "400",    "--ranks-per-host",
                  "8",    "--fanout",    "4",      "--mode",
                  "tree", "--transport", "inproc", "--heartbeat-ms",
                  "1"};
  json_t *all = bench_json(argv, sizeof(argv) / sizeof(*argv));
  assert_int_equal(json_array_size(all), 1);
  json_t *r = json_array_get(all, 0);
  assert_int_equal(field(r, "failed"), 0);
  json_int_t msgs = field(r, "max_node_msgs"),
             work = field(r, "max_node_work_msgs"),
             root = field(r, "root_msgs"),
             root_work = field(r, "root_work_msgs");
  assert_true(work > 0 && work < msgs);
  assert_true(root_work > 0 && root_work < root);
  json_decref(all);
}

static void test_interned(void **state) {
  (void)state;
  char *argv[] = {BENCH,   "--ranks",  "400",  "--ranks-per-host",
                  "8",     "--fanout", "4",    "--ranks-per-root",
                  "2",     "--mode",   "both", "--transport",
                  "inproc"};
  json_t *all = bench_json(argv, sizeof(argv) / sizeof(*argv));
  assert_int_equal(json_array_size(all), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *r = json_array_get(all, i);
    int tree =
        strcmp(json_string_value(json_object_get(r, "mode")), "tree") == 0;
    assert_int_equal(field(r, "failed"), 0);
    /* Local rank 0 of each of the 50 hosts, checked. */
    assert_int_equal(field(r, "id_tables_checked"), 50);
    assert_int_equal(field(r, "id_table_mismatches"), 0);
    json_int_t interned = field(r, "interned_bytes");
    /* Tree: 50 nodes in one process, each after the first that got a
     * table found it interned (200 ids of 136 bytes). Flat: no node. */
    if (tree)
      assert_true(interned >= 40 * 200 * 136);
    else
      assert_int_equal(interned, 0);
    assert_true(json_real_value(json_object_get(r, "rendezvous_cpu_s")) > 0);
  }
  json_decref(all);
}

/* A connection storm (field failure B01, pytorch/pytorch#76913): 4,096
 * ranks connect at the same moment to one server whose listen backlog is
 * 64. Refusals and resets are retried with backoff; every rank joins. */
static void test_connection_storm(void **state) {
  (void)state;
  char *argv[] = {"/usr/bin/env", "RDZVD_BACKLOG=64", BENCH,  "--ranks",
                  "4096",         "--mode",           "flat", "--transport",
                  "sockets"};
  json_t *all = bench_json(argv, sizeof(argv) / sizeof(*argv));
  json_t *r = json_array_get(all, 0);
  assert_int_equal(field(r, "ranks"), 4096);
  assert_int_equal(field(r, "failed"), 0);
  json_decref(all);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sockets),
      cmocka_unit_test(test_in_process),
      cmocka_unit_test(test_interned),
      cmocka_unit_test(test_heartbeats),
      cmocka_unit_test(test_connection_storm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
