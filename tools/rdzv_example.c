/* rdzv-example: a rank as a training job would be one. It joins the
 * rendezvous through its host's node, prints its assignment, obtains the
 * NCCL unique id(s) of the world communicator through the service (made by
 * the real ncclGetUniqueId, loaded with dlopen), and checks that every rank
 * holds the same bytes. Configured by the launcher's environment (see
 * rdzv_rendezvous_opts_from_env): RDZV_ADDR, RDZV_JOB, RDZV_HOST,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, ...; the job's secret from
 * RDZV_SECRET_FILE (or RDZV_SECRET).
 *
 *   rdzv-example [--nccl PATH|none] [--ranks-per-root N] [--timeout S]
 *
 * --nccl none makes ids from /dev/urandom instead (no NCCL needed); the
 * default loads libnccl.so.2 (RDZV_NCCL_LIBRARY, else the loader's search,
 * else /usr/local/cuda/lib64) and fails if it cannot.
 * Prints "rank R of W ..." and "ids identical on all W ranks: <digest>";
 * exits 0 on success, 1 on failure, 2 on usage errors, 3 when the job's
 * secret was refused or could not be read (RDZV_EAUTH: a retry will not
 * help). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_api.h"
#include "rdzv/rendezvous.h"
#include "rdzv/store.h"

static int make_nccl_id(void *arg, uint8_t *id) {
  struct rdzv_nccl_api *api = arg;
  rdzv_nccl_unique_id u;
  if (api->get_unique_id(&u) != 0)
    return RDZV_ENCCL;
  memcpy(id, &u, RDZV_UNIQUE_ID_BYTES);
  return 0;
}

static int make_random_id(void *arg, uint8_t *id) {
  (void)arg;
  FILE *f = fopen("/dev/urandom", "rb");
  if (f == NULL)
    return -errno;
  size_t n = fread(id, 1, RDZV_UNIQUE_ID_BYTES, f);
  fclose(f);
  return n == RDZV_UNIQUE_ID_BYTES ? 0 : -EIO;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct args {
  const char *nccl;
  int64_t ranks_per_root;
  double timeout_s;
};

static int parse_args(int argc, char **argv, struct args *a) {
  a->nccl = NULL;
  a->ranks_per_root = 128;
  a->timeout_s = 60;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (i + 1 >= argc)
      return -1;
    if (strcmp(argv[i], "--nccl") == 0) {
      a->nccl = argv[++i];
    } else if (strcmp(argv[i], "--ranks-per-root") == 0) {
      a->ranks_per_root = strtoll(argv[++i], &end, 10);
      if (*end != '\0' || a->ranks_per_root < 1)
        return -1;
    } else if (strcmp(argv[i], "--timeout") == 0) {
      a->timeout_s = strtod(argv[++i], &end);
      if (*end != '\0' || !(a->timeout_s > 0))
        return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* Every rank gathers every rank's digest of the ids and compares. */
static int check_same(rdzv_rendezvous_t *r, uint64_t digest) {
  char name[128];
  snprintf(name, sizeof(name), "rdzv/%s/g%" PRId64 "/example/digests", "world",
           rdzv_rendezvous_generation(r));
  struct rdzv_value *vals = NULL;
  uint64_t w = (uint64_t)rdzv_rendezvous_world_size(r);
  int rc = rdzv_store_gather(rdzv_rendezvous_client(r), name,
                             (uint64_t)rdzv_rendezvous_rank(r), w, &digest,
                             sizeof(digest), &vals, 60);
  for (uint64_t i = 0; rc == 0 && i < w; i++)
    if (vals[i].len != sizeof(digest) ||
        memcmp(vals[i].data, &digest, sizeof(digest)) != 0)
      rc = -1;
  rdzv_values_free(vals, w);
  return rc;
}

