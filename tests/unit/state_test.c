/* The root's state interface (store/daemon/state/state.h): the contract
 * every backend must keep, run against each backend in the table below
 * (the in-memory one today; a durable one is added to the same table).
 * Keys: set, get, write-once, append, delete, count, scan with deletion;
 * records: their own namespace per kind, invisible to keys; two jobs'
 * states independent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv/error.h"
#include "store/daemon/state/mem.h"
#include "store/daemon/state/state.h"

static const struct rdzv_state_backend *const backends[] = {
    &rdzv__state_mem,
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

static struct rdzv_state *open_job(const struct rdzv_state_backend *b,
                                   const char *job) {
  struct rdzv_state *st = NULL;
  assert_int_equal(b->open(b, job, &st), 0);
  assert_non_null(st);
  return st;
}

#define K(s) (const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)

static void assert_value(struct rdzv_state *st, const uint8_t *k, uint32_t klen,
                         const char *want, bool write_once) {
  struct rdzv_state_val v;
  assert_int_equal(rdzv__state_get(st, k, klen, &v), 0);
  assert_int_equal(v.n, strlen(want));
  if (v.n > 0)
    assert_memory_equal(v.p, want, v.n);
  assert_int_equal(v.write_once, write_once);
}

static void test_set_get(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    struct rdzv_state_val v = {NULL, 7, true, NULL};
    assert_int_equal(rdzv__state_get(st, K("a"), &v), RDZV_ENOKEY);
    assert_int_equal(v.n, 7); /* untouched */
    assert_int_equal(rdzv__state_set(st, K("a"), K("one"), false), 0);
    assert_value(st, K("a"), "one", false);
    assert_int_equal(rdzv__state_set(st, K("a"), K("two!"), false), 0);
    assert_value(st, K("a"), "two!", false);
    /* An empty value, given as NULL. */
    assert_int_equal(rdzv__state_set(st, K("e"), NULL, 0, false), 0);
    assert_value(st, K("e"), "", false);
    /* Binary keys: a NUL inside, and a key that is another's prefix. */
    assert_int_equal(rdzv__state_set(st, K("x\0y"), K("nul"), false), 0);
    assert_int_equal(rdzv__state_set(st, K("x"), K("short"), false), 0);
    assert_value(st, K("x\0y"), "nul", false);
    assert_value(st, K("x"), "short", false);
    assert_int_equal(rdzv__state_get(st, K("x\0"), &v), RDZV_ENOKEY);
    assert_int_equal(rdzv__state_count(st), 4);
    rdzv__state_close(st);
  }
}

static void test_write_once(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-1"), true), 0);
    assert_value(st, K("id"), "uid-1", true);
    /* The same bytes again: accepted, nothing changes. */
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-1"), true), 0);
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-1"), false), 0);
    assert_value(st, K("id"), "uid-1", true);
    /* Other bytes, write-once or not: refused, value kept. */
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-2"), true),
                     RDZV_EWRITE_ONCE);
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-2"), false),
                     RDZV_EWRITE_ONCE);
    assert_int_equal(rdzv__state_append(st, K("id"), K("+")), RDZV_EWRITE_ONCE);
    assert_value(st, K("id"), "uid-1", true);
    /* A mutable key may become write-once. */
    assert_int_equal(rdzv__state_set(st, K("m"), K("v1"), false), 0);
    assert_int_equal(rdzv__state_set(st, K("m"), K("v2"), true), 0);
    assert_value(st, K("m"), "v2", true);
    /* The backend deletes write-once keys (the root refuses clients). */
    assert_int_equal(rdzv__state_del(st, K("id")), 1);
    assert_int_equal(rdzv__state_set(st, K("id"), K("uid-2"), true), 0);
    assert_value(st, K("id"), "uid-2", true);
    rdzv__state_close(st);
  }
}

