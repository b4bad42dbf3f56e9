/* comm_gpu: one rank, one GPU, through the whole communicator stack.
 *
 * Joins a one-rank world through the node at RDZV_ADDR (tests/gpu/run.sh
 * starts a root and a node), initializes the world through the scalable
 * path (ncclCommInitRankScalable with one id, opts.always_scalable), runs
 * an all-reduce of 1024 floats on device 0 and checks the result, then
 * prints the init timings. Then the two other paths: a group prefetched
 * in the background (the worker thread inits it in device 0's context,
 * captured from this thread) and a group made with ncclCommSplit, each
 * with an all-reduce. CUDA's runtime is loaded with dlopen, as NCCL
 * is: nothing here links CUDA or NCCL.
 *
 *   comm_gpu --nccl PATH [--host-buffers]
 *
 * --host-buffers skips CUDA and hands host memory to the all-reduce: only
 * for a dry run against the FAKE NCCL test double on a CPU machine.
 * Exit status 0 when every step passed. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/nccl_api.h"
#include "rdzv/comm.h"
#include "rdzv/rdzv.h"
#include "rdzv/rendezvous.h"

#define COUNT 1024
#define CUDART "libcudart.so"
#define CUDART_CUDA "/usr/local/cuda/lib64/libcudart.so"

/* The few CUDA runtime entry points used (cudaError_t is an int enum). */
struct cudart {
  int (*set_device)(int);
  int (*malloc)(void **, size_t);
  int (*memcpy)(void *, const void *, size_t, int);
  int (*sync)(void);
  int (*free)(void *);
};

static int load_cudart(struct cudart *rt) {
  void *dl = dlopen(CUDART, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL)
    dl = dlopen(CUDART_CUDA, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    fprintf(stderr, "comm_gpu: no CUDA runtime: %s\n", dlerror());
    return -1;
  }
  *(void **)&rt->set_device = dlsym(dl, "cudaSetDevice");
  *(void **)&rt->malloc = dlsym(dl, "cudaMalloc");
  *(void **)&rt->memcpy = dlsym(dl, "cudaMemcpy");
  *(void **)&rt->sync = dlsym(dl, "cudaDeviceSynchronize");
  *(void **)&rt->free = dlsym(dl, "cudaFree");
  if (!rt->set_device || !rt->malloc || !rt->memcpy || !rt->sync || !rt->free) {
    fprintf(stderr, "comm_gpu: CUDA runtime lacks a symbol\n");
    return -1;
  }
  return 0;
}

/* All-reduce of COUNT floats (1.5 each) over the one-rank comm: the sum is
 * the input. Returns 0 when the result is right. */
static int all_reduce(const char *nccl, struct ncclComm *comm, int host) {
  static float in[COUNT], out[COUNT];
  struct rdzv_nccl_api *api = NULL;
  struct cudart rt = {0};
  void *d_in = in, *d_out = out;
  char err[512];
  int bad = 0;

  /* The same library (dlopen returns the same handle): the comm is valid
   * through this table too. */
  if (rdzv_nccl_load(nccl, &api, err, sizeof(err)) < 0) {
    fprintf(stderr, "comm_gpu: %s\n", err);
    return -1;
  }
  for (int i = 0; i < COUNT; i++)
    in[i] = 1.5f;
  if (!host && (load_cudart(&rt) < 0 || rt.set_device(0) != 0 ||
                rt.malloc(&d_in, sizeof(in)) != 0 ||
                rt.malloc(&d_out, sizeof(out)) != 0 ||
                rt.memcpy(d_in, in, sizeof(in), 1 /* HostToDevice */) != 0))
    bad = 1;
  if (!bad &&
      api->all_reduce(d_in, d_out, COUNT, RDZV_NCCL_FLOAT32, RDZV_NCCL_SUM,
                      (rdzv_nccl_comm_t)comm, NULL) != RDZV_NCCL_SUCCESS)
    bad = 1;
  if (!bad && !host &&
      (rt.sync() != 0 ||
       rt.memcpy(out, d_out, sizeof(out), 2 /* DeviceToHost */) != 0))
    bad = 1;
  for (int i = 0; !bad && i < COUNT; i++)
    bad = out[i] != 1.5f;
  if (!host && rt.free != NULL && d_in != in)
    rt.free(d_in);
  if (!host && rt.free != NULL && d_out != out)
    rt.free(d_out);
  rdzv_nccl_unload(api);
  printf("all-reduce of %d floats: %s\n", COUNT, bad ? "WRONG" : "ok");
  return bad ? -1 : 0;
}

