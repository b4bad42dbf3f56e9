/* Rendezvous JOIN encodings: see join_wire.h. */
#include "rendezvous/join_wire.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "store/wire/wire.h"

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

size_t rdzv_join_params_size(const struct rdzv_join_params *p) {
  return p->segment_hosts > 0 ? RDZV_JOIN_PARAMS_MAX_BYTES
                              : RDZV_JOIN_PARAMS_BYTES;
}

void rdzv_join_params_encode(const struct rdzv_join_params *p, uint8_t *out) {
  put32(out, p->min_size);
  put32(out + 4, p->max_size);
  put32(out + 8, p->last_call_ms);
  put32(out + 12, p->timeout_ms);
  if (p->segment_hosts > 0)
    put32(out + 16, p->segment_hosts);
}

int rdzv_join_params_decode(const uint8_t *p, size_t n,
                            struct rdzv_join_params *out) {
  if (n != RDZV_JOIN_PARAMS_BYTES && n != RDZV_JOIN_PARAMS_MAX_BYTES)
    return RDZV_EPROTO;
  out->min_size = get32(p);
  out->max_size = get32(p + 4);
  out->last_call_ms = get32(p + 8);
  out->timeout_ms = get32(p + 12);
  out->segment_hosts = n == RDZV_JOIN_PARAMS_MAX_BYTES ? get32(p + 16) : 0;
  if (out->min_size == 0 || out->min_size > out->max_size ||
      out->max_size > INT32_MAX ||
      (n == RDZV_JOIN_PARAMS_MAX_BYTES &&
       (out->segment_hosts == 0 || out->segment_hosts > INT32_MAX)))
    return RDZV_EPROTO;
  return 0;
}

/* Whether j needs the optional tail (role, domain, health failure). */
static bool has_tail(const struct rdzv_join_full *j) {
  return j->role != RDZV_JOIN_ACTIVE || j->rec.domain_len > 0 ||
         j->unhealthy_len > 0;
}

size_t rdzv_join_rec_size(const struct rdzv_join_full *j) {
  return 8 + 4 + 4 + 2 + j->rec.host_len + 2 + j->rec.location_len + 4 +
         j->topo_len + (has_tail(j) ? 3 + j->rec.domain_len : 0) +
         (j->unhealthy_len > 0 ? 2 + j->unhealthy_len : 0);
}

int rdzv_join_rec_encode(const struct rdzv_join_full *j, uint8_t *out) {
  const struct rdzv_join_rec *r = &j->rec;
  if (r->host_len == 0 || r->host_len > 255 || r->location_len > 255 ||
      r->local_rank < 0 || j->local_size < 0 ||
      j->topo_len > RDZV_JOIN_MAX_TOPO || j->role > RDZV_JOIN_SPARE ||
      j->rec.domain_len > 255 || j->unhealthy_len > 255)
    return RDZV_EPROTO;
  uint8_t *p = out;
  put64(p, r->claim);
  put32(p + 8, (uint32_t)r->local_rank);
  put32(p + 12, (uint32_t)j->local_size);
  p += 16;
  p[0] = (uint8_t)r->host_len;
  p[1] = 0;
  memcpy(p + 2, r->host, r->host_len);
  p += 2 + r->host_len;
  p[0] = (uint8_t)r->location_len;
  p[1] = 0;
  if (r->location_len)
    memcpy(p + 2, r->location, r->location_len);
  p += 2 + r->location_len;
  put32(p, j->topo_len);
  if (j->topo_len)
    memcpy(p + 4, j->topo, j->topo_len);
  p += 4 + j->topo_len;
  if (has_tail(j)) {
    p[0] = j->role;
    p[1] = (uint8_t)j->rec.domain_len;
    p[2] = 0;
    if (j->rec.domain_len)
      memcpy(p + 3, j->rec.domain, j->rec.domain_len);
    p += 3 + j->rec.domain_len;
  }
  if (j->unhealthy_len > 0) {
    p[0] = (uint8_t)j->unhealthy_len;
    p[1] = 0;
    memcpy(p + 2, j->unhealthy, j->unhealthy_len);
  }
  return 0;
}

