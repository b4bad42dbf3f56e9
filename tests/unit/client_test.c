/* Unit tests of librdzv (store/client/) against the
 * FAKE SERVER in fake_server.c, a forked child on a Unix socket and TCP.
 *
 * Every test checks at teardown that the process holds exactly the file
 * descriptors it held before. No assertion depends on wall-clock time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <poll.h>

#include "fake_server.h"
#include "rdzv/rdzv.h"

#define JOB "job1"
#define LONG_S 60.0 /* a deadline never reached in a passing run */

struct fx {
  int fds_before;
  char dir[64];
  struct fake_server srv;
  int srv_up;
  rdzv_client_t *c;
};

static int fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int n = 0;

  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.')
      n++;
  }
  closedir(d);
  return n;
}

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof(*f));

  if (f == NULL)
    return -1;
  f->fds_before = fd_count();
  snprintf(f->dir, sizeof(f->dir), "/tmp/rdzvct.XXXXXX");
  if (mkdtemp(f->dir) == NULL)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  int fds;

  rdzv_client_destroy(f->c);
  if (f->srv_up)
    fake_server_stop(&f->srv);
  rmdir(f->dir);
  fds = fd_count();
  if (fds != f->fds_before) {
    fprintf(stderr, "leaked fds: %d before, %d after\n", f->fds_before, fds);
    free(f);
    return -1;
  }
  free(f);
  return 0;
}

static void start_server(struct fx *f, int delay_ms, int wait_mode) {
  struct fake_server_opts o = {f->dir, JOB, delay_ms, wait_mode};

  assert_int_equal(fake_server_start(&f->srv, &o), 0);
  f->srv_up = 1;
}