static void test_append_del_count(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    assert_int_equal(rdzv__state_append(st, K("log"), K("ab")), 0);
    assert_value(st, K("log"), "ab", false);
    assert_int_equal(rdzv__state_append(st, K("log"), K("cd")), 0);
    assert_int_equal(rdzv__state_append(st, K("log"), NULL, 0), 0);
    assert_value(st, K("log"), "abcd", false);
    assert_int_equal(rdzv__state_count(st), 1);
    assert_int_equal(rdzv__state_del(st, K("nope")), 0);
    assert_int_equal(rdzv__state_del(st, K("log")), 1);
    assert_int_equal(rdzv__state_del(st, K("log")), 0);
    assert_int_equal(rdzv__state_count(st), 0);
    rdzv__state_close(st);
  }
}

/* bytes: names and values of keys and records, whatever the changes. */
static void test_bytes(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    assert_int_equal(rdzv__state_bytes(st), 0);
    assert_int_equal(rdzv__state_set(st, K("key"), K("value"), false), 0);
    assert_int_equal(rdzv__state_bytes(st), 3 + 5);
    assert_int_equal(rdzv__state_set(st, K("key"), K("v"), false), 0);
    assert_int_equal(rdzv__state_bytes(st), 3 + 1);
    assert_int_equal(rdzv__state_append(st, K("key"), K("wxyz")), 0);
    assert_int_equal(rdzv__state_bytes(st), 3 + 5);
    assert_int_equal(rdzv__state_append(st, K("new"), K("ab")), 0);
    assert_int_equal(rdzv__state_bytes(st), 3 + 5 + 3 + 2);
    /* A refused write-once set changes nothing. */
    assert_int_equal(rdzv__state_set(st, K("wo"), K("1"), true), 0);
    assert_int_equal(rdzv__state_set(st, K("wo"), K("22"), true),
                     RDZV_EWRITE_ONCE);
    assert_int_equal(rdzv__state_bytes(st), 13 + 3);
    assert_int_equal(
        rdzv__state_rec_put(st, RDZV_STATE_REC_ROUND, K("world"), K("g1")), 0);
    uint64_t with_rec = rdzv__state_bytes(st);
    assert_true(with_rec >= 16 + 5 + 2);
    assert_int_equal(rdzv__state_rec_del(st, RDZV_STATE_REC_ROUND, K("world")),
                     0);
    assert_int_equal(rdzv__state_bytes(st), 16);
    assert_int_equal(rdzv__state_del(st, K("key")), 1);
    assert_int_equal(rdzv__state_del(st, K("new")), 1);
    assert_int_equal(rdzv__state_del(st, K("wo")), 1);
    assert_int_equal(rdzv__state_bytes(st), 0);
    rdzv__state_close(st);
  }
}

/* scan's callback: counts visits, deletes keys whose value is "del", and
 * fails with stop_rc at the visit numbered stop_at (0: never). */
struct scan_ctx {
  int visits;
  int stop_at;
  int stop_rc;
  char seen[64][16];
};

static int scan_cb(void *arg, const uint8_t *k, uint32_t klen,
                   const struct rdzv_state_val *v) {
  struct scan_ctx *x = arg;
  assert_true(klen < sizeof(x->seen[0]));
  assert_true(x->visits < 64);
  memcpy(x->seen[x->visits], k, klen);
  x->seen[x->visits][klen] = '\0';
  if (++x->visits == x->stop_at)
    return x->stop_rc;
  return v->n == 3 && memcmp(v->p, "del", 3) == 0 ? RDZV_STATE_DELETE
                                                  : RDZV_STATE_KEEP;
}

static bool seen(const struct scan_ctx *x, const char *k) {
  for (int i = 0; i < x->visits; i++)
    if (strcmp(x->seen[i], k) == 0)
      return true;
  return false;
}

