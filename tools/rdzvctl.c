/* rdzvctl: a command-line client of the rdzv store, for operators and
 * scripts. One process runs one command over the blocking API of
 * rdzv/store.h and maps the outcome to an exit status a shell can test
 * (see usage_text below, printed by `rdzvctl help`).
 *
 * Configuration is read in three steps: parse_globals() takes the options
 * before the command, parse_trailing() those among its arguments, and
 * finish_globals() RDZV_ADDR and RDZV_JOB for what they did not give.
 * The host-list and secret commands (local_commands[]) need no server and
 * stop after parse_trailing(). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "rdzv/rdzv.h"
#include "store/auth/auth.h"
#include "tools/hostlist.h"
#include "tools/rdzvctl_rounds.h"

enum {
  EXIT_OK = 0,
  EXIT_FAILED = 1,
  EXIT_USAGE = 2,
  EXIT_DEADLINE = 3,
  EXIT_CONNECT = 4,
};

#define DEFAULT_TIMEOUT_S 30.0
#define DEFAULT_FANOUT 16

static const char usage_text[] =
    "usage: rdzvctl [--addr ADDR] [--job JOB] [--timeout SECONDS]\n"
    "               [--secret-file FILE] COMMAND ARGS... [--] [ARGS...]\n"
    "\n"
    "Options (before or after the command; \"--\" ends them, so that a\n"
    "value may begin with \"--\"):\n"
    "  --addr ADDR        server: unix:/path, tcp:HOST:PORT or HOST:PORT\n"
    "                     (default: $RDZV_ADDR)\n"
    "  --job JOB          job id, the namespace of every key (default:\n"
    "                     $RDZV_JOB); required (but by stats), there is no\n"
    "                     default job\n"
    "  --timeout SECONDS  deadline for connecting and the command together,\n"
    "                     > 0 (default 30)\n"
    "  --secret-file FILE the job's secret, proved to the daemon (never\n"
    "                     sent; default: $RDZV_SECRET_FILE, else\n"
    "                     $RDZV_SECRET, else none)\n"
    "\n"
    "Commands:\n"
    "  set KEY VALUE [--write-once]   set KEY (write-once: immutable)\n"
    "  get KEY                        print the value, then a newline\n"
    "  wait KEY...                    wait until every KEY exists\n"
    "  add KEY DELTA                  add DELTA (int64), print the new value\n"
    "  cas KEY EXPECTED DESIRED       set KEY to DESIRED if it holds EXPECTED\n"
    "                                 (\"\" matches a missing key)\n"
    "  delete KEY                     delete KEY (fails if it does not exist)\n"
    "  mget KEY...                    print the values, one per line\n"
    "  mset KEY VALUE [KEY VALUE...] [--write-once]\n"
    "                                 set several keys at once\n"
    "  append KEY VALUE               append VALUE to KEY's value\n"
    "  num-keys                       print the number of keys in the job\n"
    "  barrier NAME MEMBER COUNT      wait until COUNT members reach NAME\n"
    "                                 (MEMBER: 0 .. COUNT-1)\n"
    "  gather NAME MEMBER COUNT DATA  contribute DATA; print every member's\n"
    "                                 contribution as MEMBER<TAB>DATA lines,\n"
    "                                 in member order\n"
    "  missing barrier|gather NAME    who has not reached NAME yet: prints\n"
    "                                 \"ARRIVED COUNT\", then the first 4096\n"
    "                                 missing member ids, one per line\n"
    "                                 (COUNT 0: nobody reached NAME yet)\n"
    "  stats                          print the server's statistics (one JSON\n"
    "                                 object, as received)\n"
    "  rounds [ROUND]                 the job's rendezvous generations as its\n"
    "                                 root keeps them (--addr: the root): when\n"
    "                                 each opened, ranks and hosts joined over\n"
    "                                 time, the last 10 to join, what is\n"
    "                                 missing, how earlier ones ended\n"
    "  tcpstore-space PREFIX [PID]    open (or join) a PyTorch TCPStore key\n"
    "                                 space of the job at the daemon: a\n"
    "                                 listener on 127.0.0.1 whose keys live\n"
    "                                 under PREFIX; print its port. It stays\n"
    "                                 open while process PID (this host's;\n"
    "                                 over unix: only) lives, without PID\n"
    "                                 while this command runs: about 1 s\n"
    "  help                           print this text\n"
    "  version, --version             print the release (as rdzvd --version)\n"
    "\n"
    "Slurm host lists (no server: --addr and --job are not needed):\n"
    "  hostnames LIST                 print LIST's hosts, one per line, as\n"
    "                                 `scontrol show hostnames LIST` does\n"
    "  tree-position [--fanout F] LIST HOST\n"
    "                                 print HOST's 0-based index i in LIST\n"
    "                                 (first occurrence), then its ancestors'\n"
    "                                 names, nearest first, on one line: host\n"
    "                                 i hangs off host (i-1)/F, up to host 0\n"
    "                                 (F >= 1, default 16)\n"
    "\n"
    "Per-job secrets (no server: --addr is not needed):\n"
    "  site-key --out FILE            make a new site key: 32 random bytes as\n"
    "                                 64 hex digits, FILE created with mode\n"
    "                                 0400; an existing FILE is never\n"
    "                                 overwritten. Copy it to every host, as\n"
    "                                 munge's key is\n"
    "  job-secret --site-key FILE --job JOB [--out FILE]\n"
    "                                 JOB's secret, derived from the site key\n"
    "                                 (the same on every host, without\n"
    "                                 talking): 64 hex digits. --out writes it\n"
    "                                 atomically (a new file renamed over\n"
    "                                 FILE), mode 0400, owned by the caller.\n"
    "                                 Without --out it goes to stdout, which\n"
    "                                 is for piping into a file or a command,\n"
    "                                 never for a log or a terminal's\n"
    "                                 scrollback. The site key must be a\n"
    "                                 regular file of the caller (or root)\n"
    "                                 that no one else may read (mode 0400\n"
    "                                 or 0600)\n"
    "\n"
    "Exit status:\n"
    "  0  success\n"
    "  1  the operation failed (key not found, compare-and-set mismatch,\n"
    "     write-once conflict, not a number, HOST not in LIST, ...); message\n"
    "     on stderr\n"
    "  2  usage error (unknown command, wrong arguments, no job id, a\n"
    "     malformed host list: stderr names its byte offset, from 0)\n"
    "  3  deadline passed; stderr names what was missing\n"
    "  4  could not connect, hello refused, or connection lost\n";

/* Everything one run needs: the parsed options and the open handle. */
struct ctl {
  const char *addr;
  const char *job;
  const char *secret_file; /* --secret-file, or NULL: $RDZV_SECRET_FILE */
  double timeout_s;
  struct timespec start;
  const char *cmd;
  unsigned set_flags; /* RDZV_STORE_WRITE_ONCE from --write-once */
  const char *fanout; /* --fanout (tree-position only) */
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

/* ---- Messages and exit codes ------------------------------------------ */

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* "rdzvctl: MESSAGE" and a pointer to the help, for exit status 2. */
static void usage_error(const char *fmt, ...) {
  va_list ap;

  fputs("rdzvctl: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nrdzvctl: try 'rdzvctl help'\n", stderr);
}

/* "rdzvctl: CMD WHAT: strerror (last_error)". */
static void report(const struct ctl *ctl, const char *what, int err) {
  const char *detail = "";

  if (ctl->client != NULL)
    detail = rdzv_client_last_error(ctl->client);
  fprintf(stderr, "rdzvctl: %s%s%s: %s [%s]", ctl->cmd,
          what[0] != '\0' ? " " : "", what, rdzv_strerror(err),
          rdzv_err_name(err));
  if (detail[0] != '\0')
    fprintf(stderr, " (%s)", detail);
  fputc('\n', stderr);
}

/* Statuses meaning "no usable connection to the server". */
static int is_connection_error(int err) {
  switch (err) {
  case RDZV_ECONN_CLOSED:
  case RDZV_ENOTCONN:
  case RDZV_EHELLO:
  case RDZV_EPROTO_VERSION:
  case RDZV_EJOB_MISMATCH:
  case RDZV_ETOO_MANY_CONNECTIONS:
  case -ECONNREFUSED:
  case -ECONNRESET:
  case -ECONNABORTED:
  case -EPIPE:
  case -ENOENT:
  case -EHOSTUNREACH:
  case -ENETUNREACH:
  case -ETIMEDOUT:
    return 1;
  default:
    return 0;
  }
}

static int exit_code(int err) {
  if (err == 0)
    return EXIT_OK;
  if (err == RDZV_EDEADLINE)
    return EXIT_DEADLINE;
  /* The library's "NULL or empty argument": an empty KEY or NAME. */
  if (err == -EINVAL)
    return EXIT_USAGE;
  if (is_connection_error(err))
    return EXIT_CONNECT;
  return EXIT_FAILED;
}

/* Reports a failed store call and returns its exit code. */
static int fail(const struct ctl *ctl, const char *what, int err) {
  report(ctl, what, err);
  return exit_code(err);
}

/* ---- Argument parsing ------------------------------------------------- */

/* Parses a whole decimal int64; 0 or -1. */
static int parse_i64(const char *s, int64_t *out) {
  char *end = NULL;
  long long v;

  errno = 0;
  v = strtoll(s, &end, 10);
  if (s[0] == '\0' || end == s || *end != '\0' || errno != 0)
    return -1;
  *out = (int64_t)v;
  return 0;
}

/* Parses a whole decimal uint64 (no sign: strtoull would wrap "-1"). */
static int parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  unsigned long long v;

