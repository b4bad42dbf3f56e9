/* rdzv-bench's incumbents' mode: the report of its runs (tables, JSON
 * records, the plot). See incumbents.c. */
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench/incumbents_int.h"

const struct inc_result *bench_inc_torch_of(const struct inc_result *rs, int n,
                                            int64_t ranks) {
  for (int i = 0; i < n; i++)
    if (rs[i].server == S_TORCH && rs[i].ranks == ranks && !rs[i].skipped &&
        rs[i].verified)
      return &rs[i];
  return NULL;
}

static double speedup(const struct inc_result *t, const struct inc_result *r) {
  return t != NULL && r->verified && r->wall_s > 0 ? t->wall_s / r->wall_s : 0;
}

void bench_inc_print_table(const struct inc_result *rs, int n, int64_t ranks) {
  const struct inc_result *t = bench_inc_torch_of(rs, n, ranks);
  printf("incumbents, %" PRId64 " ranks (PyTorch's init pattern, the same C "
         "clients, %d TCPStore connection%s a rank; %s):\n",
         ranks, inc_conns, inc_conns == 1 ? "" : "s",
         bench_inc_pinning() ? "clients on CPU 0, servers on CPU 1"
                             : "not pinned");
  printf("  %-26s %9s %9s %14s %12s %11s\n", "server", "wall s", "p99 s",
         "server CPU s", "server RSS", "vs PyTorch");
  for (int i = 0; i < n; i++) {
    const struct inc_result *r = &rs[i];
    if (r->ranks != ranks)
      continue;
    if (r->skipped) {
      printf("  %-26s skipped: `etcd` is not installed (apt-get install "
             "etcd-server)\n",
             server_titles[r->server]);
      continue;
    }
    char sp[32] = "-";
    if (speedup(t, r) > 0)
      snprintf(sp, sizeof(sp), speedup(t, r) < 1 ? "%.2fx" : "%.1fx",
               speedup(t, r));
    printf("  %-26s %9.3f %9.3f %14.3f %8.0f MiB %11s%s\n",
           server_titles[r->server], r->wall_s, r->p99_s, r->cpu_s,
           (double)r->rss / 1048576.0, sp,
           r->verified ? "" : "  FAILED (see above)");
  }
  fflush(stdout);
}

void bench_inc_print_pattern_table(const struct inc_result *rs, int n,
                                   int64_t ranks) {
  char paced[48] = "";
  if (pt_check_ms > 0)
    snprintf(paced, sizeof(paced), " %d ms apart", pt_check_ms);
  printf("PyTorch's store traffic, %" PRId64 " ranks (%" PRId64
         " ids, 60 checks a rank%s, 5 state reads an agent%s; torch 2.x's "
         "protocol, the same C clients):\n",
         ranks, (ranks + 127) / 128, paced,
         pt_keepalive ? ", each followed by a compare_set of the state" : "");
  printf("  %-24s %8s %8s %8s %8s %9s %12s %11s %12s\n", "server", "wall s",
         "root wait", "get", "mget", "root sum", "root bytes", "node frames",
         "node bytes");
  for (int i = 0; i < n; i++) {
    const struct inc_result *r = &rs[i];
    if (r->ranks != ranks || !r->pytorch)
      continue;
    if (r->skipped) {
      printf("  %-24s skipped: one process would hold every rank's "
             "connection (at most %d here)\n",
             server_titles[r->server], PT_FLAT_MAX);
      continue;
    }
    printf("  %-24s %8.3f %8" PRId64 " %8" PRId64 " %8" PRId64 " %9" PRId64
           " %12" PRId64 " %11" PRId64 " %12" PRId64 "%s\n",
           server_titles[r->server], r->wall_s, r->root_wait, r->root_get,
           r->root_mget, r->root_wait + r->root_get + r->root_mget,
           r->root_bytes, r->node_msgs, r->node_bytes,
           r->verified ? "" : "  FAILED (see above)");
    if (r->server != S_FLAT)
      printf("  %-24s %8s pings %" PRId64 ", invalidation polls %" PRId64
             " (leases ride on pings); compare_sets %" PRId64
             ", invalidations sent %" PRId64 ", writes that waited for "
             "them %" PRId64 "\n",
             "", "", r->root_ping, r->root_inval, r->root_cas,
             r->root_invals_sent, r->root_write_waits);
  }
  fflush(stdout);
}

