/* A linearizability checker: see lincheck.h. */
#include "lincheck.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The model: one key's state. Values may grow by appends past what an
 * operation carries. */
#define STATE_MAX 512
struct state {
  bool present;
  char val[STATE_MAX];
};

static bool unknown(const struct lin_op *op) {
  return op->ret_ns == LIN_NO_RETURN;
}

static bool parse_i64(const char *s, int64_t *out) {
  if (*s == '\0')
    return false;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end != '\0')
    return false;
  *out = v;
  return true;
}

/* Applies op to *in into *out; false when op cannot have returned what it
 * did from state *in. */
static bool step(const struct lin_op *op, const struct state *in,
                 struct state *out) {
  *out = *in;
  bool any = unknown(op);
  switch (op->kind) {
  case LIN_SET:
    out->present = true;
    snprintf(out->val, sizeof(out->val), "%s", op->arg);
    return true;
  case LIN_GET:
    return any || (op->found == in->present &&
                   (!in->present || strcmp(op->out, in->val) == 0));
  case LIN_CAS: {
    bool match =
        in->present ? strcmp(in->val, op->arg) == 0 : op->arg[0] == '\0';
    if (match) {
      out->present = true;
      snprintf(out->val, sizeof(out->val), "%s", op->arg2);
    }
    return any || (op->found == match &&
                   strcmp(op->out, out->present ? out->val : "") == 0);
  }
  case LIN_ADD: {
    int64_t cur = 0;
    if (in->present && !parse_i64(in->val, &cur))
      return false;
    cur += op->delta;
    out->present = true;
    snprintf(out->val, sizeof(out->val), "%" PRId64, cur);
    return any || op->num == cur;
  }
  case LIN_APPEND: {
    size_t have = in->present ? strlen(in->val) : 0;
    if (!in->present)
      out->val[0] = '\0';
    out->present = true;
    snprintf(out->val + have, sizeof(out->val) - have, "%s", op->arg);
    return true;
  }
  case LIN_DELETE:
    out->present = false;
    out->val[0] = '\0';
    return any || op->found == in->present;
  case LIN_CHECK:
    return any || op->found == in->present;
  case LIN_WAIT:
    return any || in->present;
  }
  return false;
}

/* ---- the search ----------------------------------------------------------- */

struct ev {
  uint64_t t;
  bool call;
  uint32_t op;
  int32_t prev, next; /* the list of events not yet linearized */
};

struct memo {
  uint64_t *bits; /* nwords each */
  struct state *states;
  uint64_t *hashes;
  uint8_t *used;
  size_t cap, n;
  size_t nwords;
};

static uint64_t memo_hash(const uint64_t *bits, size_t nwords,
                          const struct state *s) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < nwords; i++) {
    h ^= bits[i];
    h *= 1099511628211ull;
  }
  h ^= s->present;
  h *= 1099511628211ull;
  for (const char *p = s->val; s->present && *p; p++) {
    h ^= (uint8_t)*p;
    h *= 1099511628211ull;
  }
  return h;
}

static bool state_eq(const struct state *a, const struct state *b) {
  return a->present == b->present &&
         (!a->present || strcmp(a->val, b->val) == 0);
}

static int memo_grow(struct memo *m);

/* 1 when (bits, s) was new (now added), 0 when seen, -1 out of memory. */
static int memo_add(struct memo *m, const uint64_t *bits,
                    const struct state *s) {
  if ((m->n + 1) * 2 > m->cap && memo_grow(m) < 0)
    return -1;
  uint64_t h = memo_hash(bits, m->nwords, s);
  for (size_t i = h % m->cap;; i = (i + 1) % m->cap) {
    if (!m->used[i]) {
      m->used[i] = 1;
      m->hashes[i] = h;
      memcpy(m->bits + i * m->nwords, bits, m->nwords * sizeof(uint64_t));
      m->states[i] = *s;
      m->n++;
      return 1;
    }
    if (m->hashes[i] == h &&
        memcmp(m->bits + i * m->nwords, bits, m->nwords * sizeof(uint64_t)) ==
            0 &&
        state_eq(&m->states[i], s))
      return 0;
  }
}

