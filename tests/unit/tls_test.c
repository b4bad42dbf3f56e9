/* store/tls: two sessions wired back to back in memory (no socket): the
 * handshake, plaintext both ways, what is held before the handshake ends,
 * who showed a certificate, and every refusal with its reason: another
 * CA, an expired certificate, a peer that speaks no TLS, settings that
 * cannot be loaded. Certificates come from tools/tls-certs.sh (openssl). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/stat.h>

#include "store/tls/tls.h"

static char dir[64];

/* DIR/name. */
static const char *path(const char *name) {
  static char buf[4][512];
  static int i;
  i = (i + 1) % 4;
  snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
  return buf[i];
}

static int setup(void **state) {
  char cmd[2048];
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/rdzv-tls-unit-XXXXXX");
  if (mkdtemp(dir) == NULL)
    return -1;
  /* a: the cluster; exp: a's CA, expired; c: another cluster; rank: a's
   * CA alone. */
  snprintf(cmd, sizeof(cmd),
           "tools/tls-certs.sh %s/a >/dev/null && "
           "tools/tls-certs.sh --ca-from %s/a --expired %s/exp >/dev/null && "
           "tools/tls-certs.sh %s/c >/dev/null && mkdir -p %s/rank && "
           "cp %s/a/ca.crt %s/rank/",
           dir, dir, dir, dir, dir, dir, dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  char cmd[512];
  (void)state;
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static rdzv_tls_cfg_t *cfg_of(const char *sub, bool need_cert) {
  struct rdzv_tls_files f = {.dir = path(sub)};
  char err[512] = "";
  rdzv_tls_cfg_t *c = NULL;
  int rc = rdzv_tls_cfg_new(&f, need_cert, err, sizeof(err), &c);
  if (rc != 0)
    fprintf(stderr, "cfg %s: %s\n", sub, err);
  assert_int_equal(rc, 0);
  return c;
}

/* Moves what each side has to send to the other, until neither has
 * anything; the plaintext each gets is appended to its buffer. Returns
 * the first failure (0: none): *who says which side failed. */
static int pump(rdzv_tls_t *cl, rdzv_tls_t *sv, struct rdzv_buf *to_cl,
                struct rdzv_buf *to_sv, const char **who) {
  for (int round = 0; round < 20; round++) {
    struct rdzv_buf b = {0};
    long n = rdzv_tls_take(cl, &b);
    assert_true(n >= 0);
    int rc = rdzv_tls_read(sv, b.data, b.len, to_sv);
    rdzv_buf_free(&b);
    if (rc != 0) {
      *who = "server";
      return rc;
    }
    long m = rdzv_tls_take(sv, &b);
    assert_true(m >= 0);
    rc = rdzv_tls_read(cl, b.data, b.len, to_cl);
    rdzv_buf_free(&b);
    if (rc != 0) {
      *who = "client";
      return rc;
    }
    if (n == 0 && m == 0 && rdzv_tls_pending(cl) == 0 &&
        rdzv_tls_pending(sv) == 0)
      return 0;
  }
  return 0;
}

static void test_handshake_and_data(void **state) {
  (void)state;
  rdzv_tls_cfg_t *a = cfg_of("a", true);
  rdzv_tls_t *cl = rdzv_tls_new(a, false), *sv = rdzv_tls_new(a, true);
  struct rdzv_buf to_cl = {0}, to_sv = {0};
  const char *who = "";
  assert_non_null(cl);
  assert_non_null(sv);
  /* Written before the handshake: held, then delivered in order. */
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"hello ", 6), 0);
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"daemon", 6), 0);
  assert_false(rdzv_tls_ready(cl));
  assert_int_equal(pump(cl, sv, &to_cl, &to_sv, &who), 0);
  assert_true(rdzv_tls_ready(cl));
  assert_true(rdzv_tls_ready(sv));
  assert_int_equal(to_sv.len, 12);
  assert_memory_equal(to_sv.data, "hello daemon", 12);
  /* Both showed a certificate of the CA. */
  assert_true(rdzv_tls_peer_verified(cl));
  assert_true(rdzv_tls_peer_verified(sv));
  /* A big message (several records) the other way. */
  size_t big = 100000;
  uint8_t *p = malloc(big);
  assert_non_null(p);
  for (size_t i = 0; i < big; i++)
    p[i] = (uint8_t)(i * 7);
  assert_int_equal(rdzv_tls_write(sv, p, big), 0);
  assert_int_equal(pump(cl, sv, &to_cl, &to_sv, &who), 0);
  assert_int_equal(to_cl.len, big);
  assert_memory_equal(to_cl.data, p, big);
  /* The ciphertext is no copy of the plaintext. */
  assert_int_equal(rdzv_tls_write(cl, p, 4096), 0);
  struct rdzv_buf wire = {0};
  assert_true(rdzv_tls_take(cl, &wire) > 4096);
  assert_null(memmem(wire.data, wire.len, p + 100, 64));
  rdzv_buf_free(&wire);
  free(p);
  rdzv_buf_free(&to_cl);
  rdzv_buf_free(&to_sv);
  rdzv_tls_free(cl);
  rdzv_tls_free(sv);
  rdzv_tls_cfg_free(a);
}

