/* rdzvctl's per-job secret commands (ctl.h), which need no server:
 * site-key makes a site key, job-secret derives a job's secret from it
 * (store/auth). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "store/auth/auth.h"
#include "tools/ctl/ctl.h"
#include "tools/ctl/rounds.h"
#include "tools/hostlist.h"

/* ---- Per-job secrets (no server) -------------------------------------- */

/* Writes all len bytes to fd (again after EINTR or a short write). 0 or
 * -errno. */
static int write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, p + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    done += (size_t)w;
  }
  return 0;
}

/* Writes len bytes of data to path atomically, as a file of the caller
 * with the given mode: a new file beside it (path.tmp.XXXXXX, made with
 * mode 0600 by mkstemp, then chmod'ed to mode), written and fsync'ed,
 * then renamed over path (replace: a reader sees the old file or the
 * whole new one, never a part) or hard-linked to it (!replace: fails with
 * -EEXIST where path exists, even one made meanwhile), and the directory
 * fsync'ed. Returns 0 or a negative errno, with err (errlen bytes) saying
 * what failed, naming path (never the data). Nothing is left behind on
 * failure but an old path. */
static int write_file_atomic(const char *path, const void *data, size_t len,
                             mode_t mode, int replace, char *err,
                             size_t errlen) {
  char tmp[PATH_MAX], dirbuf[PATH_MAX];
  const char *step = "creating a temporary file beside it";
  int fd, dfd, rc = 0;
  char *slash;

  if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >=
      sizeof(tmp)) {
    snprintf(err, errlen, "%s: %s", path, strerror(ENAMETOOLONG));
    return -ENAMETOOLONG;
  }
  fd = mkstemp(tmp);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "%s: %s: %s", path, step, strerror(-rc));
    return rc;
  }
  step = "setting its mode";
  if (fchmod(fd, mode) < 0)
    rc = -errno;
  if (rc == 0 && (rc = write_all(fd, data, len)) < 0)
    step = "writing it";
  if (rc == 0 && fsync(fd) < 0) {
    rc = -errno;
    step = "syncing it";
  }
  if (close(fd) < 0 && rc == 0) {
    rc = -errno;
    step = "closing it";
  }
  if (rc == 0 && replace && rename(tmp, path) < 0) {
    rc = -errno;
    step = "renaming it into place";
  }
  if (rc == 0 && !replace && link(tmp, path) < 0) {
    rc = -errno;
    step = "linking it into place";
  }
  if (rc < 0 || !replace)
    unlink(tmp);
  if (rc < 0) {
    if (rc == -EEXIST)
      snprintf(err, errlen, "%s exists", path);
    else
      snprintf(err, errlen, "%s: %s: %s", path, step, strerror(-rc));
    return rc;
  }
  /* The new name itself survives a crash. */
  snprintf(dirbuf, sizeof(dirbuf), "%s", path);
  slash = strrchr(dirbuf, '/');
  if (slash == dirbuf)
    slash[1] = '\0';
  else if (slash != NULL)
    *slash = '\0';
  else
    snprintf(dirbuf, sizeof(dirbuf), ".");
  dfd = open(dirbuf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

/* rdzvctl site-key --out FILE: 32 bytes of OpenSSL's CSPRNG
 * (rdzv_auth_nonce) as 64 lowercase hex digits and a newline, in a new
 * FILE of mode 0400. A site key opens every job's secret, and replacing
 * one changes them all: an existing FILE is refused (exit 1), never
 * overwritten. */
int cmd_site_key(struct ctl *ctl, int argc, char **argv) {
  uint8_t key[32];
  char text[2 * sizeof(key) + 1];
  char err[PATH_MAX + 128];
  int rc;

  (void)argc;
  (void)argv;
  if (ctl->out == NULL || ctl->out[0] == '\0') {
    ctl_usage_error("site-key: --out FILE is required (a site key never goes "
                    "to stdout)");
    return EXIT_USAGE;
  }
  if (rdzv_auth_nonce(key, sizeof(key)) < 0) {
    fprintf(stderr, "rdzvctl: site-key: the system's random generator "
                    "failed (OpenSSL RAND_bytes); no key written\n");
    return EXIT_FAILED;
  }
  rdzv_auth_hex(key, sizeof(key), text);
  text[2 * sizeof(key)] = '\n';
  rc = write_file_atomic(ctl->out, text, sizeof(text), 0400, 0, err,
                         sizeof(err));
  rdzv_auth_wipe(key, sizeof(key));
  rdzv_auth_wipe(text, sizeof(text));
  if (rc == -EEXIST) {
    fprintf(stderr,
            "rdzvctl: site-key: %s exists; refusing to overwrite a site key "
            "(every job's secret derives from it: a new key changes them "
            "all). Remove it first to make a new one\n",
            ctl->out);
    return EXIT_FAILED;
  }
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: site-key: %s\n", err);
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* Checks that the site key at path is fit to hold every job's secret: a
 * regular file (a link to one is followed) of the caller or root, which
 * no one else may read or write (mode & 077 == 0; a job's secret file
 * may be group-readable, a site key may not). 0, or EXIT_FAILED with a
 * message naming path. */
static int site_key_check(const char *path) {
  struct stat st;

  if (stat(path, &st) < 0) {
    int e = errno;
    fprintf(stderr, "rdzvctl: job-secret: site key %s: %s%s\n", path,
            strerror(e),
            e == ENOENT ? " (make one with `rdzvctl site-key --out FILE` "
                          "and copy it to every host)"
                        : "");
    return EXIT_FAILED;
  }
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "rdzvctl: job-secret: site key %s is not a regular file\n",
            path);
    return EXIT_FAILED;
  }
  if ((st.st_mode & 077) != 0) {
    fprintf(stderr,
            "rdzvctl: job-secret: site key %s has mode %04o: its group or "
            "others may access it, and it opens every job's secret (chmod "
            "0400 %s)\n",
            path, (unsigned)(st.st_mode & 07777), path);
    return EXIT_FAILED;
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    fprintf(stderr,
            "rdzvctl: job-secret: site key %s belongs to uid %u, neither "
            "this user (uid %u) nor root: its owner could change every "
            "job's secret\n",
            path, (unsigned)st.st_uid, (unsigned)geteuid());
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* rdzvctl job-secret --site-key FILE --job JOB [--out FILE]: JOB's
 * secret, rdzv_auth_job_secret(site key, JOB) (store/auth/auth.h: 64 hex
 * digits of HMAC-SHA256(site key, "rdzv-job-secret-v1" | u8 len(JOB) |
 * JOB), the site key being its file's bytes without trailing
 * whitespace), and a newline, to --out (atomically, mode 0400, the
 * caller's) or to stdout. */
int cmd_job_secret(struct ctl *ctl, int argc, char **argv) {
  uint8_t key[RDZV_AUTH_SECRET_MAX_BYTES + 1];
  char secret[2 * 32 + 2];
  char err[PATH_MAX + 256];
  size_t key_len = 0, job_len;
  int rc, code = EXIT_OK;

  (void)argc;
  (void)argv;
  if (ctl->job == NULL)
    ctl->job = getenv("RDZV_JOB");
  if (ctl->site_key == NULL || ctl->site_key[0] == '\0') {
    ctl_usage_error("job-secret: --site-key FILE is required");
    return EXIT_USAGE;
  }
  if (ctl->job == NULL || ctl->job[0] == '\0') {
    ctl_usage_error("job-secret: no job id: pass --job JOB or set RDZV_JOB");
    return EXIT_USAGE;
  }
  job_len = strlen(ctl->job);
  if (job_len > RDZV_AUTH_JOB_MAX_BYTES) {
    ctl_usage_error("job-secret: the job id is %zu bytes; at most %u", job_len,
                    RDZV_AUTH_JOB_MAX_BYTES);
    return EXIT_USAGE;
  }
  if (ctl->out != NULL && ctl->out[0] == '\0') {
    ctl_usage_error("job-secret: --out needs a file name");
    return EXIT_USAGE;
  }
  code = site_key_check(ctl->site_key);
  if (code != EXIT_OK)
    return code;
  rc = rdzv_auth_secret_load(ctl->site_key, key, sizeof(key), &key_len, err,
                             sizeof(err));
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: job-secret: site key: %s\n", err);
    return EXIT_FAILED;
  }
  rc = rdzv_auth_job_secret(key, key_len, (const uint8_t *)ctl->job, job_len,
                            secret);
  rdzv_auth_wipe(key, sizeof(key));
  if (rc < 0) {
    fprintf(stderr, "rdzvctl: job-secret: job %s: %s\n", ctl->job,
            strerror(-rc));
    return EXIT_FAILED;
  }
  secret[64] = '\n';
  secret[65] = '\0';
  if (ctl->out != NULL) {
    rc = write_file_atomic(ctl->out, secret, 65, 0400, 1, err, sizeof(err));
    if (rc < 0) {
      fprintf(stderr, "rdzvctl: job-secret: job %s: %s\n", ctl->job, err);
      code = EXIT_FAILED;
    }
  } else {
    /* Straight to the descriptor: no copy left in stdio's buffer. */
    rc = write_all(STDOUT_FILENO, secret, 65);
    if (rc < 0) {
      fprintf(stderr, "rdzvctl: job-secret: writing to stdout: %s\n",
              strerror(-rc));
      code = EXIT_FAILED;
    }
  }
  rdzv_auth_wipe(secret, sizeof(secret));
  return code;
}
