/* Unit tests for tools/hostlist.c, the Slurm host-list codec.
 *
 * The golden vectors (hostlist_vectors.txt) are scontrol's own answers,
 * written by hostlist_vectors_gen.sh: every list it accepts must expand to
 * the same names in the same order, every list it rejects must be
 * rejected, and so must the lists where scontrol invents names. Each input
 * is run from an exact-size heap copy, without a terminating NUL, so that
 * ASan sees any read past its end; every prefix of the short ones must be
 * accepted or rejected cleanly, and a prefix that ends before a separator
 * must give a prefix of the names. Then: error positions and reasons,
 * limits, the API's argument checks, and the tree position against
 * rdzv_tree_parent. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv/error.h"
#include "rendezvous/topo.h"
#include "tools/hostlist.h"

#define VECTORS "tests/unit/hostlist_vectors.txt"
#define BIG ((size_t)1 << 24)

/* ---- collecting names ------------------------------------------------ */

/* The expansion's output as scontrol prints it (name, newline), or for
 * long ones only its count, hash and ends. */
struct out {
  char *text;
  size_t len;
  size_t cap;
  int keep_text;
  size_t n;
  uint32_t hash;
  char first[RDZV_HOSTLIST_NAME_MAX + 1];
  char last[RDZV_HOSTLIST_NAME_MAX + 1];
  int bad_name; /* a name broke the callback's contract */
};

static void out_init(struct out *o, int keep_text) {
  memset(o, 0, sizeof(*o));
  o->keep_text = keep_text;
}

static void out_free(struct out *o) { free(o->text); }

static void out_append(struct out *o, const char *p, size_t n) {
  if (o->len + n + 1 > o->cap) {
    o->cap = (o->len + n + 1) * 2;
    o->text = realloc(o->text, o->cap);
    assert_non_null(o->text);
  }
  memcpy(o->text + o->len, p, n);
  o->len += n;
  o->text[o->len] = '\0';
}

static int collect(const char *name, size_t len, void *arg) {
  struct out *o = arg;
  size_t i;

  if (len == 0 || len > RDZV_HOSTLIST_NAME_MAX || name[len] != '\0' ||
      strlen(name) != len || strpbrk(name, ",[] \t") != NULL)
    o->bad_name = 1;
  for (i = 0; i < len; i++)
    o->hash = o->hash * 31u + (unsigned char)name[i];
  o->hash = o->hash * 31u + '\n';
  if (o->n == 0)
    memcpy(o->first, name, len + 1);
  memcpy(o->last, name, len + 1);
  o->n++;
  if (o->keep_text) {
    out_append(o, name, len);
    out_append(o, "\n", 1);
  }
  return 0;
}

/* Expands s[0..n) from an exact-size heap copy. */
static int expand_copy(const char *s, size_t n, size_t max_hosts, struct out *o,
                       struct rdzv_hostlist_error *e) {
  char *p = malloc(n != 0 ? n : 1);
  int rc;

  assert_non_null(p);
  memcpy(p, s, n);
  rc = rdzv_hostlist_expand(n != 0 ? p : NULL, n, max_hosts, collect, o, e);
  free(p);
  return rc;
}

/* ---- golden vectors ------------------------------------------------- */

enum kind { K_NONE, K_OUT, K_SUM, K_INVALID, K_STRICTER };

struct record {
  char *in;
  enum kind kind;
  struct out want; /* K_OUT: text; K_SUM: n, hash, first, last */
};

/* Every prefix of s (short inputs) is accepted or rejected cleanly; one
 * that ends right before a separator outside brackets gives a prefix of
 * the whole list's names. */
