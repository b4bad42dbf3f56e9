/* A plain main() for the wire fuzz target, so any compiler (gcc under
 * Bazel) can run it as a regression test without libFuzzer.
 *
 * Usage: NAME_fuzz_regress PATH...   (files or directories of files)
 *
 * Each corpus file is run as is, then every proper prefix of it and every
 * one-byte change (xor 0xFF, +1) of it, each from an exact-size heap copy
 * so ASan builds catch over-reads. A failed property aborts. The run fails
 * if no corpus file was found, so a broken data path cannot pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t n_inputs;

static void run_copy(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n != 0 ? n : 1);

  if (q == NULL) {
    perror("malloc");
    exit(1);
  }
  if (n != 0)
    memcpy(q, p, n);
  LLVMFuzzerTestOneInput(q, n);
  free(q);
  n_inputs++;
}

static void run_variants(uint8_t *p, size_t n) {
  size_t i;
  uint8_t keep;

  run_copy(p, n);
  for (i = 0; i < n; i++)
    run_copy(p, i);
  for (i = 0; i < n; i++) {
    keep = p[i];
    p[i] = (uint8_t)(keep ^ 0xFF);
    run_copy(p, n);
    p[i] = (uint8_t)(keep + 1);
    run_copy(p, n);
    p[i] = keep;
  }
}

/* Reads a whole file into a malloc'ed block; returns 0 on success. */
static int read_file(const char *path, uint8_t **out, size_t *n) {
  FILE *f = fopen(path, "rb");
  uint8_t *p = NULL, *q;
  size_t len = 0, cap = 0, got;
  int err;

  if (f == NULL)
    return -1;
  for (;;) {
    if (len == cap) {
      cap = cap != 0 ? cap * 2 : 4096;
      q = realloc(p, cap);
      if (q == NULL) {
        fclose(f);
        free(p);
        return -1;
      }
      p = q;
    }
    got = fread(p + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  err = ferror(f);
  fclose(f);
  if (err) {
    free(p);
    return -1;
  }
  *out = p;
  *n = len;
  return 0;
}

static int run_file(const char *path) {
  uint8_t *p = NULL;
  size_t n = 0;

  if (read_file(path, &p, &n) != 0) {
    fprintf(stderr, "cannot read %s\n", path);
    return -1;
  }
  run_variants(p, n);
  free(p);
  return 1;
}

/* Returns the number of files run, or -1 on an error. */
static int run_path(const char *path) {
  struct stat st;
  struct dirent *e;
  DIR *d;
  char child[4096];
  int total = 0, rc;

  if (stat(path, &st) != 0) {
    perror(path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return run_file(path);
  d = opendir(path);
  if (d == NULL) {
    perror(path);
    return -1;
  }
  for (;;) {
    e = readdir(d);
    if (e == NULL)
      break;
    if (e->d_name[0] == '.')
      continue;
    if (snprintf(child, sizeof(child), "%s/%s", path, e->d_name) >=
        (int)sizeof(child))
      continue;
    rc = run_path(child);
    if (rc < 0) {
      closedir(d);
      return -1;
    }
    total += rc;
  }
  closedir(d);
  return total;
}

int main(int argc, char **argv) {
  int files = 0, rc, i;

  for (i = 1; i < argc; i++) {
    rc = run_path(argv[i]);
    if (rc < 0)
      return 1;
    files += rc;
  }
  if (files == 0) {
    fprintf(stderr, "no corpus files found\n");
    return 1;
  }
  const char *self = strrchr(argv[0], '/');
  printf("%s: %d corpus files, %zu inputs, all properties held\n",
         self != NULL ? self + 1 : argv[0], files, n_inputs);
  return 0;
}
