/* comm/nccl_api.c: open libnccl with dlopen and fill the function table.
 *
 * See nccl_api.h for the contract. Nothing here includes nccl.h or links
 * NCCL: the library is found at run time, so rdzv builds and runs on
 * machines without CUDA. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NODELETE */
#endif

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_api.h"
#include "rdzv/error.h"

/* dlsym returns void *; POSIX guarantees that it converts to a function
 * pointer, which we rely on when storing symbols by offset below. */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
               "function pointers must be pointer-sized (POSIX dlsym)");

/* The entry points filled after the version check, by symbol name and by
 * the offset of their member in the table. ncclGetVersion is resolved on
 * its own, first (see rdzv_nccl_load). */
struct nccl_sym {
  const char *name;
  size_t offset;
};

#define SYM_(name, member)                                                     \
  { (name), offsetof(struct rdzv_nccl_api, member) }
static const struct nccl_sym nccl_syms[] = {
    SYM_("ncclGetUniqueId", get_unique_id),
    SYM_("ncclCommInitRankConfig", comm_init_rank_config),
    SYM_("ncclCommInitRankScalable", comm_init_rank_scalable),
    SYM_("ncclCommSplit", comm_split),
    SYM_("ncclCommGetAsyncError", comm_get_async_error),
    SYM_("ncclCommFinalize", comm_finalize),
    SYM_("ncclCommDestroy", comm_destroy),
    SYM_("ncclCommAbort", comm_abort),
    SYM_("ncclGetErrorString", get_error_string),
    SYM_("ncclGetLastError", get_last_error),
    SYM_("ncclAllReduce", all_reduce),
    SYM_("ncclCommCount", comm_count),
    SYM_("ncclCommUserRank", comm_user_rank),
};

/* Entry points a library may lack (NULL in the table then): newer than
 * RDZV_NCCL_MIN_VERSION; rdzv_nccl_optional() checks them before a call. */
static const struct nccl_sym nccl_optional_syms[] = {
    SYM_("ncclCommShrink", comm_shrink),
    SYM_("ncclCommGetUniqueId", comm_get_unique_id),
    SYM_("ncclCommGrow", comm_grow),
};
#undef SYM_

/* A bounded message under construction in the caller's buffer. Appends
 * past the end are dropped; the text stays NUL-terminated. */
struct msg {
  char *buf;
  size_t cap;
  size_t len;
};

static void msg_init(struct msg *m, char *buf, size_t cap) {
  m->buf = cap > 0 ? buf : NULL;
  m->cap = buf != NULL ? cap : 0;
  m->len = 0;
  if (m->buf != NULL)
    m->buf[0] = '\0';
}

