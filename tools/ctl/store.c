/* rdzvctl's commands over the store (ctl.h): one request each over the
 * blocking API of rdzv/store.h, its outcome printed and mapped to an
 * exit status by main.c's messages. */
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

#include "rdzv/rendezvous.h"
#include "store/auth/auth.h"
#include "tools/ctl/ctl.h"
#include "tools/ctl/rounds.h"
#include "tools/hostlist.h"

/* ---- Commands --------------------------------------------------------- */

int cmd_set(struct ctl *ctl, int argc, char **argv) {
  unsigned flags = ctl->set_flags;
  int err;

  err = rdzv_store_set(ctl->client, argv[0], argv[1], strlen(argv[1]), flags,
                       ctl_remaining(ctl));
  return err < 0 ? ctl_fail(ctl, argv[0], err) : EXIT_OK;
}

int cmd_get(struct ctl *ctl, int argc, char **argv) {
  void *val = NULL;
  size_t len = 0;
  int err;

  err = rdzv_store_get(ctl->client, argv[0], &val, &len, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[0], err);
  ctl_put_line(val, len);
  rdzv_free(val);
  return EXIT_OK;
}

int cmd_wait(struct ctl *ctl, int argc, char **argv) {
  int err;

  err = rdzv_store_wait(ctl->client, (const char *const *)argv, (size_t)argc,
                        ctl_remaining(ctl));
  return err < 0 ? ctl_fail(ctl, argc == 1 ? argv[0] : "", err) : EXIT_OK;
}

int cmd_add(struct ctl *ctl, int argc, char **argv) {
  int64_t delta;
  int64_t val = 0;
  int err;

  if (ctl_parse_i64(argv[1], &delta) < 0) {
    ctl_usage_error("add: DELTA '%s' is not a decimal int64", argv[1]);
    return EXIT_USAGE;
  }
  err = rdzv_store_add(ctl->client, argv[0], delta, &val, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[0], err);
  printf("%" PRId64 "\n", val);
  return EXIT_OK;
}

int cmd_cas(struct ctl *ctl, int argc, char **argv) {
  void *cur = NULL;
  size_t cur_len = 0;
  int err;

  err = rdzv_store_cas(ctl->client, argv[0], argv[1], strlen(argv[1]), argv[2],
                       strlen(argv[2]), &cur, &cur_len, ctl_remaining(ctl));
  if (err == RDZV_ECAS_FAILED)
    fprintf(stderr, "rdzvctl: cas %s: %s: current value is '%.*s'\n", argv[0],
            rdzv_strerror(err), (int)cur_len,
            cur != NULL ? (const char *)cur : "");
  else if (err < 0)
    ctl_report(ctl, argv[0], err);
  rdzv_free(cur);
  return ctl_exit_code(err);
}