json_t *bench_inc_result_json(const struct inc_result *r,
                              const struct inc_result *t) {
  json_t *j =
      json_pack("{s:s,s:s,s:s,s:I,s:b}", "mode", "incumbent", "server",
                server_names[r->server], "protocol",
                r->server == S_ETCD ? "etcd-v3-json" : "tcpstore-legacy",
                "ranks", (json_int_t)r->ranks, "skipped", r->skipped);
  if (r->pytorch) {
    json_object_set_new(j, "mode", json_string("pytorch-traffic"));
    json_object_set_new(j, "protocol", json_string("tcpstore-v2"));
  }
  if (r->skipped)
    return j;
  json_object_set_new(j, "wall_s", json_real(r->wall_s));
  json_object_set_new(j, "p50_s", json_real(r->p50_s));
  json_object_set_new(j, "p99_s", json_real(r->p99_s));
  json_object_set_new(j, "server_cpu_s", json_real(r->cpu_s));
  json_object_set_new(j, "server_rss_bytes", json_integer(r->rss));
  json_object_set_new(j, "server_rss_start_bytes", json_integer(r->rss_start));
  json_object_set_new(j, "server_processes", json_integer(r->nprocs));
  json_object_set_new(j, "failed", json_integer(r->failed));
  json_object_set_new(j, "verified", json_boolean(r->verified));
  json_object_set_new(j, "pinned", json_boolean(bench_inc_pinning()));
  if (r->server != S_ETCD && !r->pytorch)
    json_object_set_new(j, "tcpstore_conns_per_rank", json_integer(inc_conns));
  if (r->pytorch) {
    json_object_set_new(
        j, "root",
        json_pack(
            "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
            "requests_wait_get_mget",
            (json_int_t)(r->root_wait + r->root_get + r->root_mget), "wait",
            (json_int_t)r->root_wait, "get", (json_int_t)r->root_get, "mget",
            (json_int_t)r->root_mget, "ping", (json_int_t)r->root_ping, "inval",
            (json_int_t)r->root_inval, "cas", (json_int_t)r->root_cas,
            "invalidations_sent", (json_int_t)r->root_invals_sent,
            "write_waits", (json_int_t)r->root_write_waits, "frames",
            (json_int_t)r->root_msgs, "bytes", (json_int_t)r->root_bytes));
    json_object_set_new(j, "check_period_ms", json_integer(pt_check_ms));
    json_object_set_new(j, "keepalive", json_boolean(pt_keepalive));
    json_object_set_new(j, "busiest_node",
                        json_pack("{s:I,s:I}", "frames",
                                  (json_int_t)r->node_msgs, "bytes",
                                  (json_int_t)r->node_bytes));
  }
  if (speedup(t, r) > 0)
    json_object_set_new(j, "speedup_vs_torch", json_real(speedup(t, r)));
  return j;
}

