/* rdzvd assembled: the transport, the role chosen by the configuration
 * (the root with its state backend, or the node), and the front ends. The
 * only file that names both the transport and the roles. */
#include "store/daemon/daemon.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "store/daemon/durable/durable.h"
#include "store/daemon/http/http.h"
#include "store/daemon/node/node.h"
#include "store/daemon/root/root.h"
#include "store/daemon/state/mem.h"
#include "store/daemon/tcpstore/spaces.h"
#include "store/daemon/tcpstore/tcpstore.h"
#include "store/daemon/transport/transport.h"

/* The parts beside the transport, stopped first when the daemon stops
 * (the transport's one stop hook): operators' HTTP, then the TCPStore
 * front ends (their in-process connections go before the transport closes
 * the rest), then an etcd-backed root's persistence (what waits to be
 * persisted is dropped, and the lease is given back). */
struct parts {
  struct daemon *d;
  struct rdzv_http *http;       /* --http-listen, or NULL */
  struct ts_server *ts;         /* --tcpstore-listen, or NULL */
  struct ts_spaces *spaces;     /* --tcpstore-spaces, or NULL */
  struct rdzv_durable *durable; /* --etcd, or NULL */
  struct upstream *probe;       /* a node's probe of its parent, while it
                                   runs (node.h) */
  bool http_port_written;       /* --http-port-file: removed at the stop */
};

static void parts_stop_hook(void *arg) {
  struct parts *p = arg;
  rdzv__http_stop(p->http);
  if (p->http_port_written) /* a script must not find a stale port */
    unlink(p->d->cfg.http_port_file);
  p->d->ts_space = NULL; /* requests from here on are refused */
  rdzv__tcpstore_stop(p->ts);
  rdzv__ts_spaces_stop(p->spaces);
  if (p->durable != NULL)
    rdzv__durable_stop(p->durable);
  rdzv__upstream_destroy(p->probe, false);
  free(p);
}

/* /readyz's checks beyond the loop's: the role's, and an etcd-backed
 * root's. */
static void parts_checks(void *arg, struct rdzv_checks *cs) {
  struct parts *p = arg;
  if (p->d->role->checks != NULL)
    p->d->role->checks(p->d, cs);
  if (p->durable != NULL)
    rdzv__durable_checks(p->durable, cs);
}

/* --max-connections above the process's open-file limit cannot be kept:
 * the kernel refuses accepts first (EMFILE). Said at start. */
static void warn_fd_limit(struct daemon *d) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return;
  /* Listeners, the loop's own descriptors, a node's parent connections. */
  uint64_t reserve = 32;
  if ((uint64_t)d->cfg.max_connections + reserve > (uint64_t)rl.rlim_cur)
    rdzv__log(d, 0,
              "warning: --max-connections %u is above what the open-file "
              "limit allows (ulimit -n %llu): connections past about %llu "
              "will be refused by the kernel",
              d->cfg.max_connections, (unsigned long long)rl.rlim_cur,
              (unsigned long long)(rl.rlim_cur > reserve ? rl.rlim_cur - reserve
                                                         : 0));
}

int rdzv_daemon_start(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                      struct daemon **out) {
  const struct rdzv_role *role;
  void *role_ctx = NULL;
  struct rdzv_durable *du = NULL;
  if (cfg->role == RDZV_DAEMON_ROOT && cfg->etcd[0] != '\0') {
    int rc = rdzv__durable_new(loop, cfg, &du);
    if (rc < 0) {
      *out = NULL;
      return rc;
    }
    role = &rdzv__root_role;
    role_ctx = (void *)rdzv__durable_backend(du);
  } else if (cfg->role == RDZV_DAEMON_ROOT) {
    role = &rdzv__root_role;
    role_ctx = (void *)&rdzv__state_mem;
  } else {
    role = &rdzv__node_role;
  }
  struct daemon *d = NULL;
  int rc = rdzv__transport_start(loop, cfg, role, role_ctx, &d);
  *out = d;
  if (d == NULL) {
    rdzv__durable_free(du);
    return rc;
  }
  if (rc < 0) { /* the transport stopped d already, hooks and all */
    rdzv__durable_free(du);
    return rc;
  }
  struct parts *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    rdzv__durable_free(du);
    rdzv_daemon_stop(d);
    return RDZV_ENOMEM;
  }
  p->d = d;
  p->durable = du;
  d->stop_hook = parts_stop_hook;
  d->stop_hook_arg = p;
  if (du != NULL)
    rdzv__durable_attach(du, d);
  /* An etcd-backed root serves no TCPStore (config.c refuses
   * --tcpstore-listen there). */
  if (rc == 0 && du == NULL && cfg->tcpstore_listen[0] != '\0')
    rc = rdzv__tcpstore_start(d, cfg->tcpstore_listen, cfg->tcpstore_job,
                              cfg->tcpstore_port_file, &p->ts);
  if (rc == 0 && du == NULL && cfg->tcpstore_spaces > 0) {
    rc = rdzv__ts_spaces_new(d, cfg->tcpstore_spaces, &p->spaces);
    d->ts_space = rdzv__ts_spaces_request;
    d->ts_space_arg = p->spaces;
  }
  if (rc == 0 && cfg->http_listen[0] != '\0')
    rc = rdzv__http_start(d, cfg->http_listen, parts_checks, p, &p->http);
  if (rc == 0 && p->http != NULL && cfg->http_port_file[0] != '\0') {
    rc = rdzv__write_port_file(cfg->http_port_file, rdzv__http_port(p->http));
    p->http_port_written = rc == 0;
    if (rc < 0)
      fprintf(stderr, "rdzvd: --http-port-file %s: %s\n", cfg->http_port_file,
              strerror(-rc));
  }
  /* The port is published only once every listener is up: a script that
   * waits for the port file must never find a daemon that gave up. */
  if (rc == 0 && d->have_tcp && cfg->port_file[0] != '\0') {
    rc = rdzv__write_port_file(cfg->port_file, rdzv__transport_tcp_port(d));
    d->port_file_written = rc == 0;
    if (rc < 0)
      fprintf(stderr, "rdzvd: --port-file %s: %s\n", cfg->port_file,
              strerror(-rc));
  }
  if (rc < 0) {
    rdzv_daemon_stop(d); /* the caller runs the loop to close handles */
    return rc;
  }
  d->started = true;
  if (role == &rdzv__node_role && cfg->parent[0] != '\0')
    rdzv__node_probe(d, &p->probe);
  const char *mutant = getenv("RDZVD_TEST_MUTANT");
  if (mutant != NULL && strcmp(mutant, "serve-expired") == 0) {
    d->mutant_serve_expired = true;
    rdzv__log(d, 0,
              "RDZVD_TEST_MUTANT=serve-expired: this daemon answers "
              "from copies past their lease (a test's deliberate fault; "
              "never in production)");
  }
  rdzv__log(d, 1, "%s listening on tcp:%s%s%s", role->name,
            d->have_tcp ? d->bound_addr : "(none)",
            d->have_unix ? " and unix:" : "",
            d->have_unix ? cfg->unix_path : "");
  return 0;
}

