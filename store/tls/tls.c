/* TLS sessions over memory BIOs (tls.h). Owns: loading a configuration
 * into an SSL_CTX, one SSL per connection, the plaintext held until the
 * handshake is done, and the text of a failure. Calls only OpenSSL and
 * the wire's buffers. */
#include "store/tls/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "rdzv/error.h"

struct rdzv_tls_cfg {
  SSL_CTX *ctx;
  bool has_cert;
};

struct rdzv_tls {
  SSL *ssl;
  BIO *rbio; /* ciphertext from the peer, for SSL to read */
  BIO *wbio; /* ciphertext SSL wrote, for the socket */
  bool server;
  struct rdzv_buf held; /* plaintext written before the handshake ended */
  char err[RDZV_TLS_ERR_MAX];
};

/* Most plaintext one SSL_read call produces into the caller's buffer. */
#define READ_CHUNK 16384u

bool rdzv_tls_files_given(const struct rdzv_tls_files *f) {
  return f != NULL && ((f->dir != NULL && f->dir[0] != '\0') ||
                       (f->cert != NULL && f->cert[0] != '\0') ||
                       (f->key != NULL && f->key[0] != '\0') ||
                       (f->ca != NULL && f->ca[0] != '\0'));
}

/* Whether OpenSSL's reason r means the peer's bytes were no TLS at all
 * (a peer without TLS answering a handshake). */
static bool not_tls(int r) {
  return r == SSL_R_WRONG_VERSION_NUMBER || r == SSL_R_PACKET_LENGTH_TOO_LONG ||
         r == SSL_R_UNKNOWN_PROTOCOL || r == SSL_R_HTTP_REQUEST;
}

/* OpenSSL's queued errors as one line (the last, most specific, first);
 * the queue is emptied. */
static void ossl_text(char *buf, size_t n) {
  unsigned long e, last = 0;
  while ((e = ERR_get_error()) != 0)
    last = e;
  if (last == 0) {
    snprintf(buf, n, "%s", "no reason given by OpenSSL");
    return;
  }
  const char *r = ERR_reason_error_string(last);
  if (r == NULL) {
    ERR_error_string_n(last, buf, n);
    return;
  }
  snprintf(buf, n, "%s%s", r,
           ERR_GET_LIB(last) == ERR_LIB_SSL && not_tls(ERR_GET_REASON(last))
               ? " (the peer does not speak TLS?)"
               : "");
}

/* path, or DIR/name when path is not given and dir is; "" if neither. */
static void pick(const char *path, const char *dir, const char *name, char *out,
                 size_t n) {
  if (path != NULL && path[0] != '\0')
    snprintf(out, n, "%s", path);
  else if (dir != NULL && dir[0] != '\0')
    snprintf(out, n, "%s/%s", dir, name);
  else
    out[0] = '\0';
}

/* Whether a regular file can be opened for reading (else errno says why:
 * EINVAL for a FIFO, a device or a directory, which could block the
 * start or never end). */
static bool readable(const char *path) {
  struct stat st;
  if (stat(path, &st) < 0)
    return false;
  if (!S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return false;
  }
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return false;
  fclose(f);
  return true;
}

/* Why readable() said no. */
static const char *unreadable_why(void) {
  return errno == EINVAL ? "not a regular file (a FIFO, a device or a "
                           "directory)"
                         : strerror(errno);
}

static int cfg_fail(rdzv_tls_cfg_t *c, char *err, size_t errlen,
                    const char *what, const char *path, const char *why) {
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "%s %s: %s", what, path, why);
  SSL_CTX_free(c->ctx);
  free(c);
  ERR_clear_error();
  return RDZV_ETLS;
}

