/* store/daemon/config: rdzv_config_parse (defaults, the environment, argv
 * and which wins, the length limits of the string options, --parent's
 * split into parent and ancestors, --tcpstore-listen's defaults) and the
 * heap strings the config owns (rdzv_config_set, rdzv_config_copy,
 * rdzv_config_free). Also run under --config=asan: a leaked, doubly freed
 * or used-after-free string fails there. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/daemon/config.h"

extern char **environ;

/* Every string member of the config, spelled out here rather than taken
 * from config.c, so that a member config.c forgets shows. */
static const struct {
  size_t off;
  const char *name;
} str_members[] = {
#define M(f)                                                                   \
  { offsetof(struct rdzv_daemon_config, f), #f }
    M(listen),
    M(unix_path),
    M(allow_uids),
    M(parent),
    M(ancestors),
    M(port_file),
    M(name),
    M(etcd),
    M(etcd_prefix),
    M(etcd_credentials),
    M(etcd_ca),
    M(etcd_cert),
    M(etcd_key),
    M(advertise),
    M(tcpstore_listen),
    M(tcpstore_job),
    M(tcpstore_port_file),
    M(job),
    M(secret_file),
    M(secret_dir),
#undef M
};
#define NSTR (sizeof(str_members) / sizeof(str_members[0]))

static const char **member(struct rdzv_daemon_config *cfg, size_t i) {
  return (const char **)(void *)((char *)cfg + str_members[i].off);
}

/* Asserts that every string member is "" (and not NULL). */
static void assert_all_empty(struct rdzv_daemon_config *cfg) {
  for (size_t i = 0; i < NSTR; i++) {
    const char *v = *member(cfg, i);
    if (v == NULL || v[0] != '\0')
      fail_msg("member %s is %s%s%s, not \"\"", str_members[i].name,
               v ? "'" : "NULL", v ? v : "", v ? "'" : "");
  }
}

/* No RDZVD_* variable from the test's own environment reaches a parse. */
static int clear_rdzvd_env(void **state) {
  (void)state;
  for (;;) {
    char name[256] = "";
    for (char **e = environ; e != NULL && *e != NULL; e++) {
      if (strncmp(*e, "RDZVD_", 6) == 0) {
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        if (n < sizeof(name)) {
          memcpy(name, *e, n);
          name[n] = '\0';
        }
        break;
      }
    }
    if (name[0] == '\0')
      return 0;
    unsetenv(name);
  }
}

/* Parses "rdzvd" followed by the NULL-terminated arguments. */
static int parse(struct rdzv_daemon_config *cfg, char *err, size_t errlen,
                 ...) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)"rdzvd";
  va_list ap;
  va_start(ap, errlen);
  for (const char *a = va_arg(ap, const char *); a != NULL;
       a = va_arg(ap, const char *)) {
    assert_true(argc < 63);
    argv[argc++] = (char *)a;
  }
  va_end(ap);
  argv[argc] = NULL;
  err[0] = '\0';
  return rdzv_config_parse(cfg, argc, argv, stdout, err, errlen);
}

/* A heap string of n copies of c, after prefix (n counts prefix too). */
static char *filled(const char *prefix, char c, size_t n) {
  char *s = malloc(n + 1);
  assert_non_null(s);
  size_t p = strlen(prefix);
  assert_true(p <= n);
  memcpy(s, prefix, p);
  memset(s + p, c, n - p);
  s[n] = '\0';
  return s;
}

