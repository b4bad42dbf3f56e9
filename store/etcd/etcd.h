/* An etcd v3 client for rdzv, over etcd's JSON gateway (grpc-gateway,
 * "/v3/..." POST endpoints, etcd 3.4 and later), with libcurl's multi
 * interface driven from a libuv loop (socket and timer callbacks, no
 * thread of its own) and jansson for JSON.
 *
 * Protocol source: etcd's api/etcdserverpb/rpc.proto as mapped to JSON by
 * grpc-gateway (proto3 JSON: bytes in base64, int64 as strings, zero
 * fields omitted); the gateway's behaviour as measured against Debian's
 * etcd 3.4 (tests/etcd checks it) is: HTTP/1.1 only, a missing TTL in a
 * keepalive answer means the lease is gone, "Grpc-Metadata-hasleader" on
 * streams, newline-split stream messages, the 1.5 MiB and 128-operation
 * limits, the "Authorization: <token>" header.
 *
 * Threading: every call runs on the loop thread of rdzv_etcd_new's loop;
 * every callback runs on it too, never inside the call that started the
 * request (at the earliest on the next loop iteration).
 *
 * Errors: the project's status codes (rdzv/error.h). Per request, the
 * callback's result carries status and, when etcd (or libcurl) said why,
 * its message (etcd's own text, e.g. "etcdserver: request is too large",
 * or libcurl's error buffer):
 *   RDZV_ENOMEM            memory;
 *   RDZV_EBAD_ADDR         an endpoint URL not understood (at new);
 *   -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT
 *                          no endpoint answered (each was tried once, in
 *                          order, starting with the last one that
 *                          worked), or the request's timeout passed;
 *   RDZV_ETOO_LARGE        etcd's request-size or txn operation limit
 *                          (HTTP 400 code 3 "too large" / "too many
 *                          operations", or HTTP 429 "larger than max");
 *   RDZV_ENOKEY            unknown lease (404 code 5);
 *   RDZV_ELEASE_LOST       a keepalive answered without a TTL, or a
 *                          time-to-live of -1: the lease is gone;
 *   RDZV_ECOMPACTED        a range or watch at a compacted revision
 *                          (compact_revision in the result; only a
 *                          watch learns it: etcd's answer to a range or
 *                          a compaction names none, 0 there);
 *   RDZV_ECANCELED         the request or watch was canceled, or the client
 *                          closed before it finished;
 *   RDZV_EPROTO            the answer was not the JSON the gateway sends;
 *   RDZV_EETCD             every other refusal (auth, permission, NOSPACE,
 *                          no leader, 5xx): see http, grpc_code, message.
 * A request is tried on the next endpoint when the connection to one
 * fails (refused, reset, unreachable) before an answer; it is not tried
 * again after a timeout or an answer (a write may have been applied).
 * A 401 "invalid auth token" gets one re-authentication and one retry.
 *
 * Ownership: strings and buffers passed in are copied when the call
 * returns; results and events are borrowed for the callback only. */
#ifndef RDZV_STORE_ETCD_H
#define RDZV_STORE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct rdzv_etcd;
struct rdzv_etcd_txn;
struct rdzv_etcd_watch;

struct rdzv_etcd_config {
  /* Comma-separated base URLs, e.g. "http://127.0.0.1:2379,http://h2:2379"
   * (https:// for TLS). At most RDZV_ETCD_MAX_ENDPOINTS, each under 256
   * bytes. Required. */
  const char *endpoints;
  /* Per-request timeout in ms for unary calls (0: 5000). Streams (watch)
   * have none; their connection timeout is this too. */
  uint32_t timeout_ms;
  /* Auth (NULL or "": none): user and password, turned into a token by
   * /v3/auth/authenticate before the first request and again when etcd
   * answers 401. */
  const char *user, *password;
  /* TLS (NULL or "": libcurl's default): CA bundle, client certificate
   * and key (PEM files), passed to libcurl. */
  const char *ca_file, *cert_file, *key_file;
};