static void test_scan(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    assert_int_equal(rdzv__state_set(st, K("rdzv/w/g1/a"), K("del"), true), 0);
    assert_int_equal(rdzv__state_set(st, K("rdzv/w/g1/b"), K("del"), false), 0);
    assert_int_equal(rdzv__state_set(st, K("rdzv/w/g2/a"), K("keep"), true), 0);
    assert_int_equal(rdzv__state_set(st, K("rdzv/v/g1/a"), K("del"), true), 0);
    assert_int_equal(rdzv__state_set(st, K("other"), K("del"), false), 0);
    struct scan_ctx x;
    memset(&x, 0, sizeof(x));
    assert_int_equal(rdzv__state_scan(st, K("rdzv/w/"), scan_cb, &x), 0);
    /* Exactly the three keys under the prefix, once each. */
    assert_int_equal(x.visits, 3);
    assert_true(seen(&x, "rdzv/w/g1/a") && seen(&x, "rdzv/w/g1/b") &&
                seen(&x, "rdzv/w/g2/a"));
    struct rdzv_state_val v;
    assert_int_equal(rdzv__state_get(st, K("rdzv/w/g1/a"), &v), RDZV_ENOKEY);
    assert_int_equal(rdzv__state_get(st, K("rdzv/w/g1/b"), &v), RDZV_ENOKEY);
    assert_value(st, K("rdzv/w/g2/a"), "keep", true);
    assert_value(st, K("rdzv/v/g1/a"), "del", true); /* other prefix */
    assert_int_equal(rdzv__state_count(st), 3);
    /* A negative answer ends the scan and is returned; nothing deleted
     * after it. */
    memset(&x, 0, sizeof(x));
    x.stop_at = 1;
    x.stop_rc = RDZV_ENOMEM;
    assert_int_equal(rdzv__state_scan(st, NULL, 0, scan_cb, &x), RDZV_ENOMEM);
    assert_int_equal(x.visits, 1);
    assert_int_equal(rdzv__state_count(st), 3);
    /* plen 0: every key. */
    memset(&x, 0, sizeof(x));
    assert_int_equal(rdzv__state_scan(st, NULL, 0, scan_cb, &x), 0);
    assert_int_equal(x.visits, 3);
    assert_int_equal(rdzv__state_count(st), 1);
    assert_value(st, K("rdzv/w/g2/a"), "keep", true);
    rdzv__state_close(st);
  }
}

/* Many keys: a scan deletes every second one, the rest are intact. */
static int odd_cb(void *arg, const uint8_t *k, uint32_t klen,
                  const struct rdzv_state_val *v) {
  (void)v;
  int *visits = arg;
  (*visits)++;
  return (k[klen - 1] - '0') % 2 == 1 ? RDZV_STATE_DELETE : RDZV_STATE_KEEP;
}

static void test_scan_many(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    char k[32], val[32];
    for (int i = 0; i < 10000; i++) {
      int kl = snprintf(k, sizeof(k), "k/%d", i);
      int vl = snprintf(val, sizeof(val), "%d", i * 7);
      assert_int_equal(rdzv__state_set(st, (uint8_t *)k, (uint32_t)kl,
                                       (uint8_t *)val, (uint32_t)vl,
                                       i % 3 == 0),
                       0);
    }
    int visits = 0;
    assert_int_equal(rdzv__state_scan(st, K("k/"), odd_cb, &visits), 0);
    assert_int_equal(visits, 10000);
    assert_int_equal(rdzv__state_count(st), 5000);
    for (int i = 0; i < 10000; i++) {
      int kl = snprintf(k, sizeof(k), "k/%d", i);
      struct rdzv_state_val v;
      int rc = rdzv__state_get(st, (uint8_t *)k, (uint32_t)kl, &v);
      if (i % 2 == 1) {
        assert_int_equal(rc, RDZV_ENOKEY);
        continue;
      }
      snprintf(val, sizeof(val), "%d", i * 7);
      assert_int_equal(rc, 0);
      assert_int_equal(v.n, strlen(val));
      assert_memory_equal(v.p, val, v.n);
      assert_int_equal(v.write_once, i % 3 == 0);
    }
    rdzv__state_close(st);
  }
}