int rdzv_tls_cfg_new(const struct rdzv_tls_files *f, bool need_cert, char *err,
                     size_t errlen, rdzv_tls_cfg_t **out) {
  char ca[RDZV_TLS_PATH_MAX], cert[RDZV_TLS_PATH_MAX], key[RDZV_TLS_PATH_MAX];
  char why[RDZV_TLS_ERR_MAX];
  const char *dir = f != NULL ? f->dir : NULL;

  *out = NULL;
  pick(f != NULL ? f->ca : NULL, dir, "ca.crt", ca, sizeof(ca));
  pick(f != NULL ? f->cert : NULL, dir, "tls.crt", cert, sizeof(cert));
  pick(f != NULL ? f->key : NULL, dir, "tls.key", key, sizeof(key));
  rdzv_tls_cfg_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return RDZV_ENOMEM;
  c->ctx = SSL_CTX_new(TLS_method());
  if (c->ctx == NULL) {
    free(c);
    return RDZV_ENOMEM;
  }
  SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
  /* A directory without its certificate pair is a client's: no pair (a
   * daemon's is refused below for having none). */
  bool from_dir = (f == NULL || f->cert == NULL || f->cert[0] == '\0') &&
                  (f == NULL || f->key == NULL || f->key[0] == '\0');
  if (from_dir && cert[0] != '\0' && !readable(cert) && !readable(key))
    cert[0] = key[0] = '\0';
  if (ca[0] == '\0')
    return cfg_fail(c, err, errlen, "no CA file:", "--tls-ca",
                    "every certificate is checked against one");
  if (!readable(ca))
    return cfg_fail(c, err, errlen, "CA file", ca, unreadable_why());
  if (SSL_CTX_load_verify_locations(c->ctx, ca, NULL) != 1) {
    ossl_text(why, sizeof(why));
    return cfg_fail(c, err, errlen, "CA file", ca, why);
  }
  if ((cert[0] == '\0') != (key[0] == '\0'))
    return cfg_fail(c, err, errlen, "certificate without its key:",
                    cert[0] != '\0' ? cert : key,
                    "give both (--tls-cert and --tls-key) or neither");
  if (cert[0] == '\0' && need_cert)
    return cfg_fail(c, err, errlen, "no certificate:", "--tls-cert",
                    "a daemon proves itself to its peers with one");
  if (cert[0] != '\0') {
    if (!readable(cert))
      return cfg_fail(c, err, errlen, "certificate file", cert,
                      unreadable_why());
    if (SSL_CTX_use_certificate_chain_file(c->ctx, cert) != 1) {
      ossl_text(why, sizeof(why));
      return cfg_fail(c, err, errlen, "certificate file", cert, why);
    }
    if (!readable(key))
      return cfg_fail(c, err, errlen, "key file", key, unreadable_why());
    if (SSL_CTX_use_PrivateKey_file(c->ctx, key, SSL_FILETYPE_PEM) != 1) {
      ossl_text(why, sizeof(why));
      return cfg_fail(c, err, errlen, "key file", key, why);
    }
    if (SSL_CTX_check_private_key(c->ctx) != 1)
      return cfg_fail(c, err, errlen, "key file", key,
                      "does not match the certificate");
    c->has_cert = true;
    /* The chain sent with the certificate is built once, here, not at
     * every handshake (OpenSSL would search the store each time). */
    SSL_CTX_build_cert_chain(c->ctx, SSL_BUILD_CHAIN_FLAG_IGNORE_ERROR);
    ERR_clear_error();
  }
  /* Both sides check the other's certificate against the CA. A client
   * must get one; a server asks for one and lets the caller decide
   * (a daemon's peer must have one, a rank need not). */
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
  SSL_CTX_set_mode(c->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                               SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_NO_AUTO_CHAIN);
  /* Sessions are not resumed: a link lives long, and a resumed session
   * would skip the client certificate check the caller relies on. */
  SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(c->ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(c->ctx, 0);
  *out = c;
  return 0;
}

bool rdzv_tls_cfg_has_cert(const rdzv_tls_cfg_t *cfg) {
  return cfg != NULL && cfg->has_cert;
}

void rdzv_tls_cfg_free(rdzv_tls_cfg_t *cfg) {
  if (cfg == NULL)
    return;
  SSL_CTX_free(cfg->ctx);
  free(cfg);
}

rdzv_tls_t *rdzv_tls_new(rdzv_tls_cfg_t *cfg, bool server) {
  rdzv_tls_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NULL;
  t->ssl = SSL_new(cfg->ctx);
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
    SSL_free(t->ssl);
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    free(t);
    ERR_clear_error();
    return NULL;
  }
  /* An empty memory BIO says "retry", not "end of file". */
  BIO_set_mem_eof_return(t->rbio, -1);
  BIO_set_mem_eof_return(t->wbio, -1);
  SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the SSL owns both now */
  t->server = server;
  if (server)
    SSL_set_accept_state(t->ssl);
  else
    SSL_set_connect_state(t->ssl);
  return t;
}

void rdzv_tls_free(rdzv_tls_t *t) {
  if (t == NULL)
    return;
  SSL_free(t->ssl);
  rdzv_buf_free(&t->held);
  free(t);
}