static rdzv_client_t *make_client(const char *addr, const char *job) {
  struct rdzv_client_opts o;
  rdzv_client_t *c = NULL;

  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  o.name = "client_test";
  o.backoff_initial_s = 0.002;
  o.backoff_max_s = 0.05;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

static void check_get(rdzv_client_t *c, const char *key, const char *want) {
  void *v = NULL;
  size_t n = 0;

  assert_int_equal(rdzv_store_get(c, key, &v, &n, LONG_S), 0);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(v, want, n);
  assert_int_equal(((char *)v)[n], '\0');
  rdzv_free(v);
}

/* ---- async helpers ------------------------------------------------------ */

struct rec {
  int calls;
  int status;
  char val[64];
  char keys[128];
};

static void rec_cb(rdzv_client_t *c, const struct rdzv_result *res, void *arg) {
  struct rec *r = arg;
  size_t i;
  size_t used = 0;

  (void)c;
  r->calls++;
  r->status = res->status;
  if (res->nvals > 0)
    snprintf(r->val, sizeof(r->val), "%.*s", (int)res->vals[0].len,
             (const char *)res->vals[0].data);
  for (i = 0; i < res->nkeys && used < sizeof(r->keys); i++)
    used += (size_t)snprintf(r->keys + used, sizeof(r->keys) - used, "%s%.*s",
                             i ? "," : "", (int)res->keys[i].len,
                             (const char *)res->keys[i].data);
}

static void submit1(rdzv_client_t *c, enum rdzv_op op, const char *key,
                    const char *val, double t, struct rec *r) {
  struct rdzv_bytes k = {key, strlen(key)};
  struct rdzv_bytes v = {val, val != NULL ? strlen(val) : 0};
  struct rdzv_request req = {.op = op, .nkeys = 1, .keys = &k};

  if (val != NULL) {
    req.nvals = 1;
    req.vals = &v;
  }
  assert_int_equal(rdzv_client_submit(c, &req, t, rec_cb, r), 0);
}

/* ---- tests -------------------------------------------------------------- */

static void test_create_args(void **state) {
  static const char *const bad[] = {
      "",        "unix:",   "unix:@",     "tcp:",     "host",
      "host:",   "host:0",  "host:65536", "host:12x", "::1:80",
      "[::1:80", "[::1]80", "[]:80",      ":80",      "tcp:h:-1",
  };
  static const char *const good[] = {
      "unix:/tmp/x.sock", "unix:@abstract", "tcp:localhost:1",
      "127.0.0.1:5000",   "[::1]:80",       "tcp:[fe80::1]:65535",
  };
  struct rdzv_client_opts o;
  rdzv_client_t *c = (rdzv_client_t *)&o;
  char job[300];
  size_t i;

  (void)state;
  rdzv_client_opts_init(&o);
  o.addr = "unix:/tmp/x.sock";
  o.job_id = "j";
  assert_int_equal(rdzv_client_create(NULL, &c), -EINVAL);
  assert_int_equal(rdzv_client_create(&o, NULL), -EINVAL);
  o.size = 8;
  assert_int_equal(rdzv_client_create(&o, &c), -EINVAL);
  assert_null(c);
  rdzv_client_opts_init(&o);
  o.addr = "unix:/tmp/x.sock";
  o.version = 99;
  assert_int_equal(rdzv_client_create(&o, &c), -EINVAL);
  o.version = RDZV_CLIENT_OPTS_VERSION;
  o.job_id = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), RDZV_EJOB_ID_MISSING);
  o.job_id = "";
  assert_int_equal(rdzv_client_create(&o, &c), RDZV_EJOB_ID_MISSING);
  memset(job, 'j', sizeof(job));
  job[256] = '\0';
  o.job_id = job;
  assert_int_equal(rdzv_client_create(&o, &c), RDZV_EJOB_ID_MISSING);
  job[255] = '\0';
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  assert_string_equal(rdzv_client_last_error(c), "");
  assert_int_equal(rdzv_client_fd(c), -1);
  rdzv_client_destroy(c);
  o.job_id = "j";
  o.backoff_initial_s = -1;
  assert_int_equal(rdzv_client_create(&o, &c), -EINVAL);
  o.backoff_initial_s = NAN;
  assert_int_equal(rdzv_client_create(&o, &c), -EINVAL);
  o.backoff_initial_s = 0.01;
  o.addr = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), RDZV_EBAD_ADDR);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    o.addr = bad[i];
    if (rdzv_client_create(&o, &c) != RDZV_EBAD_ADDR)
      fail_msg("address \"%s\" accepted", bad[i]);
  }
  for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    o.addr = good[i];
    if (rdzv_client_create(&o, &c) != 0)
      fail_msg("address \"%s\" refused", good[i]);
    rdzv_client_destroy(c);
  }
  rdzv_client_destroy(NULL);
}

static void test_submit_args(void **state) {
  struct fx *f = *state;
  struct rdzv_bytes k[2] = {{"a", 1}, {"b", 1}};
  struct rdzv_bytes empty = {"", 0};
  struct rdzv_request req = {.op = RDZV_OP_GET, .nkeys = 2, .keys = k};
  struct rec r = {0};

  f->c = make_client("unix:/nonexistent/x.sock", JOB);
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, rec_cb, &r), -EINVAL);
  req.nkeys = 1;
  req.op = RDZV_OP_DELETE; /* WRITE_ONCE means nothing to a delete */
  req.flags = RDZV_STORE_WRITE_ONCE;
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, rec_cb, &r), -EINVAL);
  req.flags = 0x80; /* no such flag */
  req.op = RDZV_OP_GET;
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, rec_cb, &r), -EINVAL);
  req.flags = 0;
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, NULL, &r), -EINVAL);
  assert_int_equal(rdzv_client_submit(f->c, NULL, 1, rec_cb, &r), -EINVAL);
  assert_int_equal(rdzv_client_submit(f->c, &req, NAN, rec_cb, &r), -EINVAL);
  req.keys = &empty;
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, rec_cb, &r), -EINVAL);
  req.op = (enum rdzv_op)15;
  assert_int_equal(rdzv_client_submit(f->c, &req, 1, rec_cb, &r), -EINVAL);
  assert_int_equal(rdzv_store_set(f->c, "", "v", 1, 0, 1), -EINVAL);
  assert_int_equal(rdzv_store_set(f->c, NULL, "v", 1, 0, 1), -EINVAL);
  assert_int_equal(rdzv_store_wait(f->c, NULL, 1, 1), -EINVAL);
  assert_int_equal(rdzv_client_pending(f->c), 0);
  assert_int_equal(r.calls, 0);
}