static void test_records(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *st = open_job(backends[b], "job");
    struct rdzv_state_val v;
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ROUND, K("world"), &v),
        RDZV_ENOKEY);
    assert_int_equal(
        rdzv__state_rec_put(st, RDZV_STATE_REC_ROUND, K("world"), K("g1")), 0);
    assert_int_equal(
        rdzv__state_rec_put(st, RDZV_STATE_REC_ASSIGN, K("world"), K("ranks")),
        0);
    /* Same name, other kinds: separate; a key of that name is apart too. */
    assert_int_equal(rdzv__state_set(st, K("world"), K("key"), false), 0);
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ROUND, K("world"), &v), 0);
    assert_int_equal(v.n, 2);
    assert_memory_equal(v.p, "g1", 2);
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ASSIGN, K("world"), &v), 0);
    assert_int_equal(v.n, 5);
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_COLL, K("world"), &v),
        RDZV_ENOKEY);
    /* Records are not keys: not counted, not scanned. */
    assert_int_equal(rdzv__state_count(st), 1);
    struct scan_ctx x;
    memset(&x, 0, sizeof(x));
    assert_int_equal(rdzv__state_scan(st, NULL, 0, scan_cb, &x), 0);
    assert_int_equal(x.visits, 1);
    /* put replaces (also with a longer and an empty value); del of an
     * absent record is no error. */
    assert_int_equal(
        rdzv__state_rec_put(st, RDZV_STATE_REC_ROUND, K("world"), K("g2-done")),
        0);
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ROUND, K("world"), &v), 0);
    assert_int_equal(v.n, 7);
    assert_memory_equal(v.p, "g2-done", 7);
    assert_int_equal(rdzv__state_rec_put(st, RDZV_STATE_REC_COLL,
                                         K("\x0c"
                                           "b"),
                                         NULL, 0),
                     0);
    assert_int_equal(rdzv__state_rec_get(st, RDZV_STATE_REC_COLL,
                                         K("\x0c"
                                           "b"),
                                         &v),
                     0);
    assert_int_equal(v.n, 0);
    assert_int_equal(rdzv__state_rec_del(st, RDZV_STATE_REC_ROUND, K("world")),
                     0);
    assert_int_equal(rdzv__state_rec_del(st, RDZV_STATE_REC_ROUND, K("world")),
                     0); /* absent: no error */
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ROUND, K("world"), &v),
        RDZV_ENOKEY);
    assert_int_equal(
        rdzv__state_rec_get(st, RDZV_STATE_REC_ASSIGN, K("world"), &v), 0);
    /* A long name (over any stack buffer a backend may use). */
    char longname[1000];
    memset(longname, 'n', sizeof(longname));
    assert_int_equal(rdzv__state_rec_put(st, RDZV_STATE_REC_COLL,
                                         (uint8_t *)longname, sizeof(longname),
                                         K("long")),
                     0);
    assert_int_equal(rdzv__state_rec_get(st, RDZV_STATE_REC_COLL,
                                         (uint8_t *)longname, sizeof(longname),
                                         &v),
                     0);
    assert_int_equal(v.n, 4);
    rdzv__state_close(st);
  }
}

static void test_jobs_apart(void **unused) {
  (void)unused;
  for (size_t b = 0; b < NBACKENDS; b++) {
    struct rdzv_state *a = open_job(backends[b], "job-a");
    struct rdzv_state *c = open_job(backends[b], "job-b");
    assert_int_equal(rdzv__state_set(a, K("k"), K("a"), true), 0);
    assert_int_equal(rdzv__state_set(c, K("k"), K("b"), true), 0);
    assert_value(a, K("k"), "a", true);
    assert_value(c, K("k"), "b", true);
    assert_int_equal(
        rdzv__state_rec_put(a, RDZV_STATE_REC_ROUND, K("w"), K("ra")), 0);
    struct rdzv_state_val v;
    assert_int_equal(rdzv__state_rec_get(c, RDZV_STATE_REC_ROUND, K("w"), &v),
                     RDZV_ENOKEY);
    rdzv__state_close(a);
    assert_value(c, K("k"), "b", true);
    rdzv__state_close(c);
    rdzv__state_close(NULL); /* a no-op */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_get),
      cmocka_unit_test(test_write_once),
      cmocka_unit_test(test_append_del_count),
      cmocka_unit_test(test_bytes),
      cmocka_unit_test(test_scan),
      cmocka_unit_test(test_scan_many),
      cmocka_unit_test(test_records),
      cmocka_unit_test(test_jobs_apart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