static void print_handle(rdzv_comm_t *c) {
  struct rdzv_comm_timings t;
  rdzv_comm_timings(c, &t);
  printf("%s: path %s, id exchange %.6f s, NCCL init %.6f s\n",
         rdzv_comm_name(c), rdzv_comm_init_path(c), t.ids_s, t.init_s);
}

/* A prefetched group (background worker, this thread's CUDA context) and
 * a split group, each checked with an all-reduce. */
static int other_paths(rdzv_comm_t *world, const char *nccl, int host) {
  const int32_t self[1] = {0};
  rdzv_comm_t *pre = NULL, *split = NULL;
  struct ncclComm *comm = NULL;
  struct cudart rt = {0};
  int rc;

  if (!host && (load_cudart(&rt) < 0 || rt.set_device(0) != 0)) {
    fprintf(stderr, "comm_gpu: cudaSetDevice(0) failed\n");
    return -1;
  }
  rc = rdzv_comm_group(world, "pre", self, 1, &pre);
  if (rc == 0)
    rc = rdzv_comm_prefetch(pre, 300);
  while (rc == 0 || rc == -EAGAIN) {
    rc = rdzv_comm_poll(pre); /* the worker inits it meanwhile */
    if (rc == -EAGAIN)
      usleep(1000);
    if (rc == 0)
      break;
  }
  if (rc == 0)
    rc = rdzv_comm_nccl(pre, &comm, 300);
  if (rc < 0) {
    fprintf(stderr, "comm_gpu: prefetched group: %s: %s\n", rdzv_strerror(rc),
            pre ? rdzv_comm_last_error(pre) : "");
  } else {
    print_handle(pre);
    rc = all_reduce(nccl, comm, host);
  }
  if (rc == 0)
    rc = rdzv_comm_group(world, "split", self, 1, &split);
  if (rc == 0)
    rc = rdzv_comm_init_split(split, 300);
  if (rc == 0)
    rc = rdzv_comm_nccl(split, &comm, 300);
  if (rc < 0 && split != NULL) {
    fprintf(stderr, "comm_gpu: split group: %s: %s\n", rdzv_strerror(rc),
            rdzv_comm_last_error(split));
  } else if (rc == 0) {
    print_handle(split);
    rc = all_reduce(nccl, comm, host);
  }
  rdzv_comm_destroy(split);
  rdzv_comm_destroy(pre);
  return rc;
}

int main(int argc, char **argv) {
  const char *nccl = NULL;
  int host = 0, rc;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--nccl") == 0 && i + 1 < argc)
      nccl = argv[++i];
    else if (strcmp(argv[i], "--host-buffers") == 0)
      host = 1;
  }
  struct rdzv_rendezvous_opts o;
  rdzv_rendezvous_t *r = NULL;
  char err[1024];
  rdzv_rendezvous_opts_init(&o);
  if (rdzv_rendezvous_opts_from_env(&o, err, sizeof(err)) < 0) {
    fprintf(stderr, "comm_gpu: %s\n", err);
    return 1;
  }
  rc = rdzv_rendezvous_join(&o, &r, err, sizeof(err));
  if (rc < 0) {
    fprintf(stderr, "comm_gpu: join: %s\n", err);
    return 1;
  }
  struct rdzv_comm_opts co;
  rdzv_comm_t *world = NULL;
  struct ncclComm *comm = NULL;
  struct rdzv_comm_timings t;
  rdzv_comm_opts_init(&co);
  rdzv_comm_opts_from_env(&co, NULL, 0);
  if (nccl != NULL)
    co.nccl_path = nccl;
  co.always_scalable = 1;
  rc = rdzv_comm_world(r, &co, &world);
  if (rc == 0)
    rc = rdzv_comm_nccl(world, &comm, 300);
  if (rc < 0) {
    fprintf(stderr, "comm_gpu: world init: %s: %s\n", rdzv_strerror(rc),
            world ? rdzv_comm_last_error(world) : "");
  } else {
    rdzv_comm_timings(world, &t);
    printf("world: rank %d of %d, path %s, ids %lld, id exchange %.6f s, "
           "NCCL init %.6f s\n",
           rdzv_comm_rank(world), rdzv_comm_size(world),
           rdzv_comm_init_path(world), (long long)t.nids, t.ids_s, t.init_s);
    rc = all_reduce(co.nccl_path, comm, host);
  }
  if (rc == 0)
    rc = other_paths(world, co.nccl_path, host);
  rdzv_comm_destroy(world);
  rdzv_rendezvous_destroy(r);
  return rc == 0 ? 0 : 1;
}