static void check_prefixes(const char *s, size_t len, const struct out *all) {
  size_t k, depth = 0;

  for (k = 0; k <= len && len <= 256; k++) {
    struct rdzv_hostlist_error e = {0, NULL};
    struct out o;
    int rc;
    out_init(&o, 1);
    rc = expand_copy(s, k, BIG, &o, &e);
    if (rc != 0 && rc != RDZV_EBAD_ADDR)
      fail_msg("[%s] prefix %zu: status %d", s, k, rc);
    if (rc != 0 && (e.reason == NULL || e.pos > k))
      fail_msg("[%s] prefix %zu: error at %zu of %zu", s, k, e.pos, k);
    if (all != NULL && depth == 0 &&
        (k == len || strchr(", \t", s[k]) != NULL)) {
      if (rc != 0 || o.len > all->len ||
          (o.len > 0 && memcmp(o.text, all->text, o.len) != 0))
        fail_msg("[%s] prefix %zu: names [%s] are not a prefix of [%s]", s, k,
                 o.text != NULL ? o.text : "", all->text);
    }
    if (k < len && s[k] == '[')
      depth++;
    if (k < len && s[k] == ']' && depth > 0)
      depth--;
    out_free(&o);
  }
}

static void check_record(const struct record *r) {
  struct rdzv_hostlist_error e = {0, NULL};
  size_t len = strlen(r->in), count = 0;
  struct out o;
  int rc, crc;

  out_init(&o, r->kind == K_OUT);
  rc = expand_copy(r->in, len, BIG, &o, &e);
  crc = rdzv_hostlist_count(r->in, len, BIG, &count, NULL);
  if (crc != rc)
    fail_msg("[%s]: count says %d, expand %d", r->in, crc, rc);
  if (r->kind == K_INVALID || r->kind == K_STRICTER) {
    if (rc != RDZV_EBAD_ADDR || o.n != 0 || e.reason == NULL || e.pos > len)
      fail_msg("[%s]: status %d, %zu names, error at %zu: want a rejection",
               r->in, rc, o.n, e.pos);
    out_free(&o);
    return;
  }
  if (rc != 0)
    fail_msg("[%s]: status %d at %zu (%s)", r->in, rc, e.pos, e.reason);
  if (o.bad_name || count != o.n)
    fail_msg("[%s]: bad name, or count %zu for %zu names", r->in, count, o.n);
  if (r->kind == K_OUT &&
      (o.len != r->want.len ||
       (o.len > 0 && memcmp(o.text, r->want.text, o.len) != 0)))
    fail_msg("[%s]: got\n%swant\n%s", r->in, o.text != NULL ? o.text : "",
             r->want.text != NULL ? r->want.text : "");
  if (r->kind == K_SUM && (o.n != r->want.n || o.hash != r->want.hash ||
                           strcmp(o.first, r->want.first) != 0 ||
                           strcmp(o.last, r->want.last) != 0))
    fail_msg("[%.60s]: %zu names, hash %u, %s .. %s; want %zu, %u, %s .. %s",
             r->in, o.n, o.hash, o.first, o.last, r->want.n, r->want.hash,
             r->want.first, r->want.last);
  check_prefixes(r->in, len, r->kind == K_OUT ? &o : NULL);
  out_free(&o);
}

/* Applies one line of the vectors file to the record being read. */
static void read_line(struct record *r, const char *line) {
  unsigned long long n = 0;
  unsigned long h = 0;
  char first[RDZV_HOSTLIST_NAME_MAX + 1], last[RDZV_HOSTLIST_NAME_MAX + 1];

  if (strncmp(line, "out ", 4) == 0) {
    r->kind = K_OUT;
    out_append(&r->want, line + 4, strlen(line + 4));
    out_append(&r->want, "\n", 1);
  } else if (strncmp(line, "sum ", 4) == 0) {
    assert_int_equal(
        sscanf(line + 4, "%llu %lu %255s %255s", &n, &h, first, last), 4);
    r->kind = K_SUM;
    r->want.n = (size_t)n;
    r->want.hash = (uint32_t)h;
    memcpy(r->want.first, first, sizeof(first));
    memcpy(r->want.last, last, sizeof(last));
  } else if (strcmp(line, "invalid") == 0) {
    r->kind = K_INVALID;
  } else if (strcmp(line, "stricter") == 0) {
    r->kind = K_STRICTER;
  } else if (strncmp(line, "was ", 4) != 0 && strcmp(line, "was") != 0) {
    fail_msg("vectors: unexpected line [%s]", line);
  }
}

