/* rdzv-bench's incumbents' mode at a small scale (64 ranks): the same C
 * clients run PyTorch's init pattern against PyTorch's own TCPStore
 * server (torch 1.13), rdzvd flat and an rdzvd tree with a TCPStore front
 * end per host, and etcd's gateway where etcd is installed. For every
 * server: no rank failed, every rank got the 128-byte uid and passed the
 * add-barrier (the bench's checks: each add counted once, exactly one
 * rank saw the counter reach N; etcd: every rank counted all N), and the
 * JSON holds the documented fields. With --tcpstore-conns 2 (torch 1.13's
 * idle second connection per rank) the same. No timing is asserted. */
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

static void run(const char *conns, const char *servers, int want_rows) {
  char json_path[] = "/tmp/rdzv-incumbents-test-XXXXXX";
  int fd = mkstemp(json_path);
  assert_true(fd >= 0);
  close(fd);
  char *argv[] = {BENCH,
                  "--mode",
                  "none",
                  "--incumbents",
                  "64",
                  "--incumbent-servers",
                  (char *)servers,
                  "--tcpstore-conns",
                  (char *)conns,
                  "--fanout",
                  "4",
                  "--json",
                  json_path,
                  NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *out = proc_read_all(&p);
  printf("%s", out ? out : "");
  free(out);
  assert_int_equal(proc_wait(&p), 0);
  json_t *all = json_load_file(json_path, 0, NULL);
  unlink(json_path);
  assert_non_null(all);
  assert_int_equal(json_array_size(all), want_rows);
  int etcd = system("command -v etcd >/dev/null 2>&1") == 0;
  for (size_t i = 0; i < json_array_size(all); i++) {
    json_t *r = json_array_get(all, i);
    const char *server = json_string_value(json_object_get(r, "server"));
    assert_non_null(server);
    assert_string_equal(json_string_value(json_object_get(r, "mode")),
                        "incumbent");
    assert_int_equal(json_integer_value(json_object_get(r, "ranks")), 64);
    if (strcmp(server, "etcd") == 0 && !etcd) {
      assert_true(json_is_true(json_object_get(r, "skipped")));
      printf("etcd is not installed: its row says skipped\n");
      continue;
    }
    assert_true(json_is_false(json_object_get(r, "skipped")));
    assert_true(json_is_true(json_object_get(r, "verified")));
    assert_int_equal(json_integer_value(json_object_get(r, "failed")), 0);
    assert_true(json_real_value(json_object_get(r, "wall_s")) > 0);
    assert_true(json_real_value(json_object_get(r, "p99_s")) >=
                json_real_value(json_object_get(r, "p50_s")));
    assert_true(json_integer_value(json_object_get(r, "server_rss_bytes")) > 0);
    assert_true(json_real_value(json_object_get(r, "server_cpu_s")) >= 0);
    /* tree: a root process and one process of nodes at this size */
    assert_int_equal(json_integer_value(json_object_get(r, "server_processes")),
                     strcmp(server, "tree") == 0 ? 2 : 1);
    if (strcmp(server, "torch") != 0 && strcmp(server, "etcd") != 0)
      assert_true(json_real_value(json_object_get(r, "speedup_vs_torch")) > 0);
  }
  json_decref(all);
}

static void test_every_server(void **state) {
  (void)state;
  run("1", "torch,flat,tree,etcd", 4);
}

static void test_two_connections(void **state) {
  (void)state;
  run("2", "torch,flat,tree", 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_server),
      cmocka_unit_test(test_two_connections),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
