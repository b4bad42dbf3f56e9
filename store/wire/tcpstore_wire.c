/* The c10d TCPStore wire codec: see store/tcpstore_wire.h. */
#include "store/wire/tcpstore_wire.h"

#include <string.h>

/* A read cursor over p[0..n). */
struct cur {
  const uint8_t *p;
  size_t n, off;
};

/* 1: read; 0: not all there yet. */
static int get_u8(struct cur *c, uint8_t *v) {
  if (c->n - c->off < 1)
    return 0;
  *v = c->p[c->off++];
  return 1;
}

static int get_u32(struct cur *c, uint32_t *v) {
  if (c->n - c->off < 4)
    return 0;
  const uint8_t *q = c->p + c->off;
  *v = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
       (uint32_t)q[3] << 24;
  c->off += 4;
  return 1;
}

static int get_u64(struct cur *c, uint64_t *v) {
  if (c->n - c->off < 8)
    return 0;
  *v = rdzv_load_u64le(c->p + c->off);
  c->off += 8;
  return 1;
}

/* A u64 length and that many bytes, at most max (else err). 1, 0 or err. */
static int get_bytes(struct cur *c, uint32_t max, int err,
                     struct rdzv_slice *out) {
  uint64_t len;
  if (!get_u64(c, &len))
    return 0;
  if (len > max)
    return err;
  if (c->n - c->off < len)
    return 0;
  out->p = c->p + c->off;
  out->n = (uint32_t)len;
  c->off += (size_t)len;
  return 1;
}

static int get_key(struct cur *c, const struct rdzv_ts_limits *lim,
                   struct rdzv_slice *out) {
  return get_bytes(c, lim->max_key_bytes, RDZV_EKEY_TOO_LONG, out);
}

static int get_value(struct cur *c, const struct rdzv_ts_limits *lim,
                     struct rdzv_slice *out) {
  return get_bytes(c, lim->max_value_bytes, RDZV_EVALUE_TOO_BIG, out);
}

/* A u64 count and that many keys (with values for MULTI_SET). */
static int get_list(struct cur *c, const struct rdzv_ts_limits *lim,
                    uint32_t cap, int with_values, struct rdzv_ts_req *r) {
  uint64_t n;
  int rc;
  if (!get_u64(c, &n))
    return 0;
  if (n > lim->max_keys || n > cap)
    return RDZV_EFRAME_TOO_BIG;
  for (uint64_t i = 0; i < n; i++) {
    if ((rc = get_key(c, lim, &r->keys[i])) != 1)
      return rc;
    if (with_values && (rc = get_value(c, lim, &r->vals[i])) != 1)
      return rc;
  }
  r->nkeys = (uint32_t)n;
  r->nvals = with_values ? (uint32_t)n : 0;
  return 1;
}

/* Opcode tables: index = wire byte, value = operation (0: not served). */
static const enum rdzv_ts_op legacy_ops[] = {
    RDZV_TS_SET,        RDZV_TS_COMPARE_SET, RDZV_TS_GET,
    RDZV_TS_ADD,        RDZV_TS_CHECK,       RDZV_TS_WAIT,
    RDZV_TS_GETNUMKEYS, RDZV_TS_WATCH_KEY,   RDZV_TS_DELETE_KEY,
};
static const enum rdzv_ts_op v2_ops[] = {
    RDZV_TS_VALIDATE,    RDZV_TS_SET,        RDZV_TS_COMPARE_SET,
    RDZV_TS_GET,         RDZV_TS_ADD,        RDZV_TS_CHECK,
    RDZV_TS_WAIT,        RDZV_TS_GETNUMKEYS, RDZV_TS_DELETE_KEY,
    RDZV_TS_APPEND,      RDZV_TS_MULTI_GET,  RDZV_TS_MULTI_SET,
    RDZV_TS_CANCEL_WAIT, RDZV_TS_PING,       RDZV_TS_QUEUE_PUSH,
    RDZV_TS_QUEUE_POP,   RDZV_TS_QUEUE_LEN,  RDZV_TS_LIST_KEYS,
    RDZV_TS_BARRIER,
};

