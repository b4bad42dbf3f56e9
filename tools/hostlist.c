/* Slurm host-list expansion: the codec declared in hostlist.h.
 *
 * What scontrol does (Slurm 22.05 src/common/hostlist.c, checked against
 * `scontrol show hostnames` in tests/unit/hostlist_vectors.txt):
 *   - _next_tok() splits the list at ',', ' ' and '\t' that are not inside
 *     brackets.
 *   - A name's last "[...]" is read by _parse_range_list(), the rest by
 *     _push_range_list(), which takes the last group of what is left and
 *     recurses into the groups before it. Hence the order in hostlist.h:
 *     the last group innermost, then the first, the second, ..., the
 *     second-to-last outermost.
 *   - _parse_single_range() reads LO and HI with strtoul(): leading blanks
 *     and a sign are allowed, the width is strlen(LO), and text after LO
 *     is ignored when a HI follows. A range holds at most 64Ki values
 *     (MAX_RANGE), a group at most 256Ki ranges (MAX_RANGES, fatal() in
 *     scontrol), a group before the last at most 64Ki values in all
 *     (MAX_PREFIX_CNT).
 *   - Names are stored as prefix + number and printed "%s%0*lu"; runs of
 *     hosts that continue each other are merged. For the names accepted
 *     here neither step changes a name, so each name is rebuilt from the
 *     list's bytes directly.
 *
 * Where scontrol prints names that are not in the list, or drops hosts,
 * this codec rejects the list instead (RDZV_EBAD_ADDR, with a position):
 *   "n[1-3"    -> "n]"        (a '[' without ']' gets a ']' appended)
 *   "[ab"      -> "ab"
 *   "n1]"      -> "n1]"       (a ']' without '[' is part of the name)
 *   "a[1[2]"   -> "a[12"
 *   "a\nb"     -> "a\nb"      (a control character in a name; and
 *                              strnatcmp() skips blanks, so "ab1,a\nb2"
 *                              merges into ab1, ab2)
 *   "n99999999999999999999" -> "n18446744073709551615" (strtoul saturates)
 *   "n[18446744073709551614-18446744073709551615]" -> nothing
 *   "a[0-40000,40001-80000]b[1]c[1]" -> 40001 hosts, no error (errors in
 *                              the third-to-last group and before are
 *                              ignored by _push_range_list's recursion)
 * scontrol prints an error for a bad range in such a group but still
 * exits 0 with the other hosts; that list is rejected here too. */
#include "tools/hostlist.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "rdzv/error.h"
#include "rendezvous/topo.h"

/* Slurm's limits (src/common/hostlist.c and hostlist.h). */
#define SLURM_MAX_RANGE 65536      /* values in one LO-HI */
#define SLURM_MAX_RANGES 262144    /* ranges in one group */
#define SLURM_MAX_PREFIX_CNT 65536 /* values of a group before the last */

/* A positive value no public caller's callback sees: the internal
 * callbacks return it to stop the walk once they have what they need. */
#define STOP_FOUND 1

static const char R_CTRL[] = "control character or NUL byte";
static const char R_NESTED[] = "'[' inside brackets";
static const char R_UNCLOSED[] = "'[' without ']'";
static const char R_STRAY[] = "']' without '['";
static const char R_AFTER[] = "text after the name's last ']'";
static const char R_GROUPS[] = "more than 64 bracket groups in one name";
static const char R_X[] = "'x' in a range";
static const char R_NONUM[] = "range without a number";
static const char R_NEG[] = "negative number in a range";
static const char R_JUNK[] = "unexpected text after a number";
static const char R_BIG[] = "number too large (2^64-1 or more)";
static const char R_BACK[] = "range runs backwards (LO > HI)";
static const char R_WIDE[] = "more than 65536 values in one range";
static const char R_RANGES[] = "more than 262144 ranges in one bracket group";
static const char R_PREFIX[] =
    "bracket group before the last expands to more than 65536 values";
static const char R_NAME[] = "host name longer than 255 bytes";
static const char R_HOSTS[] = "more hosts than the limit";

/* One LO[-HI] of a group. width: bytes of LO as written. */
struct range {
  unsigned long lo;
  unsigned long hi;
  size_t width;
};

/* A "[...]" of a name; during expansion also its current value. */
struct group {
  size_t open;  /* offset of '[' */
  size_t close; /* offset of ']' */
  size_t end;   /* offset just past the current range: its ',' or close */
  struct range r;
  unsigned long cur;
};

