/* libFuzzer target: the Slurm host-list codec (tools/hostlist.h) on
 * arbitrary bytes taken as a list.
 *
 * Properties, for any input:
 *  - nothing crashes or reads outside the input (libFuzzer passes an
 *    exact-size buffer; ASan);
 *  - the status is 0 or one the header documents, and count and expand
 *    agree on it; a rejection names an offset inside the input and a
 *    reason, and the callback never ran;
 *  - on success the number of callbacks is the count, and every name is
 *    1 .. RDZV_HOSTLIST_NAME_MAX bytes, NUL-terminated, with no ',', '[',
 *    ']', blank or control character;
 *  - find gives the first name index 0 and any name an index no later
 *    than where it was seen, and the tree position of the last name seen
 *    lists as many ancestors as rdzv_tree_parent's chain.
 * The host limit is 2^16 so that each input stays fast. A failed property
 * aborts, which libFuzzer and the regression driver (fuzz_main.c) report
 * as a crash. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv/error.h"
#include "rendezvous/topo.h"
#include "tools/hostlist.h"

#define MAX_HOSTS ((size_t)1 << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "hostlist_fuzz: property failed: %s\n", what);
    abort();
  }
}

struct seen {
  size_t n;
  char first[RDZV_HOSTLIST_NAME_MAX + 1];
  char probe[RDZV_HOSTLIST_NAME_MAX + 1]; /* the name at index probe_at */
  size_t probe_at;
};

static int on_name(const char *name, size_t len, void *arg) {
  struct seen *s = arg;
  size_t i;

  require(len >= 1 && len <= RDZV_HOSTLIST_NAME_MAX, "name length");
  require(name[len] == '\0', "name NUL-terminated");
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    require(c != ',' && c != '[' && c != ']' && c != ' ' && c > 0x1f &&
                c != 0x7f,
            "name without separators, brackets or controls");
  }
  if (s->n == 0)
    memcpy(s->first, name, len + 1);
  /* Probe a name that may appear earlier too: the 7th, or the last. */
  if (s->n <= 7) {
    memcpy(s->probe, name, len + 1);
    s->probe_at = s->n;
  }
  s->n++;
  return 0;
}

static int documented(int rc) {
  return rc == 0 || rc == RDZV_EBAD_ADDR || rc == -E2BIG || rc == -ENAMETOOLONG;
}

static size_t chain_length(size_t i, size_t fanout) {
  int64_t cur = (int64_t)i;
  size_t n = 0;

  while (cur > 0) {
    cur = rdzv_tree_parent(cur, cur + 1, (int64_t)fanout);
    n++;
  }
  return n;
}

static void check_position(const char *list, size_t size, const struct seen *s,
                           size_t fanout) {
  static char names[(RDZV_HOSTLIST_NAME_MAX + 1) * 8];
  struct rdzv_hostlist_pos pos;
  size_t index = SIZE_MAX;
  int rc;

  rc = rdzv_hostlist_find(list, size, MAX_HOSTS, s->first, &index, NULL);
  require(rc == 0 && index == 0, "the first name is at index 0");
  rc = rdzv_hostlist_find(list, size, MAX_HOSTS, s->probe, &index, NULL);
  require(rc == 0 && index <= s->probe_at, "find: first occurrence");
  rc = rdzv_hostlist_tree_position(list, size, MAX_HOSTS, s->probe, fanout,
                                   names, sizeof(names), &pos, NULL);
  require(rc == 0 && pos.index == index, "tree position: the find index");
  require(pos.nancestors == chain_length(index, fanout),
          "tree position: the chain of rdzv_tree_parent");
  require(pos.names_len >= 2 * pos.nancestors && pos.names_len <= sizeof(names),
          "tree position: names length");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *list = (const char *)data;
  struct rdzv_hostlist_error e = {SIZE_MAX, NULL};
  struct seen s;
  size_t count = SIZE_MAX;
  int rc, crc;

  memset(&s, 0, sizeof(s));
  crc = rdzv_hostlist_count(size > 0 ? list : NULL, size, MAX_HOSTS, &count,
                            NULL);
  rc = rdzv_hostlist_expand(size > 0 ? list : NULL, size, MAX_HOSTS, on_name,
                            &s, &e);
  require(documented(rc), "a documented status");
  require(rc == crc, "count and expand agree");
  if (rc != 0) {
    require(s.n == 0, "no callback for a rejected list");
    require(e.reason != NULL && e.pos <= size, "error offset and reason");
    return 0;
  }
  require(count == s.n, "count equals the number of callbacks");
  if (s.n > 0)
    check_position(list, size, &s, 1 + (size % 5));
  return 0;
}