/* Records why an SSL call that returned rc failed. Returns the status. */
static int fail(rdzv_tls_t *t, int rc) {
  int e = SSL_get_error(t->ssl, rc);
  char why[RDZV_TLS_ERR_MAX / 2];
  if (e == SSL_ERROR_ZERO_RETURN) {
    snprintf(t->err, sizeof(t->err), "the peer closed the TLS session");
    return RDZV_ECONN_CLOSED;
  }
  ossl_text(why, sizeof(why));
  long v = SSL_get_verify_result(t->ssl);
  if (v != X509_V_OK)
    snprintf(t->err, sizeof(t->err), "%.100s: the %s's certificate: %.80s", why,
             t->server ? "client" : "server", X509_verify_cert_error_string(v));
  else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL)
    snprintf(t->err, sizeof(t->err), "%s", why);
  else
    snprintf(t->err, sizeof(t->err), "TLS error %d", e);
  return RDZV_ETLS;
}

/* Whether rc (from SSL_*) only means "more bytes from the peer first". */
static bool wants_more(rdzv_tls_t *t, int rc) {
  int e = SSL_get_error(t->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    ERR_clear_error();
    return true;
  }
  return false;
}

/* Encrypts n bytes: the memory BIO takes all of it. */
static int seal(rdzv_tls_t *t, const uint8_t *p, size_t n) {
  while (n > 0) {
    size_t done = 0;
    int rc = SSL_write_ex(t->ssl, p, n, &done);
    if (rc != 1)
      return fail(t, rc);
    p += done;
    n -= done;
  }
  return 0;
}

/* Once the handshake is done: the plaintext held meanwhile goes. */
static int release_held(rdzv_tls_t *t) {
  if (t->held.len == 0)
    return 0;
  int rc = seal(t, t->held.data, t->held.len);
  rdzv_buf_free(&t->held);
  return rc;
}

int rdzv_tls_read(rdzv_tls_t *t, const uint8_t *p, size_t n,
                  struct rdzv_buf *plain) {
  while (n > 0) {
    int w = BIO_write(t->rbio, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (w <= 0)
      return RDZV_ENOMEM;
    p += w;
    n -= (size_t)w;
  }
  if (!SSL_is_init_finished(t->ssl)) {
    int rc = SSL_do_handshake(t->ssl);
    if (rc != 1)
      return wants_more(t, rc) ? 0 : fail(t, rc);
    rc = release_held(t);
    if (rc < 0)
      return rc;
  }
  for (;;) {
    if (rdzv_buf_reserve(plain, READ_CHUNK) < 0)
      return RDZV_ENOMEM;
    size_t got = 0;
    int rc = SSL_read_ex(t->ssl, plain->data + plain->len,
                         plain->cap - plain->len, &got);
    if (rc != 1)
      return wants_more(t, rc) ? 0 : fail(t, rc);
    plain->len += got;
  }
}

int rdzv_tls_write(rdzv_tls_t *t, const uint8_t *p, size_t n) {
  if (n == 0)
    return 0;
  if (!SSL_is_init_finished(t->ssl)) {
    if (rdzv_buf_append(&t->held, p, n) < 0)
      return RDZV_ENOMEM;
    if (!t->server && BIO_ctrl_pending(t->wbio) == 0 &&
        SSL_in_before(t->ssl)) { /* a client starts the handshake */
      int rc = SSL_do_handshake(t->ssl);
      if (rc != 1 && !wants_more(t, rc))
        return fail(t, rc);
    }
    return 0;
  }
  return seal(t, p, n);
}

long rdzv_tls_take(rdzv_tls_t *t, struct rdzv_buf *out) {
  size_t n = BIO_ctrl_pending(t->wbio);
  if (n == 0)
    return 0;
  if (rdzv_buf_reserve(out, n) < 0)
    return RDZV_ENOMEM;
  int got = BIO_read(t->wbio, out->data + out->len, (int)n);
  if (got <= 0)
    return 0;
  out->len += (size_t)got;
  return got;
}

size_t rdzv_tls_pending(const rdzv_tls_t *t) {
  return BIO_ctrl_pending(t->wbio);
}

bool rdzv_tls_ready(const rdzv_tls_t *t) {
  return SSL_is_init_finished(t->ssl);
}

bool rdzv_tls_peer_verified(const rdzv_tls_t *t) {
  X509 *x = SSL_get0_peer_certificate(t->ssl);
  return x != NULL && SSL_get_verify_result(t->ssl) == X509_V_OK;
}

const char *rdzv_tls_error(const rdzv_tls_t *t) { return t->err; }
