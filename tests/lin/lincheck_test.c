/* The linearizability checker on hand-made histories whose verdict is
 * known, and on random sequential histories (linearizable by
 * construction) with one read's result changed (then not). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

#define MS 1000000ull

static struct lin_op op(int client, enum lin_kind kind, const char *key,
                        const char *arg, uint64_t call_ms, uint64_t ret_ms) {
  struct lin_op o;
  memset(&o, 0, sizeof(o));
  o.client = client;
  o.kind = kind;
  snprintf(o.key, sizeof(o.key), "%s", key);
  snprintf(o.arg, sizeof(o.arg), "%s", arg ? arg : "");
  o.call_ns = call_ms * MS;
  o.ret_ns = ret_ms == (uint64_t)-1 ? LIN_NO_RETURN : ret_ms * MS;
  return o;
}

static struct lin_op got(struct lin_op o, bool found, const char *out) {
  o.found = found;
  snprintf(o.out, sizeof(o.out), "%s", out ? out : "");
  return o;
}

static int check(const struct lin_op *ops, size_t n) {
  return lin_check(ops, n, NULL);
}

static void test_sequential(void **state) {
  (void)state;
  struct lin_op h[] = {
      op(0, LIN_SET, "k", "a", 0, 1),
      got(op(1, LIN_GET, "k", NULL, 2, 3), true, "a"),
      op(0, LIN_SET, "k", "b", 4, 5),
      got(op(1, LIN_GET, "k", NULL, 6, 7), true, "b"),
  };
  assert_int_equal(check(h, 4), 1);
  /* The last read returning the older value: stale. */
  h[3] = got(h[3], true, "a");
  assert_int_equal(check(h, 4), 0);
}

static void test_concurrent(void **state) {
  (void)state;
  /* A read overlapping a write may return either value ... */
  struct lin_op h[] = {
      op(0, LIN_SET, "k", "a", 0, 1),
      op(0, LIN_SET, "k", "b", 2, 10),
      got(op(1, LIN_GET, "k", NULL, 3, 4), true, "b"),
      got(op(2, LIN_GET, "k", NULL, 5, 6), true, "a"),
  };
  /* ... but not the new value, then the old one, in real-time order. */
  assert_int_equal(check(h, 4), 0);
  h[3] = got(h[3], true, "b");
  assert_int_equal(check(h, 4), 1);
  h[2] = got(h[2], true, "a");
  h[3] = got(h[3], true, "a");
  assert_int_equal(check(h, 4), 1);
}

static void test_unknown_outcome(void **state) {
  (void)state;
  /* A write whose outcome is unknown may take effect late, or never. */
  struct lin_op h[] = {
      op(0, LIN_SET, "k", "x", 1, (uint64_t)-1),
      got(op(1, LIN_GET, "k", NULL, 2, 3), false, NULL),
      got(op(1, LIN_GET, "k", NULL, 4, 5), true, "x"),
  };
  assert_int_equal(check(h, 3), 1);
  /* ... but once seen it stays. */
  struct lin_op h2[] = {h[0], got(op(1, LIN_GET, "k", NULL, 2, 3), true, "x"),
                        got(op(1, LIN_GET, "k", NULL, 4, 5), false, NULL)};
  assert_int_equal(check(h2, 3), 0);
  /* A read of unknown outcome is left out, whatever it says. */
  struct lin_op h3[] = {
      op(0, LIN_SET, "k", "a", 0, 1),
      got(op(1, LIN_GET, "k", NULL, 2, (uint64_t)-1), true, "zzz")};
  assert_int_equal(check(h3, 2), 1);
}

