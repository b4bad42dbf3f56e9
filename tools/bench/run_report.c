/* rdzv-bench's main job: the report of its runs (a row per run on
 * stdout, a JSON record per run, the plot through gnuplot). It owns their
 * formats, which tests and docs/benchmarks.md read; it calls only libc,
 * jansson and gnuplot (through popen), and holds no state. See run_int.h. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/run_int.h"

static json_t *result_json(const struct result *r) {
  return json_pack(
      "{s:s,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,"
      "s:I,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:f,s:I}",
      "mode", r->mode, "ranks", (json_int_t)r->ranks, "hosts",
      (json_int_t)r->hosts, "fanout", (json_int_t)r->fanout, "ranks_per_host",
      (json_int_t)r->ranks_per_host, "wall_s", r->wall_s, "p50_s", r->p50_s,
      "p99_s", r->p99_s, "root_msgs", (json_int_t)r->root_msgs, "root_bytes",
      (json_int_t)r->root_bytes, "max_node_msgs", (json_int_t)r->max_node_msgs,
      "max_node_bytes", (json_int_t)r->max_node_bytes, "root_rss_bytes",
      (json_int_t)r->root_rss, "node_rss_bytes", (json_int_t)r->node_rss,
      "transport", r->transport, "failed", (json_int_t)r->failed, "depth",
      (json_int_t)r->depth, "cpu_s", r->cpu_s, "rendezvous_cpu_s", r->win_cpu_s,
      "max_process_rendezvous_cpu_s", r->max_proc_win_cpu_s, "projection_s",
      r->projection_s, "projection_rtt_us", r->rtt_us, "interned_bytes",
      (json_int_t)r->interned_bytes, "id_tables_checked",
      (json_int_t)r->ids_checked, "id_table_mismatches",
      (json_int_t)r->ids_mismatch, "root_work_msgs",
      (json_int_t)r->root_work_msgs, "max_node_work_msgs",
      (json_int_t)r->max_node_work_msgs, "projection_frame_us",
      r->proj_frame_s * 1e6, "projection_busiest_frames",
      (json_int_t)r->proj_busiest_frames);
}

/* result_json and, when measured, the idle frame rates. */
json_t *bench_report_json(const struct result *r) {
  json_t *j = result_json(r);
  if (r->idle_root_per_s >= 0) {
    json_object_set_new(j, "idle_root_frames_per_s",
                        json_real(r->idle_root_per_s));
    json_object_set_new(j, "idle_max_node_frames_per_s",
                        json_real(r->idle_node_per_s));
  }
  return j;
}

void bench_report_row(const struct result *r) {
  printf("%-4s %7" PRId64 " ranks %6" PRId64 " hosts %-10s wall %7.3f s  "
         "p50 %7.3f  p99 %7.3f  root msgs %9" PRId64 "  busiest node %7" PRId64
         "  root RSS %5.1f MiB  failed %" PRId64 "  projected %.3f s\n",
         r->mode, r->ranks, r->hosts, r->transport, r->wall_s, r->p50_s,
         r->p99_s, r->root_msgs, r->max_node_msgs,
         (double)r->root_rss / 1048576.0, r->failed, r->projection_s);
  if (r->idle_root_per_s >= 0)
    printf("     idle (ranks done, connected): root %.1f frames/s, busiest "
           "node %.1f frames/s\n",
           r->idle_root_per_s, r->idle_node_per_s);
  fflush(stdout);
}

/* Three panels against N (log-log), tree against flat: the root's
 * messages, the root's bytes, and the time: projected on a cluster (the
 * model that --delay-tree checks) beside what this machine measured,
 * labelled as such; gnuplot's png terminal. */
int bench_report_plot(const char *png, const struct result *rs, int n) {
  char dat[] = "/tmp/rdzv-bench-plot-XXXXXX";
  int fd = mkstemp(dat);
  if (fd < 0)
    return -errno;
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(dat);
    return -1;
  }
  /* Two series, tree and flat, whatever the rank hop's transport. */
  static const char *const modes[2] = {"tree", "flat"};
  for (int m = 0; m < 2; m++) {
    fprintf(f, "# %s: ranks wall_s root_msgs root_bytes projection_s\n",
            modes[m]);
    int any = 0;
    for (int i = 0; i < n; i++)
      if (strcmp(rs[i].mode, modes[m]) == 0) {
        fprintf(f, "%" PRId64 " %f %" PRId64 " %" PRId64 " %f\n", rs[i].ranks,
                rs[i].wall_s, rs[i].root_msgs, rs[i].root_bytes,
                rs[i].projection_s);
        any = 1;
      }
    if (!any)
      fprintf(f, "NaN NaN NaN NaN NaN\n");
    fprintf(f, "\n\n");
  }
  fclose(f);
  FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
  if (g == NULL) {
    unlink(dat);
    return -errno;
  }
  fprintf(g,
          "set terminal png size 1500,470 noenhanced\nset output '%s'\n"
          "set multiplot layout 1,3 title 'rdzv-bench: the rendezvous "
          "through the tree and flat (every rank to one server)'\n"
          "set logscale xy\nset grid\nset key top left font ',9'\n"
          "set xlabel 'ranks'\nset ylabel 'messages at the root'\n"
          "plot '%s' index 0 using 1:3 with linespoints lt 1 pt 7 "
          "title 'tree', '' index 1 using 1:3 with linespoints lt 2 pt 7 "
          "title 'flat'\n"
          "set ylabel 'bytes in and out of the root'\n"
          "plot '%s' index 0 using 1:4 with linespoints lt 1 pt 7 "
          "title 'tree', '' index 1 using 1:4 with linespoints lt 2 pt 7 "
          "title 'flat'\n"
          "set ylabel 'seconds'\nset key bottom right font ',8'\n"
          "plot '%s' index 0 using 1:5 with linespoints lt 1 pt 7 "
          "title 'tree, projected on a cluster', "
          "'' index 1 using 1:5 with linespoints lt 2 pt 7 "
          "title 'flat, projected on a cluster', "
          "'' index 0 using 1:2 with linespoints lt 1 pt 6 dt 2 "
          "title 'tree, measured on this machine (every daemon on it)', "
          "'' index 1 using 1:2 with linespoints lt 2 pt 6 dt 2 "
          "title 'flat, measured on this machine'\n"
          "unset multiplot\n",
          png, dat, dat, dat);
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}
