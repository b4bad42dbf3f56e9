/* rdzvd options, checked (config_int.h): addresses, the allowed uids,
 * the TCPStore front end's address, --parent's ancestors, and how the
 * values go together, once config.c has read them all. */
#include "store/daemon/config.h"
#include "store/daemon/config_int.h"
#include "store/wire/addr.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

/* The longest Unix socket path: sun_path less its NUL. */
#define UNIX_PATH_MAX_BYTES (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* unix:PATH, or [tcp:]HOST:PORT (HOST may be [v6]) with PORT 1..65535,
 * or a range of them (store/wire/addr.h). */
static int parent_ok(const char *a) {
  struct rdzv_addr_parts p;
  return rdzv_addr_split(a, RDZV_ADDR_RANGE | RDZV_ADDR_BARE_V6, &p) == 0;
}

/* Splits [tcp:]HOST:PORT (HOST may be [v6]; PORT 0..65535, or a range
 * whose first it gives) into host (brackets dropped) and port; false if
 * it is not one (store/wire/addr.h). */
static bool host_port(const char *a, char *host, size_t hostlen, long *port) {
  struct rdzv_addr_parts p;
  if (rdzv_addr_split(a,
                      RDZV_ADDR_RANGE | RDZV_ADDR_PORT0 | RDZV_ADDR_BARE_V6 |
                          RDZV_ADDR_NO_UNIX,
                      &p) < 0 ||
      rdzv_addr_host(&p, host, hostlen) < 0)
    return false;
  *port = p.port_first;
  return true;
}