static void test_defaults(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(parse(&c, err, sizeof(err), NULL), 0);
  assert_int_equal(c.role, RDZV_DAEMON_ROOT);
  for (size_t i = 0; i < NSTR; i++) {
    const char *v = *member(&c, i);
    assert_non_null(v);
    if (strcmp(str_members[i].name, "listen") == 0)
      assert_string_equal(v, "127.0.0.1:0");
    else if (strcmp(str_members[i].name, "etcd_prefix") == 0)
      assert_string_equal(v, "rdzv");
    else if (v[0] != '\0')
      fail_msg("default of %s is '%s', not \"\"", str_members[i].name, v);
  }
  assert_int_equal(c.max_key_bytes, 4096);
  assert_int_equal(c.max_value_bytes, 16777216);
  assert_int_equal(c.children, RDZV_CHILDREN_UNKNOWN);
  assert_int_equal(c.local_ranks, RDZV_CHILDREN_UNKNOWN);
  assert_int_equal(c.heartbeat_ms, 1000);
  assert_int_equal(c.nallow_uids, 0);
  assert_false(c.tcpstore_remote);
  rdzv_config_free(&c);
  assert_all_empty(&c);
}

static void test_argv_values(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(parse(&c, err, sizeof(err), "--name", "x", "--unix",
                         "/tmp/a.sock", "--max-key-bytes", "77", NULL),
                   0);
  assert_string_equal(c.name, "x");
  assert_string_equal(c.unix_path, "/tmp/a.sock");
  assert_int_equal(c.max_key_bytes, 77);
  assert_string_equal(c.listen, "127.0.0.1:0");
  rdzv_config_free(&c);

  /* --name=value; a value may itself hold '='; the later one wins. */
  assert_int_equal(parse(&c, err, sizeof(err), "--name=first", "--name=a=b",
                         "--unix=/tmp/b.sock", "--listen=127.0.0.1:5000", NULL),
                   0);
  assert_string_equal(c.name, "a=b");
  assert_string_equal(c.unix_path, "/tmp/b.sock");
  assert_string_equal(c.listen, "127.0.0.1:5000");
  /* --name= gives the empty string, not NULL. */
  rdzv_config_free(&c);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--name=", "--etcd-prefix=", NULL), 0);
  assert_non_null(c.name);
  assert_string_equal(c.name, "");
  assert_string_equal(c.etcd_prefix, "");
  rdzv_config_free(&c);

  /* A flag alone, and --flag=no. */
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-listen", "0.0.0.0:7",
                         "--tcpstore-remote", NULL),
                   0);
  assert_true(c.tcpstore_remote);
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-remote=no", NULL),
                   0);
  assert_false(c.tcpstore_remote);
  rdzv_config_free(&c);

  /* Numbers are digits only: a sign or a leading space is refused (strtoull
   * would take " -1024" as 2^64 - 1024 and wrap it). */
  static const char *const bad[] = {" -18446744073709550592", "+5", " 5", "-0",
                                    "5 "};
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    assert_int_equal(
        parse(&c, err, sizeof(err), "--max-hello-bytes", bad[k], NULL),
        -EINVAL);
    assert_non_null(strstr(err, "--max-hello-bytes"));
    rdzv_config_free(&c);
    assert_int_equal(parse(&c, err, sizeof(err), "--children", bad[k], NULL),
                     -EINVAL);
    rdzv_config_free(&c);
  }
}

static void test_help(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[64];
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  char *argv[] = {(char *)"rdzvd", (char *)"--name", (char *)"x",
                  (char *)"--help", NULL};
  assert_int_equal(rdzv_config_parse(&c, 4, argv, out, err, sizeof(err)), 1);
  fclose(out);
  assert_non_null(strstr(text, "--name"));
  assert_non_null(strstr(text, "RDZVD_NAME"));
  free(text);
  rdzv_config_free(&c);
  assert_all_empty(&c);
}