/* A client with the CA alone: admitted at the TLS level, but the server
 * sees no certificate (rdzvd then refuses it as a node). */
static void test_client_without_certificate(void **state) {
  (void)state;
  rdzv_tls_cfg_t *a = cfg_of("a", true), *r = cfg_of("rank", false);
  assert_false(rdzv_tls_cfg_has_cert(r));
  assert_true(rdzv_tls_cfg_has_cert(a));
  rdzv_tls_t *cl = rdzv_tls_new(r, false), *sv = rdzv_tls_new(a, true);
  struct rdzv_buf to_cl = {0}, to_sv = {0};
  const char *who = "";
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"x", 1), 0);
  assert_int_equal(pump(cl, sv, &to_cl, &to_sv, &who), 0);
  assert_int_equal(to_sv.len, 1);
  assert_true(rdzv_tls_peer_verified(cl));
  assert_false(rdzv_tls_peer_verified(sv));
  rdzv_buf_free(&to_cl);
  rdzv_buf_free(&to_sv);
  rdzv_tls_free(cl);
  rdzv_tls_free(sv);
  rdzv_tls_cfg_free(a);
  rdzv_tls_cfg_free(r);
}

/* client_dir's client against server_dir's server fails at side
 * want_who, its reason containing want. */
static void refused(const char *client_dir, const char *server_dir,
                    const char *want_who, const char *want) {
  rdzv_tls_cfg_t *c = cfg_of(client_dir, false), *s = cfg_of(server_dir, true);
  rdzv_tls_t *cl = rdzv_tls_new(c, false), *sv = rdzv_tls_new(s, true);
  struct rdzv_buf to_cl = {0}, to_sv = {0};
  const char *who = "";
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"secret", 6), 0);
  int rc = pump(cl, sv, &to_cl, &to_sv, &who);
  assert_int_equal(rc, RDZV_ETLS);
  assert_string_equal(who, want_who);
  const char *why = rdzv_tls_error(strcmp(who, "client") == 0 ? cl : sv);
  if (strstr(why, want) == NULL)
    fail_msg("%s: \"%s\" lacks \"%s\"", who, why, want);
  assert_int_equal(to_sv.len, 0); /* nothing got through */
  rdzv_buf_free(&to_cl);
  rdzv_buf_free(&to_sv);
  rdzv_tls_free(cl);
  rdzv_tls_free(sv);
  rdzv_tls_cfg_free(c);
  rdzv_tls_cfg_free(s);
}

static void test_refusals(void **state) {
  (void)state;
  /* A client that trusts another CA refuses the server. */
  refused("c", "a", "client", "certificate verify failed");
  /* A server whose certificate expired. */
  refused("rank", "exp", "client", "certificate has expired");
  /* A client whose certificate expired: the server refuses it. */
  refused("exp", "a", "server", "certificate has expired");
  /* A client of another cluster (its certificate of another CA) that
   * trusts this cluster's CA: the server refuses its certificate. */
  struct rdzv_tls_files f = {.ca = path("a/ca.crt"),
                             .cert = path("c/tls.crt"),
                             .key = path("c/tls.key")};
  char err[512];
  rdzv_tls_cfg_t *mixed = NULL, *a = cfg_of("a", true);
  assert_int_equal(rdzv_tls_cfg_new(&f, true, err, sizeof(err), &mixed), 0);
  rdzv_tls_t *cl = rdzv_tls_new(mixed, false), *sv = rdzv_tls_new(a, true);
  struct rdzv_buf to_cl = {0}, to_sv = {0};
  const char *who = "";
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"x", 1), 0);
  assert_int_equal(pump(cl, sv, &to_cl, &to_sv, &who), RDZV_ETLS);
  assert_string_equal(who, "server");
  assert_non_null(strstr(rdzv_tls_error(sv), "certificate verify failed"));
  assert_int_equal(to_sv.len, 0);
  rdzv_buf_free(&to_cl);
  rdzv_buf_free(&to_sv);
  rdzv_tls_free(cl);
  rdzv_tls_free(sv);
  rdzv_tls_cfg_free(mixed);
  rdzv_tls_cfg_free(a);
}

/* A peer that speaks no TLS: an rdzv frame where a ClientHello belongs
 * (and the reverse: a plain server's answer to a client). */