static void test_golden_vectors(void **state) {
  FILE *f = fopen(VECTORS, "r");
  struct record r = {NULL, K_NONE, {0}};
  size_t cap = 0, nrec = 0, kinds[5] = {0};
  char *line = NULL;
  ssize_t got;

  (void)state;
  if (f == NULL)
    fail_msg("cannot open %s", VECTORS);
  for (;;) {
    got = getline(&line, &cap, f);
    if (got > 0 && line[got - 1] == '\n')
      line[--got] = '\0';
    if (got < 0 || strncmp(line, "in ", 3) == 0 || strcmp(line, "in") == 0) {
      if (r.in != NULL) {
        check_record(&r);
        kinds[r.kind]++;
        nrec++;
        free(r.in);
        out_free(&r.want);
      }
      if (got < 0)
        break;
      memset(&r, 0, sizeof(r));
      r.in = strdup(got > 3 ? line + 3 : "");
      r.kind = K_OUT; /* no out line at all: no hosts */
      continue;
    }
    if (line[0] != '#')
      read_line(&r, line);
  }
  free(line);
  fclose(f);
  /* A truncated or missing data file must not pass. */
  assert_true(nrec >= 120);
  assert_true(kinds[K_OUT] >= 60 && kinds[K_SUM] >= 5);
  assert_true(kinds[K_INVALID] >= 30 && kinds[K_STRICTER] >= 10);
}

/* ---- malformed input: positions and reasons --------------------------- */

struct bad {
  const char *in;
  size_t len; /* 0: strlen(in) */
  int status;
  size_t pos;
  const char *reason; /* a part of it */
};

static const struct bad bad_lists[] = {
    {"n[1-3", 0, RDZV_EBAD_ADDR, 1, "without ']'"},
    {"ok,n[1-3,x", 0, RDZV_EBAD_ADDR, 4, "without ']'"},
    {"n[1-3,,4]", 0, RDZV_EBAD_ADDR, 6, "without a number"},
    {"good,n[1-3,]", 0, RDZV_EBAD_ADDR, 11, "without a number"},
    {"n[]", 0, RDZV_EBAD_ADDR, 2, "without a number"},
    {"n[-1]", 0, RDZV_EBAD_ADDR, 2, "without a number"},
    {"n[a-b]", 0, RDZV_EBAD_ADDR, 2, "without a number"},
    {"n[1-3]x", 0, RDZV_EBAD_ADDR, 6, "after the name's last"},
    {"a[1-2]b[3-4]c", 0, RDZV_EBAD_ADDR, 12, "after the name's last"},
    {"a,b]", 0, RDZV_EBAD_ADDR, 3, "']' without '['"},
    {"n1-3]", 0, RDZV_EBAD_ADDR, 4, "']' without '['"},
    {"n[[1]]", 0, RDZV_EBAD_ADDR, 2, "inside brackets"},
    {"a[1[2]", 0, RDZV_EBAD_ADDR, 3, "inside brackets"},
    {"a\nb", 0, RDZV_EBAD_ADDR, 1, "control"},
    {"a,b\r", 0, RDZV_EBAD_ADDR, 3, "control"},
    {"n[1\x7f]", 0, RDZV_EBAD_ADDR, 3, "control"},
    {"a\0b", 3, RDZV_EBAD_ADDR, 1, "NUL"},
    {"n[10-8]", 0, RDZV_EBAD_ADDR, 2, "backwards"},
    {"ab,n[1--3]", 0, RDZV_EBAD_ADDR, 7, "negative"},
    {"n[1-2-3]", 0, RDZV_EBAD_ADDR, 5, "unexpected text"},
    {"n[1y]", 0, RDZV_EBAD_ADDR, 3, "unexpected text"},
    {"n[1y-]", 0, RDZV_EBAD_ADDR, 3, "unexpected text"},
    {"n[1-3 ]", 0, RDZV_EBAD_ADDR, 5, "unexpected text"},
    {"n[1x-3]", 0, RDZV_EBAD_ADDR, 3, "'x'"},
    {"n[0x10]", 0, RDZV_EBAD_ADDR, 3, "'x'"},
    {"n[000001-100000]", 0, RDZV_EBAD_ADDR, 2, "65536 values in one range"},
    {"n[0-65536]", 0, RDZV_EBAD_ADDR, 2, "65536 values in one range"},
    {"n[1- -3]", 0, RDZV_EBAD_ADDR, 2, "65536 values in one range"},
    {"n[99999999999999999999]", 0, RDZV_EBAD_ADDR, 2, "too large"},
    {"n[1-18446744073709551615]", 0, RDZV_EBAD_ADDR, 4, "too large"},
    {"n[1- -1]", 0, RDZV_EBAD_ADDR, 6, "too large"},
    {"x,n99999999999999999999", 0, RDZV_EBAD_ADDR, 3, "too large"},
    {"a[0-40000,40001-80000]b[1]", 0, RDZV_EBAD_ADDR, 1, "before the last"},
    {"a[0-40000,40001-80000]b[1]c[1]", 0, RDZV_EBAD_ADDR, 1, "before the last"},
    {"a[1]b[0-40000,40001-80000]c[1]", 0, RDZV_EBAD_ADDR, 5, "before the last"},
};

