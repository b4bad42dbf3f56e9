/* TCPStore key spaces (RDZV_MSG_TS_SPACE, --tcpstore-spaces): a client of
 * this daemon asks for a loopback TCPStore listener whose keys live in its
 * job under a prefix it names, and gets the port. torchrun's rdzv handler
 * (python/rdzv/torchrun.py) gives each restart round's workers one as
 * their MASTER_ADDR:MASTER_PORT: PyTorch's TCPStore protocol has no
 * namespace of its own, and torch >= 2.6 puts no prefix on an agent
 * store's keys, so a fresh port per round is the only way to give a
 * round its own keys without touching the workers.
 *
 * A space is shared: asking again for the same job and prefix gives the
 * same port and adds the asker as a holder. A holder is the asking
 * connection, or, when the request names a process (m->b, a pid in this
 * daemon's pid namespace, asked over the Unix socket only), that process:
 * Slurm's TaskProlog asks for its step's space on behalf of the task it
 * precedes (its parent process), so that the space lives as long as the
 * step's tasks on this host, not as long as the prolog. A process is
 * watched through a pidfd (Linux >= 5.3), so a reused pid holds nothing.
 * A space closes (with its TCPStore connections) once every holder has
 * gone, checked once a second, or when the daemon stops. At most
 * --tcpstore-spaces are open. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "store/daemon/tcpstore/spaces.h"
#include "store/daemon/tcpstore/tcpstore.h"

/* How often spaces whose holders are all gone are closed, ms. */
#define SPACES_REAP_MS 1000

struct space {
  struct space *next;
  struct ts_server *srv;
  char job[256];
  char prefix[RDZV_TS_SPACE_PREFIX_MAX + 1];
  struct holder *holders;
  uint32_t nholders, cap;
};

/* A holder of a space: a connection (referenced, rdzv__conn_ref) or a
 * process (a pidfd of it; c is NULL). */
struct holder {
  struct conn *c;
  int pidfd;
  int pid;
};

struct ts_spaces {
  struct daemon *d;
  struct space *list;
  uint32_t n, max;
  uv_timer_t reaper;
};

static void holder_drop(struct holder *h) {
  if (h->c != NULL)
    rdzv__conn_unref(h->c);
  else
    close(h->pidfd);
}

/* Whether h still holds: its connection open, its process not ended (a
 * pidfd polls readable once the process exits). */
static bool holder_alive(const struct holder *h) {
  if (h->c != NULL)
    return rdzv__conn_alive(h->c);
  struct pollfd p = {.fd = h->pidfd, .events = POLLIN};
  return poll(&p, 1, 0) == 0;
}

static void space_close(struct ts_spaces *sp, struct space **pp) {
  struct space *s = *pp;
  *pp = s->next;
  rdzv__log(sp->d, 2, "TCPStore key space %s of job %s closed", s->prefix,
            s->job);
  rdzv__tcpstore_stop(s->srv);
  for (uint32_t i = 0; i < s->nholders; i++)
    holder_drop(&s->holders[i]);
  free(s->holders);
  free(s);
  sp->n--;
}

/* Drops holders whose connection closed; closes spaces left with none. */
static void on_reap(uv_timer_t *t) {
  struct ts_spaces *sp = t->data;
  for (struct space **pp = &sp->list; *pp != NULL;) {
    struct space *s = *pp;
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->nholders; i++) {
      if (holder_alive(&s->holders[i]))
        s->holders[k++] = s->holders[i];
      else
        holder_drop(&s->holders[i]);
    }
    s->nholders = k;
    if (k == 0)
      space_close(sp, pp);
    else
      pp = &s->next;
  }
  if (sp->list == NULL)
    uv_timer_stop(t);
}

/* Adds h (a connection, not yet referenced, or a process with its pidfd,
 * which s then owns) unless it holds s already; RDZV_ENOMEM, or
 * RDZV_ETOO_MANY_CONNECTIONS past max holders (each process holder keeps
 * a descriptor open: bounded as connections are, by --max-connections). */
