/* Interning at a node alone in its process (store/daemon/blob.h): a real
 * root and node (rdzvd), one client of each.
 *  - pinned: write-once keys big1..big8 hold the same 4 MiB value, keys
 *    small1..small8 24 KB values of their own. The node gets big1 (kept),
 *    then in turn big<i> (the same body as big1: found interned, its read
 *    buffer left as the spare) and small<i> (new bytes). Every client gets
 *    the exact bytes; the node's stats count the interned frames; and its
 *    memory grows by about one spare, not by one 4 MiB buffer per small
 *    value (each small value kept in the warm spare it was read into);
 *  - both daemons exit 0 (under ASan: no use after free, no leak). */
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

#define BIG_BYTES (4u << 20)
#define SMALL_BYTES (24u << 10)
#define PAIRS 8

static char dir[64];
static struct proc root, node;
static char root_tcp[64], root_addr[160], node_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-intern-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  char node_tcp[64];
  if (daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0 ||
      daemon_start(&node, dir, "node", root_tcp, NULL, node_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

static rdzv_client_t *client(const char *addr) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "intern";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_client_connect(c, 30), 0);
  return c;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(((uint32_t)i * 2654435761u + seed * 40503u) >> 13);
}

/* GETs key through c and checks that it holds want[0..n). */
static void get_same(rdzv_client_t *c, const char *key, const uint8_t *want,
                     size_t n) {
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, key, &v, &len, 30), 0);
  if (len != n || memcmp(v, want, n) != 0)
    fail_msg("%s: %zu bytes, %s", key, len,
             len == n ? "other bytes" : "another length");
  rdzv_free(v);
}

static void test_pinned(void **state) {
  (void)state;
  uint8_t *big = malloc(BIG_BYTES), *small = malloc(SMALL_BYTES * PAIRS);
  assert_non_null(big);
  assert_non_null(small);
  fill(big, BIG_BYTES, 1);
  rdzv_client_t *setter = client(root_addr), *c = client(node_addr);
  char key[32];
  for (int i = 1; i <= PAIRS; i++) {
    snprintf(key, sizeof(key), "big%d", i);
    assert_int_equal(
        rdzv_store_set(setter, key, big, BIG_BYTES, RDZV_STORE_WRITE_ONCE, 30),
        0);
    uint8_t *s = small + (size_t)(i - 1) * SMALL_BYTES;
    fill(s, SMALL_BYTES, 100 + (unsigned)i);
    snprintf(key, sizeof(key), "small%d", i);
    assert_int_equal(
        rdzv_store_set(setter, key, s, SMALL_BYTES, RDZV_STORE_WRITE_ONCE, 30),
        0);
  }
  get_same(c, "big1", big, BIG_BYTES); /* kept: the node's cache holds it */
  int64_t interned0 = stats_at(node_addr, "bytes.interned");
  long rss0 = rss_kb(node.pid);
  for (int i = 2; i <= PAIRS; i++) {
    snprintf(key, sizeof(key), "big%d", i);
    get_same(c, key, big, BIG_BYTES);
    snprintf(key, sizeof(key), "small%d", i);
    get_same(c, key, small + (size_t)(i - 1) * SMALL_BYTES, SMALL_BYTES);
  }
  int64_t interned = stats_at(node_addr, "bytes.interned") - interned0;
  long rss1 = rss_kb(node.pid);
  printf("node: %lld bytes interned, RSS %ld -> %ld KiB after %d big and "
         "%d small values\n",
         (long long)interned, rss0, rss1, PAIRS - 1, PAIRS - 1);
  /* Each big<i> found big1's copy. */
  assert_true(interned >= (int64_t)(PAIRS - 1) * BIG_BYTES);
  /* One spare of 4 MiB and 7 small values; a 4 MiB buffer kept per small
   * value would be 28 MiB. */
  assert_true(rss0 > 0 && rss1 - rss0 < 12 * 1024);
  /* Cached at the node: the same bytes again, from there. */
  for (int i = 2; i <= PAIRS; i++) {
    snprintf(key, sizeof(key), "small%d", i);
    get_same(c, key, small + (size_t)(i - 1) * SMALL_BYTES, SMALL_BYTES);
  }
  rdzv_client_destroy(c);
  rdzv_client_destroy(setter);
  free(big);
  free(small);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pinned),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