#define RDZV_ETCD_MAX_ENDPOINTS 16

/* Creates a client on loop. Contacts nobody yet. 0 with *out set, or
 * RDZV_EBAD_ADDR (an endpoint not http:// or https://, empty, too long or
 * too many), RDZV_ENOMEM; *out NULL then. */
int rdzv_etcd_new(uv_loop_t *loop, const struct rdzv_etcd_config *cfg,
                  struct rdzv_etcd **out);

/* Ends every request and watch (their callbacks run with RDZV_ECANCELED,
 * from the loop), closes the client's handles, then calls done(arg)
 * (which may be NULL) from the loop; e is freed after done returns. No
 * other call on e after this one. */
void rdzv_etcd_close(struct rdzv_etcd *e, void (*done)(void *arg), void *arg);

/* The endpoint requests go to now (the last that worked), borrowed. */
const char *rdzv_etcd_endpoint(const struct rdzv_etcd *e);

/* Counters since rdzv_etcd_new: requests sent (each try counts), request
 * body bytes sent, response bytes received, failovers to another
 * endpoint, re-authentications. */
/* Requests' latency (libcurl's total time of each request that ended,
 * watches aside) is counted in RDZV_ETCD_LAT_BUCKETS by upper bound in
 * microseconds (rdzv_etcd_latency_bounds_us; the last UINT64_MAX). */
#define RDZV_ETCD_LAT_BUCKETS 9
extern const uint64_t rdzv_etcd_latency_bounds_us[RDZV_ETCD_LAT_BUCKETS];
struct rdzv_etcd_stats {
  uint64_t requests, bytes_out, bytes_in, failovers, reauths;
  uint64_t latency_hist[RDZV_ETCD_LAT_BUCKETS];
  uint64_t latency_us_sum, latency_count;
};
void rdzv_etcd_stats(const struct rdzv_etcd *e, struct rdzv_etcd_stats *out);

/* A key and value as etcd holds them (mvccpb.KeyValue). key and value are
 * borrowed (decoded bytes, not NUL-terminated; value NULL when vlen 0). */
struct rdzv_etcd_kv {
  const uint8_t *key;
  size_t klen;
  const uint8_t *value;
  size_t vlen;
  int64_t create_revision, mod_revision, version, lease;
};

/* The answer to one request. Fields not set by that kind of request are 0
 * (or NULL). */
struct rdzv_etcd_result {
  int status;          /* 0 or an error (see above) */
  const char *message; /* etcd's or libcurl's text; "" when none */
  int http;            /* HTTP status, 0 when none came */
  int grpc_code;       /* etcd's code in an error body, 0 when none */
  int64_t revision;    /* header.revision (the store's, after the call) */
  /* range, and the response_range parts of a txn, in order: */
  const struct rdzv_etcd_kv *kvs;
  size_t nkvs;
  int64_t count;   /* range: keys in the range (all of them, not only kvs) */
  bool more;       /* range: a limit cut the answer short */
  int64_t deleted; /* delete-range; txn: sum of its deletes */
  bool succeeded;  /* txn: the compares held */
  int64_t compact_revision;               /* RDZV_ECOMPACTED */
  int64_t lease_id, ttl_s, granted_ttl_s; /* lease calls */
  const char *token;                      /* authenticate */
};

typedef void (*rdzv_etcd_cb)(void *arg, const struct rdzv_etcd_result *r);

/* ---- key-value (each: 0 when the request was queued, cb called once
 * later; RDZV_ENOMEM and cb never called otherwise) ------------------------ */

/* /v3/kv/put: key (klen > 0) = value, on lease (0: none). */
int rdzv_etcd_put(struct rdzv_etcd *e, const void *key, size_t klen,
                  const void *value, size_t vlen, int64_t lease,
                  rdzv_etcd_cb cb, void *arg);