/* The arguments of op. 1, 0 or an error. */
static int get_args(struct cur *c, const struct rdzv_ts_limits *lim,
                    uint32_t cap, struct rdzv_ts_req *r) {
  int rc;
  switch (r->op) {
  case RDZV_TS_SET:
  case RDZV_TS_APPEND:
  case RDZV_TS_QUEUE_PUSH:
    r->nkeys = r->nvals = 1;
    if ((rc = get_key(c, lim, &r->keys[0])) != 1)
      return rc;
    return get_value(c, lim, &r->vals[0]);
  case RDZV_TS_COMPARE_SET:
    if (cap < 2)
      return RDZV_EFRAME_TOO_BIG;
    r->nkeys = 1;
    r->nvals = 2;
    if ((rc = get_key(c, lim, &r->keys[0])) != 1 ||
        (rc = get_value(c, lim, &r->vals[0])) != 1)
      return rc;
    return get_value(c, lim, &r->vals[1]);
  case RDZV_TS_GET:
  case RDZV_TS_DELETE_KEY:
  case RDZV_TS_WATCH_KEY:
  case RDZV_TS_QUEUE_POP:
  case RDZV_TS_QUEUE_LEN:
    r->nkeys = 1;
    return get_key(c, lim, &r->keys[0]);
  case RDZV_TS_ADD:
  case RDZV_TS_BARRIER: {
    uint64_t d;
    r->nkeys = 1;
    if ((rc = get_key(c, lim, &r->keys[0])) != 1)
      return rc;
    if (!get_u64(c, &d))
      return 0;
    r->delta = (int64_t)d;
    return 1;
  }
  case RDZV_TS_CHECK:
  case RDZV_TS_WAIT:
  case RDZV_TS_MULTI_GET:
    return get_list(c, lim, cap, 0, r);
  case RDZV_TS_MULTI_SET:
    return get_list(c, lim, cap, 1, r);
  case RDZV_TS_PING:
  case RDZV_TS_VALIDATE:
    return get_u32(c, &r->u32);
  case RDZV_TS_GETNUMKEYS:
  case RDZV_TS_CANCEL_WAIT:
  case RDZV_TS_LIST_KEYS:
    return 1;
  }
  return RDZV_EPROTO;
}

int rdzv_ts_parse(struct rdzv_ts_parser *ps, const uint8_t *p, size_t n,
                  const struct rdzv_ts_limits *lim, struct rdzv_slice *keys,
                  struct rdzv_slice *vals, uint32_t cap,
                  struct rdzv_ts_req *req, size_t *used) {
  struct cur c = {p, n, 0};
  uint8_t code;
  int rc;

  if (n == 0)
    return 0;
  if (ps->dialect == RDZV_TS_UNKNOWN) {
    /* v2 always opens with VALIDATE (00 + magic); a legacy request that
     * starts with 00 (SET) goes on with an 8-byte key length, so 5 bytes
     * always come. */
    if (p[0] != 0) {
      ps->dialect = RDZV_TS_LEGACY;
    } else {
      uint32_t magic;
      struct cur m = {p, n, 1};
      if (!get_u32(&m, &magic))
        return 0;
      ps->dialect = magic == RDZV_TS_MAGIC ? RDZV_TS_V2 : RDZV_TS_LEGACY;
    }
  }
  memset(req, 0, sizeof(*req));
  req->keys = keys;
  req->vals = vals;
  if (!get_u8(&c, &code)) /* n > 0 above: never; says so to the compiler */
    return 0;
  if (ps->dialect == RDZV_TS_LEGACY) {
    if (code >= sizeof(legacy_ops) / sizeof(legacy_ops[0]))
      return RDZV_EPROTO;
    req->op = legacy_ops[code];
    if (req->op == RDZV_TS_WATCH_KEY)
      return RDZV_EPROTO; /* C++ watchKey callbacks are not served */
  } else {
    if (code >= sizeof(v2_ops) / sizeof(v2_ops[0]))
      return RDZV_EPROTO;
    req->op = v2_ops[code];
    /* VALIDATE once, first; nothing before it. */
    if ((req->op == RDZV_TS_VALIDATE) == (ps->validated != 0))
      return RDZV_EPROTO;
  }
  rc = get_args(&c, lim, cap, req);
  if (rc != 1)
    return rc;
  if (req->op == RDZV_TS_VALIDATE) {
    if (req->u32 != RDZV_TS_MAGIC)
      return RDZV_EPROTO;
    ps->validated = 1;
  }
  *used = c.off;
  return 1;
}

int rdzv_ts_put_u8(struct rdzv_buf *b, uint8_t v) {
  return rdzv_buf_append(b, &v, 1);
}

int rdzv_ts_put_u32(struct rdzv_buf *b, uint32_t v) {
  uint8_t q[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                  (uint8_t)(v >> 24)};
  return rdzv_buf_append(b, q, sizeof(q));
}

int rdzv_ts_put_i64(struct rdzv_buf *b, int64_t v) {
  uint8_t q[8];
  rdzv_store_u64le(q, (uint64_t)v);
  return rdzv_buf_append(b, q, sizeof(q));
}

