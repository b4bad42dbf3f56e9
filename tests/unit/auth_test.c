/* store/auth: the proofs and the job-secret derivation against values
 * computed independently (Python's hmac module over the message layout
 * auth.h documents), the properties a proof must have, and secret files'
 * rules. Table-driven where there is a table. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/auth/auth.h"

static void hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", p[i]);
}

/* Computed with: hmac.new(key, b"rdzv-auth-v1" + side + bytes([len(job)])
 * + job + port.to_bytes(2, "little") + cn + sn, hashlib.sha256)
 * .hexdigest(), key b"a-job-secret-of-sixteen+", job b"job-42",
 * cn = bytes(range(32)), sn = bytes(range(32, 64)). */
static void test_proof_known_answers(void **state) {
  (void)state;
  static const struct {
    enum rdzv_auth_side side;
    uint16_t port;
    const char *want;
  } cases[] = {
      {RDZV_AUTH_SERVER, 0,
       "8ef7eba584c0006788b07f32ce137c2931737c1386e70a8c787db50195af0915"},
      {RDZV_AUTH_CLIENT, 0,
       "790f114aebf285a60d56fd0a011ac78b9bbae1f29d32985f104a006d71943cc2"},
      {RDZV_AUTH_SERVER, 29400,
       "48d278d4fa46546f488e0158c75d0069f83bd49730dad49de3b5b092f58d0c66"},
      {RDZV_AUTH_CLIENT, 29400,
       "fffd0292b9483ae26548484ccc558adde1d099099e7945a177ae5e7962065986"},
  };
  const char *key = "a-job-secret-of-sixteen+";
  uint8_t cn[32], sn[32], out[32];
  char h[65];
  for (int i = 0; i < 32; i++) {
    cn[i] = (uint8_t)i;
    sn[i] = (uint8_t)(32 + i);
  }
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(rdzv_auth_proof((const uint8_t *)key, strlen(key),
                                     cases[i].side, (const uint8_t *)"job-42",
                                     6, cases[i].port, cn, sn, out),
                     0);
    hex(out, 32, h);
    assert_string_equal(h, cases[i].want);
  }
}

static void test_job_secret_known_answer(void **state) {
  (void)state;
  char out[65];
  const char *key = "0123456789abcdef0123456789abcdef";
  assert_int_equal(rdzv_auth_job_secret((const uint8_t *)key, strlen(key),
                                        (const uint8_t *)"job-42", 6, out),
                   0);
  assert_string_equal(
      out, "8d1b57c14304b369a5809e5fd529c756de1be12232c2a521f7bbc0186c89e08b");
  /* Another job: another secret. */
  char other[65];
  assert_int_equal(rdzv_auth_job_secret((const uint8_t *)key, strlen(key),
                                        (const uint8_t *)"job-43", 6, other),
                   0);
  assert_string_not_equal(out, other);
  /* A site key under 16 bytes, an empty or over-long job: refused. */
  char job[300];
  memset(job, 'j', sizeof(job));
  assert_int_equal(rdzv_auth_job_secret((const uint8_t *)"short", 5,
                                        (const uint8_t *)"j", 1, out),
                   -EINVAL);
  assert_int_equal(rdzv_auth_job_secret((const uint8_t *)key, strlen(key),
                                        (const uint8_t *)job, 0, out),
                   -EINVAL);
  assert_int_equal(rdzv_auth_job_secret((const uint8_t *)key, strlen(key),
                                        (const uint8_t *)job, 256, out),
                   -EINVAL);
  assert_string_equal(out, "");
}

/* Each input of a proof changes it: the side, the job, either nonce, the
 * port, the secret. */