/* Range options (all 0: the one key). */
struct rdzv_etcd_range_opts {
  const void *range_end; /* NULL: the key alone */
  size_t relen;
  bool prefix;      /* range_end = the prefix's end (key with its last
                       byte + 1); range_end ignored */
  int64_t limit;    /* 0: no limit */
  int64_t revision; /* 0: the newest */
  bool count_only;
  bool keys_only;
  bool serializable; /* a local read of the member, not linearizable */
};

/* /v3/kv/range. */
int rdzv_etcd_range(struct rdzv_etcd *e, const void *key, size_t klen,
                    const struct rdzv_etcd_range_opts *o, rdzv_etcd_cb cb,
                    void *arg);

/* /v3/kv/deleterange: the key, or the range [key, range_end), or with
 * prefix the keys that start with key. */
int rdzv_etcd_delete(struct rdzv_etcd *e, const void *key, size_t klen,
                     const void *range_end, size_t relen, bool prefix,
                     rdzv_etcd_cb cb, void *arg);

/* ---- transactions ---------------------------------------------------------- */

enum rdzv_etcd_target {
  RDZV_ETCD_CREATE = 0, /* create_revision (0: the key is absent) */
  RDZV_ETCD_MOD,        /* mod_revision */
  RDZV_ETCD_VERSION,    /* version */
  RDZV_ETCD_VALUE,      /* the value's bytes */
};
enum rdzv_etcd_result_op {
  RDZV_ETCD_EQUAL = 0,
  RDZV_ETCD_GREATER,
  RDZV_ETCD_LESS,
  RDZV_ETCD_NOT_EQUAL,
};

/* A transaction being built: compares, then the operations of its success
 * branch (then = true) and its failure branch. NULL on ENOMEM. Each add
 * returns 0 or RDZV_ENOMEM (then the txn is unusable: free it). */
struct rdzv_etcd_txn *rdzv_etcd_txn_new(void);
/* Compare: num for CREATE/MOD/VERSION, value (vlen bytes) for VALUE. */
int rdzv_etcd_txn_compare(struct rdzv_etcd_txn *t, const void *key, size_t klen,
                          enum rdzv_etcd_target target,
                          enum rdzv_etcd_result_op result, int64_t num,
                          const void *value, size_t vlen);
int rdzv_etcd_txn_put(struct rdzv_etcd_txn *t, bool then, const void *key,
                      size_t klen, const void *value, size_t vlen,
                      int64_t lease);
int rdzv_etcd_txn_delete(struct rdzv_etcd_txn *t, bool then, const void *key,
                         size_t klen, bool prefix);
int rdzv_etcd_txn_range(struct rdzv_etcd_txn *t, bool then, const void *key,
                        size_t klen, bool prefix);
/* How many operations (compares not counted: etcd's --max-txn-ops counts
 * each branch's) the larger branch holds, and the request's size estimate
 * in bytes (etcd's protobuf size: keys, values and a few bytes per op),
 * for chunking below the server's limits. */
/* Nests sub (a whole transaction: its compares and branches) as one
 * operation of t's then (true) or else branch, a request_txn; its
 * answers' range kvs and deletes are counted into the result in order.
 * Takes sub (freed, also on error). 0 or RDZV_ENOMEM. */
int rdzv_etcd_txn_nest(struct rdzv_etcd_txn *t, bool then,
                       struct rdzv_etcd_txn *sub);
size_t rdzv_etcd_txn_ops(const struct rdzv_etcd_txn *t);
size_t rdzv_etcd_txn_bytes(const struct rdzv_etcd_txn *t);
void rdzv_etcd_txn_free(struct rdzv_etcd_txn *t);
/* /v3/kv/txn. Takes t (freed by the client, also on error). */
int rdzv_etcd_txn(struct rdzv_etcd *e, struct rdzv_etcd_txn *t, rdzv_etcd_cb cb,
                  void *arg);

