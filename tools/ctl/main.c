/* rdzvctl: a command-line client of the rdzv store, for operators and
 * scripts. One process runs one command over the blocking API of
 * rdzv/store.h and maps the outcome to an exit status a shell can test
 * (see usage_text below, printed by `rdzvctl help`).
 *
 * Configuration is read in three steps (args.c): ctl_parse_globals()
 * takes the options before the command, ctl_parse_trailing() those among
 * its arguments, and ctl_finish_globals() RDZV_ADDR and RDZV_JOB for what
 * they did not give. The host-list and secret commands (local_commands[])
 * need no server and stop after ctl_parse_trailing(). This file: usage,
 * messages and exit codes, the deadline and the connection, the command
 * tables and main; the commands are in store.c, hosts.c and secrets.c. */
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
#include "tools/ctl/ctl.h"

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
    "                                 root keeps them (--addr: the root): "
    "when\n"
    "                                 each opened, ranks and hosts joined "
    "over\n"
    "                                 time, the last 10 to join, what is\n"
    "                                 missing, how earlier ones ended, which\n"
    "                                 places spares took\n"
    "  members [ROUND]                the round's world by node rank (host,\n"
    "                                 ranks, active or promoted spare, "
    "domain)\n"
    "                                 and its parked spares (--addr: the "
    "root)\n"
    "  quarantine                     the hosts quarantined for the job, with\n"
    "                                 why (--addr: the root)\n"
    "  quarantine clear HOST          let HOST join the job again\n"
    "  quarantine add HOST REASON     keep HOST out of the job's generations\n"
    "                                 (its joins are refused with\n"
    "                                 RDZV_EQUARANTINED) until cleared\n"
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
    "                                 talking): 64 hex digits. --out writes "
    "it\n"
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

/* ---- Messages and exit codes ------------------------------------------ */

/* "rdzvctl: MESSAGE" and a pointer to the help, for exit status 2. */
void ctl_usage_error(const char *fmt, ...) {
  va_list ap;

  fputs("rdzvctl: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nrdzvctl: try 'rdzvctl help'\n", stderr);
}

/* "rdzvctl: CMD WHAT: strerror (last_error)". */
void ctl_report(const struct ctl *ctl, const char *what, int err) {
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

int ctl_exit_code(int err) {
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
int ctl_fail(const struct ctl *ctl, const char *what, int err) {
  ctl_report(ctl, what, err);
  return ctl_exit_code(err);
}

/* ---- Deadline and connection ------------------------------------------ */

/* Seconds left of --timeout; never 0 or less, which would mean "one
 * attempt" to the library rather than "expired". */
double ctl_remaining(const struct ctl *ctl) {
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
    if (n >= sizeof(sa.sun_path)) {
      snprintf(buf, sizeof(buf),
               "the socket path is %zu bytes; a Unix socket path holds at "
               "most %zu bytes",
               n, sizeof(sa.sun_path) - 1);
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
  double left = ctl_remaining(ctl);
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
    ctl_report(ctl, "", err);
    return EXIT_FAILED;
  }
  err = wait_for_socket(ctl); /* the address is valid: created */
  if (err != EXIT_OK)
    return err;
  err = rdzv_client_connect(ctl->client, ctl_remaining(ctl));
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
void ctl_put_line(const void *data, size_t len) {
  if (len > 0)
    fwrite(data, 1, len, stdout);
  fputc('\n', stdout);
}

/* ---- Commands ------------------------------------------------------- */

static const struct command commands[] = {
    {"set", 2, 2, cmd_set},
    {"get", 1, 1, cmd_get},
    {"wait", 1, 65536, cmd_wait},
    {"add", 2, 2, cmd_add},
    {"cas", 3, 3, cmd_cas},
    {"delete", 1, 1, cmd_delete},
    {"mget", 1, -1, cmd_mget},
    {"mset", 2, -1, cmd_mset},
    {"append", 2, 2, cmd_append},
    {"num-keys", 0, 0, cmd_num_keys},
    {"barrier", 3, 3, cmd_barrier},
    {"gather", 4, 4, cmd_gather},
    {"missing", 2, 2, cmd_missing},
    {"stats", 0, 0, cmd_stats},
    {"rounds", 0, 1, cmd_rounds},
    {"members", 0, 1, cmd_members},
    {"quarantine", 0, 3, cmd_quarantine},
    {"tcpstore-space", 1, 2, cmd_tcpstore_space},
};

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
  return find_in(commands, sizeof(commands) / sizeof(commands[0]), name);
}

static const struct command *find_local_command(const char *name) {
  return find_in(local_commands,
                 sizeof(local_commands) / sizeof(local_commands[0]), name);
}

/* A command of local_commands[]: its arguments, then the command. */
static int run_local(struct ctl *ctl, const struct command *cmd, int argc,
                     char **argv) {
  const char *timeout = NULL; /* accepted anywhere, unused here */
  int code;

  code = ctl_parse_trailing(ctl, &argc, argv, &timeout);
  if (code != EXIT_OK)
    return code;
  if (argc < cmd->min_args || argc > cmd->max_args) {
    ctl_usage_error("wrong number of arguments for '%s'", cmd->name);
    return EXIT_USAGE;
  }
  return cmd->run(ctl, argc, argv);
}

/* Checks the command's arguments and the required options. */
static int check_call(struct ctl *ctl, const struct command *cmd, int argc) {
  if (argc < cmd->min_args || (cmd->max_args >= 0 && argc > cmd->max_args)) {
    ctl_usage_error("wrong number of arguments for '%s'", cmd->name);
    return EXIT_USAGE;
  }
  if ((ctl->job == NULL || ctl->job[0] == '\0') &&
      strcmp(cmd->name, "stats") == 0)
    ctl->job = "rdzvctl-stats"; /* a hello needs one; stats makes no job */
  if (ctl->job == NULL || ctl->job[0] == '\0') {
    ctl_usage_error("no job id: pass --job JOB or set RDZV_JOB");
    return EXIT_USAGE;
  }
  if (ctl->addr == NULL || ctl->addr[0] == '\0') {
    ctl_usage_error("no server address: pass --addr ADDR or set RDZV_ADDR");
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
  if (argc >= 2 &&
      (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
    printf("rdzvctl %s\n", RDZV_VERSION_STRING);
    return finish_output(EXIT_OK);
  }
  code = ctl_parse_globals(&ctl, argc, argv, &idx, &timeout);
  if (code != EXIT_OK)
    return code;
  if (idx >= argc) {
    ctl_usage_error("no command");
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
    ctl_usage_error("unknown command '%s'", ctl.cmd);
    return EXIT_USAGE;
  }
  code = ctl_parse_trailing(&ctl, &nargs, argv + idx + 1, &timeout);
  if (code == EXIT_OK)
    code = ctl_finish_globals(&ctl, timeout);
  if (code == EXIT_OK)
    code = check_call(&ctl, cmd, nargs);
  if (code == EXIT_OK)
    code = open_client(&ctl);
  if (code == EXIT_OK)
    code = cmd->run(&ctl, nargs, argv + idx + 1);
  rdzv_client_destroy(ctl.client);
  return finish_output(code);
}
