/* The node's link to its parent over TLS (rdzvd --tls-*): the session of
 * each TCP attempt, its plaintext sealed into ciphertext before a write,
 * ciphertext read into plaintext, and a failure told with OpenSSL's
 * reason and the parent's address. The daemon's TLS configuration and
 * read buffer are the transport's (conn_tls.c); a link over a Unix
 * socket stays plain. Called by upstream.c, upstream_connect.c and
 * upstream_read.c. */
#include "store/daemon/node/upstream_int.h"

bool rdzv__up_tls_begin(struct upstream *u) {
  rdzv__up_tls_end(u);
  if (u->d->tls == NULL)
    return true;
  u->tls = rdzv_tls_new(u->d->tls, false);
  return u->tls != NULL;
}

void rdzv__up_tls_end(struct upstream *u) {
  rdzv_tls_free(u->tls);
  u->tls = NULL;
  u->cipher.len = 0;
}

int rdzv__up_tls_seal(struct upstream *u) {
  if (u->out.len > 0) {
    int rc = rdzv_tls_write(u->tls, u->out.data, u->out.len);
    if (rc < 0)
      return rc;
    u->out.len = 0;
  }
  return rdzv_tls_take(u->tls, &u->cipher) < 0 ? RDZV_ENOMEM : 0;
}

void rdzv__up_tls_failed(struct upstream *u, int err) {
  struct daemon *d = u->d;
  if (err == RDZV_ETLS) {
    /* Said at the default level on the first attempt and every 50th. */
    d->stats.tls_failed++;
    rdzv__log_job(d, u->attempts % 50 == 1 ? 1 : 2, u->job_id,
                  "parent %s: TLS: %s", u->cand_text, rdzv_tls_error(u->tls));
  }
  if (u->state == UP_HELLO)
    rdzv__up_attempt_failed(u, "TLS with", err);
  else
    rdzv__up_reset(u, "TLS", err);
}

void rdzv__up_tls_alloc(struct upstream *u, uv_buf_t *buf) {
  buf->base = (char *)u->d->tls_rbuf;
  buf->len = RDZV_TLS_READ_BYTES;
}

bool rdzv__up_tls_in(struct upstream *u, size_t n) {
  bool was_ready = rdzv_tls_ready(u->tls);
  int rc = rdzv_tls_read(u->tls, u->d->tls_rbuf, n, &u->in);
  if (rc == 0 && !was_ready && rdzv_tls_ready(u->tls))
    u->d->stats.tls_handshakes++;
  if (rc < 0) {
    /* The alert goes first: the parent's log then says why too. */
    if (u->have_stream)
      rdzv__tls_send(&u->h.stream, u->tls, &u->d->stats.bytes_out);
    rdzv__up_tls_failed(u, rc);
    return false;
  }
  rdzv__up_start_write(u); /* the handshake's records, the held hello */
  return true;
}