static void test_environment(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(setenv("RDZVD_NAME", "from-env", 1), 0);
  assert_int_equal(setenv("RDZVD_UNIX", "/tmp/env.sock", 1), 0);
  assert_int_equal(setenv("RDZVD_JOB", "envjob", 1), 0);
  assert_int_equal(setenv("RDZVD_MAX_KEY_BYTES", "99", 1), 0);

  /* The environment applies over the defaults. */
  assert_int_equal(parse(&c, err, sizeof(err), NULL), 0);
  assert_string_equal(c.name, "from-env");
  assert_string_equal(c.unix_path, "/tmp/env.sock");
  assert_string_equal(c.job, "envjob");
  assert_int_equal(c.max_key_bytes, 99);
  rdzv_config_free(&c);

  /* argv overrides it, option by option. */
  assert_int_equal(parse(&c, err, sizeof(err), "--name", "from-argv",
                         "--max-key-bytes=5", NULL),
                   0);
  assert_string_equal(c.name, "from-argv");
  assert_int_equal(c.max_key_bytes, 5);
  assert_string_equal(c.unix_path, "/tmp/env.sock");
  assert_string_equal(c.job, "envjob");
  rdzv_config_free(&c);

  /* A bad value in the environment: refused, saying where it came from. */
  char *longname = filled("", 'e', RDZV_CONFIG_NAME_MAX + 1);
  assert_int_equal(setenv("RDZVD_NAME", longname, 1), 0);
  assert_int_equal(parse(&c, err, sizeof(err), NULL), -EINVAL);
  assert_non_null(strstr(err, "--name"));
  assert_non_null(strstr(err, "RDZVD_NAME"));
  rdzv_config_free(&c);
  assert_all_empty(&c);
  /* ... unless argv gives that option: it mends the stale variable. */
  assert_int_equal(parse(&c, err, sizeof(err), "--name", "fixed", NULL), 0);
  assert_string_equal(c.name, "fixed");
  rdzv_config_free(&c);
  free(longname);
  /* Two bad variables, argv mending one: the other is still refused. */
  assert_int_equal(setenv("RDZVD_NAME", "from-env", 1), 0);
  assert_int_equal(setenv("RDZVD_FLUSH_MS", "soon", 1), 0);
  assert_int_equal(setenv("RDZVD_BACKLOG", "-1", 1), 0);
  assert_int_equal(parse(&c, err, sizeof(err), "--flush-ms=3", NULL), -EINVAL);
  assert_non_null(strstr(err, "RDZVD_BACKLOG=-1"));
  assert_null(strstr(err, "RDZVD_FLUSH_MS"));
  rdzv_config_free(&c);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--backlog", "7", "--flush-ms=3", NULL), 0);
  assert_int_equal(c.flush_ms, 3);
  assert_int_equal(c.backlog, 7);
  assert_string_equal(c.name, "from-env");
  rdzv_config_free(&c);
  unsetenv("RDZVD_FLUSH_MS");
  unsetenv("RDZVD_BACKLOG");
  /* A long refused value: the message still names the variable (the
   * value is cut, not the name). */
  char *nines = filled("", '9', 2000);
  assert_int_equal(setenv("RDZVD_FLUSH_MS", nines, 1), 0);
  assert_int_equal(parse(&c, err, sizeof(err), NULL), -EINVAL);
  assert_non_null(strstr(err, "(from the environment: RDZVD_FLUSH_MS=999"));
  assert_non_null(strstr(err, "...)"));
  rdzv_config_free(&c);
  unsetenv("RDZVD_FLUSH_MS");
  free(nines);
  /* --allow-uids refused when argv gave it: not blamed on the variable. */
  assert_int_equal(setenv("RDZVD_ALLOW_UIDS", "no-such-user-rdzv", 1), 0);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--allow-uids", "no-such-user-rdzv", NULL),
      -EINVAL);
  assert_null(strstr(err, "environment"));
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), NULL), -EINVAL);
  assert_non_null(strstr(err, "RDZVD_ALLOW_UIDS=no-such-user-rdzv"));
  rdzv_config_free(&c);
  unsetenv("RDZVD_ALLOW_UIDS");

  unsetenv("RDZVD_NAME");
  unsetenv("RDZVD_UNIX");
  unsetenv("RDZVD_JOB");
  unsetenv("RDZVD_MAX_KEY_BYTES");
  assert_int_equal(parse(&c, err, sizeof(err), NULL), 0);
  assert_string_equal(c.name, "");
  assert_string_equal(c.unix_path, "");
  assert_string_equal(c.job, "");
  assert_int_equal(c.max_key_bytes, 4096);
  rdzv_config_free(&c);
}