/* The socket file appears only when the test says so: attempts before
 * fail with ENOENT and are retried. */
static void test_connect_waits_for_socket(void **state) {
  struct fx *f = *state;
  struct stat st;

  start_server(f, -1, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_client_connect(f->c, 0.1), RDZV_EDEADLINE);
  assert_non_null(strstr(rdzv_client_last_error(f->c), f->srv.path));
  assert_non_null(strstr(rdzv_client_last_error(f->c), "No such file"));
  assert_int_equal(stat(f->srv.path, &st), -1);
  fake_server_go(&f->srv);
  assert_int_equal(rdzv_client_connect(f->c, LONG_S), 0);
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S), 0);
  check_get(f->c, "k", "v");
}

/* The server listens 300 ms after the client starts; the first request is
 * queued until the hello has been accepted. */
static void test_connect_delayed_server(void **state) {
  struct fx *f = *state;

  start_server(f, 300, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_set(f->c, "k", "v1", 2, 0, LONG_S), 0);
  check_get(f->c, "k", "v1");
  assert_int_equal(rdzv_client_connect(f->c, LONG_S), 0);
}

static void test_refused_tcp_deadline(void **state) {
  struct fx *f = *state;
  struct sockaddr_in sin = {.sin_family = AF_INET};
  socklen_t len = sizeof(sin);
  char addr[64];
  char port[16];
  void *v = NULL;
  size_t n;
  /* A bound socket that never listens: connects to it are refused, and
   * no one else can take the port meanwhile. */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
  snprintf(port, sizeof(port), "%d", ntohs(sin.sin_port));
  snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%s", port);
  f->c = make_client(addr, JOB);
  assert_int_equal(rdzv_client_connect(f->c, 0.2), RDZV_EDEADLINE);
  assert_non_null(strstr(rdzv_client_last_error(f->c), addr));
  assert_non_null(strstr(rdzv_client_last_error(f->c), "refused"));
  assert_non_null(strstr(rdzv_client_last_error(f->c), "attempts"));
  assert_int_equal(rdzv_store_get(f->c, "k", &v, &n, 0.2), RDZV_EDEADLINE);
  assert_null(v);
  assert_non_null(strstr(rdzv_client_last_error(f->c), addr));
  assert_non_null(strstr(rdzv_client_last_error(f->c), "get"));
  close(fd);
}

static void test_hello_rejected(void **state) {
  struct fx *f = *state;
  struct rec r = {0};

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.tcp_addr, "other-job");
  assert_int_equal(rdzv_client_connect(f->c, LONG_S), RDZV_EJOB_MISMATCH);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "hello refused"));
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S),
                   RDZV_EJOB_MISMATCH);
  submit1(f->c, RDZV_OP_GET, "k", NULL, LONG_S, &r);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.status, RDZV_EJOB_MISMATCH);
}

static void set_get_on(const char *addr) {
  rdzv_client_t *c = make_client(addr, JOB);
  static const char bin[] = {'a', 0, 'b'};
  void *v;
  size_t n;

  assert_int_equal(rdzv_store_set(c, "k1", "v1", 2, 0, LONG_S), 0);
  check_get(c, "k1", "v1");
  assert_int_equal(rdzv_store_set(c, "k1", "v2", 2, 0, LONG_S), 0);
  check_get(c, "k1", "v2");
  assert_int_equal(rdzv_store_set(c, "empty", NULL, 0, 0, LONG_S), 0);
  check_get(c, "empty", "");
  assert_int_equal(rdzv_store_set(c, "bin", bin, 3, 0, LONG_S), 0);
  assert_int_equal(rdzv_store_get(c, "bin", &v, &n, LONG_S), 0);
  assert_int_equal(n, 3);
  assert_memory_equal(v, bin, 3);
  rdzv_free(v);
  rdzv_client_destroy(c);
}

