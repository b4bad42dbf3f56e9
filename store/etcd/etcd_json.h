/* The etcd client's pure codec: JSON request bodies built from arguments,
 * the gateway's answers (a unary body with its HTTP status, one message
 * of a watch stream) parsed into results, and the stream's newline
 * splitter. Bytes in, structs out: no I/O, no clock, no globals. Never
 * crashes on any input (fuzzed: tests/fuzz/etcd_json_fuzz.c).
 *
 * Wire rules (etcd's rpc.proto in grpc-gateway's proto3 JSON): keys, values and
 * range ends in base64 (padding required); int64 read from a string or
 * a JSON integer and written as a string; a missing field is zero, false
 * or empty. */
#ifndef RDZV_STORE_ETCD_JSON_H
#define RDZV_STORE_ETCD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/etcd/etcd.h"

/* Which call an answer belongs to (what a 200 body holds). */
enum rdzv_etcd_kind {
  RDZV_ETCD_K_PUT = 0,
  RDZV_ETCD_K_RANGE,
  RDZV_ETCD_K_DELETE,
  RDZV_ETCD_K_TXN,
  RDZV_ETCD_K_GRANT,
  RDZV_ETCD_K_KEEPALIVE,
  RDZV_ETCD_K_REVOKE,
  RDZV_ETCD_K_TTL,
  RDZV_ETCD_K_AUTH,
  RDZV_ETCD_K_COMPACT,
  RDZV_ETCD_K_WATCH, /* an HTTP error answer to a watch request */
  RDZV_ETCD_K_COUNT_
};

struct rdzv_etcd_arena;

/* A parsed answer. Every pointer in it (r.message, r.kvs and their bytes,
 * r.token, ev and their bytes) points into memory the answer owns until
 * rdzv_etcd_answer_free. r.message is never NULL ("" when none). */
struct rdzv_etcd_answer {
  struct rdzv_etcd_result r;
  /* watch messages: */
  struct rdzv_etcd_event *ev;
  size_t nev;
  bool created, canceled;
  int64_t watch_id; /* 0 when omitted; -1 on progress answers, failures */
  /* private: */
  struct rdzv_etcd_arena *arena;
};

/* Parses a unary answer: kind of call, HTTP status http (> 0), body of n
 * bytes (any bytes; need not be NUL-terminated). Fills *a (any previous
 * content is overwritten, not freed) and returns a->r.status:
 *   0; RDZV_EPROTO (a 200 body that is not the gateway's JSON);
 *   RDZV_ELEASE_LOST (keepalive without TTL, timetolive TTL -1);
 *   for an error status, from the body {"error","message","code"} (or
 *   its plain text): RDZV_ETOO_LARGE (code 3 "too large" / "too many
 *   operations", 429 "larger than max"), RDZV_ENOKEY (code 5),
 *   RDZV_ECOMPACTED (code 11 "compacted"; compact_revision unknown: 0),
 *   RDZV_EETCD otherwise (grpc_code, message set);
 *   RDZV_ENOMEM (then only status and message are set).
 * Call rdzv_etcd_answer_free(a) after, whatever the result. */
int rdzv_etcd_json_parse(enum rdzv_etcd_kind kind, int http, const void *body,
                         size_t n, struct rdzv_etcd_answer *a);

/* Parses one watch stream message (one line, n bytes, no '\n' needed):
 * {"result":{...}} or {"error":{...}}. Fills *a and returns a->r.status:
 *   0 (events in a->ev, a->nev; a->r.revision the header's), or
 *   RDZV_ECOMPACTED (a->r.compact_revision), RDZV_EETCD (canceled by
 *   etcd with cancel_reason as message, or an in-stream error with its
 *   grpc_code, http_code and message), RDZV_EPROTO, RDZV_ENOMEM.
 * Call rdzv_etcd_answer_free(a) after. */
int rdzv_etcd_json_parse_watch(const void *msg, size_t n,
                               struct rdzv_etcd_answer *a);

/* Frees what a holds (a zeroed answer is fine); a is zeroed. */
void rdzv_etcd_answer_free(struct rdzv_etcd_answer *a);

/* ---- request bodies: each returns a malloc'd NUL-terminated JSON text
 * (its length in *len, which may be NULL) the caller frees, or NULL on
 * ENOMEM. Byte arguments may be NULL when their length is 0. ---------- */

char *rdzv_etcd_json_put(const void *key, size_t klen, const void *value,
                         size_t vlen, int64_t lease, size_t *len);
/* o may be NULL (the one key). */
char *rdzv_etcd_json_range(const void *key, size_t klen,
                           const struct rdzv_etcd_range_opts *o, size_t *len);
char *rdzv_etcd_json_delete(const void *key, size_t klen, const void *range_end,
                            size_t relen, bool prefix, size_t *len);
char *rdzv_etcd_json_txn(const struct rdzv_etcd_txn *t, size_t *len);
/* {"TTL":ttl_s[,"ID":"id"]} */
char *rdzv_etcd_json_lease_grant(int64_t ttl_s, int64_t id, size_t *len);
/* {"ID":"id"} (keepalive, revoke, timetolive) */
char *rdzv_etcd_json_lease_id(int64_t id, size_t *len);
char *rdzv_etcd_json_auth(const char *user, const char *password, size_t *len);
char *rdzv_etcd_json_compact(int64_t revision, bool physical, size_t *len);
/* {"create_request":{...}} for one watch; o may be NULL. */
char *rdzv_etcd_json_watch(const void *key, size_t klen,
                           const struct rdzv_etcd_watch_opts *o, size_t *len);

/* The end of the range of keys that start with prefix (klen bytes): the
 * prefix without its trailing 0xff bytes, last byte + 1; "\0" (every key
 * from prefix on) when there is none. Writes at most klen bytes (1 when
 * klen is 0) into out and returns how many. */
size_t rdzv_etcd_prefix_end(const void *prefix, size_t klen, uint8_t *out);

/* ---- stream splitting -------------------------------------------------- */

/* Bytes of a stream cut into messages at '\n'. Zero it to start. */
struct rdzv_etcd_lines {
  char *p;
  size_t len, cap, off; /* data in p[off, len) */
};

/* Appends n bytes. 0, RDZV_ENOMEM, or RDZV_ETOO_LARGE when more than max
 * bytes would be held without a '\n' (nothing appended then). */
int rdzv_etcd_lines_add(struct rdzv_etcd_lines *l, const void *p, size_t n,
                        size_t max);
/* The next message: true with *msg (borrowed until the next call on l)
 * and *n set, skipping lines of only whitespace. With eof, what is left
 * without a '\n' is one last message. False when none is (yet) whole. */
bool rdzv_etcd_lines_next(struct rdzv_etcd_lines *l, bool eof, const char **msg,
                          size_t *n);
void rdzv_etcd_lines_free(struct rdzv_etcd_lines *l);

#endif /* RDZV_STORE_ETCD_JSON_H */
