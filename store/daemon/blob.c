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

void rdzv__blob_unref(struct rdzv_blob *b) {
  if (b == NULL || --b->refs > 0)
    return;
  if (!b->inline_data)
    free(b->data);
  free(b);
}

bool rdzv__blob_holds(const struct rdzv_blob *b, const void *p, size_t n) {
  uintptr_t a = (uintptr_t)b->data, x = (uintptr_t)p;
  return n > 0 && p != NULL && x >= a && n <= b->len && x - a <= b->len - n;
}