static void test_set_get(void **state) {
  struct fx *f = *state;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  set_get_on(f->srv.unix_addr);
  set_get_on(f->srv.tcp_addr);
}

static void test_get_missing(void **state) {
  struct fx *f = *state;
  void *v = NULL;
  size_t n = 0;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_get(f->c, "nope", &v, &n, LONG_S), RDZV_ENOKEY);
  assert_null(v);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "nope"));
}

/* The server answers EDEADLINE at half the timeout with the keys still
 * missing: only those are named. */
static void test_wait_names_missing(void **state) {
  struct fx *f = *state;
  const char *keys[] = {"a", "b", "c"};

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_set(f->c, "a", "1", 1, 0, LONG_S), 0);
  assert_int_equal(rdzv_store_wait(f->c, keys, 1, LONG_S), 0);
  assert_int_equal(rdzv_store_wait(f->c, keys, 3, 3.0), RDZV_EDEADLINE);
  assert_string_equal(rdzv_client_last_error(f->c), "wait: missing keys: b, c");
}

/* A server that never answers: the local deadline names every key. */
static void test_wait_local_deadline(void **state) {
  struct fx *f = *state;
  const char *keys[] = {"a", "x"};

  start_server(f, 0, FAKE_WAIT_NEVER);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_set(f->c, "a", "1", 1, 0, LONG_S), 0);
  assert_int_equal(rdzv_store_wait(f->c, keys, 2, 0.1), RDZV_EDEADLINE);
  assert_string_equal(rdzv_client_last_error(f->c), "wait: missing keys: a, x");
}

/* A server that stops (SIGSTOP: its socket stays open, nothing answers,
 * not even a heartbeat): a wait with a long deadline fails with
 * RDZV_ESILENT after liveness_timeout_s, naming the address; a server
 * that answers heartbeats but holds the wait keeps it waiting. */
static void test_silent_server(void **state) {
  struct fx *f = *state;
  struct rdzv_client_opts o;
  const char *keys[] = {"x"};

  start_server(f, 0, FAKE_WAIT_NEVER);
  rdzv_client_opts_init(&o);
  o.addr = f->srv.unix_addr;
  o.job_id = JOB;
  o.heartbeat_s = 0.05;
  o.liveness_timeout_s = 0.3;
  assert_int_equal(rdzv_client_create(&o, &f->c), 0);
  /* Pinged through several liveness timeouts: still only the deadline. */
  assert_int_equal(rdzv_store_wait(f->c, keys, 1, 1.0), RDZV_EDEADLINE);
  kill(f->srv.pid, SIGSTOP);
  assert_int_equal(rdzv_store_wait(f->c, keys, 1, LONG_S), RDZV_ESILENT);
  if (strstr(rdzv_client_last_error(f->c), f->srv.unix_addr) == NULL)
    fail_msg("names no address: %s", rdzv_client_last_error(f->c));
  kill(f->srv.pid, SIGCONT);
}

static void test_wait_answered_late(void **state) {
  struct fx *f = *state;
  struct rec w = {0};
  struct rec s = {0};

  start_server(f, 0, FAKE_WAIT_NEVER);
  f->c = make_client(f->srv.tcp_addr, JOB);
  submit1(f->c, RDZV_OP_WAIT, "late", NULL, LONG_S, &w);
  submit1(f->c, RDZV_OP_SET, "late", "here", LONG_S, &s);
  assert_int_equal(rdzv_client_pending(f->c), 2);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, 0);
  assert_int_equal(w.calls, 1);
  assert_int_equal(w.status, 0);
}

