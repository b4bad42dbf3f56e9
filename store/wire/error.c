/* The rdzv error space: messages and names generated from RDZV_ERRNO_MAP.
 *
 * Project codes come from the X-macro table in rdzv/error.h. Negated errno
 * values use glibc's strerrordesc_np/strerrorname_np (glibc >= 2.32), which
 * return pointers to static, immutable strings and so are thread-safe,
 * unlike strerror(). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <limits.h>
#include <string.h>

#include "rdzv/error.h"

/* The errno value a status negates, or 0 if it is not a negated errno.
 * INT_MIN is excluded because negating it overflows. */
static int status_errno(int status) {
  if (status >= 0 || status == INT_MIN)
    return 0;
  return -status;
}

const char *rdzv_strerror(int status) {
  const char *s;

  if (status == 0)
    return "success";
  switch (status) {
#define RDZV_ERR_MSG_(name, val, msg)                                          \
  case (val):                                                                  \
    return (msg);
    RDZV_ERRNO_MAP(RDZV_ERR_MSG_)
#undef RDZV_ERR_MSG_
  default:
    break;
  }
  s = NULL;
  if (status_errno(status) != 0)
    s = strerrordesc_np(status_errno(status));
  return s != NULL ? s : "unknown error";
}

const char *rdzv_err_name(int status) {
  const char *s;

  if (status == 0)
    return "OK";
  switch (status) {
#define RDZV_ERR_NAME_(name, val, msg)                                         \
  case (val):                                                                  \
    return "RDZV_" #name;
    RDZV_ERRNO_MAP(RDZV_ERR_NAME_)
#undef RDZV_ERR_NAME_
  default:
    break;
  }
  s = NULL;
  if (status_errno(status) != 0)
    s = strerrorname_np(status_errno(status));
  return s != NULL ? s : "UNKNOWN";
}