static bool is_wildcard(const char *host) {
  return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

bool rdzv_config_host_loopback(const char *host) {
  struct in_addr a4;
  struct in6_addr a6;
  if (strcmp(host, "localhost") == 0)
    return true;
  if (inet_pton(AF_INET, host, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &a6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&a6) ||
           (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  return false;
}

static bool is_loopback(const char *host) {
  return rdzv_config_host_loopback(host);
}

/* One --allow-uids entry: a numeric uid (0 .. 2^32-2; 2^32-1 is the
 * kernel's "no uid") or a user name of this host's user database. */
static int allow_uid_entry(const char *e, uint32_t *uid, char *err,
                           size_t errlen) {
  if (e[0] >= '0' && e[0] <= '9') {
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(e, &end, 10);
    if (errno != 0 || *end != '\0' || x >= UINT32_MAX) {
      snprintf(err, errlen,
               "--allow-uids: '%s' is not a uid in 0..%u (nor a user name)", e,
               UINT32_MAX - 1);
      return -EINVAL;
    }
    *uid = (uint32_t)x;
    return 0;
  }
  struct passwd pw, *res = NULL;
  char buf[4096];
  int rc = getpwnam_r(e, &pw, buf, sizeof(buf), &res);
  if (rc != 0 || res == NULL) {
    snprintf(err, errlen,
             "--allow-uids: '%s' is neither a numeric uid nor a user name "
             "known to this host%s%s",
             e, rc != 0 ? ": " : "", rc != 0 ? strerror(rc) : "");
    return -EINVAL;
  }
  *uid = (uint32_t)pw.pw_uid;
  return 0;
}

/* cfg->allow_uids ("U1,U2,...", "" none) into cfg->allow_uid. Every entry
 * must be one (no empty ones), at most RDZV_MAX_ALLOW_UIDS. 0 or -EINVAL,
 * naming the bad entry. */
int rdzv__config_resolve_allow_uids(struct rdzv_daemon_config *cfg, char *err,
                                    size_t errlen) {
  cfg->nallow_uids = 0;
  const char *p = cfg->allow_uids;
  if (p[0] == '\0')
    return 0;
  for (int i = 1;; i++) {
    const char *comma = strchr(p, ',');
    size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
    char e[256];
    if (n == 0 || n >= sizeof(e)) {
      snprintf(err, errlen, "--allow-uids '%s': entry %d is %s",
               cfg->allow_uids, i, n == 0 ? "empty" : "over 255 bytes");
      return -EINVAL;
    }
    if (cfg->nallow_uids == RDZV_MAX_ALLOW_UIDS) {
      snprintf(err, errlen, "--allow-uids: more than %d entries",
               RDZV_MAX_ALLOW_UIDS);
      return -EINVAL;
    }
    memcpy(e, p, n);
    e[n] = '\0';
    int rc = allow_uid_entry(e, &cfg->allow_uid[cfg->nallow_uids], err, errlen);
    if (rc < 0)
      return rc;
    cfg->nallow_uids++;
    if (comma == NULL)
      return 0;
    p = comma + 1;
  }
}

/* --tcpstore-listen PORT means 127.0.0.1:PORT. */
int rdzv__config_tcpstore_default_host(struct rdzv_daemon_config *cfg) {
  const char *v = cfg->tcpstore_listen;
  if (v[0] == '\0' || strspn(v, "0123456789") != strlen(v))
    return 0;
  return rdzv_config_set(cfg, &cfg->tcpstore_listen, "127.0.0.1:%.200s", v);
}

/* The TCPStore front end's address: HOST:PORT, a loopback HOST unless
 * --tcpstore-remote. 0 or -EINVAL. */
static int check_tcpstore_listen(const struct rdzv_daemon_config *cfg,
                                 char *err, size_t errlen) {
  char host[256];
  long port;
  const char *colon = strrchr(cfg->tcpstore_listen, ':');
  if (!host_port(cfg->tcpstore_listen, host, sizeof(host), &port) ||
      strchr(colon, '-') != NULL ||
      strncmp(cfg->tcpstore_listen, "tcp:", 4) == 0) {
    snprintf(err, errlen,
             "--tcpstore-listen '%s' is neither PORT nor HOST:PORT (PORT "
             "0..65535)",
             cfg->tcpstore_listen);
    return -EINVAL;
  }
  if (!cfg->tcpstore_remote && !is_loopback(host)) {
    snprintf(err, errlen,
             "--tcpstore-listen '%s': %s is not a loopback address "
             "(127.0.0.0/8, ::1, localhost), and PyTorch's TCPStore protocol "
             "has no authentication: anyone who reaches the port could read "
             "and write job %s's keys; give --tcpstore-remote to serve it "
             "there anyway",
             cfg->tcpstore_listen, host,
             cfg->tcpstore_job[0] ? cfg->tcpstore_job : "(none)");
    return -EINVAL;
  }
  return 0;
}

/* Whether a node's --parent is its own --listen address: the same host and
 * port, or a loopback (or the wildcard) host and the port of a wildcard
 * listener. Only the obvious cases: a name of this host other than
 * localhost is not resolved. */
static bool parent_is_self_tcp(const struct rdzv_daemon_config *cfg) {
  char ph[256], lh[256];
  long pp, lp;
  /* A port range may hold another daemon at another of its ports. */
  const char *pc = strrchr(cfg->parent, ':'), *lc = strrchr(cfg->listen, ':');
  if ((pc != NULL && strchr(pc, '-') != NULL) ||
      (lc != NULL && strchr(lc, '-') != NULL))
    return false;
  if (strncmp(cfg->parent, "unix:", 5) == 0 || cfg->listen[0] == '\0' ||
      !host_port(cfg->parent, ph, sizeof(ph), &pp) ||
      !host_port(cfg->listen, lh, sizeof(lh), &lp) || lp == 0 || pp != lp)
    return false;
  if (strcmp(ph, lh) == 0)
    return true;
  if (is_wildcard(lh))
    return is_wildcard(ph) || is_loopback(ph);
  return strcmp(ph, "localhost") == 0 && is_loopback(lh);
}

/* "--parent P,A1,A2": P stays the parent, A1,A2 become the ancestors;
 * each must be an address, the parent at most 255 bytes, at most 16
 * ancestors. 0 or -EINVAL. */
int rdzv__config_split_parent(struct rdzv_daemon_config *cfg, char *err,
                              size_t errlen) {
  const char *comma = strchr(cfg->parent, ',');
  int rc = 0;
  if (comma != NULL) {
    size_t plen = (size_t)(comma - cfg->parent);
    rc = rdzv__config_str_set(&cfg->ancestors, comma + 1, strlen(comma + 1));
    if (rc == 0)
      rc = rdzv__config_str_set(&cfg->parent, cfg->parent, plen);
  } else {
    rc = rdzv__config_str_set(&cfg->ancestors, "", 0);
  }
  if (rc < 0) {
    snprintf(err, errlen, "--parent: out of memory");
    return rc;
  }
  if (strlen(cfg->parent) > 255) {
    snprintf(err, errlen, "--parent: an address is at most 255 bytes");
    return -EINVAL;
  }
  char copy[RDZV_CONFIG_LIST_MAX + 1];
  snprintf(copy, sizeof(copy), "%s", cfg->ancestors);
  int n = 0;
  for (char *save = NULL, *a = strtok_r(copy, ",", &save); a != NULL;
       a = strtok_r(NULL, ",", &save)) {
    if (!parent_ok(a) || strlen(a) > 255 || ++n > 16) {
      snprintf(err, errlen,
               "--parent: ancestor '%.255s' is not unix:PATH or "
               "[tcp:]HOST:PORT of at most 255 bytes (at most 16 ancestors)",
               a);
      return -EINVAL;
    }
  }
  return 0;
}

/* The role: a node's --parent, a root's lack of one, --health-cmd. 0, or
 * -EINVAL with why in err. */
static int check_role(const struct rdzv_daemon_config *cfg, char *err,
                      size_t errlen) {
  if (cfg->role == RDZV_DAEMON_NODE && cfg->parent[0] == '\0') {
    snprintf(err, errlen, "--role node needs --parent ADDR");
    return -EINVAL;
  }
  if (cfg->role == RDZV_DAEMON_NODE && !parent_ok(cfg->parent)) {
    snprintf(err, errlen,
             "--parent '%s' is neither unix:PATH nor [tcp:]HOST:PORT with a "
             "port in 1..65535 (or HOST:FIRST-LAST, at most %d ports)",
             cfg->parent, RDZV_ADDR_MAX_PORT_RANGE);
    return -EINVAL;
  }
  if (cfg->role == RDZV_DAEMON_ROOT && cfg->parent[0] != '\0') {
    snprintf(err, errlen, "--role root takes no --parent");
    return -EINVAL;
  }
  if (cfg->health_cmd[0] != '\0' &&
      cfg->health_cmd[strspn(cfg->health_cmd, " \t\r\n")] == '\0') {
    snprintf(err, errlen,
             "--health-cmd is only blanks: give a command "
             "(exit 0 admits the host) or leave it unset");
    return -EINVAL;
  }
  if (cfg->role == RDZV_DAEMON_ROOT && cfg->health_cmd[0] != '\0') {
    snprintf(err, errlen,
             "--health-cmd is a node's (it gates the joins of "
             "its hosts' ranks): a root takes none");
    return -EINVAL;
  }
  return 0;
}

/* The addresses: the Unix paths' lengths, a node's parent not itself,
 * --listen, --port-file. 0, or -EINVAL with why in err. */
static int check_addresses(const struct rdzv_daemon_config *cfg, char *err,
                           size_t errlen) {
  if (strlen(cfg->unix_path) > UNIX_PATH_MAX_BYTES) {
    snprintf(err, errlen,
             "--unix '%s' is %zu bytes; a Unix socket path holds at most %zu "
             "bytes",
             cfg->unix_path, strlen(cfg->unix_path), UNIX_PATH_MAX_BYTES);
    return -EINVAL;
  }
  if (strncmp(cfg->parent, "unix:", 5) == 0 &&
      strlen(cfg->parent + 5) > UNIX_PATH_MAX_BYTES) {
    snprintf(err, errlen,
             "--parent '%s': the path is %zu bytes; a Unix socket path holds "
             "at most %zu bytes",
             cfg->parent, strlen(cfg->parent + 5), UNIX_PATH_MAX_BYTES);
    return -EINVAL;
  }
  if (cfg->role == RDZV_DAEMON_NODE && strncmp(cfg->parent, "unix:", 5) == 0 &&
      cfg->unix_path[0] != '\0' &&
      strcmp(cfg->parent + 5, cfg->unix_path) == 0) {
    snprintf(err, errlen,
             "--parent '%s' is its own --unix socket: a node's parent must be "
             "another daemon",
             cfg->parent);
    return -EINVAL;
  }
  if (cfg->role == RDZV_DAEMON_NODE && parent_is_self_tcp(cfg)) {
    snprintf(err, errlen,
             "--parent '%s' is its own --listen address (%s): a node's parent "
             "must be another daemon",
             cfg->parent, cfg->listen);
    return -EINVAL;
  }
  if (cfg->listen[0] != '\0') {
    struct rdzv_addr_parts p;
    if (rdzv_addr_split(cfg->listen,
                        RDZV_ADDR_RANGE | RDZV_ADDR_PORT0 | RDZV_ADDR_BARE_V6 |
                            RDZV_ADDR_NO_UNIX,
                        &p) < 0) {
      snprintf(err, errlen,
               "--listen '%s' is not HOST:PORT (PORT 0..65535) or "
               "HOST:FIRST-LAST (1..65535, at most %d ports)",
               cfg->listen, RDZV_ADDR_MAX_PORT_RANGE);
      return -EINVAL;
    }
  }
  if (cfg->port_file[0] != '\0' && cfg->listen[0] == '\0') {
    snprintf(err, errlen,
             "--port-file needs a TCP listener, and --listen is empty");
    return -EINVAL;
  }
  return 0;
}

/* --max-frame-bytes and --log-format. 0, or -EINVAL with why in err. */
static int check_frames_and_log(const struct rdzv_daemon_config *cfg, char *err,
                                size_t errlen) {
  if (cfg->max_frame_bytes < 64) {
    snprintf(err, errlen, "--max-frame-bytes must be at least 64 (got %u)",
             cfg->max_frame_bytes);
    return -EINVAL;
  }
  if (strcmp(cfg->log_format, "text") != 0 &&
      strcmp(cfg->log_format, "json") != 0) {
    snprintf(err, errlen, "--log-format '%s': text or json", cfg->log_format);
    return -EINVAL;
  }
  return 0;
}

/* The HTTP endpoint: --http-listen and its limits. 0, or -EINVAL with why in
 * err. */
static int check_http(const struct rdzv_daemon_config *cfg, char *err,
                      size_t errlen) {
  if (cfg->http_listen[0] != '\0') {
    char host[256];
    long port;
    const char *colon = strrchr(cfg->http_listen, ':');
    if (!host_port(cfg->http_listen, host, sizeof(host), &port) ||
        strchr(colon, '-') != NULL ||
        strncmp(cfg->http_listen, "tcp:", 4) == 0) {
      snprintf(err, errlen,
               "--http-listen '%s' is not HOST:PORT (PORT 0..65535)",
               cfg->http_listen);
      return -EINVAL;
    }
  }
  if (cfg->http_max_connections < 1 || cfg->http_timeout_ms < 1000 ||
      cfg->http_max_request_bytes < 4096) {
    snprintf(err, errlen,
             "--http-max-connections (%u) must be >= 1, "
             "--http-timeout-ms (%u) >= 1000 and --http-max-request-bytes "
             "(%u) >= 4096",
             cfg->http_max_connections, cfg->http_timeout_ms,
             cfg->http_max_request_bytes);
    return -EINVAL;
  }
  return 0;
}

/* The hello's and the keys' size limits. 0, or -EINVAL with why in err. */
static int check_sizes(const struct rdzv_daemon_config *cfg, char *err,
                       size_t errlen) {
  if (cfg->max_hello_bytes < 1024) {
    snprintf(err, errlen,
             "--max-hello-bytes must be at least 1024 (got %u): a hello holds "
             "a job id of up to 255 bytes, a name and a nonce",
             cfg->max_hello_bytes);
    return -EINVAL;
  }
  if (cfg->max_key_bytes == 0) {
    snprintf(err, errlen,
             "--max-key-bytes must be at least 1 (0 would refuse every key)");
    return -EINVAL;
  }
  return 0;
}

/* An etcd-backed root: --etcd and its limits. 0, or -EINVAL with why in err. */
static int check_etcd(const struct rdzv_daemon_config *cfg, char *err,
                      size_t errlen) {
  if (cfg->etcd[0] != '\0' && cfg->role != RDZV_DAEMON_ROOT) {
    snprintf(err, errlen,
             "--etcd is for --role root (a node keeps no "
             "state of its own)");
    return -EINVAL;
  }
  if (cfg->etcd[0] != '\0' &&
      (cfg->etcd_lease_ttl_s < 2 || cfg->etcd_job_ttl_s < 2 ||
       cfg->etcd_max_txn_ops < 2 || cfg->etcd_max_request_bytes < 4096 ||
       cfg->etcd_timeout_ms == 0)) {
    snprintf(err, errlen,
             "--etcd-lease-ttl-s and --etcd-job-ttl-s must be at least 2 "
             "(etcd's shortest lease), --etcd-max-txn-ops at least 2, "
             "--etcd-max-request-bytes at least 4096, --etcd-timeout-ms "
             "above 0");
    return -EINVAL;
  }
  if (cfg->etcd[0] != '\0' && cfg->tcpstore_listen[0] != '\0') {
    snprintf(err, errlen,
             "--tcpstore-listen is not served by an etcd-backed root (a "
             "standby would answer from no state): run it on a node");
    return -EINVAL;
  }
  if (cfg->etcd[0] != '\0' && cfg->etcd_prefix[0] == '\0') {
    snprintf(err, errlen, "--etcd-prefix must not be empty");
    return -EINVAL;
  }
  return 0;
}

/* The secrets: --secret-file or --secret-dir. 0, or -EINVAL with why in err. */
static int check_secrets(const struct rdzv_daemon_config *cfg, char *err,
                         size_t errlen) {
  if (cfg->secret_file[0] != '\0' && cfg->secret_dir[0] != '\0') {
    snprintf(err, errlen,
             "--secret-file and --secret-dir: give one of "
             "them (one secret for every job, or one per job)");
    return -EINVAL;
  }
  return 0;
}

/* The TCPStore front end: --tcpstore-listen and what needs it. 0, or -EINVAL
 * with why in err. */
static int check_tcpstore(const struct rdzv_daemon_config *cfg, char *err,
                          size_t errlen) {
  if (cfg->tcpstore_listen[0] == '\0' &&
      (cfg->tcpstore_job[0] != '\0' || cfg->tcpstore_port_file[0] != '\0')) {
    snprintf(err, errlen,
             "--tcpstore-job and --tcpstore-port-file need "
             "--tcpstore-listen HOST:PORT");
    return -EINVAL;
  }
  if (cfg->tcpstore_listen[0] == '\0' && cfg->tcpstore_remote) {
    snprintf(err, errlen,
             "--tcpstore-remote needs --tcpstore-listen "
             "HOST:PORT");
    return -EINVAL;
  }
  if (cfg->tcpstore_listen[0] != '\0' &&
      check_tcpstore_listen(cfg, err, errlen) < 0)
    return -EINVAL;
  if (cfg->job[0] != '\0' && cfg->tcpstore_job[0] != '\0' &&
      strcmp(cfg->job, cfg->tcpstore_job) != 0) {
    snprintf(err, errlen,
             "--tcpstore-job '%s' is not --job '%s' (this "
             "daemon serves that job only)",
             cfg->tcpstore_job, cfg->job);
    return -EINVAL;
  }
  return 0;
}

/* The counts and times that must not be 0. 0, or -EINVAL with why in err. */
static int check_nonzero(const struct rdzv_daemon_config *cfg, char *err,
                         size_t errlen) {
  /* Values that must not be 0, and what 0 would do. */
  static const struct {
    size_t off;
    const char *name, *why;
  } nonzero[] = {
      {offsetof(struct rdzv_daemon_config, max_connections), "max-connections",
       "refuse every connection"},
      {offsetof(struct rdzv_daemon_config, max_outstanding), "max-outstanding",
       "refuse every request"},
      {offsetof(struct rdzv_daemon_config, hello_timeout_ms),
       "hello-timeout-ms", "drop every connection before its hello"},
      {offsetof(struct rdzv_daemon_config, upstream_wait_max_ms),
       "upstream-wait-max-ms", "ask the parent for no wait at all"},
      {offsetof(struct rdzv_daemon_config, upstream_timeout_ms),
       "upstream-timeout-ms", "fail every request before the parent answers"},
      {offsetof(struct rdzv_daemon_config, heartbeat_ms), "heartbeat-ms",
       "ping the parent without pause"},
      {offsetof(struct rdzv_daemon_config, liveness_timeout_ms),
       "liveness-timeout-ms", "lose every parent and child at once"},
      {offsetof(struct rdzv_daemon_config, connect_timeout_ms),
       "connect-timeout-ms", "give up every connection attempt at once"},
      {offsetof(struct rdzv_daemon_config, health_timeout_ms),
       "health-timeout-ms", "fail every health check before it ran"},
  };
  for (size_t i = 0; i < sizeof(nonzero) / sizeof(nonzero[0]); i++) {
    uint32_t v;
    memcpy(&v, (const char *)cfg + nonzero[i].off, sizeof(v));
    if (v == 0) {
      snprintf(err, errlen, "--%s must be at least 1 (0 would %s)",
               nonzero[i].name, nonzero[i].why);
      return -EINVAL;
    }
  }
  return 0;
}

/* The timers together: liveness, heartbeats, the copy lease, the
 * combining interval. 0, or -EINVAL with why in err. */
static int check_timers(const struct rdzv_daemon_config *cfg, char *err,
                        size_t errlen) {
  if (cfg->role == RDZV_DAEMON_NODE &&
      cfg->liveness_timeout_ms <= cfg->heartbeat_ms) {
    snprintf(err, errlen,
             "--liveness-timeout-ms (%u) must exceed --heartbeat-ms (%u): a "
             "healthy peer would be lost between two heartbeats",
             cfg->liveness_timeout_ms, cfg->heartbeat_ms);
    return -EINVAL;
  }
  if (cfg->copy_lease_ms >= cfg->liveness_timeout_ms) {
    snprintf(err, errlen,
             "--copy-lease-ms (%u) must be less than --liveness-timeout-ms "
             "(%u): a parent closes a silent node only after its lease on "
             "copies has ended",
             cfg->copy_lease_ms, cfg->liveness_timeout_ms);
    return -EINVAL;
  }
  if (cfg->flush_ms > cfg->flush_max_ms) {
    snprintf(err, errlen, "--flush-ms (%u) must not exceed --flush-max-ms (%u)",
             cfg->flush_ms, cfg->flush_max_ms);
    return -EINVAL;
  }
  return 0;
}

/* Checks the values together, once all are read, area by area in this
 * order (the first value found wrong is the one err names). 0 or
 * -EINVAL. */
int rdzv__config_check(const struct rdzv_daemon_config *cfg, char *err,
                       size_t errlen) {
  if (check_role(cfg, err, errlen) < 0 ||
      check_addresses(cfg, err, errlen) < 0 ||
      check_frames_and_log(cfg, err, errlen) < 0 ||
      check_http(cfg, err, errlen) < 0 || check_sizes(cfg, err, errlen) < 0 ||
      check_etcd(cfg, err, errlen) < 0 || check_secrets(cfg, err, errlen) < 0 ||
      check_tcpstore(cfg, err, errlen) < 0 ||
      check_nonzero(cfg, err, errlen) < 0 || check_timers(cfg, err, errlen) < 0)
    return -EINVAL;
  return 0;
}
