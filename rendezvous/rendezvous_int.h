/* What rendezvous.c (join, handle) and ids.c (unique ids, topology,
 * sub-groups) share. Private. */
#ifndef RDZV_RENDEZVOUS_INT_H
#define RDZV_RENDEZVOUS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv/rendezvous.h"
#include "rdzv/store.h"
#include "rendezvous/assign.h"

#define RDZV_RENDEZVOUS_MAGIC 0x7264767au

struct rdzv_rendezvous {
  uint32_t magic;
  rdzv_client_t *c;
  char round[128];
  struct rdzv_assignment a;
  int64_t gen;
  char *hosts; /* the host table, once fetched */
  size_t hosts_len;
  char last_error[1024];
  /* The server's text of the last failed request submitted here (not
   * through rdzv_store_*, which keep it in the client's last_error). */
  char reply_text[512];
};

/* Keeps the server's text (keys[0] of a failure) of a raw request. */
void rdzv__rdv_keep_reply_text(rdzv_rendezvous_t *r,
                               const struct rdzv_result *res);
/* Sets r's last error to "what: <rc's text> (<the server's or client's
 * detail>)" and returns rc. */
int rdzv__rdv_fail(rdzv_rendezvous_t *r, int rc, const char *what);
/* "rdzv/<round>/g<gen>/<rest>" into out (n bytes). */
void rdzv__rdv_gen_key(const rdzv_rendezvous_t *r, char *out, size_t n,
                       const char *rest);

#endif /* RDZV_RENDEZVOUS_INT_H */