int rdzv_ts_put_blob(struct rdzv_buf *b, const void *p, size_t n) {
  if (rdzv_buf_reserve(b, 8 + n) < 0)
    return RDZV_ENOMEM;
  rdzv_ts_put_i64(b, (int64_t)n);
  return n > 0 ? rdzv_buf_append(b, p, n) : 0;
}

const char *rdzv_ts_op_name(enum rdzv_ts_op op) {
  static const char *const names[] = {
      [RDZV_TS_SET] = "set",
      [RDZV_TS_COMPARE_SET] = "compare_set",
      [RDZV_TS_GET] = "get",
      [RDZV_TS_ADD] = "add",
      [RDZV_TS_CHECK] = "check",
      [RDZV_TS_WAIT] = "wait",
      [RDZV_TS_GETNUMKEYS] = "getnumkeys",
      [RDZV_TS_WATCH_KEY] = "watch_key",
      [RDZV_TS_DELETE_KEY] = "delete_key",
      [RDZV_TS_APPEND] = "append",
      [RDZV_TS_MULTI_GET] = "multi_get",
      [RDZV_TS_MULTI_SET] = "multi_set",
      [RDZV_TS_CANCEL_WAIT] = "cancel_wait",
      [RDZV_TS_PING] = "ping",
      [RDZV_TS_VALIDATE] = "validate",
      [RDZV_TS_QUEUE_PUSH] = "queue_push",
      [RDZV_TS_QUEUE_POP] = "queue_pop",
      [RDZV_TS_QUEUE_LEN] = "queue_len",
      [RDZV_TS_LIST_KEYS] = "list_keys",
      [RDZV_TS_BARRIER] = "barrier",
  };
  if ((unsigned)op >= sizeof(names) / sizeof(names[0]) || names[op] == NULL)
    return "unknown";
  return names[op];
}

/* ---- client side ----------------------------------------------------------- */

/* The wire byte of op in dialect d, or -1. */
static int opcode_of(enum rdzv_ts_dialect d, enum rdzv_ts_op op) {
  const enum rdzv_ts_op *t = d == RDZV_TS_LEGACY ? legacy_ops : v2_ops;
  size_t n = d == RDZV_TS_LEGACY ? sizeof(legacy_ops) / sizeof(legacy_ops[0])
                                 : sizeof(v2_ops) / sizeof(v2_ops[0]);
  if (d != RDZV_TS_LEGACY && d != RDZV_TS_V2)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (t[i] == op)
      return (int)i;
  return -1;
}

/* The shape of op's arguments: 'k' one key, 'v' key + value, 'c' key +
 * expected + desired, 'd' key + i64, 'l' a key list, 'm' a key/value
 * list, 'u' a u32, '-' nothing. */
static char shape_of(enum rdzv_ts_op op) {
  switch (op) {
  case RDZV_TS_SET:
  case RDZV_TS_APPEND:
  case RDZV_TS_QUEUE_PUSH:
    return 'v';
  case RDZV_TS_COMPARE_SET:
    return 'c';
  case RDZV_TS_GET:
  case RDZV_TS_DELETE_KEY:
  case RDZV_TS_WATCH_KEY:
  case RDZV_TS_QUEUE_POP:
  case RDZV_TS_QUEUE_LEN:
    return 'k';
  case RDZV_TS_ADD:
  case RDZV_TS_BARRIER:
    return 'd';
  case RDZV_TS_CHECK:
  case RDZV_TS_WAIT:
  case RDZV_TS_MULTI_GET:
    return 'l';
  case RDZV_TS_MULTI_SET:
    return 'm';
  case RDZV_TS_PING:
  case RDZV_TS_VALIDATE:
    return 'u';
  case RDZV_TS_GETNUMKEYS:
  case RDZV_TS_CANCEL_WAIT:
  case RDZV_TS_LIST_KEYS:
    return '-';
  }
  return '?';
}

/* Appends a u64 length and the bytes (room reserved by the caller). */
static void put_slice(struct rdzv_buf *b, struct rdzv_slice s) {
  rdzv_ts_put_i64(b, (int64_t)s.n);
  if (s.n > 0)
    rdzv_buf_append(b, s.p, s.n);
}

