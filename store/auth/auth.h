/* rdzv per-job authentication: the proofs of the hello's challenge and
 * response, a job's secret derived from a site key, and loading a secret
 * from a file.
 *
 * Protocol (store/wire/wire.h, RDZV_MSG_HELLO and RDZV_MSG_AUTH): a peer
 * that holds the job's secret K sends a fresh 32-byte nonce Nc in its
 * hello; a daemon that holds K answers with its own fresh nonce Ns and
 * the server proof HMAC-SHA256(K, M("S")); the peer checks it (a fake
 * parent or root cannot prove K), then sends the client proof
 * HMAC-SHA256(K, M("C")), which the daemon checks. M(side) is
 *
 *   "rdzv-auth-v1" (12 bytes) | side (1 byte, 'S' or 'C') |
 *   u8 job id length | job id | u16 port (LE) | Nc (32 bytes) |
 *   Ns (32 bytes)
 *
 * The secret itself never crosses the wire; a proof is bound to both
 * nonces (a replayed hello or response meets a new Ns and fails), to the
 * job id (one job's secret opens no other job), to its side (a daemon's
 * own proof, reflected back to it, is not a client's) and to the daemon's
 * TCP port as the peer dialed it (0 over a Unix socket): a forwarder that
 * took another port of a parent's range (a shared host, any local user)
 * and relays to the daemon's real port cannot pass a challenge through,
 * because the two ends compute it for different ports. (So a port
 * mapping between them, NAT or a Service whose port differs from its
 * targetPort, fails every hello: use the same port number.)
 * HMAC-SHA256 is RFC 2104 over FIPS 180-4's SHA-256, computed by
 * OpenSSL's libcrypto, not by rdzv.
 *
 * rdzv_auth_proof, rdzv_auth_equal and rdzv_auth_job_secret are pure
 * (bytes in, bytes out). rdzv_auth_nonce reads the system's random
 * generator; rdzv_auth_secret_load reads a file. */
#ifndef RDZV_STORE_AUTH_H
#define RDZV_STORE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDZV_AUTH_NONCE_BYTES 32u
#define RDZV_AUTH_PROOF_BYTES 32u
/* A secret's length after trailing whitespace is dropped: at least 16
 * bytes (128 bits if random), at most 1024. */
#define RDZV_AUTH_SECRET_MIN_BYTES 16u
#define RDZV_AUTH_SECRET_MAX_BYTES 1024u
/* A job id's length in a proof (the hello's limit). */
#define RDZV_AUTH_JOB_MAX_BYTES 255u

enum rdzv_auth_side {
  RDZV_AUTH_SERVER = 'S', /* the daemon that answered the hello */
  RDZV_AUTH_CLIENT = 'C', /* the peer that sent it */
};

/* out (RDZV_AUTH_PROOF_BYTES) = HMAC-SHA256(secret, M(side)) as the
 * header describes. secret: secret_len bytes (1 .. 1024); job: job_len
 * bytes (1 .. 255); port: the daemon's TCP port (0: a Unix socket);
 * cnonce, snonce: RDZV_AUTH_NONCE_BYTES each. Returns 0,
 * or -EINVAL (a length out of range, an unknown side, NULL) with out
 * zeroed; never fails otherwise. */
int rdzv_auth_proof(const uint8_t *secret, size_t secret_len,
                    enum rdzv_auth_side side, const uint8_t *job,
                    size_t job_len, uint16_t port, const uint8_t *cnonce,
                    const uint8_t *snonce, uint8_t *out);

/* The port a proof is bound to, of an address (the peer's, as a peer
 * dialed it; the local one, as the daemon listened): an AF_INET or
 * AF_INET6 address's port, 0 for any other family (AF_UNIX) or NULL. */
uint16_t rdzv_auth_port_of(const struct sockaddr_storage *sa);

/* 1 if the n bytes at a and b are equal, else 0, in time that depends on
 * n only (CRYPTO_memcmp). */