/* Two panels against N (log-log): wall time and the servers' CPU. */
int bench_inc_plot(const char *png, const struct inc_result *rs, int n) {
  char out[300], dat[] = "/tmp/rdzv-bench-incplot-XXXXXX";
  size_t l = strlen(png);
  if (l > 4 && strcmp(png + l - 4, ".png") == 0)
    l -= 4;
  snprintf(out, sizeof(out), "%.*s-incumbents.png", (int)l, png);
  int fd = mkstemp(dat);
  if (fd < 0)
    return -errno;
  FILE *f = fdopen(fd, "w");
  bool has[S_COUNT] = {false};
  for (int s = 0; s < S_COUNT; s++) {
    int any = 0;
    fprintf(f, "# %s\n", server_names[s]);
    for (int i = 0; i < n; i++)
      if (rs[i].server == s && !rs[i].skipped && rs[i].verified &&
          !rs[i].pytorch) {
        fprintf(f, "%" PRId64 " %f %f\n", rs[i].ranks, rs[i].wall_s,
                rs[i].cpu_s > 0.005 ? rs[i].cpu_s : 0.005);
        any = 1;
      }
    has[s] = any;
    if (!any)
      fprintf(f, "NaN NaN NaN\n");
    fprintf(f, "\n\n");
  }
  fclose(f);
  /* Every server and every client of these runs shares this one machine:
   * the title says so, with its CPUs and the day (a cluster's times are
   * the main plot's projection, the root's load --pytorch's plot). */
  char day[16] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm) != NULL)
    strftime(day, sizeof(day), "%Y-%m-%d", &tm);
  FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
  if (g == NULL)
    return -errno;
  fprintf(g,
          "set terminal png size 1100,450\nset output '%s'\n"
          "set multiplot layout 1,2 title \"PyTorch's init pattern, the "
          "same C clients, against each server\\nmeasured on one "
          "machine (%ld CPUs, %s), servers and clients on it\"\n"
          "set logscale xy\nset grid\nset key top left font ',9'\n"
          "set xlabel 'ranks'\n",
          out, sysconf(_SC_NPROCESSORS_ONLN), day);
  for (int panel = 0; panel < 2; panel++) {
    fprintf(g, "set ylabel '%s'\nplot ",
            panel == 0 ? "seconds to complete" : "server CPU seconds");
    const char *sep = "";
    for (int s = 0; s < S_COUNT; s++) {
      if (!has[s]) /* a server not run: no line, no legend entry */
        continue;
      fprintf(g,
              "%s'%s' index %d using 1:%d with linespoints lt %d pt 7 "
              "title '%s'",
              sep, dat, s, panel + 2, s + 1, server_titles[s]);
      sep = ", ";
    }
    if (*sep == '\0')
      fprintf(g, "NaN notitle");
    fprintf(g, "\n");
  }
  fprintf(g, "unset multiplot\n");
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}

/* --pytorch's plot beside png (PNG-pytorch.png): the root's read
 * requests (wait, get, multi_get and check) and its bytes against N, for
 * rdzvd flat, tree and tree without copies (log-log). 0 or -1. */
int bench_inc_plot_pytorch(const char *png, const struct inc_result *rs,
                           int n) {
  static const int servers[] = {S_FLAT, S_TREE, S_TREE_NC};
  char out[300], dat[] = "/tmp/rdzv-bench-ptplot-XXXXXX";
  size_t l = strlen(png);
  if (l > 4 && strcmp(png + l - 4, ".png") == 0)
    l -= 4;
  snprintf(out, sizeof(out), "%.*s-pytorch.png", (int)l, png);
  int fd = mkstemp(dat);
  if (fd < 0)
    return -errno;
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(dat);
    return -1;
  }
  for (size_t k = 0; k < sizeof(servers) / sizeof(servers[0]); k++) {
    int any = 0;
    fprintf(f, "# %s\n", server_names[servers[k]]);
    for (int i = 0; i < n; i++) {
      const struct inc_result *r = &rs[i];
      if (r->server != servers[k] || r->skipped || !r->verified || !r->pytorch)
        continue;
      int64_t reads = r->root_wait + r->root_get + r->root_mget;
      fprintf(f, "%" PRId64 " %" PRId64 " %" PRId64 "\n", r->ranks,
              reads > 0 ? reads : 1, r->root_bytes > 0 ? r->root_bytes : 1);
      any = 1;
    }
    if (!any)
      fprintf(f, "NaN NaN NaN\n");
    fprintf(f, "\n\n");
  }
  fclose(f);
  FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
  if (g == NULL) {
    unlink(dat);
    return -errno;
  }
  fprintf(g,
          "set terminal png size 1100,450 noenhanced\n"
          "set output '%s'\n"
          "set multiplot layout 1,2 title \"PyTorch's own store traffic "
          "(ids, checks, state reads): the root's load\"\n"
          "set logscale xy\nset grid\nset key top left font ',9'\n"
          "set xlabel 'ranks'\n",
          out);
  for (int panel = 0; panel < 2; panel++) {
    fprintf(g, "set ylabel \"%s\"\nplot ",
            panel == 0 ? "root's wait+get+multi_get+check requests"
                       : "root's bytes in and out");
    for (size_t k = 0; k < sizeof(servers) / sizeof(servers[0]); k++)
      fprintf(g,
              "%s'%s' index %zu using 1:%d with linespoints lt %d pt 7 "
              "title '%s'",
              k ? ", " : "", dat, k, panel + 2, servers[k] + 1,
              server_titles[servers[k]]);
    fprintf(g, "\n");
  }
  fprintf(g, "unset multiplot\n");
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}
