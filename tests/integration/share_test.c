/* One copy of each value: a big value goes to every waiter from the one
 * buffer that holds it, never copied per connection. Real root and node
 * (with a TCPStore front end), a 1 MiB value, clients that stop reading so
 * that every write stays in flight (the value is far bigger than a
 * socket's buffer):
 *  - 100 clients of the node wait for a write-once key, then it is set at
 *    the root: while all 100 answers are being written the node holds the
 *    value once (its RSS grows by far less than 100 values), its stats say
 *    100 values went by reference and no big value was copied, 20 of the
 *    clients hang up mid-write, and the 80 others get identical bytes;
 *  - 40 clients of the root read a mutable key, which is deleted and set
 *    to other bytes while the answers are in flight, and 10 of them hang
 *    up: the 30 others get the first bytes, exactly;
 *  - 20 TCPStore connections GET the write-once key through the node's
 *    front end, stalled the same way: the bytes by reference, then the
 *    exact value on each;
 *  - both daemons exit 0 (under ASan: no use after free, no leak). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

#define VALUE_BYTES (1u << 20)
#define WAITERS 100
#define WAITERS_GONE 20
#define READERS 40
#define READERS_GONE 10
#define TS_CONNS 20

static char dir[64];
static struct proc root, node;
static char root_tcp[64], root_addr[160], node_addr[160];
static int ts_port;
static int fds_before;
static uint8_t *v1, *v2; /* two values of VALUE_BYTES, different bytes */

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  v1 = malloc(VALUE_BYTES);
  v2 = malloc(VALUE_BYTES);
  if (v1 == NULL || v2 == NULL)
    return -1;
  for (uint32_t i = 0; i < VALUE_BYTES; i++) {
    v1[i] = (uint8_t)(i * 2654435761u >> 13);
    v2[i] = (uint8_t)~v1[i];
  }
  snprintf(dir, sizeof(dir), "/tmp/rdzv-share-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  char tsopt[300], node_tcp[64];
  snprintf(tsopt, sizeof(tsopt), "--tcpstore-port-file=%s/ts.port", dir);
  const char *node_args[] = {"--tcpstore-listen=127.0.0.1:0",
                             "--tcpstore-job=share", tsopt, NULL};
  if (daemon_start(&root, dir, "root", NULL, NULL, root_tcp) < 0 ||
      daemon_start(&node, dir, "node", root_tcp, node_args, node_tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "root", root_addr, sizeof(root_addr));
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
  char path[300];
  snprintf(path, sizeof(path), "%s/ts.port", dir);
  ts_port = wait_port_file(path, 10);
  return ts_port > 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  free(v1);
  free(v2);
  return bad ? -1 : 0;
}

struct reply {
  int done, status;
  size_t len;
  int same; /* the value's bytes are exactly what was expected */
  const uint8_t *want;
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
  if (res->nvals >= 1) {
    r->len = res->vals[0].len;
    r->same = r->len == VALUE_BYTES &&
              memcmp(res->vals[0].data, r->want, VALUE_BYTES) == 0;
  }
}

static rdzv_client_t *client(const char *addr) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "share";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_int_equal(rdzv_client_connect(c, 30), 0);
  return c;
}

/* Drives every handle in cs[from..n) until each of them is answered. */
static void drive_all(rdzv_client_t **cs, struct reply *rs, int from, int n) {
  for (int round = 0; round < 120000; round++) {
    int left = 0;
    for (int i = from; i < n; i++) {
      rdzv_client_run(cs[i], 0);
      left += !rs[i].done;
    }
    if (left == 0)
      return;
    usleep(500);
  }
  fail_msg("some clients were never answered");
}

static void test_waiters_share_one_buffer(void **state) {
  (void)state;
  static rdzv_client_t *cs[WAITERS];
  static struct reply rs[WAITERS];
  struct rdzv_bytes key = {"uid", 3};
  int64_t waits0 = stats_at(node_addr, "ops.wait.received");
  int64_t shared0 = stats_at(node_addr, "bytes.shared");
  for (int i = 0; i < WAITERS; i++) {
    cs[i] = client(node_addr);
    rs[i] = (struct reply){.want = v1};
    struct rdzv_request req = {
        .op = RDZV_OP_WAIT, .a = 120 * 1000, .nkeys = 1, .keys = &key};
    assert_int_equal(rdzv_client_submit(cs[i], &req, 120, on_reply, &rs[i]), 0);
    rdzv_client_run(cs[i], 0.001); /* sent; then nobody reads */
  }
  assert_true(stats_reach(node_addr, "ops.wait.received", waits0 + WAITERS) >=
              waits0 + WAITERS);
  long rss0 = rss_kb(node.pid);
  rdzv_client_t *setter = client(root_addr);
  assert_int_equal(
      rdzv_store_set(setter, "uid", v1, VALUE_BYTES, RDZV_STORE_WRITE_ONCE, 30),
      0);
  /* Every answer is queued once the node has the value: then 100 writes
   * of 1 MiB are in flight, none of them read. */
  int64_t want = shared0 + (int64_t)WAITERS * VALUE_BYTES;
  int64_t shared = stats_reach(node_addr, "bytes.shared", want);
  long rss1 = rss_kb(node.pid);
  printf("node: %lld bytes by reference, RSS %ld -> %ld KiB with %d answers "
         "of %u bytes in flight\n",
         (long long)(shared - shared0), rss0, rss1, WAITERS, VALUE_BYTES);
  assert_true(shared >= want);
  assert_int_equal(stats_at(node_addr, "bytes.copied_large"), 0);
  /* A copy per waiter would be 100 MiB; the one buffer is 1 MiB. */
  assert_true(rss0 > 0 && rss1 - rss0 < 16 * 1024);
  for (int i = 0; i < WAITERS_GONE; i++) /* hang up mid-write */
    rdzv_client_destroy(cs[i]);
  drive_all(cs, rs, WAITERS_GONE, WAITERS);
  for (int i = WAITERS_GONE; i < WAITERS; i++) {
    if (rs[i].status != 0 || !rs[i].same)
      fail_msg("waiter %d: %s, %zu bytes, %s", i, rdzv_strerror(rs[i].status),
               rs[i].len, rs[i].same ? "same" : "other bytes");
    rdzv_client_destroy(cs[i]);
  }
  /* The root sent the value to the node once, by reference too. */
  assert_true(stats_at(root_addr, "bytes.shared") >= VALUE_BYTES);
  assert_int_equal(stats_at(root_addr, "bytes.copied_large"), 0);
  rdzv_client_destroy(setter);
}

