/* Test helpers: start real rdzvd and rdzv-swarm processes, read their
 * output, stop them and check how they ended. */
#ifndef RDZV_TESTS_PROC_H
#define RDZV_TESTS_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A child process with its stdout on a pipe (out_fd, -1 if not kept). */
struct proc {
  pid_t pid;
  int out_fd;
};

/* Starts argv (NULL-terminated; argv[0] a path). stdout is piped to
 * p->out_fd if keep_stdout, else inherited. Returns 0 or -errno. */
int proc_start(struct proc *p, char *const argv[], int keep_stdout);
/* Reads the child's whole stdout (until EOF) into a malloc'd string. */
char *proc_read_all(struct proc *p);
/* Waits for exit; returns the exit status, 128+signal if killed. */
int proc_wait(struct proc *p);
/* SIGTERM then wait. */
int proc_stop(struct proc *p);

/* Waits (up to timeout_s) for a port file written by rdzvd; returns the
 * port or -1. */
int wait_port_file(const char *path, double timeout_s);
/* Number of open file descriptors of this process. */
int count_open_fds(void);

/* Reads one integer out of a stats JSON object by a dotted path such as
 * "ops.wait.received". Returns -1 if absent. */
int64_t stats_get(const char *json, const char *path);
/* Fetches stats from addr (job is any id) and returns the number at path,
 * or -1 on failure. */
int64_t stats_at(const char *addr, const char *path);

#endif
