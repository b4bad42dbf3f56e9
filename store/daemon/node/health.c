/* The host health gate of a node (--health-cmd): before the node forwards
 * a host's join, it runs the configured command for that host, once per
 * round's pending generation, and holds the host's joins while it runs.
 *
 * One check per (round, host), in one of three states, moved only by
 * check_finish and rdzv__node_health_round_done:
 *
 *   RUNNING --exit 0--> PASSED        the held joins go on, unchanged
 *   RUNNING --exit != 0, signal, no start, --health-timeout-ms--> FAILED
 *                                     the held joins go on, each record
 *                                     marked with the reason (join_wire.h):
 *                                     the root quarantines the host
 *   FAILED --its held joins went up--> (forgotten: a later join of the
 *                                     host checks again)
 *   PASSED, FAILED --the round's generation answered--> (forgotten: the
 *                                     next generation's join checks again)
 *
 * The command runs as `/bin/sh -c` with stderr joined to stdout, in its own
 * session (a timeout kills its whole process group), with the daemon's
 * environment plus RDZV_HEALTH_HOST (the host named by the join record),
 * RDZV_JOB and RDZV_ROUND. Its last non-empty output line (at most
 * HEALTH_REASON_LINE bytes) is the reason a failure gives.
 *
 * Owns the checks of each round (jr->checks). Uses node_join.c's
 * rdzv__node_join to hand held joins back. Loop thread only. */
#include "store/daemon/node/health.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "rdzv/error.h"
#include "store/daemon/node/node_join_int.h"

extern char **environ;

#define HEALTH_OUT_KEEP 1024    /* the output's last bytes kept */
#define HEALTH_REASON_LINE 160  /* of it, the reason's line */
#define HEALTH_EOF_GRACE_MS 200 /* output still due after the exit */

enum hstate { HC_RUNNING, HC_PASSED, HC_FAILED };

static const char *const hstate_name[] = {"running", "passed", "failed"};

struct held { /* a join held while its host's check runs */
  struct conn *c;
  struct rdzv_buf frame; /* the request, encoded */
  struct held *next;
};

struct hcheck {
  UT_hash_handle hh;  /* in jr->checks, by host */
  struct njround *jr; /* NULL once the round is freed */
  struct daemon *d;
  enum hstate state;
  uv_process_t proc;
  uv_pipe_t out;
  uv_timer_t timer; /* --health-timeout-ms, then the grace for output */
  int open_handles;
  bool spawned, exited, eof, timed_out;
  int64_t exit_status;
  int term_signal;
  uint64_t started_ms;
  char outbuf[HEALTH_OUT_KEEP];
  size_t out_len;
  char reason[256];
  uint32_t reason_len;
  struct held *held, **held_tail;
  char host[]; /* NUL-terminated */
};

static void on_handle_closed(uv_handle_t *h) {
  struct hcheck *hc = h->data;
  if (--hc->open_handles == 0 && hc->jr == NULL)
    free(hc);
}

static void held_free_all(struct held *x) {
  while (x != NULL) {
    struct held *n = x->next;
    rdzv__conn_unref(x->c);
    rdzv_buf_free(&x->frame);
    free(x);
    x = n;
  }
}

/* The timer and the pipe; the process handle is closed by its exit (or
 * at once when it did not start), so that it is always reaped. */
static void close_handles(struct hcheck *hc) {
  if (!uv_is_closing((uv_handle_t *)&hc->timer))
    uv_close((uv_handle_t *)&hc->timer, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&hc->out))
    uv_close((uv_handle_t *)&hc->out, on_handle_closed);
}

