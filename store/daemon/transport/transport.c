/* rdzvd transport: the daemon object (start, stop, free), its jobs by id,
 * logging and the small helpers the roles use. Listeners are in listen.c,
 * connections in conn.c (replies conn_send.c, writes flush.c), in-process
 * peers in inproc.c. The role (root or
 * node) is reached only through the struct rdzv_role given at start. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <jansson.h>

#include "store/auth/auth.h"
#include "store/daemon/blob.h"
#include "store/daemon/transport/transport.h"
#include "store/daemon/transport/transport_int.h"

/* One log line on stderr: "rdzvd[NAME] text" ("rdzvd[NAME] job JOB:
 * text" about a job), or with --log-format json one JSON object: {"time"
 * (UTC, RFC 3339, ms), "level" ("error", "info", "debug"), "daemon"
 * (--name), "role", "job" (about a job, else omitted), "event" (a
 * rate-limited kind's name, else omitted), "msg"}. skipped: lines of
 * that kind left out before this one (said after the text). What is not
 * ASCII in a JSON line's strings is written as '?'. */
static void log_line(struct daemon *d, int level, const char *job,
                     const char *event, uint64_t skipped, const char *fmt,
                     va_list ap) {
  if (job != NULL && job[0] == '\0') /* no job: a node's probe's lines */
    job = NULL;
  if (d->cfg.log_format[0] != 'j') {
    fprintf(stderr, "rdzvd[%s] ", d->cfg.name);
    if (job != NULL)
      fprintf(stderr, "job %s: ", job);
    vfprintf(stderr, fmt, ap);
    if (skipped > 0)
      fprintf(stderr, " (%llu more %s not logged)", (unsigned long long)skipped,
              event);
    fputc('\n', stderr);
    return;
  }
  char msg[2048], when[40] = "";
  int n = vsnprintf(msg, sizeof(msg), fmt, ap);
  if (n >= 0 && skipped > 0 && (size_t)n < sizeof(msg))
    snprintf(msg + n, sizeof(msg) - (size_t)n, " (%llu more %s not logged)",
             (unsigned long long)skipped, event);
  struct timespec ts;
  struct tm tm;
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0 &&
      gmtime_r(&ts.tv_sec, &tm) != NULL) {
    size_t k = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + k, sizeof(when) - k, ".%03ldZ", ts.tv_nsec / 1000000);
  }
  static const char *const levels[] = {"error", "info", "debug"};
  json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "time", when, "level",
                        levels[level < 0   ? 0
                               : level > 2 ? 2
                                           : level],
                        "daemon", d->cfg.name, "role",
                        d->role != NULL ? d->role->name : "");
  /* The text and the job may hold a peer's bytes (a job id): what is not
   * ASCII is written as '?', so that every line is valid JSON. */
  if (o != NULL && job != NULL) {
    char id[256];
    snprintf(id, sizeof(id), "%s", job);
    for (char *c = id; *c != '\0'; c++)
      if ((unsigned char)*c >= 0x80)
        *c = '?';
    json_object_set_new(o, "job", json_string(id));
  }
  if (o != NULL && event != NULL)
    json_object_set_new(o, "event", json_string(event));
  for (char *c = msg; *c != '\0'; c++)
    if ((unsigned char)*c >= 0x80)
      *c = '?';
  json_t *m = json_string(msg);
  if (o != NULL && m != NULL)
    json_object_set_new(o, "msg", m);
  char *line =
      o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  if (line == NULL) {
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"a log line could not be "
                    "encoded\"}\n");
    return;
  }
  fputs(line, stderr);
  fputc('\n', stderr);
  free(line);
}

void rdzv__log(struct daemon *d, int level, const char *fmt, ...) {
  if ((uint32_t)level > d->cfg.log_level)
    return;
  va_list ap;
  va_start(ap, fmt);
  log_line(d, level, NULL, NULL, 0, fmt, ap);
  va_end(ap);
}

