/* rdzv-bench: helpers shared by its three kinds of process. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rendezvous/topo.h"
#include "tools/bench/bench.h"
#include "tools/bench/rank.h"

int64_t bench_hosts(const struct bench_opts *o) {
  return (o->ranks + o->ranks_per_host - 1) / o->ranks_per_host;
}

int64_t bench_host_ranks(const struct bench_opts *o, int64_t h) {
  int64_t left = o->ranks - h * o->ranks_per_host;
  return left < o->ranks_per_host ? left : o->ranks_per_host;
}

int64_t bench_host_at(const struct bench_opts *o, int64_t pos) {
  static int64_t *order, n_of, fanout_of;
  int64_t n = bench_hosts(o);
  if (pos < 0 || pos >= n)
    return -1;
  if (order == NULL || n_of != n || fanout_of != o->fanout) {
    free(order);
    order = malloc((size_t)n * sizeof(*order));
    int64_t *stack = malloc((size_t)n * sizeof(*stack));
    if (order == NULL || stack == NULL) {
      free(order);
      free(stack);
      order = NULL;
      return pos; /* host order: the processes are less balanced */
    }
    /* Preorder: a host, then each child's subtree in turn (children are
     * pushed last first). Host 0 is the only host under the root. */
    int64_t sp = 0, k = 0;
    stack[sp++] = 0;
    while (sp > 0) {
      int64_t h = stack[--sp], first;
      order[k++] = h;
      int64_t nc = rdzv_tree_children(h, n, o->fanout, &first);
      for (int64_t c = nc - 1; c >= 0; c--)
        stack[sp++] = first + c;
    }
    free(stack);
    n_of = n;
    fanout_of = o->fanout;
  }
  return order[pos];
}

void bench_node_path(const struct bench_opts *o, int64_t h, char *out,
                     size_t n) {
  snprintf(out, n, "%s/h%06" PRId64 ".sock", o->dir, h);
}

void bench_uplink_path(const struct bench_opts *o, int64_t h, char *out,
                       size_t n) {
  snprintf(out, n, "%s/up-h%06" PRId64 ".sock", o->dir, h);
}

void bench_root_path(const struct bench_opts *o, char *out, size_t n) {
  snprintf(out, n, "%s/root.sock", o->dir);
}

void bench_ts_port_path(const struct bench_opts *o, int64_t h, char *out,
                        size_t n) {
  if (h < 0)
    snprintf(out, n, "%s/ts-root.port", o->dir);
  else
    snprintf(out, n, "%s/ts-h%06" PRId64 ".port", o->dir, h);
}

static int parse_i64(const char *s, int64_t *out) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < 0)
    return -1;
  *out = v;
  return 0;
}

int bench_parse_common(struct bench_opts *o, int argc, char **argv, int i) {
  for (; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    int64_t x = 0;
    int num = parse_i64(v, &x) == 0;
    if (strcmp(k, "--dir") == 0)
      snprintf(o->dir, sizeof(o->dir), "%s", v);
    else if (strcmp(k, "--job") == 0)
      snprintf(o->job, sizeof(o->job), "%s", v);
    else if (strcmp(k, "--n") == 0 && num)
      o->ranks = x;
    else if (strcmp(k, "--rph") == 0 && num && x > 0)
      o->ranks_per_host = x;
    else if (strcmp(k, "--fanout") == 0 && num && x > 0)
      o->fanout = x;
    else if (strcmp(k, "--rpr") == 0 && num && x > 0)
      o->ranks_per_root = x;
    else if (strcmp(k, "--first") == 0 && num)
      o->first = x;
    else if (strcmp(k, "--count") == 0 && num)
      o->count = x;
    else if (strcmp(k, "--flags") == 0 && num) {
      o->flat = (x & 1) != 0;
      o->inproc = (x & 2) != 0;
      o->root = (x & 4) != 0;
      o->tcpstore = (x & 8) != 0;
      o->pytorch = (x & 16) != 0;
      o->no_copies = (x & 32) != 0;
    } else if (strcmp(k, "--flush") == 0 && num)
      o->flush_ms = (uint32_t)x;
    else if (strcmp(k, "--hb") == 0 && num && x >= 0 && x <= UINT32_MAX)
      o->heartbeat_ms = (uint32_t)x;
    else if (strcmp(k, "--timeout") == 0 && num && x > 0)
      o->timeout_s = (double)x;
    else
      return i;
  }
  return i;
}

void bench_write_durations(const struct bench_opts *o, const void *ranks,
                           size_t stride, int64_t n, double t_go) {
  char path[200];
  snprintf(path, sizeof(path), "%s/durations.%d", o->dir, (int)getpid());
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return;
  for (int64_t i = 0; i < n; i++) {
    const struct bench_rank *r =
        (const struct bench_rank *)((const char *)ranks + (size_t)i * stride);
    double d = r->t_done - t_go;
    fprintf(f, "%.6f\n", r->step == STEP_DONE ? d : -1.0);
  }
  fclose(f);
}

int64_t bench_peak_rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int64_t kb = -1;
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmHWM: %" SCNd64, &kb) == 1)
      break;
  if (f != NULL)
    fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}