  if (s[0] < '0' || s[0] > '9')
    return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0)
    return -1;
  *out = (uint64_t)v;
  return 0;
}

/* Parses a positive, finite number of seconds; 0 or -1. */
static int parse_seconds(const char *s, double *out) {
  char *end = NULL;
  double v;

  errno = 0;
  v = strtod(s, &end);
  if (s[0] == '\0' || end == s || *end != '\0' || errno != 0 || !isfinite(v) ||
      v <= 0)
    return -1;
  *out = v;
  return 0;
}

/* If argv[*i] is --NAME VALUE or --NAME=VALUE, stores VALUE in *val,
 * advances *i past it and returns 1; 0 if it is another option; -1 if the
 * value is missing. */
static int take_opt(int argc, char **argv, int *i, const char *name,
                    const char **val) {
  const char *a = argv[*i] + 2;
  size_t n = strlen(name);

  if (strncmp(a, name, n) != 0)
    return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    *i += 1;
    return 1;
  }
  if (a[n] != '\0')
    return 0;
  if (*i + 1 >= argc)
    return -1;
  *val = argv[*i + 1];
  *i += 2;
  return 1;
}

/* One global option at argv[*i]; 0 or EXIT_USAGE. */
static int parse_one_global(struct ctl *ctl, int argc, char **argv, int *i,
                            const char **timeout) {
  static const char *const names[] = {"addr", "job", "timeout",
                                      "secret-file"};
  const char **dest[] = {&ctl->addr, &ctl->job, timeout, &ctl->secret_file};
  size_t k;
  int r;

  for (k = 0; k < sizeof names / sizeof names[0]; k++) {
    r = take_opt(argc, argv, i, names[k], dest[k]);
    if (r < 0) {
      usage_error("option --%s needs a value", names[k]);
      return EXIT_USAGE;
    }
    if (r > 0)
      return 0;
  }
  usage_error("unknown option '%s'", argv[*i]);
  return EXIT_USAGE;
}

/* Reads the options before the command. *cmd_idx receives the index of
 * the command word. */
static int parse_globals(struct ctl *ctl, int argc, char **argv, int *cmd_idx,
                         const char **timeout) {
  int i = 1;
  int err;

  while (i < argc && strncmp(argv[i], "--", 2) == 0) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (strcmp(argv[i], "--help") == 0)
      break;
    err = parse_one_global(ctl, argc, argv, &i, timeout);
    if (err != 0)
      return err;
  }
  *cmd_idx = i;
  return 0;
}

/* --site-key FILE (job-secret) and --out FILE (job-secret, site-key) at
 * argv[*i]: 1 taken (*i advanced), 0 not one of them, -1 usage error
 * (reported). */