static void memo_free(struct memo *m) {
  free(m->bits);
  free(m->states);
  free(m->hashes);
  free(m->used);
  memset(m, 0, sizeof(*m));
}

static int memo_grow(struct memo *m) {
  struct memo old = *m;
  size_t cap = m->cap ? m->cap * 2 : 1024;
  m->bits = calloc(cap * m->nwords, sizeof(uint64_t));
  m->states = calloc(cap, sizeof(struct state));
  m->hashes = calloc(cap, sizeof(uint64_t));
  m->used = calloc(cap, 1);
  m->cap = cap;
  m->n = 0;
  if (m->bits == NULL || m->states == NULL || m->hashes == NULL ||
      m->used == NULL) {
    memo_free(m);
    *m = old;
    return -1;
  }
  for (size_t i = 0; i < old.cap; i++)
    if (old.used[i])
      memo_add(m, old.bits + i * old.nwords, &old.states[i]);
  memo_free(&old);
  return 0;
}

static int cmp_ev(const void *a, const void *b) {
  const struct ev *x = a, *y = b;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  /* At equal times calls first: such operations overlap. */
  if (x->call != y->call)
    return x->call ? -1 : 1;
  return x->op < y->op ? -1 : x->op > y->op;
}

/* Whether ops[0..n) (one key) is linearizable. 1, 0 or -1. */
static int check_key(const struct lin_op *ops, size_t n) {
  if (n == 0)
    return 1;
  if (n > LIN_MAX_OPS)
    return -1;
  size_t ne = 2 * n;
  /* Index 0 is the list's head; events are 1..ne. */
  struct ev *ev = calloc(ne + 1, sizeof(*ev));
  uint32_t *call_of = calloc(n, sizeof(*call_of));
  uint32_t *ret_of = calloc(n, sizeof(*ret_of));
  size_t nwords = (n + 63) / 64;
  uint64_t *bits = calloc(nwords, sizeof(uint64_t));
  struct frame {
    uint32_t call;
    struct state st;
  } *stack = calloc(n, sizeof(*stack));
  struct memo memo = {0};
  memo.nwords = nwords;
  int result = -1;
  if (ev == NULL || call_of == NULL || ret_of == NULL || bits == NULL ||
      stack == NULL)
    goto out;
  for (size_t i = 0; i < n; i++) {
    ev[1 + 2 * i] = (struct ev){ops[i].call_ns, true, (uint32_t)i, 0, 0};
    ev[2 + 2 * i] = (struct ev){ops[i].ret_ns, false, (uint32_t)i, 0, 0};
  }
  qsort(ev + 1, ne, sizeof(*ev), cmp_ev);
  for (size_t i = 0; i <= ne; i++) {
    ev[i].prev = (int32_t)i - 1;
    ev[i].next = i < ne ? (int32_t)i + 1 : -1;
    if (i > 0 && ev[i].call)
      call_of[ev[i].op] = (uint32_t)i;
    else if (i > 0)
      ret_of[ev[i].op] = (uint32_t)i;
  }
  struct state st = {false, ""};
  size_t depth = 0;
  int32_t e = ev[0].next;
  while (ev[0].next != -1) {
    if (e != -1 && ev[e].call) {
      uint32_t op = ev[e].op;
      struct state next;
      bool ok = step(&ops[op], &st, &next);
      int fresh = 0;
      if (ok) {
        bits[op / 64] |= 1ull << (op % 64);
        fresh = memo_add(&memo, bits, &next);
        if (fresh < 0)
          goto out;
        if (!fresh)
          bits[op / 64] &= ~(1ull << (op % 64));
      }
      if (ok && fresh) {
        stack[depth].call = (uint32_t)e;
        stack[depth++].st = st;
        st = next;
        /* Lift the call and its return out of the list. */
        uint32_t r = ret_of[op];
        ev[ev[e].prev].next = ev[e].next;
        if (ev[e].next != -1)
          ev[ev[e].next].prev = ev[e].prev;
        ev[ev[r].prev].next = ev[r].next;
        if (ev[r].next != -1)
          ev[ev[r].next].prev = ev[r].prev;
        e = ev[0].next;
      } else {
        e = ev[e].next;
      }
    } else {
      /* A return (or the end): what is linearized so far cannot go on. */
      if (depth == 0) {
        result = 0;
        goto out;
      }
      struct frame f = stack[--depth];
      st = f.st;
      uint32_t c = f.call, op = ev[c].op, r = ret_of[op];
      bits[op / 64] &= ~(1ull << (op % 64));
      /* Put back in the reverse order of lifting. */
      ev[ev[r].prev].next = (int32_t)r;
      if (ev[r].next != -1)
        ev[ev[r].next].prev = (int32_t)r;
      ev[ev[c].prev].next = (int32_t)c;
      if (ev[c].next != -1)
        ev[ev[c].next].prev = (int32_t)c;
      e = ev[c].next;
    }
  }
  result = 1;
out:
  free(ev);
  free(call_of);
  free(ret_of);
  free(bits);
  free(stack);
  memo_free(&memo);
  return result;
}

