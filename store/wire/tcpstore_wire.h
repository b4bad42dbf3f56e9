/* The PyTorch c10d TCPStore wire protocol, as a pure codec: bytes in,
 * requests out; replies appended to a buffer. No I/O, so it can be fuzzed.
 *
 * Source: the protocol as measured against torch 1.13 and 2.6 clients and
 * read in torch/csrc/distributed/c10d/TCPStore.cpp and
 * TCPStoreBackend.cpp (docs/pytorch.md tells what rdzv serves).
 * Summary: a request is one opcode byte and its arguments; integers are
 * little-endian fixed width (u8, u32, i64, u64); a key or a value is a
 * u64 length and its bytes. There is no request id and no status: a
 * server reports an error by closing the connection. Two dialects number
 * the opcodes differently:
 *   legacy (torch <= 2.0): SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4,
 *     WAIT 5, GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8; no handshake;
 *   v2 (torch >= 2.2): VALIDATE 0 (u32 magic 0x3C85F7CE, first on every
 *     connection), SET 1, COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6,
 *     GETNUMKEYS 7, DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11,
 *     CANCEL_WAIT 12, PING 13; later releases added QUEUE_PUSH 14,
 *     QUEUE_POP 15, QUEUE_LEN 16 (2.8), LIST_KEYS 17 and BARRIER 18
 *     (layouts from PyTorch's sources, TCPStoreBackend.cpp).
 * This codec parses every one of those; which of them a server serves is
 * its own business (rdzvd's front end: store/daemon/tcpstore/bridge.c).
 * The dialect of a connection is told by its first 5 bytes: 00 ce f7 85
 * 3c (VALIDATE with the magic) is v2, anything else legacy. */
#ifndef RDZV_STORE_TCPSTORE_WIRE_H
#define RDZV_STORE_TCPSTORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "store/wire/wire.h"

#define RDZV_TS_MAGIC 0x3C85F7CEu

enum rdzv_ts_dialect {
  RDZV_TS_UNKNOWN = 0, /* fewer than 5 bytes seen yet */
  RDZV_TS_LEGACY = 1,
  RDZV_TS_V2 = 2,
};

/* Operations, numbered independently of either dialect. */
enum rdzv_ts_op {
  RDZV_TS_SET = 1,
  RDZV_TS_COMPARE_SET,
  RDZV_TS_GET,
  RDZV_TS_ADD,
  RDZV_TS_CHECK,
  RDZV_TS_WAIT,
  RDZV_TS_GETNUMKEYS,
  RDZV_TS_WATCH_KEY, /* legacy only; not served */
  RDZV_TS_DELETE_KEY,
  RDZV_TS_APPEND,
  RDZV_TS_MULTI_GET,
  RDZV_TS_MULTI_SET,
  RDZV_TS_CANCEL_WAIT,
  RDZV_TS_PING,
  RDZV_TS_VALIDATE,
  RDZV_TS_QUEUE_PUSH, /* v2, >= 2.8: key, value; no reply */
  RDZV_TS_QUEUE_POP,  /* v2, >= 2.8: key; i64 length, then a blob if > 0 */
  RDZV_TS_QUEUE_LEN,  /* v2, >= 2.8: key; i64 */
  RDZV_TS_LIST_KEYS,  /* v2, >= 2.10: nothing; i64 n, then n strings */
  RDZV_TS_BARRIER,    /* v2, >= 2.11: key, i64 world size; u8 0 when
                         released */
};

/* Limits on one request; a request over them is an error (the server
 * closes the connection, as TCPStore's own libuv server does). */
struct rdzv_ts_limits {
  uint32_t max_key_bytes;
  uint32_t max_value_bytes;
  uint32_t max_keys; /* keys of one CHECK / WAIT / MULTI_* (libuv: 131072) */
};

/* Most keys (or key/value pairs) one request may carry. */
#define RDZV_TS_MAX_KEYS 131072u

/* A parsed request. keys and vals point into the parsed bytes (valid until
 * those are consumed) and are arrays the caller provides (see
 * rdzv_ts_parse). */
struct rdzv_ts_req {
  enum rdzv_ts_op op;
  uint32_t nkeys;
  struct rdzv_slice *keys; /* SET, GET, ADD, DELETE, APPEND, QUEUE_*,
                              BARRIER: keys[0] */
  uint32_t nvals;
  struct rdzv_slice *vals; /* SET, APPEND, QUEUE_PUSH: vals[0];
                              COMPARE_SET: expected, desired; MULTI_SET:
                              one per key */
  int64_t delta;           /* ADD: the delta; BARRIER: the world size */
  uint32_t u32;            /* PING: the nonce; VALIDATE: the magic */
};

/* Per-connection parser state. Zero-initialize. */
struct rdzv_ts_parser {
  enum rdzv_ts_dialect dialect;
  int validated; /* v2: VALIDATE seen (it must come once, first) */
};

