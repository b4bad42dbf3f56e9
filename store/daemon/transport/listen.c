/* rdzvd transport: the listeners (TCP, and the Unix socket with the lock
 * that owns its path), accepting connections, and the address and port
 * file helpers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "store/daemon/transport/transport.h"
#include "store/wire/addr.h"
#include "store/daemon/transport/transport_int.h"

/* Whether a Unix-socket peer of uid may use this daemon: its own uid,
 * root's, or one --allow-uids names. */
static bool uid_allowed(const struct daemon *d, uid_t uid) {
  if (uid == geteuid() || uid == 0)
    return true;
  for (uint32_t i = 0; i < d->cfg.nallow_uids; i++)
    if (d->cfg.allow_uid[i] == (uint32_t)uid)
      return true;
  return false;
}

/* Whether --allow-uids lets in a uid other than this daemon's and root's
 * (then the socket must be writable by all: the uid check does the
 * work). */
static bool others_allowed(const struct daemon *d) {
  for (uint32_t i = 0; i < d->cfg.nallow_uids; i++)
    if (d->cfg.allow_uid[i] != (uint32_t)geteuid() && d->cfg.allow_uid[i] != 0)
      return true;
  return false;
}

/* A Unix-socket peer whose uid is not allowed (cr NULL: its credentials
 * could not be read) is refused before any of its bytes is read: an
 * ERROR frame with RDZV_EAUTH, then the connection closes. Counted
 * (auth.peer_refused) and logged under the drop rate limit. */
static void refuse_peer(struct conn *c, const struct ucred *cr) {
  struct daemon *d = c->d;
  char text[600];
  d->stats.auth_peer_refused++;
  if (cr != NULL) {
    snprintf(text, sizeof(text),
             "daemon %s: uid %u is not allowed on this socket (unix:%s): "
             "only the daemon's own uid, root and --allow-uids are",
             d->cfg.name, (unsigned)cr->uid, d->cfg.unix_path);
    rdzv__log_drop(d,
                   "conn %s: refused: uid %u (pid %d) is not allowed on "
                   "unix:%s (--allow-uids)",
                   c->name, (unsigned)cr->uid, (int)cr->pid, d->cfg.unix_path);
  } else {
    snprintf(text, sizeof(text),
             "daemon %s: the peer's credentials on unix:%s could not be read "
             "(SO_PEERCRED): refused",
             d->cfg.name, d->cfg.unix_path);
    rdzv__log_drop(d,
                   "conn %s: refused: no credentials (SO_PEERCRED) on "
                   "unix:%s",
                   c->name, d->cfg.unix_path);
  }
  rdzv__conn_refuse(c, RDZV_EAUTH, text);
}

static void on_connection(uv_stream_t *server, int status) {
  struct daemon *d = server->data;
  if (status < 0) {
    /* EMFILE and friends: the peer waits in the backlog; say why. */
    rdzv__log_drop(d, "accept failed: %s", uv_strerror(status));
    return;
  }
  struct conn *c = calloc(1, sizeof(*c));
  uv_timer_t *timer = malloc(sizeof(*timer));
  if (c == NULL || timer == NULL) {
    free(c);
    free(timer);
    return;
  }
  c->d = d;
  c->refs = 1;
  int rc = server == (uv_stream_t *)&d->tcp_listen
               ? uv_tcp_init(d->loop, &c->h.tcp)
               : uv_pipe_init(d->loop, &c->h.pipe, 0);
  if (rc == 0)
    rc = uv_accept(server, &c->h.stream);
  c->h.handle.data = c;
  c->timer = timer;
  uv_timer_init(d->loop, c->timer);
  c->timer->data = c;
  c->last_rx_ms = uv_now(d->loop);
  snprintf(c->name, sizeof(c->name), "#%llu",
           (unsigned long long)d->stats.conns_total + 1);
  TAILQ_INSERT_TAIL(&d->conns, c, link);
  d->nconns++;
  d->stats.conns_open++;
  d->stats.conns_total++;
  if (rc < 0) {
    rdzv__log_drop(d, "accept failed: %s", uv_strerror(rc));
    rdzv__conn_close_now(c);
    return;
  }
  if (server == (uv_stream_t *)&d->tcp_listen) {
    uv_tcp_nodelay(&c->h.tcp, 1);
    c->tcp = true;
    if (rdzv__conn_tls_accept(c) < 0) {
      rdzv__log_drop(d, "accept: out of memory for a TLS session");
      rdzv__conn_close_now(c);
      return;
    }
  } else {
    /* Who is on the other end: a uid allowed on this socket or not; and
     * a rank's node tells a dead process from a live one whose
     * connection merely broke (sessions). */
    uv_os_fd_t fd;
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    bool known = uv_fileno(&c->h.handle, &fd) == 0 &&
                 getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0;
    if (known)
      c->peer_pid = cr.pid;
    if (!known || !uid_allowed(d, cr.uid)) {
      refuse_peer(c, known ? &cr : NULL);
      return;
    }
  }
  if (d->nconns > d->cfg.max_connections) {
    d->stats.conns_rejected++;
    rdzv__conn_fail(c, RDZV_ETOO_MANY_CONNECTIONS, "over --max-connections");
    return;
  }
  rdzv__conn_start_reading(c);
}