/* ---- per key, and the report --------------------------------------------- */

static int cmp_key_call(const void *a, const void *b) {
  const struct lin_op *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c != 0)
    return c;
  return x->call_ns < y->call_ns ? -1 : x->call_ns > y->call_ns;
}

void lin_format(const struct lin_op *op, uint64_t t0, char *buf, size_t n) {
  static const char *const names[] = {"set",    "get",    "cas",   "add",
                                      "append", "delete", "check", "wait"};
  char args[128] = "", res[96] = "", ret[32] = "?";
  switch (op->kind) {
  case LIN_SET:
  case LIN_APPEND:
    snprintf(args, sizeof(args), " %s", op->arg);
    break;
  case LIN_CAS:
    snprintf(args, sizeof(args), " '%s'->'%s'", op->arg, op->arg2);
    break;
  case LIN_ADD:
    snprintf(args, sizeof(args), " %+" PRId64, op->delta);
    break;
  default:
    break;
  }
  if (op->ret_ns != LIN_NO_RETURN) {
    snprintf(ret, sizeof(ret), "%.3f ms", (op->ret_ns - t0) / 1e6);
    switch (op->kind) {
    case LIN_GET:
      snprintf(res, sizeof(res), " = %s", op->found ? op->out : "(absent)");
      break;
    case LIN_CAS:
      snprintf(res, sizeof(res), " = %s '%s'", op->found ? "swapped" : "kept",
               op->out);
      break;
    case LIN_ADD:
      snprintf(res, sizeof(res), " = %" PRId64, op->num);
      break;
    case LIN_DELETE:
    case LIN_CHECK:
      snprintf(res, sizeof(res), " = %s", op->found ? "present" : "absent");
      break;
    default:
      break;
    }
  } else {
    snprintf(res, sizeof(res), " (outcome unknown)");
  }
  snprintf(buf, n, "client %d %s %s%s [%.3f ms, %s]%s", op->client,
           names[op->kind], op->key, args, (op->call_ns - t0) / 1e6, ret, res);
}

