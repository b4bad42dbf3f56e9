/* Members of a collective: see members.h. */
#include "rendezvous/members.h"

#include <errno.h>
#include <string.h>

#include "rendezvous/topo.h"
#include "store/wire/wire.h"

/* Daemons accept any spec this codec writes, whatever --max-key-bytes. */
_Static_assert(RDZV_MEMBERS_MAX_BYTES == RDZV_WIRE_MEMBERS_MAX_BYTES,
               "members.h and wire.h disagree on the longest spec");

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static int64_t rank_at(const int32_t *ranks, int64_t i) {
  return ranks != NULL ? ranks[i] : i;
}

int rdzv_members_encode(const int32_t *ranks, int64_t n, int kind, uint8_t *out,
                        size_t cap) {
  if (n < 1 || n > INT32_MAX ||
      (kind != RDZV_MEMBERS_EACH && kind != RDZV_MEMBERS_BLOCKS))
    return -EINVAL;
  struct rdzv_members_run runs[RDZV_MEMBERS_MAX_RUNS];
  uint32_t nruns = 0;
  if (ranks == NULL) /* the world: one run, O(1) (every rank encodes it) */
    runs[nruns++] = (struct rdzv_members_run){0, 1, (uint32_t)n};
  for (int64_t i = ranks == NULL ? n : 0; i < n;) {
    int64_t first = rank_at(ranks, i), stride = 1, e = i + 1;
    if (first < 0)
      return -EINVAL;
    if (e < n && rank_at(ranks, e) > first) {
      stride = rank_at(ranks, e) - first;
      while (e < n && rank_at(ranks, e) - rank_at(ranks, e - 1) == stride)
        e++;
    }
    if (nruns == RDZV_MEMBERS_MAX_RUNS)
      return -E2BIG;
    runs[nruns++] = (struct rdzv_members_run){(uint32_t)first, (uint32_t)stride,
                                              (uint32_t)(e - i)};
    i = e;
  }
  size_t need = 9 + 12 * (size_t)nruns;
  if (cap < need)
    return -ENOSPC;
  out[0] = (uint8_t)kind;
  put32(out + 1, (uint32_t)n);
  put32(out + 5, nruns);
  for (uint32_t r = 0; r < nruns; r++) {
    put32(out + 9 + 12 * r, runs[r].first);
    put32(out + 13 + 12 * r, runs[r].stride);
    put32(out + 17 + 12 * r, runs[r].len);
  }
  return (int)need;
}

int rdzv_members_decode(const uint8_t *p, size_t len,
                        struct rdzv_members *out) {
  if (len < 9)
    return -EINVAL;
  memset(out, 0, sizeof(*out));
  out->kind = p[0];
  out->nmembers = get32(p + 1);
  out->nruns = get32(p + 5);
  if ((out->kind != RDZV_MEMBERS_EACH && out->kind != RDZV_MEMBERS_BLOCKS) ||
      out->nmembers < 1 || out->nmembers > INT32_MAX || out->nruns < 1 ||
      out->nruns > RDZV_MEMBERS_MAX_RUNS || len != 9 + 12 * (size_t)out->nruns)
    return -EINVAL;
  uint64_t total = 0;
  for (uint32_t r = 0; r < out->nruns; r++) {
    struct rdzv_members_run *run = &out->runs[r];
    run->first = get32(p + 9 + 12 * r);
    run->stride = get32(p + 13 + 12 * r);
    run->len = get32(p + 17 + 12 * r);
    if (run->stride < 1 || run->len < 1 ||
        (uint64_t)run->first + (uint64_t)run->stride * (run->len - 1) >
            INT32_MAX)
      return -EINVAL;
    total += run->len;
  }
  return total == out->nmembers ? 0 : -EINVAL;
}

int64_t rdzv_members_index(const struct rdzv_members *m, int64_t rank) {
  int64_t base = 0;
  for (uint32_t r = 0; r < m->nruns; r++) {
    const struct rdzv_members_run *run = &m->runs[r];
    if (rank >= run->first && (rank - run->first) % run->stride == 0 &&
        (rank - run->first) / run->stride < run->len)
      return base + (rank - run->first) / run->stride;
    base += run->len;
  }
  return -1;
}

int rdzv_members_contributes(const struct rdzv_members *m, uint64_t count,
                             int64_t rank) {
  int64_t i = rdzv_members_index(m, rank);
  if (i < 0)
    return 0;
  if (m->kind == RDZV_MEMBERS_EACH)
    return (uint64_t)i < count;
  if (count < 1 || count > m->nmembers)
    return 0;
  int64_t b = rdzv_nccl_block_of(i, m->nmembers, (int64_t)count);
  return b >= 0 && rdzv_nccl_block_first(b, m->nmembers, (int64_t)count) == i;
}
