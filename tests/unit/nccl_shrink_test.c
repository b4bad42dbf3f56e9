/* Unit tests of comm/nccl_api's optional entry points, ncclCommShrink
 * (NCCL 2.27), ncclCommGetUniqueId and ncclCommGrow (2.29), against the
 * FAKE NCCL library (tests/fake_nccl, a test double) loaded through
 * rdzv_nccl_load(): resolved when exported, left NULL when not, and
 * refused by rdzv_nccl_optional() with the version found and needed or
 * the symbol named; the fake gives the new ranks NCCL gives and logs what
 * it was passed (FAKE_NCCL_LOG). The mirrored flags are checked against
 * the real nccl.h in nccl_api_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/nccl_api.h"
#include "rdzv/error.h"

#define FAKE "tests/fake_nccl/libfake_nccl.so"
#define FAKE_NOSHRINK "tests/fake_nccl/libfake_nccl_noshrink.so"

static char log_path[4096];

static int setup(void **state) {
  const char *dir = getenv("TEST_TMPDIR");

  (void)state;
  unsetenv("FAKE_NCCL_VERSION");
  snprintf(log_path, sizeof(log_path), "%s/fake_nccl_shrink.%ld.log",
           dir != NULL ? dir : "/tmp", (long)getpid());
  unlink(log_path);
  setenv("FAKE_NCCL_LOG", log_path, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(log_path);
  unsetenv("FAKE_NCCL_LOG");
  unsetenv("FAKE_NCCL_VERSION");
  return 0;
}

/* The fake's call log so far, in a static buffer. */
static const char *fake_log(void) {
  static char buf[16384];
  size_t n = 0;
  FILE *f = fopen(log_path, "r");

  buf[0] = '\0';
  if (f == NULL)
    return buf;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void hex8(const rdzv_nccl_unique_id *id, char out[17]) {
  int i;

  for (i = 0; i < 8; i++)
    snprintf(out + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
}

static struct rdzv_nccl_api *load_ok(const char *path) {
  struct rdzv_nccl_api *api = NULL;
  char err[512];
  int rc = rdzv_nccl_load(path, &api, err, sizeof(err));

  if (rc != 0)
    fail_msg("loading %s: %s: %s", path, rdzv_err_name(rc), err);
  assert_non_null(api);
  return api;
}

/* The optional entry points: resolved when exported, and the fake's
 * shrink and grow give the ranks NCCL gives. */
static void test_shrink_and_grow(void **state) {
  struct rdzv_nccl_api *api = load_ok(FAKE);
  rdzv_nccl_comm_t world = NULL, small = NULL, big = NULL, fresh = NULL;
  rdzv_nccl_comm_t none = (rdzv_nccl_comm_t)&api;
  rdzv_nccl_unique_id id, gid;
  int ex[2] = {3, 0}, self[1] = {2};
  char hex[17], want[160];
  int n = -1;

  (void)state;
  assert_non_null(api->comm_shrink);
  assert_non_null(api->comm_get_unique_id);
  assert_non_null(api->comm_grow);
  assert_int_equal(api->get_unique_id(&id), RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_init_rank_config(&world, 6, id, 2, NULL),
                   RDZV_NCCL_SUCCESS);
  /* Rank 2 of 6 without 0 and 3: rank 1 of 4. */
  assert_int_equal(
      api->comm_shrink(world, ex, 2, &small, NULL, RDZV_NCCL_SHRINK_ABORT),
      RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_count(small, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 4);
  assert_int_equal(api->comm_user_rank(small, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 1);
  assert_non_null(strstr(fake_log(), " exclude=3,0 flags=1 child="));
  assert_non_null(strstr(fake_log(), " nranks=4 rank=1 -> 0"));
  /* A rank may not exclude itself. */
  assert_int_equal(api->comm_shrink(world, self, 1, &none, NULL, 0),
                   RDZV_NCCL_INVALID_ARGUMENT);
  assert_null(none);
  /* Grow the 4 to 6: the id from the comm, the existing rank kept. */
  assert_int_equal(api->comm_get_unique_id(small, &gid), RDZV_NCCL_SUCCESS);
  hex8(&gid, hex);
  snprintf(want, sizeof(want), " id=%s -> 0", hex);
  assert_non_null(strstr(fake_log(), want));
  assert_int_equal(api->comm_grow(small, 6, &gid, -1, &big, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_user_rank(big, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 1);
  /* A new member: no comm, the id, its new rank. */
  assert_int_equal(api->comm_grow(NULL, 6, &gid, 5, &fresh, NULL),
                   RDZV_NCCL_SUCCESS);
  assert_int_equal(api->comm_user_rank(fresh, &n), RDZV_NCCL_SUCCESS);
  assert_int_equal(n, 5);
  snprintf(want, sizeof(want), "grow comm=0 nranks=6 id=%s rank=5 child=", hex);
  assert_non_null(strstr(fake_log(), want));
  /* A new member without the id is refused. */
  none = (rdzv_nccl_comm_t)&api;
  assert_int_equal(api->comm_grow(NULL, 6, NULL, 4, &none, NULL),
                   RDZV_NCCL_INVALID_ARGUMENT);
  assert_null(none);
  api->comm_destroy(fresh);
  api->comm_destroy(big);
  api->comm_destroy(small);
  api->comm_abort(world);
  rdzv_nccl_unload(api);
}

/* An NCCL without the optional entry points loads; calling them is refused
 * with the version found and needed, or the missing symbol. */
static void test_optional_symbols(void **state) {
  struct rdzv_nccl_api *api;
  char err[512];

  (void)state;
  setenv("FAKE_NCCL_VERSION", "22605", 1);
  api = load_ok(FAKE);
  assert_int_equal(
      rdzv_nccl_optional(api, "ncclCommShrink", RDZV_NCCL_SHRINK_VERSION,
                         api->comm_shrink != NULL, err, sizeof(err)),
      RDZV_ENCCL_VERSION);
  assert_string_equal(err, "ncclCommShrink needs NCCL 2.27.0 (code 22700) or "
                           "newer; NCCL library '" FAKE "' is version 2.26.5 "
                           "(code 22605)");
  rdzv_nccl_unload(api);
  setenv("FAKE_NCCL_VERSION", "22809", 1);
  api = load_ok(FAKE);
  assert_int_equal(
      rdzv_nccl_optional(api, "ncclCommShrink", RDZV_NCCL_SHRINK_VERSION,
                         api->comm_shrink != NULL, err, sizeof(err)),
      0);
  assert_int_equal(rdzv_nccl_optional(api, "ncclCommGrow",
                                      RDZV_NCCL_GROW_VERSION,
                                      api->comm_grow != NULL, err, sizeof(err)),
                   RDZV_ENCCL_VERSION);
  assert_non_null(strstr(err, "ncclCommGrow needs NCCL 2.29.0"));
  rdzv_nccl_unload(api);
  unsetenv("FAKE_NCCL_VERSION");
  /* New enough, symbols missing. */
  api = load_ok(FAKE_NOSHRINK);
  assert_int_equal(api->version, 22900);
  assert_null(api->comm_shrink);
  assert_null(api->comm_get_unique_id);
  assert_null(api->comm_grow);
  assert_int_equal(rdzv_nccl_optional(api, "ncclCommGrow",
                                      RDZV_NCCL_GROW_VERSION,
                                      api->comm_grow != NULL, err, sizeof(err)),
                   RDZV_ENCCL_SYMBOL);
  assert_string_equal(err, "NCCL library '" FAKE_NOSHRINK "' (version 2.29.0) "
                           "lacks symbol ncclCommGrow (NCCL has it from "
                           "2.29.0 on)");
  rdzv_nccl_unload(api);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_shrink_and_grow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_optional_symbols, setup, teardown),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
