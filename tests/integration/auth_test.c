/* Per-job authentication with real processes (issue 14): a root with one
 * secret file per job (--secret-dir), a node of job A (--secret-file,
 * --job A), and a job of 32 ranks (rdzv-swarm, RDZV_SECRET_FILE) waiting
 * in a barrier while strangers try their luck; the barrier completes
 * afterwards with the 33rd member, so every refusal happened while the
 * job was running. Each stranger is refused with RDZV_EAUTH and a closed
 * connection, counted in stats:
 *   - no secret, a wrong secret, job B's valid secret used for job A, and
 *     job B's secret for job B at A's node (another job's client);
 *   - a replayed hello and proof (recorded from a valid exchange, sent
 *     again on a new connection);
 *   - malformed proofs and out-of-order frames;
 *   - a plain TCP forwarder on another port (any local user on a shared
 *     host) relaying to the node's real port;
 *   - a fake parent (a root without a secret, and one with another
 *     secret): the node refuses it and gives it nothing of the job, and
 *     its ranks' requests fail with RDZV_EAUTH naming it.
 * The challenge for a job the daemon has no secret of looks like one for
 * a job it serves (nothing revealed), and secrets never reach the logs or
 * stats. Invariant checked after each case: the daemons still serve, and
 * the accepted key written first is intact. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmocka.h>

#include "rdzv/rdzv.h"
#include "store/auth/auth.h"
#include "store/wire/wire.h"
#include "tests/integration/proc.h"

#define SECRET_A "job-A-secret-0123456789abcdef-0123456789"
#define SECRET_B "job-B-secret-fedcba9876543210-9876543210"
#define RANKS 32

static char dir[256], sdir[300], file_a[320], file_b[320], root_log[300],
    node_log[300];
static char root_tcp[64], node_tcp[64], node_unix[300];
static struct proc root, node, swarm;

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fputc('\n', f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(path, mode), 0);
}

/* A daemon with its stderr in log (so the test can read it). */
static int start_logged(struct proc *p, const char *name, const char *parent,
                        const char *const *extra, char *tcp, const char *log) {
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  int saved = dup(2);
  dup2(fd, 2);
  int rc = daemon_start(p, dir, name, parent, extra, tcp);
  dup2(saved, 2);
  close(saved);
  close(fd);
  return rc;
}

static rdzv_client_t *client(const char *addr, const char *job,
                             const char *secret) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  if (secret != NULL) {
    o.secret = (const uint8_t *)secret;
    o.secret_len = strlen(secret);
  }
  o.attempt_timeout_s = 5;
  rdzv_client_t *c = NULL;
  assert_int_equal(rdzv_client_create(&o, &c), 0);
  return c;
}

/* The counter at path of the daemon at addr, asked as job A proving
 * secret. */
static int64_t stat_with(const char *addr, const char *secret,
                         const char *path) {
  rdzv_client_t *c = client(addr, "A", secret);
  char *json = NULL;
  int rc = rdzv_store_stats(c, &json, 30);
  rdzv_client_destroy(c);
  if (rc != 0)
    return -1;
  int64_t v = stats_get(json, path);
  assert_null(strstr(json, SECRET_A)); /* never a secret in stats */
  rdzv_free(json);
  return v;
}

static int64_t auth_stat(const char *addr, const char *path) {
  return stat_with(addr, SECRET_A, path);
}

/* Polls until the counter reaches want (at most about 60 s). */
static int64_t auth_stat_reach(const char *addr, const char *path,
                               int64_t want) {
  int64_t v = -1;
  for (int i = 0; i < 600; i++) {
    v = auth_stat(addr, path);
    if (v >= want)
      break;
    usleep(100 * 1000);
  }
  return v;
}

/* The daemons still serve job A, and the first write is intact. */
static void assert_still_serving(void) {
  const char *addrs[] = {node_unix, node_tcp, root_tcp};
  for (size_t i = 0; i < 3; i++) {
    rdzv_client_t *c = client(addrs[i], "A", SECRET_A);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_store_get(c, "accepted", &v, &len, 30), 0);
    assert_string_equal((char *)v, "kept");
    rdzv_free(v);
    rdzv_client_destroy(c);
  }
}

