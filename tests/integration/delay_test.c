/* tools/delay-relay and rdzv-bench --delay-tree.
 *
 * The relay: three links at once (two Unix, one TCP on a port it picks),
 * 4 MiB each way through each at the same time with a 16 KiB queue cap
 * (backpressure), every byte in order; a ping's round trip is at least
 * 2 * D (a lower bound from physics: it holds each chunk D each way; no
 * upper limit is asserted); the end of a stream arrives, and a target that
 * refuses leaves the client with an end of stream, not a hang.
 *
 * The bench: a delayed tree of 32 nodes (64 ranks), 25 us each way on
 * every uplink: every rank completes, the lone round trips succeed, the
 * link's round trip and the lone get through the 3 levels take at least
 * the delay they cross, and the JSON holds the model and projections. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

#define RELAY "tools/delay-relay"
#define BENCH "tools/bench/rdzv-bench"
#define BULK (4u << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int unix_listen(const char *path) {
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0);
  assert_int_equal(listen(fd, 8), 0);
  return fd;
}

static int tcp_listen(int *port) {
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
  assert_int_equal(listen(fd, 8), 0);
  socklen_t l = sizeof(in);
  getsockname(fd, (struct sockaddr *)&in, &l);
  *port = ntohs(in.sin_port);
  return fd;
}

static int connect_to(const char *addr) {
  if (strncmp(addr, "unix:", 5) == 0) {
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof(un.sun_path), "%s", addr + 5);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    return connect(fd, (struct sockaddr *)&un, sizeof(un)) == 0 ? fd : -1;
  }
  struct sockaddr_in in = {
      .sin_family = AF_INET,
      .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
      .sin_port = htons((uint16_t)strtol(strrchr(addr, ':') + 1, NULL, 10))};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  return connect(fd, (struct sockaddr *)&in, sizeof(in)) == 0 ? fd : -1;
}

/* One side of a bulk exchange: writes BULK bytes of pattern seed while
 * a thread reads BULK bytes that must be pattern peer_seed. */
struct bulk {
  int fd;
  uint8_t seed, peer_seed;
  int ok;
};

static uint8_t pat(uint8_t seed, size_t i) {
  return (uint8_t)(seed + i * 7 + (i >> 13));
}

static void *bulk_reader(void *arg) {
  struct bulk *b = arg;
  uint8_t buf[8192];
  size_t got = 0;
  b->ok = 1;
  while (got < BULK) {
    ssize_t n = read(b->fd, buf, sizeof(buf));
    if (n <= 0) {
      b->ok = 0;
      return NULL;
    }
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != pat(b->peer_seed, got + (size_t)i))
        b->ok = 0;
    got += (size_t)n;
  }
  return NULL;
}

static void *bulk_side(void *arg) {
  struct bulk *b = arg;
  pthread_t rd;
  pthread_create(&rd, NULL, bulk_reader, b);
  uint8_t buf[8192];
  for (size_t off = 0; off < BULK;) {
    size_t n = BULK - off < sizeof(buf) ? BULK - off : sizeof(buf);
    for (size_t i = 0; i < n; i++)
      buf[i] = pat(b->seed, off + i);
    ssize_t w = write(b->fd, buf, n);
    if (w <= 0) {
      b->ok = 0;
      break;
    }
    off += (size_t)w;
  }
  pthread_join(rd, NULL);
  return NULL;
}

/* Starts the relay; fills the listen addresses it reports (ports taken). */
static void relay_start(struct proc *p, const char *delay, char *const *pairs,
                        int npairs, char addrs[][128]) {
  char *argv[16] = {RELAY, "--delay-us", (char *)delay, "--max-queued-kib",
                    "16"};
  int k = 5;
  for (int i = 0; i < npairs; i++)
    argv[k++] = pairs[i];
  argv[k] = NULL;
  assert_int_equal(proc_start(p, argv, 1), 0);
  char line[1024];
  size_t n = 0;
  while (n < sizeof(line) - 1 && read(p->out_fd, line + n, 1) == 1 &&
         line[n] != '\n')
    n++;
  line[n] = '\0';
  assert_true(strncmp(line, "ready ", 6) == 0);
  const char *tok = line + 6;
  for (int i = 0; i < npairs; i++) {
    size_t len = strcspn(tok, " ");
    assert_true(len > 0 && len < 128);
    memcpy(addrs[i], tok, len);
    addrs[i][len] = '\0';
    tok += len + (tok[len] == ' ');
  }
}