static void test_malformed(void **state) {
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++) {
    const struct bad *b = &bad_lists[i];
    size_t len = b->len != 0 ? b->len : strlen(b->in);
    struct rdzv_hostlist_error e = {99999, NULL};
    struct out o;
    int rc;
    out_init(&o, 0);
    rc = expand_copy(b->in, len, BIG, &o, &e);
    if (rc != b->status || e.pos != b->pos || e.reason == NULL ||
        strstr(e.reason, b->reason) == NULL || o.n != 0)
      fail_msg("[%s]: status %d at %zu (%s), %zu names; want %d at %zu (%s)",
               b->in, rc, e.pos, e.reason != NULL ? e.reason : "-", o.n,
               b->status, b->pos, b->reason);
    out_free(&o);
  }
}

/* A list of n copies of unit, with head before and tail after. */
static char *repeat(const char *head, const char *unit, size_t n,
                    const char *tail) {
  size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail), i;
  char *s = malloc(hl + ul * n + tl + 1);

  assert_non_null(s);
  memcpy(s, head, hl);
  for (i = 0; i < n; i++)
    memcpy(s + hl + i * ul, unit, ul);
  memcpy(s + hl + n * ul, tail, tl + 1);
  return s;
}

static void expect_status(const char *s, size_t max_hosts, int status,
                          size_t pos, size_t hosts) {
  struct rdzv_hostlist_error e = {99999, NULL};
  struct out o;
  int rc;

  out_init(&o, 0);
  rc = expand_copy(s, strlen(s), max_hosts, &o, &e);
  if (rc != status || (rc < 0 && e.pos != pos) || o.n != hosts || o.bad_name)
    fail_msg("[%.40s...]: status %d at %zu, %zu names; want %d at %zu, %zu", s,
             rc, e.pos, o.n, status, pos, hosts);
  out_free(&o);
}

