/* store/daemon/blob: reference counts, and interning (one copy of a big
 * frame's bytes per thread): a match needs the same length and the same
 * bytes after the skipped header, whatever the header; the last unref
 * takes a blob out of the table; a blob whose bytes changed is not found;
 * each thread has its own table; the spare read buffer keeps the biggest
 * one under the limit, and is not handed to a frame of under half its
 * size. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/daemon/blob.h"

#define FRAME 20000u
#define HDR 16u

/* A frame of FRAME bytes: header bytes from hdr_seed, body from seed. */
static uint8_t *frame(unsigned hdr_seed, unsigned seed) {
  uint8_t *p = malloc(FRAME + 1);
  assert_non_null(p);
  for (unsigned i = 0; i < HDR; i++)
    p[i] = (uint8_t)(hdr_seed * 31 + i);
  for (unsigned i = HDR; i < FRAME; i++)
    p[i] = (uint8_t)((i * 2654435761u + seed) >> 11);
  return p;
}

static void test_refs(void **state) {
  (void)state;
  struct rdzv_blob *b = rdzv__blob_new("abc", 3);
  assert_non_null(b);
  assert_int_equal(b->len, 3);
  assert_int_equal(b->data[3], 0);
  assert_ptr_equal(rdzv__blob_ref(b), b);
  assert_int_equal(b->refs, 2);
  assert_true(rdzv__blob_holds(b, b->data + 1, 2));
  assert_false(rdzv__blob_holds(b, b->data + 1, 3));
  rdzv__blob_unref(b);
  rdzv__blob_unref(b);
  assert_null(rdzv__blob_ref(NULL));
  rdzv__blob_unref(NULL);
}

static void test_intern(void **state) {
  (void)state;
  uint64_t h1, h2, h3;
  uint8_t *a = frame(1, 7);
  assert_null(rdzv__blob_intern_find(a, FRAME, HDR, &h1));
  struct rdzv_blob *b = rdzv__blob_take(a, FRAME, FRAME + 1);
  assert_non_null(b);
  rdzv__blob_intern_add(b, HDR, h1);

  /* Another header, the same body: found, the same hash. */
  uint8_t *same = frame(2, 7);
  assert_ptr_equal(rdzv__blob_intern_find(same, FRAME, HDR, &h2), b);
  assert_true(h1 == h2);
  /* The same header, one body byte different (in the middle, where the
   * sampled hash may not look): not found. */
  same[FRAME / 2 + 3] ^= 1;
  assert_null(rdzv__blob_intern_find(same, FRAME, HDR, &h3));
  same[FRAME / 2 + 3] ^= 1;
  /* Shorter: not found. */
  assert_null(rdzv__blob_intern_find(same, FRAME - 1, HDR, &h3));
  /* The header counted: not found (skip differs). */
  assert_null(rdzv__blob_intern_find(same, FRAME, 0, &h3));

  /* A second interned blob of other bytes: each found for its own. */
  uint8_t *o = frame(3, 99);
  assert_null(rdzv__blob_intern_find(o, FRAME, HDR, &h3));
  struct rdzv_blob *b2 = rdzv__blob_new(o, FRAME);
  assert_non_null(b2);
  rdzv__blob_intern_add(b2, HDR, h3);
  assert_ptr_equal(rdzv__blob_intern_find(o, FRAME, HDR, &h3), b2);
  assert_ptr_equal(rdzv__blob_intern_find(same, FRAME, HDR, &h2), b);

  /* Bytes changed in place (a sole holder may): not found any more. */
  b2->data[HDR + 5] ^= 0xff;
  assert_null(rdzv__blob_intern_find(o, FRAME, HDR, &h3));
  b2->data[HDR + 5] ^= 0xff;

  /* Held twice: the first unref keeps it; the last takes it out. */
  rdzv__blob_ref(b);
  rdzv__blob_unref(b);
  assert_ptr_equal(rdzv__blob_intern_find(same, FRAME, HDR, &h2), b);
  rdzv__blob_unref(b);
  assert_null(rdzv__blob_intern_find(same, FRAME, HDR, &h2));
  assert_ptr_equal(rdzv__blob_intern_find(o, FRAME, HDR, &h3), b2);
  rdzv__blob_unref(b2);
  assert_null(rdzv__blob_intern_find(o, FRAME, HDR, &h3));
  free(same);
  free(o);
}

static void *other_thread(void *arg) {
  uint64_t h;
  return rdzv__blob_intern_find(arg, FRAME, HDR, &h);
}

static void test_thread_local(void **state) {
  (void)state;
  uint64_t h;
  uint8_t *a = frame(1, 5);
  uint8_t *copy = malloc(FRAME);
  assert_non_null(copy);
  memcpy(copy, a, FRAME);
  assert_null(rdzv__blob_intern_find(a, FRAME, HDR, &h));
  struct rdzv_blob *b = rdzv__blob_take(a, FRAME, FRAME + 1);
  rdzv__blob_intern_add(b, HDR, h);
  pthread_t t;
  void *found = (void *)1;
  assert_int_equal(pthread_create(&t, NULL, other_thread, copy), 0);
  assert_int_equal(pthread_join(t, &found), 0);
  assert_null(found); /* another loop's thread: its own table */
  assert_ptr_equal(rdzv__blob_intern_find(copy, FRAME, HDR, &h), b);
  rdzv__blob_unref(b);
  free(copy);
}

static void test_spare(void **state) {
  (void)state;
  size_t cap = 0;
  assert_null(rdzv__blob_spare_take(1, &cap));
  rdzv__blob_spare_give(malloc(1000), 1000);
  rdzv__blob_spare_give(malloc(500), 500); /* smaller: freed */
  assert_null(rdzv__blob_spare_take(1001, &cap));
  /* Over twice what is asked: not given (its frame would keep it all). */
  assert_null(rdzv__blob_spare_take(499, &cap));
  uint8_t *m = rdzv__blob_spare_take(800, &cap);
  assert_non_null(m);
  assert_int_equal(cap, 1000);
  assert_null(rdzv__blob_spare_take(1, &cap)); /* taken: none left */
  rdzv__blob_spare_give(m, 1000);
  /* Over the limit: freed, the held one stays. */
  rdzv__blob_spare_give(malloc(16), RDZV_BLOB_SPARE_MAX_BYTES + 1);
  m = rdzv__blob_spare_take(1000, &cap);
  assert_non_null(m);
  assert_int_equal(cap, 1000);
  free(m);
  rdzv__blob_spare_give(NULL, 5000);
  assert_null(rdzv__blob_spare_take(1, &cap));
  rdzv__blob_spare_give(malloc(2000), 2000);
  rdzv__blob_spare_release();
  assert_null(rdzv__blob_spare_take(1, &cap));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refs),
      cmocka_unit_test(test_intern),
      cmocka_unit_test(test_thread_local),
      cmocka_unit_test(test_spare),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