static int take_secret_opt(struct ctl *ctl, int argc, char **argv, int *i) {
  int is_job = strcmp(ctl->cmd, "job-secret") == 0;
  int r;

  if (!is_job && strcmp(ctl->cmd, "site-key") != 0)
    return 0;
  if (is_job) {
    r = take_opt(argc, argv, i, "site-key", &ctl->site_key);
    if (r != 0) {
      if (r < 0)
        usage_error("option --site-key needs a value");
      return r;
    }
  }
  r = take_opt(argc, argv, i, "out", &ctl->out);
  if (r < 0)
    usage_error("option --out needs a value");
  return r;
}

/* Options after the command word, as getopt permutes them: --addr, --job
 * and --timeout anywhere among the command's arguments are taken out of
 * argv[0..*argc), as are --write-once (set and mset only), --fanout
 * (tree-position only), --site-key (job-secret only) and --out
 * (job-secret and site-key), and
 * "--" ends the options (it is removed; what follows is taken as it is,
 * even a value that begins with "--"). Any other "--NAME" is a usage
 * error, so a typo is never stored as a value. Returns 0 or EXIT_USAGE. */
static int parse_trailing(struct ctl *ctl, int *argc, char **argv,
                          const char **timeout) {
  int i = 0;
  int j = 0;
  int err;

  while (i < *argc) {
    if (strcmp(argv[i], "--") == 0) {
      for (i++; i < *argc; i++)
        argv[j++] = argv[i];
      break;
    }
    if (strncmp(argv[i], "--", 2) != 0) {
      argv[j++] = argv[i++];
      continue;
    }
    if (strcmp(argv[i], "--write-once") == 0) {
      if (strcmp(ctl->cmd, "set") != 0 && strcmp(ctl->cmd, "mset") != 0) {
        usage_error("--write-once is an option of set and mset only");
        return EXIT_USAGE;
      }
      ctl->set_flags = RDZV_STORE_WRITE_ONCE;
      i++;
      continue;
    }
    if (strcmp(ctl->cmd, "tree-position") == 0) {
      err = take_opt(*argc, argv, &i, "fanout", &ctl->fanout);
      if (err < 0) {
        usage_error("option --fanout needs a value");
        return EXIT_USAGE;
      }
      if (err > 0)
        continue;
    }
    err = take_secret_opt(ctl, *argc, argv, &i);
    if (err < 0)
      return EXIT_USAGE;
    if (err > 0)
      continue;
    if (strcmp(argv[i], "--help") == 0) {
      usage_error("--help after the command: run 'rdzvctl help'");
      return EXIT_USAGE;
    }
    err = parse_one_global(ctl, *argc, argv, &i, timeout);
    if (err != 0) {
      fprintf(stderr, "rdzvctl: (put -- before an argument that begins "
                      "with --)\n");
      return err;
    }
  }
  *argc = j;
  return 0;
}

/* After every option is read: the timeout's value, then the environment
 * for what the options left unset. 0 or EXIT_USAGE. */
static int finish_globals(struct ctl *ctl, const char *timeout) {
  ctl->timeout_s = DEFAULT_TIMEOUT_S;
  if (timeout != NULL && parse_seconds(timeout, &ctl->timeout_s) < 0) {
    usage_error("--timeout '%s' is not a positive number of seconds", timeout);
    return EXIT_USAGE;
  }
  if (ctl->addr == NULL)
    ctl->addr = getenv("RDZV_ADDR");
  if (ctl->job == NULL)
    ctl->job = getenv("RDZV_JOB");
  return 0;
}

/* ---- Deadline and connection ------------------------------------------ */

/* Seconds left of --timeout; never 0 or less, which would mean "one
 * attempt" to the library rather than "expired". */
static double remaining(const struct ctl *ctl) {
  struct timespec now;
  double used;

  clock_gettime(CLOCK_MONOTONIC, &now);
  used = (double)(now.tv_sec - ctl->start.tv_sec) +
         (double)(now.tv_nsec - ctl->start.tv_nsec) / 1e9;
  if (ctl->timeout_s - used < 0.001)
    return 0.001;
  return ctl->timeout_s - used;
}

/* Why the library refused an address (it has no handle to say so). */
static const char *addr_hint(const char *addr) {
  static char buf[160];
  struct sockaddr_un sa;

  if (strncmp(addr, "unix:", 5) == 0) {
    size_t n = strlen(addr + 5);
    if (n == 0 || strcmp(addr + 5, "@") == 0)
      return "no socket path after unix:";
    if (n >= sizeof sa.sun_path) {
      snprintf(buf, sizeof buf,
               "the socket path is %zu bytes; a Unix socket path holds at "
               "most %zu bytes",
               n, sizeof sa.sun_path - 1);
      return buf;
    }
  }
  return "expected unix:/path, tcp:HOST:PORT or HOST:PORT with a port in "
         "1..65535 (an IPv6 host in brackets)";
}

/* How long a Unix socket path that does not exist is waited for: a daemon
 * being started makes it within that; a mistyped path fails fast. */
#define SOCKET_APPEAR_MS 2000

/* --addr unix:PATH with no PATH: waits up to SOCKET_APPEAR_MS (or the
 * command's deadline, if sooner) for it to appear, then fails with exit 4
 * naming it, rather than retrying until the deadline (30 s by default);
 * a path that is there but is no socket fails at once. */