/* Limits: groups per name, name length, ranges per group, hosts. */
static void test_limits(void **state) {
  char *s;

  (void)state;
  s = repeat("", "a[1]", 64, "");
  expect_status(s, BIG, 0, 0, 1);
  free(s);
  s = repeat("x,", "a[1]", 65, "");
  expect_status(s, BIG, RDZV_EBAD_ADDR, 2 + 64 * 4 + 1, 0);
  free(s);
  s = repeat("ok,", "n", 255, "");
  expect_status(s, BIG, 0, 0, 2);
  free(s);
  s = repeat("ok,", "n", 256, "");
  expect_status(s, BIG, -ENAMETOOLONG, 3, 0);
  free(s);
  /* The width counts: 254 bytes of prefix and a 1-digit number fit. */
  s = repeat("", "n", 254, "[8-9]");
  expect_status(s, BIG, 0, 0, 2);
  free(s);
  s = repeat("", "n", 254, "[8-10]");
  expect_status(s, BIG, -ENAMETOOLONG, 0, 0);
  free(s);
  s = repeat("n[", "0", 255, "1]");
  expect_status(s, BIG, -ENAMETOOLONG, 0, 0);
  free(s);
  /* 262144 ranges in one group is Slurm's most (fatal() beyond). */
  s = repeat("n[", "1,", 262143, "1]");
  expect_status(s, BIG, 0, 0, 262144);
  free(s);
  s = repeat("n[", "1,", 262144, "1]");
  expect_status(s, BIG, RDZV_EBAD_ADDR, 2 + 262144 * 2, 0);
  free(s);
  /* max_hosts. */
  expect_status("n[1-10],m[1-10]", 20, 0, 0, 20);
  expect_status("n[1-10],m[1-10]", 19, -E2BIG, 8, 0);
  expect_status("a,b", 0, -E2BIG, 0, 0);
  expect_status("", 0, 0, 0, 0);
  expect_status("a[0-65535]b[0-65535]c[0-65535]", BIG, -E2BIG, 0, 0);
  /* Counting needs no expansion: 2^48 hosts, with no limit. */
  {
    const char *l = "a[0-65535]b[0-65535]c[0-65535]";
    size_t count = 0;
    assert_int_equal(rdzv_hostlist_count(l, strlen(l), SIZE_MAX, &count, NULL),
                     0);
    assert_true(count == (size_t)1 << 48);
  }
}

/* ---- the API ---------------------------------------------------------- */

struct stopper {
  int calls;
  int stop_at;
};

static int stop_cb(const char *name, size_t len, void *arg) {
  struct stopper *s = arg;

  (void)name;
  (void)len;
  return ++s->calls == s->stop_at ? -77 : 0;
}

static void test_api(void **state) {
  struct rdzv_hostlist_error e = {0, NULL};
  struct stopper st = {0, 3};
  size_t count = 99, index = 99;
  struct out o;

  (void)state;
  assert_int_equal(rdzv_hostlist_count(NULL, 0, 10, &count, NULL), 0);
  assert_int_equal(count, 0);
  assert_int_equal(rdzv_hostlist_count(NULL, 1, 10, &count, NULL), -EINVAL);
  assert_int_equal(rdzv_hostlist_count("a", 1, 10, NULL, NULL), -EINVAL);
  assert_int_equal(rdzv_hostlist_expand("a", 1, 10, NULL, NULL, NULL), -EINVAL);
  assert_int_equal(rdzv_hostlist_find("a", 1, 10, NULL, &index, NULL), -EINVAL);
  assert_int_equal(rdzv_hostlist_find("a", 1, 10, "a", NULL, NULL), -EINVAL);
  /* len, not the NUL, ends the list. */
  out_init(&o, 1);
  assert_int_equal(rdzv_hostlist_expand("a,b,c", 3, 10, collect, &o, NULL), 0);
  assert_string_equal(o.text, "a\nb\n");
  out_free(&o);
  out_init(&o, 1);
  assert_int_equal(
      rdzv_hostlist_expand("n[1-2],x[1-3", 6, 10, collect, &o, NULL), 0);
  assert_string_equal(o.text, "n1\nn2\n");
  out_free(&o);
  /* A callback's non-zero value stops the walk and is returned. */
  assert_int_equal(rdzv_hostlist_expand("n[1-9]", 6, 10, stop_cb, &st, &e),
                   -77);
  assert_int_equal(st.calls, 3);
  /* A bad list is rejected before any name reaches the callback. */
  st.calls = 0;
  assert_int_equal(
      rdzv_hostlist_expand("a,b,c,n[1-3", 11, 10, stop_cb, &st, &e),
      RDZV_EBAD_ADDR);
  assert_int_equal(st.calls, 0);
  assert_int_equal(e.pos, 7);
  /* count leaves *count alone on errors; err may be NULL. */
  count = 5;
  assert_int_equal(rdzv_hostlist_count("n[", 2, 10, &count, NULL),
                   RDZV_EBAD_ADDR);
  assert_int_equal(count, 5);
  assert_int_equal(
      rdzv_hostlist_find("b,a,n[1-3],a", 12, 10, "a", &index, NULL), 0);
  assert_int_equal(index, 1);
  assert_int_equal(
      rdzv_hostlist_find("b,a,n[1-3],a", 12, 10, "n3", &index, NULL), 0);
  assert_int_equal(index, 4);
  index = 42;
  assert_int_equal(rdzv_hostlist_find("b,a", 3, 10, "c", &index, NULL),
                   RDZV_ETOPOLOGY);
  assert_int_equal(rdzv_hostlist_find("b,a", 3, 10, "", &index, NULL),
                   RDZV_ETOPOLOGY);
  assert_int_equal(index, 42);
}