static int setup(void **state) {
  (void)state;
  unsetenv("RDZV_SECRET_FILE");
  unsetenv("RDZV_SECRET");
  /* Not under TEST_TMPDIR: a Unix socket's path holds 107 bytes. */
  snprintf(dir, sizeof(dir), "/tmp/rdzv-auth.XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  snprintf(sdir, sizeof(sdir), "%s/secrets", dir);
  mkdir(sdir, 0700);
  snprintf(file_a, sizeof(file_a), "%s/A", sdir);
  snprintf(file_b, sizeof(file_b), "%s/B", sdir);
  write_file(file_a, SECRET_A, 0600);
  write_file(file_b, SECRET_B, 0600);
  snprintf(root_log, sizeof(root_log), "%s/root.log", dir);
  snprintf(node_log, sizeof(node_log), "%s/node.log", dir);
  char sd[400], sf[400];
  snprintf(sd, sizeof(sd), "--secret-dir=%s", sdir);
  snprintf(sf, sizeof(sf), "--secret-file=%s", file_a);
  const char *rx[] = {sd, "--log-level=1", NULL};
  if (start_logged(&root, "root", NULL, rx, root_tcp, root_log) < 0)
    return -1;
  const char *nx[] = {sf, "--job=A", "--log-level=1", NULL};
  if (start_logged(&node, "node", root_tcp, nx, node_tcp, node_log) < 0)
    return -1;
  daemon_unix_addr(dir, "node", node_unix, sizeof(node_unix));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int bad = proc_stop(&node) != 0;
  bad |= proc_stop(&root) != 0;
  rm_rf(dir);
  return bad ? -1 : 0;
}

/* ---- raw frames ------------------------------------------------------- */

/* The port of "HOST:PORT": what a proof over TCP is bound to. */
static uint16_t port_of(const char *hostport) {
  return (uint16_t)atoi(strrchr(hostport, ':') + 1);
}

static int raw_tcp(const char *hostport) {
  int port = atoi(strrchr(hostport, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

static void send_msg(int fd, const struct rdzv_msg *m, struct rdzv_buf *rec) {
  struct rdzv_buf b = {0};
  assert_int_equal(rdzv_msg_encode(m, &b), 0);
  assert_int_equal(send(fd, b.data, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
  if (rec != NULL) { /* what was sent, for a replay */
    assert_int_equal(rdzv_buf_reserve(rec, b.len), 0);
    memcpy(rec->data + rec->len, b.data, b.len);
    rec->len += b.len;
  }
  rdzv_buf_free(&b);
}

struct reader {
  int fd;
  struct rdzv_buf in;
  size_t off;
  int closed;
};

/* The next frame from the daemon into *m (pointing into r's buffer,
 * valid until the next call): 1, or 0 when it closed first (about 30 s
 * at most: a daemon that neither answers nor closes fails the test). */
static int next_frame(struct reader *r, struct rdzv_msg *m) {
  for (int i = 0; i < 3000; i++) {
    size_t used = 0;
    if (r->in.len > r->off &&
        rdzv_msg_decode(r->in.data + r->off, r->in.len - r->off, 1 << 20, m,
                        &used) == 0) {
      r->off += used;
      return 1;
    }
    if (r->closed)
      return 0;
    struct pollfd p = {r->fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0)
      continue;
    assert_int_equal(rdzv_buf_reserve(&r->in, 4096), 0);
    ssize_t n = recv(r->fd, r->in.data + r->in.len, r->in.cap - r->in.len, 0);
    if (n <= 0)
      r->closed = 1;
    else
      r->in.len += (size_t)n;
  }
  fail_msg("the daemon neither answered nor closed");
  return 0;
}

/* A hello of role (enum rdzv_peer_role) and incarnation b. */
static void send_hello_as(int fd, const char *job, const uint8_t *nonce,
                          uint32_t nonce_len, int role, uint64_t b,
                          struct rdzv_buf *rec) {
  struct rdzv_slice k[2] = {{(const uint8_t *)job, (uint32_t)strlen(job)},
                            {(const uint8_t *)"stranger", 8}};
  struct rdzv_slice v = {nonce, nonce_len};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_HELLO;
  m.req_id = 7;
  m.a = role;
  m.b = (int64_t)b;
  m.keys.n = 2;
  m.keys.v = k;
  m.vals.n = nonce != NULL ? 1 : 0;
  m.vals.v = &v;
  send_msg(fd, &m, rec);
}

static void send_hello(int fd, const char *job, const uint8_t *nonce,
                       uint32_t nonce_len, struct rdzv_buf *rec) {
  send_hello_as(fd, job, nonce, nonce_len, RDZV_ROLE_CLIENT, 0, rec);
}

static void send_auth(int fd, const uint8_t *proof, uint32_t n, uint16_t flags,
                      struct rdzv_buf *rec) {
  struct rdzv_slice v = {proof, n};
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = RDZV_MSG_AUTH;
  m.flags = flags;
  m.req_id = 8;
  m.vals.n = 1;
  m.vals.v = &v;
  send_msg(fd, &m, rec);
}

/* Reads the challenge: its nonce and proof into sn and sp. */
static void read_challenge(struct reader *r, uint8_t *sn, uint8_t *sp) {
  struct rdzv_msg m;
  struct rdzv_slice a, b;
  assert_int_equal(next_frame(r, &m), 1);
  assert_int_equal(m.type, RDZV_MSG_HELLO);
  assert_int_equal(m.status, 0);
  assert_int_equal(m.flags, RDZV_F_REPLY | RDZV_F_CHALLENGE);
  assert_int_equal(m.keys.n, 0); /* nothing of the daemon or the job */
  assert_int_equal(m.vals.n, 2);
  assert_int_equal(m.a, 0);
  assert_int_equal(m.b, 0);
  assert_int_equal(rdzv_items_get(&m.vals, 0, &a), 0);
  assert_int_equal(rdzv_items_get(&m.vals, 1, &b), 0);
  assert_int_equal(a.n, RDZV_AUTH_NONCE_BYTES);
  assert_int_equal(b.n, RDZV_AUTH_PROOF_BYTES);
  memcpy(sn, a.p, a.n);
  memcpy(sp, b.p, b.n);
}

/* Reads the challenge on r and answers it with job A's proof, the right
 * one for addr's port and the nonce cn of the hello sent. */
static void prove_a(struct reader *r, const char *addr, const uint8_t *cn) {
  uint8_t sn[32], sp[32], good[32];
  read_challenge(r, sn, sp);
  assert_int_equal(rdzv_auth_proof((const uint8_t *)SECRET_A, strlen(SECRET_A),
                                   RDZV_AUTH_CLIENT, (const uint8_t *)"A", 1,
                                   port_of(addr), cn, sn, good),
                   0);
  send_auth(r->fd, good, 32, 0, NULL);
}

/* The daemon answers with an ERROR frame of status want, then closes. */
static void expect_refused(struct reader *r, int want) {
  struct rdzv_msg m;
  assert_int_equal(next_frame(r, &m), 1);
  assert_int_equal(m.type, RDZV_MSG_ERROR);
  assert_int_equal(m.status, want);
  assert_int_equal(next_frame(r, &m), 0);
}

static void reader_free(struct reader *r) {
  close(r->fd);
  rdzv_buf_free(&r->in);
}

/* ---- the cases -------------------------------------------------------- */

static void test_job_starts(void **state) {
  (void)state;
  rdzv_client_t *c = client(node_unix, "A", SECRET_A);
  assert_int_equal(rdzv_store_set(c, "accepted", "kept", 4, 0, 30), 0);
  rdzv_client_destroy(c);
  /* 32 ranks (the swarm's clients read RDZV_SECRET_FILE) wait in a
   * barrier of 33 while the strangers come. */
  setenv("RDZV_SECRET_FILE", file_a, 1);
  char n[16], cnt[16];
  snprintf(n, sizeof(n), "%d", RANKS);
  snprintf(cnt, sizeof(cnt), "%d", RANKS + 1);
  char *argv[] = {
      "tools/rdzv-swarm", "--addrs", node_unix, "--job",  "A", "--clients", n,
      "--timeout",        "600",     "barrier", "b-auth", cnt, NULL};
  assert_int_equal(proc_start(&swarm, argv, 1), 0);
  unsetenv("RDZV_SECRET_FILE");
  /* Every rank is in (the node let 1 + RANKS peers in). */
  assert_true(auth_stat_reach(node_tcp, "auth.accepted", 1 + RANKS) >=
              1 + RANKS);
}

static void test_no_secret(void **state) {
  (void)state;
  int64_t before = auth_stat(node_tcp, "auth.no_nonce");
  const char *addrs[] = {node_unix, node_tcp, root_tcp};
  for (size_t i = 0; i < 3; i++) {
    rdzv_client_t *c = client(addrs[i], "A", NULL);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_store_get(c, "accepted", &v, &len, 30), RDZV_EAUTH);
    assert_non_null(strstr(rdzv_client_last_error(c), addrs[i]));
    rdzv_client_destroy(c);
  }
  assert_int_equal(auth_stat(node_tcp, "auth.no_nonce"), before + 2);
  assert_still_serving();
}

static void test_wrong_secret(void **state) {
  (void)state;
  /* The client checks the daemon's proof first: a daemon of job A cannot
   * prove a secret it does not hold, so the client refuses it; the daemon
   * counts the connection that left without a proof. */
  int64_t before = auth_stat(node_tcp, "auth.refused");
  rdzv_client_t *c = client(node_tcp, "A", "not-the-secret-of-job-A-at-all");
  assert_int_equal(rdzv_store_set(c, "x", "1", 1, 0, 30), RDZV_EAUTH);
  assert_non_null(strstr(rdzv_client_last_error(c), "could not prove"));
  rdzv_client_destroy(c);
  /* Job B's valid secret, used to join job A. */
  c = client(node_unix, "A", SECRET_B);
  assert_int_equal(rdzv_store_set(c, "x", "1", 1, 0, 30), RDZV_EAUTH);
  rdzv_client_destroy(c);
  assert_true(auth_stat_reach(node_tcp, "auth.refused", before + 2) >=
              before + 2);
  assert_still_serving();
}

static void test_other_jobs_client(void **state) {
  (void)state;
  /* Job B's client with job B's valid secret, at job A's node: refused
   * (the node holds no secret of B). At the root, which holds B's, it is
   * let in, and sees none of A's keys. */
  rdzv_client_t *c = client(node_tcp, "B", SECRET_B);
  assert_int_equal(rdzv_store_set(c, "x", "1", 1, 0, 30), RDZV_EAUTH);
  rdzv_client_destroy(c);
  c = client(root_tcp, "B", SECRET_B);
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, "accepted", &v, &len, 30), RDZV_ENOKEY);
  rdzv_client_destroy(c);
  assert_still_serving();
}

/* A raw stranger that knows the protocol but not the secret: its proof
 * (with job B's secret, or random bytes) is refused by the daemon. */
static void test_wrong_proof_raw(void **state) {
  (void)state;
  int64_t before = auth_stat(node_tcp, "auth.refused");
  uint8_t cn[32], sn[32], sp[32], proof[32];
  memset(cn, 0x11, sizeof(cn));
  struct reader r = {raw_tcp(node_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 32, NULL);
  read_challenge(&r, sn, sp);
  assert_int_equal(rdzv_auth_proof((const uint8_t *)SECRET_B, strlen(SECRET_B),
                                   RDZV_AUTH_CLIENT, (const uint8_t *)"A", 1,
                                   port_of(node_tcp), cn, sn, proof),
                   0);
  send_auth(r.fd, proof, 32, 0, NULL);
  expect_refused(&r, RDZV_EAUTH);
  reader_free(&r);
  assert_int_equal(auth_stat(node_tcp, "auth.refused"), before + 1);
  assert_still_serving();
}

/* A valid exchange, recorded and sent again on a new connection: the
 * daemon's new nonce makes the old proof wrong. */
static void test_replayed_hello(void **state) {
  (void)state;
  uint8_t cn[32], sn[32], sp[32], want[32], proof[32], sn2[32], sp2[32];
  struct rdzv_buf rec = {0};
  rdzv_auth_nonce(cn, sizeof(cn));
  struct reader r = {raw_tcp(node_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 32, &rec);
  read_challenge(&r, sn, sp);
  /* The daemon's proof is right for A's secret. */
  rdzv_auth_proof((const uint8_t *)SECRET_A, strlen(SECRET_A), RDZV_AUTH_SERVER,
                  (const uint8_t *)"A", 1, port_of(node_tcp), cn, sn, want);
  assert_memory_equal(want, sp, 32);
  rdzv_auth_proof((const uint8_t *)SECRET_A, strlen(SECRET_A), RDZV_AUTH_CLIENT,
                  (const uint8_t *)"A", 1, port_of(node_tcp), cn, sn, proof);
  send_auth(r.fd, proof, 32, 0, &rec);
  struct rdzv_msg m;
  assert_int_equal(next_frame(&r, &m), 1);
  assert_int_equal(m.type, RDZV_MSG_AUTH);
  assert_int_equal(m.status, 0); /* in: the hello reply's fields */
  assert_true(m.a > 0);
  reader_free(&r);
  int64_t before = auth_stat(node_tcp, "auth.refused");
  /* The replay: the same bytes, hello and proof, on a new connection. */
  struct reader r2 = {raw_tcp(node_tcp), {0}, 0, 0};
  assert_int_equal(send(r2.fd, rec.data, rec.len, MSG_NOSIGNAL),
                   (ssize_t)rec.len);
  read_challenge(&r2, sn2, sp2);
  assert_memory_not_equal(sn, sn2, 32); /* a fresh nonce */
  expect_refused(&r2, RDZV_EAUTH);
  reader_free(&r2);
  rdzv_buf_free(&rec);
  assert_int_equal(auth_stat(node_tcp, "auth.refused"), before + 1);
  assert_still_serving();
}

/* The challenge for a job the daemon has no secret of (at the node: B;
 * at the root: a job with no file) has the same shape as one for a job
 * it serves, and the refusal the same words: nothing is revealed. */
static void test_reveals_nothing(void **state) {
  (void)state;
  const char *addr[] = {node_tcp, node_tcp, root_tcp, root_tcp};
  const char *job[] = {"A", "B", "A", "no-such-job"};
  char text[4][512];
  for (int i = 0; i < 4; i++) {
    uint8_t cn[32], sn[32], sp[32], junk[32];
    memset(cn, 0x22, sizeof(cn));
    memset(junk, 0x33, sizeof(junk));
    struct reader r = {raw_tcp(addr[i]), {0}, 0, 0};
    send_hello(r.fd, job[i], cn, 32, NULL);
    read_challenge(&r, sn, sp);
    send_auth(r.fd, junk, 32, 0, NULL);
    struct rdzv_msg m;
    struct rdzv_slice t;
    assert_int_equal(next_frame(&r, &m), 1);
    assert_int_equal(m.type, RDZV_MSG_ERROR);
    assert_int_equal(m.status, RDZV_EAUTH);
    assert_int_equal(rdzv_items_get(&m.keys, 0, &t), 0);
    snprintf(text[i], sizeof(text[i]), "%.*s", (int)t.n, (const char *)t.p);
    assert_null(strstr(text[i], job[i][0] == 'n' ? "no-such" : "job B"));
    reader_free(&r);
  }
  for (int i = 1; i < 4; i++)
    assert_string_equal(text[i], text[0]);
  assert_still_serving();
}

/* Malformed or out-of-order frames around the hello: each a coded error
 * and a closed connection; the daemon serves on. */
static void test_malformed(void **state) {
  (void)state;
  uint8_t cn[32] = {1}, sn[32], sp[32], proof[32] = {2};
  struct reader r;
  /* A proof before any hello. */
  r = (struct reader){raw_tcp(node_tcp), {0}, 0, 0};
  send_auth(r.fd, proof, 32, 0, NULL);
  expect_refused(&r, RDZV_EHELLO);
  reader_free(&r);
  /* A nonce of 31 bytes. */
  r = (struct reader){raw_tcp(node_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 31, NULL);
  expect_refused(&r, RDZV_EAUTH);
  reader_free(&r);
  /* A proof of 31 bytes; one with the reply flag; a second hello. */
  for (int k = 0; k < 3; k++) {
    r = (struct reader){raw_tcp(node_tcp), {0}, 0, 0};
    send_hello(r.fd, "A", cn, 32, NULL);
    read_challenge(&r, sn, sp);
    if (k == 0)
      send_auth(r.fd, proof, 31, 0, NULL);
    else if (k == 1)
      send_auth(r.fd, proof, 32, RDZV_F_REPLY, NULL);
    else
      send_hello(r.fd, "A", cn, 32, NULL);
    /* (A frame flagged as a reply is a protocol error before anything.) */
    expect_refused(&r, k == 1 ? RDZV_EPROTO : RDZV_EAUTH);
    reader_free(&r);
  }
  /* A proof after the hello was accepted. */
  uint8_t good[32];
  r = (struct reader){raw_tcp(node_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 32, NULL);
  prove_a(&r, node_tcp, cn);
  struct rdzv_msg m;
  assert_int_equal(next_frame(&r, &m), 1);
  assert_int_equal(m.status, 0);
  send_auth(r.fd, good, 32, 0, NULL);
  expect_refused(&r, RDZV_EPROTO);
  reader_free(&r);
  assert_still_serving();
}

/* A fake parent: a root with no secret, then one with another secret.
 * The node refuses each (it asks no proof, or cannot give one), counts
 * it, and the job's request fails naming the parent, while the fake root
 * never hears a request of the job. */
static void test_fake_parent(void **state) {
  (void)state;
  struct proc fake, n2;
  char fake_tcp[64], n2_tcp[64], sf[400], log[300];
  snprintf(sf, sizeof(sf), "--secret-file=%s", file_a);
  for (int k = 0; k < 2; k++) {
    char fsf[400], bogus[300];
    snprintf(bogus, sizeof(bogus), "%s/bogus", dir);
    write_file(bogus, "a-secret-that-is-not-job-A-s-1234", 0600);
    snprintf(fsf, sizeof(fsf), "--secret-file=%s", bogus);
    const char *fx[] = {k == 0 ? "--log-level=0" : fsf, NULL};
    const char *fake_secret =
        k == 0 ? NULL : "a-secret-that-is-not-job-A-s-1234";
    assert_int_equal(daemon_start(&fake, dir, "fake", NULL, fx, fake_tcp), 0);
    snprintf(log, sizeof(log), "%s/n2.log", dir);
    const char *nx[] = {sf, "--job=A", "--upstream-timeout-ms=1500",
                        "--log-level=1", NULL};
    assert_int_equal(start_logged(&n2, "n2", fake_tcp, nx, n2_tcp, log), 0);
    rdzv_client_t *c = client(n2_tcp, "A", SECRET_A);
    /* Failed at once as an authentication failure, not after
     * --upstream-timeout-ms as "unreachable". */
    assert_int_equal(rdzv_store_set(c, "from-n2", "1", 1, 0, 60), RDZV_EAUTH);
    assert_non_null(strstr(rdzv_client_last_error(c), "do not share job A's"));
    assert_non_null(strstr(rdzv_client_last_error(c), fake_tcp));
    assert_non_null(strstr(rdzv_client_last_error(c), "secret"));
    rdzv_client_destroy(c);
    assert_true(auth_stat(n2_tcp, "auth.parent_refused") >= 1);
    /* The fake heard no request of the job. */
    assert_int_equal(stat_with(fake_tcp, fake_secret, "ops.set.received"), 0);
    assert_int_equal(stat_with(fake_tcp, fake_secret, "ops.join.received"), 0);
    assert_int_equal(proc_stop(&n2), 0);
    assert_int_equal(proc_stop(&fake), 0);
    char *text = NULL;
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    size_t cap = 0;
    ssize_t got = getdelim(&text, &cap, '\0', f);
    fclose(f);
    assert_true(got > 0);
    assert_non_null(strstr(text, "not trusted as this node's parent"));
    assert_null(strstr(text, SECRET_A));
    free(text);
  }
}

/* A fake parent that holds no secret and reaches nothing but the node
 * itself: it takes the node's hello (nonce Nc) and sends it back to the
 * node's own port; the node's challenge there (its nonce Ns and its
 * server proof over Nc, Ns) is exactly what the node, as a child, expects
 * from its parent, and the node's own answer (its client proof) is what
 * its server expects. The node must refuse the reflected hello (its own
 * nonce), so that the fake cannot be its parent and feed its ranks. */
struct get_result {
  char addr[320];
  int rc;
  char value[64];
};

static void *get_thread(void *arg) {
  struct get_result *g = arg;
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = g->addr;
  o.job_id = "A";
  o.secret = (const uint8_t *)SECRET_A;
  o.secret_len = strlen(SECRET_A);
  rdzv_client_t *c = NULL;
  g->rc = rdzv_client_create(&o, &c);
  if (g->rc != 0)
    return NULL;
  void *v = NULL;
  size_t len = 0;
  g->rc = rdzv_store_get(c, "nccl-id", &v, &len, 120);
  if (g->rc == 0)
    snprintf(g->value, sizeof(g->value), "%.*s", (int)len, (char *)v);
  rdzv_free(v);
  rdzv_client_destroy(c);
  return NULL;
}

static void send_reply(int fd, uint8_t type, uint16_t flags, uint32_t req_id,
                       int64_t a, const struct rdzv_slice *keys, uint32_t nkeys,
                       const struct rdzv_slice *vals, uint32_t nvals) {
  struct rdzv_msg m;
  memset(&m, 0, sizeof(m));
  m.type = type;
  m.flags = (uint16_t)(RDZV_F_REPLY | flags);
  m.req_id = req_id;
  m.a = a;
  m.keys.n = nkeys;
  m.keys.v = keys;
  m.vals.n = nvals;
  m.vals.v = vals;
  send_msg(fd, &m, NULL);
}

static void test_reflected_hello(void **state) {
  (void)state;
  struct proc n3;
  char n3_tcp[64], sf[400], parent[64];
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(lfd >= 0);
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(lfd, 4), 0);
  assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
  snprintf(parent, sizeof(parent), "127.0.0.1:%d", ntohs(sa.sin_port));
  snprintf(sf, sizeof(sf), "--secret-file=%s", file_a);
  const char *nx[] = {sf, "--job=A", "--upstream-timeout-ms=3000",
                      "--log-level=1", NULL};
  assert_int_equal(daemon_start(&n3, dir, "n3", parent, nx, n3_tcp), 0);
  /* A rank of the node asks for a key: the node goes to its "parent". */
  struct get_result g;
  memset(&g, 0, sizeof(g));
  daemon_unix_addr(dir, "n3", g.addr, sizeof(g.addr));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, get_thread, &g), 0);
  struct reader up = {-1, {0}, 0, 0};
  struct rdzv_msg h, m;
  struct rdzv_slice cn;
  uint8_t nonce[32];
  for (;;) { /* the node's probe at its start (no job, no nonce) first */
    up.fd = accept(lfd, NULL, NULL);
    assert_true(up.fd >= 0);
    assert_int_equal(next_frame(&up, &h), 1);
    assert_int_equal(h.type, RDZV_MSG_HELLO);
    if (h.a != RDZV_ROLE_PROBE)
      break;
    struct rdzv_msg pr;
    memset(&pr, 0, sizeof(pr));
    pr.type = RDZV_MSG_HELLO;
    pr.flags = RDZV_F_REPLY;
    pr.req_id = h.req_id;
    send_msg(up.fd, &pr, NULL);
    reader_free(&up);
    up = (struct reader){-1, {0}, 0, 0};
  }
  assert_int_equal(rdzv_items_get(&h.vals, 0, &cn), 0);
  assert_int_equal(cn.n, 32);
  memcpy(nonce, cn.p, 32);
  uint32_t hello_id = h.req_id;
  /* The node's own hello, back to the node. */
  struct reader r = {raw_tcp(n3_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", nonce, 32, NULL);
  assert_int_equal(next_frame(&r, &m), 1);
  int challenged = m.type == RDZV_MSG_HELLO && (m.flags & RDZV_F_CHALLENGE);
  int fed = 0;
  if (challenged) { /* the rest of the attack: relay both ways */
    struct rdzv_slice v[2];
    uint8_t sn[32], sp[32], pc[32];
    assert_int_equal(rdzv_items_get(&m.vals, 0, &v[0]), 0);
    assert_int_equal(rdzv_items_get(&m.vals, 1, &v[1]), 0);
    memcpy(sn, v[0].p, 32);
    memcpy(sp, v[1].p, 32);
    struct rdzv_slice cv[2] = {{sn, 32}, {sp, 32}};
    send_reply(up.fd, RDZV_MSG_HELLO, RDZV_F_CHALLENGE, hello_id, 0, NULL, 0,
               cv, 2);
    struct rdzv_slice p;
    if (next_frame(&up, &m) == 1 && m.type == RDZV_MSG_AUTH &&
        rdzv_items_get(&m.vals, 0, &p) == 0 && p.n == 32) {
      uint32_t auth_id = m.req_id;
      memcpy(pc, p.p, 32);
      send_auth(r.fd, pc, 32, 0, NULL);
      uint8_t live[4] = {0x88, 0x13, 0, 0}; /* 5000 ms */
      struct rdzv_slice lk = {live, 4};
      send_reply(up.fd, RDZV_MSG_AUTH, 0, auth_id, 1 << 20, &lk, 1, NULL, 0);
      for (int i = 0; i < 20 && next_frame(&up, &m) == 1; i++) {
        if (m.type == RDZV_MSG_GET) {
          struct rdzv_slice fake = {(const uint8_t *)"FAKE", 4};
          send_reply(up.fd, RDZV_MSG_GET, 0, m.req_id, 0, NULL, 0, &fake, 1);
          fed = 1;
          break;
        }
        send_reply(up.fd, m.type, 0, m.req_id, 0, NULL, 0, NULL, 0);
      }
    }
  } else {
    assert_int_equal(m.type, RDZV_MSG_ERROR);
    assert_int_equal(m.status, RDZV_EAUTH);
  }
  /* The fake goes away: the node finds no parent, and its rank's request
   * fails naming it. */
  reader_free(&up);
  close(lfd);
  assert_int_equal(pthread_join(t, NULL), 0);
  reader_free(&r);
  if (fed || strcmp(g.value, "FAKE") == 0)
    fail_msg("a fake parent that reflected the node's own hello was trusted "
             "by the node: its rank read \"%s\"",
             g.value);
  assert_false(challenged);
  assert_int_equal(g.rc, RDZV_EUNREACHABLE);
  assert_true(auth_stat(n3_tcp, "auth.refused") >= 1);
  assert_int_equal(proc_stop(&n3), 0);
}

/* A peer that proved the secret and was then refused for another reason
 * (here a node hello carrying the daemon's own incarnation: "this node
 * itself"; a standby's redirect and another job's node go the same way)
 * is counted as accepted, not as a refused authentication. */
static void test_refused_after_proof(void **state) {
  (void)state;
  uint8_t cn[32];
  struct rdzv_msg m;
  rdzv_auth_nonce(cn, sizeof(cn));
  struct reader r = {raw_tcp(root_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 32, NULL);
  prove_a(&r, root_tcp, cn);
  assert_int_equal(next_frame(&r, &m), 1);
  assert_int_equal(m.status, 0);
  uint64_t inc = (uint64_t)m.b; /* the root's incarnation */
  assert_true(inc != 0);
  reader_free(&r);
  int64_t refused = auth_stat(root_tcp, "auth.refused");
  int64_t accepted = auth_stat(root_tcp, "auth.accepted");
  r = (struct reader){raw_tcp(root_tcp), {0}, 0, 0};
  send_hello_as(r.fd, "A", cn, 32, RDZV_ROLE_NODE, inc, NULL);
  prove_a(&r, root_tcp, cn);
  assert_int_equal(next_frame(&r, &m), 1);
  assert_int_equal(m.type, RDZV_MSG_AUTH);
  assert_int_equal(m.status, RDZV_EHELLO);
  assert_int_equal(next_frame(&r, &m), 0);
  reader_free(&r);
  /* (Each stats call is one more accepted peer: the node's hello, and
   * the two calls below.) */
  assert_int_equal(auth_stat(root_tcp, "auth.refused"), refused);
  assert_int_equal(auth_stat(root_tcp, "auth.accepted"), accepted + 3);
}

/* Before a peer is admitted it holds at most --max-hello-bytes of the
 * daemon's memory: a frame over it (whole or announced) is refused at
 * once, not buffered (up to --max-frame-bytes, 64 MiB, per connection) or
 * kept with the challenge until --hello-timeout-ms. */
static void test_big_hello(void **state) {
  (void)state;
  const char *addrs[] = {root_tcp, node_tcp};
  for (size_t i = 0; i < 2; i++) {
    uint8_t cn[32];
    rdzv_auth_nonce(cn, sizeof(cn));
    /* A hello whose body says 32 MiB; the first 1000 bytes of it sent. */
    struct rdzv_slice k[2] = {{(const uint8_t *)"A", 1},
                              {(const uint8_t *)"big", 3}};
    struct rdzv_slice v[2] = {{cn, 32}, {NULL, 32u << 20}};
    uint8_t *big = calloc(1, 32u << 20);
    assert_non_null(big);
    v[1].p = big;
    struct rdzv_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_HELLO;
    m.req_id = 9;
    m.keys.n = 2;
    m.keys.v = k;
    m.vals.n = 2;
    m.vals.v = v;
    struct rdzv_buf b = {0};
    assert_int_equal(rdzv_msg_encode(&m, &b), 0);
    free(big);
    struct reader r = {raw_tcp(addrs[i]), {0}, 0, 0};
    assert_int_equal(send(r.fd, b.data, 1000, MSG_NOSIGNAL), 1000);
    rdzv_buf_free(&b);
    expect_refused(&r, RDZV_EFRAME_TOO_BIG);
    reader_free(&r);
  }
  assert_still_serving();
}

/* A file of --secret-dir that is a FIFO (a mistake, or someone with
 * write access there): the daemon must not wait in open() for a writer
 * (its event loop would stop, and every job with it); the job is refused
 * as one without a secret is. */
static void test_fifo_secret(void **state) {
  (void)state;
  char fifo[400];
  snprintf(fifo, sizeof(fifo), "%s/F", sdir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  uint8_t cn[32], sn[32], sp[32], junk[32];
  memset(cn, 0x44, sizeof(cn));
  memset(junk, 0x55, sizeof(junk));
  struct reader r = {raw_tcp(root_tcp), {0}, 0, 0};
  send_hello(r.fd, "F", cn, 32, NULL);
  read_challenge(&r, sn, sp);
  send_auth(r.fd, junk, 32, 0, NULL);
  expect_refused(&r, RDZV_EAUTH);
  reader_free(&r);
  unlink(fifo);
  assert_still_serving();
}

/* A fake parent that asks no proof, in a thread (no cmocka asserts
 * there): it accepts until stop, answers each hello with a plain reply,
 * and a GET with "FAKE" (fed counts them). */
struct plain_parent {
  int lfd;
  volatile int stop;
  int fed;
  int nonceless; /* hellos without a nonce */
};

static int plain_read(int fd, struct rdzv_buf *in, size_t *off,
                      struct rdzv_msg *m, volatile int *stop) {
  while (!*stop) {
    size_t used = 0;
    if (in->len > *off && rdzv_msg_decode(in->data + *off, in->len - *off,
                                          1 << 20, m, &used) == 0) {
      *off += used;
      return 1;
    }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0)
      continue;
    if (rdzv_buf_reserve(in, 4096) < 0)
      return 0;
    ssize_t n = recv(fd, in->data + in->len, in->cap - in->len, 0);
    if (n <= 0)
      return 0;
    in->len += (size_t)n;
  }
  return 0;
}

static void plain_send(int fd, const struct rdzv_msg *m) {
  struct rdzv_buf b = {0};
  if (rdzv_msg_encode(m, &b) == 0)
    (void)send(fd, b.data, b.len, MSG_NOSIGNAL);
  rdzv_buf_free(&b);
}

static void *plain_parent_thread(void *arg) {
  struct plain_parent *pp = arg;
  while (!pp->stop) {
    struct pollfd p = {pp->lfd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0)
      continue;
    int fd = accept(pp->lfd, NULL, NULL);
    if (fd < 0)
      continue;
    struct rdzv_buf in = {0};
    size_t off = 0;
    struct rdzv_msg m, r;
    uint8_t live[4] = {0x88, 0x13, 0, 0};
    struct rdzv_slice lk = {live, 4}, fake = {(const uint8_t *)"FAKE", 4};
    if (plain_read(fd, &in, &off, &m, &pp->stop) && m.type == RDZV_MSG_HELLO) {
      if (m.vals.n == 0 && m.a != RDZV_ROLE_PROBE) /* a probe has none */
        pp->nonceless++;
      memset(&r, 0, sizeof(r));
      r.type = RDZV_MSG_HELLO;
      r.flags = RDZV_F_REPLY;
      r.req_id = m.req_id;
      r.a = 1 << 20;
      r.b = 777;
      r.keys.n = 1;
      r.keys.v = &lk;
      plain_send(fd, &r);
      while (plain_read(fd, &in, &off, &m, &pp->stop)) {
        memset(&r, 0, sizeof(r));
        r.type = m.type;
        r.flags = RDZV_F_REPLY;
        r.req_id = m.req_id;
        if (m.type == RDZV_MSG_GET) {
          r.vals.n = 1;
          r.vals.v = &fake;
          pp->fed++;
        }
        plain_send(fd, &r);
      }
    }
    rdzv_buf_free(&in);
    close(fd);
  }
  return NULL;
}

/* A node with --secret-dir whose file of the job goes (the job's Secret
 * deleted, the file made unreadable) while its ranks are in, and whose
 * parent is then replaced by one that asks no proof: the node must not
 * take it (it can check no parent), and its rank gets no value of it. */
static void test_secret_gone_parent(void **state) {
  (void)state;
  char ndir[320], nfile[340], nsd[400], n4_tcp[64];
  snprintf(ndir, sizeof(ndir), "%s/n4-secrets", dir);
  assert_int_equal(mkdir(ndir, 0700), 0);
  snprintf(nfile, sizeof(nfile), "%s/A", ndir);
  write_file(nfile, SECRET_A, 0600);
  struct plain_parent pp;
  memset(&pp, 0, sizeof(pp));
  pp.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(pp.lfd >= 0);
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(pp.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(pp.lfd, 8), 0);
  assert_int_equal(getsockname(pp.lfd, (struct sockaddr *)&sa, &sl), 0);
  char parent[64];
  snprintf(parent, sizeof(parent), "127.0.0.1:%d", ntohs(sa.sin_port));
  snprintf(nsd, sizeof(nsd), "--secret-dir=%s", ndir);
  struct proc n4;
  const char *nx[] = {nsd, "--upstream-timeout-ms=3000", "--log-level=1", NULL};
  assert_int_equal(daemon_start(&n4, dir, "n4", parent, nx, n4_tcp), 0);
  /* A rank proves the secret while the file is there. */
  uint8_t cn[32];
  struct rdzv_msg m;
  rdzv_auth_nonce(cn, sizeof(cn));
  struct reader r = {raw_tcp(n4_tcp), {0}, 0, 0};
  send_hello(r.fd, "A", cn, 32, NULL);
  prove_a(&r, n4_tcp, cn);
  assert_int_equal(next_frame(&r, &m), 1);
  assert_int_equal(m.status, 0);
  /* The file goes; the fake answers from now on. */
  assert_int_equal(unlink(nfile), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, plain_parent_thread, &pp), 0);
  struct rdzv_slice k = {(const uint8_t *)"nccl-id", 7};
  struct rdzv_msg q;
  memset(&q, 0, sizeof(q));
  q.type = RDZV_MSG_GET;
  q.req_id = 11;
  q.keys.n = 1;
  q.keys.v = &k;
  send_msg(r.fd, &q, NULL);
  assert_int_equal(next_frame(&r, &m), 1);
  int status = m.status;
  char got[16] = "";
  struct rdzv_slice v;
  if (rdzv_items_get(&m.vals, 0, &v) == 0)
    snprintf(got, sizeof(got), "%.*s", (int)v.n, (const char *)v.p);
  pp.stop = 1;
  assert_int_equal(pthread_join(t, NULL), 0);
  close(pp.lfd);
  reader_free(&r);
  if (pp.fed > 0 || strcmp(got, "FAKE") == 0)
    fail_msg("a node whose job secret file went took a parent that asked "
             "no proof (%d hellos without a nonce): its rank read \"%s\"",
             pp.nonceless, got);
  assert_int_equal(pp.nonceless, 0);
  /* The node can check no parent: its rank's request fails at once as a
   * secret the parent does not share would. */
  assert_int_equal(status, RDZV_EAUTH);
  assert_int_equal(proc_stop(&n4), 0);
  rm_rf(ndir);
}

/* ---- a forwarder on another port ---------------------------------------- */

/* Relays one connection's bytes both ways between a and b until either
 * side closes. */
static void relay_pair(int a, int b) {
  struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  char buf[65536];
  for (;;) {
    if (poll(p, 2, -1) < 0)
      return;
    for (int i = 0; i < 2; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
      if (n <= 0 || send(p[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
        return;
    }
  }
}

/* A plain TCP forwarder (what any local user can run on a free port of a
 * parent's range on a shared host): listens on 127.0.0.1, relays each
 * connection to target. Returns its pid; its port in *port. */
static pid_t start_forwarder(const char *target, int *port) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(ls >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(ls, 64), 0);
  socklen_t sl = sizeof(sa);
  assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
  *port = ntohs(sa.sin_port);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGCHLD, SIG_IGN); /* no zombies of the relays */
    for (;;) {
      int c = accept(ls, NULL, NULL);
      if (c < 0)
        continue;
      if (fork() == 0) {
        int t = raw_tcp(target);
        relay_pair(c, t);
        _exit(0);
      }
      close(c);
    }
  }
  close(ls);
  return pid;
}

/* A forwarder on another port that relays to a daemon's real port cannot
 * pass the exchange through: the proofs are bound to the port each end
 * sees (the one dialed, the one listened on). A client that dials it is
 * refused with RDZV_EAUTH and learns nothing; a node whose --parent puts
 * it first passes over it to the next address and serves its ranks. */
static void test_forwarder(void **state) {
  (void)state;
  int fport = 0;
  pid_t fw = start_forwarder(node_tcp, &fport);
  char faddr[64];
  snprintf(faddr, sizeof(faddr), "127.0.0.1:%d", fport);
  rdzv_client_t *c = client(faddr, "A", SECRET_A);
  void *v = NULL;
  size_t len = 0;
  assert_int_equal(rdzv_store_get(c, "accepted", &v, &len, 30), RDZV_EAUTH);
  assert_non_null(strstr(rdzv_client_last_error(c), "could not prove"));
  rdzv_client_destroy(c);
  /* A node whose parent list starts with the forwarder (a port of its
   * parent's range another user took), then the real root. */
  struct proc n6;
  char n6_tcp[64], sf[400], par[200];
  snprintf(sf, sizeof(sf), "--secret-file=%s", file_a);
  snprintf(par, sizeof(par), "--parent=%s,%s", faddr, root_tcp);
  const char *nx[] = {sf, "--job=A", par, NULL};
  assert_int_equal(daemon_start(&n6, dir, "n6", root_tcp, nx, n6_tcp), 0);
  c = client(n6_tcp, "A", SECRET_A);
  assert_int_equal(rdzv_store_get(c, "accepted", &v, &len, 60), 0);
  assert_string_equal((char *)v, "kept");
  rdzv_free(v);
  rdzv_client_destroy(c);
  assert_true(auth_stat(n6_tcp, "auth.parent_refused") >= 1);
  assert_int_equal(proc_stop(&n6), 0);
  kill(fw, SIGKILL);
  waitpid(fw, NULL, 0);
  assert_still_serving();
}

static void test_job_completes(void **state) {
  (void)state;
  rdzv_client_t *c = client(node_unix, "A", SECRET_A);
  assert_int_equal(rdzv_store_barrier(c, "b-auth", RANKS, RANKS + 1, 300), 0);
  rdzv_client_destroy(c);
  char *out = proc_read_all(&swarm);
  assert_int_equal(proc_wait(&swarm), 0);
  char want[64];
  snprintf(want, sizeof(want), "barrier ok %d", RANKS);
  assert_non_null(strstr(out, want));
  free(out);
  assert_still_serving();
  /* Every peer that got in proved the secret; the logs hold no secret. */
  assert_true(auth_stat(node_tcp, "auth.accepted") >= RANKS);
  const char *logs[] = {root_log, node_log};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(logs[i], "r");
    assert_non_null(f);
    char *text = NULL;
    size_t cap = 0;
    ssize_t got = getdelim(&text, &cap, '\0', f);
    fclose(f);
    if (got > 0) {
      assert_null(strstr(text, SECRET_A));
      assert_null(strstr(text, SECRET_B));
    }
    free(text);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_job_starts),
      cmocka_unit_test(test_no_secret),
      cmocka_unit_test(test_wrong_secret),
      cmocka_unit_test(test_other_jobs_client),
      cmocka_unit_test(test_wrong_proof_raw),
      cmocka_unit_test(test_replayed_hello),
      cmocka_unit_test(test_reveals_nothing),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_fake_parent),
      cmocka_unit_test(test_reflected_hello),
      cmocka_unit_test(test_refused_after_proof),
      cmocka_unit_test(test_big_hello),
      cmocka_unit_test(test_fifo_secret),
      cmocka_unit_test(test_secret_gone_parent),
      cmocka_unit_test(test_forwarder),
      cmocka_unit_test(test_job_completes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