int rdzv_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Writes the n bytes at p as 2n lowercase hex digits and a NUL to out
 * (2n + 1 bytes). */
void rdzv_auth_hex(const uint8_t *p, size_t n, char *out);

/* Zeroes n bytes at p in a way the compiler keeps (OPENSSL_cleanse): for
 * copies of a secret. */
void rdzv_auth_wipe(void *p, size_t n);

/* Fills out (n bytes) from OpenSSL's CSPRNG (RAND_bytes). 0, or -EIO when
 * the generator fails (out is then zeroed: never use it). */
int rdzv_auth_nonce(uint8_t *out, size_t n);

/* Nonces that the daemon which made them recognizes: a node is both a
 * server (to its children) and a client (to its parent) of the same job
 * with the same secret, so a fake parent that holds no secret could send
 * the node's own hello (its nonce Nc) back to the node's own port, and
 * relay the node's challenge there (Ns and the server proof over Nc, Ns)
 * to the node as its parent's, and the node's answer (the client proof)
 * back again: both proofs would be right, made by the node itself. So a
 * daemon's hellos carry nonces it can tell from any other, and it refuses
 * a hello that carries one (rdzvd: RDZV_EAUTH, "a reflected hello").
 * key: RDZV_AUTH_OWN_KEY_BYTES, drawn at random by the daemon at start,
 * never sent nor stored.
 *   out (RDZV_AUTH_NONCE_BYTES) = R | the first 16 bytes of
 *     HMAC-SHA256(key, "rdzv-own-nonce-v1" (17 bytes) | R),
 *   R = 16 bytes from OpenSSL's CSPRNG (a nonce is fresh by R: 128 bits).
 * rdzv_auth_own_nonce: 0, or -EINVAL (NULL) / -EIO (no random bytes; out
 * zeroed). rdzv_auth_is_own_nonce: 1 if nonce (RDZV_AUTH_NONCE_BYTES) was
 * made with key, else 0 (a peer's random nonce: 0 but with probability
 * 2^-128), in time that does not depend on where the tag differs. */
#define RDZV_AUTH_OWN_KEY_BYTES 32u
int rdzv_auth_own_nonce(const uint8_t *key, uint8_t *out);
int rdzv_auth_is_own_nonce(const uint8_t *key, const uint8_t *nonce);

/* A job's secret derived from a site key (as munge's key is, one file on
 * every host, readable by root only), so that every host's Prolog makes
 * the same secret without talking to a peer:
 *   out (32 bytes) = HMAC-SHA256(site_key,
 *                       "rdzv-job-secret-v1" | u8 len(job) | job)
 * written as 64 lowercase hex digits and a NUL (out_hex: 65 bytes).
 * Knowing one job's secret tells nothing of another's. site_key: 16 ..
 * 1024 bytes; job: 1 .. 255 bytes. 0 or -EINVAL. */
int rdzv_auth_job_secret(const uint8_t *site_key, size_t site_key_len,
                         const uint8_t *job, size_t job_len, char *out_hex);

/* Reads a secret from path into out (cap >= RDZV_AUTH_SECRET_MAX_BYTES):
 * the file's bytes without trailing spaces, tabs, CR and LF. Refused
 * unless the file is a regular file (a link to one is followed: a
 * Kubernetes Secret volume's files are links) that others can neither
 * read nor write (mode & 0006 == 0; group access is allowed, for a
 * Kubernetes fsGroup), and the secret is 16 .. 1024 bytes (the file at
 * most 64 bytes more, of trailing whitespace). A FIFO is refused without
 * waiting for a writer (opened O_NONBLOCK). On success
 * *len is set and 0 returned. Otherwise a negative errno (-ENOENT,
 * -EACCES, -EPERM for a mode others can read, -EINVAL for a length out of
 * range or not a regular file, ...) and err (errlen bytes, NUL-ended)
 * says what, naming path; the text never holds the secret's bytes. */
int rdzv_auth_secret_load(const char *path, uint8_t *out, size_t cap,
                          size_t *len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
