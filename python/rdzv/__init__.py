"""rdzv: the rank side of rdzv's tree store and rendezvous, over
librdzv.so.0 (ctypes).

    import rdzv
    with rdzv.Client("unix:/run/rdzv/node.sock", job="job-1234") as c:
        c.set("k", b"v")
        assert c.get("k") == b"v"

    with rdzv.Rendezvous.join() as r:       # from RDZV_ADDR, RDZV_JOB, ...
        print(r.rank, r.world_size, r.node_rank)
        ids = r.unique_ids("world", make_id)  # 128 bytes each

Every failure raises an rdzv.errors.RdzvError subclass, one per status
(rdzv.errors.DeadlineError, rdzv.errors.NokeyError, ...), carrying the
detail the call gave (which daemon, host, rank or key)."""
from __future__ import annotations

import ctypes
import errno
from typing import Callable, Iterable, Optional

from rdzv import _lib
from rdzv.errors import RdzvError, check, error

__version__ = "0.3.0"
__all__ = ["Client", "Rendezvous", "RdzvError", "library_version",
           "UNIQUE_ID_BYTES", "__version__"]

UNIQUE_ID_BYTES = 128  # RDZV_UNIQUE_ID_BYTES: an NCCL unique id's size
_WRITE_ONCE = 0x0002   # RDZV_STORE_WRITE_ONCE (include/rdzv/client.h)


def library_version() -> str:
    """The release of the loaded librdzv ("0.3.0")."""
    return _lib.lib.rdzv_version().decode()


def _bytes(v: bytes | str) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


