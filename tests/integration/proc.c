/* Test helpers: see proc.h. */
#include "proc.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdzv/rdzv.h"

extern char **environ;

static int start(struct proc *p, char *const argv[], int keep_stdout,
                 int *in_fd) {
  int fds[2] = {-1, -1}, ins[2] = {-1, -1};
  if (keep_stdout && pipe2(fds, O_CLOEXEC) < 0)
    return -errno;
  if (in_fd != NULL && pipe2(ins, O_CLOEXEC) < 0) {
    int e = errno;
    if (fds[0] >= 0) {
      close(fds[0]);
      close(fds[1]);
    }
    return -e;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (keep_stdout)
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  if (in_fd != NULL)
    posix_spawn_file_actions_adddup2(&fa, ins[0], 0);
  int rc = posix_spawn(&p->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (keep_stdout)
    close(fds[1]);
  if (in_fd != NULL)
    close(ins[0]);
  p->out_fd = fds[0];
  if (rc != 0) {
    if (fds[0] >= 0)
      close(fds[0]);
    if (ins[1] >= 0)
      close(ins[1]);
    p->out_fd = -1;
    return -rc;
  }
  if (in_fd != NULL)
    *in_fd = ins[1];
  return 0;
}

int proc_start(struct proc *p, char *const argv[], int keep_stdout) {
  return start(p, argv, keep_stdout, NULL);
}

int proc_start_stdin(struct proc *p, char *const argv[], int *in_fd) {
  return start(p, argv, 1, in_fd);
}

int proc_read_line(struct proc *p, char *line, size_t n) {
  size_t len = 0;
  for (;;) {
    char ch;
    ssize_t r = read(p->out_fd, &ch, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    if (len + 1 < n)
      line[len++] = ch;
    if (ch == '\n')
      break;
  }
  line[len] = '\0';
  return (int)len;
}

char *proc_read_all(struct proc *p) {
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  if (buf == NULL || p->out_fd < 0) {
    free(buf);
    return NULL;
  }
  for (;;) {
    if (len + 1024 > cap) {
      char *nb = realloc(buf, cap * 2);
      if (nb == NULL)
        break;
      buf = nb;
      cap *= 2;
    }
    ssize_t n = read(p->out_fd, buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  close(p->out_fd);
  p->out_fd = -1;
  return buf;
}

int proc_wait(struct proc *p) {
  int st = 0;
  while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (p->out_fd >= 0) {
    close(p->out_fd);
    p->out_fd = -1;
  }
  if (WIFSIGNALED(st))
    return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

int proc_stop(struct proc *p) {
  kill(p->pid, SIGTERM);
  return proc_wait(p);
}

int wait_port_file(const char *path, double timeout_s) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  for (int i = 0; i < (int)(timeout_s * 100); i++) {
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      int port = -1;
      int ok = fscanf(f, "%d", &port);
      fclose(f);
      if (ok == 1 && port > 0)
        return port;
    }
    nanosleep(&ts, NULL);
  }
  return -1;
}

int count_open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  int n = 0;
  while (readdir(d) != NULL)
    n++;
  closedir(d);
  return n - 3; /* ".", ".." and the DIR's own fd */
}

int64_t stats_get(const char *text, const char *path) {
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  json_t *cur = root;
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *save = NULL, *part = strtok_r(buf, ".", &save);
       part != NULL && cur != NULL; part = strtok_r(NULL, ".", &save))
    cur = json_object_get(cur, part);
  int64_t v = json_is_integer(cur) ? (int64_t)json_integer_value(cur) : -1;
  json_decref(root);
  return v;
}

int64_t stats_at(const char *addr, const char *path) {
  return stats_at_job(addr, "stats-reader", path);
}

char *stats_json_at_job(const char *addr, const char *job) {
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = job;
  rdzv_client_t *c = NULL;
  char *json = NULL;
  if (rdzv_client_create(&o, &c) < 0 || rdzv_store_stats(c, &json, 10.0) < 0)
    json = NULL;
  rdzv_client_destroy(c);
  return json;
}

int64_t stats_at_job(const char *addr, const char *job, const char *path) {
  char *json = stats_json_at_job(addr, job);
  int64_t v = json != NULL ? stats_get(json, path) : -1;
  rdzv_free(json);
  return v;
}

int64_t stats_reach(const char *addr, const char *path, int64_t want) {
  int64_t v = -1;
  for (int tries = 0; tries < 600; tries++) {
    v = stats_at(addr, path);
    if (v >= want)
      break;
    usleep(50 * 1000);
  }
  return v;
}

int daemon_start(struct proc *p, const char *dir, const char *name,
                 const char *parent, const char *const *extra, char *tcp) {
  char pf[256], pfa[300], una[300], par[300], nm[128];
  snprintf(pf, sizeof(pf), "%s/%s.port", dir, name);
  snprintf(pfa, sizeof(pfa), "--port-file=%s", pf);
  snprintf(una, sizeof(una), "--unix=%s/%s.sock", dir, name);
  snprintf(par, sizeof(par), "--parent=%s", parent ? parent : "");
  snprintf(nm, sizeof(nm), "--name=%s", name);
  /* Daemons log errors only, unless RDZV_TEST_LOG_LEVEL asks for more
   * (a failing run to look into). */
  char lvl[32];
  const char *want = getenv("RDZV_TEST_LOG_LEVEL");
  snprintf(lvl, sizeof(lvl), "--log-level=%s",
           want != NULL && *want != '\0' ? want : "0");
  char *argv[32] = {"tools/rdzvd",
                    parent ? "--role=node" : "--role=root",
                    "--listen=127.0.0.1:0",
                    pfa,
                    una,
                    nm,
                    lvl};
  int n = 7;
  if (parent != NULL)
    argv[n++] = par;
  for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 31; i++)
    argv[n++] = (char *)extra[i];
  argv[n] = NULL;
  unlink(pf); /* a restart must not read the last run's port */
  if (proc_start(p, argv, 0) < 0)
    return -1;
  int port = wait_port_file(pf, 30);
  if (port < 0)
    return -1;
  snprintf(tcp, 64, "127.0.0.1:%d", port);
  return 0;
}

void daemon_unix_addr(const char *dir, const char *name, char *out, size_t n) {
  snprintf(out, n, "unix:%s/%s.sock", dir, name);
}

int fds_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kb = -1;
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  if (f != NULL)
    fclose(f);
  return kb;
}