/* /v3/kv/compaction: drops history before revision (physical: etcd
 * answers once the compaction is applied on disk). r->revision. An
 * already compacted revision: RDZV_ECOMPACTED; a future one: RDZV_EETCD. */
int rdzv_etcd_compact(struct rdzv_etcd *e, int64_t revision, bool physical,
                      rdzv_etcd_cb cb, void *arg);

/* ---- leases ---------------------------------------------------------------- */

/* /v3/lease/grant: ttl_s seconds; id 0 lets etcd choose. r->lease_id,
 * r->ttl_s. */
int rdzv_etcd_lease_grant(struct rdzv_etcd *e, int64_t ttl_s, int64_t id,
                          rdzv_etcd_cb cb, void *arg);
/* /v3/lease/keepalive, one refresh: r->ttl_s, or RDZV_ELEASE_LOST. */
int rdzv_etcd_lease_keepalive(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                              void *arg);
/* /v3/lease/revoke (deletes the keys on it). RDZV_ENOKEY if unknown. */
int rdzv_etcd_lease_revoke(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                           void *arg);
/* /v3/lease/timetolive: r->ttl_s and r->granted_ttl_s, or
 * RDZV_ELEASE_LOST. */
int rdzv_etcd_lease_ttl(struct rdzv_etcd *e, int64_t id, rdzv_etcd_cb cb,
                        void *arg);

/* ---- auth ------------------------------------------------------------------ */

/* /v3/auth/authenticate with the configured user: r->token. The client
 * does this itself when needed; exposed for tests and tools. */
int rdzv_etcd_authenticate(struct rdzv_etcd *e, rdzv_etcd_cb cb, void *arg);

/* ---- watch ----------------------------------------------------------------- */

enum rdzv_etcd_event_type { RDZV_ETCD_PUT = 0, RDZV_ETCD_DELETE = 1 };

struct rdzv_etcd_event {
  enum rdzv_etcd_event_type type;
  struct rdzv_etcd_kv kv;      /* for DELETE: key and mod_revision */
  struct rdzv_etcd_kv prev_kv; /* with prev_kv, when there was one (klen 0
                                  otherwise) */
};

/* What a watch delivers, one call per message of the stream:
 *   status 0, n >= 0 events (n 0: the watch was created, or a progress
 *   notification), revision = the message's header revision (events carry
 *   their own mod_revision);
 *   status < 0: the watch ended and w is freed after the call: the stream
 *   failed (an endpoint's error, "etcdserver: no leader", the connection
 *   lost), RDZV_ECOMPACTED (compact_revision: read again, then watch from
 *   that read's revision + 1), or RDZV_ECANCELED (rdzv_etcd_watch_cancel
 *   or close). message as in results. */
typedef void (*rdzv_etcd_watch_cb)(void *arg, int status, const char *message,
                                   int64_t revision, int64_t compact_revision,
                                   const struct rdzv_etcd_event *ev, size_t n);

struct rdzv_etcd_watch_opts {
  const void *range_end; /* as in range */
  size_t relen;
  bool prefix;
  int64_t start_revision; /* 0: from now */
  bool prev_kv;
  bool progress_notify; /* etcd's periodic empty messages */
};

/* /v3/watch, one HTTP request per watch (its body sent whole), with
 * "Grpc-Metadata-hasleader: true" so that a member without a leader ends
 * it. 0 with *out set (cb called for every message until one with status
 * < 0), or RDZV_ENOMEM. */
int rdzv_etcd_watch(struct rdzv_etcd *e, const void *key, size_t klen,
                    const struct rdzv_etcd_watch_opts *o, rdzv_etcd_watch_cb cb,
                    void *arg, struct rdzv_etcd_watch **out);
/* Ends w: cb runs once more with RDZV_ECANCELED, from the loop. */
void rdzv_etcd_watch_cancel(struct rdzv_etcd_watch *w);

#endif /* RDZV_STORE_ETCD_H */
