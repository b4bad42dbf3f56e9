/* TLS for rdzv's TCP links (rdzvd to rdzvd, a rank or rdzvctl to rdzvd),
 * with OpenSSL's libssl over memory BIOs: the caller owns the socket and
 * its event loop (libuv in rdzvd, the client's own non-blocking core), and
 * this file turns bytes into bytes. Protocol: TLS 1.2 or 1.3 (RFC 8446),
 * certificates checked against one CA file (the cluster's trust root).
 *
 * A session is a filter with two sides:
 *   rdzv_tls_read:  ciphertext from the socket in, plaintext out;
 *   rdzv_tls_write: plaintext in (held until the handshake is done);
 *   rdzv_tls_take:  ciphertext for the socket out (the handshake's own
 *                   records, encrypted plaintext, alerts).
 * After every read or write, the caller takes what is to be sent.
 *
 * Files follow the layout of a Kubernetes TLS Secret with its CA:
 * DIR/tls.crt (this side's certificate chain, PEM), DIR/tls.key (its
 * private key, PEM), DIR/ca.crt (the CA that signs every peer, PEM).
 * tools/tls-certs.sh makes a test cluster's. Thread-safe as OpenSSL is:
 * a config may be shared; a session belongs to one thread. */
#ifndef RDZV_STORE_TLS_H
#define RDZV_STORE_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/wire/wire.h"

/* Most bytes of a path (a file of a TLS config), and of a session's
 * error text. */
#define RDZV_TLS_PATH_MAX 1024u
#define RDZV_TLS_ERR_MAX 256u

/* The first byte of a TLS record of the handshake (RFC 8446 5.1,
 * ContentType handshake = 22): a peer's first byte tells a TLS client
 * from a plain one (an rdzv frame starts with its protocol magic). */
#define RDZV_TLS_HANDSHAKE_BYTE 0x16

/* Where the files are: each path NULL or empty for "not given". */
struct rdzv_tls_files {
  const char *dir;  /* DIR/{tls.crt,tls.key,ca.crt} for what is not given */
  const char *cert; /* this side's certificate chain (PEM) */
  const char *key;  /* its private key (PEM) */
  const char *ca;   /* the CA file (PEM) peers' certificates must chain to */
};

/* Whether f names anything (then TLS is wanted). */
bool rdzv_tls_files_given(const struct rdzv_tls_files *f);

/* One side's configuration (an OpenSSL SSL_CTX): opaque. */
typedef struct rdzv_tls_cfg rdzv_tls_cfg_t;

/* Loads a configuration from f. The CA is required; the certificate and
 * key come as a pair or not at all (a client without a certificate: a
 * rank may go without, a daemon may not: see need_cert). need_cert:
 * refuse a configuration without a certificate (rdzvd's).
 * On success *out owns the configuration (rdzv_tls_cfg_free). Errors:
 * RDZV_ETLS (a file missing or unreadable, not PEM, a key that does not
 * match the certificate, no CA, a certificate without its key; err says
 * which file and why, at most errlen bytes with its NUL), RDZV_ENOMEM.
 * A directory's missing tls.crt and tls.key are "not given", not an
 * error, unless need_cert. */
int rdzv_tls_cfg_new(const struct rdzv_tls_files *f, bool need_cert, char *err,
                     size_t errlen, rdzv_tls_cfg_t **out);
/* Whether cfg has a certificate of its own. */
bool rdzv_tls_cfg_has_cert(const rdzv_tls_cfg_t *cfg);
/* Frees cfg (sessions made from it keep what they need). NULL is a no-op. */
void rdzv_tls_cfg_free(rdzv_tls_cfg_t *cfg);

/* One TLS session over a connection: opaque. */
typedef struct rdzv_tls rdzv_tls_t;

/* A session of cfg: the accepting side (server: asks the peer for a
 * certificate and checks the one it gets; a peer without one is allowed
 * here, and rdzv_tls_peer_verified says so) or the connecting side
 * (client: the server must present a certificate of the CA, and gets
 * cfg's own when it asks). Returns NULL when out of memory. Free with
 * rdzv_tls_free. */
rdzv_tls_t *rdzv_tls_new(rdzv_tls_cfg_t *cfg, bool server);
void rdzv_tls_free(rdzv_tls_t *t);

/* n bytes of ciphertext from the peer (n may be 0: nothing came, but the
 * handshake may go on). The plaintext they complete is appended to plain.
 * Returns 0, RDZV_ETLS (the handshake or a record failed: rdzv_tls_error
 * says why, e.g. "certificate verify failed: certificate has expired";
 * take the alert with rdzv_tls_take and send it before closing),
 * RDZV_ECONN_CLOSED (the peer closed the session), RDZV_ENOMEM. */
int rdzv_tls_read(rdzv_tls_t *t, const uint8_t *p, size_t n,
                  struct rdzv_buf *plain);
/* n bytes of plaintext to send: encrypted at once once the handshake is
 * done, held (copied) until then. Returns 0, RDZV_ETLS, RDZV_ENOMEM. */
int rdzv_tls_write(rdzv_tls_t *t, const uint8_t *p, size_t n);
/* Appends the ciphertext waiting to be sent to out. Returns the bytes
 * appended (0: none), or RDZV_ENOMEM. */
long rdzv_tls_take(rdzv_tls_t *t, struct rdzv_buf *out);
/* Bytes of ciphertext waiting to be taken. */
size_t rdzv_tls_pending(const rdzv_tls_t *t);
/* Whether the handshake is done (then rdzv_tls_write encrypts at once). */
bool rdzv_tls_ready(const rdzv_tls_t *t);
/* Whether the peer presented a certificate that chains to the CA (true
 * on a client once ready: a server must; on a server: a daemon peer). */
bool rdzv_tls_peer_verified(const rdzv_tls_t *t);
/* Why the last call failed (RDZV_ETLS), "" if none. Owned by t. */
const char *rdzv_tls_error(const rdzv_tls_t *t);

#endif /* RDZV_STORE_TLS_H */
