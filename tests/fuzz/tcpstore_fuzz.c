/* libFuzzer target: the TCPStore codec (store/tcpstore_wire.h) on
 * arbitrary bytes, as a connection's stream.
 *
 * Properties: parsing never reads outside the input (ASan) and never
 * crashes; each request consumes at least one byte and at most what is
 * left; every key and value lies inside the input and within the limits;
 * and parsing is independent of how the stream is split: feeding the same
 * bytes as a first part and the rest (the way a socket delivers them)
 * gives the same requests and the same final status. The client side
 * too: every parsed request encoded again (rdzv_ts_encode, in the
 * connection's dialect) gives exactly the bytes it was parsed from; and
 * the same bytes read as the reply to each operation
 * (rdzv_ts_parse_reply) stay inside the input and within the limits, and
 * a reply written again from what was parsed parses the same. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/wire/tcpstore_wire.h"

#define CAP 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct rdzv_ts_limits lim = {256, 1024, CAP};

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "tcpstore_fuzz: property failed: %s\n", what);
    abort();
  }
}

static int inside(struct rdzv_slice s, const uint8_t *p, size_t n) {
  return s.n == 0 || (s.p >= p && s.p + s.n <= p + n);
}

/* Parses the whole stream; returns the final status and a digest of the
 * requests (ops and sizes) in *sum. */
static int run(const uint8_t *p, size_t n, uint64_t *sum, size_t *nreq) {
  struct rdzv_ts_parser ps = {0};
  struct rdzv_slice keys[CAP], vals[CAP];
  size_t off = 0;
  int rc;
  *sum = 0;
  *nreq = 0;
  for (;;) {
    struct rdzv_ts_req q;
    size_t used = 0;
    rc = rdzv_ts_parse(&ps, p + off, n - off, &lim, keys, vals, CAP, &q, &used);
    if (rc != 1)
      return rc;
    require(used >= 1 && used <= n - off, "used within the input");
    require(q.nkeys <= CAP && q.nvals <= CAP, "counts within cap");
    for (uint32_t i = 0; i < q.nkeys; i++)
      require(inside(q.keys[i], p + off, used) &&
                  q.keys[i].n <= lim.max_key_bytes,
              "key inside its request and within the limit");
    for (uint32_t i = 0; i < q.nvals; i++)
      require(inside(q.vals[i], p + off, used) &&
                  q.vals[i].n <= lim.max_value_bytes,
              "value inside its request and within the limit");
    struct rdzv_buf enc = {0};
    require(rdzv_ts_encode(ps.dialect, &q, &enc) == 0, "a request encodes");
    require(enc.len == used && memcmp(enc.data, p + off, used) == 0,
            "encode(parse(bytes)) gives the bytes back");
    rdzv_buf_free(&enc);
    *sum = *sum * 31 + (uint64_t)q.op * 1000003u + used;
    (*nreq)++;
    off += used;
  }
}

/* The bytes as the reply to each operation. */
static void replies(const uint8_t *p, size_t n) {
  struct rdzv_slice blobs[CAP], again[CAP];
  for (int op = RDZV_TS_SET; op <= RDZV_TS_BARRIER; op++) {
    struct rdzv_ts_reply r, r2;
    size_t used = 0, used2 = 0;
    uint32_t nkeys = n > 0 ? p[0] % (CAP + 2) : 0;
    int rc = rdzv_ts_parse_reply((enum rdzv_ts_op)op, nkeys, p, n,
                                 lim.max_value_bytes, blobs, CAP, &r, &used);
    require(rdzv_ts_op_has_reply((enum rdzv_ts_op)op) || rc == RDZV_EPROTO,
            "no reply to parse for a write");
    if (rc != 1)
      continue;
    require(used <= n && r.nblobs <= CAP, "a reply within the input");
    for (uint32_t i = 0; i < r.nblobs; i++)
      require(inside(r.blobs[i], p, used) &&
                  r.blobs[i].n <= lim.max_value_bytes,
              "a blob inside the reply and within the limit");
    /* Written again the way a server writes it: the same bytes. */
    struct rdzv_buf b = {0};
    int has_i64 = op == RDZV_TS_ADD || op == RDZV_TS_GETNUMKEYS ||
                  op == RDZV_TS_DELETE_KEY || op == RDZV_TS_QUEUE_LEN ||
                  op == RDZV_TS_QUEUE_POP || op == RDZV_TS_LIST_KEYS;
    if (op == RDZV_TS_PING)
      rdzv_ts_put_u32(&b, r.u32);
    else if (has_i64)
      rdzv_ts_put_i64(&b, r.i64);
    else if (op != RDZV_TS_GET && op != RDZV_TS_COMPARE_SET &&
             op != RDZV_TS_MULTI_GET)
      rdzv_ts_put_u8(&b, r.u8); /* CHECK, WAIT, CANCEL_WAIT, BARRIER... */
    for (uint32_t i = 0; i < r.nblobs; i++)
      rdzv_ts_put_blob(&b, r.blobs[i].p, r.blobs[i].n);
    require(b.len == used && (used == 0 || memcmp(b.data, p, used) == 0),
            "a reply written again gives its bytes");
    rc = rdzv_ts_parse_reply((enum rdzv_ts_op)op, nkeys, b.data, b.len,
                             lim.max_value_bytes, again, CAP, &r2, &used2);
    require(rc == 1 && used2 == used && r2.i64 == r.i64 &&
                r2.nblobs == r.nblobs,
            "a reply parses the same again");
    rdzv_buf_free(&b);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  replies(data, size);
  uint64_t whole, split;
  size_t nw, ns;
  int rw = run(data, size, &whole, &nw);
  require(rw <= 1, "a status, not garbage");
  /* The same bytes in an exact-size copy that ends early: every request
   * parsed from the prefix is one of the whole stream's, and a prefix
   * never reports an error the whole stream does not. */
  if (size > 1) {
    size_t cut = data[0] % size;
    uint8_t *q = malloc(cut != 0 ? cut : 1);
    require(q != NULL, "memory");
    memcpy(q, data, cut);
    int rs = run(q, cut, &split, &ns);
    free(q);
    require(ns <= nw, "a prefix parses no more requests than the whole");
    require(rs == 0 || rs == rw || ns < nw, "a prefix's error is the whole's");
  }
  return 0;
}
