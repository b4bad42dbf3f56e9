/* rdzvd options: the one place where configuration is read: the option
 * table, defaults, the environment and argv, --help. Checking the values
 * (addresses, uids, how they go together) is config_check.c's. */
#include "store/daemon/config.h"
#include "store/daemon/config_int.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

/* OPT_BOOL: a flag, given alone (--tcpstore-remote) or as
 * --flag=yes|no|true|false|1|0 (the environment: the same words, "" no). */
enum opt_kind { OPT_STR, OPT_U32, OPT_ROLE, OPT_COUNT, OPT_BOOL };

struct opt {
  const char *name;
  const char *env;
  const char *def;
  enum opt_kind kind;
  size_t off;
  size_t size;
  const char *help;
};

/* size: a string option's longest value in bytes (without the NUL). */
#define STR_OPT(n, e, d, field, max, h)                                        \
  { n, e, d, OPT_STR, offsetof(struct rdzv_daemon_config, field), max, h }
#define U32_OPT(n, e, d, field, h)                                             \
  { n, e, d, OPT_U32, offsetof(struct rdzv_daemon_config, field), 4, h }

static const struct opt opts[] = {
    {"role", "RDZVD_ROLE", "root", OPT_ROLE,
     offsetof(struct rdzv_daemon_config, role), 4,
     "root (holds the truth) or node (agent with one parent)"},
    STR_OPT(
        "listen", "RDZVD_LISTEN", "127.0.0.1:0", listen, RDZV_CONFIG_STR_MAX,
        "TCP HOST:PORT for ranks and child nodes; port 0 = kernel's choice; "
        "HOST:FIRST-LAST = the first free port of the range (at most 64)"),
    STR_OPT("unix", "RDZVD_UNIX", "", unix_path, RDZV_CONFIG_STR_MAX,
            "Unix socket path for local ranks (empty: none)"),
    STR_OPT("allow-uids", "RDZVD_ALLOW_UIDS", "", allow_uids,
            RDZV_CONFIG_UIDS_MAX,
            "the uids whose processes may connect to the Unix socket, besides "
            "this daemon's own uid and root: comma-separated numeric uids or "
            "user names (at most 64); any other peer gets RDZV_EAUTH "
            "(SO_PEERCRED). The socket is 0600 when no other uid is allowed, "
            "else 0666"),
    STR_OPT(
        "parent", "RDZVD_PARENT", "", parent, RDZV_CONFIG_LIST_MAX,
        "node: parent address (HOST:PORT or unix:PATH); optionally followed "
        "by the ancestors up to the root, comma-separated, nearest first "
        "(where to reattach if the parent is lost before it told them); "
        "HOST:FIRST-LAST tries each port of the range in turn (a parent "
        "started with --listen HOST:FIRST-LAST and --job)"),
    STR_OPT("port-file", "RDZVD_PORT_FILE", "", port_file, RDZV_CONFIG_STR_MAX,
            "write the bound TCP port here once listening"),
    STR_OPT("name", "RDZVD_NAME", "", name, RDZV_CONFIG_NAME_MAX,
            "name in logs (default host:pid)"),
    U32_OPT("max-key-bytes", "RDZVD_MAX_KEY_BYTES", "4096", max_key_bytes,
            "longest key, bytes"),
    U32_OPT("max-value-bytes", "RDZVD_MAX_VALUE_BYTES", "16777216",
            max_value_bytes, "largest value, bytes"),
    U32_OPT("max-frame-bytes", "RDZVD_MAX_FRAME_BYTES", "67108864",
            max_frame_bytes, "largest frame body, bytes"),
    U32_OPT("max-hello-bytes", "RDZVD_MAX_HELLO_BYTES", "65536",
            max_hello_bytes,
            "largest frame body before a peer's hello is admitted (the hello, "
            "its proof), bytes (>= 1024): what a stranger may make this "
            "daemon hold"),
    U32_OPT("max-job-bytes", "RDZVD_MAX_JOB_BYTES", "0", max_job_bytes,
            "root: the most one job may hold (keys, values, records, pending "
            "contributions), bytes; a write past it fails with RDZV_EJOB_FULL "
            "(0: no cap)"),
    U32_OPT("max-outstanding", "RDZVD_MAX_OUTSTANDING", "65536",
            max_outstanding, "outstanding requests per connection"),
    U32_OPT("max-connections", "RDZVD_MAX_CONNECTIONS", "16384",
            max_connections, "open connections"),
    U32_OPT("backlog", "RDZVD_BACKLOG", "4096", backlog, "listen backlog"),
    U32_OPT("flush-ms", "RDZVD_FLUSH_MS", "2", flush_ms,
            "node: forward combined adds/collectives after this quiet time"),
    U32_OPT("flush-max-ms", "RDZVD_FLUSH_MAX_MS", "20", flush_max_ms,
            "node: never hold a combined contribution longer than this"),
    {"children", "RDZVD_CHILDREN", "auto", OPT_COUNT,
     offsetof(struct rdzv_daemon_config, children), 4,
     "node: how many child nodes each job has below this one (the tree's "
     "shape, e.g. from rdzvctl tree-position), 0 .. 65536; with it a node "
     "forwards a round's joins the moment its own ranks (each host's local "
     "size) and every child's subtree have joined, not after --flush-ms; "
     "auto: not known"},
    {"local-ranks", "RDZVD_LOCAL_RANKS", "auto", OPT_COUNT,
     offsetof(struct rdzv_daemon_config, local_ranks), 4,
     "node: how many ranks each job has on this node, 0 .. 65536 (0: a "
     "node that only relays); auto: each join record's local size, and a "
     "node whose ranks have not joined yet waits for them (with "
     "--children)"},
    STR_OPT("secret-file", "RDZVD_SECRET_FILE", "", secret_file,
            RDZV_CONFIG_STR_MAX,
            "the job secret: a file (no access for others, 16..1024 bytes) "
            "whose secret every peer must prove in its hello, and that a "
            "node's parent must prove to it (HMAC-SHA256 challenge and "
            "response; with --job, that job's; else every job's); empty: no "
            "authentication"),
    STR_OPT("secret-dir", "RDZVD_SECRET_DIR", "", secret_dir,
            RDZV_CONFIG_STR_MAX,
            "one secret file per job: DIR/<job id>, read at each hello (a "
            "root that serves many jobs; a Kubernetes Secret volume); a job "
            "without a file there is refused as a wrong secret is"),
    STR_OPT("tls-dir", "RDZVD_TLS_DIR", "", tls_dir, RDZV_CONFIG_STR_MAX,
            "TLS on every TCP link to and from this daemon (its listener, "
            "its parent): DIR/tls.crt, DIR/tls.key and DIR/ca.crt (a "
            "Kubernetes TLS Secret with its CA), for what --tls-cert, "
            "--tls-key and --tls-ca do not give; empty: plain TCP "
            "(tools/tls-certs.sh makes a test cluster's)"),
    STR_OPT("tls-cert", "RDZVD_TLS_CERT", "", tls_cert, RDZV_CONFIG_STR_MAX,
            "TLS: this daemon's certificate chain (PEM), shown to every "
            "peer: to ranks as a server, to its parent as a client (a "
            "daemon's peer must show one of the CA)"),
    STR_OPT("tls-key", "RDZVD_TLS_KEY", "", tls_key, RDZV_CONFIG_STR_MAX,
            "TLS: the private key of --tls-cert (PEM)"),
    STR_OPT("tls-ca", "RDZVD_TLS_CA", "", tls_ca, RDZV_CONFIG_STR_MAX,
            "TLS: the CA (PEM) every peer's certificate must chain to (a "
            "certificate of another CA, expired or none is refused; ranks "
            "may come without one)"),
    U32_OPT("hello-timeout-ms", "RDZVD_HELLO_TIMEOUT_MS", "10000",
            hello_timeout_ms, "drop a connection that sends no hello"),
    U32_OPT("job-linger-ms", "RDZVD_JOB_LINGER_MS", "30000", job_linger_ms,
            "free a job (keys, rounds, caches, its upstream connection) this "
            "long after its last connection closed"),
    U32_OPT("upstream-timeout-ms", "RDZVD_UPSTREAM_TIMEOUT_MS", "10000",
            upstream_timeout_ms,
            "node: a request that cannot reach the parent this long fails, "
            "naming the parent and why"),
    U32_OPT("upstream-wait-max-ms", "RDZVD_UPSTREAM_WAIT_MAX_MS", "60000",
            upstream_wait_max_ms,
            "node: a wait is asked of the parent for at most this long, then "
            "again while a local waiter remains (abandoned waits end)"),
    U32_OPT("dedup-window-ms", "RDZVD_DEDUP_WINDOW_MS", "60000",
            dedup_window_ms,
            "root: a mutation sent again by a node (after a lost connection) "
            "within this long is answered as the first time, not applied "
            "twice"),
    U32_OPT("session-grace-ms", "RDZVD_SESSION_GRACE_MS", "5000",
            session_grace_ms,
            "a child node whose connection closed keeps its ranks' places in "
            "their generation this long, for its subtree to reattach and send "
            "them again; then the generation aborts, naming the hosts and "
            "ranks (0: at once)"),
    U32_OPT("spare-wait-ms", "RDZVD_SPARE_WAIT_MS", "10000", spare_wait_ms,
            "root: a generation with spares waiting waits this long from its "
            "opening for the previous world's hosts (or, first, the active "
            "ones) before spares take the places still empty"),
    STR_OPT("health-cmd", "RDZVD_HEALTH_CMD", "", health_cmd,
            RDZV_CONFIG_LIST_MAX,
            "node: a host-local health check, run with /bin/sh -c before the "
            "node forwards a host's join (once per generation; environment: "
            "RDZV_HEALTH_HOST, RDZV_JOB, RDZV_ROUND); exit 0 admits the host, "
            "anything else (or no verdict within --health-timeout-ms) has "
            "the root quarantine it for the job, with the output's last line "
            "as the reason (empty: no gate)"),
    U32_OPT("health-timeout-ms", "RDZVD_HEALTH_TIMEOUT_MS", "30000",
            health_timeout_ms,
            "node: a health check that has not exited after this long is "
            "killed (its process group) and fails"),
    U32_OPT("heartbeat-ms", "RDZVD_HEARTBEAT_MS", "1000", heartbeat_ms,
            "node: ping the parent after this long without a frame from it"),
    U32_OPT("liveness-timeout-ms", "RDZVD_LIVENESS_TIMEOUT_MS", "5000",
            liveness_timeout_ms,
            "a parent or child node silent this long (stopped, wedged, cut "
            "off) is lost: its connection is closed and what it carried fails, "
            "naming it"),
    {"cache-mutable", "RDZVD_CACHE_MUTABLE", "yes", OPT_BOOL,
     offsetof(struct rdzv_daemon_config, cache_mutable), sizeof(bool),
     "nodes keep copies of mutable keys (values and absences) registered "
     "with their parent, which invalidates them before a write is "
     "acknowledged: reads and checks answered on the host, linearizable "
     "(no: every read of a mutable key goes to the root)"},
    U32_OPT("copy-lease-ms", "RDZVD_COPY_LEASE_MS", "0", copy_lease_ms,
            "how long a parent's ping reply lets a node answer from its "
            "copies (0: half of --liveness-timeout-ms; must be less); a write "
            "waits at most this long for a silent holder"),
    U32_OPT("copy-cooldown-ms", "RDZVD_COPY_COOLDOWN_MS", "1000",
            copy_cooldown_ms,
            "a key written while copies of it were held is not granted again "
            "this long (counters and state keys written as often as read)"),
    U32_OPT("max-copies", "RDZVD_MAX_COPIES", "1000000", max_copies,
            "copies of mutable keys one job may keep at a node, and keys with "
            "copies registered at a parent; past it none is kept or granted "
            "(reads go up), so keys read once and never written do not grow a "
            "daemon without bound"),
    STR_OPT("log-format", "RDZVD_LOG_FORMAT", "text", log_format, 8,
            "text (rdzvd[NAME] ...) or json: one object a line with time, "
            "level, daemon, role, job (a line about one job), event (a "
            "rate-limited kind) and msg"),
    U32_OPT("log-level", "RDZVD_LOG_LEVEL", "1", log_level,
            "0 errors, 1 info, 2 debug"),
    STR_OPT("tcpstore-listen", "RDZVD_TCPSTORE_LISTEN", "", tcpstore_listen,
            RDZV_CONFIG_STR_MAX,
            "serve PyTorch c10d TCPStore clients on PORT (127.0.0.1:PORT) or "
            "HOST:PORT, a loopback HOST unless --tcpstore-remote (empty: no)"),
    {"tcpstore-remote", "RDZVD_TCPSTORE_REMOTE", "no", OPT_BOOL,
     offsetof(struct rdzv_daemon_config, tcpstore_remote), sizeof(bool),
     "let --tcpstore-listen name a non-loopback HOST: PyTorch's TCPStore "
     "protocol has no authentication, so anyone who reaches that port can "
     "read and write the job's keys (warned at start)"},
    STR_OPT("tcpstore-job", "RDZVD_TCPSTORE_JOB", "", tcpstore_job,
            RDZV_CONFIG_STR_MAX,
            "the job whose keys TCPStore clients read and write (default: "
            "--job)"),
    STR_OPT("etcd", "RDZVD_ETCD", "", etcd, RDZV_CONFIG_LIST_MAX,
            "root: persist job state in etcd at these comma-separated URLs "
            "(http:// or https://) before acknowledging; several roots with "
            "the same --etcd elect one leader, the others stand by (empty: "
            "the in-memory root)"),
    STR_OPT("etcd-prefix", "RDZVD_ETCD_PREFIX", "rdzv", etcd_prefix,
            RDZV_CONFIG_STR_MAX,
            "root: etcd key prefix of this service (leader key, jobs)"),
    STR_OPT("etcd-credentials", "RDZVD_ETCD_CREDENTIALS", "", etcd_credentials,
            RDZV_CONFIG_STR_MAX,
            "root: file holding etcd's USER:PASSWORD (empty: no auth)"),
    STR_OPT("etcd-ca", "RDZVD_ETCD_CA", "", etcd_ca, RDZV_CONFIG_STR_MAX,
            "root: CA bundle (PEM) for https:// etcd endpoints"),
    STR_OPT("etcd-cert", "RDZVD_ETCD_CERT", "", etcd_cert, RDZV_CONFIG_STR_MAX,
            "root: client certificate (PEM) for etcd"),
    STR_OPT("etcd-key", "RDZVD_ETCD_KEY", "", etcd_key, RDZV_CONFIG_STR_MAX,
            "root: client certificate's key (PEM) for etcd"),
    STR_OPT("advertise", "RDZVD_ADVERTISE", "", advertise, RDZV_CONFIG_STR_MAX,
            "root with --etcd: HOST:PORT nodes reach this root at (default: "
            "the bound --listen address)"),
    U32_OPT("etcd-lease-ttl-s", "RDZVD_ETCD_LEASE_TTL_S", "15",
            etcd_lease_ttl_s,
            "root: TTL of the leader's etcd lease, seconds; etcd trouble "
            "shorter than this is ridden out (a 10 s outage at the default), "
            "longer ends the leadership; a killed leader is replaced after "
            "at most this long"),
    U32_OPT("etcd-job-ttl-s", "RDZVD_ETCD_JOB_TTL_S", "600", etcd_job_ttl_s,
            "root: TTL of a job's state in etcd once no root keeps it alive, "
            "seconds"),
    U32_OPT("etcd-timeout-ms", "RDZVD_ETCD_TIMEOUT_MS", "2000", etcd_timeout_ms,
            "root: timeout of one etcd request, ms"),
    U32_OPT("etcd-max-txn-ops", "RDZVD_ETCD_MAX_TXN_OPS", "128",
            etcd_max_txn_ops,
            "root: operations per etcd transaction at most (etcd's "
            "--max-txn-ops)"),
    U32_OPT("etcd-max-request-bytes", "RDZVD_ETCD_MAX_REQUEST_BYTES", "1048576",
            etcd_max_request_bytes,
            "root: bytes per etcd transaction at most (below etcd's "
            "--max-request-bytes, 1.5 MiB by default)"),
    U32_OPT("tcpstore-spaces", "RDZVD_TCPSTORE_SPACES", "64", tcpstore_spaces,
            "TCPStore key spaces a client may open, each a listener on "
            "127.0.0.1 whose keys live under a prefix of its job (torchrun's "
            "rdzv handler gives each restart round's workers one); 0: none"),
    STR_OPT("tcpstore-port-file", "RDZVD_TCPSTORE_PORT_FILE", "",
            tcpstore_port_file, RDZV_CONFIG_STR_MAX,
            "write the TCPStore port here once listening"),
    STR_OPT("job", "RDZVD_JOB", "", job, RDZV_CONFIG_STR_MAX,
            "serve child nodes of this job id only: a child node's hello "
            "naming another is refused with RDZV_EJOB_MISMATCH, and that child "
            "tries its parent's next address or port (a launcher that starts "
            "one daemon per job on shared hosts; empty: any job)"),
    STR_OPT("http-listen", "RDZVD_HTTP_LISTEN", "", http_listen,
            RDZV_CONFIG_STR_MAX,
            "serve operators over HTTP on HOST:PORT: /metrics (Prometheus "
            "text), /livez, /readyz (?verbose), /health and /status (the "
            "stats JSON); no authentication, so a loopback or cluster-internal "
            "address (empty: none)"),
    STR_OPT("http-port-file", "RDZVD_HTTP_PORT_FILE", "", http_port_file,
            RDZV_CONFIG_STR_MAX,
            "write the HTTP port here (atomically) once listening (with "
            "--http-listen HOST:0, where several daemons share a host)"),
    U32_OPT("http-max-connections", "RDZVD_HTTP_MAX_CONNECTIONS", "16",
            http_max_connections,
            "HTTP connections open at once (>= 1); more wait in the backlog"),
    U32_OPT("http-max-connections-per-ip", "RDZVD_HTTP_MAX_CONNECTIONS_PER_IP",
            "4", http_max_connections_per_ip,
            "HTTP connections one client address may hold (0: no limit of "
            "its own; more than --http-max-connections counts as that); more "
            "are closed at once, so a flood from one address leaves room for "
            "the probes"),
    U32_OPT("http-timeout-ms", "RDZVD_HTTP_TIMEOUT_MS", "10000",
            http_timeout_ms,
            "an HTTP connection open this long is closed, ms (>= 1000): idle, "
            "or trickling an unfinished request"),
    U32_OPT("http-max-request-bytes", "RDZVD_HTTP_MAX_REQUEST_BYTES", "16384",
            http_max_request_bytes,
            "memory one HTTP connection may hold for its request's headers "
            "and the reply's, bytes (>= 4096); a request near or past it is "
            "refused (431, or the connection closed)"),
    U32_OPT("connect-timeout-ms", "RDZVD_CONNECT_TIMEOUT_MS", "2000",
            connect_timeout_ms,
            "node: one attempt at one address and port of the parent (connect "
            "and hello) gets this long, then the next address or port is "
            "tried (a dropped SYN costs this, not the kernel's minutes)"),
    U32_OPT("home-after-ms", "RDZVD_HOME_AFTER_MS", "5000", home_after_ms,
            "node: a job's link that reattached to an ancestor (its parent "
            "lost) returns to the parent once the parent has answered this "
            "node's probes for this long without a failure, each saying it "
            "reaches the root itself, and only while nothing but reads and "
            "waits is in flight, sending again what was (each a resend); a "
            "return that fails (the hello refused, the connection lost) "
            "doubles this for the next, up to 32 times; 0: it stays on the "
            "ancestor"),
    U32_OPT("share-min-bytes", "RDZVD_SHARE_MIN_BYTES", "512", share_min_bytes,
            "a value (or a list of values) of at least this many bytes is "
            "written to each connection from the one reference-counted buffer "
            "that holds it, not copied per connection; smaller ones are "
            "copied (cheaper than a reference); 0: every non-empty value by "
            "reference"),
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* What every string member holds when it holds nothing of its own: never
 * freed. */
static const char empty[] = "";

/* The offsets of the config's string members: those of the string options,
 * and ancestors (derived from --parent). */
static size_t str_offsets(size_t *out) {
  size_t n = 0;
  for (size_t i = 0; i < NOPTS; i++)
    if (opts[i].kind == OPT_STR)
      out[n++] = opts[i].off;
  out[n++] = offsetof(struct rdzv_daemon_config, ancestors);
  return n;
}

static const char **str_at(struct rdzv_daemon_config *cfg, size_t off) {
  return (const char **)(void *)((char *)cfg + off);
}

static void str_free(const char *p) {
  if (p != NULL && p != empty)
    free((char *)p);
}

/* *field = a copy of the n bytes at v (empty for n 0). 0 or -ENOMEM (the
 * field unchanged). */
int rdzv__config_str_set(const char **field, const char *v, size_t n) {
  const char *c = empty;
  if (n > 0) {
    char *m = malloc(n + 1);
    if (m == NULL)
      return -ENOMEM;
    memcpy(m, v, n);
    m[n] = '\0';
    c = m;
  }
  str_free(*field);
  *field = c;
  return 0;
}

int rdzv_config_set(struct rdzv_daemon_config *cfg, const char **field,
                    const char *fmt, ...) {
  (void)cfg;
  char buf[RDZV_CONFIG_LIST_MAX + 2];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0 || n > RDZV_CONFIG_LIST_MAX)
    return -EINVAL;
  return rdzv__config_str_set(field, buf, (size_t)n);
}

