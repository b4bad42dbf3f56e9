/* librdzv: containers of the client's requests: the two request lists,
 * the table of sent requests by id (open addressing, so that thousands of
 * outstanding requests cost O(1) per reply) and the deadline min-heap (so
 * that the next timer is O(1) and each completion O(log n)). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdlib.h>
#include <string.h>

#include "store/client/client_int.h"

/* ---- request lists ------------------------------------------------------ */

void rdzv__list_push_back(struct rdzv__req_list *l, struct rdzv__req *r) {
  r->next = NULL;
  r->prev = l->tail;
  if (l->tail != NULL)
    l->tail->next = r;
  else
    l->head = r;
  l->tail = r;
  l->n++;
}

void rdzv__list_push_front(struct rdzv__req_list *l, struct rdzv__req *r) {
  r->prev = NULL;
  r->next = l->head;
  if (l->head != NULL)
    l->head->prev = r;
  else
    l->tail = r;
  l->head = r;
  l->n++;
}

void rdzv__list_remove(struct rdzv__req_list *l, struct rdzv__req *r) {
  if (r->prev != NULL)
    r->prev->next = r->next;
  else
    l->head = r->next;
  if (r->next != NULL)
    r->next->prev = r->prev;
  else
    l->tail = r->prev;
  r->prev = NULL;
  r->next = NULL;
  l->n--;
}

/* ---- id table: open addressing, linear probing, backward-shift delete --- */

static size_t tab_slot(uint32_t id, size_t cap) {
  return (size_t)(id * 0x9E3779B1u) & (cap - 1);
}

static int tab_grow(struct rdzv_client *c) {
  size_t cap = c->tab_cap != 0 ? c->tab_cap * 2 : 64;
  struct rdzv__req **t = calloc(cap, sizeof(*t));
  size_t i;
  size_t j;

  if (t == NULL)
    return RDZV_ENOMEM;
  for (i = 0; i < c->tab_cap; i++) {
    if (c->tab[i] == NULL)
      continue;
    j = tab_slot(c->tab[i]->id, cap);
    while (t[j] != NULL)
      j = (j + 1) & (cap - 1);
    t[j] = c->tab[i];
  }
  free(c->tab);
  c->tab = t;
  c->tab_cap = cap;
  return 0;
}

int rdzv__tab_put(struct rdzv_client *c, struct rdzv__req *r) {
  size_t j;
  int err;

  /* Keep the load at most one half so probes stay short. */
  if ((c->tab_n + 1) * 2 > c->tab_cap) {
    err = tab_grow(c);
    if (err < 0)
      return err;
  }
  j = tab_slot(r->id, c->tab_cap);
  while (c->tab[j] != NULL)
    j = (j + 1) & (c->tab_cap - 1);
  c->tab[j] = r;
  c->tab_n++;
  return 0;
}

struct rdzv__req *rdzv__tab_find(const struct rdzv_client *c, uint32_t id) {
  size_t j;

  if (c->tab_cap == 0)
    return NULL;
  j = tab_slot(id, c->tab_cap);
  while (c->tab[j] != NULL) {
    if (c->tab[j]->id == id)
      return c->tab[j];
    j = (j + 1) & (c->tab_cap - 1);
  }
  return NULL;
}

void rdzv__tab_clear(struct rdzv_client *c) {
  if (c->tab_cap > 0)
    memset(c->tab, 0, c->tab_cap * sizeof(*c->tab));
  c->tab_n = 0;
}

void rdzv__tab_del(struct rdzv_client *c, uint32_t id) {
  size_t mask = c->tab_cap - 1;
  size_t i;
  size_t j;
  size_t home;

  if (c->tab_cap == 0)
    return;
  i = tab_slot(id, c->tab_cap);
  while (c->tab[i] != NULL && c->tab[i]->id != id)
    i = (i + 1) & mask;
  if (c->tab[i] == NULL)
    return;
  c->tab[i] = NULL;
  c->tab_n--;
  /* Move back every later entry of the run whose home slot does not lie
   * cyclically in (i, j]: it would be unreachable past the new hole. */
  for (j = (i + 1) & mask; c->tab[j] != NULL; j = (j + 1) & mask) {
    home = tab_slot(c->tab[j]->id, c->tab_cap);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      c->tab[i] = c->tab[j];
      c->tab[j] = NULL;
      i = j;
    }
  }
}

/* ---- deadline heap ------------------------------------------------------ */

static void heap_set(struct rdzv_client *c, size_t i, struct rdzv__req *r) {
  c->heap[i] = r;
  r->heap_idx = i;
}

static void heap_up(struct rdzv_client *c, size_t i) {
  struct rdzv__req *r = c->heap[i];

  while (i > 0 && c->heap[(i - 1) / 2]->deadline > r->deadline) {
    heap_set(c, i, c->heap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_set(c, i, r);
}

static void heap_down(struct rdzv_client *c, size_t i) {
  struct rdzv__req *r = c->heap[i];
  size_t k;

  for (;;) {
    k = 2 * i + 1;
    if (k >= c->heap_n)
      break;
    if (k + 1 < c->heap_n && c->heap[k + 1]->deadline < c->heap[k]->deadline)
      k++;
    if (c->heap[k]->deadline >= r->deadline)
      break;
    heap_set(c, i, c->heap[k]);
    i = k;
  }
  heap_set(c, i, r);
}

int rdzv__heap_push(struct rdzv_client *c, struct rdzv__req *r) {
  struct rdzv__req **h;
  size_t cap;

  if (c->heap_n == c->heap_cap) {
    cap = c->heap_cap != 0 ? c->heap_cap * 2 : 64;
    h = realloc(c->heap, cap * sizeof(*h));
    if (h == NULL)
      return RDZV_ENOMEM;
    c->heap = h;
    c->heap_cap = cap;
  }
  heap_set(c, c->heap_n++, r);
  heap_up(c, c->heap_n - 1);
  return 0;
}

void rdzv__heap_remove(struct rdzv_client *c, struct rdzv__req *r) {
  size_t i = r->heap_idx;
  struct rdzv__req *last;

  if (i == SIZE_MAX)
    return;
  r->heap_idx = SIZE_MAX;
  last = c->heap[--c->heap_n];
  if (last == r)
    return;
  heap_set(c, i, last);
  heap_up(c, i);
  heap_down(c, last->heap_idx);
}

int rdzv__op_is_read(int op) {
  switch (op) {
  case RDZV_OP_GET:
  case RDZV_OP_WAIT:
  case RDZV_OP_MGET:
  case RDZV_OP_NKEYS:
  case RDZV_OP_STATS:
    return 1;
  default:
    return 0;
  }
}