static void test_limits(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];

  /* --name: 127 bytes accepted, 128 refused naming --name (both forms). */
  char *name = filled("", 'n', RDZV_CONFIG_NAME_MAX);
  assert_int_equal(parse(&c, err, sizeof(err), "--name", name, NULL), 0);
  assert_string_equal(c.name, name);
  assert_int_equal(strlen(c.name), 127);
  rdzv_config_free(&c);
  free(name);
  name = filled("", 'n', RDZV_CONFIG_NAME_MAX + 1);
  assert_int_equal(parse(&c, err, sizeof(err), "--name", name, NULL), -EINVAL);
  assert_non_null(strstr(err, "--name"));
  rdzv_config_free(&c);
  assert_all_empty(&c);
  char *eqname = filled("--name=", 'n', 7 + RDZV_CONFIG_NAME_MAX + 1);
  assert_int_equal(parse(&c, err, sizeof(err), eqname, NULL), -EINVAL);
  assert_non_null(strstr(err, "--name"));
  rdzv_config_free(&c);
  free(eqname);
  free(name);

  /* --listen: 255 bytes accepted, 256 refused. */
  char *listen = filled("", 'a', RDZV_CONFIG_STR_MAX);
  memcpy(listen + RDZV_CONFIG_STR_MAX - 2, ":0", 2);
  assert_int_equal(parse(&c, err, sizeof(err), "--listen", listen, NULL), 0);
  assert_string_equal(c.listen, listen);
  rdzv_config_free(&c);
  free(listen);
  listen = filled("", 'a', RDZV_CONFIG_STR_MAX + 1);
  memcpy(listen + RDZV_CONFIG_STR_MAX - 1, ":0", 2);
  assert_int_equal(parse(&c, err, sizeof(err), "--listen", listen, NULL),
                   -EINVAL);
  assert_non_null(strstr(err, "--listen"));
  rdzv_config_free(&c);
  free(listen);

  /* --parent: a list of 2047 bytes (a parent and 8 ancestors of 254 bytes
   * each) accepted and split; 2048 bytes refused. */
  char list[RDZV_CONFIG_LIST_MAX + 2];
  size_t n = 0;
  n += (size_t)sprintf(list, "unix:/p");
  for (int i = 0; i < 8; i++) {
    list[n++] = ',';
    memcpy(list + n, "unix:/", 6);
    memset(list + n + 6, (char)('a' + i), 248);
    n += 254;
  }
  list[n] = '\0';
  assert_int_equal(n, RDZV_CONFIG_LIST_MAX);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", list, NULL), 0);
  assert_string_equal(c.parent, "unix:/p");
  assert_string_equal(c.ancestors, list + 8);
  assert_int_equal(strlen(c.ancestors), RDZV_CONFIG_LIST_MAX - 8);
  rdzv_config_free(&c);
  /* One byte more: the last ancestor 255 bytes, the list 2048. */
  list[n++] = 'z';
  list[n] = '\0';
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", list, NULL),
      -EINVAL);
  assert_non_null(strstr(err, "--parent"));
  rdzv_config_free(&c);
  assert_all_empty(&c);
}

