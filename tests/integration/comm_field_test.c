/* Failures seen in the field in large jobs (numbered as the project's
 * list of them) replayed against
 * communicators (rdzv/comm.h), on the rig of comm_test.c
 * (comm_harness.h): a real root and two node daemons (hostA, hostB) as
 * processes, ranks as forked children, NCCL the FAKE library
 * tests/fake_nccl/libfake_nccl.so (a test double) through the production
 * dlopen seam, whose per-rank log shows every NCCL call.
 *
 *   B24a  a 64-rank world where rank 17 joins but never calls init: the
 *         other 63 get RDZV_EDEADLINE naming rank 17 and its host (and no
 *         one else), and NCCL's init never starts anywhere;
 *   B24b  1,000 communicators created, initialized and destroyed in a
 *         loop in one process: every init succeeds, open fds stay the
 *         same, memory stays flat, every id is new; timings are printed,
 *         never asserted;
 *   B18   a name initialized once in a generation is refused the second
 *         time (RDZV_ENAME_USED, at once, no id made, no NCCL call): its
 *         unique ids served one init and NCCL ids are single-use.
 *
 * No assertion depends on wall-clock time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_harness.h"
#include "proc.h"
#include "rdzv/comm.h"
#include "rdzv/rdzv.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Text after a report's "status rank gen" prefix. */
static const char *report_text(const char *rep) {
  const char *p = strchr(rep, ' ');
  p = p != NULL ? strchr(p + 1, ' ') : NULL;
  p = p != NULL ? strchr(p + 1, ' ') : NULL;
  return p != NULL ? p : "";
}

/* ---- B24a: a 64-rank world, rank 17 never calls init -------------------- */

#define B24A_N 64
#define B24A_MISSING 17

static void scen_missing17(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  if (k->rank == B24A_MISSING) {
    say(k, "stays away");
    hold(); /* joined, but never calls any init */
    return;
  }
  made_label = "world";
  /* The 63 start their init together (a barrier among them, generous
   * deadline), so that on a loaded machine none comes more than the 3 s
   * deadline after the others and gets named too. */
  int32_t others[63];
  for (int32_t i = 0, n = 0; i < 64; i++)
    if (i != B24A_MISSING)
      others[n++] = i;
  check(k, rdzv_rendezvous_group_barrier(k->r, "start", others, 63, 300) == 0,
        "start together");
  double t0 = now_s();
  int rc = rdzv_comm_nccl(k->world, &nc, 3.0);
  double took = now_s() - t0;
  const char *e = rdzv_comm_last_error(k->world);
  check(k, rc == RDZV_EDEADLINE, "deadline");
  check(k, nc == NULL, "no comm");
  check(k, strstr(e, "1 of 64 missing: rank 17 (host ") != NULL,
        "names rank 17 and its host");
  /* Rank 17 is the only rank named anywhere in the text. */
  check(k, count(e, "rank ") == 1 && strstr(e, " more") == NULL,
        "names no other rank");
  check(k, rdzv_comm_state(k->world) == RDZV_COMM_FAILED, "failed");
  say(k, "rc=%s took=%.3f error=[%s]", rdzv_err_name(rc), took, e);
}

static void test_b24_missing_rank_named(void **state) {
  (void)state;
  struct world_spec w = {"b24a", B24A_N, B24A_N / NHOSTS, 0, 0, NULL,
                         NULL,   0,      scen_missing17,  0};
  struct rank_proc rp[B24A_N];
  static char rep[B24A_N][REPORT_MAX];
  assert_int_equal(pipe(go_pipe), 0);
  launch(&w, rp);
  close(go_pipe[1]);
  go_pipe[1] = -1;
  for (int i = 0; i < B24A_N; i++) {
    if (i == B24A_MISSING)
      continue;
    int st = finish(&rp[i], rep[i], sizeof(rep[i]));
    if (st != 0)
      fail_msg("rank %d: %s", i, rep[i]);
  }
  printf("rank 0 saw:%s\n", report_text(rep[0]));
  printf("rank 63 saw:%s\n", report_text(rep[63]));
  close(go_pipe[0]); /* the others are done: release rank 17 */
  go_pipe[0] = -1;
  assert_int_equal(
      finish(&rp[B24A_MISSING], rep[B24A_MISSING], sizeof(rep[B24A_MISSING])),
      0);
  for (int i = 0; i < B24A_N; i++) {
    int rank = -1;
    assert_int_equal(sscanf(rep[i], "%*d %d", &rank), 1);
    assert_int_equal(rank, i);
    if (i == B24A_MISSING)
      assert_non_null(strstr(rep[i], "stays away"));
    else
      assert_non_null(strstr(rep[i], "1 of 64 missing: rank 17 (host hostA)"));
    char *log = fake_log("b24a", i);
    assert_int_equal(count(log, "init"), 0); /* NCCL's init never ran */
    free(log);
  }
}

