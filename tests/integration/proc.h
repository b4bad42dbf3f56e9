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
/* As proc_start with stdout kept, and the child's stdin a pipe whose
 * write end is returned in *in_fd (the caller writes to it and closes
 * it). Returns 0 or -errno. */
int proc_start_stdin(struct proc *p, char *const argv[], int *in_fd);
/* Reads the child's stdout up to and including the next newline into
 * line (at most n-1 bytes kept, NUL-terminated), one byte at a time so
 * that nothing after the line is taken from proc_read_all. Returns the
 * bytes kept, or -1 at EOF or error before a newline. */
int proc_read_line(struct proc *p, char *line, size_t n);
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
/* As stats_at, connected as job (a root's "rounds" are those of the
 * asking job). */
int64_t stats_at_job(const char *addr, const char *job, const char *path);
/* The whole stats JSON of the daemon at addr, asked as job (free with
 * rdzv_free), or NULL when it cannot be read. */
char *stats_json_at_job(const char *addr, const char *job);

/* Polls the daemon at addr until its counter at path reaches at least
 * want (at most about 30 s); returns the last value read. */
int64_t stats_reach(const char *addr, const char *path, int64_t want);

/* Starts tools/rdzvd (a root when parent is NULL, else a node of parent)
 * named name, with its port file DIR/<name>.port and Unix socket
 * DIR/<name>.sock, listening on 127.0.0.1:0, log level 0 (or
 * $RDZV_TEST_LOG_LEVEL), then the
 * NULL-terminated extra options (which may override those: a later
 * option wins). Waits for its port file; tcp (64 bytes) gets
 * "127.0.0.1:PORT". Returns 0 or -1. */
int daemon_start(struct proc *p, const char *dir, const char *name,
                 const char *parent, const char *const *extra, char *tcp);
/* "unix:DIR/<name>.sock" into out (n bytes). */
void daemon_unix_addr(const char *dir, const char *name, char *out, size_t n);
/* Open file descriptors and resident memory (KiB) of process pid; -1 if
 * it cannot be read. */
int fds_of(pid_t pid);
long rss_kb(pid_t pid);
/* A TCP port on loopback that nothing listens on now (bound, then
 * closed), or -1. */
int free_port(void);
/* One launch of 4 rdzv-example ranks (tools/rdzv-example, a data
 * dependency; ids from /dev/urandom) of job: local ranks 0 and 1 of host
 * A through addrs[0], of host B through addrs[1]. Every rank must exit 0:
 * it got its rank and the same ids as every other rank and passed a
 * closing barrier; rank 0 must say the ids matched. Returns the
 * generation the ranks agreed on, or -1 with what failed in err (n
 * bytes). */
int64_t example_launch(const char *const addrs[2], const char *job, char *err,
                       size_t n);
/* A randomized test's seed: RDZV_TEST_SEED when set (a run replayed),
 * else the time; printed first ("seed N", which tools/test.sh shows for
 * a failed test) and given to srand. */
unsigned test_seed(void);
/* Removes the directory tree dir. Returns 0 or -1. */
int rm_rf(const char *dir);

#endif