int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

int rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

int64_t example_launch(const char *const addrs[2], const char *job, char *err,
                       size_t n) {
  struct proc ranks[4];
  char env_job[160];
  snprintf(env_job, sizeof(env_job), "RDZV_JOB=%s", job);
  err[0] = '\0';
  int started = 0;
  for (; started < 4; started++) {
    int i = started;
    char env_addr[200], env_host[32], env_lr[32];
    snprintf(env_addr, sizeof(env_addr), "RDZV_ADDR=%s", addrs[i / 2]);
    snprintf(env_host, sizeof(env_host), "RDZV_HOST=host%c", i < 2 ? 'A' : 'B');
    snprintf(env_lr, sizeof(env_lr), "LOCAL_RANK=%d", i % 2);
    char *argv[] = {"/usr/bin/env",
                    env_addr,
                    env_host,
                    env_lr,
                    env_job,
                    "LOCAL_WORLD_SIZE=2",
                    "WORLD_SIZE=4",
                    "tools/rdzv-example",
                    "--nccl",
                    "none",
                    "--timeout",
                    "30",
                    NULL};
    if (proc_start(&ranks[i], argv, 1) < 0) {
      snprintf(err, n, "cannot start rank process %d", i);
      break;
    }
  }
  int64_t gen = -1;
  int failed = started < 4;
  for (int i = 0; i < started; i++) {
    char *out = proc_read_all(&ranks[i]);
    int st = proc_wait(&ranks[i]);
    const char *line = out != NULL ? strstr(out, "generation ") : NULL;
    long long g = -1;
    if (line != NULL && sscanf(line, "generation %lld", &g) != 1)
      g = -1;
    size_t used = strlen(err);
    if (st != 0 || g < 0 ||
        (i == 0 && strstr(out, "ids identical on all 4 ranks") == NULL)) {
      snprintf(err + used, n - used, "%srank process %d exited %d: %s",
               used ? "; " : "", i, st, out != NULL ? out : "(no output)");
      failed++;
    } else if (gen < 0) {
      gen = g;
    } else if (g != gen) {
      snprintf(err + used, n - used,
               "%srank process %d in generation %lld, "
               "not %lld",
               used ? "; " : "", i, g, (long long)gen);
      failed++;
    }
    free(out);
  }
  return failed > 0 ? -1 : gen;
}

unsigned test_seed(void) {
  const char *env = getenv("RDZV_TEST_SEED");
  unsigned seed = env != NULL && *env != '\0' ? (unsigned)strtoul(env, NULL, 10)
                                              : (unsigned)time(NULL);
  printf("seed %u\n", seed);
  fflush(stdout);
  srand(seed);
  return seed;
}
