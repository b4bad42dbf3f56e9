/* delay-relay, private to tools: the relay's state (its pairs, links,
 * directions and held chunks) and what the command (delay_relay.c: the
 * options, the set-up, the loop, the statistics) and the links
 * (delay_relay_links.c) offer each other. */
#ifndef RDZV_TOOLS_DELAY_RELAY_INT_H
#define RDZV_TOOLS_DELAY_RELAY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RELAY_MAX_PAIRS 4096
#define RELAY_READ_BYTES 65536
#define RELAY_LATE_BUCKETS 10001 /* 0..9999 us, then "10 ms or more" */

enum ep_kind { EP_LISTENER, EP_SIDE, EP_SIGNAL };

struct endpoint {
  enum ep_kind kind;
  struct link *lk; /* EP_SIDE */
  int side;        /* EP_SIDE: 0 accepted, 1 target */
  int pair;        /* EP_LISTENER */
};

struct chunk {
  struct chunk *next;  /* in its direction */
  struct chunk *gnext; /* in the global FIFO */
  struct dir *dir;     /* NULL: its link is gone (still in the global FIFO) */
  uint64_t due_ns;
  uint32_t len, off;
  bool in_global; /* not due yet */
  bool fin;       /* the end of the stream, no data */
  bool timed;     /* its lateness is recorded */
  uint8_t data[];
};

struct dir { /* from side `from` to the other side */
  struct link *lk;
  int from;
  struct chunk *head, *tail;
  size_t queued; /* bytes held */
  bool eof;      /* the source ended: read no more */
  bool fin_sent; /* shutdown(SHUT_WR) done on the target side */
  bool to_flush; /* on the relay's flush list */
  struct dir *next_flush;
};

struct link {
  int fd[2];
  struct endpoint ep[2];
  uint32_t events[2]; /* registered with epoll */
  struct dir d[2];    /* d[s]: from side s to side 1-s */
  bool connecting;    /* side 1 not connected yet */
  bool gone[2];       /* that side's peer closed both ways: off epoll */
  bool dead;
  struct link *next_dead;
  struct link *prev, *next; /* every live link (freed at exit) */
};

struct pair {
  char listen[256], target[256];
  int fd;
  struct endpoint ep;
};

struct relay {
  int ep;
  uint64_t delay_ns;
  size_t max_queued;
  bool realtime; /* --realtime: SCHED_FIFO if allowed */
  bool rt;       /* ... and it was */
  struct pair *pairs;
  int npairs;
  struct chunk *ghead, *gtail;
  struct link *dead;
  struct link *links; /* live ones */
  struct dir *flush;  /* directions with chunks that just came due */
  uint8_t buf[RELAY_READ_BYTES];
  /* statistics */
  uint64_t accepted, open, connect_failed, chunks, bytes;
  uint64_t late[RELAY_LATE_BUCKETS];
};

/* delay_relay_links.c. The monotonic clock, nanoseconds. */
uint64_t relay_now_ns(void);
/* Fills *ss from "unix:PATH", "tcp:HOST:PORT" or "HOST:PORT". Returns 0,
 * or -1 with a reason in err. */
int relay_parse_addr(const char *a, struct sockaddr_storage *ss, socklen_t *len,
                     char *err, size_t errn);
/* Takes every pending connection on pair p's listener, each a link to p's
 * target. */
void relay_accept_all(struct relay *r, struct pair *p);
/* Side s of lk is ready for what ev says (epoll's events). */
void relay_side_ready(struct relay *r, struct link *lk, int s, uint32_t ev);
/* Moves every due chunk out of the global FIFO and writes its direction. */
void relay_release_due(struct relay *r);
/* Closes both sides of lk; its memory goes at the end of the loop pass
 * (events of this pass may still name it). */
void relay_link_kill(struct relay *r, struct link *lk);

#endif /* RDZV_TOOLS_DELAY_RELAY_INT_H */
