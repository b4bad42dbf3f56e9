/* The PyTorch c10d TCPStore wire protocol, as a pure codec: bytes in,
 * requests out; replies appended to a buffer. No I/O, so it can be fuzzed.
 *
 * Source: the protocol as measured against torch 1.13 and 2.6 clients and
 * read in torch/csrc/distributed/c10d/TCPStore.cpp (see
 * ../shared/notes/tcpstore-protocol.md). Summary: a request is one opcode
 * byte and its arguments; integers are little-endian fixed width (u8,
 * u32, i64, u64); a key or a value is a u64 length and its bytes. There is
 * no request id and no status: a server reports an error by closing the
 * connection. Two dialects number the opcodes differently:
 *   legacy (torch <= 2.0): SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4,
 *     WAIT 5, GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8; no handshake;
 *   v2 (torch >= 2.2): VALIDATE 0 (u32 magic 0x3C85F7CE, first on every
 *     connection), SET 1, COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6,
 *     GETNUMKEYS 7, DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11,
 *     CANCEL_WAIT 12, PING 13; later releases added QUEUE_PUSH 14,
 *     QUEUE_POP 15, QUEUE_LEN 16 (2.8), LIST_KEYS 17 and BARRIER 18
 *     (layouts from PyTorch's sources: see the notes, section 3).
 * This codec parses every one of those; which of them a server serves is
 * its own business (rdzvd's front end: store/daemon/tcpstore/tcpstore.c).
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

/* Name of an operation, for logs ("set", "compare_set", ...). */
const char *rdzv_ts_op_name(enum rdzv_ts_op op);

#endif /* RDZV_STORE_TCPSTORE_WIRE_H */