int cmd_delete(struct ctl *ctl, int argc, char **argv) {
  int deleted = 0;
  int err;

  err = rdzv_store_delete(ctl->client, argv[0], &deleted, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[0], err);
  if (!deleted) {
    fprintf(stderr, "rdzvctl: delete %s: %s\n", argv[0],
            rdzv_strerror(RDZV_ENOKEY));
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

int cmd_mget(struct ctl *ctl, int argc, char **argv) {
  struct rdzv_value *vals = NULL;
  size_t i;
  int err;

  err = rdzv_store_mget(ctl->client, (const char *const *)argv, (size_t)argc,
                        &vals, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, "", err);
  for (i = 0; i < (size_t)argc; i++)
    ctl_put_line(vals[i].data, vals[i].len);
  rdzv_values_free(vals, (size_t)argc);
  return EXIT_OK;
}

/* mset: argv holds KEY VALUE pairs, --write-once anywhere. */
int cmd_mset(struct ctl *ctl, int argc, char **argv) {
  unsigned flags = ctl->set_flags;
  size_t n = (size_t)argc / 2;
  const char **keys;
  struct rdzv_value *vals;
  size_t i;
  int err;

  if (argc == 0 || argc % 2 != 0) {
    ctl_usage_error("usage: mset KEY VALUE [KEY VALUE...] [--write-once]");
    return EXIT_USAGE;
  }
  keys = calloc(n, sizeof(*keys));
  vals = calloc(n, sizeof(*vals));
  err = keys == NULL || vals == NULL ? RDZV_ENOMEM : 0;
  for (i = 0; err == 0 && i < n; i++) {
    keys[i] = argv[2 * i];
    vals[i].data = argv[2 * i + 1];
    vals[i].len = strlen(argv[2 * i + 1]);
  }
  if (err == 0)
    err =
        rdzv_store_mset(ctl->client, keys, vals, n, flags, ctl_remaining(ctl));
  free(keys);
  free(vals);
  return err < 0 ? ctl_fail(ctl, "", err) : EXIT_OK;
}

int cmd_append(struct ctl *ctl, int argc, char **argv) {
  int err;

  err = rdzv_store_append(ctl->client, argv[0], argv[1], strlen(argv[1]),
                          ctl_remaining(ctl));
  return err < 0 ? ctl_fail(ctl, argv[0], err) : EXIT_OK;
}

int cmd_num_keys(struct ctl *ctl, int argc, char **argv) {
  int64_t n = 0;
  int err;

  err = rdzv_store_num_keys(ctl->client, &n, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, "", err);
  printf("%" PRId64 "\n", n);
  return EXIT_OK;
}

/* MEMBER and COUNT of barrier and gather: COUNT >= 1, MEMBER < COUNT. */
static int parse_member_count(const char *cmd, char **argv, uint64_t *member,
                              uint64_t *count) {
  if (ctl_parse_u64(argv[1], member) < 0) {
    ctl_usage_error("%s: MEMBER '%s' is not a decimal uint64", cmd, argv[1]);
    return EXIT_USAGE;
  }
  if (ctl_parse_u64(argv[2], count) < 0 || *count == 0 ||
      *count > (uint64_t)INT64_MAX) {
    ctl_usage_error("%s: COUNT '%s' is not a positive decimal int64", cmd,
                    argv[2]);
    return EXIT_USAGE;
  }
  if (*member >= *count) {
    ctl_usage_error("%s: MEMBER must be < COUNT (members are 0 .. %" PRIu64
                    "; got MEMBER %" PRIu64 ")",
                    cmd, *count - 1, *member);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

int cmd_barrier(struct ctl *ctl, int argc, char **argv) {
  uint64_t member;
  uint64_t count;
  int err;

  err = parse_member_count(ctl->cmd, argv, &member, &count);
  if (err != EXIT_OK)
    return err;
  err = rdzv_store_barrier(ctl->client, argv[0], member, count,
                           ctl_remaining(ctl));
  return err < 0 ? ctl_fail(ctl, argv[0], err) : EXIT_OK;
}

int cmd_gather(struct ctl *ctl, int argc, char **argv) {
  struct rdzv_value *out = NULL;
  uint64_t member;
  uint64_t count;
  uint64_t i;
  int err;

  err = parse_member_count(ctl->cmd, argv, &member, &count);
  if (err != EXIT_OK)
    return err;
  err = rdzv_store_gather(ctl->client, argv[0], member, count, argv[3],
                          strlen(argv[3]), &out, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[0], err);
  for (i = 0; i < count; i++) {
    printf("%" PRIu64 "\t", out[i].member);
    ctl_put_line(out[i].data, out[i].len);
  }
  rdzv_values_free(out, (size_t)count);
  return EXIT_OK;
}

/* The root's view of a barrier or gather (asked through any node). */
int cmd_missing(struct ctl *ctl, int argc, char **argv) {
  static uint64_t ids[RDZV_STORE_MISSING_MAX];
  uint64_t arrived = 0, count = 0;
  size_t n = 0, i;
  int gather, err;

  if (strcmp(argv[0], "barrier") != 0 && strcmp(argv[0], "gather") != 0) {
    ctl_usage_error("missing: '%s' is not 'barrier' or 'gather'", argv[0]);
    return EXIT_USAGE;
  }
  gather = argv[0][0] == 'g';
  err = rdzv_store_collective_missing(ctl->client, argv[1], gather, ids,
                                      RDZV_STORE_MISSING_MAX, &n, &arrived,
                                      &count, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[1], err);
  printf("%" PRIu64 " %" PRIu64 "\n", arrived, count);
  for (i = 0; i < n; i++)
    printf("%" PRIu64 "\n", ids[i]);
  return EXIT_OK;
}

/* Prints the JSON text exactly as the server sent it: scripts parse it. */
int cmd_stats(struct ctl *ctl, int argc, char **argv) {
  char *json = NULL;
  int err;

  err = rdzv_store_stats(ctl->client, &json, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, "", err);
  ctl_put_line(json, strlen(json));
  rdzv_free(json);
  return EXIT_OK;
}

/* A view of the root's statistics (rounds.c's printers), for command
 * name: the job's rounds, or the one named by argv[0]. */
static int
print_stats_view(struct ctl *ctl, int argc, char **argv, const char *name,
                 int (*print)(const char *, const char *, const char *, FILE *,
                              char *, size_t)) {
  char *json = NULL, why[300];
  int err = rdzv_store_stats(ctl->client, &json, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, "", err);
  int rc = print(json, ctl->job, argc > 0 ? argv[0] : NULL, stdout, why,
                 sizeof(why));
  rdzv_free(json);
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: %s: %s\n", name, why);
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* The job's rendezvous generations, as its root keeps them (ask the
 * root: a node keeps none). */
int cmd_rounds(struct ctl *ctl, int argc, char **argv) {
  return print_stats_view(ctl, argc, argv, "rounds", rdzvctl_print_rounds);
}

/* Who is in each round's world and who is parked (the root's view). */
int cmd_members(struct ctl *ctl, int argc, char **argv) {
  return print_stats_view(ctl, argc, argv, "members", rdzvctl_print_members);
}

static int print_quarantine_view(const char *stats, const char *job,
                                 const char *unused, FILE *out, char *err,
                                 size_t errlen) {
  (void)unused;
  return rdzvctl_print_quarantine(stats, job, out, err, errlen);
}

/* Hosts quarantined for the job: listed (the root's view), put there by
 * hand, or cleared (each host a key RDZV_QUARANTINE_KEY_PREFIX "HOST" whose
 * value is the reason; the root refuses the joins of a host whose key exists).
 */
int cmd_quarantine(struct ctl *ctl, int argc, char **argv) {
  if (argc == 0)
    return print_stats_view(ctl, 0, argv, "quarantine", print_quarantine_view);
  char key[320];
  const char *verb = argv[0];
  if ((strcmp(verb, "clear") != 0 && strcmp(verb, "add") != 0) || argc < 2 ||
      (strcmp(verb, "clear") == 0 && argc != 2) ||
      (strcmp(verb, "add") == 0 && argc != 3)) {
    ctl_usage_error("quarantine: list with no argument, or 'clear HOST', or "
                    "'add HOST REASON'");
    return EXIT_USAGE;
  }
  size_t hl = strlen(argv[1]);
  if (hl == 0 || hl > 255) {
    ctl_usage_error("quarantine: HOST must be 1 to 255 bytes");
    return EXIT_USAGE;
  }
  if (strcmp(verb, "add") == 0 && argv[2][strspn(argv[2], " \t\r\n")] == '\0') {
    ctl_usage_error("quarantine add: REASON must say why (it is what the "
                    "host's refused ranks are told)");
    return EXIT_USAGE;
  }
  snprintf(key, sizeof(key), "%s%s", RDZV_QUARANTINE_KEY_PREFIX, argv[1]);
  int err;
  if (strcmp(verb, "add") == 0) {
    err = rdzv_store_set(ctl->client, key, argv[2], strlen(argv[2]), 0,
                         ctl_remaining(ctl));
    if (err < 0)
      return ctl_fail(ctl, key, err);
    printf("host %s quarantined for job %s\n", argv[1], ctl->job);
    return EXIT_OK;
  }
  int deleted = 0;
  err = rdzv_store_delete(ctl->client, key, &deleted, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, key, err);
  printf(deleted ? "host %s cleared: it may join job %s again\n"
                 : "host %s was not quarantined for job %s\n",
         argv[1], ctl->job);
  return EXIT_OK;
}

/* The port of a TCPStore key space, held by process PID when given (a
 * Slurm TaskProlog's task), else by this short-lived connection. */
int cmd_tcpstore_space(struct ctl *ctl, int argc, char **argv) {
  int64_t pid = 0;
  int32_t port = 0;
  int err;

  if (argc == 2 &&
      (ctl_parse_i64(argv[1], &pid) < 0 || pid < 1 || pid > INT32_MAX)) {
    ctl_usage_error("tcpstore-space: PID '%s' is not a process id", argv[1]);
    return EXIT_USAGE;
  }
  err = rdzv_store_tcpstore_space_held(ctl->client, argv[0], (int32_t)pid,
                                       &port, ctl_remaining(ctl));
  if (err < 0)
    return ctl_fail(ctl, argv[0], err);
  printf("%d\n", (int)port);
  return EXIT_OK;
}
