"""Loads librdzv.so.0 and declares the C functions the bindings call
(include/rdzv/*.h gives each one's contract)."""
from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_size_t, c_uint, c_uint8, c_uint32, c_void_p)

SONAME = "librdzv.so.0"


def _candidates() -> list[str]:
    env = os.environ.get("RDZV_LIBRARY")
    if env:
        return [env]  # named: nothing else is tried
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, SONAME), SONAME]


def load() -> ctypes.CDLL:
    """The library: $RDZV_LIBRARY, else beside this package, else the
    dynamic loader's search. Raises OSError naming every place tried."""
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise OSError("librdzv not found (set RDZV_LIBRARY to its path; "
                  "bazel build //:librdzv.so.0 makes it): " + "; ".join(tried))


class ClientOpts(ctypes.Structure):
    """struct rdzv_client_opts's leading fields (include/rdzv/client.h);
    the rest is room that rdzv_client_opts_init fills with defaults."""
    _fields_ = [("size", c_size_t), ("version", c_uint32),
                ("addr", c_char_p), ("job_id", c_char_p),
                ("name", c_char_p), ("_rest", ctypes.c_byte * 1024)]


class RendezvousOpts(ctypes.Structure):
    """struct rdzv_rendezvous_opts (include/rdzv/rendezvous.h), whole."""
    _fields_ = [("size", c_size_t), ("version", c_uint32),
                ("addr", c_char_p), ("job_id", c_char_p),
                ("round", c_char_p), ("host", c_char_p),
                ("location", c_char_p), ("local_rank", c_int32),
                ("local_size", c_int32), ("world_size", c_int32),
                ("min_size", c_int32), ("last_call_s", c_double),
                ("timeout_s", c_double), ("topology", c_char_p),
                ("secret_file", c_char_p), ("role", c_int32),
                ("domain", c_char_p), ("segment_hosts", c_int32)]


MAKE_ID = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint8))

lib = load()


def _fn(name: str, restype, *argtypes) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_fn("rdzv_version", c_char_p)
_fn("rdzv_strerror", c_char_p, c_int)
_fn("rdzv_err_name", c_char_p, c_int)
_fn("rdzv_free", None, c_void_p)
_fn("rdzv_client_opts_init", None, POINTER(ClientOpts))
_fn("rdzv_client_create", c_int, POINTER(ClientOpts), POINTER(c_void_p))
_fn("rdzv_client_destroy", None, c_void_p)
_fn("rdzv_client_last_error", c_char_p, c_void_p)
_fn("rdzv_store_set", c_int, c_void_p, c_char_p, c_void_p, c_size_t, c_uint,
    c_double)
_fn("rdzv_store_get", c_int, c_void_p, c_char_p, POINTER(c_void_p),
    POINTER(c_size_t), c_double)
_fn("rdzv_store_add", c_int, c_void_p, c_char_p, c_int64, POINTER(c_int64),
    c_double)
_fn("rdzv_store_delete", c_int, c_void_p, c_char_p, POINTER(c_int), c_double)
_fn("rdzv_store_wait", c_int, c_void_p, POINTER(c_char_p), c_size_t,
    c_double)
_fn("rdzv_store_cas", c_int, c_void_p, c_char_p, c_void_p, c_size_t,
    c_void_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t), c_double)
_fn("rdzv_store_num_keys", c_int, c_void_p, POINTER(c_int64), c_double)
_fn("rdzv_store_tcpstore_space", c_int, c_void_p, c_char_p, POINTER(c_int32),
    c_double)
_fn("rdzv_store_tcpstore_space_held", c_int, c_void_p, c_char_p, c_int32,
    POINTER(c_int32), c_double)
_fn("rdzv_rendezvous_opts_init", None, POINTER(RendezvousOpts))
_fn("rdzv_rendezvous_opts_from_env", c_int, POINTER(RendezvousOpts),
    c_char_p, c_size_t)
_fn("rdzv_rendezvous_join", c_int, POINTER(RendezvousOpts), POINTER(c_void_p),
    c_char_p, c_size_t)
_fn("rdzv_rendezvous_destroy", None, c_void_p)
_fn("rdzv_rendezvous_last_error", c_char_p, c_void_p)
_fn("rdzv_rendezvous_client", c_void_p, c_void_p)
for _name in ("rank", "world_size", "local_rank", "local_size", "node_rank",
              "node_count"):
    _fn(f"rdzv_rendezvous_{_name}", c_int32, c_void_p)
_fn("rdzv_rendezvous_generation", c_int64, c_void_p)
_fn("rdzv_rendezvous_unique_ids", c_int, c_void_p, c_char_p, c_int64, MAKE_ID,
    c_void_p, POINTER(POINTER(c_uint8)), POINTER(c_int64), c_double)
_fn("rdzv_rendezvous_barrier", c_int, c_void_p, c_char_p, c_double)