void rdzv__log_job(struct daemon *d, int level, const char *job,
                   const char *fmt, ...) {
  if ((uint32_t)level > d->cfg.log_level)
    return;
  va_list ap;
  va_start(ap, fmt);
  log_line(d, level, job, NULL, 0, fmt, ap);
  va_end(ap);
}

/* Lines a peer can cause in a loop are logged at most this often per
 * second: a scanner, a broken client or a fuzzer must not fill the disk.
 * The next line logged says how many were left out. */
#define LIMITED_LOGS_PER_S 10u

static void log_limited(struct daemon *d, struct rdzv_log_limit *ll,
                        const char *job, const char *fmt, va_list ap) {
  if (d->cfg.log_level < 1)
    return;
  uint64_t sec = uv_now(d->loop) / 1000;
  if (sec != ll->sec) {
    ll->sec = sec;
    ll->n = 0;
  }
  if (ll->n >= LIMITED_LOGS_PER_S) {
    ll->skipped++;
    return;
  }
  ll->n++;
  log_line(d, 1, job, ll->what, ll->skipped, fmt, ap);
  ll->skipped = 0;
}

void rdzv__log_drop(struct daemon *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_limited(d, &d->drop_limit, NULL, fmt, ap);
  va_end(ap);
}

void rdzv__log_event(struct daemon *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_limited(d, &d->event_limit, NULL, fmt, ap);
  va_end(ap);
}

void rdzv__log_event_job(struct daemon *d, const char *job, const char *fmt,
                         ...) {
  va_list ap;
  va_start(ap, fmt);
  log_limited(d, &d->event_limit, job, fmt, ap);
  va_end(ap);
}

void rdzv__log_auth(struct daemon *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_limited(d, &d->auth_limit, NULL, fmt, ap);
  va_end(ap);
}

void rdzv__log_auth_job(struct daemon *d, const char *job, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  log_limited(d, &d->auth_limit, job, fmt, ap);
  va_end(ap);
}

/* A job id that may name a file of --secret-dir: no separator, no dot
 * file (a Kubernetes Secret volume keeps its own ..data there). */
static bool secret_dir_name_ok(const uint8_t *id, size_t len) {
  if (len == 0 || len > 255 || id[0] == '.')
    return false;
  for (size_t i = 0; i < len; i++)
    if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
          (id[i] >= '0' && id[i] <= '9') || id[i] == '.' || id[i] == '_' ||
          id[i] == '-'))
      return false;
  return true;
}

int rdzv__job_secret(struct daemon *d, const uint8_t *id, size_t len,
                     uint8_t *out, size_t *out_len) {
  memset(out, 0, RDZV_AUTH_SECRET_MAX_BYTES);
  *out_len = 0;
  if (d->cfg.secret_file[0] != '\0') {
    if (d->cfg.job[0] != '\0' &&
        (len != strlen(d->cfg.job) || memcmp(id, d->cfg.job, len) != 0))
      return 0;
    memcpy(out, d->secret, d->secret_len);
    *out_len = d->secret_len;
    return 1;
  }
  if (d->cfg.secret_dir[0] == '\0' || !secret_dir_name_ok(id, len))
    return 0;
  char path[600], err[800];
  snprintf(path, sizeof(path), "%s/%.*s", d->cfg.secret_dir, (int)len,
           (const char *)id);
  int rc = rdzv_auth_secret_load(path, out, RDZV_AUTH_SECRET_MAX_BYTES, out_len,
                                 err, sizeof(err));
  if (rc == -ENOENT)
    return 0;
  if (rc < 0) {
    rdzv__log_auth(d, "job %.*s: %s: the job's peers are refused", (int)len,
                   (const char *)id, err);
    return 0;
  }
  return 1;
}

/* Reads --secret-file, checks --secret-dir, and says in the log when
 * there is neither. 0, or -EINVAL or RDZV_ENOMEM with a message on
 * stderr. */