int rdzv__split_host_port(const char *addr, char *host, size_t hostlen,
                          int *port) {
  struct rdzv_addr_parts p;
  if (rdzv_addr_split(addr,
                      RDZV_ADDR_PORT0 | RDZV_ADDR_BARE_V6 | RDZV_ADDR_NO_UNIX,
                      &p) < 0 ||
      rdzv_addr_host(&p, host, hostlen) < 0)
    return RDZV_EBAD_ADDR;
  *port = p.port_first;
  return 0;
}

int rdzv__write_port_file(const char *path, int port) {
  char tmp[300];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return -errno;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return -e;
  }
  return 0;
}

/* The port the TCP listener is bound to (the kernel's choice for port 0). */
int rdzv__transport_tcp_port(struct daemon *d) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getsockname(&d->tcp_listen, (struct sockaddr *)&ss, &len) < 0)
    return 0;
  /* sin_port and sin6_port sit at the same offset. */
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* A socket bound to ss and listening: the descriptor, or -errno. Listens
 * here, not later: with SO_REUSEADDR two sockets may both bind a port no
 * one listens on yet, and only listen() says which one has it (the loser
 * moves on to the range's next port). */
static int bind_one(const struct sockaddr_storage *ss, int backlog) {
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      bind(fd, (const struct sockaddr *)ss, len) < 0 ||
      listen(fd, backlog) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int rdzv__listen_tcp(struct daemon *d) {
  char host[RDZV_ADDR_HOST_MAX + 1];
  struct sockaddr_storage ss;
  struct rdzv_addr_parts p;
  if (rdzv_addr_split(d->cfg.listen,
                      RDZV_ADDR_RANGE | RDZV_ADDR_PORT0 | RDZV_ADDR_BARE_V6 |
                          RDZV_ADDR_NO_UNIX,
                      &p) < 0 ||
      rdzv_addr_host(&p, host, sizeof(host)) < 0) {
    fprintf(stderr,
            "rdzvd: --listen '%s' is not HOST:PORT or "
            "HOST:FIRST-LAST\n",
            d->cfg.listen);
    return RDZV_EBAD_ADDR;
  }
  int first = p.port_first, last = p.port_last;
  memset(&ss, 0, sizeof(ss));
  int rc = uv_ip4_addr(host, first, (struct sockaddr_in *)&ss);
  if (rc < 0)
    rc = uv_ip6_addr(host, first, (struct sockaddr_in6 *)&ss);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: --listen '%s': not a numeric address\n", host);
    return RDZV_EBAD_ADDR;
  }
  /* The first port of the range that is free (each taken one is another
   * daemon's, maybe another job's: its children tell by the hello). */
  int fd = -EADDRINUSE;
  for (int port = first; port <= last && fd == -EADDRINUSE; port++) {
    /* sin_port and sin6_port sit at the same offset. */
    ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    fd = bind_one(&ss, (int)d->cfg.backlog);
  }
  if (fd < 0) {
    fprintf(stderr, "rdzvd: listen on %s: %s%s\n", d->cfg.listen,
            uv_strerror(fd), first < last ? " (every port of the range)" : "");
    return fd;
  }
  uv_tcp_init(d->loop, &d->tcp_listen);
  d->tcp_listen.data = d;
  d->have_tcp = true;
  rc = uv_tcp_open(&d->tcp_listen, fd);
  if (rc < 0)
    close(fd);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&d->tcp_listen, (int)d->cfg.backlog,
                   on_connection);
  if (rc < 0) {
    fprintf(stderr, "rdzvd: listen on %s: %s\n", d->cfg.listen,
            uv_strerror(rc));
    return rc;
  }
  /* [v6]:PORT, as every parser of an address here reads it. */
  snprintf(d->bound_addr, sizeof(d->bound_addr),
           strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host,
           rdzv__transport_tcp_port(d));
  return 0;
}