static int wait_for_socket(struct ctl *ctl) {
  if (strncmp(ctl->addr, "unix:", 5) != 0)
    return EXIT_OK;
  const char *path = ctl->addr + 5;
  struct stat st;
  double waited = 0, limit = SOCKET_APPEAR_MS / 1000.0;
  double left = remaining(ctl);
  if (left < limit)
    limit = left;
  while (stat(path, &st) < 0 && errno == ENOENT) {
    if (waited >= limit) {
      fprintf(stderr,
              "rdzvctl: could not connect to %s: no such socket (nothing "
              "appeared there within %.1f s: check --addr or RDZV_ADDR, and "
              "that rdzvd runs with --unix %s)\n",
              ctl->addr, limit, path);
      return EXIT_CONNECT;
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    waited += 0.05;
  }
  if (stat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
    fprintf(stderr,
            "rdzvctl: could not connect to %s: not a socket (%s is a %s: "
            "check --addr or RDZV_ADDR)\n",
            ctl->addr, path, S_ISDIR(st.st_mode) ? "directory" : "file");
    return EXIT_CONNECT;
  }
  return EXIT_OK;
}

/* Creates the handle and connects, so that "could not connect" (exit 4)
 * stays apart from "connected, but the command's deadline passed"
 * (exit 3). */
static int open_client(struct ctl *ctl) {
  struct rdzv_client_opts opts;
  int err;

  rdzv_client_opts_init(&opts);
  opts.addr = ctl->addr;
  opts.job_id = ctl->job;
  opts.secret_file = ctl->secret_file;
  err = rdzv_client_create(&opts, &ctl->client);
  if (err == RDZV_EBAD_ADDR) {
    fprintf(stderr, "rdzvctl: --addr '%s': %s (%s)\n", ctl->addr,
            rdzv_strerror(err), addr_hint(ctl->addr));
    return EXIT_USAGE;
  }
  if (err == RDZV_EJOB_ID_MISSING) {
    fprintf(stderr, "rdzvctl: --job '%s': %s\n", ctl->job, rdzv_strerror(err));
    return EXIT_USAGE;
  }
  if (err < 0) {
    report(ctl, "", err);
    return EXIT_FAILED;
  }
  err = wait_for_socket(ctl); /* the address is valid: created */
  if (err != EXIT_OK)
    return err;
  err = rdzv_client_connect(ctl->client, remaining(ctl));
  if (err < 0) {
    fprintf(stderr, "rdzvctl: could not connect to %s: %s [%s] (%s)\n",
            ctl->addr, rdzv_strerror(err), rdzv_err_name(err),
            rdzv_client_last_error(ctl->client));
    return EXIT_CONNECT;
  }
  return EXIT_OK;
}

/* ---- Output ----------------------------------------------------------- */

/* Writes data[0..len) and a newline to stdout. */
static void put_line(const void *data, size_t len) {
  if (len > 0)
    fwrite(data, 1, len, stdout);
  fputc('\n', stdout);
}

/* ---- Commands --------------------------------------------------------- */

static int cmd_set(struct ctl *ctl, int argc, char **argv) {
  unsigned flags = ctl->set_flags;
  int err;

  err = rdzv_store_set(ctl->client, argv[0], argv[1], strlen(argv[1]), flags,
                       remaining(ctl));
  return err < 0 ? fail(ctl, argv[0], err) : EXIT_OK;
}

static int cmd_get(struct ctl *ctl, int argc, char **argv) {
  void *val = NULL;
  size_t len = 0;
  int err;

  err = rdzv_store_get(ctl->client, argv[0], &val, &len, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[0], err);
  put_line(val, len);
  rdzv_free(val);
  return EXIT_OK;
}

static int cmd_wait(struct ctl *ctl, int argc, char **argv) {
  int err;

  err = rdzv_store_wait(ctl->client, (const char *const *)argv, (size_t)argc,
                        remaining(ctl));
  return err < 0 ? fail(ctl, argc == 1 ? argv[0] : "", err) : EXIT_OK;
}

static int cmd_add(struct ctl *ctl, int argc, char **argv) {
  int64_t delta;
  int64_t val = 0;
  int err;

  if (parse_i64(argv[1], &delta) < 0) {
    usage_error("add: DELTA '%s' is not a decimal int64", argv[1]);
    return EXIT_USAGE;
  }
  err = rdzv_store_add(ctl->client, argv[0], delta, &val, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[0], err);
  printf("%" PRId64 "\n", val);
  return EXIT_OK;
}

static int cmd_cas(struct ctl *ctl, int argc, char **argv) {
  void *cur = NULL;
  size_t cur_len = 0;
  int err;

  err = rdzv_store_cas(ctl->client, argv[0], argv[1], strlen(argv[1]), argv[2],
                       strlen(argv[2]), &cur, &cur_len, remaining(ctl));
  if (err == RDZV_ECAS_FAILED)
    fprintf(stderr, "rdzvctl: cas %s: %s: current value is '%.*s'\n", argv[0],
            rdzv_strerror(err), (int)cur_len,
            cur != NULL ? (const char *)cur : "");
  else if (err < 0)
    report(ctl, argv[0], err);
  rdzv_free(cur);
  return exit_code(err);
}

static int cmd_delete(struct ctl *ctl, int argc, char **argv) {
  int deleted = 0;
  int err;

  err = rdzv_store_delete(ctl->client, argv[0], &deleted, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[0], err);
  if (!deleted) {
    fprintf(stderr, "rdzvctl: delete %s: %s\n", argv[0],
            rdzv_strerror(RDZV_ENOKEY));
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

static int cmd_mget(struct ctl *ctl, int argc, char **argv) {
  struct rdzv_value *vals = NULL;
  size_t i;
  int err;

  err = rdzv_store_mget(ctl->client, (const char *const *)argv, (size_t)argc,
                        &vals, remaining(ctl));
  if (err < 0)
    return fail(ctl, "", err);
  for (i = 0; i < (size_t)argc; i++)
    put_line(vals[i].data, vals[i].len);
  rdzv_values_free(vals, (size_t)argc);
  return EXIT_OK;
}

/* mset: argv holds KEY VALUE pairs, --write-once anywhere. */
static int cmd_mset(struct ctl *ctl, int argc, char **argv) {
  unsigned flags = ctl->set_flags;
  size_t n = (size_t)argc / 2;
  const char **keys;
  struct rdzv_value *vals;
  size_t i;
  int err;

  if (argc == 0 || argc % 2 != 0) {
    usage_error("usage: mset KEY VALUE [KEY VALUE...] [--write-once]");
    return EXIT_USAGE;
  }
  keys = calloc(n, sizeof *keys);
  vals = calloc(n, sizeof *vals);
  err = keys == NULL || vals == NULL ? RDZV_ENOMEM : 0;
  for (i = 0; err == 0 && i < n; i++) {
    keys[i] = argv[2 * i];
    vals[i].data = argv[2 * i + 1];
    vals[i].len = strlen(argv[2 * i + 1]);
  }
  if (err == 0)
    err = rdzv_store_mset(ctl->client, keys, vals, n, flags, remaining(ctl));
  free(keys);
  free(vals);
  return err < 0 ? fail(ctl, "", err) : EXIT_OK;
}

static int cmd_append(struct ctl *ctl, int argc, char **argv) {
  int err;

  err = rdzv_store_append(ctl->client, argv[0], argv[1], strlen(argv[1]),
                          remaining(ctl));
  return err < 0 ? fail(ctl, argv[0], err) : EXIT_OK;
}

static int cmd_num_keys(struct ctl *ctl, int argc, char **argv) {
  int64_t n = 0;
  int err;

  err = rdzv_store_num_keys(ctl->client, &n, remaining(ctl));
  if (err < 0)
    return fail(ctl, "", err);
  printf("%" PRId64 "\n", n);
  return EXIT_OK;
}

/* MEMBER and COUNT of barrier and gather: COUNT >= 1, MEMBER < COUNT. */
static int parse_member_count(const char *cmd, char **argv, uint64_t *member,
                              uint64_t *count) {
  if (parse_u64(argv[1], member) < 0) {
    usage_error("%s: MEMBER '%s' is not a decimal uint64", cmd, argv[1]);
    return EXIT_USAGE;
  }
  if (parse_u64(argv[2], count) < 0 || *count == 0 ||
      *count > (uint64_t)INT64_MAX) {
    usage_error("%s: COUNT '%s' is not a positive decimal int64", cmd,
                argv[2]);
    return EXIT_USAGE;
  }
  if (*member >= *count) {
    usage_error("%s: MEMBER must be < COUNT (members are 0 .. %" PRIu64
                "; got MEMBER %" PRIu64 ")",
                cmd, *count - 1, *member);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

static int cmd_barrier(struct ctl *ctl, int argc, char **argv) {
  uint64_t member;
  uint64_t count;
  int err;

  err = parse_member_count(ctl->cmd, argv, &member, &count);
  if (err != EXIT_OK)
    return err;
  err = rdzv_store_barrier(ctl->client, argv[0], member, count, remaining(ctl));
  return err < 0 ? fail(ctl, argv[0], err) : EXIT_OK;
}

static int cmd_gather(struct ctl *ctl, int argc, char **argv) {
  struct rdzv_value *out = NULL;
  uint64_t member;
  uint64_t count;
  uint64_t i;
  int err;

  err = parse_member_count(ctl->cmd, argv, &member, &count);
  if (err != EXIT_OK)
    return err;
  err = rdzv_store_gather(ctl->client, argv[0], member, count, argv[3],
                          strlen(argv[3]), &out, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[0], err);
  for (i = 0; i < count; i++) {
    printf("%" PRIu64 "\t", out[i].member);
    put_line(out[i].data, out[i].len);
  }
  rdzv_values_free(out, (size_t)count);
  return EXIT_OK;
}

/* The root's view of a barrier or gather (asked through any node). */
static int cmd_missing(struct ctl *ctl, int argc, char **argv) {
  static uint64_t ids[RDZV_STORE_MISSING_MAX];
  uint64_t arrived = 0, count = 0;
  size_t n = 0, i;
  int gather, err;

  if (strcmp(argv[0], "barrier") != 0 && strcmp(argv[0], "gather") != 0) {
    usage_error("missing: '%s' is not 'barrier' or 'gather'", argv[0]);
    return EXIT_USAGE;
  }
  gather = argv[0][0] == 'g';
  err = rdzv_store_collective_missing(ctl->client, argv[1], gather, ids,
                                      RDZV_STORE_MISSING_MAX, &n, &arrived,
                                      &count, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[1], err);
  printf("%" PRIu64 " %" PRIu64 "\n", arrived, count);
  for (i = 0; i < n; i++)
    printf("%" PRIu64 "\n", ids[i]);
  return EXIT_OK;
}

/* Prints the JSON text exactly as the server sent it: scripts parse it. */
static int cmd_stats(struct ctl *ctl, int argc, char **argv) {
  char *json = NULL;
  int err;

  err = rdzv_store_stats(ctl->client, &json, remaining(ctl));
  if (err < 0)
    return fail(ctl, "", err);
  put_line(json, strlen(json));
  rdzv_free(json);
  return EXIT_OK;
}

/* The job's rendezvous generations, as its root keeps them (ask the
 * root: a node keeps none). */
static int cmd_rounds(struct ctl *ctl, int argc, char **argv) {
  char *json = NULL, why[300];
  int err = rdzv_store_stats(ctl->client, &json, remaining(ctl));
  if (err < 0)
    return fail(ctl, "", err);
  int rc = rdzvctl_print_rounds(json, ctl->job, argc > 0 ? argv[0] : NULL,
                                stdout, why, sizeof(why));
  rdzv_free(json);
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: rounds: %s\n", why);
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* The port of a TCPStore key space, held by process PID when given (a
 * Slurm TaskProlog's task), else by this short-lived connection. */
static int cmd_tcpstore_space(struct ctl *ctl, int argc, char **argv) {
  int64_t pid = 0;
  int32_t port = 0;
  int err;

  if (argc == 2 && (parse_i64(argv[1], &pid) < 0 || pid < 1 ||
                    pid > INT32_MAX)) {
    usage_error("tcpstore-space: PID '%s' is not a process id", argv[1]);
    return EXIT_USAGE;
  }
  err = rdzv_store_tcpstore_space_held(ctl->client, argv[0], (int32_t)pid,
                                       &port, remaining(ctl));
  if (err < 0)
    return fail(ctl, argv[0], err);
  printf("%d\n", (int)port);
  return EXIT_OK;
}

static const struct command commands[] = {
    {"set", 2, 2, cmd_set},        {"get", 1, 1, cmd_get},
    {"wait", 1, 65536, cmd_wait},   {"add", 2, 2, cmd_add},
    {"cas", 3, 3, cmd_cas},         {"delete", 1, 1, cmd_delete},
    {"mget", 1, -1, cmd_mget},      {"mset", 2, -1, cmd_mset},
    {"append", 2, 2, cmd_append},   {"num-keys", 0, 0, cmd_num_keys},
    {"barrier", 3, 3, cmd_barrier}, {"gather", 4, 4, cmd_gather},
    {"missing", 2, 2, cmd_missing}, {"stats", 0, 0, cmd_stats},
    {"rounds", 0, 1, cmd_rounds},
    {"tcpstore-space", 1, 2, cmd_tcpstore_space},
};

/* ---- Host lists (no server) ------------------------------------------- */

/* Writes s[from..to) to f, with bytes that would break the line as \xNN. */
static void put_escaped(FILE *f, const char *s, size_t from, size_t to) {
  size_t i;

  for (i = from; i < to; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f)
      fprintf(f, "\\x%02x", c);
    else
      fputc(c, f);
  }
}

/* Shows the list around byte pos, marked with <HERE>. */
static void put_excerpt(FILE *f, const char *s, size_t len, size_t pos) {
  const size_t ctx = 40;
  size_t from = pos > ctx ? pos - ctx : 0;
  size_t to = len - pos > ctx ? pos + ctx : len;

  fputs(from > 0 ? "..." : "", f);
  put_escaped(f, s, from, pos);
  fputs("<HERE>", f);
  put_escaped(f, s, pos, to);
  fputs(to < len ? "..." : "", f);
}

/* A malformed list (exit 2) or another failure of the codec (exit 1). */
static int list_failed(const struct ctl *ctl, const char *list, int err,
                       const struct rdzv_hostlist_error *e) {
  size_t len = strlen(list);

  if (err == -E2BIG) {
    fprintf(stderr,
            "rdzvctl: %s: host list has more than %zu hosts (the limit "
            "passed at byte %zu)\n",
            ctl->cmd, (size_t)RDZV_HOSTLIST_MAX_HOSTS, e->pos);
    return EXIT_USAGE;
  }
  if (err == RDZV_EBAD_ADDR || err == -ENAMETOOLONG) {
    fprintf(stderr, "rdzvctl: %s: bad host list at byte %zu: %s: ", ctl->cmd,
            e->pos, e->reason);
    put_excerpt(stderr, list, len, e->pos < len ? e->pos : len);
    fputc('\n', stderr);
    return EXIT_USAGE;
  }
  fprintf(stderr, "rdzvctl: %s: %s [%s]\n", ctl->cmd, rdzv_strerror(err),
          rdzv_err_name(err));
  return EXIT_FAILED;
}

static int print_host(const char *name, size_t len, void *arg) {
  FILE *f = arg;

  fwrite(name, 1, len, f);
  fputc('\n', f);
  return ferror(f) ? -EIO : 0;
}

static int cmd_hostnames(struct ctl *ctl, int argc, char **argv) {
  struct rdzv_hostlist_error e = {0, ""};
  int err;

  err = rdzv_hostlist_expand(argv[0], strlen(argv[0]), RDZV_HOSTLIST_MAX_HOSTS,
                             print_host, stdout, &e);
  return err < 0 ? list_failed(ctl, argv[0], err, &e) : EXIT_OK;
}

/* The ancestors' names (NUL-separated, nearest first) after the index. */
static void print_position(const struct rdzv_hostlist_pos *pos,
                           const char *names) {
  size_t i, at = 0;

  printf("%zu", pos->index);
  for (i = 0; i < pos->nancestors; i++) {
    printf(" %s", names + at);
    at += strlen(names + at) + 1;
  }
  putchar('\n');
}

/* HOST is not in LIST: names both, the list cut after 200 bytes. */
static int not_in_list(const char *host, const char *list) {
  size_t len = strlen(list);

  fputs("rdzvctl: tree-position: host '", stderr);
  put_escaped(stderr, host, 0, strlen(host));
  fputs("' is not in the host list '", stderr);
  put_escaped(stderr, list, 0, len > 200 ? 200 : len);
  if (len > 200)
    fprintf(stderr, "...' (%zu bytes)\n", len);
  else
    fputs("'\n", stderr);
  return EXIT_FAILED;
}

static int cmd_tree_position(struct ctl *ctl, int argc, char **argv) {
  static char buf[65536];
  struct rdzv_hostlist_error e = {0, ""};
  struct rdzv_hostlist_pos pos;
  uint64_t fanout = DEFAULT_FANOUT;
  size_t len = strlen(argv[0]);
  char *names = buf;
  int err;

  if (ctl->fanout != NULL && (parse_u64(ctl->fanout, &fanout) < 0 ||
                              fanout == 0 || fanout > SIZE_MAX)) {
    usage_error("tree-position: --fanout '%s' is not a positive integer",
                ctl->fanout);
    return EXIT_USAGE;
  }
  err = rdzv_hostlist_tree_position(argv[0], len, RDZV_HOSTLIST_MAX_HOSTS,
                                    argv[1], (size_t)fanout, buf, sizeof buf,
                                    &pos, &e);
  if (err == -ENOBUFS) {
    /* A long chain (small fan-out): take the size it asked for. */
    names = malloc(pos.names_len);
    err = names == NULL ? RDZV_ENOMEM
                        : rdzv_hostlist_tree_position(
                              argv[0], len, RDZV_HOSTLIST_MAX_HOSTS, argv[1],
                              (size_t)fanout, names, pos.names_len, &pos, &e);
  }
  if (err == 0)
    print_position(&pos, names);
  if (names != buf)
    free(names);
  if (err == RDZV_ETOPOLOGY)
    return not_in_list(argv[1], argv[0]);
  return err < 0 ? list_failed(ctl, argv[0], err, &e) : EXIT_OK;
}

/* ---- Per-job secrets (no server) -------------------------------------- */

/* Writes all len bytes to fd (again after EINTR or a short write). 0 or
 * -errno. */
static int write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, p + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    done += (size_t)w;
  }
  return 0;
}

/* Writes len bytes of data to path atomically, as a file of the caller
 * with the given mode: a new file beside it (path.tmp.XXXXXX, made with
 * mode 0600 by mkstemp, then chmod'ed to mode), written and fsync'ed,
 * then renamed over path (replace: a reader sees the old file or the
 * whole new one, never a part) or hard-linked to it (!replace: fails with
 * -EEXIST where path exists, even one made meanwhile), and the directory
 * fsync'ed. Returns 0 or a negative errno, with err (errlen bytes) saying
 * what failed, naming path (never the data). Nothing is left behind on
 * failure but an old path. */
static int write_file_atomic(const char *path, const void *data, size_t len,
                             mode_t mode, int replace, char *err,
                             size_t errlen) {
  char tmp[PATH_MAX], dirbuf[PATH_MAX];
  const char *step = "creating a temporary file beside it";
  int fd, dfd, rc = 0;
  char *slash;

  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp) {
    snprintf(err, errlen, "%s: %s", path, strerror(ENAMETOOLONG));
    return -ENAMETOOLONG;
  }
  fd = mkstemp(tmp);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "%s: %s: %s", path, step, strerror(-rc));
    return rc;
  }
  step = "setting its mode";
  if (fchmod(fd, mode) < 0)
    rc = -errno;
  if (rc == 0 && (rc = write_all(fd, data, len)) < 0)
    step = "writing it";
  if (rc == 0 && fsync(fd) < 0) {
    rc = -errno;
    step = "syncing it";
  }
  if (close(fd) < 0 && rc == 0) {
    rc = -errno;
    step = "closing it";
  }
  if (rc == 0 && replace && rename(tmp, path) < 0) {
    rc = -errno;
    step = "renaming it into place";
  }
  if (rc == 0 && !replace && link(tmp, path) < 0) {
    rc = -errno;
    step = "linking it into place";
  }
  if (rc < 0 || !replace)
    unlink(tmp);
  if (rc < 0) {
    if (rc == -EEXIST)
      snprintf(err, errlen, "%s exists", path);
    else
      snprintf(err, errlen, "%s: %s: %s", path, step, strerror(-rc));
    return rc;
  }
  /* The new name itself survives a crash. */
  snprintf(dirbuf, sizeof dirbuf, "%s", path);
  slash = strrchr(dirbuf, '/');
  if (slash == dirbuf)
    slash[1] = '\0';
  else if (slash != NULL)
    *slash = '\0';
  else
    snprintf(dirbuf, sizeof dirbuf, ".");
  dfd = open(dirbuf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}


/* rdzvctl site-key --out FILE: 32 bytes of OpenSSL's CSPRNG
 * (rdzv_auth_nonce) as 64 lowercase hex digits and a newline, in a new
 * FILE of mode 0400. A site key opens every job's secret, and replacing
 * one changes them all: an existing FILE is refused (exit 1), never
 * overwritten. */
static int cmd_site_key(struct ctl *ctl, int argc, char **argv) {
  uint8_t key[32];
  char text[2 * sizeof key + 1];
  char err[PATH_MAX + 128];
  int rc;

  (void)argc;
  (void)argv;
  if (ctl->out == NULL || ctl->out[0] == '\0') {
    usage_error("site-key: --out FILE is required (a site key never goes "
                "to stdout)");
    return EXIT_USAGE;
  }
  if (rdzv_auth_nonce(key, sizeof key) < 0) {
    fprintf(stderr, "rdzvctl: site-key: the system's random generator "
                    "failed (OpenSSL RAND_bytes); no key written\n");
    return EXIT_FAILED;
  }
  rdzv_auth_hex(key, sizeof key, text);
  text[2 * sizeof key] = '\n';
  rc = write_file_atomic(ctl->out, text, sizeof text, 0400, 0, err,
                         sizeof err);
  rdzv_auth_wipe(key, sizeof key);
  rdzv_auth_wipe(text, sizeof text);
  if (rc == -EEXIST) {
    fprintf(stderr,
            "rdzvctl: site-key: %s exists; refusing to overwrite a site key "
            "(every job's secret derives from it: a new key changes them "
            "all). Remove it first to make a new one\n",
            ctl->out);
    return EXIT_FAILED;
  }
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: site-key: %s\n", err);
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* Checks that the site key at path is fit to hold every job's secret: a
 * regular file (a link to one is followed) of the caller or root, which
 * no one else may read or write (mode & 077 == 0; a job's secret file
 * may be group-readable, a site key may not). 0, or EXIT_FAILED with a
 * message naming path. */
static int site_key_check(const char *path) {
  struct stat st;

  if (stat(path, &st) < 0) {
    int e = errno;
    fprintf(stderr, "rdzvctl: job-secret: site key %s: %s%s\n", path,
            strerror(e),
            e == ENOENT ? " (make one with `rdzvctl site-key --out FILE` "
                          "and copy it to every host)"
                        : "");
    return EXIT_FAILED;
  }
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "rdzvctl: job-secret: site key %s is not a regular file\n",
            path);
    return EXIT_FAILED;
  }
  if ((st.st_mode & 077) != 0) {
    fprintf(stderr,
            "rdzvctl: job-secret: site key %s has mode %04o: its group or "
            "others may access it, and it opens every job's secret (chmod "
            "0400 %s)\n",
            path, (unsigned)(st.st_mode & 07777), path);
    return EXIT_FAILED;
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    fprintf(stderr,
            "rdzvctl: job-secret: site key %s belongs to uid %u, neither "
            "this user (uid %u) nor root: its owner could change every "
            "job's secret\n",
            path, (unsigned)st.st_uid, (unsigned)geteuid());
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* rdzvctl job-secret --site-key FILE --job JOB [--out FILE]: JOB's
 * secret, rdzv_auth_job_secret(site key, JOB) (store/auth/auth.h: 64 hex
 * digits of HMAC-SHA256(site key, "rdzv-job-secret-v1" | u8 len(JOB) |
 * JOB), the site key being its file's bytes without trailing
 * whitespace), and a newline, to --out (atomically, mode 0400, the
 * caller's) or to stdout. */
static int cmd_job_secret(struct ctl *ctl, int argc, char **argv) {
  uint8_t key[RDZV_AUTH_SECRET_MAX_BYTES + 1];
  char secret[2 * 32 + 2];
  char err[PATH_MAX + 256];
  size_t key_len = 0, job_len;
  int rc, code = EXIT_OK;

  (void)argc;
  (void)argv;
  if (ctl->job == NULL)
    ctl->job = getenv("RDZV_JOB");
  if (ctl->site_key == NULL || ctl->site_key[0] == '\0') {
    usage_error("job-secret: --site-key FILE is required");
    return EXIT_USAGE;
  }
  if (ctl->job == NULL || ctl->job[0] == '\0') {
    usage_error("job-secret: no job id: pass --job JOB or set RDZV_JOB");
    return EXIT_USAGE;
  }
  job_len = strlen(ctl->job);
  if (job_len > RDZV_AUTH_JOB_MAX_BYTES) {
    usage_error("job-secret: the job id is %zu bytes; at most %u", job_len,
                RDZV_AUTH_JOB_MAX_BYTES);
    return EXIT_USAGE;
  }
  if (ctl->out != NULL && ctl->out[0] == '\0') {
    usage_error("job-secret: --out needs a file name");
    return EXIT_USAGE;
  }
  code = site_key_check(ctl->site_key);
  if (code != EXIT_OK)
    return code;
  rc = rdzv_auth_secret_load(ctl->site_key, key, sizeof key, &key_len, err,
                             sizeof err);
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: job-secret: site key: %s\n", err);
    return EXIT_FAILED;
  }
  rc = rdzv_auth_job_secret(key, key_len, (const uint8_t *)ctl->job, job_len,
                            secret);
  rdzv_auth_wipe(key, sizeof key);
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: job-secret: job %s: %s\n", ctl->job,
            strerror(-rc));
    return EXIT_FAILED;
  }
  secret[64] = '\n';
  secret[65] = '\0';
  if (ctl->out != NULL) {
    rc = write_file_atomic(ctl->out, secret, 65, 0400, 1, err, sizeof err);
    if (rc < 0) {
      fprintf(stderr, "rdzvctl: job-secret: job %s: %s\n", ctl->job, err);
      code = EXIT_FAILED;
    }
  } else {
    /* Straight to the descriptor: no copy left in stdio's buffer. */
    rc = write_all(STDOUT_FILENO, secret, 65);
    if (rc < 0) {
      fprintf(stderr, "rdzvctl: job-secret: writing to stdout: %s\n",
              strerror(-rc));
      code = EXIT_FAILED;
    }
  }
  rdzv_auth_wipe(secret, sizeof secret);
  return code;
}

/* Commands that need no server: no --addr, --job or connection. */
static const struct command local_commands[] = {
    {"hostnames", 1, 1, cmd_hostnames},
    {"tree-position", 2, 2, cmd_tree_position},
    {"site-key", 0, 0, cmd_site_key},
    {"job-secret", 0, 0, cmd_job_secret},
};

/* ---- main ------------------------------------------------------------- */

static const struct command *find_in(const struct command *tab, size_t n,
                                     const char *name) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (strcmp(tab[i].name, name) == 0)
      return &tab[i];
  }
  return NULL;
}

