/* Test helpers: see proc.h. */
#include "proc.h"

#include <dirent.h>
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

int proc_start(struct proc *p, char *const argv[], int keep_stdout) {
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (keep_stdout) {
    if (pipe2(fds, O_CLOEXEC) < 0)
      return -errno;
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  }
  int rc = posix_spawn(&p->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (keep_stdout)
    close(fds[1]);
  p->out_fd = fds[0];
  if (rc != 0) {
    if (fds[0] >= 0)
      close(fds[0]);
    p->out_fd = -1;
    return -rc;
  }
  return 0;
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
  struct rdzv_client_opts o;
  rdzv_client_opts_init(&o);
  o.addr = addr;
  o.job_id = "stats-reader";
  rdzv_client_t *c = NULL;
  char *json = NULL;
  int64_t v = -1;
  if (rdzv_client_create(&o, &c) == 0 &&
      rdzv_store_stats(c, &json, 10.0) == 0)
    v = stats_get(json, path);
  rdzv_free(json);
  rdzv_client_destroy(c);
  return v;
}