static void close_noop(uv_handle_t *h) { (void)h; }

/* Signals that would end the process by default but mean nothing to a
 * daemon (a terminal hanging up, a stray kill -USR1, timers of a
 * profiler): logged and ignored, so they cannot abort a job silently. */
static const int ignored_signals[] = {SIGHUP,  SIGUSR1, SIGUSR2,
                                      SIGALRM, SIGPROF, SIGVTALRM};
#define NIGNORED (sizeof(ignored_signals) / sizeof(ignored_signals[0]))

struct run_ctx {
  struct daemon *d;
  uv_signal_t sigint, sigterm;
  uv_signal_t ignored[NIGNORED];
};

static void on_signal(uv_signal_t *s, int signum) {
  struct run_ctx *r = s->data;
  rdzv__log(r->d, 1, "received %s", strsignal(signum));
  rdzv_daemon_stop(r->d);
  uv_close((uv_handle_t *)&r->sigint, close_noop);
  uv_close((uv_handle_t *)&r->sigterm, close_noop);
  for (size_t i = 0; i < NIGNORED; i++)
    uv_close((uv_handle_t *)&r->ignored[i], close_noop);
}

static void on_ignored_signal(uv_signal_t *s, int signum) {
  struct run_ctx *r = s->data;
  rdzv__log(r->d, 1, "%s (signal %d): ignored", strsignal(signum), signum);
}

/* A fatal signal (a crash) is said on stderr before the process dies of
 * it, with async-signal-safe calls only. */
static void on_fatal_signal(int signum) {
  static const char head[] = "rdzvd: fatal signal ";
  char num[4];
  int n = 0;
  for (int v = signum; v > 0 && n < 3; v /= 10)
    num[n++] = (char)('0' + v % 10);
  ssize_t rc = write(2, head, sizeof(head) - 1);
  while (n > 0 && rc >= 0)
    rc = write(2, &num[--n], 1);
  rc = write(2, "\n", 1);
  (void)rc;
  signal(signum, SIG_DFL);
  raise(signum);
}

static void catch_fatal_signals(void) {
  static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
    sigaction(fatal[i], &sa, NULL);
}

int rdzv_daemon_run(const struct rdzv_daemon_config *cfg) {
  /* libuv writes with write(2): a peer that hung up must cost an EPIPE on
   * that connection, not the process. */
  signal(SIGPIPE, SIG_IGN);
  catch_fatal_signals();
  uv_loop_t *loop = uv_default_loop();
  struct run_ctx r = {0};
  /* Caught before the start writes the port file: a launcher that reads
   * it and stops the daemon at once gets a clean stop, not a default
   * death (the signal waits for the loop). */
  uv_signal_init(loop, &r.sigint);
  uv_signal_init(loop, &r.sigterm);
  r.sigint.data = r.sigterm.data = &r;
  uv_signal_start(&r.sigint, on_signal, SIGINT);
  uv_signal_start(&r.sigterm, on_signal, SIGTERM);
  for (size_t i = 0; i < NIGNORED; i++) {
    uv_signal_init(loop, &r.ignored[i]);
    r.ignored[i].data = &r;
    uv_signal_start(&r.ignored[i], on_ignored_signal, ignored_signals[i]);
  }
  int rc = rdzv_daemon_start(loop, cfg, &r.d);
  if (rc == 0) {
    warn_fd_limit(r.d); /* the process's own limit: rdzvd's alone here */
  } else {
    uv_close((uv_handle_t *)&r.sigint, close_noop);
    uv_close((uv_handle_t *)&r.sigterm, close_noop);
    for (size_t i = 0; i < NIGNORED; i++)
      uv_close((uv_handle_t *)&r.ignored[i], close_noop);
  }
  uv_run(loop, UV_RUN_DEFAULT); /* until stopped; then close callbacks */
  uv_loop_close(loop);
  rdzv_daemon_free(r.d);
  return rc;
}