class Client:
    """A store client of one job at one daemon (rdzv_client_t).

    addr: "unix:PATH", "HOST:PORT" or "tcp:HOST:PORT"; job: the job id (the
    key space, required). The job's secret, when there is one, comes from
    RDZV_SECRET_FILE or RDZV_SECRET, as for every client. timeout_s: each
    call's default deadline, seconds."""

    def __init__(self, addr: str, job: str, timeout_s: float = 30.0,
                 _handle: Optional[int] = None,
                 _owner: Optional[object] = None) -> None:
        self.timeout_s = timeout_s
        self._owned = _handle is None
        self._owner = _owner  # a Rendezvous whose connection this is: kept alive
        if _handle is not None:
            self._c = ctypes.c_void_p(_handle)
            return
        opts = _lib.ClientOpts()
        _lib.lib.rdzv_client_opts_init(ctypes.byref(opts))
        self._addr, self._job = addr.encode(), job.encode()
        opts.addr, opts.job_id = self._addr, self._job
        self._c = ctypes.c_void_p()
        check(_lib.lib.rdzv_client_create(ctypes.byref(opts),
                                          ctypes.byref(self._c)),
              f"client of job {job!r} at {addr}")

    def _h(self) -> ctypes.c_void_p:
        """The handle; errors.NotconnError once closed (or its rendezvous
        left)."""
        if not self._c:
            raise error(-1013, "this client is closed")  # RDZV_ENOTCONN
        return self._c

    def _detail(self, what: str) -> str:
        if not self._c:
            return what
        last = _lib.lib.rdzv_client_last_error(self._c) or b""
        return f"{what}: {last.decode(errors='replace')}" if last else what

    def _t(self, timeout_s: Optional[float]) -> float:
        return self.timeout_s if timeout_s is None else timeout_s

    def set(self, key: str, value: bytes | str, write_once: bool = False,
            timeout_s: Optional[float] = None) -> None:
        """Sets key (write_once: it can never change or go)."""
        v = _bytes(value)
        check(_lib.lib.rdzv_store_set(self._h(), key.encode(), v, len(v),
                                      _WRITE_ONCE if write_once else 0,
                                      self._t(timeout_s)),
              self._detail(f"set {key!r}"))

    def get(self, key: str, timeout_s: Optional[float] = None) -> bytes:
        """The value of key; errors.NokeyError when it does not exist."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(_lib.lib.rdzv_store_get(self._h(), key.encode(), ctypes.byref(p),
                                      ctypes.byref(n), self._t(timeout_s)),
              self._detail(f"get {key!r}"))
        try:
            return ctypes.string_at(p, n.value)
        finally:
            _lib.lib.rdzv_free(p)

    def add(self, key: str, delta: int,
            timeout_s: Optional[float] = None) -> int:
        """Adds delta to the int64 counter at key; the new value."""
        out = ctypes.c_int64()
        check(_lib.lib.rdzv_store_add(self._h(), key.encode(), delta,
                                      ctypes.byref(out), self._t(timeout_s)),
              self._detail(f"add {key!r}"))
        return out.value

    def compare_set(self, key: str, expected: bytes | str,
                    desired: bytes | str,
                    timeout_s: Optional[float] = None) -> tuple[bool, bytes]:
        """Sets key to desired if it holds expected (b"": missing). Returns
        (whether it did, the value now)."""
        e, d = _bytes(expected), _bytes(desired)
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        rc = _lib.lib.rdzv_store_cas(self._h(), key.encode(), e, len(e), d,
                                     len(d), ctypes.byref(p), ctypes.byref(n),
                                     self._t(timeout_s))
        if rc < 0 and error(rc).name != "RDZV_ECAS_FAILED":
            raise error(rc, self._detail(f"compare_set {key!r}"))
        try:
            return rc == 0, ctypes.string_at(p, n.value) if p else b""
        finally:
            _lib.lib.rdzv_free(p)

    def delete(self, key: str, timeout_s: Optional[float] = None) -> bool:
        """Deletes key; whether it existed."""
        deleted = ctypes.c_int()
        rc = _lib.lib.rdzv_store_delete(self._h(), key.encode(),
                                        ctypes.byref(deleted),
                                        self._t(timeout_s))
        if rc < 0 and error(rc).name == "RDZV_ENOKEY":
            return False
        check(rc, self._detail(f"delete {key!r}"))
        return bool(deleted.value)

    def wait(self, keys: Iterable[str],
             timeout_s: Optional[float] = None) -> None:
        """Returns once every key exists (errors.DeadlineError names the
        missing ones)."""
        ks = [k.encode() for k in keys]
        arr = (ctypes.c_char_p * len(ks))(*ks)
        check(_lib.lib.rdzv_store_wait(self._h(), arr, len(ks),
                                       self._t(timeout_s)),
              self._detail(f"wait {[k.decode() for k in ks]}"))

    def num_keys(self, timeout_s: Optional[float] = None) -> int:
        """How many keys the job holds."""
        out = ctypes.c_int64()
        check(_lib.lib.rdzv_store_num_keys(self._h(), ctypes.byref(out),
                                           self._t(timeout_s)),
              self._detail("num_keys"))
        return out.value

    def close(self) -> None:
        """Closes the connection (idempotent)."""
        if self._owned and self._c:
            _lib.lib.rdzv_client_destroy(self._c)
        self._c = ctypes.c_void_p()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


MakeId = Callable[[], bytes]


class Rendezvous:
    """This rank's place in a round (rdzv_rendezvous_t): rank, world size,
    local rank and size, node rank and count, generation; unique ids and
    barriers of this generation; the job's store (.store)."""

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self._r = handle
        self.store = Client("", "", _handle=_lib.lib.rdzv_rendezvous_client(
            handle), _owner=self)

    @classmethod
    def join(cls, addr: Optional[str] = None, job: Optional[str] = None,
             round: str = "world", host: Optional[str] = None,
             local_rank: Optional[int] = None,
             local_size: Optional[int] = None,
             world_size: Optional[int] = None, min_size: int = 0,
             timeout_s: float = 60.0) -> "Rendezvous":
        """Joins the round and blocks until the root answers. What is not
        given comes from the launcher's environment, as in C
        (rdzv_rendezvous_opts_from_env: RDZV_ADDR, RDZV_JOB, RDZV_HOST,
        LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE and their Slurm and
        torchrun fallbacks). Raises DeadlineError naming the hosts that lack
        ranks, DuplicateClaimError, AbortedError, ..."""
        o = _lib.RendezvousOpts()
        _lib.lib.rdzv_rendezvous_opts_init(ctypes.byref(o))
        keep = []  # the bytes the struct points at, alive until the join

        def s(v: Optional[str]) -> Optional[bytes]:
            if v is None:
                return None
            b = v.encode()
            keep.append(b)
            return b

        o.addr, o.job_id, o.host = s(addr), s(job), s(host)
        o.round = s(round)
        if local_rank is not None:
            o.local_rank = local_rank
        if local_size is not None:
            o.local_size = local_size
        if world_size is not None:
            o.world_size = world_size
        o.min_size, o.timeout_s = min_size, timeout_s
        err = ctypes.create_string_buffer(512)
        check(_lib.lib.rdzv_rendezvous_opts_from_env(ctypes.byref(o), err,
                                                     len(err)),
              err.value.decode(errors="replace"))
        h = ctypes.c_void_p()
        rc = _lib.lib.rdzv_rendezvous_join(ctypes.byref(o), ctypes.byref(h),
                                           err, len(err))
        check(rc, err.value.decode(errors="replace"))
        return cls(h)

    def _h(self) -> ctypes.c_void_p:
        if not self._r:
            raise error(-1013, "this rendezvous handle is closed")
        return self._r

    def _get(self, what: str) -> int:
        return getattr(_lib.lib, f"rdzv_rendezvous_{what}")(self._h())

    @property
    def rank(self) -> int:
        return self._get("rank")

    @property
    def world_size(self) -> int:
        return self._get("world_size")

    @property
    def local_rank(self) -> int:
        return self._get("local_rank")

    @property
    def local_size(self) -> int:
        return self._get("local_size")

    @property
    def node_rank(self) -> int:
        return self._get("node_rank")

    @property
    def node_count(self) -> int:
        return self._get("node_count")

    @property
    def generation(self) -> int:
        return self._get("generation")

    def _detail(self, what: str) -> str:
        if not self._r:
            return what
        last = _lib.lib.rdzv_rendezvous_last_error(self._r) or b""
        return f"{what}: {last.decode(errors='replace')}" if last else what

    def unique_ids(self, comm: str, make_id: MakeId,
                   ranks_per_root: int = 128,
                   timeout_s: float = 60.0) -> list[bytes]:
        """The communicator's unique ids in this generation: ceil(world /
        ranks_per_root) of UNIQUE_ID_BYTES bytes, the same on every rank.
        make_id() returns one id (e.g. ncclGetUniqueId's bytes); it runs on
        the first rank of each block only."""
        failure: list[BaseException] = []

        def cb(_arg: Optional[int], out: ctypes.Array) -> int:
            try:
                b = make_id()
                if len(b) != UNIQUE_ID_BYTES:
                    raise ValueError(f"make_id gave {len(b)} bytes, not "
                                     f"{UNIQUE_ID_BYTES}")
                ctypes.memmove(out, b, UNIQUE_ID_BYTES)
                return 0
            except BaseException as e:  # reported after the call
                failure.append(e)
                return -errno.EINVAL

        fn = _lib.MAKE_ID(cb)
        ids = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_int64()
        rc = _lib.lib.rdzv_rendezvous_unique_ids(
            self._h(), comm.encode(), ranks_per_root, fn, None,
            ctypes.byref(ids), ctypes.byref(n), timeout_s)
        if failure:
            raise failure[0]
        check(rc, self._detail(f"unique ids of {comm!r}"))
        try:
            raw = ctypes.string_at(ids, n.value * UNIQUE_ID_BYTES)
        finally:
            _lib.lib.rdzv_free(ids)
        return [raw[i * UNIQUE_ID_BYTES:(i + 1) * UNIQUE_ID_BYTES]
                for i in range(n.value)]

    def barrier(self, name: str, timeout_s: float = 60.0) -> None:
        """Every rank of this generation reaches name (DeadlineError names
        the missing ranks and their hosts)."""
        check(_lib.lib.rdzv_rendezvous_barrier(self._h(), name.encode(),
                                               timeout_s),
              self._detail(f"barrier {name!r}"))

    def close(self) -> None:
        """Leaves cleanly and frees the handle (idempotent)."""
        if self._r:
            self.store._c = ctypes.c_void_p()
            _lib.lib.rdzv_rendezvous_destroy(self._r)
        self._r = ctypes.c_void_p()

    def __enter__(self) -> "Rendezvous":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