/* One name of the list (between separators): bytes [beg, end). */
struct token {
  size_t beg;
  size_t end;
  size_t ngroups;
  struct group g[RDZV_HOSTLIST_MAX_GROUPS];
};

static int fail(struct rdzv_hostlist_error *err, size_t pos, const char *reason,
                int code) {
  if (err != NULL) {
    err->pos = pos;
    err->reason = reason;
  }
  return code;
}

static int is_sep(unsigned char c) { return c == ',' || c == ' ' || c == '\t'; }

static int is_blank(unsigned char c) { return c == ' ' || c == '\t'; }

/* NUL, C0 controls but tab, and DEL. */
static int is_ctrl(unsigned char c) {
  return (c < 0x20 && c != '\t') || c == 0x7f;
}

/* ---- numbers and ranges ------------------------------------------------- */

/* strtoul(s + from, &end, 10) on s[from..to): blanks, an optional sign,
 * decimal digits. Returns 0 if there is no digit; otherwise 1, with *v the
 * value (negated modulo 2^N after '-', as strtoul does), *stop the offset
 * after the digits, *digits the offset of the first digit and *overflow
 * set if the digits do not fit an unsigned long. */
static int parse_number(const char *s, size_t from, size_t to, unsigned long *v,
                        size_t *stop, size_t *digits, int *overflow) {
  size_t i = from;
  unsigned long x = 0;
  int neg = 0;

  while (i < to && is_blank((unsigned char)s[i]))
    i++;
  if (i < to && (s[i] == '+' || s[i] == '-')) {
    neg = s[i] == '-';
    i++;
  }
  if (i >= to || s[i] < '0' || s[i] > '9')
    return 0;
  *digits = i;
  *overflow = 0;
  for (; i < to && s[i] >= '0' && s[i] <= '9'; i++) {
    unsigned long d = (unsigned long)(s[i] - '0');
    if (x > (ULONG_MAX - d) / 10)
      *overflow = 1;
    else
      x = x * 10 + d;
  }
  *v = neg ? 0 - x : x;
  *stop = i;
  return 1;
}

/* Slurm's _parse_single_range() on s[a..b), one comma-free range of a
 * group, with numbers of ULONG_MAX or more refused. 0 or RDZV_EBAD_ADDR. */
static int parse_range(const char *s, size_t a, size_t b, struct range *r,
                       struct rdzv_hostlist_error *err) {
  size_t dash = b, stop = a, dig = a, i;
  int ovf = 0;

  for (i = a; i < b; i++) {
    if (s[i] == 'x')
      return fail(err, i, R_X, RDZV_EBAD_ADDR);
  }
  for (i = a; i < b && dash == b; i++) {
    if (s[i] == '-')
      dash = i;
  }
  r->width = dash - a;
  if (!parse_number(s, a, dash, &r->lo, &stop, &dig, &ovf))
    return fail(err, a, R_NONUM, RDZV_EBAD_ADDR);
  if (ovf || r->lo == ULONG_MAX)
    return fail(err, dig, R_BIG, RDZV_EBAD_ADDR);
  if (dash + 1 < b) {
    if (s[dash + 1] == '-')
      return fail(err, dash + 1, R_NEG, RDZV_EBAD_ADDR);
    if (!parse_number(s, dash + 1, b, &r->hi, &stop, &dig, &ovf))
      return fail(err, dash + 1, R_NONUM, RDZV_EBAD_ADDR);
    if (ovf || r->hi == ULONG_MAX)
      return fail(err, dig, R_BIG, RDZV_EBAD_ADDR);
    if (stop != b)
      return fail(err, stop, R_JUNK, RDZV_EBAD_ADDR);
  } else {
    /* "LO" or "LO-": strtoul must have read all of LO. */
    r->hi = r->lo;
    if (stop != dash)
      return fail(err, stop, R_JUNK, RDZV_EBAD_ADDR);
  }
  if (r->lo > r->hi)
    return fail(err, a, R_BACK, RDZV_EBAD_ADDR);
  if (r->hi - r->lo >= SLURM_MAX_RANGE)
    return fail(err, a, R_WIDE, RDZV_EBAD_ADDR);
  return 0;
}