static void test_connection_drop(void **state) {
  struct fx *f = *state;
  struct rec r = {0};

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S), 0);
  /* A mutation is sent again after 3 losses at most, a read after 200
   * (RDZV__MAX_RESENDS, RDZV__MAX_READ_RESENDS); then each fails. */
  submit1(f->c, RDZV_OP_SET, "drop", "x", LONG_S, &r);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.status, RDZV_ECONN_CLOSED);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "closed"));
  memset(&r, 0, sizeof(r));
  submit1(f->c, RDZV_OP_GET, "drop", NULL, LONG_S, &r);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.status, RDZV_ECONN_CLOSED);
  /* The next request reconnects. */
  check_get(f->c, "k", "v");
  assert_int_equal(rdzv_store_set(f->c, "k2", "w", 1, 0, LONG_S), 0);
  check_get(f->c, "k2", "w");
}

static void test_error_frame(void **state) {
  struct fx *f = *state;
  void *v = NULL;
  size_t n;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.tcp_addr, JOB);
  assert_int_equal(rdzv_store_get(f->c, "error", &v, &n, LONG_S),
                   RDZV_EKEY_TOO_LONG);
  assert_non_null(
      strstr(rdzv_client_last_error(f->c), "fake error: key too long"));
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S), 0);
}

static void test_bad_frames(void **state) {
  struct fx *f = *state;
  void *v = NULL;
  size_t n;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_get(f->c, "garbage", &v, &n, LONG_S),
                   RDZV_EPROTO);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "bad frame"));
  assert_int_equal(rdzv_store_get(f->c, "huge", &v, &n, LONG_S),
                   RDZV_EFRAME_TOO_BIG);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "max_frame_bytes"));
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S), 0);
  check_get(f->c, "k", "v");
}

/* A peer that completes the TCP handshake (the kernel does) but never
 * accepts or answers: each attempt ends at attempt_timeout_s. */
static void test_hello_timeout(void **state) {
  struct fx *f = *state;
  struct sockaddr_in sin = {.sin_family = AF_INET};
  socklen_t len = sizeof(sin);
  struct rdzv_client_opts o;
  char addr[64];
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
  assert_int_equal(listen(fd, 16), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sin.sin_port));
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = JOB;
  o.attempt_timeout_s = 0.02;
  assert_int_equal(rdzv_client_create(&o, &f->c), 0);
  assert_int_equal(rdzv_client_connect(f->c, 0.2), RDZV_EDEADLINE);
  assert_non_null(strstr(rdzv_client_last_error(f->c), "no hello reply"));
  rdzv_client_destroy(f->c);
  f->c = NULL;
  close(fd);
}

#define BIG_N 40
#define BIG_LEN (100 * 1024)

/* The server drops the connection after the first request while megabytes
 * of later requests wait behind it: those the kernel had taken fail with
 * RDZV_ECONN_CLOSED, the rest stay queued and go out on the next
 * connection. */
static void test_drop_keeps_unsent(void **state) {
  struct fx *f = *state;
  static struct rec r[BIG_N];
  struct rec d = {0};
  char *big = malloc(BIG_LEN + 1);
  char key[32];
  void *v;
  size_t n;
  int i;

  memset(r, 0, sizeof(r));
  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_client_connect(f->c, LONG_S), 0);
  submit1(f->c, RDZV_OP_SET, "drop", "x", LONG_S, &d);
  memset(big, 'x', BIG_LEN);
  big[BIG_LEN] = '\0';
  for (i = 0; i < BIG_N; i++) {
    snprintf(key, sizeof(key), "big-%d", i);
    big[0] = (char)('A' + i % 26);
    submit1(f->c, RDZV_OP_SET, key, big, LONG_S, &r[i]);
  }
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(d.calls, 1);
  assert_int_equal(d.status, RDZV_ECONN_CLOSED);
  for (i = 0; i < BIG_N; i++) {
    assert_int_equal(r[i].calls, 1);
    assert_true(r[i].status == 0 || r[i].status == RDZV_ECONN_CLOSED);
  }
  assert_int_equal(r[BIG_N - 1].status, 0);
  for (i = 0; i < BIG_N; i++) {
    if (r[i].status != 0)
      continue;
    snprintf(key, sizeof(key), "big-%d", i);
    assert_int_equal(rdzv_store_get(f->c, key, &v, &n, LONG_S), 0);
    assert_int_equal(n, BIG_LEN);
    assert_int_equal(((char *)v)[0], 'A' + i % 26);
    rdzv_free(v);
  }
  free(big);
}