static int hold(struct space *s, struct holder h, uint32_t max) {
  for (uint32_t i = 0; i < s->nholders; i++) {
    struct holder *o = &s->holders[i];
    if (h.c != NULL && o->c == h.c)
      return 0;
    if (h.c == NULL && o->c == NULL && o->pid == h.pid) {
      if (holder_alive(o)) {
        close(h.pidfd); /* the same process: one pid lives at a time */
      } else {
        close(o->pidfd); /* that pid ended and was reused: the new one */
        *o = h;
      }
      return 0;
    }
  }
  if (s->nholders >= max)
    return RDZV_ETOO_MANY_CONNECTIONS;
  if (s->nholders == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 4;
    struct holder *v = realloc(s->holders, cap * sizeof(*v));
    if (v == NULL)
      return RDZV_ENOMEM;
    s->holders = v;
    s->cap = cap;
  }
  if (h.c != NULL)
    rdzv__conn_ref(h.c);
  s->holders[s->nholders++] = h;
  return 0;
}

/* Whether process pid is in this daemon's pid namespace (so that the pids
 * it names are this daemon's too). */
static bool same_pid_ns(int pid) {
  char path[64], mine[64], theirs[64];
  ssize_t a = readlink("/proc/self/ns/pid", mine, sizeof(mine) - 1);
  snprintf(path, sizeof(path), "/proc/%d/ns/pid", pid);
  ssize_t b = readlink(path, theirs, sizeof(theirs) - 1);
  if (a <= 0 || b <= 0)
    return false;
  mine[a] = theirs[b] = '\0';
  return strcmp(mine, theirs) == 0;
}

/* The holder that request m of c names: c itself (m->b == 0) or process
 * m->b, watched through a pidfd. 0, or an error with text filled. */
static int holder_of(struct daemon *d, struct conn *c, const struct rdzv_msg *m,
                     struct holder *h, char *text, size_t n) {
  *h = (struct holder){.c = c, .pidfd = -1};
  if (m->b == 0)
    return 0;
  if (!rdzv__conn_on_unix_socket(c)) {
    snprintf(text, n,
             "daemon %s: a key space held by a process is asked "
             "over the Unix socket (the pid is this host's)",
             d->cfg.name);
    return RDZV_EBAD_ROLE;
  }
  /* A peer in another pid namespace (a container, unshare --pid) names
   * pids that mean other processes here: refused, never guessed. */
  if (c->peer_pid == 0 || !same_pid_ns(c->peer_pid)) {
    snprintf(text, n,
             "daemon %s: the asking process is in another pid "
             "namespace than this daemon (its pid %d here): the pid %lld "
             "it names would be another process",
             d->cfg.name, c->peer_pid, (long long)m->b);
    return RDZV_EBAD_ROLE;
  }
  if (m->b < 1 || m->b > INT32_MAX) {
    snprintf(text, n, "daemon %s: holder pid %lld is not a pid", d->cfg.name,
             (long long)m->b);
    return -EINVAL;
  }
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)m->b, 0);
  if (fd < 0) {
    int e = errno;
    snprintf(text, n, "daemon %s: cannot watch holder process %lld: %s",
             d->cfg.name, (long long)m->b, strerror(e));
    return -e;
  }
  /* A process that ended (a zombie not yet reaped) holds nothing. */
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 0) != 0) {
    close(fd);
    snprintf(text, n, "daemon %s: holder process %lld has exited", d->cfg.name,
             (long long)m->b);
    return -ESRCH;
  }
  *h = (struct holder){.c = NULL, .pidfd = fd, .pid = (int)m->b};
  return 0;
}

static void reply_port(struct conn *c, const struct rdzv_msg *m, int port) {
  struct rdzv_msg r;
  rdzv__reply_init(&r, m, 0);
  r.a = port;
  rdzv__conn_reply(c, &r);
}