static const struct command *find_command(const char *name) {
  return find_in(commands, sizeof commands / sizeof commands[0], name);
}

static const struct command *find_local_command(const char *name) {
  return find_in(local_commands,
                 sizeof local_commands / sizeof local_commands[0], name);
}

/* A command of local_commands[]: its arguments, then the command. */
static int run_local(struct ctl *ctl, const struct command *cmd, int argc,
                     char **argv) {
  const char *timeout = NULL; /* accepted anywhere, unused here */
  int code;

  code = parse_trailing(ctl, &argc, argv, &timeout);
  if (code != EXIT_OK)
    return code;
  if (argc < cmd->min_args || argc > cmd->max_args) {
    usage_error("wrong number of arguments for '%s'", cmd->name);
    return EXIT_USAGE;
  }
  return cmd->run(ctl, argc, argv);
}

/* Checks the command's arguments and the required options. */
static int check_call(struct ctl *ctl, const struct command *cmd,
                      int argc) {
  if (argc < cmd->min_args || (cmd->max_args >= 0 && argc > cmd->max_args)) {
    usage_error("wrong number of arguments for '%s'", cmd->name);
    return EXIT_USAGE;
  }
  if ((ctl->job == NULL || ctl->job[0] == '\0') &&
      strcmp(cmd->name, "stats") == 0)
    ctl->job = "rdzvctl-stats"; /* a hello needs one; stats makes no job */
  if (ctl->job == NULL || ctl->job[0] == '\0') {
    usage_error("no job id: pass --job JOB or set RDZV_JOB");
    return EXIT_USAGE;
  }
  if (ctl->addr == NULL || ctl->addr[0] == '\0') {
    usage_error("no server address: pass --addr ADDR or set RDZV_ADDR");
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

/* Flushes stdout; a failed write (full disk, closed pipe) fails the run. */
static int finish_output(int code) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "rdzvctl: writing output: %s\n", strerror(errno));
    return code == EXIT_OK ? EXIT_FAILED : code;
  }
  return code;
}