static void test_kinds(void **state) {
  (void)state;
  struct lin_op h[8];
  size_t n = 0;
  h[n++] = got(op(0, LIN_CHECK, "k", NULL, 0, 1), false, NULL);
  h[n] = op(0, LIN_ADD, "k", NULL, 2, 3);
  h[n].delta = 5;
  h[n++].num = 5;
  h[n] = op(1, LIN_CAS, "k", "5", 4, 5);
  snprintf(h[n].arg2, sizeof(h[n].arg2), "7");
  h[n] = got(h[n], true, "7");
  n++;
  h[n++] = op(1, LIN_APPEND, "k", "x", 6, 7);
  h[n++] = got(op(0, LIN_GET, "k", NULL, 8, 9), true, "7x");
  h[n++] = got(op(0, LIN_DELETE, "k", NULL, 10, 11), true, NULL);
  h[n++] = got(op(0, LIN_CHECK, "k", NULL, 12, 13), false, NULL);
  h[n++] = got(op(2, LIN_WAIT, "k", NULL, 12, 20), true, NULL);
  /* The wait ran 12-20 with the key absent since 11: no instant of
   * it saw the key. */
  assert_int_equal(check(h, n), 0);
  h[n - 1].call_ns = 9 * MS; /* now it overlaps the append's result */
  assert_int_equal(check(h, n), 1);
  /* A failed cas reports the value it found. */
  struct lin_op c[] = {op(0, LIN_SET, "c", "a", 0, 1),
                       op(1, LIN_CAS, "c", "b", 2, 3)};
  snprintf(c[1].arg2, sizeof(c[1].arg2), "z");
  c[1] = got(c[1], false, "a");
  assert_int_equal(check(c, 2), 1);
  c[1] = got(c[1], false, "z");
  assert_int_equal(check(c, 2), 0);
}

static void test_keys_apart(void **state) {
  (void)state;
  /* Each key on its own: k's history is fine, j's is not. */
  struct lin_op h[] = {
      op(0, LIN_SET, "k", "a", 0, 1),
      got(op(1, LIN_GET, "k", NULL, 2, 3), true, "a"),
      op(0, LIN_SET, "j", "a", 0, 1),
      got(op(1, LIN_GET, "j", NULL, 2, 3), true, "b"),
  };
  assert_int_equal(check(h, 2), 1);
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
  assert_non_null(f);
  assert_int_equal(lin_check(h, 4, f), 0);
  fclose(f);
  assert_non_null(strstr(buf, "key j"));
  assert_non_null(strstr(buf, "not linearizable by"));
  assert_non_null(strstr(buf, "client 1 get j [2.000 ms, 3.000 ms] = b"));
}

/* Random histories: 4 clients, overlapping operations whose results come
 * from a sequential run at a point inside each (so linearizable by
 * construction); then one read's result is changed to a value the key
 * never held (so not). */
static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void test_random(void **state) {
  (void)state;
  for (int round = 0; round < 200; round++) {
    enum { N = 60 };
    struct lin_op h[N];
    bool present = false;
    char val[LIN_VAL_MAX] = "";
    uint64_t t = 0;
    for (int i = 0; i < N; i++) {
      /* The effect happens at t+1; the call up to 3 ms before, the return
       * up to 3 ms after (operations overlap). */
      t += 2;
      uint64_t call = t + 1 - next() % 3, ret = t + 1 + next() % 3;
      int kind = (int)(next() % 4);
      if (kind == 0) {
        char v[16];
        snprintf(v, sizeof(v), "v%d", i);
        h[i] = op(i % 4, LIN_SET, "k", v, call, ret);
        present = true;
        snprintf(val, sizeof(val), "%s", v);
      } else if (kind == 1) {
        h[i] = got(op(i % 4, LIN_DELETE, "k", NULL, call, ret), present, NULL);
        present = false;
      } else if (kind == 2) {
        h[i] = got(op(i % 4, LIN_GET, "k", NULL, call, ret), present,
                   present ? val : NULL);
      } else {
        h[i] = got(op(i % 4, LIN_CHECK, "k", NULL, call, ret), present, NULL);
      }
    }
    assert_int_equal(check(h, N), 1);
    for (int i = 0; i < N; i++)
      if (h[i].kind == LIN_GET) {
        h[i] = got(h[i], true, "never");
        assert_int_equal(check(h, N), 0);
        break;
      }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sequential),      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_unknown_outcome), cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_keys_apart),      cmocka_unit_test(test_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
