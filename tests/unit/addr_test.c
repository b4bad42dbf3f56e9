/* store/wire/addr.h: the address syntax, case by case (what each of its
 * readers took before it had one parser, and what it now refuses). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rdzv/error.h"
#include "store/wire/addr.h"

#define R RDZV_ADDR_RANGE
#define P0 RDZV_ADDR_PORT0
#define NU RDZV_ADDR_NO_UNIX
#define V6 RDZV_ADDR_BARE_V6

struct addr_case {
  const char *in;
  unsigned flags;
  int rc;
  const char *host; /* or the Unix path; NULL: not checked */
  int first, last;
};

static const struct addr_case cases[] = {
    {"unix:/run/rdzv.sock", 0, 0, "/run/rdzv.sock", 0, 0},
    {"unix:@rdzv-h1", 0, 0, "@rdzv-h1", 0, 0},
    {"unix:@", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"unix:", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"unix:/x", NU, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"127.0.0.1:29400", 0, 0, "127.0.0.1", 29400, 29400},
    {"tcp:node-7:29400", 0, 0, "node-7", 29400, 29400},
    {"[::1]:7000", 0, 0, "::1", 7000, 7000},
    {"tcp:[fe80::1%eth0]:1", 0, 0, "fe80::1%eth0", 1, 1},
    {"::1:7000", 0, RDZV_EBAD_ADDR, NULL, 0, 0}, /* ambiguous */
    {"::1:7000", V6, 0, "::1", 7000, 7000},
    {"h:0", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:0", P0, 0, "h", 0, 0},
    {"h:65535", 0, 0, "h", 65535, 65535},
    {"h:65536", P0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:007", 0, 0, "h", 7, 7},
    {"h:0000007000", 0, 0, "h", 7000, 7000},
    {"h:00", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:00", P0, 0, "h", 0, 0},
    {"h:+80", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h: 80", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:80 ", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:123456", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {":80", P0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"[]:80", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"[::1]7000", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"[::1:7000", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:29400-29463", R, 0, "h", 29400, 29463},
    {"h:29400-29464", R, RDZV_EBAD_ADDR, NULL, 0, 0}, /* 65 ports */
    {"h:29400-29463", 0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:0-5", R | P0, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:9-8", R, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:8-8", R, 0, "h", 8, 8},
    {"h:8-", R, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"h:-8", R, RDZV_EBAD_ADDR, NULL, 0, 0},
    {"tcp:tcp:80", 0, 0, "tcp", 80, 80},
};

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct addr_case *c = &cases[i];
    struct rdzv_addr_parts p;
    int rc = rdzv_addr_split(c->in, c->flags, &p);
    if (rc != c->rc)
      fail_msg("'%s' flags %u: %d, want %d", c->in, c->flags, rc, c->rc);
    if (rc != 0 || c->host == NULL)
      continue;
    if (p.is_unix) {
      assert_string_equal(p.path, c->host);
      continue;
    }
    char host[RDZV_ADDR_HOST_MAX + 1];
    assert_int_equal(rdzv_addr_host(&p, host, sizeof(host)), 0);
    assert_string_equal(host, c->host);
    assert_int_equal(p.port_first, c->first);
    assert_int_equal(p.port_last, c->last);
  }
}

static void test_host_lengths(void **state) {
  (void)state;
  char in[300], host[RDZV_ADDR_HOST_MAX + 1];
  struct rdzv_addr_parts p;
  memset(in, 'a', 255);
  strcpy(in + 255, ":80");
  assert_int_equal(rdzv_addr_split(in, 0, &p), 0);
  assert_int_equal(rdzv_addr_host(&p, host, sizeof(host)), 0);
  assert_int_equal(strlen(host), 255);
  assert_int_equal(rdzv_addr_host(&p, host, 255), RDZV_EBAD_ADDR);
  memset(in, 'a', 256);
  strcpy(in + 256, ":80");
  assert_int_equal(rdzv_addr_split(in, 0, &p), RDZV_EBAD_ADDR);
  assert_int_equal(rdzv_addr_split(NULL, 0, &p), RDZV_EBAD_ADDR);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_host_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
