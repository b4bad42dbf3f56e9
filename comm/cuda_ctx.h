/* comm/cuda_ctx.h: carry a thread's current CUDA context to another thread.
 *
 * Private to comm/; never installed.
 *
 * NCCL creates a communicator on the CUDA device current on the thread
 * that calls its init (ncclCommInitRank*, ncclCommSplit: cudaGetDevice).
 * A prefetched handle is initialized on its world's worker thread
 * (comm_bg.c), not on the thread that called cudaSetDevice, so
 * rdzv_comm_prefetch captures the caller's current context and the worker
 * makes it current before it runs that handle's init.
 *
 * The CUDA driver API is reached through dlopen, and only when the process
 * has loaded the driver already: dlopen(name, RTLD_NOW | RTLD_NOLOAD),
 * name = libcuda.so.1, or the environment variable
 * RDZV_CUDA_DRIVER_LIBRARY when it is set and not empty (tests point it at
 * the fake in tests/fake_nccl). An application that made a CUDA context
 * has the driver loaded; one that has not has no context to carry, and
 * rdzv never loads the driver itself. rdzv links no CUDA: the two entry
 * points used, cuCtxGetCurrent and cuCtxSetCurrent, are resolved by the
 * names libcuda.so.1 exports (cuda.h does not rename them to _v2
 * variants). Once found, the driver is kept open for the life of the
 * process (one reference; libcuda is never unloaded from a process that
 * used CUDA anyway); while it is not found, every capture looks again, so
 * a driver loaded after an earlier prefetch is used from then on.
 *
 * Threads: every function may be called from any thread. */
#ifndef RDZV_COMM_CUDA_CTX_H
#define RDZV_COMM_CUDA_CTX_H

#include <stddef.h>

/* CUDA's CUresult values used here (cuda.h: an int-sized enum). */
#define RDZV_CUDA_SUCCESS 0

/* The driver library tried when RDZV_CUDA_DRIVER_LIBRARY is unset. */
#define RDZV_CUDA_DRIVER_DEFAULT "libcuda.so.1"

/* rdzv__cuda_ctx_capture - the calling thread's current CUDA context.
 *
 * Returns the CUcontext cuCtxGetCurrent reports for this thread, or NULL
 * when the driver is not loaded in this process, when no context is
 * current, or when cuCtxGetCurrent fails (e.g. CUDA_ERROR_NOT_INITIALIZED:
 * cuInit was never called, so there is no context either). Never loads
 * the driver. Reads RDZV_CUDA_DRIVER_LIBRARY (like getenv). Blocks: no
 * (a dlopen that only looks up loaded objects). */
void *rdzv__cuda_ctx_capture(void);

/* rdzv__cuda_ctx_apply - make ctx current on the calling thread.
 *
 * ctx NULL: nothing to do, returns 0 (the thread's context is left as it
 * is). Otherwise calls cuCtxSetCurrent(ctx) of the driver that
 * rdzv__cuda_ctx_capture found. Returns 0, or -ENODEV when the driver is
 * not resolved (cannot happen for a ctx capture returned) or
 * cuCtxSetCurrent fails; then, when err is non-NULL and errlen > 0, err
 * says which, with the CUresult. */
int rdzv__cuda_ctx_apply(void *ctx, char *err, size_t errlen);

/* rdzv__cuda_ctx_clear - make no context current on the calling thread
 * (cuCtxSetCurrent(NULL)); a no-op when the process has no driver loaded
 * (looked up as by rdzv__cuda_ctx_capture, never loaded). Errors are
 * ignored. */
void rdzv__cuda_ctx_clear(void);

#endif /* RDZV_COMM_CUDA_CTX_H */
