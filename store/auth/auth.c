/* Per-job authentication: see auth.h. */
#include "store/auth/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#define LABEL "rdzv-auth-v1"
#define LABEL_LEN 12u
#define JOB_LABEL "rdzv-job-secret-v1"
#define JOB_LABEL_LEN 18u

static int hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *msg,
                       size_t msg_len, uint8_t *out) {
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &n) == NULL ||
      n != 32u) {
    memset(out, 0, 32);
    return -EINVAL;
  }
  return 0;
}

int rdzv_auth_proof(const uint8_t *secret, size_t secret_len,
                    enum rdzv_auth_side side, const uint8_t *job,
                    size_t job_len, uint16_t port, const uint8_t *cnonce,
                    const uint8_t *snonce, uint8_t *out) {
  uint8_t msg[LABEL_LEN + 2 + RDZV_AUTH_JOB_MAX_BYTES + 2 +
              2 * RDZV_AUTH_NONCE_BYTES];
  size_t n = 0;
  if (out == NULL)
    return -EINVAL;
  memset(out, 0, RDZV_AUTH_PROOF_BYTES);
  if (secret == NULL || secret_len == 0 ||
      secret_len > RDZV_AUTH_SECRET_MAX_BYTES || job == NULL || job_len == 0 ||
      job_len > RDZV_AUTH_JOB_MAX_BYTES || cnonce == NULL || snonce == NULL ||
      (side != RDZV_AUTH_SERVER && side != RDZV_AUTH_CLIENT))
    return -EINVAL;
  memcpy(msg, LABEL, LABEL_LEN);
  n = LABEL_LEN;
  msg[n++] = (uint8_t)side;
  msg[n++] = (uint8_t)job_len;
  memcpy(msg + n, job, job_len);
  n += job_len;
  msg[n++] = (uint8_t)(port & 0xff);
  msg[n++] = (uint8_t)(port >> 8);
  memcpy(msg + n, cnonce, RDZV_AUTH_NONCE_BYTES);
  n += RDZV_AUTH_NONCE_BYTES;
  memcpy(msg + n, snonce, RDZV_AUTH_NONCE_BYTES);
  n += RDZV_AUTH_NONCE_BYTES;
  return hmac_sha256(secret, secret_len, msg, n, out);
}

uint16_t rdzv_auth_port_of(const struct sockaddr_storage *sa) {
  if (sa == NULL)
    return 0;
  if (sa->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)sa)->sin_port);
  if (sa->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  return 0;
}

int rdzv_auth_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

void rdzv_auth_hex(const uint8_t *p, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[p[i] >> 4];
    out[2 * i + 1] = hex[p[i] & 15];
  }
  out[2 * n] = '\0';
}

void rdzv_auth_wipe(void *p, size_t n) { OPENSSL_cleanse(p, n); }

int rdzv_auth_nonce(uint8_t *out, size_t n) {
  if (n > 0x7fffffff || RAND_bytes(out, (int)n) != 1) {
    memset(out, 0, n);
    return -EIO;
  }
  return 0;
}

#define OWN_LABEL "rdzv-own-nonce-v1"
#define OWN_LABEL_LEN 17u
#define OWN_RANDOM 16u

/* The tag of an own nonce: the first 16 bytes of HMAC-SHA256(key,
 * OWN_LABEL | r), r the nonce's first 16 bytes. */
static int own_tag(const uint8_t *key, const uint8_t *r, uint8_t *tag) {
  uint8_t msg[OWN_LABEL_LEN + OWN_RANDOM], mac[32];
  memcpy(msg, OWN_LABEL, OWN_LABEL_LEN);
  memcpy(msg + OWN_LABEL_LEN, r, OWN_RANDOM);
  if (hmac_sha256(key, RDZV_AUTH_OWN_KEY_BYTES, msg, sizeof(msg), mac) < 0)
    return -EINVAL;
  memcpy(tag, mac, RDZV_AUTH_NONCE_BYTES - OWN_RANDOM);
  OPENSSL_cleanse(mac, sizeof(mac));
  return 0;
}

int rdzv_auth_own_nonce(const uint8_t *key, uint8_t *out) {
  if (key == NULL || out == NULL)
    return -EINVAL;
  if (rdzv_auth_nonce(out, OWN_RANDOM) < 0 ||
      own_tag(key, out, out + OWN_RANDOM) < 0) {
    memset(out, 0, RDZV_AUTH_NONCE_BYTES);
    return -EIO;
  }
  return 0;
}

