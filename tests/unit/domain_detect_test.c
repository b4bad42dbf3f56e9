/* rdzv_domain_detect and rdzv_domain_format (rdzv/rendezvous.h): a host's
 * NVLink domain from NVML, here the FAKE NVML tests/fake_nvml/
 * libfake_nvml.so (a test double loaded through the same dlopen seam as
 * the driver's libnvidia-ml.so.1). A GPU in a completed fabric gives
 * "nvl-<uuid>-<clique>"; every case without a domain gives 0 and "". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/rendezvous.h"

#define FAKE "tests/fake_nvml/libfake_nvml.so"
#define UUID "0123456789abcdef00112233445566ff"

static void reset(void) {
  unsetenv("FAKE_NVML_INIT");
  unsetenv("FAKE_NVML_GPUS");
  unsetenv("FAKE_NVML_FABRIC");
  unsetenv("FAKE_NVML_CLIQUE");
  unsetenv("FAKE_NVML_STATE");
  unsetenv("FAKE_NVML_STATUS");
  setenv("FAKE_NVML_CLUSTER", UUID, 1);
}

static void test_format(void **state) {
  (void)state;
  unsigned char uuid[16] = {0};
  char out[64] = "untouched";
  assert_int_equal(rdzv_domain_format(uuid, 7, out, sizeof(out)), 0);
  assert_string_equal(out, "untouched");
  for (int i = 0; i < 16; i++)
    uuid[i] = (unsigned char)(i * 17);
  int n = rdzv_domain_format(uuid, 4294967295u, out, sizeof(out));
  assert_string_equal(out,
                      "nvl-00112233-4455-6677-8899-aabbccddeeff-4294967295");
  assert_int_equal(n, (int)strlen(out));
  assert_int_equal(n, 51); /* the longest: the header's bound */
  assert_int_equal(rdzv_domain_format(uuid, 1, out, 20), -ENOSPC);
}

static void test_fabric_domain(void **state) {
  (void)state;
  char out[64];
  reset();
  setenv("FAKE_NVML_CLIQUE", "32766", 1);
  int n = rdzv_domain_detect(FAKE, 0, out, sizeof(out));
  assert_string_equal(out, "nvl-01234567-89ab-cdef-0011-2233445566ff-32766");
  assert_int_equal(n, (int)strlen(out));
  /* Another clique of the same cluster is another domain. */
  setenv("FAKE_NVML_CLIQUE", "2", 1);
  assert_true(rdzv_domain_detect(FAKE, 3, out, sizeof(out)) > 0);
  assert_string_equal(out, "nvl-01234567-89ab-cdef-0011-2233445566ff-2");
  /* The path from the environment when none is given. */
  setenv("RDZV_NVML_LIBRARY", FAKE, 1);
  assert_true(rdzv_domain_detect(NULL, 0, out, sizeof(out)) > 0);
  unsetenv("RDZV_NVML_LIBRARY");
  assert_int_equal(rdzv_domain_detect(FAKE, 0, out, 10), -ENOSPC);
  assert_string_equal(out, "");
}

/* Every way of having no domain: 0 and "". */
static void test_no_domain(void **state) {
  (void)state;
  char out[64];
  static const char *const cases[][2] = {
      {"FAKE_NVML_INIT", "9"},     /* NVML does not initialize */
      {"FAKE_NVML_GPUS", "0"},     /* no GPU */
      {"FAKE_NVML_FABRIC", "3"},   /* not supported: no NVLink fabric */
      {"FAKE_NVML_STATE", "1"},    /* registration not started */
      {"FAKE_NVML_STATE", "2"},    /* in progress */
      {"FAKE_NVML_STATUS", "999"}, /* completed with an error */
      {"FAKE_NVML_CLUSTER", "0"},  /* an all-zero UUID */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    reset();
    setenv(cases[i][0], cases[i][1], 1);
    strcpy(out, "x");
    if (rdzv_domain_detect(FAKE, 0, out, sizeof(out)) != 0 || out[0] != '\0')
      fail_msg("%s=%s: want no domain, got '%s'", cases[i][0], cases[i][1],
               out);
  }
  reset();
  strcpy(out, "x");
  assert_int_equal(
      rdzv_domain_detect("/nonexistent/libnvidia-ml.so.1", 0, out, sizeof(out)),
      0);
  assert_string_equal(out, "");
  /* A library without the fabric query (an older driver). */
  assert_int_equal(rdzv_domain_detect("libc.so.6", 0, out, sizeof(out)), 0);
  assert_string_equal(out, "");
  assert_int_equal(rdzv_domain_detect(FAKE, -1, out, sizeof(out)), -EINVAL);
  assert_int_equal(rdzv_domain_detect(FAKE, 0, NULL, 4), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format),
      cmocka_unit_test(test_fabric_domain),
      cmocka_unit_test(test_no_domain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