/* The last non-empty line of the output, trimmed, into line (n bytes). */
static void last_line(const struct hcheck *hc, char *line, size_t n) {
  size_t e = hc->out_len;
  while (e > 0 && (hc->outbuf[e - 1] == '\n' || hc->outbuf[e - 1] == '\r' ||
                   hc->outbuf[e - 1] == ' ' || hc->outbuf[e - 1] == '\t'))
    e--;
  size_t b = e;
  while (b > 0 && hc->outbuf[b - 1] != '\n')
    b--;
  while (b < e && (hc->outbuf[b] == ' ' || hc->outbuf[b] == '\t'))
    b++;
  size_t k = 0;
  for (size_t i = b; i < e && k + 1 < n; i++) {
    unsigned char ch = (unsigned char)hc->outbuf[i];
    line[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  line[k] = '\0';
}

/* The joins held for hc go on (rdzv__node_join sees its verdict), in the
 * order they came; those whose connection closed meanwhile are dropped. */
static void release_held(struct hcheck *hc) {
  struct held *x = hc->held;
  hc->held = NULL;
  hc->held_tail = &hc->held;
  struct node_job *nj = hc->jr != NULL ? hc->jr->nj : NULL;
  for (; x != NULL;) {
    struct held *n = x->next;
    struct rdzv_msg m;
    size_t used = 0;
    if (nj != NULL && rdzv__conn_alive(x->c) &&
        rdzv_msg_decode(x->frame.data, x->frame.len, UINT32_MAX, &m, &used) ==
            0)
      rdzv__node_join(nj, x->c, &m);
    rdzv__conn_unref(x->c);
    rdzv_buf_free(&x->frame);
    free(x);
    x = n;
  }
}

static void check_drop(struct njround *jr, struct hcheck *hc);

/* The check ended: its verdict, logged and counted; held joins go on. */
static void check_finish(struct hcheck *hc) {
  if (hc->state != HC_RUNNING)
    return;
  uv_timer_stop(&hc->timer);
  struct daemon *d = hc->d;
  char line[HEALTH_REASON_LINE + 1];
  last_line(hc, line, sizeof(line));
  char why[64];
  if (hc->timed_out)
    snprintf(why, sizeof(why),
             "gave no verdict within --health-timeout-ms (%u ms)",
             d->cfg.health_timeout_ms);
  else if (hc->term_signal != 0)
    snprintf(why, sizeof(why), "killed by signal %d", hc->term_signal);
  else
    snprintf(why, sizeof(why), "exit status %lld", (long long)hc->exit_status);
  bool ok = hc->spawned && !hc->timed_out && hc->term_signal == 0 &&
            hc->exit_status == 0;
  hc->state = ok ? HC_PASSED : HC_FAILED;
  d->stats.health_checks++;
  uint64_t ms = rdzv__now_ms(d) - hc->started_ms;
  if (!ok) {
    d->stats.health_failed++;
    if (hc->spawned) {
      int n = snprintf(hc->reason, sizeof(hc->reason),
                       "node %s: health check %s%s%s", d->cfg.name, why,
                       line[0] != '\0' ? ": " : "", line);
      hc->reason_len = n < 0 ? 0
                       : (uint32_t)n < sizeof(hc->reason)
                           ? (uint32_t)n
                           : (uint32_t)sizeof(hc->reason) - 1;
    }
  }
  const char *job = hc->jr != NULL ? hc->jr->nj->job->id : "?";
  rdzv__log_job(d, ok ? 2 : 0, job,
                "round %s: host %s health check %s after %llu ms%s%.*s",
                hc->jr != NULL ? hc->jr->name : "?", hc->host,
                hstate_name[hc->state], (unsigned long long)ms, ok ? "" : ": ",
                ok ? 0 : (int)hc->reason_len, hc->reason);
  if (!uv_is_closing((uv_handle_t *)&hc->out))
    uv_close((uv_handle_t *)&hc->out, on_handle_closed);
  release_held(hc);
  /* A failure has done its work once the held joins went up marked (the
   * root quarantines the host): forgotten now, so that a host an operator
   * clears while the generation is still open is checked afresh rather
   * than failed again by this verdict. (A command that could not start is
   * kept: check_start's caller reads it; the round's end forgets it.) The
   * process handle is closing, so hc outlives this call. */
  if (!ok && hc->spawned && hc->jr != NULL)
    check_drop(hc->jr, hc);
}

static void on_timer(uv_timer_t *t) {
  struct hcheck *hc = t->data;
  if (!hc->exited) { /* the deadline: its whole process group goes */
    hc->timed_out = true;
    if (hc->proc.pid > 0)
      kill(-hc->proc.pid, SIGKILL);
    return; /* the exit follows */
  }
  check_finish(hc); /* the exit came, the rest of the output did not */
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  struct hcheck *hc = p->data;
  hc->exited = true;
  hc->exit_status = status;
  hc->term_signal = hc->timed_out ? 0 : sig;
  uv_close((uv_handle_t *)&hc->proc, on_handle_closed);
  if (hc->state != HC_RUNNING)
    return;
  if (hc->eof) {
    check_finish(hc);
  } else {
    uv_timer_stop(&hc->timer);
    uv_timer_start(&hc->timer, on_timer, HEALTH_EOF_GRACE_MS, 0);
  }
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b) {
  static char scratch[4096];
  (void)h;
  (void)want;
  *b = uv_buf_init(scratch, sizeof(scratch));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  struct hcheck *hc = s->data;
  if (n < 0) {
    hc->eof = true;
    uv_read_stop(s);
    if (hc->exited && hc->state == HC_RUNNING)
      check_finish(hc);
    return;
  }
  /* The last HEALTH_OUT_KEEP bytes are kept. */
  size_t k = (size_t)n;
  const char *p = b->base;
  if (k >= HEALTH_OUT_KEEP) {
    p += k - HEALTH_OUT_KEEP;
    k = HEALTH_OUT_KEEP;
  }
  if (hc->out_len + k > HEALTH_OUT_KEEP) {
    size_t drop = hc->out_len + k - HEALTH_OUT_KEEP;
    memmove(hc->outbuf, hc->outbuf + drop, hc->out_len - drop);
    hc->out_len -= drop;
  }
  memcpy(hc->outbuf + hc->out_len, p, k);
  hc->out_len += k;
}

/* The daemon's environment with the check's three variables set, which
 * are its last three entries. NULL out of memory; free with free_env. */
static char **make_env(const char *host, const char *job, const char *round) {
  static const char *const names[3] = {
      "RDZV_HEALTH_HOST=", "RDZV_JOB=", "RDZV_ROUND="};
  const char *vals[3] = {host, job, round};
  char *mine[3] = {NULL, NULL, NULL};
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **e = calloc(n + 4, sizeof(*e));
  bool ok = e != NULL;
  for (int i = 0; i < 3 && ok; i++) {
    size_t a = strlen(names[i]), b = strlen(vals[i]);
    if ((mine[i] = malloc(a + b + 1)) == NULL) {
      ok = false;
      break;
    }
    memcpy(mine[i], names[i], a);
    memcpy(mine[i] + a, vals[i], b + 1);
  }
  if (!ok) {
    for (int i = 0; i < 3; i++)
      free(mine[i]);
    free(e);
    return NULL;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool ours = false;
    for (int j = 0; j < 3; j++)
      ours |= strncmp(environ[i], names[j], strlen(names[j])) == 0;
    if (!ours)
      e[k++] = environ[i];
  }
  for (int i = 0; i < 3; i++)
    e[k++] = mine[i];
  return e;
}

static void free_env(char **e) {
  if (e == NULL)
    return;
  size_t k = 0;
  while (e[k] != NULL)
    k++;
  for (size_t i = k - 3; i < k; i++)
    free(e[i]);
  free(e);
}

/* Starts the check of host for round jr. Returns it (RUNNING, or FAILED
 * when the command could not start), or NULL out of memory. */
static struct hcheck *check_start(struct njround *jr, const char *host,
                                  size_t hl) {
  struct daemon *d = jr->nj->d;
  struct hcheck *hc = calloc(1, sizeof(*hc) + hl + 1);
  if (hc == NULL)
    return NULL;
  memcpy(hc->host, host, hl);
  hc->jr = jr;
  hc->d = d;
  hc->state = HC_RUNNING;
  hc->held_tail = &hc->held;
  hc->started_ms = rdzv__now_ms(d);
  HASH_ADD(hh, jr->checks, host, hl, hc);
  uv_timer_init(d->loop, &hc->timer);
  hc->timer.data = hc;
  uv_pipe_init(d->loop, &hc->out, 0);
  hc->out.data = hc;
  hc->proc.data = hc;
  hc->open_handles = 2; /* the timer and the pipe */
  /* stderr joins stdout: the reason may be on either. */
  size_t cl = strlen(d->cfg.health_cmd);
  char *script = malloc(cl + 16);
  char **env = make_env(hc->host, jr->nj->job->id, jr->name);
  int rc = UV_ENOMEM;
  if (script != NULL && env != NULL) {
    memcpy(script, "exec 2>&1\n", 10);
    memcpy(script + 10, d->cfg.health_cmd, cl + 1);
    char *args[] = {(char *)"/bin/sh", (char *)"-c", script, NULL};
    uv_stdio_container_t io[3];
    io[0].flags = UV_IGNORE;
    io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[1].data.stream = (uv_stream_t *)&hc->out;
    io[2].flags = UV_IGNORE;
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.file = "/bin/sh";
    o.args = args;
    o.env = env;
    o.exit_cb = on_exit_cb;
    o.flags = UV_PROCESS_DETACHED; /* its own process group: killed whole */
    o.stdio_count = 3;
    o.stdio = io;
    rc = uv_spawn(d->loop, &hc->proc, &o);
    hc->open_handles++; /* the process handle, started or not */
    if (rc < 0)
      uv_close((uv_handle_t *)&hc->proc, on_handle_closed);
  }
  free(script);
  free_env(env);
  if (rc < 0) {
    /* Not started: the host is not admitted (a gate that cannot run
     * must not wave every host through). */
    int n = snprintf(hc->reason, sizeof(hc->reason),
                     "node %s: health check could not start: %s", d->cfg.name,
                     uv_strerror(rc));
    hc->reason_len = n < 0 ? 0 : (uint32_t)n;
    check_finish(hc);
    return hc;
  }
  hc->spawned = true;
  uv_read_start((uv_stream_t *)&hc->out, on_alloc, on_read);
  uv_timer_start(&hc->timer, on_timer, d->cfg.health_timeout_ms, 0);
  rdzv__log_job(d, 2, jr->nj->job->id,
                "round %s: host %s health check started (pid %d)", jr->name,
                hc->host, hc->proc.pid);
  return hc;
}

enum rdzv_health_verdict
rdzv__node_health_gate(struct njround *jr, struct conn *c,
                       const struct rdzv_msg *m, const struct rdzv_join_full *j,
                       const uint8_t **reason, uint32_t *reason_len) {
  struct daemon *d = jr->nj->d;
  if (d->cfg.health_cmd[0] == '\0' || c->role == RDZV_ROLE_NODE)
    return RDZV_HEALTH_PASS; /* child nodes gate their own hosts */
  size_t hl = j->rec.host_len;
  struct hcheck *hc = NULL;
  HASH_FIND(hh, jr->checks, j->rec.host, hl, hc);
  if (hc == NULL &&
      (hc = check_start(jr, (const char *)j->rec.host, hl)) == NULL)
    return RDZV_HEALTH_PASS; /* out of memory: the root decides alone */
  if (hc->state == HC_PASSED)
    return RDZV_HEALTH_PASS;
  if (hc->state == HC_FAILED) {
    *reason = (const uint8_t *)hc->reason;
    *reason_len = hc->reason_len > 0 ? hc->reason_len : 1;
    if (hc->reason_len == 0)
      *reason = (const uint8_t *)"?";
    return RDZV_HEALTH_FAIL;
  }
  struct held *x = calloc(1, sizeof(*x));
  if (x == NULL || rdzv_msg_encode(m, &x->frame) < 0) {
    free(x);
    return RDZV_HEALTH_PASS; /* out of memory: as above */
  }
  x->c = c;
  rdzv__conn_ref(c);
  *hc->held_tail = x;
  hc->held_tail = &x->next;
  return RDZV_HEALTH_HELD;
}

/* Unlinks hc from its round and frees it once its handles are closed. */
static void check_drop(struct njround *jr, struct hcheck *hc) {
  HASH_DEL(jr->checks, hc);
  hc->jr = NULL;
  held_free_all(hc->held);
  hc->held = NULL;
  if (hc->state == HC_RUNNING && hc->spawned && !hc->exited && hc->proc.pid > 0)
    kill(-hc->proc.pid, SIGKILL);
  hc->state = HC_FAILED; /* what comes later of it is ignored */
  close_handles(hc);
  if (hc->open_handles == 0)
    free(hc);
}

void rdzv__node_health_round_done(struct njround *jr) {
  struct hcheck *hc, *t;
  HASH_ITER (hh, jr->checks, hc, t)
    if (hc->state != HC_RUNNING)
      check_drop(jr, hc);
}

void rdzv__node_health_free(struct njround *jr) {
  struct hcheck *hc, *t;
  HASH_ITER (hh, jr->checks, hc, t)
    check_drop(jr, hc);
}