int rdzv_auth_is_own_nonce(const uint8_t *key, const uint8_t *nonce) {
  uint8_t tag[RDZV_AUTH_NONCE_BYTES - OWN_RANDOM];
  if (key == NULL || nonce == NULL || own_tag(key, nonce, tag) < 0)
    return 0;
  return CRYPTO_memcmp(tag, nonce + OWN_RANDOM, sizeof(tag)) == 0;
}

int rdzv_auth_job_secret(const uint8_t *site_key, size_t site_key_len,
                         const uint8_t *job, size_t job_len, char *out_hex) {
  uint8_t msg[JOB_LABEL_LEN + 1 + RDZV_AUTH_JOB_MAX_BYTES];
  uint8_t mac[32];
  if (out_hex == NULL)
    return -EINVAL;
  out_hex[0] = '\0';
  if (site_key == NULL || site_key_len < RDZV_AUTH_SECRET_MIN_BYTES ||
      site_key_len > RDZV_AUTH_SECRET_MAX_BYTES || job == NULL ||
      job_len == 0 || job_len > RDZV_AUTH_JOB_MAX_BYTES)
    return -EINVAL;
  memcpy(msg, JOB_LABEL, JOB_LABEL_LEN);
  msg[JOB_LABEL_LEN] = (uint8_t)job_len;
  memcpy(msg + JOB_LABEL_LEN + 1, job, job_len);
  if (hmac_sha256(site_key, site_key_len, msg, JOB_LABEL_LEN + 1 + job_len,
                  mac) < 0)
    return -EINVAL;
  rdzv_auth_hex(mac, sizeof(mac), out_hex);
  OPENSSL_cleanse(mac, sizeof(mac));
  return 0;
}

int rdzv_auth_secret_load(const char *path, uint8_t *out, size_t cap,
                          size_t *len, char *err, size_t errlen) {
  struct stat st;
  int fd, rc;
  size_t n = 0;
  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (path == NULL || out == NULL || len == NULL ||
      cap < RDZV_AUTH_SECRET_MAX_BYTES) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "secret file: bad arguments");
    return -EINVAL;
  }
  /* O_NONBLOCK: a FIFO put there would otherwise block open() until a
   * writer comes (a daemon reads --secret-dir's files on its event loop);
   * it is refused below as not a regular file. Reading a regular file
   * ignores the flag. */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "secret file %s: %s", path, strerror(-rc));
    return rc;
  }
  if (fstat(fd, &st) < 0) {
    rc = -errno;
    close(fd);
    snprintf(err, errlen, "secret file %s: %s", path, strerror(-rc));
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(err, errlen, "secret file %s is not a regular file", path);
    return -EINVAL;
  }
  if ((st.st_mode & 0006) != 0) {
    close(fd);
    snprintf(err, errlen,
             "secret file %s has mode %04o: others may read or write it "
             "(chmod o-rw)",
             path, (unsigned)(st.st_mode & 07777));
    return -EPERM;
  }
  /* Read into buf, which has room for the longest secret and trailing
   * whitespace after it (a newline, CRLF, a few spaces); one byte more
   * than buf holds tells a file that is too long. */
  uint8_t buf[RDZV_AUTH_SECRET_MAX_BYTES + 64];
  while (n < sizeof(buf)) {
    ssize_t r = read(fd, buf + n, sizeof(buf) - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      rc = -errno;
      close(fd);
      OPENSSL_cleanse(buf, sizeof(buf));
      OPENSSL_cleanse(out, cap);
      snprintf(err, errlen, "secret file %s: %s", path, strerror(-rc));
      return rc;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  if (n == sizeof(buf)) { /* full: read one more to know */
    uint8_t extra;
    if (read(fd, &extra, 1) == 1)
      n = sizeof(buf) + 1;
  }
  close(fd);
  while (n > 0 && n <= sizeof(buf) &&
         (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\n' ||
          buf[n - 1] == '\r'))
    n--;
  if (n < RDZV_AUTH_SECRET_MIN_BYTES || n > RDZV_AUTH_SECRET_MAX_BYTES) {
    OPENSSL_cleanse(buf, sizeof(buf));
    OPENSSL_cleanse(out, cap);
    snprintf(err, errlen,
             "secret file %s: the secret must be %u to %u bytes (without "
             "trailing whitespace)",
             path, RDZV_AUTH_SECRET_MIN_BYTES, RDZV_AUTH_SECRET_MAX_BYTES);
    return -EINVAL;
  }
  memcpy(out, buf, n);
  OPENSSL_cleanse(buf, sizeof(buf));
  *len = n;
  return 0;
}