/* Reads a u16-length string at *off; returns 0 or RDZV_EPROTO. */
static int get_str16(const uint8_t *p, size_t n, size_t *off, const uint8_t **s,
                     uint32_t *len) {
  if (n - *off < 2)
    return RDZV_EPROTO;
  uint32_t l = (uint32_t)p[*off] | (uint32_t)p[*off + 1] << 8;
  *off += 2;
  if (l > 255 || n - *off < l)
    return RDZV_EPROTO;
  *s = p + *off;
  *len = l;
  *off += l;
  return 0;
}

int rdzv_join_rec_decode(const uint8_t *p, size_t n,
                         struct rdzv_join_full *out) {
  memset(out, 0, sizeof(*out));
  if (n < 16)
    return RDZV_EPROTO;
  out->rec.claim = get64(p);
  out->rec.local_rank = (int32_t)get32(p + 8);
  out->local_size = (int32_t)get32(p + 12);
  size_t off = 16;
  if (get_str16(p, n, &off, &out->rec.host, &out->rec.host_len) < 0 ||
      get_str16(p, n, &off, &out->rec.location, &out->rec.location_len) < 0)
    return RDZV_EPROTO;
  if (n - off < 4)
    return RDZV_EPROTO;
  uint32_t tl = get32(p + off);
  off += 4;
  if (tl > RDZV_JOIN_MAX_TOPO || n - off < tl)
    return RDZV_EPROTO;
  out->topo = p + off;
  out->topo_len = tl;
  off += tl;
  if (off < n) { /* the tail: role, domain, then a health failure */
    out->role = p[off++];
    if (out->role > RDZV_JOIN_SPARE ||
        get_str16(p, n, &off, &out->rec.domain, &out->rec.domain_len) < 0)
      return RDZV_EPROTO;
    if (off < n &&
        (get_str16(p, n, &off, &out->unhealthy, &out->unhealthy_len) < 0 ||
         out->unhealthy_len == 0))
      return RDZV_EPROTO;
    if (off != n || (out->role == RDZV_JOIN_ACTIVE &&
                     out->rec.domain_len == 0 && out->unhealthy_len == 0))
      return RDZV_EPROTO;
  }
  if (out->rec.host_len == 0 || out->rec.local_rank < 0 || out->local_size < 0)
    return RDZV_EPROTO;
  return 0;
}

void rdzv_join_assign_encode(uint64_t claim, const struct rdzv_assignment *a,
                             uint8_t *out) {
  put64(out, claim);
  put32(out + 8, (uint32_t)a->rank);
  put32(out + 12, (uint32_t)a->world_size);
  put32(out + 16, (uint32_t)a->local_rank);
  put32(out + 20, (uint32_t)a->local_size);
  put32(out + 24, (uint32_t)a->node_rank);
  put32(out + 28, (uint32_t)a->node_count);
}

void rdzv_join_error_encode(uint64_t claim, int status, uint8_t *out) {
  put64(out, claim);
  put32(out + 8, (uint32_t)status);
}

int rdzv_join_assign_decode(const uint8_t *p, size_t n, uint64_t *claim,
                            struct rdzv_assignment *a) {
  if (n == RDZV_JOIN_ERROR_BYTES) {
    *claim = get64(p);
    int32_t st = (int32_t)get32(p + 8);
    return st < 0 && st != RDZV_EPROTO ? st : RDZV_EPROTO;
  }
  if (n != RDZV_JOIN_ASSIGN_BYTES)
    return RDZV_EPROTO;
  *claim = get64(p);
  a->rank = (int32_t)get32(p + 8);
  a->world_size = (int32_t)get32(p + 12);
  a->local_rank = (int32_t)get32(p + 16);
  a->local_size = (int32_t)get32(p + 20);
  a->node_rank = (int32_t)get32(p + 24);
  a->node_count = (int32_t)get32(p + 28);
  if (a->world_size < 1 || a->rank < 0 || a->rank >= a->world_size ||
      a->local_size < 1 || a->local_rank < 0 ||
      a->local_rank >= a->local_size || a->node_count < 1 || a->node_rank < 0 ||
      a->node_rank >= a->node_count)
    return RDZV_EPROTO;
  return 0;
}