static int auth_start(struct daemon *d) {
  char err[800];
  struct stat st;
  d->auth_limit.what = "refused authentications";
  if (rdzv_auth_nonce(d->own_key, sizeof(d->own_key)) < 0) {
    fprintf(stderr, "rdzvd: no random numbers (OpenSSL RAND_bytes)\n");
    return -EIO;
  }
  if (d->cfg.secret_file[0] != '\0') {
    d->secret = calloc(1, RDZV_AUTH_SECRET_MAX_BYTES);
    if (d->secret == NULL) {
      fprintf(stderr, "rdzvd: --secret-file: out of memory\n");
      return RDZV_ENOMEM;
    }
    if (rdzv_auth_secret_load(d->cfg.secret_file, d->secret,
                              RDZV_AUTH_SECRET_MAX_BYTES, &d->secret_len, err,
                              sizeof(err)) < 0) {
      fprintf(stderr, "rdzvd: --secret-file: %s\n", err);
      return -EINVAL;
    }
    d->auth = true;
  } else if (d->cfg.secret_dir[0] != '\0') {
    int rc = stat(d->cfg.secret_dir, &st);
    if (rc < 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "rdzvd: --secret-dir %s: %s\n", d->cfg.secret_dir,
              rc < 0 ? strerror(errno) : "not a directory");
      return -EINVAL;
    }
    d->auth = true;
  } else {
    rdzv__log(d, 1,
              "no job secret (--secret-file, --secret-dir): any process that "
              "reaches this daemon's ports can join its jobs, read and write "
              "their keys%s",
              d->cfg.unix_path[0] != '\0' && d->cfg.listen[0] != '\0'
                  ? " (the Unix socket's uid check, --allow-uids, does not "
                    "guard its TCP port: give a secret, or --listen= for no "
                    "TCP listener)"
                  : "");
  }
  return 0;
}

uint64_t rdzv__now_ms(struct daemon *d) { return uv_now(d->loop); }

/* ---- jobs ------------------------------------------------------------------ */

struct job *rdzv__job_get(struct daemon *d, const uint8_t *id, size_t len) {
  for (struct job *j = d->jobs; j != NULL; j = j->next)
    if (strlen(j->id) == len && memcmp(j->id, id, len) == 0)
      return j;
  struct job *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return NULL;
  j->id = strndup((const char *)id, len);
  if (j->id == NULL) {
    free(j);
    return NULL;
  }
  j->d = d;
  uv_timer_init(d->loop, &j->linger);
  j->linger.data = j;
  j->next = d->jobs;
  d->jobs = j;
  rdzv__log_job(d, 2, j->id, "created");
  return j;
}

static void on_job_closed(uv_handle_t *h) {
  struct job *j = h->data;
  free(j->id);
  free(j);
}

/* The job's linger passed with no connection: its role state goes, then
 * the job. */
static void on_linger(uv_timer_t *t) {
  struct job *j = t->data;
  struct daemon *d = j->d;
  if (j->nconns > 0 || d->stopping)
    return;
  if (j->role_data != NULL)
    rdzv__log_event_job(d, j->id, "freed: no connection for %u ms",
                        d->cfg.job_linger_ms);
  d->role->job_free(d, j);
  for (struct job **p = &d->jobs; *p != NULL; p = &(*p)->next) {
    if (*p == j) {
      *p = j->next;
      break;
    }
  }
  uv_close((uv_handle_t *)&j->linger, on_job_closed);
  rdzv__blob_spare_release();
#ifdef __GLIBC__
  /* A long-lived daemon returns a finished job's memory to the system
   * (glibc keeps freed heap otherwise: 50 jobs of 100 KB kept 5 MB). */
  malloc_trim(0);
#endif
}

void rdzv__job_close_peers(struct daemon *d, struct job *j, int peer_role,
                           int status, const char *text) {
  struct conn *c, *next;
  for (c = TAILQ_FIRST(&d->conns); c != NULL; c = next) {
    next = TAILQ_NEXT(c, link); /* c leaves the list when it closes */
    if (c->job == j && c->role == peer_role && c->state == CONN_READY &&
        !c->inproc)
      rdzv__conn_fail(c, status, text);
  }
}