static int cmpu(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ops[0..n) of one key sorted by call: the shortest failing prefix (by
 * time) written to report. */
static void report_window(const struct lin_op *ops, size_t n, FILE *report) {
  /* Cut at time T: the operations called before T, those returning
   * after it with an unknown outcome (a prefix of a linearizable history
   * is linearizable, so failing is monotone in T). */
  uint64_t *times = malloc(2 * n * sizeof(*times));
  struct lin_op *cut = malloc(n * sizeof(*cut));
  if (times == NULL || cut == NULL) {
    free(times);
    free(cut);
    return;
  }
  size_t nt = 0;
  for (size_t i = 0; i < n; i++) {
    times[nt++] = ops[i].call_ns;
    if (ops[i].ret_ns != LIN_NO_RETURN)
      times[nt++] = ops[i].ret_ns;
  }
  qsort(times, nt, sizeof(*times), cmpu);
  /* prefix(times[hi]) fails (the whole history does); prefix(lo) passes
   * (lo = -1: the empty history). */
  long lo = -1, hi = (long)nt - 1;
  while (hi - lo > 1) {
    long mid = lo + (hi - lo) / 2;
    uint64_t T = times[mid];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (ops[i].call_ns > T)
        continue;
      cut[k] = ops[i];
      if (cut[k].ret_ns != LIN_NO_RETURN && cut[k].ret_ns > T)
        cut[k].ret_ns = LIN_NO_RETURN;
      k++;
    }
    if (check_key(cut, k) == 0)
      hi = mid;
    else
      lo = mid;
  }
  uint64_t T = times[hi];
  uint64_t t0 = ops[0].call_ns;
  /* The window: the operations still running at T, the six called last
   * before it, and the last three writes that returned before it. */
  size_t last = 0;
  for (size_t i = 0; i < n; i++)
    if (ops[i].call_ns <= T)
      last = i;
  size_t from = last >= 6 ? last - 6 : 0;
  bool *show = calloc(n, sizeof(*show));
  if (show == NULL) {
    free(times);
    free(cut);
    return;
  }
  int writes = 0;
  for (size_t i = last + 1; i-- > 0;) {
    bool running = ops[i].ret_ns == LIN_NO_RETURN || ops[i].ret_ns >= T;
    bool read = ops[i].kind == LIN_GET || ops[i].kind == LIN_CHECK ||
                ops[i].kind == LIN_WAIT;
    if (i >= from || running)
      show[i] = true;
    else if (!read && writes < 3) {
      show[i] = true;
      writes++;
    }
  }
  fprintf(report,
          "  not linearizable by %.3f ms (times from the key's first call; "
          "the shortest failing prefix); the operations still running then, "
          "the last ones called and the last writes that returned:\n",
          (T - t0) / 1e6);
  for (size_t i = 0; i <= last; i++) {
    if (!show[i])
      continue;
    char line[400];
    lin_format(&ops[i], t0, line, sizeof(line));
    fprintf(report, "    %s\n", line);
  }
  free(show);
  free(times);
  free(cut);
}

int lin_check(const struct lin_op *ops, size_t n, FILE *report) {
  /* Reads of unknown outcome changed nothing: left out. */
  struct lin_op *v = malloc((n ? n : 1) * sizeof(*v));
  if (v == NULL)
    return -1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool read = ops[i].kind == LIN_GET || ops[i].kind == LIN_CHECK ||
                ops[i].kind == LIN_WAIT;
    if (read && ops[i].ret_ns == LIN_NO_RETURN)
      continue;
    v[k++] = ops[i];
  }
  qsort(v, k, sizeof(*v), cmp_key_call);
  int result = 1;
  for (size_t i = 0; i < k && result == 1;) {
    size_t j = i;
    while (j < k && strcmp(v[j].key, v[i].key) == 0)
      j++;
    int r = check_key(v + i, j - i);
    if (r == 0 && report != NULL) {
      fprintf(report, "key %s: %zu operations\n", v[i].key, j - i);
      report_window(v + i, j - i, report);
    } else if (r < 0 && report != NULL) {
      fprintf(report,
              "key %s: %zu operations: too many to check (or out of "
              "memory)\n",
              v[i].key, j - i);
    }
    result = r;
    i = j;
  }
  free(v);
  return result;
}