int rdzv_topo_append_line(struct rdzv_buf *b, int32_t rank, int32_t local_rank,
                          const uint8_t *topo, uint32_t topo_len) {
  char head[32];
  int n = snprintf(head, sizeof(head), "%d %d ", rank, local_rank);
  if (rdzv_buf_reserve(b, (size_t)n + topo_len + 1) < 0)
    return RDZV_ENOMEM;
  memcpy(b->data + b->len, head, (size_t)n);
  b->len += (size_t)n;
  for (uint32_t k = 0; k < topo_len; k++)
    b->data[b->len++] = topo[k] == '\n' ? ';' : topo[k];
  b->data[b->len++] = '\n';
  return 0;
}

int rdzv_gen_key_parse(const uint8_t *key, size_t n, const uint8_t **round,
                       size_t *round_len, int64_t *gen) {
  if (n < 8 || memcmp(key, "rdzv/", 5) != 0)
    return -1;
  const uint8_t *name = key + 5, *end = key + n;
  const uint8_t *slash = memchr(name, '/', (size_t)(end - name));
  if (slash == NULL || end - slash < 3 || slash[1] != 'g')
    return -1;
  int64_t g = 0;
  const uint8_t *q = slash + 2;
  while (q < end && *q >= '0' && *q <= '9' && g < INT32_MAX)
    g = g * 10 + (*q++ - '0');
  if (q == slash + 2 || q >= end || *q != '/')
    return -1;
  *round = name;
  *round_len = (size_t)(slash - name);
  *gen = g;
  return 0;
}

static int member_cmp(const void *x, const void *y) {
  const struct rdzv_member_name *a = x, *b = y;
  uint32_t n = a->host_len < b->host_len ? a->host_len : b->host_len;
  int c = memcmp(a->host, b->host, n);
  if (c != 0)
    return c;
  if (a->host_len != b->host_len)
    return a->host_len < b->host_len ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* Appends to out[*used..n) what printf would; marks a cut with "...". */
static void put(char *out, size_t n, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t n, size_t *used, const char *fmt, ...) {
  va_list ap;
  if (*used >= n)
    return;
  va_start(ap, fmt);
  int w = vsnprintf(out + *used, n - *used, fmt, ap);
  va_end(ap);
  if (w < 0)
    return;
  if ((size_t)w >= n - *used) {
    memcpy(out + n - 4, "...", 4);
    *used = n;
    return;
  }
  *used += (size_t)w;
}

size_t rdzv_members_describe(struct rdzv_member_name *m, size_t count,
                             const char *what, char *out, size_t n) {
  size_t used = 0, hosts = 0;
  out[0] = '\0';
  if (count == 0)
    return 0;
  qsort(m, count, sizeof(*m), member_cmp);
  for (size_t i = 0; i < count;) {
    size_t e = i;
    while (e < count && m[e].host_len == m[i].host_len &&
           memcmp(m[e].host, m[i].host, m[i].host_len) == 0)
      e++;
    put(out, n, &used, "%shost %.*s", hosts ? ", " : "", (int)m[i].host_len,
        (const char *)m[i].host);
    hosts++;
    size_t k = i;
    while (k < e && m[k].rank < 0)
      k++;
    for (bool first = true; k < e; first = false) {
      int32_t lo = m[k].rank, hi = lo;
      while (k + 1 < e && (m[k + 1].rank == hi || m[k + 1].rank == hi + 1))
        hi = m[++k].rank;
      k++;
      if (first)
        put(out, n, &used, " (%s ", what);
      else
        put(out, n, &used, ",");
      put(out, n, &used, lo == hi ? "%d" : "%d-%d", lo, hi);
      if (k == e)
        put(out, n, &used, ")");
    }
    i = e;
  }
  return hosts;
}
