/* rdzvctl rounds' printer (tools/ctl/rounds.c): statistics JSON in,
 * lines out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tools/ctl/rounds.h"

/* What rdzvctl_print_rounds wrote (malloc'd), its status in *rc. */
static char *print(const char *stats, const char *round, int *rc, char *err,
                   size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  *rc = rdzvctl_print_rounds(stats, "demo", round, f, err, errlen);
  fclose(f);
  return buf;
}

static const char complete[] =
    "{\"name\":\"root\",\"role\":\"root\",\"rounds\":{\"demo\":{\"world\":"
    "{\"round\":\"world\",\"generation\":2,\"state\":\"complete\","
    "\"opened_ms_ago\":900,\"elapsed_ms\":120,\"ranks\":4,\"hosts\":2,"
    "\"max\":4,\"min\":2,"
    "\"joined\":[{\"ms\":0,\"ranks\":1,\"hosts\":1},"
    "{\"ms\":120,\"ranks\":4,\"hosts\":2}],"
    "\"last_joined\":[{\"host\":\"h1\",\"local_rank\":1,\"ms\":120}],"
    "\"phases\":[{\"kind\":\"ids\",\"name\":\"world\",\"state\":\"complete\","
    "\"arrived\":1,\"count\":1,\"first_ms\":130,\"last_ms\":130,"
    "\"ended_ms\":130},"
    "{\"kind\":\"barrier\",\"name\":\"b\",\"state\":\"open\",\"arrived\":3,"
    "\"count\":4,\"first_ms\":140,\"last_ms\":150}],"
    "\"phases_left_out\":2,"
    "\"earlier\":[{\"generation\":1,\"state\":\"failed\",\"ms\":5000,"
    "\"ranks\":3,\"reason\":\"host h1 lost\"}]}}}}";

static void test_complete_round(void **state) {
  (void)state;
  char err[200] = "";
  int rc;
  char *out = print(complete, NULL, &rc, err, sizeof(err));
  assert_int_equal(rc, 0);
  const char *want =
      "job demo, round world, generation 2: complete in 0.120 s, 4 ranks on "
      "2 hosts (min 2, max 4)\n"
      "  joined over time: 0.000 s 1 (1 host), 0.120 s 4 (2 hosts)\n"
      "  last to join: h1 local rank 1 at 0.120 s\n"
      "  ids 'world': 1 of 1 from 0.130 s to 0.130 s, complete at 0.130 s\n"
      "  barrier 'b': 3 of 4 from 0.140 s to 0.150 s, open\n"
      "  (and 2 later collectives not kept)\n"
      "  earlier: generation 1 ended after 5.000 s, 3 ranks: host h1 lost\n";
  assert_string_equal(out, want);
  free(out);
  /* One round by name; another is refused naming it. */
  out = print(complete, "world", &rc, err, sizeof(err));
  assert_int_equal(rc, 0);
  free(out);
  out = print(complete, "other", &rc, err, sizeof(err));
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "no round 'other' of job demo"));
  free(out);
}

static void test_not_a_root(void **state) {
  (void)state;
  char err[300] = "";
  int rc;
  char *out =
      print("{\"name\":\"n1\",\"role\":\"node\"}", NULL, &rc, err, sizeof(err));
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "daemon n1 is a node"));
  free(out);
  out = print("not json", NULL, &rc, err, sizeof(err));
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "not JSON"));
  free(out);
}

/* Fields missing or of another type: "?" and 0, never a crash. */
static void test_malformed_fields(void **state) {
  (void)state;
  static const char *const bad[] = {
      "{\"rounds\":{\"demo\":{\"x\":{}}}}",
      "{\"rounds\":{\"demo\":{\"x\":{\"round\":7,\"state\":[],\"joined\":{},"
      "\"last_joined\":[{\"host\":1}],\"phases\":[{}, 3],\"earlier\":[{}]}}}}",
      "{\"rounds\":{\"demo\":{\"x\":{\"phases\":[{\"kind\":null,\"state\":"
      "\"failed\"}],\"earlier\":[{\"state\":1,\"reason\":2}]}}}}",
      "{\"rounds\":{\"demo\":{\"x\":3}}}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[300] = "";
    int rc;
    char *out = print(bad[i], NULL, &rc, err, sizeof(err));
    assert_non_null(out);
    if (rc == 0)
      assert_non_null(strstr(out, "job demo, round ?"));
    free(out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_complete_round),
      cmocka_unit_test(test_not_a_root),
      cmocka_unit_test(test_malformed_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