/* Random lists from a small alphabet: expansion never fails but with the
 * documented statuses, counts agree, names keep the contract. */
static void test_random(void **state) {
  static const char alphabet[] = "ab0129[[]]],,- x+y";
  uint64_t seed = 0x9e3779b97f4a7c15u;
  char s[24];
  size_t i, k, n, count;
  int rc, crc;

  (void)state;
  for (i = 0; i < 50000; i++) {
    struct rdzv_hostlist_error e = {0, NULL};
    struct out o;
    n = (size_t)(seed >> 60) + 1;
    for (k = 0; k < n; k++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      s[k] = alphabet[(seed >> 33) % (sizeof(alphabet) - 1)];
    }
    out_init(&o, 0);
    rc = expand_copy(s, n, 100000, &o, &e);
    count = 0;
    crc = rdzv_hostlist_count(s, n, 100000, &count, NULL);
    if (rc != crc || (rc == 0 && count != o.n) || o.bad_name ||
        (rc != 0 && rc != RDZV_EBAD_ADDR && rc != -E2BIG) ||
        (rc != 0 && (o.n != 0 || e.pos > n)))
      fail_msg("[%.*s]: status %d/%d, count %zu, %zu names", (int)n, s, rc, crc,
               count, o.n);
    out_free(&o);
  }
}

/* ---- tree position ---------------------------------------------------- */

/* Checks tree_position of host index i of "h[0-(n-1)]" against
 * rdzv_tree_parent. */
static void check_position(const char *list, size_t n, size_t i,
                           size_t fanout) {
  static char names[1 << 20];
  struct rdzv_hostlist_pos pos = {0, 0, 0};
  char host[32], want[32];
  size_t at = 0, k = 0;
  int64_t p = (int64_t)i;
  int rc;

  (void)n;
  snprintf(host, sizeof(host), "h%zu", i);
  rc = rdzv_hostlist_tree_position(list, strlen(list), BIG, host, fanout, names,
                                   sizeof(names), &pos, NULL);
  if (rc != 0 || pos.index != i)
    fail_msg("%s in %s, fanout %zu: status %d, index %zu", host, list, fanout,
             rc, pos.index);
  while (p > 0) {
    int64_t f = fanout > (size_t)INT64_MAX ? INT64_MAX : (int64_t)fanout;
    p = rdzv_tree_parent(p, p + 1, f);
    snprintf(want, sizeof(want), "h%lld", (long long)p);
    if (k >= pos.nancestors || at >= pos.names_len ||
        strcmp(names + at, want) != 0)
      fail_msg("%s, fanout %zu: ancestor %zu is [%s], want %s", host, fanout, k,
               k < pos.nancestors ? names + at : "(none)", want);
    at += strlen(names + at) + 1;
    k++;
  }
  if (k != pos.nancestors || at != pos.names_len)
    fail_msg("%s, fanout %zu: %zu ancestors in %zu bytes, want %zu in %zu",
             host, fanout, pos.nancestors, pos.names_len, k, at);
}