#define MANY 1000

struct many {
  int idx;
  int calls;
  int ok;
};

static void many_cb(rdzv_client_t *c, const struct rdzv_result *res,
                    void *arg) {
  struct many *m = arg;
  char want[32];

  (void)c;
  m->calls++;
  if (m->idx < 0) {
    m->ok = res->status == 0;
    return;
  }
  snprintf(want, sizeof(want), "value-%d", m->idx);
  m->ok = res->status == 0 && res->nvals == 1 &&
          res->vals[0].len == strlen(want) &&
          memcmp(res->vals[0].data, want, strlen(want)) == 0;
}

static void test_many_outstanding(void **state) {
  struct fx *f = *state;
  static struct many sets[MANY], gets[MANY];
  char key[32], val[32];
  struct rdzv_bytes k, v;
  struct rdzv_request req;
  int i;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  for (i = 0; i < MANY; i++) {
    snprintf(key, sizeof(key), "key-%d", i);
    snprintf(val, sizeof(val), "value-%d", i);
    k = (struct rdzv_bytes){key, strlen(key)};
    v = (struct rdzv_bytes){val, strlen(val)};
    req = (struct rdzv_request){
        .op = RDZV_OP_SET, .nkeys = 1, .keys = &k, .nvals = 1, .vals = &v};
    sets[i] = (struct many){-1, 0, 0};
    assert_int_equal(rdzv_client_submit(f->c, &req, LONG_S, many_cb, &sets[i]),
                     0);
    req = (struct rdzv_request){.op = RDZV_OP_GET, .nkeys = 1, .keys = &k};
    gets[i] = (struct many){i, 0, 0};
    assert_int_equal(rdzv_client_submit(f->c, &req, LONG_S, many_cb, &gets[i]),
                     0);
  }
  assert_int_equal(rdzv_client_pending(f->c), 2 * MANY);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  for (i = 0; i < MANY; i++) {
    assert_int_equal(sets[i].calls, 1);
    assert_true(sets[i].ok);
    assert_int_equal(gets[i].calls, 1);
    if (!gets[i].ok)
      fail_msg("get %d: wrong value", i);
  }
}

struct nested {
  int calls;
  int get_rc, connect_rc, run_rc, process_rc;
  struct rec chained;
};

static void nested_cb(rdzv_client_t *c, const struct rdzv_result *res,
                      void *arg) {
  struct nested *n = arg;
  void *v = NULL;
  size_t len;

  (void)res;
  n->calls++;
  n->get_rc = rdzv_store_get(c, "k", &v, &len, LONG_S);
  n->connect_rc = rdzv_client_connect(c, LONG_S);
  n->run_rc = rdzv_client_run(c, LONG_S);
  n->process_rc = rdzv_client_process(c);
  rdzv_client_destroy(c); /* refused inside a callback */
  submit1(c, RDZV_OP_GET, "k", NULL, LONG_S, &n->chained);
}

static void test_blocking_in_callback(void **state) {
  struct fx *f = *state;
  struct nested n = {0};
  struct rdzv_bytes k = {"k", 1};
  struct rdzv_request req = {.op = RDZV_OP_GET, .nkeys = 1, .keys = &k};

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_set(f->c, "k", "v", 1, 0, LONG_S), 0);
  assert_int_equal(rdzv_client_submit(f->c, &req, LONG_S, nested_cb, &n), 0);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(n.calls, 1);
  assert_int_equal(n.get_rc, RDZV_EWOULDBLOCK_CB);
  assert_int_equal(n.connect_rc, RDZV_EWOULDBLOCK_CB);
  assert_int_equal(n.run_rc, RDZV_EWOULDBLOCK_CB);
  assert_int_equal(n.process_rc, RDZV_EWOULDBLOCK_CB);
  assert_int_equal(n.chained.calls, 1);
  assert_int_equal(n.chained.status, 0);
  assert_string_equal(n.chained.val, "v");
}