static void test_deleted_while_written(void **state) {
  (void)state;
  static rdzv_client_t *cs[READERS];
  static struct reply rs[READERS];
  rdzv_client_t *setter = client(root_addr);
  assert_int_equal(rdzv_store_set(setter, "mut", v1, VALUE_BYTES, 0, 30), 0);
  int64_t gets0 = stats_at(root_addr, "ops.get.received");
  struct rdzv_bytes key = {"mut", 3};
  for (int i = 0; i < READERS; i++) {
    cs[i] = client(root_addr);
    rs[i] = (struct reply){.want = v1};
    struct rdzv_request req = {.op = RDZV_OP_GET, .nkeys = 1, .keys = &key};
    assert_int_equal(rdzv_client_submit(cs[i], &req, 120, on_reply, &rs[i]), 0);
    rdzv_client_run(cs[i], 0.001);
  }
  /* The root answers a read at once: once it has them all, every answer
   * is in flight. Then the key goes, and comes back with other bytes. */
  assert_true(stats_reach(root_addr, "ops.get.received", gets0 + READERS) >=
              gets0 + READERS);
  int deleted = 0;
  assert_int_equal(rdzv_store_delete(setter, "mut", &deleted, 30), 0);
  assert_int_equal(deleted, 1);
  assert_int_equal(rdzv_store_set(setter, "mut", v2, VALUE_BYTES, 0, 30), 0);
  for (int i = 0; i < READERS_GONE; i++)
    rdzv_client_destroy(cs[i]);
  drive_all(cs, rs, READERS_GONE, READERS);
  for (int i = READERS_GONE; i < READERS; i++) {
    if (rs[i].status != 0 || !rs[i].same)
      fail_msg("reader %d: %s, %zu bytes, %s", i, rdzv_strerror(rs[i].status),
               rs[i].len, rs[i].same ? "same" : "other bytes");
    rdzv_client_destroy(cs[i]);
  }
  /* A new read gets the new bytes. */
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(setter, "mut", &v, &len, 30), 0);
  assert_true(len == VALUE_BYTES && memcmp(v, v2, VALUE_BYTES) == 0);
  rdzv_free(v);
  assert_int_equal(stats_at(root_addr, "bytes.copied_large"), 0);
  rdzv_client_destroy(setter);
}

/* ---- raw TCPStore connections (v2 dialect) --------------------------------- */

static int ts_connect(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)ts_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_true(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

static void send_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    assert_true(w > 0);
    b += w;
    n -= (size_t)w;
  }
}

static void recv_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    assert_true(r > 0);
    b += r;
    n -= (size_t)r;
  }
}

static void test_tcpstore_gets_share(void **state) {
  (void)state;
  int fds[TS_CONNS];
  /* VALIDATE (opcode 0, magic), then GET (opcode 3) of "uid", the key
   * the first test set (cached at the node). */
  static const uint8_t req[] = {0, 0xce, 0xf7, 0x85, 0x3c, 3,   3,   0,  0,
                                0, 0,    0,    0,    0,    'u', 'i', 'd'};
  int64_t shared0 = stats_at(node_addr, "bytes.shared");
  for (int i = 0; i < TS_CONNS; i++) {
    fds[i] = ts_connect();
    send_all(fds[i], req, sizeof(req));
  }
  int64_t want = shared0 + (int64_t)TS_CONNS * VALUE_BYTES;
  assert_true(stats_reach(node_addr, "bytes.shared", want) >= want);
  assert_int_equal(stats_at(node_addr, "bytes.copied_large"), 0);
  uint8_t *got = malloc(VALUE_BYTES);
  assert_non_null(got);
  for (int i = 0; i < TS_CONNS; i++) {
    uint8_t len[8];
    recv_all(fds[i], len, sizeof(len));
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
      n = n << 8 | len[k];
    assert_int_equal(n, VALUE_BYTES);
    recv_all(fds[i], got, VALUE_BYTES);
    assert_memory_equal(got, v1, VALUE_BYTES);
    close(fds[i]);
  }
  free(got);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_waiters_share_one_buffer),
      cmocka_unit_test(test_deleted_while_written),
      cmocka_unit_test(test_tcpstore_gets_share),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
