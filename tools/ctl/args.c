/* rdzvctl's options (ctl.h): parse_globals takes those before the
 * command, parse_trailing those among its arguments, finish_globals
 * RDZV_ADDR and RDZV_JOB for what they did not give; and the number
 * parsers the commands use. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "store/auth/auth.h"
#include "tools/ctl/ctl.h"
#include "tools/ctl/rounds.h"
#include "tools/hostlist.h"

/* ---- Argument parsing ------------------------------------------------- */

/* Parses a whole decimal int64; 0 or -1. */
int ctl_parse_i64(const char *s, int64_t *out) {
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
int ctl_parse_u64(const char *s, uint64_t *out) {
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
  static const char *const names[] = {"addr", "job", "timeout", "secret-file"};
  const char **dest[] = {&ctl->addr, &ctl->job, timeout, &ctl->secret_file};
  size_t k;
  int r;

  for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    r = take_opt(argc, argv, i, names[k], dest[k]);
    if (r < 0) {
      ctl_usage_error("option --%s needs a value", names[k]);
      return EXIT_USAGE;
    }
    if (r > 0)
      return 0;
  }
  ctl_usage_error("unknown option '%s'", argv[*i]);
  return EXIT_USAGE;
}

/* Reads the options before the command. *cmd_idx receives the index of
 * the command word. */
int ctl_parse_globals(struct ctl *ctl, int argc, char **argv, int *cmd_idx,
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
        ctl_usage_error("option --site-key needs a value");
      return r;
    }
  }
  r = take_opt(argc, argv, i, "out", &ctl->out);
  if (r < 0)
    ctl_usage_error("option --out needs a value");
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
int ctl_parse_trailing(struct ctl *ctl, int *argc, char **argv,
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
        ctl_usage_error("--write-once is an option of set and mset only");
        return EXIT_USAGE;
      }
      ctl->set_flags = RDZV_STORE_WRITE_ONCE;
      i++;
      continue;
    }
    if (strcmp(ctl->cmd, "tree-position") == 0) {
      err = take_opt(*argc, argv, &i, "fanout", &ctl->fanout);
      if (err < 0) {
        ctl_usage_error("option --fanout needs a value");
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
      ctl_usage_error("--help after the command: run 'rdzvctl help'");
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
int ctl_finish_globals(struct ctl *ctl, const char *timeout) {
  ctl->timeout_s = DEFAULT_TIMEOUT_S;
  if (timeout != NULL && parse_seconds(timeout, &ctl->timeout_s) < 0) {
    ctl_usage_error("--timeout '%s' is not a positive number of seconds",
                    timeout);
    return EXIT_USAGE;
  }
  if (ctl->addr == NULL)
    ctl->addr = getenv("RDZV_ADDR");
  if (ctl->job == NULL)
    ctl->job = getenv("RDZV_JOB");
  return 0;
}