static int run(rdzv_rendezvous_t *r, const struct args *a,
               struct rdzv_nccl_api *api) {
  char host[256] = "", loc[256] = "";
  int32_t node = -1, first = -1, count = 0;
  int rc = rdzv_rendezvous_host_of(r, rdzv_rendezvous_rank(r), &node, &first,
                                   &count, host, sizeof(host), loc, sizeof(loc),
                                   a->timeout_s);
  if (rc < 0)
    return rc;
  printf("rank %d of %d: local rank %d of %d, node %d of %d, generation "
         "%" PRId64 ", host %s (ranks %d..%d)\n",
         rdzv_rendezvous_rank(r), rdzv_rendezvous_world_size(r),
         rdzv_rendezvous_local_rank(r), rdzv_rendezvous_local_size(r),
         rdzv_rendezvous_node_rank(r), rdzv_rendezvous_node_count(r),
         rdzv_rendezvous_generation(r), host, first, first + count - 1);
  /* This host's topology record: one line per rank, first to last. */
  char *topo = NULL;
  size_t tlen = 0;
  rc = rdzv_rendezvous_topology(r, node, &topo, &tlen, a->timeout_s);
  if (rc < 0)
    return rc;
  int lines = 0;
  for (char *p = topo; p < topo + tlen; p = strchr(p, '\n') + 1) {
    if (strtol(p, NULL, 10) != first + lines)
      rc = RDZV_ETOPOLOGY;
    lines++;
    if (strchr(p, '\n') == NULL)
      break;
  }
  rdzv_free(topo);
  if (rc < 0 || lines != count)
    return RDZV_ETOPOLOGY;
  printf("host record: %d ranks\n", lines);
  uint8_t *ids = NULL;
  int64_t nids = 0;
  rc = rdzv_rendezvous_unique_ids(r, "world", a->ranks_per_root,
                                  api ? make_nccl_id : make_random_id, api,
                                  &ids, &nids, a->timeout_s);
  if (rc < 0)
    return rc;
  uint64_t digest = fnv1a(ids, (size_t)nids * RDZV_UNIQUE_ID_BYTES);
  rdzv_free(ids);
  rc = check_same(r, digest);
  if (rc < 0)
    return rc;
  if (rdzv_rendezvous_rank(r) == 0)
    printf("ids identical on all %d ranks: %" PRIu64 " id(s) from %s, "
           "digest %016" PRIx64 "\n",
           rdzv_rendezvous_world_size(r), nids,
           api ? "ncclGetUniqueId" : "/dev/urandom", digest);
  return rdzv_rendezvous_barrier(r, "example-done", a->timeout_s);
}

int main(int argc, char **argv) {
  struct args a;
  static const char usage[] =
      "usage: rdzv-example [--nccl PATH|none] [--ranks-per-root N] "
      "[--timeout S]\n"
      "(the launcher's environment: RDZV_ADDR, RDZV_JOB, RDZV_HOST, "
      "LOCAL_RANK, LOCAL_WORLD_SIZE,\n WORLD_SIZE, RDZV_SECRET_FILE; exit 0 "
      "ok, 1 failed, 2 usage, 3 the job's secret refused)\n";
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
  if (parse_args(argc, argv, &a) < 0) {
    fputs(usage, stderr);
    return 2;
  }
  char err[1024] = "";
  struct rdzv_nccl_api *api = NULL;
  if (a.nccl == NULL || strcmp(a.nccl, "none") != 0) {
    const char *path = a.nccl ? a.nccl : rdzv_nccl_default_path();
    if (rdzv_nccl_load(path, &api, err, sizeof(err)) < 0) {
      fprintf(stderr, "rdzv-example: %s\n", err);
      return 1;
    }
  }
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_opts_init(&o);
  o.timeout_s = a.timeout_s;
  rdzv_rendezvous_t *r = NULL;
  int rc = rdzv_rendezvous_opts_from_env(&o, err, sizeof(err));
  if (rc == 0)
    rc = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  if (rc == 0) {
    rc = run(r, &a, api);
    if (rc < 0)
      snprintf(err, sizeof(err), "%s", rdzv_rendezvous_last_error(r));
  }
  if (rc < 0)
    fprintf(stderr, "rdzv-example: %s (%s)\n", rdzv_strerror(rc), err);
  rdzv_rendezvous_destroy(r);
  rdzv_nccl_unload(api);
  return rc == RDZV_EAUTH ? 3 : rc < 0 ? 1 : 0;
}