void rdzv__ts_spaces_request(void *arg, struct conn *c,
                             const struct rdzv_msg *m) {
  struct ts_spaces *sp = arg;
  struct daemon *d = sp->d;
  char text[400], prefix[RDZV_TS_SPACE_PREFIX_MAX + 1];
  struct rdzv_slice p;
  if (c->job == NULL || c->role != RDZV_ROLE_CLIENT) {
    rdzv__conn_reply_text(c, m, RDZV_EBAD_ROLE,
                          "a TCPStore key space is asked by a client of a job");
    return;
  }
  if (rdzv_items_get(&m->keys, 0, &p) < 0 || p.n == 0 ||
      p.n > RDZV_TS_SPACE_PREFIX_MAX || memchr(p.p, '\0', p.n) != NULL) {
    rdzv__conn_reply_textf(c, m, -EINVAL,
                           "daemon %s: a TCPStore key "
                           "space's prefix is 1..%d bytes without NUL",
                           d->cfg.name, RDZV_TS_SPACE_PREFIX_MAX);
    return;
  }
  memcpy(prefix, p.p, p.n);
  prefix[p.n] = '\0';
  struct holder h;
  int err = holder_of(d, c, m, &h, text, sizeof(text));
  if (err < 0) {
    rdzv__conn_reply_text(c, m, err, text);
    return;
  }
  struct space *s;
  for (s = sp->list; s != NULL; s = s->next)
    if (strcmp(s->job, c->job->id) == 0 && strcmp(s->prefix, prefix) == 0)
      break;
  if (s == NULL && sp->n >= sp->max) {
    if (h.c == NULL)
      close(h.pidfd);
    rdzv__conn_reply_textf(c, m, RDZV_ETOO_MANY_CONNECTIONS,
                           "daemon %s: %u TCPStore key spaces are open "
                           "(--tcpstore-spaces %u): none for %s of job %s",
                           d->cfg.name, sp->n, sp->max, prefix, c->job->id);
    return;
  }
  if (s == NULL) {
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
      if (h.c == NULL)
        close(h.pidfd);
      rdzv__conn_reply_text(c, m, RDZV_ENOMEM, "");
      return;
    }
    snprintf(s->job, sizeof(s->job), "%s", c->job->id);
    memcpy(s->prefix, prefix, p.n + 1);
    int rc = rdzv__tcpstore_start_space(d, s->job, s->prefix, &s->srv);
    if (rc < 0) {
      rdzv__tcpstore_stop(s->srv);
      free(s);
      if (h.c == NULL)
        close(h.pidfd);
      rdzv__conn_reply_textf(c, m, rc,
                             "daemon %s: cannot open a TCPStore "
                             "key space on 127.0.0.1: %s",
                             d->cfg.name, rdzv_strerror(rc));
      return;
    }
    s->next = sp->list;
    sp->list = s;
    sp->n++;
    if (!uv_is_active((uv_handle_t *)&sp->reaper))
      uv_timer_start(&sp->reaper, on_reap, SPACES_REAP_MS, SPACES_REAP_MS);
  }
  if ((err = hold(s, h, d->cfg.max_connections)) < 0) {
    if (h.c == NULL)
      close(h.pidfd);
    rdzv__conn_reply_textf(c, m, err,
                           "daemon %s: TCPStore key space %s of "
                           "job %s: %s (%u holders; --max-connections %u)",
                           d->cfg.name, prefix, c->job->id, rdzv_strerror(err),
                           s->nholders, d->cfg.max_connections);
    return;
  }
  reply_port(c, m, rdzv__tcpstore_port(s->srv));
}

int rdzv__ts_spaces_new(struct daemon *d, uint32_t max,
                        struct ts_spaces **out) {
  struct ts_spaces *sp = calloc(1, sizeof(*sp));
  *out = sp;
  if (sp == NULL)
    return RDZV_ENOMEM;
  sp->d = d;
  sp->max = max;
  uv_timer_init(d->loop, &sp->reaper);
  sp->reaper.data = sp;
  return 0;
}

static void on_reaper_closed(uv_handle_t *h) { free(h->data); }

void rdzv__ts_spaces_stop(struct ts_spaces *sp) {
  if (sp == NULL)
    return;
  while (sp->list != NULL)
    space_close(sp, &sp->list);
  uv_close((uv_handle_t *)&sp->reaper, on_reaper_closed);
}
