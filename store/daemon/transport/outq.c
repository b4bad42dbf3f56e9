/* rdzvd transport: output queues whose big values are written from their
 * shared buffers (transport.h, struct rdzv_outq). */
#include <stdlib.h>
#include <string.h>

#include "store/daemon/transport/transport.h"

/* A write in flight: the bytes it owns and the blobs it refers to, until
 * libuv's callback. */
struct outq_write {
  uv_write_t req;
  void (*cb)(void *arg, int status);
  void *arg;
  struct rdzv_buf bytes;
  uint32_t nrefs;
  struct rdzv_outq_ref refs[];
};

/* Most uv_buf_t a write builds on the stack (more: on the heap). */
#define OUTQ_STACK_BUFS 17

int rdzv__outq_ref(struct rdzv_outq *q, struct rdzv_blob *b, const uint8_t *p,
                   uint32_t n) {
  if (n == 0)
    return 0;
  if (q->nrefs == q->cap) {
    uint32_t cap = q->cap ? q->cap * 2 : 4;
    struct rdzv_outq_ref *r = realloc(q->refs, cap * sizeof(*r));
    if (r == NULL)
      return RDZV_ENOMEM;
    q->refs = r;
    q->cap = cap;
  }
  struct rdzv_outq_ref *r = &q->refs[q->nrefs++];
  r->at = q->buf.len;
  r->blob = rdzv__blob_ref(b);
  r->p = p;
  r->n = n;
  return 0;
}

void rdzv__outq_truncate(struct rdzv_outq *q, size_t len) {
  if (len < q->buf.len)
    q->buf.len = len;
  /* A reference at len belongs to the bytes before it (a frame starts
   * with bytes of its own, never with a reference). */
  while (q->nrefs > 0 && q->refs[q->nrefs - 1].at > len)
    rdzv__blob_unref(q->refs[--q->nrefs].blob);
}

void rdzv__outq_insert(struct rdzv_outq *q, size_t at, size_t n) {
  for (uint32_t i = 0; i < q->nrefs; i++)
    if (q->refs[i].at > at)
      q->refs[i].at += n;
}

void rdzv__outq_release(struct rdzv_outq *q) {
  rdzv__outq_truncate(q, 0);
  rdzv_buf_free(&q->buf);
  free(q->refs);
  q->refs = NULL;
  q->nrefs = q->cap = 0;
}

size_t rdzv__outq_bytes(const struct rdzv_outq *q) {
  size_t n = q->buf.len;
  for (uint32_t i = 0; i < q->nrefs; i++)
    n += q->refs[i].n;
  return n;
}

static void write_free(struct outq_write *w) {
  for (uint32_t i = 0; i < w->nrefs; i++)
    rdzv__blob_unref(w->refs[i].blob);
  rdzv_buf_free(&w->bytes);
  free(w);
}

static void on_outq_write(uv_write_t *req, int status) {
  struct outq_write *w = req->data;
  void (*cb)(void *, int) = w->cb;
  void *arg = w->arg;
  write_free(w);
  if (cb != NULL)
    cb(arg, status);
}

/* Splits q: the first n bytes and the references up to them go to w; the
 * rest stays in q, at offsets counted from its new start. */
static int take_head(struct rdzv_outq *q, size_t n, struct outq_write *w,
                     uint32_t k) {
  struct rdzv_buf rest = {0};
  if (n < q->buf.len &&
      rdzv_buf_append(&rest, q->buf.data + n, q->buf.len - n) < 0)
    return RDZV_ENOMEM;
  w->bytes = q->buf;
  w->bytes.len = n;
  q->buf = rest;
  if (k > 0)
    memcpy(w->refs, q->refs, k * sizeof(*w->refs));
  w->nrefs = k;
  if (k > 0 && q->nrefs > k)
    memmove(q->refs, q->refs + k, (q->nrefs - k) * sizeof(*q->refs));
  q->nrefs -= k;
  for (uint32_t i = 0; i < q->nrefs; i++)
    q->refs[i].at -= n;
  if (q->nrefs == 0) { /* an idle queue holds no memory */
    free(q->refs);
    q->refs = NULL;
    q->cap = 0;
  }
  return 0;
}

/* Moves w's bytes and references into session tls, and w's bytes
 * become the ciphertext the session has waiting. 0, RDZV_ETLS or
 * RDZV_ENOMEM. */
static int seal(struct outq_write *w, rdzv_tls_t *tls) {
  size_t pos = 0;
  int rc = 0;
  for (uint32_t i = 0; i < w->nrefs && rc == 0; i++) {
    struct rdzv_outq_ref *r = &w->refs[i];
    if (r->at > pos)
      rc = rdzv_tls_write(tls, w->bytes.data + pos, r->at - pos);
    if (rc == 0)
      rc = rdzv_tls_write(tls, r->p, r->n);
    pos = r->at;
  }
  if (rc == 0 && w->bytes.len > pos)
    rc = rdzv_tls_write(tls, w->bytes.data + pos, w->bytes.len - pos);
  for (uint32_t i = 0; i < w->nrefs; i++)
    rdzv__blob_unref(w->refs[i].blob);
  w->nrefs = 0;
  w->bytes.len = 0;
  if (rc == 0 && rdzv_tls_take(tls, &w->bytes) < 0)
    rc = RDZV_ENOMEM;
  return rc;
}