static void test_parent_split(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(parse(&c, err, sizeof(err), "--role", "node", "--parent",
                         "unix:/p,unix:/a1,unix:/a2", NULL),
                   0);
  assert_int_equal(c.role, RDZV_DAEMON_NODE);
  assert_string_equal(c.parent, "unix:/p");
  assert_string_equal(c.ancestors, "unix:/a1,unix:/a2");
  rdzv_config_free(&c);

  /* No ancestors: "" (not NULL); the --parent=value form. */
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role=node", "--parent=127.0.0.1:9", NULL),
      0);
  assert_string_equal(c.parent, "127.0.0.1:9");
  assert_non_null(c.ancestors);
  assert_string_equal(c.ancestors, "");
  rdzv_config_free(&c);

  /* A parent address of 255 bytes is accepted, 256 refused, alone or
   * followed by ancestors. */
  char *p255 = filled("", 'h', 255);
  memcpy(p255 + 253, ":1", 2);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", p255, NULL), 0);
  assert_string_equal(c.parent, p255);
  rdzv_config_free(&c);
  free(p255);
  char *p256 = filled("", 'h', 256);
  memcpy(p256 + 254, ":1", 2);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", p256, NULL),
      -EINVAL);
  assert_non_null(strstr(err, "--parent"));
  assert_non_null(strstr(err, "255"));
  rdzv_config_free(&c);
  char withanc[300];
  snprintf(withanc, sizeof(withanc), "%s,unix:/a1", p256);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", withanc, NULL),
      -EINVAL);
  assert_non_null(strstr(err, "--parent"));
  rdzv_config_free(&c);
  assert_all_empty(&c);
  free(p256);

  /* An ancestor that is no address, and a 17th ancestor: refused. */
  assert_int_equal(parse(&c, err, sizeof(err), "--role", "node", "--parent",
                         "unix:/p,nonsense", NULL),
                   -EINVAL);
  assert_non_null(strstr(err, "nonsense"));
  rdzv_config_free(&c);
  char many[512];
  size_t n = (size_t)sprintf(many, "unix:/p");
  for (int i = 0; i < 16; i++)
    n += (size_t)sprintf(many + n, ",unix:/a%d", i);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", many, NULL), 0);
  rdzv_config_free(&c);
  sprintf(many + n, ",unix:/a16");
  assert_int_equal(
      parse(&c, err, sizeof(err), "--role", "node", "--parent", many, NULL),
      -EINVAL);
  rdzv_config_free(&c);

  /* A node needs a parent; a root takes none. */
  assert_int_equal(parse(&c, err, sizeof(err), "--role", "node", NULL),
                   -EINVAL);
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), "--parent", "unix:/p", NULL),
                   -EINVAL);
  rdzv_config_free(&c);

  /* A health command: a node's, and not only blanks (which would admit
   * every host while looking configured). */
  assert_int_equal(parse(&c, err, sizeof(err), "--role", "node", "--parent",
                         "unix:/p", "--health-cmd", "true", NULL),
                   0);
  assert_string_equal(c.health_cmd, "true");
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), "--health-cmd", "true", NULL),
                   -EINVAL);
  assert_non_null(strstr(err, "a root takes none"));
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), "--role", "node", "--parent",
                         "unix:/p", "--health-cmd", " \t ", NULL),
                   -EINVAL);
  assert_non_null(strstr(err, "only blanks"));
  rdzv_config_free(&c);
}

static void test_tcpstore_defaults(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-listen", "1234",
                         "--job", "j1", NULL),
                   0);
  assert_string_equal(c.tcpstore_listen, "127.0.0.1:1234");
  assert_string_equal(c.tcpstore_job, "j1");
  /* Two strings, not one shared. */
  assert_ptr_not_equal(c.tcpstore_job, c.job);
  rdzv_config_free(&c);

  /* Without --job: no job. */
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-listen=1234", NULL),
                   0);
  assert_string_equal(c.tcpstore_listen, "127.0.0.1:1234");
  assert_string_equal(c.tcpstore_job, "");
  rdzv_config_free(&c);

  /* HOST:PORT is kept; an explicit --tcpstore-job equal to --job too. */
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-listen",
                         "localhost:99", "--job", "j1", "--tcpstore-job", "j1",
                         NULL),
                   0);
  assert_string_equal(c.tcpstore_listen, "localhost:99");
  assert_string_equal(c.tcpstore_job, "j1");
  rdzv_config_free(&c);

  /* --tcpstore-job other than --job; a non-loopback host without
   * --tcpstore-remote; --tcpstore-job without --tcpstore-listen. */
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-listen", "1234",
                         "--job", "j1", "--tcpstore-job", "j2", NULL),
                   -EINVAL);
  rdzv_config_free(&c);
  assert_int_equal(
      parse(&c, err, sizeof(err), "--tcpstore-listen", "10.0.0.1:5", NULL),
      -EINVAL);
  assert_non_null(strstr(err, "--tcpstore-remote"));
  rdzv_config_free(&c);
  assert_int_equal(parse(&c, err, sizeof(err), "--tcpstore-job", "j", NULL),
                   -EINVAL);
  rdzv_config_free(&c);
}

