/* librdzv: TLS on a rank's (or a tool's) TCP connection to a daemon
 * (store/tls over the client's own non-blocking socket). Owns: the TLS
 * settings (options or environment), each connection's session, sealing
 * what is queued, and reading ciphertext into plaintext. Called by
 * client.c (settings) and client_conn.c (a connection's bytes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/client/client_int.h"

/* Bytes of ciphertext one recv takes. */
#define CIPHER_READ 16384

static const char *given(const char *s) {
  return s != NULL && s[0] != '\0' ? s : NULL;
}

int rdzv__ctls_init(struct rdzv_client *c,
                    const struct rdzv_client_opts *opts) {
  struct rdzv_tls_files f = {0};
  char err[RDZV_TLS_PATH_MAX + 200];
  const char *src = "opts.tls_*";
  if (opts != NULL) {
    f.dir = given(opts->tls_dir);
    f.ca = given(opts->tls_ca);
    f.cert = given(opts->tls_cert);
    f.key = given(opts->tls_key);
  }
  if (!rdzv_tls_files_given(&f)) {
    f.dir = given(getenv("RDZV_TLS_DIR"));
    f.ca = given(getenv("RDZV_TLS_CA"));
    f.cert = given(getenv("RDZV_TLS_CERT"));
    f.key = given(getenv("RDZV_TLS_KEY"));
    src = "RDZV_TLS_*";
  }
  if (!rdzv_tls_files_given(&f))
    return 0;
  int rc = rdzv_tls_cfg_new(&f, false, err, sizeof(err), &c->tls_cfg);
  if (rc == RDZV_ENOMEM)
    return rc;
  if (rc < 0) {
    c->fatal = RDZV_ETLS;
    c->state = RDZV__CS_FAILED;
    rdzv__set_error(c, "TLS settings (%s): %s", src, err);
  }
  return 0;
}

int rdzv__ctls_begin(struct rdzv_client *c) {
  rdzv__ctls_end(c);
  if (c->tls_cfg == NULL || rdzv__target(c)->is_unix)
    return 0;
  c->tls = rdzv_tls_new(c->tls_cfg, false);
  return c->tls != NULL ? 0 : RDZV_ENOMEM;
}

void rdzv__ctls_end(struct rdzv_client *c) {
  rdzv_tls_free(c->tls);
  c->tls = NULL;
  rdzv_buf_free(&c->cipher);
}

int rdzv__ctls_seal(struct rdzv_client *c) {
  if (c->out.len > 0) {
    int rc = rdzv_tls_write(c->tls, c->out.data, c->out.len);
    if (rc < 0)
      return rc;
    c->sent_total += c->out.len;
    rdzv_buf_free(&c->out);
  }
  return rdzv_tls_take(c->tls, &c->cipher) < 0 ? RDZV_ENOMEM : 0;
}

ssize_t rdzv__ctls_recv(struct rdzv_client *c, char *what, size_t n) {
  uint8_t buf[CIPHER_READ];
  ssize_t got = recv(c->fd, buf, sizeof(buf), 0);
  if (got <= 0)
    return got;
  bool was_ready = rdzv_tls_ready(c->tls);
  int rc = rdzv_tls_read(c->tls, buf, (size_t)got, &c->in);
  if (rc == 0)
    rc = rdzv__ctls_seal(c); /* the handshake's records go out next */
  if (rc < 0) {
    snprintf(what, n, "TLS %s %s: %s", was_ready ? "with" : "handshake with",
             rdzv__target_str(c),
             rc == RDZV_ENOMEM ? "out of memory" : rdzv_tls_error(c->tls));
    /* The alert, if the socket takes it: the daemon's log says why. */
    rdzv_tls_take(c->tls, &c->cipher);
    if (c->cipher.len > 0 &&
        send(c->fd, c->cipher.data, c->cipher.len, MSG_NOSIGNAL) < 0)
      errno = 0;
    return rc == RDZV_ENOMEM ? -3 : -2;
  }
  return got;
}
