/* A node whose parent cannot be reached fails what it cannot forward
 * after --upstream-timeout-ms, whatever the caller's own deadline, with
 * RDZV_EUNREACHABLE and a text that names the parent and why (not the
 * caller's own healthy node); once the parent is up the node serves.
 * Real daemons. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "rdzv/rdzv.h"

static char dir[64];
static struct proc node, root;
static int parent_port;
static char node_addr[160];
static int fds_before;

static int setup(void **state) {
  (void)state;
  fds_before = count_open_fds();
  snprintf(dir, sizeof(dir), "/tmp/rdzv-unreach-XXXXXX");
  if (mkdtemp(dir) == NULL || (parent_port = free_port()) < 0)
    return -1;
  char par[64], tcp[64];
  snprintf(par, sizeof(par), "127.0.0.1:%d", parent_port);
  /* Above the retry delay's cap (1 s): a node that restarted the clock at
   * each refused attempt never failed anything. */
  const char *extra[] = {"--upstream-timeout-ms=2000", NULL};
  if (daemon_start(&node, dir, "node", par, extra, tcp) < 0)
    return -1;
  daemon_unix_addr(dir, "node", node_addr, sizeof(node_addr));
  root.pid = 0;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  if (root.pid != 0)
    bad |= proc_stop(&root) != 0;
  bad |= rm_rf(dir) != 0;
  bad |= count_open_fds() != fds_before;
  return bad ? -1 : 0;
}

/* Starts the root on the node's parent port with extra (one option, or
 * NULL) and returns a client of the node in job, once a set through the
 * node works (the node has reconnected). */
static rdzv_client_t *root_up(const char *extra, const char *job) {
  char port[64];
  snprintf(port, sizeof(port), "--listen=127.0.0.1:%d", parent_port);
  char *argv[] = {"tools/rdzvd",   "--role=root", port,
                  "--log-level=0", (char *)extra, NULL};
  assert_int_equal(proc_start(&root, argv, 0), 0);
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = node_addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  int rc = -1;
  for (int tries = 0; tries < 100 && rc != 0; tries++) {
    rc = rdzv_store_set(c, "warm", "1", 1, 0, 20);
    if (rc != 0)
      usleep(100 * 1000);
  }
  assert_int_equal(rc, 0);
  return c;
}

static void test_unreachable_parent_named(void **state) {
  (void)state;
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = node_addr;
  o.job_id = "unreach";
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  char want[64];
  snprintf(want, sizeof(want), "parent 127.0.0.1:%d unreachable", parent_port);

  /* Each with a 60 s deadline of its own: the node answers first. */
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(c, "k", &v, &n, 60), RDZV_EUNREACHABLE);
  const char *e = rdzv_client_last_error(c);
  if (strstr(e, want) == NULL || strstr(e, "connection refused") == NULL)
    fail_msg("get: the error names no parent or reason: %s", e);
  assert_int_equal(rdzv_store_set(c, "k", "v", 1, 0, 60), RDZV_EUNREACHABLE);
  assert_non_null(strstr(rdzv_client_last_error(c), want));
  int64_t out = 0;
  assert_int_equal(rdzv_store_add(c, "n", 1, &out, 60), RDZV_EUNREACHABLE);
  const char *keys[] = {"w"};
  assert_int_equal(rdzv_store_wait(c, keys, 1, 60), RDZV_EUNREACHABLE);

  rdzv_client_destroy(c);

  /* The parent comes up on that port: the node serves. */
  c = root_up(NULL, "unreach");
  assert_int_equal(rdzv_store_set(c, "k", "v", 1, 0, 60), 0);
  assert_int_equal(rdzv_store_get(c, "k", &v, &n, 60), 0);
  assert_int_equal(n, 1);
  rdzv_free(v);
  rdzv_client_destroy(c);
}

struct reply {
  int done, status;
};

static void on_reply(rdzv_client_t *c, const struct rdzv_result *res,
                     void *arg) {
  struct reply *r = arg;
  (void)c;
  r->done = 1;
  r->status = res->status;
}

/* The parent drops the node's connection while adds are in flight (it
 * refuses an oversized value sent after them): the oversized set fails
 * with the parent's reason; the add in flight is sent again on the next
 * connection (its op id makes the root apply it once), and the add that
 * waited behind it goes after the next hello (it used to sit in front of
 * the next hello, which the parent then refused): both succeed, and the
 * counter is 2, not 3. */
static void test_resend_after_reset(void **state) {
  (void)state;
  rdzv_client_t *c = root_up("--max-value-bytes=100", "reset");
  kill(root.pid, SIGSTOP);
  static char big[300];
  memset(big, 'b', sizeof(big));
  struct rdzv_bytes k1 = {"big", 3}, v1 = {big, sizeof(big)};
  struct rdzv_bytes k2 = {"cnt", 3};
  struct rdzv_request set = {
      .op = RDZV_OP_SET, .nkeys = 1, .keys = &k1, .nvals = 1, .vals = &v1};
  struct rdzv_request add = {
      .op = RDZV_OP_ADD, .a = 1, .nkeys = 1, .keys = &k2};
  struct reply rs = {0}, ra1 = {0}, ra2 = {0};
  assert_int_equal(rdzv_client_submit(c, &set, 30, on_reply, &rs), 0);
  assert_int_equal(rdzv_client_submit(c, &add, 30, on_reply, &ra1), 0);
  rdzv_client_run(c, 0.2); /* the node sends the first add up */
  assert_int_equal(rdzv_client_submit(c, &add, 30, on_reply, &ra2), 0);
  rdzv_client_run(c, 0.2); /* the second waits behind it */
  kill(root.pid, SIGCONT);
  assert_int_equal(rdzv_client_run(c, 30), 0);
  assert_true(rs.done && ra1.done && ra2.done);
  assert_true(rs.status < 0);      /* refused */
  assert_int_equal(ra1.status, 0); /* sent again, applied once */
  assert_int_equal(ra2.status, 0);
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(c, "cnt", &v, &n, 30), 0);
  assert_int_equal(n, 1);
  assert_memory_equal(v, "2", 1);
  rdzv_free(v);
  rdzv_client_destroy(c);
}

/* A mutating request that gets no answer before its deadline (the root
 * is stopped) says that its outcome is unknown; a read does not. */
static void test_deadline_outcome_unknown(void **state) {
  (void)state;
  rdzv_client_t *c = root_up(NULL, "unknown");
  kill(root.pid, SIGSTOP);
  int64_t out = 0;
  assert_int_equal(rdzv_store_add(c, "n", 1, &out, 0.5), RDZV_EDEADLINE);
  if (strstr(rdzv_client_last_error(c), "outcome is unknown") == NULL)
    fail_msg("add: %s", rdzv_client_last_error(c));
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(rdzv_store_get(c, "warm", &v, &n, 0.5), RDZV_EDEADLINE);
  assert_null(strstr(rdzv_client_last_error(c), "outcome"));
  kill(root.pid, SIGCONT);
  rdzv_client_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unreachable_parent_named, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_resend_after_reset, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deadline_outcome_unknown, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