static void test_set(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  assert_int_equal(parse(&c, err, sizeof(err), "--name", "old", NULL), 0);

  /* A printf-formatted value replaces the old one (freed: ASan). */
  assert_int_equal(rdzv_config_set(&c, &c.name, "node-%d-%s", 7, "x"), 0);
  assert_string_equal(c.name, "node-7-x");
  assert_int_equal(rdzv_config_set(&c, &c.name, "%s", "again"), 0);
  assert_string_equal(c.name, "again");
  /* The member's own value as an argument. */
  assert_int_equal(rdzv_config_set(&c, &c.name, "%s/%s", c.name, c.name), 0);
  assert_string_equal(c.name, "again/again");
  /* A member that held the shared "". */
  assert_string_equal(c.advertise, "");
  assert_int_equal(rdzv_config_set(&c, &c.advertise, "h:%u", 80u), 0);
  assert_string_equal(c.advertise, "h:80");
  /* Back to "". */
  assert_int_equal(rdzv_config_set(&c, &c.advertise, "%s", ""), 0);
  assert_non_null(c.advertise);
  assert_string_equal(c.advertise, "");
  /* ancestors, which is no option. */
  assert_int_equal(rdzv_config_set(&c, &c.ancestors, "unix:/%s", "a"), 0);
  assert_string_equal(c.ancestors, "unix:/a");

  /* 2047 bytes: accepted; 2048 refused, the old value left as it was. */
  char big[RDZV_CONFIG_LIST_MAX + 2];
  memset(big, 'b', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(
      rdzv_config_set(&c, &c.etcd, "%.*s", RDZV_CONFIG_LIST_MAX, big), 0);
  assert_int_equal(strlen(c.etcd), RDZV_CONFIG_LIST_MAX);
  assert_int_equal(rdzv_config_set(&c, &c.etcd, "%s", "short"), 0);
  const char *before = c.etcd;
  assert_int_equal(rdzv_config_set(&c, &c.etcd, "%s", big), -EINVAL);
  assert_ptr_equal(c.etcd, before);
  assert_string_equal(c.etcd, "short");
  /* Over the limit by formatting, not by any one argument. */
  assert_int_equal(rdzv_config_set(&c, &c.etcd, "%s%s", big + 1000, big + 1000),
                   -EINVAL);
  assert_string_equal(c.etcd, "short");
  /* A member holding "" keeps it. */
  assert_int_equal(rdzv_config_set(&c, &c.job, "%s", big), -EINVAL);
  assert_string_equal(c.job, "");

  rdzv_config_free(&c);
  assert_all_empty(&c);
}

static void test_copy_and_free(void **state) {
  (void)state;
  struct rdzv_daemon_config src, dst;
  char err[512];
  assert_int_equal(parse(&src, err, sizeof(err), "--allow-uids", "0,12345",
                         "--max-value-bytes", "4242", NULL),
                   0);
  assert_int_equal(src.nallow_uids, 2);
  /* Every string member its own non-empty value. */
  for (size_t i = 0; i < NSTR; i++)
    assert_int_equal(rdzv_config_set(&src, member(&src, i), "v-%zu-%s", i,
                                     str_members[i].name),
                     0);
  memset(&dst, 0xa5, sizeof(dst)); /* uninitialized */
  assert_int_equal(rdzv_config_copy(&dst, &src), 0);
  for (size_t i = 0; i < NSTR; i++) {
    assert_non_null(*member(&dst, i));
    assert_string_equal(*member(&dst, i), *member(&src, i));
    if (*member(&dst, i) == *member(&src, i))
      fail_msg("the copy shares member %s with its source",
               str_members[i].name);
  }
  assert_int_equal(dst.max_value_bytes, 4242);
  assert_int_equal(dst.nallow_uids, 2);
  assert_int_equal(dst.allow_uid[0], 0);
  assert_int_equal(dst.allow_uid[1], 12345);
  assert_int_equal(dst.role, src.role);

  /* Freeing the source: every member "", the copy intact (ASan would see
   * a use after free). */
  rdzv_config_free(&src);
  assert_all_empty(&src);
  for (size_t i = 0; i < NSTR; i++) {
    char want[64];
    snprintf(want, sizeof(want), "v-%zu-%s", i, str_members[i].name);
    assert_string_equal(*member(&dst, i), want);
  }
  /* A second free is harmless. */
  rdzv_config_free(&src);
  assert_all_empty(&src);

  /* A copy of a freed config: all "", nothing to free but harmless. */
  struct rdzv_daemon_config empty_copy;
  assert_int_equal(rdzv_config_copy(&empty_copy, &src), 0);
  assert_all_empty(&empty_copy);
  rdzv_config_free(&empty_copy);

  rdzv_config_free(&dst);
  assert_all_empty(&dst);
  rdzv_config_free(&dst);
  assert_all_empty(&dst);

  /* A config of zeros: free is harmless and leaves "" everywhere; so is
   * a copy of it. */
  struct rdzv_daemon_config z, zc;
  memset(&z, 0, sizeof(z));
  assert_int_equal(rdzv_config_copy(&zc, &z), 0);
  assert_all_empty(&zc);
  rdzv_config_free(&zc);
  rdzv_config_free(&z);
  assert_all_empty(&z);
  rdzv_config_free(&z);
}

static void test_failed_parse_frees(void **state) {
  (void)state;
  struct rdzv_daemon_config c;
  char err[512];
  /* Strings already set when the unknown option is met. */
  assert_int_equal(parse(&c, err, sizeof(err), "--name", "n", "--unix",
                         "/tmp/x.sock", "--no-such-option", "1", NULL),
                   -EINVAL);
  assert_non_null(strstr(err, "--no-such-option"));
  rdzv_config_free(&c);
  assert_all_empty(&c);
  rdzv_config_free(&c);

  /* Other failures at each stage: argv, --parent's split, --allow-uids,
   * the checks made together. */
  static const char *const cases[][6] = {
      {"--name", NULL},               /* needs a value */
      {"stray", NULL},                /* not an option */
      {"--max-key-bytes", "x", NULL}, /* not a number */
      {"--role", "node", "--parent", "unix:/p,bad", NULL},
      {"--allow-uids", "0,,1", NULL},
      {"--etcd", "http://e:1", "--etcd-prefix=", NULL},
      {"--listen", "nohost", NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(parse(&c, err, sizeof(err), cases[i][0], cases[i][1],
                           cases[i][2], cases[i][3], cases[i][4], cases[i][5]),
                     -EINVAL);
    if (err[0] == '\0')
      fail_msg("case %zu (%s): no error text", i, cases[i][0]);
    rdzv_config_free(&c);
    assert_all_empty(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_defaults, clear_rdzvd_env),
      cmocka_unit_test_setup(test_argv_values, clear_rdzvd_env),
      cmocka_unit_test_setup(test_help, clear_rdzvd_env),
      cmocka_unit_test_setup(test_environment, clear_rdzvd_env),
      cmocka_unit_test_setup(test_limits, clear_rdzvd_env),
      cmocka_unit_test_setup(test_parent_split, clear_rdzvd_env),
      cmocka_unit_test_setup(test_tcpstore_defaults, clear_rdzvd_env),
      cmocka_unit_test_setup(test_set, clear_rdzvd_env),
      cmocka_unit_test_setup(test_copy_and_free, clear_rdzvd_env),
      cmocka_unit_test_setup(test_failed_parse_frees, clear_rdzvd_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