static void test_proof_binds_every_input(void **state) {
  (void)state;
  const uint8_t *k = (const uint8_t *)"sixteen-byte-key";
  uint8_t cn[32] = {1}, sn[32] = {2}, base[32], other[32];
  assert_int_equal(rdzv_auth_proof(k, 16, RDZV_AUTH_CLIENT,
                                   (const uint8_t *)"J", 1, 0, cn, sn, base),
                   0);
  assert_int_equal(rdzv_auth_proof(k, 16, RDZV_AUTH_SERVER,
                                   (const uint8_t *)"J", 1, 0, cn, sn, other),
                   0);
  assert_false(rdzv_auth_equal(base, other, 32));
  rdzv_auth_proof(k, 16, RDZV_AUTH_CLIENT, (const uint8_t *)"K", 1, 0, cn, sn,
                  other);
  assert_false(rdzv_auth_equal(base, other, 32));
  rdzv_auth_proof(k, 16, RDZV_AUTH_CLIENT, (const uint8_t *)"J", 1, 0, sn, cn,
                  other); /* nonces swapped */
  assert_false(rdzv_auth_equal(base, other, 32));
  rdzv_auth_proof(k, 16, RDZV_AUTH_CLIENT, (const uint8_t *)"J", 1, 28001, cn,
                  sn, other); /* another port (a forwarder's) */
  assert_false(rdzv_auth_equal(base, other, 32));
  rdzv_auth_proof((const uint8_t *)"sixteen-byte-kez", 16, RDZV_AUTH_CLIENT,
                  (const uint8_t *)"J", 1, 0, cn, sn, other);
  assert_false(rdzv_auth_equal(base, other, 32));
  rdzv_auth_proof(k, 16, RDZV_AUTH_CLIENT, (const uint8_t *)"J", 1, 0, cn, sn,
                  other);
  assert_true(rdzv_auth_equal(base, other, 32)); /* deterministic */
  /* Out of range: -EINVAL, out zeroed. */
  uint8_t zero[32] = {0};
  assert_int_equal(rdzv_auth_proof(k, 16, (enum rdzv_auth_side)'X',
                                   (const uint8_t *)"J", 1, 0, cn, sn, other),
                   -EINVAL);
  assert_memory_equal(other, zero, 32);
  assert_int_equal(rdzv_auth_proof(k, 0, RDZV_AUTH_CLIENT, (const uint8_t *)"J",
                                   1, 0, cn, sn, other),
                   -EINVAL);
}

/* The port a proof binds: an IPv4 or IPv6 address's, 0 for a Unix
 * socket's or none. */
static void test_port_of(void **state) {
  (void)state;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  v4->sin_family = AF_INET;
  v4->sin_port = htons(28001);
  assert_int_equal(rdzv_auth_port_of(&ss), 28001);
  memset(&ss, 0, sizeof(ss));
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(29400);
  assert_int_equal(rdzv_auth_port_of(&ss), 29400);
  memset(&ss, 0, sizeof(ss));
  ss.ss_family = AF_UNIX;
  assert_int_equal(rdzv_auth_port_of(&ss), 0);
  assert_int_equal(rdzv_auth_port_of(NULL), 0);
}

static void test_nonces_differ(void **state) {
  (void)state;
  uint8_t a[32], b[32];
  assert_int_equal(rdzv_auth_nonce(a, 32), 0);
  assert_int_equal(rdzv_auth_nonce(b, 32), 0);
  assert_false(rdzv_auth_equal(a, b, 32));
}

/* A daemon's own nonces: it tells them from any other (a reflected
 * hello), another daemon (another key) does not, and each is fresh. */
static void test_own_nonces(void **state) {
  (void)state;
  uint8_t k1[RDZV_AUTH_OWN_KEY_BYTES], k2[RDZV_AUTH_OWN_KEY_BYTES];
  uint8_t a[32], b[32], r[32];
  assert_int_equal(rdzv_auth_nonce(k1, sizeof(k1)), 0);
  assert_int_equal(rdzv_auth_nonce(k2, sizeof(k2)), 0);
  assert_int_equal(rdzv_auth_own_nonce(k1, a), 0);
  assert_int_equal(rdzv_auth_own_nonce(k1, b), 0);
  assert_false(rdzv_auth_equal(a, b, 32));
  assert_int_equal(rdzv_auth_is_own_nonce(k1, a), 1);
  assert_int_equal(rdzv_auth_is_own_nonce(k1, b), 1);
  assert_int_equal(rdzv_auth_is_own_nonce(k2, a), 0);
  /* A peer's random nonce, and one bit of the tag or of R changed. */
  assert_int_equal(rdzv_auth_nonce(r, sizeof(r)), 0);
  assert_int_equal(rdzv_auth_is_own_nonce(k1, r), 0);
  for (int i = 0; i < 32; i++) {
    memcpy(r, a, 32);
    r[i] ^= 0x01;
    assert_int_equal(rdzv_auth_is_own_nonce(k1, r), 0);
  }
  assert_int_equal(rdzv_auth_own_nonce(NULL, a), -EINVAL);
  assert_int_equal(rdzv_auth_is_own_nonce(NULL, a), 0);
}

