/* Throwaway etcd instances for tests (etcd_harness.h). */
#include "tests/etcd/etcd_harness.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { TLS_CERT, TLS_KEY, TLS_CA, TLS_CCERT, TLS_CKEY };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A loopback TCP port nothing listens on now (bound to 0, closed), -1. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int port = -1;

  if (fd < 0)
    return -1;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

static int rm_rf(const char *dir) {
  char cmd[200];
  if (dir[0] == '\0' || strncmp(dir, "/dev/shm/rdzv-etcd.", 19) != 0)
    return -1;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int tls_on(const struct etcdh *h) { return h->tls[TLS_CERT][0] != 0; }

/* Waits for pid to exit for up to timeout_s; 1 if it did (reaped), 0 if
 * not, -1 if it is not our child. */
static int wait_exit(pid_t pid, double timeout_s) {
  double end = now_s() + timeout_s;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return 1;
    if (r < 0 && errno != EINTR)
      return -1;
    if (now_s() > end)
      return 0;
    nap_ms(5);
  }
}

/* Sends SIGTERM (SIGCONT too, in case it is stopped), waits, SIGKILL
 * after 10 s. */
static void term_wait(pid_t pid) {
  kill(pid, SIGTERM);
  kill(pid, SIGCONT);
  if (wait_exit(pid, 10.0) == 0) {
    kill(pid, SIGKILL);
    wait_exit(pid, 30.0);
  }
}

/* Forks and execs member i; 0 or -1. */
static int spawn(struct etcdh *h, int i) {
  struct etcdh_member *m = &h->m[i];
  char data[96], log[96], peer[64];
  const char *argv[64];
  int a = 0;
  pid_t parent = getpid(), pid;

  snprintf(data, sizeof(data), "%s/data", m->dir);
  snprintf(log, sizeof(log), "%s/log", m->dir);
  snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", m->peer_port);
  argv[a++] = "etcd";
  argv[a++] = "--name";
  argv[a++] = m->name;
  argv[a++] = "--data-dir";
  argv[a++] = data;
  argv[a++] = "--listen-client-urls";
  argv[a++] = m->url;
  argv[a++] = "--advertise-client-urls";
  argv[a++] = m->url;
  argv[a++] = "--listen-peer-urls";
  argv[a++] = peer;
  argv[a++] = "--initial-advertise-peer-urls";
  argv[a++] = peer;
  argv[a++] = "--initial-cluster";
  argv[a++] = h->initial_cluster;
  argv[a++] = "--initial-cluster-state";
  argv[a++] = "new";
  argv[a++] = "--initial-cluster-token";
  argv[a++] = h->cluster_token;
  argv[a++] = "--heartbeat-interval";
  argv[a++] = "10";
  argv[a++] = "--election-timeout";
  argv[a++] = "100";
  argv[a++] = "--logger";
  argv[a++] = "zap";
  argv[a++] = "--log-level";
  argv[a++] = "error";
  if (tls_on(h)) {
    argv[a++] = "--cert-file";
    argv[a++] = h->tls[TLS_CERT];
    argv[a++] = "--key-file";
    argv[a++] = h->tls[TLS_KEY];
    if (h->tls[TLS_CA][0] != 0) {
      argv[a++] = "--trusted-ca-file";
      argv[a++] = h->tls[TLS_CA];
      argv[a++] = "--client-cert-auth";
    }
  }
  for (int k = 0; h->extra != NULL && h->extra[k] != NULL && a < 63; k++)
    argv[a++] = h->extra[k];
  argv[a] = NULL;

  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid < 0) {
    perror("etcd_harness: fork");
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in >= 0)
      dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    execvp("etcd", (char *const *)argv);
    fprintf(stderr, "etcd_harness: exec etcd: %s\n", strerror(errno));
    _exit(127);
  }
  m->pid = pid;
  return 0;
}

struct buf {
  char *p;
  size_t n;
};

static size_t buf_write(char *p, size_t sz, size_t nm, void *arg) {
  struct buf *b = arg;
  size_t n = sz * nm;
  char *q = realloc(b->p, b->n + n + 1);
  if (q == NULL)
    return 0;
  memcpy(q + b->n, p, n);
  b->n += n;
  q[b->n] = 0;
  b->p = q;
  return n;
}

static void set_tls(const struct etcdh *h, CURL *c) {
  if (!tls_on(h))
    return;
  if (h->tls[TLS_CA][0] != 0)
    curl_easy_setopt(c, CURLOPT_CAINFO, h->tls[TLS_CA]);
  if (h->tls[TLS_CCERT][0] != 0)
    curl_easy_setopt(c, CURLOPT_SSLCERT, h->tls[TLS_CCERT]);
  if (h->tls[TLS_CKEY][0] != 0)
    curl_easy_setopt(c, CURLOPT_SSLKEY, h->tls[TLS_CKEY]);
}

