/* Rank assignment: see assign.h. */
#include "rendezvous/assign.h"

#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"

static int bytes_cmp(const uint8_t *a, uint32_t an, const uint8_t *b,
                     uint32_t bn) {
  uint32_t n = an < bn ? an : bn;
  int c = n ? memcmp(a, b, n) : 0;
  if (c != 0)
    return c;
  return an < bn ? -1 : an > bn;
}

/* Natural order: runs of digits compare as numbers ("n2" < "n10",
 * "pod-9" < "pod-10", "rack2" < "rack10"), so a launcher's node index in
 * a host name gives the rank order its own index gives; the rest
 * compares bytewise. Digit runs are compared by length after their
 * leading zeros, so no run overflows; equal numbers with more leading
 * zeros come after ("n1" < "n01"). 0 only for equal bytes. */
int rdzv_natural_cmp(const uint8_t *a, uint32_t an, const uint8_t *b,
                     uint32_t bn) {
  uint32_t i = 0, j = 0;
  while (i < an && j < bn) {
    int da = a[i] >= '0' && a[i] <= '9', db = b[j] >= '0' && b[j] <= '9';
    if (!da || !db) {
      if (a[i] != b[j])
        return a[i] < b[j] ? -1 : 1;
      i++;
      j++;
      continue;
    }
    uint32_t si = i, sj = j;
    while (i < an && a[i] == '0')
      i++;
    while (j < bn && b[j] == '0')
      j++;
    uint32_t ni = i, nj = j; /* first significant digits */
    while (i < an && a[i] >= '0' && a[i] <= '9')
      i++;
    while (j < bn && b[j] >= '0' && b[j] <= '9')
      j++;
    if (i - ni != j - nj)
      return i - ni < j - nj ? -1 : 1;
    int c = memcmp(a + ni, b + nj, i - ni);
    if (c != 0)
      return c < 0 ? -1 : 1;
    if (ni - si != nj - sj) /* the same number: fewer zeros first */
      return ni - si < nj - sj ? -1 : 1;
  }
  if (i < an || j < bn)
    return i < an ? 1 : -1;
  return 0;
}

static int same_host(const struct rdzv_join_rec *a,
                     const struct rdzv_join_rec *b) {
  return bytes_cmp(a->location, a->location_len, b->location,
                   b->location_len) == 0 &&
         bytes_cmp(a->host, a->host_len, b->host, b->host_len) == 0;
}

int rdzv_join_cmp(const struct rdzv_join_rec *a,
                  const struct rdzv_join_rec *b) {
  int c = rdzv_natural_cmp(a->location, a->location_len, b->location,
                           b->location_len);
  if (c == 0)
    c = rdzv_natural_cmp(a->host, a->host_len, b->host, b->host_len);
  if (c == 0)
    c = a->local_rank < b->local_rank ? -1 : a->local_rank > b->local_rank;
  return c;
}

/* Bottom-up merge sort of indices: stable and O(n log n) without qsort's
 * missing context argument. */
void rdzv_join_sort(const struct rdzv_join_rec *recs, size_t *idx, size_t *tmp,
                    size_t n) {
  for (size_t w = 1; w < n; w *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * w) {
      size_t mid = lo + w < n ? lo + w : n;
      size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi)
        tmp[k++] = rdzv_join_cmp(&recs[idx[j]], &recs[idx[i]]) < 0 ? idx[j++]
                                                                   : idx[i++];
      while (i < mid)
        tmp[k++] = idx[i++];
      while (j < hi)
        tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, n * sizeof(*idx));
  }
}

int rdzv_assign(const struct rdzv_join_rec *recs, size_t n,
                struct rdzv_assignment *out, size_t *scratch, size_t *dup_a,
                size_t *dup_b) {
  size_t *tmp = malloc(n * sizeof(*tmp));
  if (tmp == NULL)
    return RDZV_ENOMEM;
  for (size_t i = 0; i < n; i++)
    scratch[i] = i;
  rdzv_join_sort(recs, scratch, tmp, n);
  free(tmp);
  for (size_t i = 1; i < n; i++) {
    if (rdzv_join_cmp(&recs[scratch[i - 1]], &recs[scratch[i]]) == 0) {
      *dup_a = scratch[i - 1];
      *dup_b = scratch[i];
      return RDZV_EDUPLICATE_CLAIM;
    }
  }
  /* Walk hosts in order: each run of equal (location, host) is one host. */
  int32_t hosts = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || !same_host(&recs[scratch[i - 1]], &recs[scratch[i]]))
      hosts++;
  int32_t node = -1;
  size_t start = 0, end = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || !same_host(&recs[scratch[i - 1]], &recs[scratch[i]])) {
      node++;
      start = end = i;
      while (end + 1 < n &&
             same_host(&recs[scratch[i]], &recs[scratch[end + 1]]))
        end++;
    }
    struct rdzv_assignment *a = &out[scratch[i]];
    a->rank = (int32_t)i;
    a->world_size = (int32_t)n;
    a->local_rank = (int32_t)(i - start);
    a->local_size = (int32_t)(end - start + 1);
    a->node_rank = node;
    a->node_count = hosts;
  }
  return 0;
}
