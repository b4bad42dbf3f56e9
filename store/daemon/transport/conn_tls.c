/* rdzvd transport: TLS on the connections the TCP listener accepts
 * (--tls-dir, --tls-cert, --tls-key, --tls-ca). Owns: the daemon's TLS
 * configuration, each accepted connection's session, the first byte's
 * check (a plain peer on the TLS port gets a plain refusal it can read),
 * ciphertext in and plaintext into the connection's input, the
 * handshake's own records out, and the log lines of failures. Calls
 * store/tls, conn.c's refusal and close, outq.c's rdzv__tls_send. The
 * node's outgoing links use the same configuration (node/upstream). */
#include <stdio.h>
#include <stdlib.h>

#include "store/daemon/transport/transport_int.h"

int rdzv__tls_start(struct daemon *d) {
  const struct rdzv_tls_files f = {.dir = d->cfg.tls_dir,
                                   .cert = d->cfg.tls_cert,
                                   .key = d->cfg.tls_key,
                                   .ca = d->cfg.tls_ca};
  char err[RDZV_TLS_PATH_MAX + 200];
  if (!rdzv_tls_files_given(&f))
    return 0;
  int rc = rdzv_tls_cfg_new(&f, true, err, sizeof(err), &d->tls);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: TLS: %s\n", err);
    return rc;
  }
  d->tls_rbuf = malloc(RDZV_TLS_READ_BYTES);
  if (d->tls_rbuf == NULL) {
    fprintf(stderr, "rdzvd: TLS: out of memory\n");
    return RDZV_ENOMEM;
  }
  rdzv__log(d, 1,
            "TLS on every TCP link (the Unix socket, the TCPStore "
            "front end and HTTP stay plain)");
  return 0;
}

void rdzv__tls_stop(struct daemon *d) {
  rdzv_tls_cfg_free(d->tls);
  d->tls = NULL;
  free(d->tls_rbuf);
  d->tls_rbuf = NULL;
}

int rdzv__conn_tls_accept(struct conn *c) {
  if (c->d->tls == NULL || !c->tcp)
    return 0;
  c->tls = rdzv_tls_new(c->d->tls, true);
  return c->tls != NULL ? 0 : RDZV_ENOMEM;
}

void rdzv__conn_tls_alloc(struct conn *c, uv_buf_t *buf) {
  buf->base = (char *)c->d->tls_rbuf;
  buf->len = RDZV_TLS_READ_BYTES;
}

bool rdzv__conn_tls_in(struct conn *c, size_t n) {
  struct daemon *d = c->d;
  const uint8_t *p = d->tls_rbuf;
  char peer[96];
  if (!c->tls_seen) {
    c->tls_seen = true;
    if (p[0] != RDZV_TLS_HANDSHAKE_BYTE) {
      /* A plain client (no RDZV_TLS_CA): told in its own protocol. */
      rdzv_tls_free(c->tls);
      c->tls = NULL;
      d->stats.tls_plain_refused++;
      rdzv__conn_peer_desc(c, peer, sizeof(peer));
      rdzv__log_drop(d,
                     "conn %s from %s: refused: plain bytes on the TLS "
                     "port (a peer without TLS settings)",
                     c->name, peer);
      rdzv__conn_refuse(c, RDZV_ETLS,
                        "this daemon's TCP port takes TLS only: give the "
                        "client the cluster's CA (RDZV_TLS_CA or "
                        "RDZV_TLS_DIR; a daemon: --tls-*)");
      return false;
    }
  }
  bool was_ready = rdzv_tls_ready(c->tls);
  int rc = rdzv_tls_read(c->tls, p, n, &c->in);
  /* The handshake's records, the data held until it ended, or an alert
   * that tells the peer why it failed. */
  int wrc = rdzv__tls_send(&c->h.stream, c->tls, &d->stats.bytes_out);
  if (rc == 0 && !was_ready && rdzv_tls_ready(c->tls))
    d->stats.tls_handshakes++;
  /* The peer's close_notify is a half-close: what came before it (maybe
   * in the same read) is decoded and answered; TCP's end closes c. */
  if (rc == RDZV_ECONN_CLOSED)
    rc = 0;
  if (rc == 0 && wrc < 0)
    rc = wrc;
  if (rc < 0) {
    if (rc == RDZV_ETLS) {
      d->stats.tls_failed++;
      rdzv__conn_peer_desc(c, peer, sizeof(peer));
      rdzv__log_drop(d, "conn %s from %s: TLS: %s", c->name, peer,
                     rdzv_tls_error(c->tls));
    }
    rdzv__conn_close_now(c);
    return false;
  }
  return true;
}