static void test_not_tls(void **state) {
  (void)state;
  rdzv_tls_cfg_t *a = cfg_of("a", true);
  rdzv_tls_t *sv = rdzv_tls_new(a, true), *cl = rdzv_tls_new(a, false);
  struct rdzv_buf plain = {0};
  static const uint8_t frame[] = {0x52, 0x44, 0x5a, 0x56, 1, 1, 0, 0,
                                  1,    0,    0,    0,    0, 0, 0, 0};
  assert_true(frame[0] != RDZV_TLS_HANDSHAKE_BYTE);
  assert_int_equal(rdzv_tls_read(sv, frame, sizeof(frame), &plain), RDZV_ETLS);
  assert_true(strlen(rdzv_tls_error(sv)) > 0);
  assert_int_equal(rdzv_tls_write(cl, (const uint8_t *)"x", 1), 0);
  assert_true(rdzv_tls_pending(cl) > 0);
  struct rdzv_buf hello = {0};
  assert_true(rdzv_tls_take(cl, &hello) > 0);
  assert_int_equal(hello.data[0], RDZV_TLS_HANDSHAKE_BYTE);
  assert_int_equal(rdzv_tls_read(cl, frame, sizeof(frame), &plain), RDZV_ETLS);
  if (strstr(rdzv_tls_error(cl), "does not speak TLS") == NULL)
    fail_msg("client: \"%s\"", rdzv_tls_error(cl));
  assert_int_equal(plain.len, 0);
  rdzv_buf_free(&hello);
  rdzv_buf_free(&plain);
  rdzv_tls_free(sv);
  rdzv_tls_free(cl);
  rdzv_tls_cfg_free(a);
}

/* Settings that cannot be loaded: each names the file and why. */
static void test_settings(void **state) {
  (void)state;
  char err[600];
  rdzv_tls_cfg_t *c = NULL;
  struct rdzv_tls_files none = {0};
  assert_false(rdzv_tls_files_given(&none));
  struct rdzv_tls_files f = {.cert = path("a/tls.crt"),
                             .key = path("a/tls.key")};
  assert_true(rdzv_tls_files_given(&f));
  assert_int_equal(rdzv_tls_cfg_new(&f, true, err, sizeof(err), &c), RDZV_ETLS);
  assert_null(c);
  assert_non_null(strstr(err, "no CA file"));
  f = (struct rdzv_tls_files){.ca = path("a/ca.crt"),
                              .cert = path("a/tls.crt")};
  assert_int_equal(rdzv_tls_cfg_new(&f, true, err, sizeof(err), &c), RDZV_ETLS);
  assert_non_null(strstr(err, "without its key"));
  f = (struct rdzv_tls_files){.ca = path("a/ca.crt"),
                              .cert = path("a/tls.crt"),
                              .key = path("c/tls.key")};
  assert_int_equal(rdzv_tls_cfg_new(&f, true, err, sizeof(err), &c), RDZV_ETLS);
  /* OpenSSL says "key values mismatch" as it loads the key. */
  if (strstr(err, "mismatch") == NULL && strstr(err, "does not match") == NULL)
    fail_msg("a key of another certificate: \"%s\"", err);
  assert_non_null(strstr(err, "c/tls.key"));
  f = (struct rdzv_tls_files){.ca = path("nowhere/ca.crt")};
  assert_int_equal(rdzv_tls_cfg_new(&f, false, err, sizeof(err), &c),
                   RDZV_ETLS);
  assert_non_null(strstr(err, "nowhere/ca.crt"));
  assert_non_null(strstr(err, "No such file"));
  f = (struct rdzv_tls_files){.ca = path("a/tls.key")};
  assert_int_equal(rdzv_tls_cfg_new(&f, false, err, sizeof(err), &c),
                   RDZV_ETLS);
  assert_non_null(strstr(err, "CA file"));
  /* A FIFO (its open would block the start for good) is refused. */
  char fifo[128];
  snprintf(fifo, sizeof(fifo), "%s/ca.fifo", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  f = (struct rdzv_tls_files){.ca = fifo};
  assert_int_equal(rdzv_tls_cfg_new(&f, false, err, sizeof(err), &c),
                   RDZV_ETLS);
  assert_non_null(strstr(err, "not a regular file"));
  /* A daemon needs a certificate; a rank's directory of the CA alone is
   * fine for a client. */
  f = (struct rdzv_tls_files){.dir = path("rank")};
  assert_int_equal(rdzv_tls_cfg_new(&f, true, err, sizeof(err), &c), RDZV_ETLS);
  assert_non_null(strstr(err, "no certificate"));
  assert_int_equal(rdzv_tls_cfg_new(&f, false, err, sizeof(err), &c), 0);
  assert_false(rdzv_tls_cfg_has_cert(c));
  rdzv_tls_cfg_free(c);
  rdzv_tls_cfg_free(NULL);
  rdzv_tls_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handshake_and_data),
      cmocka_unit_test(test_client_without_certificate),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_not_tls),
      cmocka_unit_test(test_settings),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