/* ---- B24b: 1,000 communicators in a loop --------------------------------- */

#define LOOPS 1000
/* RSS may grow this much from iteration 100 to 1,000. Flat, not zero: the
 * world remembers every name it initialized (B18's check, ~200 bytes a
 * name: ~180 KiB for 900 names, measured ~240 KiB of RSS in all), malloc's
 * arenas move by pages, and under ASan each block carries redzones and
 * shadow pages stay resident after its quarantine is drained (measured
 * ~1.9 MiB). Keeping ~5 KiB or more per communicator (a buffer, a thread
 * stack, the store's per-key state) would exceed it; a leaked socket
 * fails the fd check first. */
#define RSS_GROWTH_MAX (4L << 20)

#ifdef __SANITIZE_ADDRESS__
/* GCC ships no sanitizer/allocator_interface.h; libasan exports these. */
void __sanitizer_purge_allocator(void);
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* Resident set, bytes (/proc/self/statm's second field, in pages). Under
 * ASan, freed blocks first go to its quarantine (up to 256 MiB), so the
 * resident set would grow with everything freed: drain it and return free
 * pages to the system first. */
static long rss_bytes(void) {
  long size = 0, resident = -1;
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_purge_allocator();
#endif
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void scen_thousand(struct rank_ctx *k) {
  static double took[LOOPS];
  const int32_t both[2] = {0, 1};
  int fds10 = -1, fds1000 = -1, done = 0;
  long rss100 = -1, rss1000 = -1;
  int ids0 = atomic_load(&ids_made);
  size_t len0 = k->len;
  made_label = "loop";
  for (int i = 0; i < LOOPS; i++) {
    char name[16];
    rdzv_comm_t *g = NULL;
    struct ncclComm *nc = NULL;
    snprintf(name, sizeof(name), "c%d", i);
    if (rdzv_comm_group(k->world, name, both, 2, &g) != 0) {
      check(k, 0, "group");
      break;
    }
    double t0 = now_s();
    int rc = rdzv_comm_nccl(g, &nc, 30);
    took[i] = now_s() - t0;
    const char *p = rdzv_comm_init_path(g);
    if (rc != 0 || nc == NULL || p == NULL || strcmp(p, "config") != 0) {
      /* Keep the first failure's text; drop the id records (below). */
      k->len = len0;
      k->text[len0] = '\0';
      say(k, "iteration=%d rc=%s path=%s error=[%s]", i, rdzv_err_name(rc),
          p != NULL ? p : "none", rdzv_comm_last_error(g));
      check(k, 0, "init");
      rdzv_comm_destroy(g);
      return;
    }
    rdzv_comm_destroy(g);
    done = i + 1;
    if (done == 10)
      fds10 = count_open_fds();
    if (done == 100)
      rss100 = rss_bytes();
    if (done == LOOPS) {
      fds1000 = count_open_fds();
      rss1000 = rss_bytes();
    }
  }
  /* The harness's make_id writes "made=loop:<hex>" into the report for
   * each id rank 0 makes, more than the report holds: count them instead
   * and keep the report for the results. */
  int made = atomic_load(&ids_made) - ids0;
  k->len = len0;
  k->text[len0] = '\0';
  check(k, done == LOOPS, "all iterations");
  check(k, made == (k->rank == 0 ? LOOPS : 0), "one id per init, by rank 0");
  check(k, fds10 >= 0 && fds10 == fds1000, "open fds flat");
  check(k, rss100 > 0 && rss1000 > 0, "rss readable");
  check(k, rss1000 - rss100 < RSS_GROWTH_MAX, "rss flat");
  qsort(took + 1, LOOPS - 1, sizeof(took[0]), cmp_double);
  say(k, "inits=%d made=%d fds10=%d fds1000=%d rss100_kib=%ld rss1000_kib=%ld",
      done, made, fds10, fds1000, rss100 >> 10, rss1000 >> 10);
  say(k, "first_s=%.6f rest_median_s=%.6f rest_max_s=%.6f", took[0],
      took[1 + (LOOPS - 1) / 2], took[LOOPS - 1]);
}

/* The ids of every "initRankConfig" line of log, in order, into ids[]
 * (17 bytes each); returns how many. */
static int init_ids(const char *log, char (*ids)[17], int max) {
  int n = 0;
  for (const char *l = strstr(log, "initRankConfig"); l != NULL && n < max;
       l = strstr(l + 1, "initRankConfig"))
    if (field(l, "initRankConfig", "id=", ids[n], sizeof(ids[n])) == 0)
      n++;
  return n;
}

static int cmp_id(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

static void test_b24_thousand_communicators(void **state) {
  (void)state;
  struct world_spec w = {"b24b", 2, 1, 0, 0, NULL, NULL, 0, scen_thousand, 0};
  char rep[2][REPORT_MAX];
  static char ids[2][LOOPS + 1][17];
  run_world(&w, rep);
  for (int i = 0; i < 2; i++)
    printf("rank %d:%s\n", i, report_text(rep[i]));
  int n[2];
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("b24b", i);
    /* 1,000 blocking inits, each finalized and destroyed, nothing else. */
    assert_int_equal(count(log, "initRankConfig comm="), LOOPS);
    assert_int_equal(count(log, "blocking=1"), LOOPS);
    assert_int_equal(count(log, "-> 0 ctx="), LOOPS); /* all succeeded */
    assert_int_equal(count(log, "finalize comm="), LOOPS);
    assert_int_equal(count(log, "destroy comm="), LOOPS);
    assert_int_equal(count(log, "abort comm="), 0);
    n[i] = init_ids(log, ids[i], LOOPS + 1);
    assert_int_equal(n[i], LOOPS);
    free(log);
  }
  /* Both ranks used the same id for each communicator ... */
  for (int j = 0; j < LOOPS; j++)
    assert_string_equal(ids[0][j], ids[1][j]);
  /* ... and every communicator's id is new. */
  qsort(ids[0], LOOPS, sizeof(ids[0][0]), cmp_id);
  for (int j = 1; j < LOOPS; j++)
    assert_string_not_equal(ids[0][j - 1], ids[0][j]);
}

/* ---- B18: a name initialized once is refused the second time ------------- */

static void scen_reuse(struct rank_ctx *k) {
  const int32_t both[2] = {0, 1};
  rdzv_comm_t *g = NULL, *again = NULL, *h = NULL;
  struct ncclComm *nc = NULL;
  struct rdzv_comm_timings t = {0};
  made_label = "g";
  check(k, rdzv_comm_group(k->world, "g", both, 2, &g) == 0, "group g");
  if (k->failed)
    return;
  check(k, rdzv_comm_nccl(g, &nc, 30) == 0 && nc != NULL, "init g");
  rdzv_comm_destroy(g);
  /* A new handle of the same name, after the first was destroyed. */
  check(k, rdzv_comm_group(k->world, "g", both, 2, &again) == 0,
        "group g again");
  if (k->failed)
    return;
  made_label = "g-again";
  int before = atomic_load(&ids_made);
  double t0 = now_s();
  nc = NULL;
  int rc = rdzv_comm_nccl(again, &nc, 30);
  double took = now_s() - t0;
  const char *e = rdzv_comm_last_error(again);
  check(k, rc == RDZV_ENAME_USED, "refused");
  check(k, nc == NULL, "no comm");
  check(k, strstr(e, "already initialized in generation") != NULL, "text");
  check(k, strstr(e, "world.g") != NULL, "names the communicator");
  check(k, rdzv_comm_state(again) == RDZV_COMM_FAILED, "failed");
  /* At once: no id made, no exchange through the tree. */
  check(k, atomic_load(&ids_made) == before, "no id made");
  check(k, rdzv_comm_timings(again, &t) == 0 && t.nids == 0 && t.ids_s == 0,
        "no exchange");
  check(k, rdzv_comm_nccl(again, &nc, 30) == RDZV_ENAME_USED, "final");
  say(k, "rc=%s took=%.6f error=[%s]", rdzv_err_name(rc), took, e);
  rdzv_comm_destroy(again);
  /* Another name still initializes. */
  made_label = "h";
  check(k, rdzv_comm_group(k->world, "h", both, 2, &h) == 0, "group h");
  if (k->failed)
    return;
  check(k, rdzv_comm_nccl(h, &nc, 30) == 0 && nc != NULL, "init h");
  const char *p = rdzv_comm_init_path(h);
  check(k, p != NULL && strcmp(p, "config") == 0, "h path");
  rdzv_comm_destroy(h);
}

static void test_b18_name_reuse_refused(void **state) {
  (void)state;
  struct world_spec w = {"b18", 2, 1, 0, 0, NULL, NULL, 0, scen_reuse, 0};
  char rep[2][REPORT_MAX], gid[17], hid[17], line[64];
  run_world(&w, rep);
  for (int i = 0; i < 2; i++)
    printf("rank %d:%s\n", i, report_text(rep[i]));
  /* Rank 0 made one id for "g", none for the refused handle, one for "h". */
  assert_int_equal(count(rep[0], "made=g:"), 1);
  assert_int_equal(count(rep[0], "made=g-again:"), 0);
  assert_int_equal(count(rep[0], "made=h:"), 1);
  assert_int_equal(count(rep[1], "made="), 0);
  assert_int_equal(made_id(rep[0], "g", gid, sizeof(gid)), 0);
  assert_int_equal(made_id(rep[0], "h", hid, sizeof(hid)), 0);
  for (int i = 0; i < 2; i++) {
    assert_non_null(strstr(rep[i], "rc=RDZV_ENAME_USED"));
    assert_non_null(strstr(rep[i], "already initialized in generation 1"));
    char *log = fake_log("b18", i);
    /* "g" was initialized once, "h" once, nothing else. */
    snprintf(line, sizeof(line), "id=%s", gid);
    assert_int_equal(count(log, line), 1);
    snprintf(line, sizeof(line), "id=%s", hid);
    assert_int_equal(count(log, line), 1);
    assert_int_equal(count(log, "initRankConfig"), 2);
    assert_int_equal(count(log, "destroy comm="), 2);
    free(log);
  }
}

/* ---- a member that comes after the others gave up ------------------------ */

/* Rank 1's init fails at its 1 s deadline (it gives up: the root fails the
 * world's check-in for everyone); only then does rank 0 come. Rank 0 must
 * fail too, at once, and never start NCCL's init alone (with the real
 * library a lone blocking init would wait forever). Before the give-up,
 * rank 1's check-in still counted and rank 0 completed it alone. */
static void scen_late(struct rank_ctx *k) {
  struct ncclComm *nc = NULL;
  made_label = "late";
  if (k->rank == 1) {
    check(k, rdzv_comm_nccl(k->world, &nc, 1.0) == RDZV_EDEADLINE,
          "rank 1 deadline");
    say(k, "rank1=[%s]", rdzv_comm_last_error(k->world));
    sig_send();
    return;
  }
  check(k, sig_wait(), "rank 1 gave up");
  int rc = rdzv_comm_nccl(k->world, &nc, 30.0);
  const char *e = rdzv_comm_last_error(k->world);
  check(k, rc == RDZV_EDEADLINE, "late rank fails too");
  check(k, nc == NULL, "no comm");
  check(k, strstr(e, "1 of 2 missing: rank 0 (host ") != NULL, "names it");
  check(k, strstr(e, "came after the others had given up") != NULL, "says why");
  say(k, "rank0=[%s]", e);
}

static void test_late_member_does_not_init(void **state) {
  (void)state;
  struct world_spec w = {"late", 2, 1, 0, 0, NULL, NULL, 0, scen_late, 0};
  struct rank_proc rp[2];
  char rep[2][REPORT_MAX];
  sig_open();
  launch(&w, rp);
  sig_close();
  for (int i = 0; i < 2; i++) {
    int st = finish(&rp[i], rep[i], REPORT_MAX);
    if (st != 0)
      fail_msg("rank %d: %s", i, rep[i]);
    printf("rank %d:%s\n", i, report_text(rep[i]));
  }
  for (int i = 0; i < 2; i++) {
    char *log = fake_log("late", i);
    assert_int_equal(count(log, "init"), 0); /* NCCL's init never ran */
    free(log);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_b24_missing_rank_named),
      cmocka_unit_test(test_b24_thousand_communicators),
      cmocka_unit_test(test_b18_name_reuse_refused),
      cmocka_unit_test(test_late_member_does_not_init),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