static size_t num_digits(unsigned long v) {
  size_t n = 1;

  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

/* Checks every range of group g; *values receives how many values it
 * holds, *widest the widest number it prints. 0 or RDZV_EBAD_ADDR. */
static int check_group(const char *s, const struct group *g, uint64_t *values,
                       size_t *widest, struct rdzv_hostlist_error *err) {
  size_t at = g->open + 1, end, w, nranges = 0;
  struct range r;
  int rc;

  *values = 0;
  *widest = 0;
  for (;;) {
    end = at;
    while (end < g->close && s[end] != ',')
      end++;
    nranges++;
    if (nranges > SLURM_MAX_RANGES)
      return fail(err, at, R_RANGES, RDZV_EBAD_ADDR);
    rc = parse_range(s, at, end, &r, err);
    if (rc < 0)
      return rc;
    *values += r.hi - r.lo + 1;
    w = num_digits(r.hi);
    if (r.width > w)
      w = r.width;
    if (w > *widest)
      *widest = w;
    if (end == g->close)
      return 0;
    at = end + 1;
  }
}

/* ---- names ------------------------------------------------------------ */

/* Finds the end of the name that starts at beg and its bracket groups. 0
 * or RDZV_EBAD_ADDR. */
static int scan_token(const char *s, size_t len, size_t beg, struct token *t,
                      struct rdzv_hostlist_error *err) {
  size_t i;
  int in = 0;

  t->beg = beg;
  t->ngroups = 0;
  for (i = beg; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (is_ctrl(c))
      return fail(err, i, R_CTRL, RDZV_EBAD_ADDR);
    if (!in && is_sep(c))
      break;
    if (c == '[') {
      if (in)
        return fail(err, i, R_NESTED, RDZV_EBAD_ADDR);
      if (t->ngroups == RDZV_HOSTLIST_MAX_GROUPS)
        return fail(err, i, R_GROUPS, RDZV_EBAD_ADDR);
      t->g[t->ngroups].open = i;
      in = 1;
    } else if (c == ']') {
      if (!in)
        return fail(err, i, R_STRAY, RDZV_EBAD_ADDR);
      t->g[t->ngroups++].close = i;
      in = 0;
    }
  }
  if (in)
    return fail(err, t->g[t->ngroups].open, R_UNCLOSED, RDZV_EBAD_ADDR);
  t->end = i;
  if (t->ngroups > 0 && t->g[t->ngroups - 1].close + 1 != i)
    return fail(err, t->g[t->ngroups - 1].close + 1, R_AFTER, RDZV_EBAD_ADDR);
  return 0;
}

/* A name without brackets: Slurm reads its trailing digits as a number
 * and prints them back, which changes them only if they overflow. */
static int check_plain(const char *s, const struct token *t,
                       struct rdzv_hostlist_error *err) {
  size_t d = t->end, stop, dig;
  unsigned long v;
  int ovf = 0;

  while (d > t->beg && s[d - 1] >= '0' && s[d - 1] <= '9')
    d--;
  if (d == t->end)
    return 0;
  parse_number(s, d, t->end, &v, &stop, &dig, &ovf);
  if (ovf || v == ULONG_MAX)
    return fail(err, d, R_BIG, RDZV_EBAD_ADDR);
  return 0;
}

/* Checks the scanned name t; *hosts receives its number of hosts
 * (saturated at SIZE_MAX). 0, RDZV_EBAD_ADDR or -ENAMETOOLONG. */
static int check_token(const char *s, const struct token *t, size_t *hosts,
                       struct rdzv_hostlist_error *err) {
  size_t namelen = t->end - t->beg, widest, k;
  uint64_t values, n = 1;
  int rc;

  if (t->ngroups == 0) {
    rc = check_plain(s, t, err);
    if (rc < 0)
      return rc;
  }
  for (k = 0; k < t->ngroups; k++) {
    const struct group *g = &t->g[k];
    rc = check_group(s, g, &values, &widest, err);
    if (rc < 0)
      return rc;
    if (k + 1 < t->ngroups && values > SLURM_MAX_PREFIX_CNT)
      return fail(err, g->open, R_PREFIX, RDZV_EBAD_ADDR);
    namelen = namelen - (g->close - g->open + 1) + widest;
    n = n > UINT64_MAX / values ? UINT64_MAX : n * values;
  }
  if (namelen > RDZV_HOSTLIST_NAME_MAX)
    return fail(err, t->beg, R_NAME, -ENAMETOOLONG);
  *hosts = n > SIZE_MAX ? SIZE_MAX : (size_t)n;
  return 0;
}

/* Writes v as "%0*lu" with the given width; returns the bytes written. */
static size_t put_number(char *out, unsigned long v, size_t width) {
  char tmp[3 * sizeof(v)];
  size_t n = 0, len = 0;

  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (width > n) {
    out[len++] = '0';
    width--;
  }
  while (n > 0)
    out[len++] = tmp[--n];
  return len;
}

/* The current name of t into buf (RDZV_HOSTLIST_NAME_MAX + 1 bytes, which
 * check_token guarantees is enough); returns its length. */
static size_t build_name(const char *s, const struct token *t, char *buf) {
  size_t at = t->beg, n = 0, k;

  for (k = 0; k < t->ngroups; k++) {
    const struct group *g = &t->g[k];
    memcpy(buf + n, s + at, g->open - at);
    n += g->open - at;
    n += put_number(buf + n, g->cur, g->r.width);
    at = g->close + 1;
  }
  memcpy(buf + n, s + at, t->end - at);
  n += t->end - at;
  buf[n] = '\0';
  return n;
}

/* Makes the range at s[at..) the current one of g (checked before). */
static void group_load(const char *s, struct group *g, size_t at) {
  size_t end = at;

  while (end < g->close && s[end] != ',')
    end++;
  g->end = end;
  (void)parse_range(s, at, end, &g->r, NULL);
  g->cur = g->r.lo;
}

/* Steps g to its next value; 0 when it had none left. */
static int group_next(const char *s, struct group *g) {
  if (g->cur < g->r.hi) {
    g->cur++;
    return 1;
  }
  if (g->end < g->close) {
    group_load(s, g, g->end + 1);
    return 1;
  }
  return 0;
}

/* Steps the groups of t in scontrol's order: the last group fastest, then
 * the first, the second, ..., the second-to-last slowest. 0 after the
 * last name. */
static int token_next(const char *s, struct token *t) {
  size_t n = t->ngroups, k, gi;

  for (k = 0; k < n; k++) {
    gi = k == 0 ? n - 1 : k - 1;
    if (group_next(s, &t->g[gi]))
      return 1;
    group_load(s, &t->g[gi], t->g[gi].open + 1);
  }
  return 0;
}

/* Calls cb for every name of the checked token t. */
static int expand_token(const char *s, struct token *t, rdzv_hostlist_cb cb,
                        void *arg) {
  char name[RDZV_HOSTLIST_NAME_MAX + 1];
  size_t k, n;
  int rc;

  for (k = 0; k < t->ngroups; k++)
    group_load(s, &t->g[k], t->g[k].open + 1);
  do {
    n = build_name(s, t, name);
    rc = cb(name, n, arg);
    if (rc != 0)
      return rc;
  } while (token_next(s, t));
  return 0;
}

/* ---- the list ----------------------------------------------------------- */

/* Reads the whole list, checking each name; with cb, also expands it.
 * *total receives the number of hosts. */
static int walk(const char *s, size_t len, size_t max_hosts,
                rdzv_hostlist_cb cb, void *arg, size_t *total,
                struct rdzv_hostlist_error *err) {
  struct token t;
  size_t i = 0, hosts = 0;
  int rc;

  *total = 0;
  for (;;) {
    while (i < len && is_sep((unsigned char)s[i]))
      i++;
    if (i >= len)
      return 0;
    rc = scan_token(s, len, i, &t, err);
    if (rc == 0)
      rc = check_token(s, &t, &hosts, err);
    if (rc < 0)
      return rc;
    if (hosts > max_hosts - *total)
      return fail(err, t.beg, R_HOSTS, -E2BIG);
    *total += hosts;
    if (cb != NULL) {
      rc = expand_token(s, &t, cb, arg);
      if (rc != 0)
        return rc;
    }
    i = t.end;
  }
}

int rdzv_hostlist_count(const char *list, size_t len, size_t max_hosts,
                        size_t *count, struct rdzv_hostlist_error *err) {
  size_t total = 0;
  int rc;

  if (count == NULL || (list == NULL && len > 0))
    return -EINVAL;
  rc = walk(list, len, max_hosts, NULL, NULL, &total, err);
  if (rc == 0)
    *count = total;
  return rc;
}

int rdzv_hostlist_expand(const char *list, size_t len, size_t max_hosts,
                         rdzv_hostlist_cb cb, void *arg,
                         struct rdzv_hostlist_error *err) {
  size_t total = 0;
  int rc;

  if (cb == NULL || (list == NULL && len > 0))
    return -EINVAL;
  /* Check all of it first, so that cb never sees a bad list's names. */
  rc = walk(list, len, max_hosts, NULL, NULL, &total, err);
  if (rc == 0)
    rc = walk(list, len, max_hosts, cb, arg, &total, err);
  return rc;
}

/* ---- position in the tree ----------------------------------------------- */

struct find_ctx {
  const char *host;
  size_t host_len;
  size_t index;
};

static int find_cb(const char *name, size_t len, void *arg) {
  struct find_ctx *f = arg;

  if (len == f->host_len && memcmp(name, f->host, len) == 0)
    return STOP_FOUND;
  f->index++;
  return 0;
}

int rdzv_hostlist_find(const char *list, size_t len, size_t max_hosts,
                       const char *host, size_t *index,
                       struct rdzv_hostlist_error *err) {
  struct find_ctx f;
  int rc;

  if (host == NULL || index == NULL)
    return -EINVAL;
  f.host = host;
  f.host_len = strlen(host);
  f.index = 0;
  rc = rdzv_hostlist_expand(list, len, max_hosts, find_cb, &f, err);
  if (rc == STOP_FOUND) {
    *index = f.index;
    return 0;
  }
  return rc < 0 ? rc : RDZV_ETOPOLOGY;
}

/* Collects the ancestors' names, which the expansion meets farthest
 * (host 0) first: each is written below the previous one from the end of
 * names, so that the nearest ends up first. */
struct anc_ctx {
  const size_t *up; /* fanout > 1: ancestors nearest first, n of them;
                       NULL: fanout 1, the n hosts before the host */
  size_t n;
  size_t seen; /* ancestors met so far */
  size_t at;   /* index of the current name */
  size_t need; /* bytes the names met so far take */
  char *names;
  size_t cap;
};

static int anc_cb(const char *name, size_t len, void *arg) {
  struct anc_ctx *a = arg;
  size_t i = a->at++;

  if (a->up != NULL && i != a->up[a->n - 1 - a->seen])
    return 0;
  a->seen++;
  a->need += len + 1;
  if (a->need <= a->cap)
    memcpy(a->names + a->cap - a->need, name, len + 1);
  return a->seen == a->n ? STOP_FOUND : 0;
}

/* Ancestors of host i, nearest first, into up[64] (fanout >= 2, so that
 * each step at least halves the index); returns how many. */
static size_t chain(size_t i, size_t fanout, size_t *up) {
  int64_t f = fanout > (size_t)INT64_MAX ? INT64_MAX : (int64_t)fanout;
  int64_t cur = (int64_t)i;
  size_t n = 0;

  while (cur > 0) {
    cur = rdzv_tree_parent(cur, cur + 1, f);
    up[n++] = (size_t)cur;
  }
  return n;
}

int rdzv_hostlist_tree_position(const char *list, size_t len, size_t max_hosts,
                                const char *host, size_t fanout, char *names,
                                size_t cap, struct rdzv_hostlist_pos *pos,
                                struct rdzv_hostlist_error *err) {
  size_t up[64];
  struct anc_ctx a;
  size_t index = 0;
  int rc;

  if (fanout == 0 || pos == NULL || (names == NULL && cap > 0))
    return -EINVAL;
  rc = rdzv_hostlist_find(list, len, max_hosts, host, &index, err);
  if (rc < 0)
    return rc;
  memset(&a, 0, sizeof(a));
  a.names = names;
  a.cap = cap;
  if (fanout == 1) {
    a.n = index; /* a chain: every host before it */
  } else {
    a.n = chain(index, fanout, up);
    a.up = up;
  }
  if (a.n > 0) {
    rc = rdzv_hostlist_expand(list, len, max_hosts, anc_cb, &a, err);
    if (rc < 0)
      return rc;
  }
  pos->index = index;
  pos->nancestors = a.n;
  pos->names_len = a.need;
  if (a.need > cap)
    return -ENOBUFS;
  if (a.need > 0)
    memmove(names, names + cap - a.need, a.need);
  return 0;
}