void rdzv__close_all_peers(struct daemon *d, int status, const char *text) {
  struct conn *c, *next;
  for (c = TAILQ_FIRST(&d->conns); c != NULL; c = next) {
    next = TAILQ_NEXT(c, link); /* c leaves the list when it closes */
    if (c->state == CONN_READY && !c->inproc)
      rdzv__conn_fail(c, status, text);
  }
}

/* A random, non-zero incarnation id (the kernel's generator; the time
 * and pid only if it fails). */
static uint64_t new_incarnation(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
    v = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid() << 20;
  if (fd >= 0)
    close(fd);
  return v != 0 ? v : 1;
}

int rdzv__addrs_set(char **list, uint32_t i, const void *p, size_t len) {
  if (list[i] != NULL && strlen(list[i]) == len && memcmp(list[i], p, len) == 0)
    return 0;
  char *c = strndup(p, len);
  if (c == NULL)
    return RDZV_ENOMEM;
  free(list[i]);
  list[i] = c;
  return 0;
}

void rdzv__addrs_truncate(char **list, uint32_t *n, uint32_t keep) {
  for (uint32_t i = keep; i < *n; i++) {
    free(list[i]);
    list[i] = NULL;
  }
  *n = keep;
}

void rdzv__ancestors_configured(struct daemon *d) {
  char anc[RDZV_CONFIG_LIST_MAX + 1];
  snprintf(anc, sizeof(anc), "%s", d->cfg.ancestors);
  uint32_t n = 0;
  /* Out of memory, the list ends early: fewer places to reattach to. */
  for (char *save = NULL, *a = strtok_r(anc, ",", &save);
       a != NULL && n < RDZV_MAX_ANCESTORS && strlen(a) <= 255 &&
       rdzv__addrs_set(d->ancestors, n, a, strlen(a)) == 0;
       a = strtok_r(NULL, ",", &save))
    n++;
  rdzv__addrs_truncate(d->ancestors, &d->nancestors, n);
}

void rdzv__job_pin(struct job *j) {
  j->nconns++; /* a connection that never closes */
  uv_timer_stop(&j->linger);
}

void rdzv__job_attach(struct conn *c, struct job *j) {
  c->job = j;
  j->nconns++;
  uv_timer_stop(&j->linger);
}

void rdzv__job_detach(struct conn *c) {
  struct job *j = c->job;
  if (j == NULL || j->nconns == 0 || --j->nconns > 0 || c->d->stopping)
    return;
  /* A job no request used goes at once (on the loop, not inside the
   * close that got here). */
  uv_timer_start(&j->linger, on_linger,
                 j->role_data != NULL ? c->d->cfg.job_linger_ms : 0, 0);
}

/* ---- start and stop ------------------------------------------------------- */

void rdzv__close_noop(uv_handle_t *h) { (void)h; }

void rdzv_daemon_stop(struct daemon *d) {
  if (d->stopping)
    return;
  d->stopping = true;
  if (d->started) /* a start that failed said why already */
    rdzv__log(d, 1, "stopping");
  if (d->stop_hook != NULL) /* a front end's in-process connections first */
    d->stop_hook(d->stop_hook_arg);
  d->stop_hook = NULL;
  struct conn *c;
  while ((c = TAILQ_FIRST(&d->conns)) != NULL)
    rdzv__conn_close_now(c);
  for (struct job *j = d->jobs; j != NULL; j = j->next) {
    d->role->job_free(d, j);
    uv_close((uv_handle_t *)&j->linger, rdzv__close_noop);
  }
  if (d->have_tcp)
    uv_close((uv_handle_t *)&d->tcp_listen, rdzv__close_noop);
  if (d->have_unix) {
    uv_close((uv_handle_t *)&d->unix_listen, rdzv__close_noop);
    unlink(d->cfg.unix_path); /* ours: we hold its lock */
  }
  rdzv__unix_lock_release(d);
  if (d->port_file_written) /* a script must not find a stale port */
    unlink(d->cfg.port_file);
  uv_close((uv_handle_t *)&d->flush_idle, rdzv__close_noop);
  uv_close((uv_handle_t *)&d->flush_check, rdzv__close_noop);
}