/* Parses the first request in p[0..n). keys and vals are arrays of cap
 * slices each (cap >= 1); a request with more keys than cap is an error
 * (RDZV_EKEY_TOO_LONG is not used; see returns). On the first call it
 * also settles the dialect (which needs 5 bytes).
 * Returns:
 *   1                 *req is filled, *used = the request's size in bytes;
 *   0                 p holds a valid prefix of a request: read more;
 *   RDZV_EPROTO       unknown opcode, an opcode of the other dialect,
 *                     a legacy WATCH_KEY (C++ watchKey callbacks: not
 *                     parsed), or VALIDATE not first / not once / with a
 *                     wrong magic;
 *   RDZV_EKEY_TOO_LONG, RDZV_EVALUE_TOO_BIG  a key or value over lim;
 *   RDZV_EFRAME_TOO_BIG  more keys than lim->max_keys or cap.
 * Never reads outside p[0..n). */
int rdzv_ts_parse(struct rdzv_ts_parser *ps, const uint8_t *p, size_t n,
                  const struct rdzv_ts_limits *lim, struct rdzv_slice *keys,
                  struct rdzv_slice *vals, uint32_t cap,
                  struct rdzv_ts_req *req, size_t *used);

/* Reply encoders: append to b. Return 0 or RDZV_ENOMEM. */
int rdzv_ts_put_u8(struct rdzv_buf *b, uint8_t v);
int rdzv_ts_put_u32(struct rdzv_buf *b, uint32_t v);
int rdzv_ts_put_i64(struct rdzv_buf *b, int64_t v);
/* A blob: u64 length, then the bytes. */
int rdzv_ts_put_blob(struct rdzv_buf *b, const void *p, size_t n);

/* Reply bytes of WAIT / CHECK / CANCEL_WAIT. */
#define RDZV_TS_STOP_WAITING 0u
#define RDZV_TS_WAIT_CANCELED 1u
#define RDZV_TS_READY 0u
#define RDZV_TS_NOT_READY 1u

/* ---- client side: the bytes a TCPStore client sends and reads -------- */

/* Appends req's bytes in dialect d (RDZV_TS_LEGACY or RDZV_TS_V2) to b:
 * the opcode byte of d's numbering, then the arguments as rdzv_ts_parse
 * reads them (keys[0..nkeys), vals[0..nvals) as u64 length + bytes, the
 * delta as i64, the nonce or magic as u32), so that rdzv_ts_parse gives
 * req back and consumes exactly these bytes. req and its slices are
 * borrowed for the call. The caller sends VALIDATE first on a v2
 * connection. Returns:
 *   0; RDZV_EPROTO  d is neither dialect, or op is not in d (WATCH_KEY
 *                   in v2; VALIDATE, APPEND, MULTI_*, CANCEL_WAIT, PING,
 *                   QUEUE_*, LIST_KEYS, BARRIER in legacy), or req has
 *                   the wrong number of keys or values for op (SET: 1 and
 *                   1; COMPARE_SET: 1 and 2; MULTI_SET: n and n);
 *   RDZV_ENOMEM     (b keeps what it held before the call). */
int rdzv_ts_encode(enum rdzv_ts_dialect d, const struct rdzv_ts_req *req,
                   struct rdzv_buf *b);

/* A reply a client reads. blobs point into the parsed bytes. */
struct rdzv_ts_reply {
  int64_t i64;  /* ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN; QUEUE_POP: the
                   length before the pop; LIST_KEYS: the count */
  uint32_t u32; /* PING: the nonce echoed */
  uint8_t u8;   /* CHECK, WAIT, CANCEL_WAIT, BARRIER, WATCH_KEY (legacy:
                   3, KEY_CALLBACK_REGISTERED) */
  uint32_t nblobs;
  struct rdzv_slice *blobs; /* GET, COMPARE_SET: 1; MULTI_GET: one per key
                               asked; LIST_KEYS: i64 of them; QUEUE_POP: 1
                               when i64 > 0 */
};

/* Whether op gets a reply at all (SET, APPEND, MULTI_SET, VALIDATE and
 * QUEUE_PUSH do not). */
int rdzv_ts_op_has_reply(enum rdzv_ts_op op);

/* Parses the reply to op (a request of nkeys keys: MULTI_GET's answer has
 * that many blobs) at the start of p[0..n). blobs is an array of cap
 * slices the caller provides. Returns:
 *   1                    *out filled, *used = the reply's size in bytes;
 *   0                    p holds a valid prefix: read more;
 *   RDZV_EPROTO          op has no reply (rdzv_ts_op_has_reply);
 *   RDZV_EVALUE_TOO_BIG  a blob over max_value_bytes;
 *   RDZV_EFRAME_TOO_BIG  more blobs than cap (MULTI_GET's nkeys, a
 *                        LIST_KEYS count), or a negative count.
 * Never reads outside p[0..n); pure (no I/O, no allocation). */
int rdzv_ts_parse_reply(enum rdzv_ts_op op, uint32_t nkeys, const uint8_t *p,
                        size_t n, uint32_t max_value_bytes,
                        struct rdzv_slice *blobs, uint32_t cap,
                        struct rdzv_ts_reply *out, size_t *used);

/* Name of an operation, for logs ("set", "compare_set", ...). */
const char *rdzv_ts_op_name(enum rdzv_ts_op op);

#endif /* RDZV_STORE_TCPSTORE_WIRE_H */
