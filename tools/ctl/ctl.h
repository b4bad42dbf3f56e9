/* rdzvctl's parts (tools/ctl), shared by its files: the run's options and
 * handle, the command table's entry, the exit statuses, and what each file
 * offers the others. main.c owns the command tables and dispatch and calls
 * the others; the command files call main.c's messages and args.c's
 * number parsers, never each other. */
#ifndef RDZV_TOOLS_CTL_CTL_H
#define RDZV_TOOLS_CTL_CTL_H

#include <stdint.h>
#include <time.h>

#include "rdzv/rdzv.h"

enum {
  EXIT_OK = 0,
  EXIT_FAILED = 1,
  EXIT_USAGE = 2,
  EXIT_DEADLINE = 3,
  EXIT_CONNECT = 4,
};

#define DEFAULT_TIMEOUT_S 30.0
#define DEFAULT_FANOUT 16

/* Everything one run needs: the parsed options and the open handle. */
struct ctl {
  const char *addr;
  const char *job;
  const char *secret_file; /* --secret-file, or NULL: $RDZV_SECRET_FILE */
  double timeout_s;
  struct timespec start;
  const char *cmd;
  unsigned set_flags;   /* RDZV_STORE_WRITE_ONCE from --write-once */
  const char *fanout;   /* --fanout (tree-position only) */
  const char *site_key; /* --site-key (job-secret only) */
  const char *out;      /* --out (job-secret, site-key) */
  rdzv_client_t *client;
};

struct command {
  const char *name;
  int min_args; /* after the command name */
  int max_args; /* -1: no limit */
  int (*run)(struct ctl *ctl, int argc, char **argv);
};

/* ---- main.c: usage, messages, exit codes, deadline, output ---- */
/* Prints "rdzvctl: MESSAGE" and the hint to run `rdzvctl help` on
 * stderr (printf format). */
void ctl_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* "rdzvctl: CMD WHAT: strerror (last_error)". */
void ctl_report(const struct ctl *ctl, const char *what, int err);
/* The exit status of a library status: 0 EXIT_OK, RDZV_EDEADLINE
 * EXIT_DEADLINE, -EINVAL EXIT_USAGE, a connection error EXIT_CONNECT,
 * else EXIT_FAILED. */
int ctl_exit_code(int err);
/* Reports a failed store call and returns its exit code. */
int ctl_fail(const struct ctl *ctl, const char *what, int err);
/* Seconds left of --timeout; never 0 or less, which would mean "one
 * attempt" to the library rather than "expired". */
double ctl_remaining(const struct ctl *ctl);
/* Writes data[0..len) and a newline to stdout. */
void ctl_put_line(const void *data, size_t len);

/* ---- args.c: the options, before the command and among its arguments ---- */
/* Parses a whole decimal int64; 0 or -1. */
int ctl_parse_i64(const char *s, int64_t *out);
/* Parses a whole decimal uint64 (no sign: strtoull would wrap "-1"). */
int ctl_parse_u64(const char *s, uint64_t *out);
/* Reads the options before the command. *cmd_idx receives the index of
 * the command word. */
int ctl_parse_globals(struct ctl *ctl, int argc, char **argv, int *cmd_idx,
                      const char **timeout);
/* Options after the command word, as getopt permutes them: --addr, --job
 * and --timeout anywhere among the command's arguments are taken out of
 * argv[0..*argc), as are --write-once (set and mset only), --fanout
 * (tree-position only), --site-key (job-secret only) and --out
 * (job-secret and site-key), and
 * "--" ends the options (it is removed; what follows is taken as it is,
 * even a value that begins with "--"). Any other "--NAME" is a usage
 * error, so a typo is never stored as a value. Returns 0 or EXIT_USAGE. */
int ctl_parse_trailing(struct ctl *ctl, int *argc, char **argv,
                       const char **timeout);
/* After every option is read: the timeout's value, then the environment
 * for what the options left unset. 0 or EXIT_USAGE. */
int ctl_finish_globals(struct ctl *ctl, const char *timeout);

/* ---- store.c: the commands over the store (a server needed) ---- */
/* Each command: argv[0..argc) its arguments (main.c checked their count
 * against its table entry), ctl->client open; returns the exit status,
 * having printed the result or the error. */
int cmd_set(struct ctl *ctl, int argc, char **argv);
int cmd_get(struct ctl *ctl, int argc, char **argv);
int cmd_wait(struct ctl *ctl, int argc, char **argv);
int cmd_add(struct ctl *ctl, int argc, char **argv);
int cmd_cas(struct ctl *ctl, int argc, char **argv);
int cmd_delete(struct ctl *ctl, int argc, char **argv);
int cmd_mget(struct ctl *ctl, int argc, char **argv);
/* mset: argv holds KEY VALUE pairs, --write-once anywhere. */
int cmd_mset(struct ctl *ctl, int argc, char **argv);
int cmd_append(struct ctl *ctl, int argc, char **argv);
int cmd_num_keys(struct ctl *ctl, int argc, char **argv);
int cmd_barrier(struct ctl *ctl, int argc, char **argv);
int cmd_gather(struct ctl *ctl, int argc, char **argv);
/* The root's view of a barrier or gather (asked through any node). */
int cmd_missing(struct ctl *ctl, int argc, char **argv);
/* Prints the JSON text exactly as the server sent it: scripts parse it. */
int cmd_stats(struct ctl *ctl, int argc, char **argv);
/* The job's rendezvous generations, as its root keeps them (ask the
 * root: a node keeps none). */
int cmd_rounds(struct ctl *ctl, int argc, char **argv);
int cmd_members(struct ctl *ctl, int argc, char **argv);
int cmd_quarantine(struct ctl *ctl, int argc, char **argv);
/* The port of a TCPStore key space, held by process PID when given (a
 * Slurm TaskProlog's task), else by this short-lived connection. */
int cmd_tcpstore_space(struct ctl *ctl, int argc, char **argv);

/* ---- hosts.c: Slurm host lists (no server) ---- */
/* As the store's commands, with no client. */
int cmd_hostnames(struct ctl *ctl, int argc, char **argv);
int cmd_tree_position(struct ctl *ctl, int argc, char **argv);

/* ---- secrets.c: per-job secrets (no server) ---- */
/* rdzvctl site-key --out FILE: 32 bytes of OpenSSL's CSPRNG
 * (rdzv_auth_nonce) as 64 lowercase hex digits and a newline, in a new
 * FILE of mode 0400. A site key opens every job's secret, and replacing
 * one changes them all: an existing FILE is refused (exit 1), never
 * overwritten. */
int cmd_site_key(struct ctl *ctl, int argc, char **argv);
/* rdzvctl job-secret --site-key FILE --job JOB [--out FILE]: JOB's
 * secret, rdzv_auth_job_secret(site key, JOB) (store/auth/auth.h: 64 hex
 * digits of HMAC-SHA256(site key, "rdzv-job-secret-v1" | u8 len(JOB) |
 * JOB), the site key being its file's bytes without trailing
 * whitespace), and a newline, to --out (atomically, mode 0400, the
 * caller's) or to stdout. */
int cmd_job_secret(struct ctl *ctl, int argc, char **argv);

#endif /* RDZV_TOOLS_CTL_CTL_H */