static void free_jobs(struct daemon *d) {
  struct job *j = d->jobs;
  while (j != NULL) {
    struct job *next = j->next;
    free(j->id);
    free(j);
    j = next;
  }
  d->jobs = NULL;
}

void rdzv_daemon_free(struct daemon *d) {
  if (d == NULL)
    return;
  rdzv__unix_lock_release(
      d); /* stopped already, unless the caller skipped it */
  free_jobs(d);
  rdzv__addrs_truncate(d->ancestors, &d->nancestors, 0);
  rdzv__addrs_truncate(d->peers, &d->npeers, 0);
  if (d->secret != NULL) {
    explicit_bzero(d->secret, RDZV_AUTH_SECRET_MAX_BYTES);
    free(d->secret);
  }
  rdzv__tls_stop(d);
  rdzv_config_free(&d->cfg);
  free(d);
}

int rdzv__transport_start(uv_loop_t *loop, const struct rdzv_daemon_config *cfg,
                          const struct rdzv_role *role, void *role_ctx,
                          struct daemon **out) {
  struct daemon *d = calloc(1, sizeof(*d));
  if (d == NULL)
    return RDZV_ENOMEM;
  if (rdzv_config_copy(&d->cfg, cfg) < 0) {
    free(d);
    return RDZV_ENOMEM;
  }
  /* The ancestors the launcher gave (--parent P,A1,...), until the parent
   * tells them. */
  rdzv__ancestors_configured(d);
  d->drop_limit.what = "dropped connections";
  d->event_limit.what = "round and job events";
  d->role = role;
  d->role_ctx = role_ctx;
  d->incarnation = new_incarnation();
  if (d->cfg.name[0] == '\0') {
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    if (rdzv_config_set(&d->cfg, &d->cfg.name, "%s:%d", host, (int)getpid()) <
        0) {
      rdzv__addrs_truncate(d->ancestors, &d->nancestors, 0);
      rdzv_config_free(&d->cfg);
      free(d);
      return RDZV_ENOMEM;
    }
  }
  d->limits.max_key_bytes = cfg->max_key_bytes;
  d->limits.max_value_bytes = cfg->max_value_bytes;
  d->loop = loop;
  TAILQ_INIT(&d->conns);
  TAILQ_INIT(&d->dirty);
  TAILQ_INIT(&d->held);
  TAILQ_INIT(&d->deferred);
  uv_idle_init(d->loop, &d->flush_idle);
  uv_check_init(d->loop, &d->flush_check);
  d->flush_check.data = d;
  uv_check_start(&d->flush_check, rdzv__conn_flush_check);
  d->start_ms = uv_now(d->loop);
  int rc = auth_start(d);
  if (rc == 0)
    rc = rdzv__tls_start(d);
  if (rc == 0 && cfg->listen[0] != '\0')
    rc = rdzv__listen_tcp(d);
  if (rc == 0)
    rc = rdzv__listen_unix(d);
  if (rc < 0)
    rdzv_daemon_stop(d);
  *out = d; /* on failure the caller runs the loop to close handles */
  return rc;
}

char *rdzv_daemon_stats_json(const struct daemon *d) {
  return rdzv__stats_json(d, NULL);
}

void rdzv_daemon_traffic(const struct daemon *d,
                         struct rdzv_daemon_traffic *out) {
  *out = (struct rdzv_daemon_traffic){
      .frames_in = d->stats.frames_in,
      .frames_out = d->stats.frames_out,
      .bytes_in = d->stats.bytes_in,
      .bytes_out = d->stats.bytes_out,
      .bytes_interned = d->stats.bytes_interned,
      .heartbeat_frames = 2 * (d->stats.ops[RDZV_MSG_PING].received +
                               d->stats.ops[RDZV_MSG_PING].forwarded)};
}