/* One GET /health of member i: 1 healthy, 0 not (yet). */
static int healthy_once(const struct etcdh *h, int i) {
  char url[96];
  struct buf b = {NULL, 0};
  long code = 0;
  int ok = 0;
  CURL *c = curl_easy_init();

  if (c == NULL)
    return 0;
  snprintf(url, sizeof(url), "%s/health", h->m[i].url);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  set_tls(h, c);
  if (curl_easy_perform(c) == CURLE_OK &&
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
      code == 200 && b.p != NULL && strstr(b.p, "\"health\":\"true\"") != NULL)
    ok = 1;
  curl_easy_cleanup(c);
  free(b.p);
  return ok;
}

/* Has member i exited? Reaps it then (pid 0). */
static int exited(struct etcdh *h, int i) {
  int st;
  if (h->m[i].pid <= 0)
    return 1;
  if (waitpid(h->m[i].pid, &st, WNOHANG) == h->m[i].pid) {
    h->m[i].pid = 0;
    return 1;
  }
  return 0;
}

int etcdh_wait_healthy(struct etcdh *h, int i, double timeout_s) {
  double end = now_s() + timeout_s;
  if (i < 0 || i >= h->n)
    return -1;
  for (;;) {
    if (exited(h, i))
      return -1;
    if (healthy_once(h, i))
      return 0;
    if (now_s() > end)
      return -1;
    nap_ms(10);
  }
}

static void print_log(const struct etcdh_member *m) {
  char path[96], line[512];
  snprintf(path, sizeof(path), "%s/log", m->dir);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  fprintf(stderr, "etcd_harness: --- %s log (%s) ---\n", m->name, path);
  while (fgets(line, sizeof(line), f) != NULL)
    fputs(line, stderr);
  fclose(f);
}

/* Stops what runs and removes the directories (keeps h's config). */
static void teardown_members(struct etcdh *h) {
  for (int i = 0; i < h->n && i < ETCDH_MAX_MEMBERS; i++) {
    if (h->m[i].pid > 0)
      term_wait(h->m[i].pid);
    h->m[i].pid = 0;
    if (h->m[i].dir[0] != 0)
      rm_rf(h->m[i].dir);
    h->m[i].dir[0] = 0;
  }
}

/* One attempt at starting all members on fresh ports and dirs: 0, 1 to
 * retry (a member exited: maybe a port race), -1 to give up. */
static int attempt(struct etcdh *h, int last) {
  size_t off = 0;
  h->endpoints[0] = 0;
  h->initial_cluster[0] = 0;
  for (int i = 0; i < h->n; i++) {
    struct etcdh_member *m = &h->m[i];
    snprintf(m->dir, sizeof(m->dir), "/dev/shm/rdzv-etcd.XXXXXX");
    if (mkdtemp(m->dir) == NULL) {
      perror("etcd_harness: mkdtemp /dev/shm");
      m->dir[0] = 0;
      return -1;
    }
    m->client_port = free_port();
    m->peer_port = free_port();
    if (m->client_port < 0 || m->peer_port < 0 ||
        m->client_port == m->peer_port)
      return 1;
    snprintf(m->name, sizeof(m->name), "m%d", i);
    snprintf(m->url, sizeof(m->url), "%s://127.0.0.1:%d",
             tls_on(h) ? "https" : "http", m->client_port);
    off += (size_t)snprintf(
        h->initial_cluster + off, sizeof(h->initial_cluster) - off,
        "%s%s=http://127.0.0.1:%d", i ? "," : "", m->name, m->peer_port);
  }
  for (int i = 0; i < h->n; i++) {
    if (i)
      strcat(h->endpoints, ",");
    strcat(h->endpoints, h->m[i].url);
  }
  snprintf(h->cluster_token, sizeof(h->cluster_token), "rdzv-%d-%ld",
           (int)getpid(), (long)(now_s() * 1000));
  for (int i = 0; i < h->n; i++)
    if (spawn(h, i) < 0)
      return -1;
  double end = now_s() + 60.0;
  for (int i = 0; i < h->n; i++) {
    double left = end - now_s();
    if (etcdh_wait_healthy(h, i, left > 0 ? left : 0) < 0) {
      int gone = exited(h, i);
      if (!gone || last) {
        fprintf(stderr, "etcd_harness: member %s %s\n", h->m[i].name,
                gone ? "exited during start" : "not healthy after 60 s");
        print_log(&h->m[i]);
      }
      return gone ? 1 : -1;
    }
  }
  return 0;
}