/* Secret files: what is accepted and what refused, and why. */
static void test_secret_files(void **state) {
  (void)state;
  char dir[] = "/tmp/rdzv-auth-unit.XXXXXX";
  assert_non_null(mkdtemp(dir));
  static const struct {
    const char *text;
    mode_t mode;
    int want;
    size_t len;      /* when accepted */
    const char *err; /* a word of the message, when refused */
  } cases[] = {
      {"0123456789abcdef\n", 0600, 0, 16, NULL},
      {"0123456789abcdef \t\r\n\n", 0400, 0, 16, NULL},
      {"0123456789abcdef", 0640, 0, 16, NULL}, /* group: a K8s fsGroup */
      {"0123456789abcdef", 0644, -EPERM, 0, "chmod"},
      {"0123456789abcdef", 0602, -EPERM, 0, "others"},
      {"0123456789abcde\n", 0600, -EINVAL, 0, "16 to 1024"},
      {"", 0600, -EINVAL, 0, "16 to 1024"},
  };
  char path[300], err[600];
  uint8_t out[RDZV_AUTH_SECRET_MAX_BYTES];
  size_t len = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    snprintf(path, sizeof(path), "%s/s%zu", dir, i);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(cases[i].text, f);
    fclose(f);
    chmod(path, cases[i].mode);
    len = 0;
    int rc =
        rdzv_auth_secret_load(path, out, sizeof(out), &len, err, sizeof(err));
    assert_int_equal(rc, cases[i].want);
    if (rc == 0) {
      assert_int_equal(len, cases[i].len);
      assert_memory_equal(out, "0123456789abcdef", 16);
    } else {
      assert_non_null(strstr(err, cases[i].err));
      assert_non_null(strstr(err, path));           /* names the file */
      assert_null(strstr(err, "0123456789abcdef")); /* never the secret */
    }
    unlink(path);
  }
  /* 1025 bytes: too long; 1024: the most. */
  for (int n = 1024; n <= 1025; n++) {
    snprintf(path, sizeof(path), "%s/long", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++)
      fputc('x', f);
    fclose(f);
    chmod(path, 0600);
    assert_int_equal(
        rdzv_auth_secret_load(path, out, sizeof(out), &len, err, sizeof(err)),
        n == 1024 ? 0 : -EINVAL);
    unlink(path);
  }
  /* The most, then trailing whitespace (`head -c 1024 ...; echo`): the
   * limit counts the secret, not the newline after it. */
  snprintf(path, sizeof(path), "%s/long-nl", dir);
  FILE *nl = fopen(path, "w");
  assert_non_null(nl);
  for (int i = 0; i < 1024; i++)
    fputc('y', nl);
  fputs(" \r\n\n", nl);
  fclose(nl);
  chmod(path, 0600);
  len = 0;
  assert_int_equal(
      rdzv_auth_secret_load(path, out, sizeof(out), &len, err, sizeof(err)), 0);
  assert_int_equal(len, 1024);
  assert_int_equal(out[1023], 'y');
  unlink(path);
  /* A FIFO (no writer): refused as not a regular file at once; opening it
   * must not wait for a writer (a daemon reads --secret-dir's files on its
   * event loop: it would hang every peer). */
  snprintf(path, sizeof(path), "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(
      rdzv_auth_secret_load(path, out, sizeof(out), &len, err, sizeof(err)),
      -EINVAL);
  assert_non_null(strstr(err, "not a regular file"));
  unlink(path);
  /* Missing, and a directory. */
  snprintf(path, sizeof(path), "%s/none", dir);
  assert_int_equal(
      rdzv_auth_secret_load(path, out, sizeof(out), &len, err, sizeof(err)),
      -ENOENT);
  assert_int_equal(
      rdzv_auth_secret_load(dir, out, sizeof(out), &len, err, sizeof(err)),
      -EINVAL);
  assert_non_null(strstr(err, "not a regular file"));
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proof_known_answers),
      cmocka_unit_test(test_job_secret_known_answer),
      cmocka_unit_test(test_proof_binds_every_input),
      cmocka_unit_test(test_port_of),
      cmocka_unit_test(test_nonces_differ),
      cmocka_unit_test(test_own_nonces),
      cmocka_unit_test(test_secret_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
