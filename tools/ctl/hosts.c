/* rdzvctl's Slurm host-list commands (ctl.h), which need no server:
 * hostnames (as `scontrol show hostnames`) and tree-position. */
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

int cmd_hostnames(struct ctl *ctl, int argc, char **argv) {
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

int cmd_tree_position(struct ctl *ctl, int argc, char **argv) {
  static char buf[65536];
  struct rdzv_hostlist_error e = {0, ""};
  struct rdzv_hostlist_pos pos;
  uint64_t fanout = DEFAULT_FANOUT;
  size_t len = strlen(argv[0]);
  char *names = buf;
  int err;

  if (ctl->fanout != NULL && (ctl_parse_u64(ctl->fanout, &fanout) < 0 ||
                              fanout == 0 || fanout > SIZE_MAX)) {
    ctl_usage_error("tree-position: --fanout '%s' is not a positive integer",
                    ctl->fanout);
    return EXIT_USAGE;
  }
  err = rdzv_hostlist_tree_position(argv[0], len, RDZV_HOSTLIST_MAX_HOSTS,
                                    argv[1], (size_t)fanout, buf, sizeof(buf),
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