void rdzv_config_free(struct rdzv_daemon_config *cfg) {
  size_t offs[NOPTS + 1];
  size_t n = str_offsets(offs);
  for (size_t i = 0; i < n; i++) {
    const char **f = str_at(cfg, offs[i]);
    str_free(*f);
    *f = empty;
  }
}

int rdzv_config_copy(struct rdzv_daemon_config *dst,
                     const struct rdzv_daemon_config *src) {
  *dst = *src;
  size_t offs[NOPTS + 1];
  size_t n = str_offsets(offs);
  for (size_t i = 0; i < n; i++)
    *str_at(dst, offs[i]) = empty;
  for (size_t i = 0; i < n; i++) {
    const char *v = *str_at((struct rdzv_daemon_config *)src, offs[i]);
    if (v != NULL &&
        rdzv__config_str_set(str_at(dst, offs[i]), v, strlen(v)) < 0) {
      rdzv_config_free(dst);
      return -ENOMEM;
    }
  }
  return 0;
}

static int set_opt(struct rdzv_daemon_config *cfg, const struct opt *o,
                   const char *v, char *err, size_t errlen) {
  char *base = (char *)cfg + o->off;
  if (o->kind == OPT_STR) {
    size_t n = strlen(v);
    if (n > o->size) {
      snprintf(err, errlen, "--%s: longer than %zu bytes", o->name, o->size);
      return -EINVAL;
    }
    if (rdzv__config_str_set(str_at(cfg, o->off), v, n) < 0) {
      snprintf(err, errlen, "--%s: out of memory", o->name);
      return -ENOMEM;
    }
    return 0;
  }
  if (o->kind == OPT_ROLE) {
    enum rdzv_daemon_role r;
    if (strcmp(v, "root") == 0) {
      r = RDZV_DAEMON_ROOT;
    } else if (strcmp(v, "node") == 0) {
      r = RDZV_DAEMON_NODE;
    } else {
      snprintf(err, errlen, "--role: '%s' is neither root nor node", v);
      return -EINVAL;
    }
    memcpy(base, &r, sizeof(r));
    return 0;
  }
  if (o->kind == OPT_BOOL) {
    bool b;
    if (strcmp(v, "yes") == 0 || strcmp(v, "true") == 0 ||
        strcmp(v, "1") == 0) {
      b = true;
    } else if (strcmp(v, "no") == 0 || strcmp(v, "false") == 0 ||
               strcmp(v, "0") == 0 || v[0] == '\0') {
      b = false;
    } else {
      snprintf(err, errlen, "--%s: '%s' is neither yes nor no", o->name, v);
      return -EINVAL;
    }
    memcpy(base, &b, sizeof(b));
    return 0;
  }
  if (o->kind == OPT_COUNT && strcmp(v, "auto") == 0) {
    uint32_t u = RDZV_CHILDREN_UNKNOWN;
    memcpy(base, &u, sizeof(u));
    return 0;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  bool digit = v[0] >= '0' && v[0] <= '9'; /* no sign, no space */
  if (o->kind == OPT_COUNT &&
      (errno != 0 || end == v || *end != '\0' || x > 65536 || !digit)) {
    snprintf(err, errlen,
             "--%s: '%s' is neither auto nor a number in "
             "0..65536",
             o->name, v);
    return -EINVAL;
  }
  if (errno != 0 || end == v || *end != '\0' || x > UINT32_MAX || !digit) {
    snprintf(err, errlen, "--%s: '%s' is not a number in 0..%u", o->name, v,
             UINT32_MAX);
    return -EINVAL;
  }
  uint32_t u = (uint32_t)x;
  memcpy(base, &u, sizeof(u));
  return 0;
}

static const struct opt *find_opt(const char *name, size_t len) {
  for (size_t i = 0; i < NOPTS; i++)
    if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
      return &opts[i];
  return NULL;
}

void rdzv_config_usage(FILE *out) {
  int wn = 0, we = 0, wd = 2;
  for (size_t i = 0; i < NOPTS; i++) {
    int n = (int)strlen(opts[i].name), e = (int)strlen(opts[i].env),
        d = (int)strlen(opts[i].def);
    wn = n > wn ? n : wn;
    we = e > we ? e : we;
    wd = d > wd ? d : wd;
  }
  fprintf(out,
          "usage: rdzvd [--option value | --option=value]...\n"
          "       rdzvd --help | --version\n\n"
          "rdzvd is rdzv's daemon: the root of a job's tree (--role root, the\n"
          "truth of each job, in memory or on etcd) or a node agent on a host\n"
          "(--role node --parent ADDR: serves that host's ranks, caches,\n"
          "coalesces and combines for them). Every option can also come from\n"
          "its environment variable; the command line wins.\n\n"
          "example: rdzvd --role root --listen 0.0.0.0:29400 &\n"
          "         rdzvd --role node --parent root-host:29400 "
          "--unix /run/rdzv/node.sock\n\n"
          "  %-*s %-*s %-*s  %s\n",
          wn + 2, "option", we, "variable", wd + 8, "default", "meaning");
  for (size_t i = 0; i < NOPTS; i++)
    fprintf(out, "  --%-*s %-*s default %-*s  %s\n", wn, opts[i].name, we,
            opts[i].env, wd, opts[i].def[0] ? opts[i].def : "\"\"",
            opts[i].help);
  fprintf(out, "  --%-*s %-*s %-*s  %s\n", wn, "help", we, "", wd + 8, "",
          "print this text on stdout and exit 0");
  fprintf(out, "  --%-*s %-*s %-*s  %s\n", wn, "version", we, "", wd + 8, "",
          "print the release and the wire protocol version and exit 0");
}

/* Sets each option of argv; given[k] is set for each opts[k] it names. */
static int parse_argv(struct rdzv_daemon_config *cfg, int argc, char **argv,
                      FILE *out, bool *given, char *err, size_t errlen) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      rdzv_config_usage(out);
      return 1;
    }
    if (strncmp(a, "--", 2) != 0) {
      snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
      return -EINVAL;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const struct opt *o = find_opt(name, nlen);
    if (o == NULL) {
      snprintf(err, errlen, "unknown option '%s' (see --help)", a);
      return -EINVAL;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (v == NULL && o->kind == OPT_BOOL)
      v = "yes"; /* a flag alone takes no value */
    if (v == NULL) {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "--%s needs a value", o->name);
        return -EINVAL;
      }
      v = argv[++i];
    }
    given[o - opts] = true;
    int rc = set_opt(cfg, o, v, err, errlen);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* Adds to the message in err where the refused value came from: the
 * variable name, and the value cut to 64 bytes; the message is cut
 * instead of the name when err is short. */
