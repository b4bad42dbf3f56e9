/* rdzv native wire protocol: the codec declared in wire.h.
 *
 * Every integer is read and written byte by byte in little-endian order, so
 * the code is independent of host endianness and alignment, and no struct
 * is ever copied to or from the wire. The decoder checks each length
 * against the bytes that remain before it uses it, which keeps every read
 * inside the input and every sum free of overflow. */
#include "store/wire/wire.h"

#include <stdlib.h>
#include <string.h>

/* Offsets of the header fields (see the table in wire.h). */
#define HDR_MAGIC 0
#define HDR_VERSION 4
#define HDR_TYPE 5
#define HDR_FLAGS 6
#define HDR_REQ_ID 8
#define HDR_BODY_LEN 12

/* Offsets of the fixed body fields; the two item lists follow. */
#define BODY_STATUS 0
#define BODY_A 4
#define BODY_B 12
#define BODY_LISTS 20

/* Each list item costs at least its u32 length. */
#define ITEM_LEN_BYTES 4u

/* ---- little-endian helpers --------------------------------------------- */

static uint32_t load_u32le(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

uint64_t rdzv_load_u64le(const uint8_t *p) {
  return (uint64_t)load_u32le(p) | (uint64_t)load_u32le(p + 4) << 32;
}

void rdzv_store_u64le(uint8_t *p, uint64_t v) {
  store_u32le(p, (uint32_t)v);
  store_u32le(p + 4, (uint32_t)(v >> 32));
}

/* Signed fields travel as their two's-complement bit pattern. The casts
 * from unsigned to signed are implementation-defined in C11 but are
 * modular on every compiler we support; memcpy keeps that explicit. */
static int32_t u32_to_i32(uint32_t u) {
  int32_t v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

static int64_t u64_to_i64(uint64_t u) {
  int64_t v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

/* ---- growable buffer ---------------------------------------------------- */

int rdzv_buf_reserve(struct rdzv_buf *b, size_t more) {
  size_t need;
  size_t cap;
  uint8_t *p;

  if (more > SIZE_MAX - b->len)
    return RDZV_ENOMEM;
  need = b->len + more;
  if (need <= b->cap)
    return 0;
  cap = b->cap != 0 ? b->cap : 256;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  p = realloc(b->data, cap);
  if (p == NULL)
    return RDZV_ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int rdzv_buf_append(struct rdzv_buf *b, const void *p, size_t n) {
  int err;

  if (n == 0)
    return 0;
  err = rdzv_buf_reserve(b, n);
  if (err < 0)
    return err;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void rdzv_buf_consume(struct rdzv_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}

void rdzv_buf_free(struct rdzv_buf *b) {
  if (b == NULL)
    return;
  free(b->data);
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

/* ---- item lists --------------------------------------------------------- */

/* Walks a raw list of n items and checks that it ends exactly at raw_len.
 * Returns 0 or RDZV_EPROTO. */
static int raw_list_check(const uint8_t *raw, size_t raw_len, uint32_t n) {
  size_t off = 0;
  uint32_t i;
  uint32_t len;

  if (raw == NULL)
    return n == 0 && raw_len == 0 ? 0 : RDZV_EPROTO;
  for (i = 0; i < n; i++) {
    if (raw_len - off < ITEM_LEN_BYTES)
      return RDZV_EPROTO;
    len = load_u32le(raw + off);
    off += ITEM_LEN_BYTES;
    if (len > raw_len - off)
      return RDZV_EPROTO;
    off += len;
  }
  return off == raw_len ? 0 : RDZV_EPROTO;
}

int rdzv_items_next(const struct rdzv_items *it, size_t *pos,
                    struct rdzv_slice *out) {
  uint32_t len;

  if (it->v != NULL) {
    if (*pos >= it->n)
      return 0;
    *out = it->v[*pos];
    *pos += 1;
    return 1;
  }
  /* Raw lists: *pos is a byte offset. The checks only matter for a list
   * that does not come from the decoder; they keep reads in bounds. */
  if (it->raw == NULL || *pos > it->raw_len ||
      it->raw_len - *pos < ITEM_LEN_BYTES)
    return 0;
  len = load_u32le(it->raw + *pos);
  if (len > it->raw_len - *pos - ITEM_LEN_BYTES)
    return 0;
  out->p = it->raw + *pos + ITEM_LEN_BYTES;
  out->n = len;
  *pos += ITEM_LEN_BYTES + (size_t)len;
  return 1;
}

int rdzv_items_get(const struct rdzv_items *it, uint32_t i,
                   struct rdzv_slice *out) {
  size_t pos = 0;
  uint32_t k;
  struct rdzv_slice s;

  if (i >= it->n)
    return RDZV_EPROTO;
  if (it->v != NULL) {
    *out = it->v[i];
    return 0;
  }
  for (k = 0; k <= i; k++) {
    if (!rdzv_items_next(it, &pos, &s))
      return RDZV_EPROTO;
  }
  *out = s;
  return 0;
}

/* ---- encoding ----------------------------------------------------------- */

/* Encoded size of a list body, without its u32 count. Sums in 64 bits and
 * stops as soon as the total passes the frame limit, so the result is at
 * most 2^33 + 3 and cannot overflow. Reads only the slice headers, never
 * the bytes. */
static uint64_t items_size(const struct rdzv_items *it) {
  uint64_t total = 0;
  uint32_t i;

  if (it->v == NULL)
    return it->raw_len > UINT32_MAX ? (uint64_t)UINT32_MAX + 1 : it->raw_len;
  for (i = 0; i < it->n && total <= UINT32_MAX; i++)
    total += ITEM_LEN_BYTES + (uint64_t)it->v[i].n;
  return total;
}

/* Checks that a list can be encoded as it is described. */
static int items_check(const struct rdzv_items *it) {
  uint32_t i;

  if (it->v != NULL) {
    for (i = 0; i < it->n; i++) {
      if (it->v[i].p == NULL && it->v[i].n != 0)
        return RDZV_EPROTO;
    }
    return 0;
  }
  return raw_list_check(it->raw, it->raw_len, it->n);
}

static void header_write(uint8_t *p, const struct rdzv_msg *msg,
                         uint32_t body_len) {
  store_u32le(p + HDR_MAGIC, RDZV_WIRE_MAGIC);
  p[HDR_VERSION] = (uint8_t)RDZV_WIRE_VERSION;
  p[HDR_TYPE] = msg->type;
  p[HDR_FLAGS] = (uint8_t)msg->flags;
  p[HDR_FLAGS + 1] = (uint8_t)(msg->flags >> 8);
  store_u32le(p + HDR_REQ_ID, msg->req_id);
  store_u32le(p + HDR_BODY_LEN, body_len);
}

/* What an encoding may refer to instead of copying: bytes of at least
 * min bytes (and at least 1) that lie wholly inside one of the spans, at
 * most max references. */
struct ref_plan {
  const struct rdzv_slice *spans;
  uint32_t nspans;
  uint32_t min;
  uint32_t max;
  uint32_t used; /* references planned (first pass) or made (second) */
};

/* The span of plan that holds p[0..n), or -1 (also when n is under the
 * plan's minimum or no reference is left). Addresses are compared as
 * integers: the spans are unrelated objects. */
static int64_t ref_span(struct ref_plan *plan, const uint8_t *p, size_t n) {
  uint32_t i;

  if (plan == NULL || n == 0 || n < plan->min || plan->used >= plan->max ||
      p == NULL)
    return -1;
  for (i = 0; i < plan->nspans; i++) {
    uintptr_t a = (uintptr_t)plan->spans[i].p, x = (uintptr_t)p;
    if (plan->spans[i].p != NULL && x >= a && n <= plan->spans[i].n &&
        x - a <= plan->spans[i].n - n)
      return i;
  }
  return -1;
}

/* Bytes of it that plan refers to (first pass: counts them in plan). */
static uint64_t items_referred(struct ref_plan *plan,
                               const struct rdzv_items *it) {
  uint64_t total = 0;
  uint32_t i;

  if (it->v == NULL) {
    if (ref_span(plan, it->raw, it->raw_len) >= 0) {
      plan->used++;
      total = it->raw_len;
    }
    return total;
  }
  for (i = 0; i < it->n; i++) {
    if (ref_span(plan, it->v[i].p, it->v[i].n) >= 0) {
      plan->used++;
      total += it->v[i].n;
    }
  }
  return total;
}

/* Where one list's bytes go: copied at out->data[*off], or referred to
 * (refs[plan->used++]) at that offset. */
static void bytes_put(struct rdzv_buf *out, size_t *off, struct ref_plan *plan,
                      struct rdzv_wire_ref *refs, const uint8_t *p, size_t n) {
  int64_t span = ref_span(plan, p, n);

  if (span >= 0) {
    struct rdzv_wire_ref *r = &refs[plan->used++];
    r->at = *off;
    r->span = (uint32_t)span;
    r->p = p;
    r->n = (uint32_t)n;
    return;
  }
  if (n != 0)
    memcpy(out->data + *off, p, n);
  *off += n;
}

/* Writes count and items at out->data[*off] and advances *off. */
static void items_write(struct rdzv_buf *out, size_t *off,
                        const struct rdzv_items *it, struct ref_plan *plan,
                        struct rdzv_wire_ref *refs) {
  uint32_t i;

  store_u32le(out->data + *off, it->n);
  *off += ITEM_LEN_BYTES;
  if (it->v == NULL) {
    bytes_put(out, off, plan, refs, it->raw, it->raw_len);
    return;
  }
  for (i = 0; i < it->n; i++) {
    store_u32le(out->data + *off, it->v[i].n);
    *off += ITEM_LEN_BYTES;
    bytes_put(out, off, plan, refs, it->v[i].p, it->v[i].n);
  }
}

/* The encoder of both entry points (plan NULL: copy everything). */
static int encode(const struct rdzv_msg *msg, struct rdzv_buf *out,
                  struct ref_plan *plan, struct rdzv_wire_ref *refs,
                  uint32_t *nrefs) {
  uint64_t body = RDZV_WIRE_MIN_BODY_BYTES + items_size(&msg->keys) +
                  items_size(&msg->vals);
  uint64_t referred = 0;
  size_t off;
  int err;

  if (nrefs != NULL)
    *nrefs = 0;
  /* The header and body together must also fit in size_t (32-bit). */
  if (body > UINT32_MAX || body > SIZE_MAX - RDZV_WIRE_HEADER_BYTES)
    return RDZV_EFRAME_TOO_BIG;
  err = items_check(&msg->keys);
  if (err == 0)
    err = items_check(&msg->vals);
  if (err < 0)
    return err;
  /* First pass: which bytes go by reference (the same choices as the
   * second pass makes, in the same order). */
  if (plan != NULL) {
    plan->used = 0;
    referred = items_referred(plan, &msg->keys);
    referred += items_referred(plan, &msg->vals);
    plan->used = 0;
  }
  err = rdzv_buf_reserve(out, RDZV_WIRE_HEADER_BYTES + (size_t)body -
                                  (size_t)referred);
  if (err < 0)
    return err;
  off = out->len;
  header_write(out->data + off, msg, (uint32_t)body);
  off += RDZV_WIRE_HEADER_BYTES;
  store_u32le(out->data + off + BODY_STATUS, (uint32_t)msg->status);
  rdzv_store_u64le(out->data + off + BODY_A, (uint64_t)msg->a);
  rdzv_store_u64le(out->data + off + BODY_B, (uint64_t)msg->b);
  off += BODY_LISTS;
  items_write(out, &off, &msg->keys, plan, refs);
  items_write(out, &off, &msg->vals, plan, refs);
  out->len = off;
  if (nrefs != NULL && plan != NULL)
    *nrefs = plan->used;
  return 0;
}

int rdzv_msg_encode(const struct rdzv_msg *msg, struct rdzv_buf *out) {
  return encode(msg, out, NULL, NULL, NULL);
}

int rdzv_msg_encode_refs(const struct rdzv_msg *msg, struct rdzv_buf *out,
                         const struct rdzv_slice *spans, uint32_t nspans,
                         uint32_t min_ref, struct rdzv_wire_ref *refs,
                         uint32_t max_refs, uint32_t *nrefs) {
  struct ref_plan plan = {spans, nspans, min_ref, refs != NULL ? max_refs : 0,
                          0};
  return encode(msg, out, &plan, refs, nrefs);
}

/* ---- decoding ----------------------------------------------------------- */

/* Checks the header bytes that have arrived, in wire order: magic, then
 * version, then type. Returns 0 if p[0..n) may start a frame. */
static int header_prefix_check(const uint8_t *p, size_t n) {
  uint8_t magic[4];
  size_t i;

  store_u32le(magic, RDZV_WIRE_MAGIC);
  for (i = 0; i < n && i < sizeof(magic); i++) {
    if (p[i] != magic[i])
      return RDZV_EPROTO;
  }
  if (n > HDR_VERSION && p[HDR_VERSION] != RDZV_WIRE_VERSION)
    return RDZV_EPROTO_VERSION;
  if (n > HDR_TYPE && (p[HDR_TYPE] < 1 || p[HDR_TYPE] > RDZV_MSG_TYPE_MAX))
    return RDZV_EPROTO;
  return 0;
}

/* Parses one list at body[*off..len) into *it and advances *off. The
 * count is checked against the bytes left first, so a huge count in a
 * small body fails at once instead of looping. */
static int items_parse(const uint8_t *body, size_t len, size_t *off,
                       struct rdzv_items *it) {
  size_t o = *off;
  size_t start;
  uint32_t n;
  uint32_t i;
  uint32_t item;

  if (len - o < ITEM_LEN_BYTES)
    return RDZV_EPROTO;
  n = load_u32le(body + o);
  o += ITEM_LEN_BYTES;
  if (n > (len - o) / ITEM_LEN_BYTES)
    return RDZV_EPROTO;
  start = o;
  for (i = 0; i < n; i++) {
    if (len - o < ITEM_LEN_BYTES)
      return RDZV_EPROTO;
    item = load_u32le(body + o);
    o += ITEM_LEN_BYTES;
    if (item > len - o)
      return RDZV_EPROTO;
    o += item;
  }
  it->n = n;
  it->v = NULL;
  it->raw = n != 0 ? body + start : NULL;
  it->raw_len = o - start;
  *off = o;
  return 0;
}

static int body_parse(const uint8_t *body, size_t len, struct rdzv_msg *out) {
  size_t off = BODY_LISTS;
  int err;

  /* len >= RDZV_WIRE_MIN_BODY_BYTES was checked from the header. */
  out->status = u32_to_i32(load_u32le(body + BODY_STATUS));
  out->a = u64_to_i64(rdzv_load_u64le(body + BODY_A));
  out->b = u64_to_i64(rdzv_load_u64le(body + BODY_B));
  err = items_parse(body, len, &off, &out->keys);
  if (err == 0)
    err = items_parse(body, len, &off, &out->vals);
  if (err < 0)
    return err;
  return off == len ? 0 : RDZV_EPROTO;
}

int rdzv_msg_decode(const uint8_t *p, size_t n, size_t max_body,
                    struct rdzv_msg *out, size_t *used) {
  uint32_t body_len;
  int err;

  err = header_prefix_check(p, n);
  if (err < 0)
    return err;
  if (n < RDZV_WIRE_HEADER_BYTES)
    return RDZV_ENEEDMORE;
  body_len = load_u32le(p + HDR_BODY_LEN);
  if (body_len > max_body)
    return RDZV_EFRAME_TOO_BIG;
  if (body_len < RDZV_WIRE_MIN_BODY_BYTES)
    return RDZV_EPROTO;
  if (n - RDZV_WIRE_HEADER_BYTES < body_len)
    return RDZV_ENEEDMORE;
  out->type = p[HDR_TYPE];
  out->flags = (uint16_t)(p[HDR_FLAGS] | p[HDR_FLAGS + 1] << 8);
  out->req_id = load_u32le(p + HDR_REQ_ID);
  err = body_parse(p + RDZV_WIRE_HEADER_BYTES, body_len, out);
  if (err < 0)
    return err;
  *used = RDZV_WIRE_HEADER_BYTES + (size_t)body_len;
  return 0;
}

/* ---- request validation ------------------------------------------------- */

/* Allowed numbers of keys and values per request type. UINT32_MAX as a
 * maximum means "any". MSET and the collectives add rules of their own. */
struct shape {
  uint32_t min_keys, max_keys;
  uint32_t min_vals, max_vals;
};

#define ANY UINT32_MAX

/* clang-format off */
static const struct shape shapes[RDZV_MSG_TYPE_MAX + 1] = {
    [RDZV_MSG_HELLO] = {1, 2, 0, 1},
    [RDZV_MSG_SET] = {1, 1, 1, 1},
    [RDZV_MSG_GET] = {1, 1, 0, 0},
    [RDZV_MSG_WAIT] = {1, ANY, 0, 0},
    [RDZV_MSG_ADD] = {1, 1, 0, ANY},
    [RDZV_MSG_CAS] = {1, 1, 2, 2},
    [RDZV_MSG_DELETE] = {1, 1, 0, 0},
    [RDZV_MSG_MGET] = {1, ANY, 0, 0},
    [RDZV_MSG_MSET] = {1, ANY, 1, ANY},
    [RDZV_MSG_APPEND] = {1, 1, 1, 1},
    [RDZV_MSG_NKEYS] = {0, 0, 0, 0},
    [RDZV_MSG_BARRIER] = {1, 2, 1, ANY},
    [RDZV_MSG_GATHER] = {1, 2, 1, ANY},
    [RDZV_MSG_STATS] = {0, 0, 0, 0},
    /* RDZV_MSG_ERROR is reply-only: its all-zero entry is never used. */
    [RDZV_MSG_JOIN] = {1, 1, 2, ANY},
    [RDZV_MSG_ABORT] = {1, 2, 0, ANY},
    [RDZV_MSG_COLL_STATUS] = {1, 2, 0, 0},
    [RDZV_MSG_PING] = {0, 0, 0, 0},
    [RDZV_MSG_KEYS] = {0, 1, 0, 0},
    [RDZV_MSG_AUTH] = {0, 0, 1, 1},
    [RDZV_MSG_INVAL] = {0, 0, 0, 0},
    [RDZV_MSG_TS_SPACE] = {1, 1, 0, 0},
};
/* clang-format on */

static int shape_check(const struct rdzv_msg *msg) {
  const struct shape *s;

  if (msg->type < 1 || msg->type > RDZV_MSG_TYPE_MAX ||
      msg->type == RDZV_MSG_ERROR || (msg->flags & RDZV_F_REPLY) != 0)
    return RDZV_EPROTO;
  s = &shapes[msg->type];
  if (msg->keys.n < s->min_keys || msg->keys.n > s->max_keys ||
      msg->vals.n < s->min_vals || msg->vals.n > s->max_vals)
    return RDZV_EPROTO;
  switch (msg->type) {
  case RDZV_MSG_WAIT:
    return msg->a >= 0 ? 0 : RDZV_EPROTO;
  case RDZV_MSG_INVAL:
    return msg->b >= 0 ? 0 : RDZV_EPROTO;
  case RDZV_MSG_COLL_STATUS:
    if ((msg->a != RDZV_MSG_BARRIER && msg->a != RDZV_MSG_GATHER) ||
        msg->b < 1 || msg->b > RDZV_COLL_STATUS_MAX_IDS)
      return RDZV_EPROTO;
    return 0;
  case RDZV_MSG_MSET:
    return msg->keys.n == msg->vals.n ? 0 : RDZV_EPROTO;
  case RDZV_MSG_ADD:
    /* Parts only with OPID, and at least one then. */
    return (msg->flags & RDZV_F_OPID) ? (msg->vals.n > 0 ? 0 : RDZV_EPROTO)
                                      : (msg->vals.n == 0 ? 0 : RDZV_EPROTO);
  case RDZV_MSG_BARRIER:
  case RDZV_MSG_GATHER:
    /* b members contribute at most b items between them. */
    if (msg->b < 1 || (uint64_t)msg->vals.n > (uint64_t)msg->b)
      return RDZV_EPROTO;
    return 0;
  default:
    return 0;
  }
}

/* Walks the items of a list; returns 0 or RDZV_EPROTO if the list holds
 * fewer items than its count says (only for hand-built raw lists). Item 1
 * is held to max_second, every other one to max_key. */
static int keys_check(const struct rdzv_items *keys, uint32_t max_key,
                      uint32_t max_second) {
  struct rdzv_slice s;
  size_t pos = 0;
  uint32_t i;

  for (i = 0; i < keys->n; i++) {
    if (!rdzv_items_next(keys, &pos, &s))
      return RDZV_EPROTO;
    if (s.n == 0)
      return RDZV_EPROTO;
    if (s.n > (i == 1 ? max_second : max_key))
      return RDZV_EKEY_TOO_LONG;
  }
  return 0;
}

/* Checks each value: plain values against max_value; collective
 * contributions for their u64 member id and, for GATHER, the data after
 * it against max_value. */
static int vals_check(const struct rdzv_msg *msg, uint32_t max_value) {
  struct rdzv_slice s;
  size_t pos = 0;
  uint32_t i;
  uint32_t data;

  for (i = 0; i < msg->vals.n; i++) {
    if (!rdzv_items_next(&msg->vals, &pos, &s))
      return RDZV_EPROTO;
    data = s.n;
    if (msg->type == RDZV_MSG_ADD) {
      if (s.n != 16)
        return RDZV_EPROTO; /* { u64 op id, i64 delta } */
      continue;             /* no value: --max-value-bytes does not apply */
    }
    if (msg->type == RDZV_MSG_BARRIER || msg->type == RDZV_MSG_GATHER) {
      if (s.n < 8 || (msg->type == RDZV_MSG_BARRIER && s.n != 8))
        return RDZV_EPROTO;
      /* Members are 0 .. count-1 (ranks): a stray id could otherwise
       * complete a collective that a real member never joined. */
      if (rdzv_load_u64le(s.p) >= (uint64_t)msg->b)
        return RDZV_EPROTO;
      data = s.n - 8;
    }
    if (data > max_value)
      return RDZV_EVALUE_TOO_BIG;
  }
  return 0;
}

int rdzv_msg_validate_request(const struct rdzv_msg *msg,
                              const struct rdzv_wire_limits *lim) {
  uint32_t max_key = lim != NULL ? lim->max_key_bytes : UINT32_MAX;
  uint32_t max_value = lim != NULL ? lim->max_value_bytes : UINT32_MAX;
  int err;

  err = shape_check(msg);
  if (err < 0)
    return err;
  /* A collective's keys[1] says who its members are: no key, and a valid
   * one (at most RDZV_WIRE_MEMBERS_MAX_BYTES) passes whatever the key
   * limit, or a group would fail only because its nodes were told. */
  uint32_t max_second = max_key;
  if ((msg->type == RDZV_MSG_BARRIER || msg->type == RDZV_MSG_GATHER) &&
      max_second < RDZV_WIRE_MEMBERS_MAX_BYTES)
    max_second = RDZV_WIRE_MEMBERS_MAX_BYTES;
  /* Likewise an abort's or a give-up's reason (free text, not a key). */
  if ((msg->type == RDZV_MSG_ABORT || msg->type == RDZV_MSG_COLL_STATUS) &&
      max_second < RDZV_WIRE_REASON_MAX_BYTES)
    max_second = RDZV_WIRE_REASON_MAX_BYTES;
  err = keys_check(&msg->keys, max_key, max_second);
  if (err < 0)
    return err;
  return vals_check(msg, max_value);
}

/* ---- names -------------------------------------------------------------- */

static const char *const type_names[RDZV_MSG_TYPE_MAX + 1] = {
    [RDZV_MSG_HELLO] = "hello",       [RDZV_MSG_SET] = "set",
    [RDZV_MSG_GET] = "get",           [RDZV_MSG_WAIT] = "wait",
    [RDZV_MSG_ADD] = "add",           [RDZV_MSG_CAS] = "cas",
    [RDZV_MSG_DELETE] = "delete",     [RDZV_MSG_MGET] = "mget",
    [RDZV_MSG_MSET] = "mset",         [RDZV_MSG_APPEND] = "append",
    [RDZV_MSG_NKEYS] = "nkeys",       [RDZV_MSG_BARRIER] = "barrier",
    [RDZV_MSG_GATHER] = "gather",     [RDZV_MSG_STATS] = "stats",
    [RDZV_MSG_ERROR] = "error",       [RDZV_MSG_JOIN] = "join",
    [RDZV_MSG_ABORT] = "abort",       [RDZV_MSG_COLL_STATUS] = "coll_status",
    [RDZV_MSG_PING] = "ping",         [RDZV_MSG_KEYS] = "keys",
    [RDZV_MSG_AUTH] = "auth",         [RDZV_MSG_INVAL] = "inval",
    [RDZV_MSG_TS_SPACE] = "ts_space",
};

const char *rdzv_msg_type_name(int type) {
  if (type < 1 || type > RDZV_MSG_TYPE_MAX)
    return "unknown";
  return type_names[type];
}

int rdzv_items_append(struct rdzv_buf *b, const void *p, uint32_t n) {
  uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
                    (uint8_t)(n >> 24)};
  if (rdzv_buf_reserve(b, 4 + (size_t)n) < 0)
    return RDZV_ENOMEM;
  rdzv_buf_append(b, len, 4);
  if (n > 0)
    rdzv_buf_append(b, p, n);
  return 0;
}