size_t rdzv__outq_span(const struct rdzv_outq *q, size_t n, size_t budget) {
  size_t total = 0, pos = 0;
  for (uint32_t i = 0; i < q->nrefs && q->refs[i].at <= n; i++) {
    const struct rdzv_outq_ref *r = &q->refs[i];
    total += (r->at - pos) + r->n;
    pos = r->at;
    if (total >= budget)
      return pos; /* through this reference (a frame starts with own
                     bytes: pos >= 1) */
  }
  size_t rest = budget - total;
  return n - pos > rest ? pos + (rest > 0 ? rest : 1) : n;
}

int rdzv__tls_send(uv_stream_t *s, rdzv_tls_t *t, uint64_t *written) {
  if (rdzv_tls_pending(t) == 0)
    return 0;
  struct outq_write *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return RDZV_ENOMEM;
  if (rdzv_tls_take(t, &w->bytes) < 0) {
    write_free(w);
    return RDZV_ENOMEM;
  }
  if (written != NULL)
    *written += w->bytes.len;
  uv_buf_t b = uv_buf_init((char *)w->bytes.data, (unsigned)w->bytes.len);
  int rc = uv_try_write(s, &b, 1);
  if (rc >= 0 && (size_t)rc == b.len) {
    write_free(w);
    return 0;
  }
  if (rc > 0) {
    b.base += rc;
    b.len -= (size_t)rc;
  }
  w->cb = NULL;
  w->req.data = w;
  rc = uv_write(&w->req, s, &b, 1, on_outq_write);
  if (rc < 0)
    write_free(w);
  return rc < 0 ? rc : 0;
}

int rdzv__outq_write(struct rdzv_outq *q, size_t n, uv_stream_t *s,
                     rdzv_tls_t *tls, void (*cb)(void *arg, int status),
                     void *arg, uint64_t *written, uint64_t *shared) {
  if (n > q->buf.len)
    n = q->buf.len;
  uint32_t k = 0;
  while (k < q->nrefs && q->refs[k].at <= n)
    k++;
  struct outq_write *w = malloc(sizeof(*w) + k * sizeof(struct rdzv_outq_ref));
  if (w == NULL)
    return RDZV_ENOMEM;
  if (take_head(q, n, w, k) < 0) {
    free(w);
    return RDZV_ENOMEM;
  }
  w->cb = cb;
  w->arg = arg;
  w->req.data = w;
  /* The bytes between references, and each reference's bytes in place. */
  if (tls != NULL) {
    int rc = seal(w, tls);
    if (rc < 0) {
      write_free(w);
      return rc;
    }
    if (written != NULL) /* a TLS link's bytes out are its ciphertext */
      *written += w->bytes.len;
    if (w->bytes.len == 0) { /* held until the handshake is done */
      write_free(w);
      return RDZV_OUTQ_WRITTEN;
    }
    n = w->bytes.len;
    k = 0;
    written = shared = NULL; /* counted above; none written shared */
  }
  uv_buf_t stackbufs[OUTQ_STACK_BUFS];
  uv_buf_t *bufs = stackbufs;
  size_t nmax = 2 * (size_t)k + 1;
  if (nmax > OUTQ_STACK_BUFS && (bufs = malloc(nmax * sizeof(*bufs))) == NULL) {
    write_free(w);
    return RDZV_ENOMEM;
  }
  unsigned nb = 0;
  size_t pos = 0;
  uint64_t by_ref = 0;
  for (uint32_t i = 0; i < k; i++) {
    struct rdzv_outq_ref *r = &w->refs[i];
    if (r->at > pos)
      bufs[nb++] =
          uv_buf_init((char *)w->bytes.data + pos, (unsigned)(r->at - pos));
    bufs[nb++] = uv_buf_init((char *)r->p, r->n);
    pos = r->at;
    by_ref += r->n;
  }
  if (n > pos)
    bufs[nb++] = uv_buf_init((char *)w->bytes.data + pos, (unsigned)(n - pos));
  if (written != NULL)
    *written += n + by_ref;
  if (shared != NULL)
    *shared += by_ref;
  /* Straight to the socket first: nearly every write fits in it at once,
   * and then no write request is queued (a uv_write that completes still
   * costs libuv a watcher update, an epoll_ctl, per write: one of the few
   * system calls a forwarded request makes at a node). */
  int rc = nb == 0 ? UV_EINVAL : uv_try_write(s, bufs, nb);
  if (rc >= 0) {
    size_t done = (size_t)rc;
    unsigned first = 0;
    while (first < nb && done >= bufs[first].len)
      done -= bufs[first++].len;
    if (first == nb) {
      if (bufs != stackbufs)
        free(bufs);
      write_free(w);
      return RDZV_OUTQ_WRITTEN;
    }
    bufs[first].base += done;
    bufs[first].len -= done;
    rc = uv_write(&w->req, s, bufs + first, nb - first, on_outq_write);
  } else if (nb > 0) {
    /* Full, or failed: uv_write queues it, and reports a failure through
     * cb as before, never from inside this call. */
    rc = uv_write(&w->req, s, bufs, nb, on_outq_write);
  }
  if (bufs != stackbufs)
    free(bufs); /* uv_write keeps its own copy of the array */
  if (rc < 0) {
    write_free(w);
    return rc;
  }
  return 0;
}