static void env_blame(char *err, size_t errlen, const char *name,
                      const char *v) {
  char why[512], suffix[160];
  snprintf(why, sizeof(why), "%s", err);
  snprintf(suffix, sizeof(suffix), " (from the environment: %s=%.64s%s)", name,
           v, strlen(v) > 64 ? "..." : "");
  size_t sl = strlen(suffix);
  int room = errlen > sl + 1 ? (int)(errlen - sl - 1) : 0;
  snprintf(err, errlen, "%.*s%s", room, why, suffix);
}

int rdzv_config_parse(struct rdzv_daemon_config *cfg, int argc, char **argv,
                      FILE *out, char *err, size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  rdzv_config_free(cfg); /* every string "" */
  for (size_t i = 0; i < NOPTS; i++) {
    int rc = set_opt(cfg, &opts[i], opts[i].def, err, errlen);
    if (rc < 0)
      return rc;
  }
  /* A bad value in the environment counts only if argv does not give
   * that option: an operator's --flag mends a stale variable. */
  bool env_bad[NOPTS], given[NOPTS];
  for (size_t i = 0; i < NOPTS; i++) {
    const char *v = getenv(opts[i].env);
    given[i] = false;
    env_bad[i] = v != NULL && set_opt(cfg, &opts[i], v, err, errlen) < 0;
  }
  int rc = parse_argv(cfg, argc, argv, out, given, err, errlen);
  if (rc != 0)
    return rc;
  for (size_t i = 0; i < NOPTS; i++) {
    if (!env_bad[i] || given[i])
      continue;
    const char *v = getenv(opts[i].env);
    rc = set_opt(cfg, &opts[i], v, err, errlen); /* the error again */
    if (rc < 0) {
      env_blame(err, errlen, opts[i].env, v);
      return rc;
    }
  }
  rc = rdzv__config_split_parent(cfg, err, errlen);
  if (rc != 0)
    return rc;
  rc = rdzv__config_resolve_allow_uids(cfg, err, errlen);
  if (rc != 0) {
    /* Checked once all are read: say if the value came from the
     * environment (argv did not override it). */
    const struct opt *au = find_opt("allow-uids", strlen("allow-uids"));
    const char *ev = getenv(au->env);
    if (ev != NULL && !given[au - opts])
      env_blame(err, errlen, au->env, ev);
    return rc;
  }
  rc = rdzv__config_tcpstore_default_host(cfg);
  /* A daemon of one job serves that job's TCPStore clients. */
  if (rc == 0 && cfg->tcpstore_listen[0] != '\0' &&
      cfg->tcpstore_job[0] == '\0')
    rc = rdzv__config_str_set(&cfg->tcpstore_job, cfg->job, strlen(cfg->job));
  if (rc < 0) {
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  return rdzv__config_check(cfg, err, errlen);
}
