/* Reference-counted byte strings (blob.h). */
#include "store/daemon/blob.h"

#include <stdlib.h>
#include <string.h>

struct rdzv_blob *rdzv__blob_take(uint8_t *mem, uint32_t len, size_t cap) {
  struct rdzv_blob *b = malloc(sizeof(*b));
  if (b == NULL) {
    free(mem);
    return NULL;
  }
  b->refs = 1;
  b->len = len;
  b->data = mem;
  b->cap = cap;
  b->inline_data = false;
  b->interned = false;
  if (cap > len)
    mem[len] = 0;
  return b;
}

struct rdzv_blob *rdzv__blob_new(const void *p, uint32_t n) {
  /* One allocation: the bytes follow the struct. */
  struct rdzv_blob *b = malloc(sizeof(*b) + (size_t)n + 1);
  if (b == NULL)
    return NULL;
  b->refs = 1;
  b->len = n;
  b->data = (uint8_t *)(b + 1);
  b->cap = (size_t)n + 1;
  b->inline_data = true;
  b->interned = false;
  if (n > 0)
    memcpy(b->data, p, n);
  b->data[n] = 0;
  return b;
}

struct rdzv_blob *rdzv__blob_ref(struct rdzv_blob *b) {
  if (b != NULL)
    b->refs++;
  return b;
}

static void intern_remove(struct rdzv_blob *b);

void rdzv__blob_unref(struct rdzv_blob *b) {
  if (b == NULL || --b->refs > 0)
    return;
  if (b->interned)
    intern_remove(b);
  if (!b->inline_data)
    free(b->data);
  free(b);
}

bool rdzv__blob_holds(const struct rdzv_blob *b, const void *p, size_t n) {
  uintptr_t a = (uintptr_t)b->data, x = (uintptr_t)p;
  return n > 0 && p != NULL && x >= a && n <= b->len && x - a <= b->len - n;
}

/* The intern table: buckets by hash; a few distinct big values per job. */
#define INTERN_BUCKETS 256u
static _Thread_local struct rdzv_blob *intern_tab[INTERN_BUCKETS];
static _Thread_local uint8_t *spare;
static _Thread_local size_t spare_cap;

/* FNV-1a over len and at most 512 evenly spread 8-byte words of
 * p[skip..len): a candidate filter only, every match is confirmed by
 * memcmp. */
static uint64_t sample_hash(const uint8_t *p, uint32_t len, uint32_t skip) {
  uint64_t h = 1469598103934665603ull ^ len;
  size_t n = len - skip, words = n / 8, step = words > 512 ? words / 512 : 1;
  const uint8_t *q = p + skip;
  for (size_t w = 0; w < words; w += step) {
    uint64_t x;
    memcpy(&x, q + w * 8, 8);
    h = (h ^ x) * 1099511628211ull;
  }
  for (size_t i = words * 8; i < n; i++)
    h = (h ^ q[i]) * 1099511628211ull;
  return h;
}

struct rdzv_blob *rdzv__blob_intern_find(const uint8_t *p, uint32_t len,
                                         uint32_t skip, uint64_t *hash) {
  uint64_t h = sample_hash(p, len, skip);
  *hash = h;
  for (struct rdzv_blob *b = intern_tab[h % INTERN_BUCKETS]; b != NULL;
       b = b->inext)
    if (b->hash == h && b->len == len && b->skip == skip &&
        memcmp(b->data + skip, p + skip, len - skip) == 0)
      return b;
  return NULL;
}

void rdzv__blob_intern_add(struct rdzv_blob *b, uint32_t skip, uint64_t hash) {
  struct rdzv_blob **head = &intern_tab[hash % INTERN_BUCKETS];
  b->interned = true;
  b->skip = skip;
  b->hash = hash;
  b->inext = *head;
  *head = b;
}

static void intern_remove(struct rdzv_blob *b) {
  for (struct rdzv_blob **pp = &intern_tab[b->hash % INTERN_BUCKETS];
       *pp != NULL; pp = &(*pp)->inext)
    if (*pp == b) {
      *pp = b->inext;
      break;
    }
  b->interned = false;
}

void rdzv__blob_spare_release(void) {
  free(spare);
  spare = NULL;
  spare_cap = 0;
}

uint8_t *rdzv__blob_spare_take(size_t need, size_t *cap) {
  /* Not for a much smaller frame: the buffer becomes that frame's blob
   * (upstream.c) and stays whole as long as it is held, a cached 24 KB
   * value keeping 4 MiB of warm memory. */
  if (spare == NULL || spare_cap < need || spare_cap / 2 > need)
    return NULL;
  uint8_t *m = spare;
  *cap = spare_cap;
  spare = NULL;
  spare_cap = 0;
  return m;
}

void rdzv__blob_spare_give(uint8_t *mem, size_t cap) {
  if (mem == NULL)
    return;
  if (cap > spare_cap && cap <= RDZV_BLOB_SPARE_MAX_BYTES) {
    free(spare);
    spare = mem;
    spare_cap = cap;
  } else {
    free(mem);
  }
}