static void test_destroy_cancels(void **state) {
  struct fx *f = *state;
  struct rec r[8];
  rdzv_client_t *lonely;
  char key[32];
  int i;

  memset(r, 0, sizeof(r));
  start_server(f, 0, FAKE_WAIT_NEVER);
  f->c = make_client(f->srv.unix_addr, JOB);
  for (i = 0; i < 5; i++) {
    snprintf(key, sizeof(key), "never-%d", i);
    submit1(f->c, RDZV_OP_WAIT, key, NULL, LONG_S, &r[i]);
  }
  /* The waits go out and stay unanswered. */
  assert_int_equal(rdzv_client_run(f->c, 0.05), RDZV_EDEADLINE);
  for (i = 5; i < 8; i++)
    submit1(f->c, RDZV_OP_GET, "k", NULL, LONG_S, &r[i]);
  assert_int_equal(rdzv_client_pending(f->c), 8);
  rdzv_client_destroy(f->c);
  f->c = NULL;
  for (i = 0; i < 8; i++) {
    assert_int_equal(r[i].calls, 1);
    assert_int_equal(r[i].status, RDZV_ECANCELED);
  }
  /* Never connected at all. */
  memset(r, 0, sizeof(r));
  lonely = make_client("unix:/nonexistent/dir/x.sock", JOB);
  submit1(lonely, RDZV_OP_SET, "k", "v", LONG_S, &r[0]);
  submit1(lonely, RDZV_OP_GET, "k", NULL, LONG_S, &r[1]);
  assert_int_equal(rdzv_client_process(lonely), 0);
  rdzv_client_destroy(lonely);
  assert_int_equal(r[0].calls, 1);
  assert_int_equal(r[0].status, RDZV_ECANCELED);
  assert_int_equal(r[1].calls, 1);
  assert_int_equal(r[1].status, RDZV_ECANCELED);
}

static void test_store_ops(void **state) {
  struct fx *f = *state;
  const char *mk[] = {"m1", "m2"};
  const char *mk_missing[] = {"m1", "zz"};
  struct rdzv_value mv[2] = {{0, "x", 1}, {0, "yy", 2}};
  struct rdzv_value *out = NULL;
  struct rec other = {0};
  uint8_t contrib[9] = {1, 0, 0, 0, 0, 0, 0, 0, 'B'};
  struct rdzv_bytes gk = {"g", 1};
  struct rdzv_bytes gv = {contrib, sizeof(contrib)};
  struct rdzv_request greq = {.op = RDZV_OP_GATHER,
                              .b = 2,
                              .nkeys = 1,
                              .keys = &gk,
                              .nvals = 1,
                              .vals = &gv};
  int64_t a = 0;
  void *cur = NULL;
  size_t curlen = 0;
  int deleted = -1;
  char *json = NULL;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.unix_addr, JOB);
  assert_int_equal(rdzv_store_add(f->c, "ctr", 5, &a, LONG_S), 0);
  assert_int_equal(a, 5);
  assert_int_equal(rdzv_store_add(f->c, "ctr", -2, &a, LONG_S), 0);
  assert_int_equal(a, 3);
  assert_int_equal(
      rdzv_store_cas(f->c, "c", "", 0, "x", 1, &cur, &curlen, LONG_S), 0);
  assert_string_equal(cur, "x");
  rdzv_free(cur);
  assert_int_equal(
      rdzv_store_cas(f->c, "c", "q", 1, "y", 1, &cur, &curlen, LONG_S),
      RDZV_ECAS_FAILED);
  assert_int_equal(curlen, 1);
  assert_string_equal(cur, "x");
  rdzv_free(cur);
  assert_int_equal(rdzv_store_delete(f->c, "c", &deleted, LONG_S), 0);
  assert_int_equal(deleted, 1);
  assert_int_equal(rdzv_store_delete(f->c, "c", &deleted, LONG_S), 0);
  assert_int_equal(deleted, 0);
  assert_int_equal(rdzv_store_mset(f->c, mk, mv, 2, 0, LONG_S), 0);
  assert_int_equal(rdzv_store_mget(f->c, mk, 2, &out, LONG_S), 0);
  assert_string_equal(out[0].data, "x");
  assert_string_equal(out[1].data, "yy");
  rdzv_values_free(out, 2);
  assert_int_equal(rdzv_store_mget(f->c, mk_missing, 2, &out, LONG_S),
                   RDZV_ENOKEY);
  assert_null(out);
  assert_string_equal(rdzv_client_last_error(f->c), "mget: missing keys: zz");
  assert_int_equal(rdzv_store_append(f->c, "m1", "zz", 2, LONG_S), 0);
  check_get(f->c, "m1", "xzz");
  assert_int_equal(rdzv_store_num_keys(f->c, &a, LONG_S), 0);
  assert_int_equal(a, 3); /* ctr, m1, m2 */
  assert_int_equal(rdzv_store_barrier(f->c, "b", 0, 1, LONG_S), 0);
  assert_int_equal(rdzv_client_submit(f->c, &greq, LONG_S, rec_cb, &other), 0);
  assert_int_equal(rdzv_store_gather(f->c, "g", 0, 2, "A", 1, &out, LONG_S), 0);
  assert_int_equal(out[0].member, 0);
  assert_string_equal(out[0].data, "A");
  assert_int_equal(out[1].member, 1);
  assert_string_equal(out[1].data, "B");
  rdzv_values_free(out, 2);
  assert_int_equal(rdzv_client_run(f->c, LONG_S), 0);
  assert_int_equal(other.calls, 1);
  assert_int_equal(rdzv_store_stats(f->c, &json, LONG_S), 0);
  assert_string_equal(json, "{\"fake\":true}");
  rdzv_free(json);
}