static void test_tree_position_rule(void **state) {
  static const size_t fanouts[] = {1, 2, 3, 4, 16, 64, 1000, SIZE_MAX};
  size_t f, i;

  (void)state;
  for (f = 0; f < sizeof(fanouts) / sizeof(fanouts[0]); f++) {
    for (i = 0; i < 1000; i += (i < 40 ? 1 : 37))
      check_position("h[0-999]", 1000, i, fanouts[f]);
    check_position("h[0-999]", 1000, 999, fanouts[f]);
  }
  /* A chain of 100k (fanout 1) and a deep tree in a 100k list. */
  check_position("h[0-49999,50000-99999]", 100000, 99999, 1);
  check_position("h[0-49999,50000-99999]", 100000, 99999, 2);
}

static void test_tree_position_api(void **state) {
  struct rdzv_hostlist_pos pos = {0, 0, 0};
  struct rdzv_hostlist_error e = {0, NULL};
  const char *l = "n[0-20]";
  char names[64], small[5];

  (void)state;
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "n17", 16,
                                               names, sizeof(names), &pos, &e),
                   0);
  assert_int_equal(pos.index, 17);
  assert_int_equal(pos.nancestors, 2);
  assert_int_equal(pos.names_len, 6);
  assert_memory_equal(names, "n1\0n0\0", 6);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "n0", 16,
                                               NULL, 0, &pos, &e),
                   0);
  assert_int_equal(pos.index, 0);
  assert_int_equal(pos.nancestors, 0);
  assert_int_equal(pos.names_len, 0);
  /* Too small a buffer: the size needed, then success with it. */
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "n20", 1,
                                               small, sizeof(small), &pos, &e),
                   -ENOBUFS);
  assert_int_equal(pos.index, 20);
  assert_int_equal(pos.nancestors, 20);
  assert_int_equal(pos.names_len, 10 * 3 + 10 * 4);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "n20", 1,
                                               names, 64, &pos, &e),
                   -ENOBUFS);
  /* First occurrence; duplicates count as hosts. */
  l = "a,b,a,c";
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "c", 2, names,
                                               sizeof(names), &pos, &e),
                   0);
  assert_int_equal(pos.index, 3);
  assert_int_equal(pos.nancestors, 2);
  assert_memory_equal(names, "b\0a\0", 4);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "a", 2, names,
                                               sizeof(names), &pos, &e),
                   0);
  assert_int_equal(pos.index, 0);
  /* B22: the first node of a mixed list is the tree's root. */
  l = "nodeA,nodeB[001,003],nodeC";
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "nodeC", 16,
                                               names, sizeof(names), &pos, &e),
                   0);
  assert_int_equal(pos.index, 3);
  assert_string_equal(names, "nodeA");
  /* Errors. */
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "nodeD", 16,
                                               names, sizeof(names), &pos, &e),
                   RDZV_ETOPOLOGY);
  assert_int_equal(rdzv_hostlist_tree_position("n[1-", 4, BIG, "n1", 16, names,
                                               sizeof(names), &pos, &e),
                   RDZV_EBAD_ADDR);
  assert_int_equal(e.pos, 1);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "nodeA", 0,
                                               names, sizeof(names), &pos, &e),
                   -EINVAL);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), BIG, "nodeA", 2,
                                               names, sizeof(names), NULL, &e),
                   -EINVAL);
  assert_int_equal(rdzv_hostlist_tree_position(l, strlen(l), 2, "nodeA", 2,
                                               names, sizeof(names), &pos, &e),
                   -E2BIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden_vectors),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_api),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_tree_position_rule),
      cmocka_unit_test(test_tree_position_api),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