/* True if something accepts connections on the Unix socket at path: a
 * daemon that does not take the lock below (an older rdzvd), whose socket
 * must not be taken over either. */
static bool unix_socket_live(const char *path) {
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof(sa.sun_path))
    return false;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return live;
}

/* Whether the directory that would hold path exists (libuv reports a
 * bind into a missing directory as "permission denied"). */
static bool parent_dir_exists(const char *path) {
  char dir[PATH_MAX];
  struct stat st;
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return true; /* the working directory */
  if (slash == path)
    return true; /* "/" */
  snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The Unix socket's lock: whoever holds an exclusive flock on PATH.lock
 * owns PATH, for its whole life. Taken before PATH is looked at, so two
 * daemons started at once cannot both find PATH free, unlink and bind;
 * the loser touches nothing. The holder removes PATH.lock (while still
 * holding it) when it stops, so a lock taken on a file that was removed
 * meanwhile is dropped and taken again on the current file. */
static void unix_lock_path(const struct daemon *d, char *out, size_t n) {
  snprintf(out, n, "%s.lock", d->cfg.unix_path);
}

/* Returns the locked descriptor, -EWOULDBLOCK when another process holds
 * the lock, or -errno. */
static int unix_lock_take(const char *lock_path) {
  for (int tries = 0; tries < 100; tries++) {
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
      return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
      int e = errno;
      close(fd);
      return e == EAGAIN ? -EWOULDBLOCK : -e;
    }
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(lock_path, &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      return fd;
    close(fd); /* its holder removed that file as it stopped: retry */
  }
  return -EWOULDBLOCK;
}

/* The locks held by the daemons of this process (several share a process
 * in the benchmark), by daemon. */
struct unix_lock {
  const struct daemon *d;
  int fd;
  struct unix_lock *next;
};
static struct unix_lock *unix_locks;
static pthread_mutex_t unix_locks_mu = PTHREAD_MUTEX_INITIALIZER;

static int unix_lock_keep(const struct daemon *d, int fd) {
  struct unix_lock *l = malloc(sizeof(*l));
  if (l == NULL)
    return RDZV_ENOMEM;
  l->d = d;
  l->fd = fd;
  pthread_mutex_lock(&unix_locks_mu);
  l->next = unix_locks;
  unix_locks = l;
  pthread_mutex_unlock(&unix_locks_mu);
  return 0;
}

/* Removes PATH.lock and releases the lock, if d holds it. */
void rdzv__unix_lock_release(const struct daemon *d) {
  struct unix_lock *l = NULL;
  pthread_mutex_lock(&unix_locks_mu);
  for (struct unix_lock **p = &unix_locks; *p != NULL; p = &(*p)->next) {
    if ((*p)->d == d) {
      l = *p;
      *p = l->next;
      break;
    }
  }
  pthread_mutex_unlock(&unix_locks_mu);
  if (l == NULL)
    return;
  char lock_path[RDZV_CONFIG_STR_MAX + 9];
  unix_lock_path(d, lock_path, sizeof(lock_path));
  unlink(lock_path);
  close(l->fd);
  free(l);
}

/* With the lock held: PATH may be free, or a stale socket of an earlier
 * run (removed here); anything else is refused and left alone. */
static int unix_path_claim(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? 0 : -errno;
  if (!S_ISSOCK(st.st_mode)) {
    fprintf(stderr, "rdzvd: unix:%s exists and is not a socket\n", path);
    return -EEXIST;
  }
  if (unix_socket_live(path)) {
    fprintf(stderr, "rdzvd: unix:%s is in use by a live daemon\n", path);
    return -EADDRINUSE;
  }
  if (unlink(path) < 0 && errno != ENOENT) {
    int e = errno;
    fprintf(stderr, "rdzvd: unix:%s: cannot remove the stale socket: %s\n",
            path, strerror(e));
    return -e;
  }
  return 0;
}

/* The directory of a Unix socket's path ("." for a bare name). */
static void socket_dir(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    snprintf(dir, n, ".");
  else if (slash == path)
    snprintf(dir, n, "/");
  else
    snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* The most entries of the socket's directory looked at for other
 * daemons' sockets; a larger directory counts as shared. */
#define DIR_SCAN_MAX 100000

/* Whether dir holds a Unix socket other than base (this daemon's): one of
 * another daemon (another job's, on a launcher's shared run directory,
 * /run/rdzv), whose peers of other uids may need to reach it. Stops at the
 * first one. Reads the directory with getdents64(2) a small buffer at a
 * time rather than readdir(3), whose 32 KiB reads made every daemon that
 * starts in a directory of thousands of sockets (the benchmark's 12,500
 * nodes) list a thousand entries to find the first. */
static bool dir_shared(const char *dir, const char *base) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return true;
  bool shared = false;
  long seen = 0;
  _Alignas(struct dirent64) char buf[2048];
  while (!shared) {
    ssize_t n = getdents64(fd, buf, sizeof(buf));
    if (n <= 0)
      break;
    for (ssize_t at = 0; !shared && at < n;) {
      const struct dirent64 *e = (const struct dirent64 *)(buf + at);
      struct stat st;
      at += e->d_reclen;
      if (++seen > DIR_SCAN_MAX)
        shared = true;
      else if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
               strcmp(e->d_name, base) == 0)
        continue;
      else if (e->d_type == DT_SOCK)
        shared = true;
      else if (e->d_type == DT_UNKNOWN &&
               fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        shared = S_ISSOCK(st.st_mode);
    }
  }
  close(fd);
  return shared;
}

/* The socket's directory gets the mode that says who may connect: 0700
 * when only this daemon's uid and root are allowed, 0711 when other uids
 * are (they may reach the socket, not list the directory) or when the
 * directory holds other daemons' sockets (dir_shared: 0700 would lock out
 * their peers). Only when it is this daemon's uid's and meant for it: not
 * a shared sticky directory (/tmp), not "/" nor a directory right under
 * it (/run, /var/run: system directories a chmod would break). Says what
 * it did, or why not, into out. Never fails the start: the socket's own
 * mode and the uid check hold without it. */
static void unix_dir_mode(struct daemon *d, const char *path, char *out,
                          size_t n) {
  char dir[PATH_MAX], real[PATH_MAX];
  struct stat st;
  socket_dir(path, dir, sizeof(dir));
  if (realpath(dir, real) == NULL || stat(real, &st) != 0) {
    snprintf(out, n, "its directory %s left as it is: %s", dir,
             strerror(errno));
    return;
  }
  mode_t have = st.st_mode & 07777;
  const char *slash = strrchr(real, '/');
  const char *base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
  bool shared = false;
  mode_t want = 0711;
  if (!others_allowed(d)) {
    shared = dir_shared(real, base);
    want = shared ? 0711 : 0700;
  }
  const char *why = shared ? " (it holds other daemons' sockets)" : "";
  if (st.st_uid != geteuid()) {
    snprintf(out, n,
             "its directory %s (mode %04o) left as it is: owned by "
             "uid %u, not this daemon's (%u)",
             real, (unsigned)have, (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (st.st_mode & S_ISVTX) {
    snprintf(out, n,
             "its directory %s (mode %04o) left as it is: a shared "
             "sticky directory",
             real, (unsigned)have);
  } else if (slash == NULL || slash == real) {
    snprintf(out, n,
             "its directory %s (mode %04o) left as it is: a system "
             "directory (give the socket one of its own)",
             real, (unsigned)have);
  } else if ((have & 0777) == want) {
    snprintf(out, n, "its directory %s: mode %04o already%s", real,
             (unsigned)have, why);
  } else if (chmod(real, (have & ~0777u) | want) != 0) {
    snprintf(out, n, "its directory %s (mode %04o) left as it is: chmod: %s",
             real, (unsigned)have, strerror(errno));
  } else {
    snprintf(out, n, "its directory %s: mode %04o -> %04o%s", real,
             (unsigned)have, (unsigned)((have & ~0777u) | want), why);
  }
}

/* After bind, before listen (nobody can connect yet): the socket gets the
 * mode that says who may connect, 0600 when only this daemon's uid and
 * root are allowed, else 0666 (the uid check at accept refuses the rest);
 * its directory too (unix_dir_mode). Logged in one line. 0, or -errno
 * when the socket's mode cannot be set (said on stderr). */
static int unix_modes(struct daemon *d, const char *path) {
  bool others = others_allowed(d);
  mode_t mode = others ? 0666 : 0600;
  if (chmod(path, mode) != 0) {
    int e = errno;
    fprintf(stderr, "rdzvd: unix:%s: cannot set the socket's mode %04o: %s\n",
            path, (unsigned)mode, strerror(e));
    return -e;
  }
  char dirs[PATH_MAX + 200];
  unix_dir_mode(d, path, dirs, sizeof(dirs));
  if (others)
    rdzv__log(d, 1,
              "unix:%s: mode 0666, every peer's uid checked "
              "(--allow-uids %s, this daemon's uid %u and root); %s",
              path, d->cfg.allow_uids, (unsigned)geteuid(), dirs);
  else
    rdzv__log(d, 1,
              "unix:%s: mode 0600 (this daemon's uid %u and root "
              "only); %s",
              path, (unsigned)geteuid(), dirs);
  return 0;
}

int rdzv__listen_unix(struct daemon *d) {
  const char *path = d->cfg.unix_path;
  struct sockaddr_un sa;
  if (path[0] == '\0')
    return 0;
  if (strlen(path) >= sizeof(sa.sun_path)) {
    fprintf(stderr,
            "rdzvd: unix:%s: the path is %zu bytes; a Unix socket path holds "
            "at most %zu bytes\n",
            path, strlen(path), sizeof(sa.sun_path) - 1);
    return RDZV_EBAD_ADDR;
  }
  char lock_path[RDZV_CONFIG_STR_MAX + 9];
  unix_lock_path(d, lock_path, sizeof(lock_path));
  int fd = unix_lock_take(lock_path);
  if (fd == -EWOULDBLOCK) {
    fprintf(stderr, "rdzvd: unix:%s is in use by a live daemon\n", path);
    return -EADDRINUSE;
  }
  if (fd < 0 && !parent_dir_exists(path)) {
    fprintf(stderr,
            "rdzvd: listen on unix:%s: its directory does not exist "
            "(create it first)\n",
            path);
    return UV_ENOENT;
  }
  if (fd < 0) {
    fprintf(stderr, "rdzvd: unix:%s: cannot take its lock file %s: %s\n", path,
            lock_path, strerror(-fd));
    return fd;
  }
  bool bound = false;
  int rc = unix_path_claim(path);
  if (rc == 0) {
    uv_pipe_init(d->loop, &d->unix_listen, 0);
    d->unix_listen.data = d;
    d->have_unix = true;
    rc = uv_pipe_bind(&d->unix_listen, path);
    bound = rc == 0;
    if (rc == 0)
      rc = unix_modes(d, path);
    if (rc == 0)
      rc = uv_listen((uv_stream_t *)&d->unix_listen, (int)d->cfg.backlog,
                     on_connection);
    if (rc < 0)
      fprintf(stderr, "rdzvd: listen on unix:%s: %s\n", path, uv_strerror(rc));
  }
  if (rc == 0)
    rc = unix_lock_keep(d, fd);
  if (rc < 0) {
    if (d->have_unix) {
      uv_close((uv_handle_t *)&d->unix_listen, rdzv__close_noop);
      d->have_unix = false;
    }
    if (bound)
      unlink(path);
    unlink(lock_path);
    close(fd);
  }
  return rc;
}
