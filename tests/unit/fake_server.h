/* A FAKE SERVER for the client library's tests only: a forked child that
 * speaks the wire protocol (through the real codec) on a Unix socket and
 * on TCP 127.0.0.1 with an ephemeral port. It is not rdzvd and implements
 * just enough of the store to exercise the client:
 *
 *  - hello: accepted if keys[0] equals opts.job_id, else EJOB_MISMATCH;
 *  - set/get/add/cas/delete/mget/mset/append/nkeys on a small table;
 *  - wait: answered at once if every key exists, when a later set makes
 *    them exist, or at half its timeout with EDEADLINE and the missing
 *    keys (never, with FAKE_WAIT_NEVER);
 *  - barrier/gather: answered when b members have contributed;
 *  - stats: a fixed JSON object;
 *  - get of special keys: "drop" closes the connection without a reply,
 *    "error" answers with an ERROR frame, "garbage" with bytes that are
 *    not a frame, "huge" with a frame header announcing 1 GiB. */
#ifndef RDZV_TESTS_FAKE_SERVER_H
#define RDZV_TESTS_FAKE_SERVER_H

#include <sys/types.h>

enum fake_wait_mode {
  FAKE_WAIT_HALF_TIMEOUT = 0, /* EDEADLINE at a/2 ms */
  FAKE_WAIT_NEVER = 1,        /* only a set answers it */
};

struct fake_server_opts {
  const char *dir;    /* directory for the socket "fake.sock" */
  const char *job_id; /* the job id the hello must carry */
  /* Before listening on the Unix socket: sleep delay_ms, or with
   * delay_ms < 0 wait for fake_server_go. (TCP listens at once.) */
  int delay_ms;
  int wait_mode; /* enum fake_wait_mode */
};

struct fake_server {
  pid_t pid;
  int ctl; /* write end: closing it tells the child to exit */
  int port;
  char unix_addr[160]; /* "unix:<dir>/fake.sock" */
  char tcp_addr[64];   /* "tcp:127.0.0.1:<port>" */
  char path[128];
};

/* Forks the server. Returns 0 or -errno. */
int fake_server_start(struct fake_server *s, const struct fake_server_opts *o);
/* Lets a server started with delay_ms < 0 listen on its Unix socket. */
void fake_server_go(struct fake_server *s);
/* Stops the child, reaps it, removes the socket file, closes the pipes. */
void fake_server_stop(struct fake_server *s);

#endif /* RDZV_TESTS_FAKE_SERVER_H */