int rdzv_ts_encode(enum rdzv_ts_dialect d, const struct rdzv_ts_req *req,
                   struct rdzv_buf *b) {
  int code = opcode_of(d, req->op);
  char shape = shape_of(req->op);
  uint32_t want_keys = 1, want_vals = 0;
  if (code < 0)
    return RDZV_EPROTO;
  switch (shape) {
  case 'v':
    want_vals = 1;
    break;
  case 'c':
    want_vals = 2;
    break;
  case 'l':
    want_keys = req->nkeys;
    break;
  case 'm':
    want_keys = want_vals = req->nkeys;
    break;
  case 'u':
  case '-':
    want_keys = 0;
    break;
  default:
    break;
  }
  if (req->nkeys != want_keys || req->nvals != want_vals)
    return RDZV_EPROTO;
  /* The size first, so that a failed reserve leaves b as it was and the
   * appends below cannot fail. */
  size_t size = 1 + (shape == 'l' || shape == 'm' ? 8 : 0) +
                (shape == 'd' ? 8 : 0) + (shape == 'u' ? 4 : 0);
  for (uint32_t i = 0; i < req->nkeys; i++)
    size += 8 + (size_t)req->keys[i].n;
  for (uint32_t i = 0; i < req->nvals; i++)
    size += 8 + (size_t)req->vals[i].n;
  if (rdzv_buf_reserve(b, size) < 0)
    return RDZV_ENOMEM;
  rdzv_ts_put_u8(b, (uint8_t)code);
  if (shape == 'l' || shape == 'm')
    rdzv_ts_put_i64(b, (int64_t)req->nkeys);
  if (shape == 'm') {
    for (uint32_t i = 0; i < req->nkeys; i++) {
      put_slice(b, req->keys[i]);
      put_slice(b, req->vals[i]);
    }
    return 0;
  }
  for (uint32_t i = 0; i < req->nkeys; i++)
    put_slice(b, req->keys[i]);
  for (uint32_t i = 0; i < req->nvals; i++)
    put_slice(b, req->vals[i]);
  if (shape == 'd')
    rdzv_ts_put_i64(b, req->delta);
  if (shape == 'u')
    rdzv_ts_put_u32(b, req->u32);
  return 0;
}

int rdzv_ts_op_has_reply(enum rdzv_ts_op op) {
  return op != RDZV_TS_SET && op != RDZV_TS_APPEND && op != RDZV_TS_MULTI_SET &&
         op != RDZV_TS_VALIDATE && op != RDZV_TS_QUEUE_PUSH &&
         shape_of(op) != '?';
}

/* n blobs into blobs[0..n) (n <= cap checked by the caller). */
static int get_blobs(struct cur *c, uint64_t n, uint32_t max,
                     struct rdzv_slice *blobs, struct rdzv_ts_reply *out) {
  for (uint64_t i = 0; i < n; i++) {
    int rc = get_bytes(c, max, RDZV_EVALUE_TOO_BIG, &blobs[i]);
    if (rc != 1)
      return rc;
  }
  out->nblobs = (uint32_t)n;
  return 1;
}

int rdzv_ts_parse_reply(enum rdzv_ts_op op, uint32_t nkeys, const uint8_t *p,
                        size_t n, uint32_t max_value_bytes,
                        struct rdzv_slice *blobs, uint32_t cap,
                        struct rdzv_ts_reply *out, size_t *used) {
  struct cur c = {p, n, 0};
  uint64_t v = 0;
  int rc = 1;
  if (!rdzv_ts_op_has_reply(op))
    return RDZV_EPROTO;
  memset(out, 0, sizeof(*out));
  out->blobs = blobs;
  switch (op) {
  case RDZV_TS_GET:
  case RDZV_TS_COMPARE_SET:
    rc = cap < 1 ? RDZV_EFRAME_TOO_BIG
                 : get_blobs(&c, 1, max_value_bytes, blobs, out);
    break;
  case RDZV_TS_MULTI_GET:
    rc = nkeys > cap ? RDZV_EFRAME_TOO_BIG
                     : get_blobs(&c, nkeys, max_value_bytes, blobs, out);
    break;
  case RDZV_TS_ADD:
  case RDZV_TS_GETNUMKEYS:
  case RDZV_TS_DELETE_KEY:
  case RDZV_TS_QUEUE_LEN:
  case RDZV_TS_QUEUE_POP:
  case RDZV_TS_LIST_KEYS:
    if (!get_u64(&c, &v))
      return 0;
    out->i64 = (int64_t)v;
    if (op == RDZV_TS_LIST_KEYS)
      rc = out->i64 < 0 || v > cap
               ? RDZV_EFRAME_TOO_BIG
               : get_blobs(&c, v, max_value_bytes, blobs, out);
    else if (op == RDZV_TS_QUEUE_POP && out->i64 > 0)
      rc = cap < 1 ? RDZV_EFRAME_TOO_BIG
                   : get_blobs(&c, 1, max_value_bytes, blobs, out);
    break;
  case RDZV_TS_PING:
    rc = get_u32(&c, &out->u32);
    break;
  default: /* CHECK, WAIT, CANCEL_WAIT, BARRIER, WATCH_KEY: one byte */
    rc = get_u8(&c, &out->u8);
    break;
  }
  if (rc != 1)
    return rc;
  *used = c.off;
  return 1;
}
