/* rdzv: the umbrella header.
 *
 * Ownership rules, the same for every rdzv function, without exception:
 *  1. Pointer arguments are borrowed for the duration of the call. The
 *     library copies anything it keeps.
 *  2. Anything returned through an out-parameter belongs to the caller and
 *     is released with the matching rdzv_*_free or rdzv_*_destroy.
 *  3. Pointers passed into a callback are valid only until it returns.
 *  4. An object is never freed inside its own callback.
 *  5. A function that takes ownership says so in its name (_take).
 *
 * Errors: one space, see rdzv/error.h. */
#ifndef RDZV_RDZV_H
#define RDZV_RDZV_H

#include "rdzv/error.h"
#include "rdzv/client.h"
#include "rdzv/store.h"

/* This release of rdzv (what `rdzvd --version` prints). */
#define RDZV_VERSION_STRING "0.3.0"

/* The release of the library this process runs ("0.3.0": the
 * RDZV_VERSION_STRING it was built with), so that a program loading
 * librdzv.so at run time (the Python bindings) can check it. A static
 * string, never NULL; never fails. */
const char *rdzv_version(void);

#endif /* RDZV_RDZV_H */