/* Drives the core by hand, as an application with its own poll loop. */
static void test_poll_core(void **state) {
  struct fx *f = *state;
  struct rec s = {0};
  struct rec g = {0};
  struct pollfd p;

  start_server(f, 0, FAKE_WAIT_HALF_TIMEOUT);
  f->c = make_client(f->srv.tcp_addr, JOB);
  assert_int_equal(rdzv_client_fd(f->c), -1);
  submit1(f->c, RDZV_OP_SET, "pk", "pv", LONG_S, &s);
  submit1(f->c, RDZV_OP_GET, "pk", NULL, LONG_S, &g);
  assert_int_equal(rdzv_client_timeout_ms(f->c), 0);
  while (rdzv_client_pending(f->c) > 0) {
    p.fd = rdzv_client_fd(f->c);
    p.events = rdzv_client_events(f->c);
    p.revents = 0;
    if (p.fd >= 0)
      poll(&p, 1, rdzv_client_timeout_ms(f->c));
    else
      poll(NULL, 0, rdzv_client_timeout_ms(f->c));
    assert_int_equal(rdzv_client_process(f->c), 0);
  }
  assert_int_equal(s.status, 0);
  assert_int_equal(g.status, 0);
  assert_string_equal(g.val, "pv");
  assert_true(rdzv_client_fd(f->c) >= 0);
  assert_int_equal(rdzv_client_events(f->c), POLLIN);
  assert_int_equal(rdzv_client_timeout_ms(f->c), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
      T(test_create_args),
      T(test_submit_args),
      T(test_connect_waits_for_socket),
      T(test_connect_delayed_server),
      T(test_refused_tcp_deadline),
      T(test_hello_rejected),
      T(test_set_get),
      T(test_get_missing),
      T(test_wait_names_missing),
      T(test_wait_local_deadline),
      T(test_wait_answered_late),
      T(test_silent_server),
      T(test_connection_drop),
      T(test_error_frame),
      T(test_bad_frames),
      T(test_hello_timeout),
      T(test_drop_keeps_unsent),
      T(test_many_outstanding),
      T(test_blocking_in_callback),
      T(test_destroy_cancels),
      T(test_store_ops),
      T(test_poll_core),
#undef T
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