int main(int argc, char **argv) {
  struct ctl ctl = {0};
  const struct command *cmd;
  const char *timeout = NULL;
  int idx = 0;
  int nargs;
  int code;

  clock_gettime(CLOCK_MONOTONIC, &ctl.start);
  if (argc >= 2 && (strcmp(argv[1], "--version") == 0 ||
                    strcmp(argv[1], "version") == 0)) {
    printf("rdzvctl %s\n", RDZV_VERSION_STRING);
    return finish_output(EXIT_OK);
  }
  code = parse_globals(&ctl, argc, argv, &idx, &timeout);
  if (code != EXIT_OK)
    return code;
  if (idx >= argc) {
    usage_error("no command");
    return EXIT_USAGE;
  }
  ctl.cmd = argv[idx];
  if (strcmp(ctl.cmd, "help") == 0 || strcmp(ctl.cmd, "--help") == 0 ||
      strcmp(ctl.cmd, "-h") == 0) {
    fputs(usage_text, stdout);
    return finish_output(EXIT_OK);
  }
  if (strcmp(ctl.cmd, "version") == 0) { /* after options, as a command */
    printf("rdzvctl %s\n", RDZV_VERSION_STRING);
    return finish_output(EXIT_OK);
  }
  nargs = argc - idx - 1;
  cmd = find_local_command(ctl.cmd);
  if (cmd != NULL)
    return finish_output(run_local(&ctl, cmd, nargs, argv + idx + 1));
  cmd = find_command(ctl.cmd);
  if (cmd == NULL) {
    usage_error("unknown command '%s'", ctl.cmd);
    return EXIT_USAGE;
  }
  code = parse_trailing(&ctl, &nargs, argv + idx + 1, &timeout);
  if (code == EXIT_OK)
    code = finish_globals(&ctl, timeout);
  if (code == EXIT_OK)
    code = check_call(&ctl, cmd, nargs);
  if (code == EXIT_OK)
    code = open_client(&ctl);
  if (code == EXIT_OK)
    code = cmd->run(&ctl, nargs, argv + idx + 1);
  rdzv_client_destroy(ctl.client);
  return finish_output(code);
}
