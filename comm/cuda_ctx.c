/* comm/cuda_ctx.c: see cuda_ctx.h. The CUDA driver through dlopen with
 * RTLD_NOLOAD; nothing here includes cuda.h or links CUDA. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NOLOAD */
#endif

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/cuda_ctx.h"

/* cuda.h: CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);
 *         CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx);
 * CUcontext is a pointer (struct CUctx_st *), CUresult an int-sized enum,
 * CUDAAPI empty on Linux: the same ABI as these. */
typedef int (*cu_ctx_get_current_fn)(void **pctx);
typedef int (*cu_ctx_set_current_fn)(void *ctx);

_Static_assert(sizeof(void *) == sizeof(cu_ctx_set_current_fn),
               "function pointers must be pointer-sized (POSIX dlsym)");

/* Written once, under drv_lock, before drv_ready is set (release); read
 * after drv_ready is seen (acquire). */
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  cu_ctx_get_current_fn get_current;
  cu_ctx_set_current_fn set_current;
} drv;
static atomic_int drv_ready;

/* 1 when the driver's two entry points are resolved, trying once more
 * (without loading anything) while they are not. */
static int resolve(void) {
  const char *name;
  void *dl, *get, *set;

  if (atomic_load_explicit(&drv_ready, memory_order_acquire))
    return 1;
  pthread_mutex_lock(&drv_lock);
  if (!atomic_load_explicit(&drv_ready, memory_order_relaxed)) {
    name = getenv("RDZV_CUDA_DRIVER_LIBRARY");
    if (name == NULL || name[0] == '\0')
      name = RDZV_CUDA_DRIVER_DEFAULT;
    /* RTLD_NOLOAD: a handle only if the process has it loaded already. */
    dl = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (dl == NULL) {
      (void)dlerror(); /* not loaded: nothing to carry */
    } else {
      get = dlsym(dl, "cuCtxGetCurrent");
      set = dlsym(dl, "cuCtxSetCurrent");
      if (get != NULL && set != NULL) {
        /* dlsym's void * converts to a function pointer (POSIX). */
        memcpy(&drv.get_current, &get, sizeof(get));
        memcpy(&drv.set_current, &set, sizeof(set));
        /* The reference dlopen took is kept: see cuda_ctx.h. */
        atomic_store_explicit(&drv_ready, 1, memory_order_release);
      } else {
        dlclose(dl);
      }
    }
  }
  pthread_mutex_unlock(&drv_lock);
  return atomic_load_explicit(&drv_ready, memory_order_acquire);
}

void *rdzv__cuda_ctx_capture(void) {
  void *ctx = NULL;

  if (!resolve())
    return NULL;
  if (drv.get_current(&ctx) != RDZV_CUDA_SUCCESS)
    return NULL; /* e.g. not initialized: no context */
  return ctx;
}

int rdzv__cuda_ctx_apply(void *ctx, char *err, size_t errlen) {
  int res;

  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (ctx == NULL)
    return 0;
  if (!atomic_load_explicit(&drv_ready, memory_order_acquire)) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen,
               "CUDA context %p to make current, but the CUDA driver's "
               "cuCtxSetCurrent is not resolved",
               ctx);
    return -ENODEV;
  }
  res = drv.set_current(ctx);
  if (res != RDZV_CUDA_SUCCESS) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "cuCtxSetCurrent(%p) failed with CUresult %d (%s)",
               ctx, res,
               res == 201 ? "CUDA_ERROR_INVALID_CONTEXT: was the context "
                            "destroyed?"
                          : "see cuda.h");
    return -ENODEV;
  }
  return 0;
}

void rdzv__cuda_ctx_clear(void) {
  if (resolve())
    (void)drv.set_current(NULL);
}