static void test_relay(void **state) {
  (void)state;
  char dir[] = "/tmp/rdzv-relay-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char t0[128], t1[128], pr[3][300];
  snprintf(t0, sizeof(t0), "%s/t0.sock", dir);
  snprintf(t1, sizeof(t1), "%s/t1.sock", dir);
  int port = 0;
  int lfd[3] = {unix_listen(t0), unix_listen(t1), tcp_listen(&port)};
  snprintf(pr[0], 300, "unix:%s/l0.sock=unix:%s", dir, t0);
  snprintf(pr[1], 300, "unix:%s/l1.sock=unix:%s", dir, t1);
  snprintf(pr[2], 300, "tcp:127.0.0.1:0=127.0.0.1:%d", port);
  char *pairs[] = {pr[0], pr[1], pr[2]};
  char addrs[3][128];
  struct proc relay;
  relay_start(&relay, "2000", pairs, 3, addrs);

  /* Three links at once, both directions, backpressure. */
  int cfd[3], sfd[3];
  for (int i = 0; i < 3; i++) {
    cfd[i] = connect_to(addrs[i]);
    assert_true(cfd[i] >= 0);
    sfd[i] = accept(lfd[i], NULL, NULL);
    assert_true(sfd[i] >= 0);
  }
  /* A ping through a 2 ms delay each way takes at least 4 ms. */
  char b = 'x';
  double t = now_s();
  assert_int_equal(write(cfd[0], &b, 1), 1);
  assert_int_equal(read(sfd[0], &b, 1), 1);
  assert_int_equal(write(sfd[0], &b, 1), 1);
  assert_int_equal(read(cfd[0], &b, 1), 1);
  double rtt = now_s() - t;
  printf("measure: round trip through the relay at 2 ms: %.2f ms\n", rtt * 1e3);
  assert_true(rtt >= 0.004);

  struct bulk bs[6];
  pthread_t th[6];
  for (int i = 0; i < 3; i++) {
    bs[2 * i] = (struct bulk){.fd = cfd[i],
                              .seed = (uint8_t)(i * 2 + 1),
                              .peer_seed = (uint8_t)(i * 2 + 2)};
    bs[2 * i + 1] = (struct bulk){.fd = sfd[i],
                                  .seed = (uint8_t)(i * 2 + 2),
                                  .peer_seed = (uint8_t)(i * 2 + 1)};
  }
  for (int i = 0; i < 6; i++)
    pthread_create(&th[i], NULL, bulk_side, &bs[i]);
  for (int i = 0; i < 6; i++) {
    pthread_join(th[i], NULL);
    assert_true(bs[i].ok);
  }
  /* The end of a stream goes through (and then the other way). */
  for (int i = 0; i < 3; i++) {
    shutdown(cfd[i], SHUT_WR);
    assert_int_equal(read(sfd[i], &b, 1), 0);
    close(sfd[i]);
    assert_int_equal(read(cfd[i], &b, 1), 0);
    close(cfd[i]);
  }
  /* A target that refuses: the client gets an end of stream. */
  close(lfd[1]);
  unlink(t1);
  int fd = connect_to(addrs[1]);
  assert_true(fd >= 0);
  ssize_t n = read(fd, &b, 1);
  assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
  close(fd);
  kill(relay.pid, SIGTERM);
  char *out = proc_read_all(&relay);
  assert_int_equal(proc_wait(&relay), 0);
  assert_non_null(out);
  printf("%s", out);
  /* 2 x 3 x 4 MiB of bulk data went through, and the pings. */
  const char *st = strstr(out, "stats ");
  assert_non_null(st);
  assert_true(stats_get(st + 6, "bytes") >= 6 * (int64_t)BULK);
  assert_int_equal(stats_get(st + 6, "connect_failed"), 1);
  free(out);
  close(lfd[0]);
  close(lfd[2]);
  rm_rf(dir);
}

static double jnum(json_t *j, const char *k) {
  json_t *v = json_object_get(j, k);
  assert_non_null(v);
  return json_is_integer(v) ? (double)json_integer_value(v)
                            : json_real_value(v);
}

static void test_delay_tree(void **state) {
  (void)state;
  char json_path[] = "/tmp/rdzv-delay-tree-XXXXXX";
  int fd = mkstemp(json_path);
  assert_true(fd >= 0);
  close(fd);
  char *argv[] = {"/usr/bin/env",
                  "RDZV_DELAY_RELAY=" RELAY,
                  BENCH,
                  "--delay-tree",
                  "32",
                  "--delay-us",
                  "25",
                  "--ranks-per-host",
                  "2",
                  "--json",
                  json_path,
                  NULL};
  struct proc p;
  assert_int_equal(proc_start(&p, argv, 1), 0);
  char *out = proc_read_all(&p);
  printf("%s", out ? out : "");
  free(out);
  assert_int_equal(proc_wait(&p), 0);
  json_t *all = json_load_file(json_path, 0, NULL);
  unlink(json_path);
  assert_non_null(all);
  json_t *rows = json_object_get(all, "delay_tree");
  assert_int_equal(json_array_size(rows), 1);
  json_t *r = json_array_get(rows, 0);
  assert_int_equal((int64_t)jnum(r, "ranks"), 64);
  assert_int_equal((int64_t)jnum(r, "failed"), 0);
  assert_int_equal((int64_t)jnum(r, "lone_failed"), 0);
  assert_true(jnum(r, "wall_s") > 0);
  /* Physics: one link's round trip crosses the delay twice, a lone get
   * from host 31 (31 -> 1 -> 0 -> root) crosses it six times. */
  assert_true(jnum(r, "link_rtt_us") >= 50);
  assert_true(jnum(r, "lone_get_us") >= 150);
  assert_true(jnum(r, "lone_add_us") >= 150);
  assert_true(jnum(r, "relay_chunks") > 0);
  json_t *m = json_object_get(r, "model_rendezvous");
  assert_non_null(m);
  assert_true(jnum(m, "network_s") > 0 && jnum(m, "total_s") > 0);
  json_t *proj = json_object_get(all, "projection");
  assert_int_equal(json_array_size(proj), 2);
  assert_int_equal((int64_t)jnum(json_array_get(proj, 0), "ranks"), 100000);
  assert_int_equal((int64_t)jnum(json_array_get(proj, 1), "ranks"), 1000000);
  /* 2 ranks a host, fan-out 16: 50,000 hosts are 5 levels deep,
   * 500,000 are 6. */
  assert_int_equal((int64_t)jnum(json_array_get(proj, 0), "levels"), 5);
  assert_int_equal((int64_t)jnum(json_array_get(proj, 1), "levels"), 6);
  json_decref(all);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_relay),
      cmocka_unit_test(test_delay_tree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