static int start(struct etcdh *h, int n, const char *const *extra,
                 const struct etcdh_tls *tls) {
  memset(h, 0, sizeof(*h));
  if (n < 1 || n > ETCDH_MAX_MEMBERS)
    return -1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  h->n = n;
  size_t ne = 0;
  while (extra != NULL && extra[ne] != NULL)
    ne++;
  h->extra = calloc(ne + 1, sizeof(char *));
  if (h->extra == NULL)
    return -1;
  for (size_t k = 0; k < ne; k++)
    if ((h->extra[k] = strdup(extra[k])) == NULL) {
      etcdh_stop_all(h);
      return -1;
    }
  if (tls != NULL) {
    const char *t[5] = {tls->cert_file, tls->key_file, tls->ca_file,
                        tls->client_cert, tls->client_key};
    for (int k = 0; k < 5; k++)
      if (t[k] != NULL)
        snprintf(h->tls[k], sizeof(h->tls[k]), "%s", t[k]);
  }
  for (int a = 0; a < 5; a++) {
    int r = attempt(h, a == 4);
    if (r == 0)
      return 0;
    teardown_members(h);
    if (r < 0)
      break;
  }
  fprintf(stderr, "etcd_harness: could not start %d etcd member(s)\n", n);
  etcdh_stop_all(h);
  return -1;
}

int etcdh_start(struct etcdh *h, const char *const *extra,
                const struct etcdh_tls *tls) {
  return start(h, 1, extra, tls);
}

int etcdh_start_cluster(struct etcdh *h, int n, const char *const *extra,
                        const struct etcdh_tls *tls) {
  return start(h, n, extra, tls);
}

const char *etcdh_url(const struct etcdh *h, int i) {
  return i >= 0 && i < h->n ? h->m[i].url : "";
}

const char *etcdh_endpoints(const struct etcdh *h) { return h->endpoints; }

pid_t etcdh_pid(const struct etcdh *h, int i) {
  return i >= 0 && i < h->n ? h->m[i].pid : 0;
}

int etcdh_kill(struct etcdh *h, int i) {
  if (i < 0 || i >= h->n || h->m[i].pid <= 0)
    return -1;
  kill(h->m[i].pid, SIGKILL);
  wait_exit(h->m[i].pid, 30.0);
  h->m[i].pid = 0;
  return 0;
}

int etcdh_term(struct etcdh *h, int i) {
  if (i < 0 || i >= h->n || h->m[i].pid <= 0)
    return -1;
  term_wait(h->m[i].pid);
  h->m[i].pid = 0;
  return 0;
}

int etcdh_stop(struct etcdh *h, int i) {
  if (i < 0 || i >= h->n || h->m[i].pid <= 0)
    return -1;
  return kill(h->m[i].pid, SIGSTOP) == 0 ? 0 : -1;
}

int etcdh_cont(struct etcdh *h, int i) {
  if (i < 0 || i >= h->n || h->m[i].pid <= 0)
    return -1;
  return kill(h->m[i].pid, SIGCONT) == 0 ? 0 : -1;
}

int etcdh_restart(struct etcdh *h, int i) {
  if (i < 0 || i >= h->n || h->m[i].pid > 0 || h->m[i].dir[0] == 0)
    return -1;
  return spawn(h, i);
}

int etcdh_post(const struct etcdh *h, int i, const char *path, const char *body,
               const char *token, char **resp) {
  char url[512], auth[512];
  struct buf b = {NULL, 0};
  struct curl_slist *hd = NULL;
  long code = 0;
  CURL *c;

  if (resp != NULL)
    *resp = NULL;
  if (i < 0 || i >= h->n || (c = curl_easy_init()) == NULL)
    return 0;
  snprintf(url, sizeof(url), "%s%s", h->m[i].url, path);
  hd = curl_slist_append(hd, "Content-Type: application/json");
  hd = curl_slist_append(hd, "Expect:");
  if (token != NULL) {
    snprintf(auth, sizeof(auth), "Authorization: %s", token);
    hd = curl_slist_append(hd, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  set_tls(h, c);
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  curl_slist_free_all(hd);
  if (resp != NULL && code != 0) {
    *resp = b.p != NULL ? b.p : strdup("");
    b.p = NULL;
  }
  free(b.p);
  return (int)code;
}

void etcdh_stop_all(struct etcdh *h) {
  if (h->n > 0)
    teardown_members(h);
  if (h->extra != NULL) {
    for (size_t k = 0; h->extra[k] != NULL; k++)
      free(h->extra[k]);
    free(h->extra);
  }
  h->extra = NULL;
  h->n = 0;
  h->endpoints[0] = 0;
}

char *etcdh_b64(const void *p, size_t n) {
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *s = p;
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  size_t i;

  if (out == NULL)
    return NULL;
  for (i = 0; i + 2 < n; i += 3) {
    *o++ = tab[s[i] >> 2];
    *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
    *o++ = tab[((s[i + 1] & 15) << 2) | (s[i + 2] >> 6)];
    *o++ = tab[s[i + 2] & 63];
  }
  if (i < n) {
    *o++ = tab[s[i] >> 2];
    if (i + 1 < n) {
      *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
      *o++ = tab[(s[i + 1] & 15) << 2];
    } else {
      *o++ = tab[(s[i] & 3) << 4];
      *o++ = '=';
    }
    *o++ = '=';
  }
  *o = 0;
  return out;
}