static void msg_add(struct msg *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void msg_add(struct msg *m, const char *fmt, ...) {
  va_list ap;
  size_t room;
  int n;

  if (m->buf == NULL || m->len + 1 >= m->cap)
    return;
  room = m->cap - m->len;
  va_start(ap, fmt);
  n = vsnprintf(m->buf + m->len, room, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  m->len += (size_t)n < room ? (size_t)n : room - 1;
}

const char *rdzv_nccl_default_path(void) {
  /* The one place the variable is read; see nccl_api.h. */
  const char *v = getenv("RDZV_NCCL_LIBRARY");

  return v != NULL && v[0] != '\0' ? v : NULL;
}

char *rdzv_nccl_version_format(int code, char *buf, size_t n) {
  int major, minor, patch;

  if (buf == NULL || n == 0)
    return buf;
  if (code < 0) {
    snprintf(buf, n, "unknown");
    return buf;
  }
  if (code >= 10000) {
    major = code / 10000;
    minor = (code / 100) % 100;
  } else {
    major = code / 1000;
    minor = (code / 100) % 10;
  }
  patch = code % 100;
  snprintf(buf, n, "%d.%d.%d", major, minor, patch);
  return buf;
}

void rdzv_nccl_config_init(struct rdzv_nccl_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->size = sizeof(*cfg);
  cfg->magic = RDZV_NCCL_CONFIG_MAGIC;
  cfg->version = RDZV_NCCL_CONFIG_VERSION;
  cfg->blocking = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->cgaClusterSize = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->minCTAs = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->maxCTAs = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->netName = NULL;
  cfg->splitShare = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->trafficClass = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->commName = NULL;
  cfg->collnetEnable = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->CTAPolicy = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->shrinkShare = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->nvlsCTAs = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->nChannelsPerNetPeer = RDZV_NCCL_CONFIG_UNDEF_INT;
  cfg->nvlinkCentricSched = RDZV_NCCL_CONFIG_UNDEF_INT;
}

/* Opens the first candidate dlopen accepts and sets *which to its index.
 * On failure returns NULL with every candidate and its dlerror() text in
 * `m`. */
static void *open_first(const char *const *candidates, size_t n, size_t *which,
                        struct msg *m) {
  const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
  const char *why;
  size_t i, tried = 0;
  void *dl;

  msg_add(m, "NCCL library not found; tried:");
  for (i = 0; i < n; i++) {
    if (candidates[i] == NULL || candidates[i][0] == '\0')
      continue;
    dl = dlopen(candidates[i], flags);
    if (dl != NULL) {
      *which = i;
      return dl;
    }
    why = dlerror();
    msg_add(m, "%s '%s' (%s)", tried == 0 ? "" : ";", candidates[i],
            why != NULL ? why : "unknown dlopen error");
    tried++;
  }
  if (tried == 0)
    msg_add(m, " nothing (every path given was empty)");
  return NULL;
}

/* Resolves and calls ncclGetVersion and checks the result against
 * RDZV_NCCL_MIN_VERSION. */
static int check_version(struct rdzv_nccl_api *api, struct msg *m) {
  char found[32], needed[32];
  rdzv_nccl_result res;
  void *p;

  p = dlsym(api->dl, "ncclGetVersion");
  if (p == NULL) {
    msg_add(m, "NCCL library '%s' lacks required symbol(s): ncclGetVersion",
            api->path);
    return RDZV_ENCCL_SYMBOL;
  }
  memcpy(&api->get_version, &p, sizeof(p));
  api->version = -1;
  res = api->get_version(&api->version);
  if (res != RDZV_NCCL_SUCCESS) {
    msg_add(m, "ncclGetVersion in '%s' failed (ncclResult %d)", api->path,
            (int)res);
    return RDZV_ENCCL;
  }
  if (api->version < RDZV_NCCL_MIN_VERSION) {
    rdzv_nccl_version_format(api->version, found, sizeof(found));
    rdzv_nccl_version_format(RDZV_NCCL_MIN_VERSION, needed, sizeof(needed));
    msg_add(m,
            "NCCL library '%s' is version %s (code %d); rdzv needs %s "
            "(code %d) or newer, for ncclCommInitRankScalable",
            api->path, found, api->version, needed, RDZV_NCCL_MIN_VERSION);
    return RDZV_ENCCL_VERSION;
  }
  return 0;
}

/* Fills every member of nccl_syms[]. Names all missing symbols at once, so
 * one run tells the user everything that is wrong with the library. */
static int resolve_all(struct rdzv_nccl_api *api, struct msg *m) {
  char version[32];
  size_t i, missing = 0;
  void *p;

  for (i = 0; i < sizeof(nccl_syms) / sizeof(nccl_syms[0]); i++) {
    p = dlsym(api->dl, nccl_syms[i].name);
    if (p != NULL) {
      memcpy((char *)api + nccl_syms[i].offset, &p, sizeof(p));
      continue;
    }
    if (missing == 0) {
      rdzv_nccl_version_format(api->version, version, sizeof(version));
      msg_add(m, "NCCL library '%s' (version %s) lacks required symbol(s):",
              api->path, version);
    }
    msg_add(m, "%s %s", missing == 0 ? "" : ",", nccl_syms[i].name);
    missing++;
  }
  /* Optional ones stay NULL when absent (the table was calloc'd). */
  for (i = 0; i < sizeof(nccl_optional_syms) / sizeof(nccl_optional_syms[0]);
       i++) {
    p = dlsym(api->dl, nccl_optional_syms[i].name);
    if (p != NULL)
      memcpy((char *)api + nccl_optional_syms[i].offset, &p, sizeof(p));
  }
  return missing == 0 ? 0 : RDZV_ENCCL_SYMBOL;
}

int rdzv_nccl_optional(const struct rdzv_nccl_api *api, const char *symbol,
                       int since, int present, char *err, size_t errlen) {
  char found[32], needed[32];
  struct msg m;

  msg_init(&m, err, errlen);
  if (api == NULL || symbol == NULL) {
    msg_add(&m, "rdzv_nccl_optional: no NCCL table or symbol");
    return -EINVAL;
  }
  rdzv_nccl_version_format(api->version, found, sizeof(found));
  rdzv_nccl_version_format(since, needed, sizeof(needed));
  if (api->version < since) {
    msg_add(&m,
            "%s needs NCCL %s (code %d) or newer; NCCL library '%s' is "
            "version %s (code %d)",
            symbol, needed, since, api->path, found, api->version);
    return RDZV_ENCCL_VERSION;
  }
  if (!present) {
    msg_add(&m,
            "NCCL library '%s' (version %s) lacks symbol %s (NCCL has it "
            "from %s on)",
            api->path, found, symbol, needed);
    return RDZV_ENCCL_SYMBOL;
  }
  return 0;
}

int rdzv_nccl_load_first(const char *const *candidates, size_t n,
                         struct rdzv_nccl_api **out, char *err, size_t errlen) {
  struct rdzv_nccl_api *api;
  struct msg m;
  size_t which = 0;
  void *dl;
  int rc;

  msg_init(&m, err, errlen);
  if (out == NULL) {
    msg_add(&m, "rdzv_nccl_load: out is NULL");
    return -EINVAL;
  }
  *out = NULL;
  if (candidates == NULL || n == 0) {
    msg_add(&m, "NCCL library not found: no path to try");
    return RDZV_ENCCL_MISSING;
  }
  dl = open_first(candidates, n, &which, &m);
  if (dl == NULL)
    return RDZV_ENCCL_MISSING;
  msg_init(&m, err, errlen); /* Drop the failures of earlier candidates. */
  api = calloc(1, sizeof(*api));
  if (api != NULL)
    api->path = strdup(candidates[which]);
  if (api == NULL || api->path == NULL) {
    free(api);
    dlclose(dl);
    msg_add(&m, "out of memory loading NCCL");
    return RDZV_ENOMEM;
  }
  api->dl = dl;
  rc = check_version(api, &m);
  if (rc == 0)
    rc = resolve_all(api, &m);
  if (rc != 0) {
    rdzv_nccl_unload(api);
    return rc;
  }
  *out = api;
  return 0;
}

int rdzv_nccl_load(const char *path, struct rdzv_nccl_api **out, char *err,
                   size_t errlen) {
  static const char *const defaults[] = {RDZV_NCCL_DEFAULT_SONAME,
                                         RDZV_NCCL_DEFAULT_CUDA_PATH};

  if (path != NULL && path[0] != '\0')
    return rdzv_nccl_load_first(&path, 1, out, err, errlen);
  return rdzv_nccl_load_first(defaults, sizeof(defaults) / sizeof(defaults[0]),
                              out, err, errlen);
}

void rdzv_nccl_unload(struct rdzv_nccl_api *api) {
  if (api == NULL)
    return;
  if (api->dl != NULL)
    dlclose(api->dl);
  free(api->path);
  free(api);
}

int rdzv_nccl_check(const struct rdzv_nccl_api *api, rdzv_nccl_comm_t comm,
                    rdzv_nccl_result result, const char *what, char *err,
                    size_t errlen) {
  const char *text = NULL;
  const char *last = NULL;
  struct msg m;

  if (result == RDZV_NCCL_SUCCESS)
    return 0;
  msg_init(&m, err, errlen);
  if (api != NULL && api->get_error_string != NULL)
    text = api->get_error_string(result);
  msg_add(&m, "%s: %s (ncclResult %d)", what != NULL ? what : "NCCL call",
          text != NULL ? text : "unknown error", (int)result);
  if (api != NULL && api->get_last_error != NULL && comm != NULL)
    last = api->get_last_error(comm);
  if (last != NULL && last[0] != '\0')
    msg_add(&m, "; last error: %s", last);
  return RDZV_ENCCL;
}
