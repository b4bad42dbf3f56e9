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
import threading
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


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _bytes(v: bytes | str) -> bytes:
    """A value: bytes (or bytearray, memoryview) as they are, str as
    UTF-8; anything else is a TypeError (bytes(5) would be 5 NULs)."""
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"a value is bytes or str, not {type(v).__name__}")


def _name(v: str, what: str = "key") -> bytes:
    """A key or name for C: a str without NUL (C would cut it there)."""
    if not isinstance(v, str):
        raise TypeError(f"a {what} is a str, not {type(v).__name__}")
    b = v.encode()
    if b"\0" in b:
        raise ValueError(f"a {what} may not contain NUL: {v!r}")
    return b


def _int(v: int, lo: int, hi: int, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{what} must be an int in {lo}..{hi}, not {v!r}")
    return v


class _Handle:
    """A rendezvous handle and the lock of its connection, shared by the
    Rendezvous and its .store: the handle is left when the last of them
    goes (or at close)."""

    def __init__(self, h: ctypes.c_void_p) -> None:
        self.h = h
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.h:
                _lib.lib.rdzv_rendezvous_destroy(self.h)
            self.h = ctypes.c_void_p()

    def __del__(self) -> None:
        self.close()


class Client:
    """A store client of one job at one daemon (rdzv_client_t).

    addr: "unix:PATH", "HOST:PORT" or "tcp:HOST:PORT"; job: the job id (the
    key space, required). The job's secret, when there is one, comes from
    RDZV_SECRET_FILE or RDZV_SECRET, as for every client. timeout_s: each
    call's default deadline, seconds. Threads may share a client: its calls
    go one at a time (the C handle takes one thread at a time)."""

    def __init__(self, addr: str, job: str, timeout_s: float = 30.0,
                 _owner: Optional[_Handle] = None) -> None:
        self._c = ctypes.c_void_p()
        self._owner = _owner
        self.timeout_s = timeout_s
        if _owner is not None:  # a rendezvous's connection, its lock
            self._lock = _owner.lock
            self._c = ctypes.c_void_p(
                _lib.lib.rdzv_rendezvous_client(_owner.h))
            return
        self._lock = threading.Lock()
        opts = _lib.ClientOpts()
        _lib.lib.rdzv_client_opts_init(ctypes.byref(opts))
        self._addr, self._job = _name(addr, "address"), _name(job, "job id")
        opts.addr, opts.job_id = self._addr, self._job
        check(_lib.lib.rdzv_client_create(ctypes.byref(opts),
                                          ctypes.byref(self._c)),
              f"client of job {job!r} at {addr}")

    def _call(self, what: str, fn, *args) -> int:
        """fn(handle, *args) under the lock; raises for a negative status
        (with the C handle's detail), else returns it."""
        with self._lock:
            if not self._c or (self._owner is not None
                               and not self._owner.h):
                raise error(-1013, "this client is closed")  # ENOTCONN
            rc = fn(self._c, *args)
            if rc < 0:
                last = _lib.lib.rdzv_client_last_error(self._c) or b""
                detail = f"{what}: {last.decode(errors='replace')}" \
                    if last else what
                raise error(rc, detail)
            return rc

    def _t(self, timeout_s: Optional[float]) -> float:
        return self.timeout_s if timeout_s is None else timeout_s

    def set(self, key: str, value: bytes | str, write_once: bool = False,
            timeout_s: Optional[float] = None) -> None:
        """Sets key (write_once: it can never change or go)."""
        v = _bytes(value)
        self._call(f"set {key!r}", _lib.lib.rdzv_store_set, _name(key), v,
                   len(v), _WRITE_ONCE if write_once else 0,
                   self._t(timeout_s))

    def get(self, key: str, timeout_s: Optional[float] = None) -> bytes:
        """The value of key; errors.NokeyError when it does not exist."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        self._call(f"get {key!r}", _lib.lib.rdzv_store_get, _name(key),
                   ctypes.byref(p), ctypes.byref(n), self._t(timeout_s))
        try:
            return ctypes.string_at(p, n.value)
        finally:
            _lib.lib.rdzv_free(p)

    def add(self, key: str, delta: int,
            timeout_s: Optional[float] = None) -> int:
        """Adds delta (an int64) to the counter at key; the new value."""
        out = ctypes.c_int64()
        self._call(f"add {key!r}", _lib.lib.rdzv_store_add, _name(key),
                   _int(delta, *_INT64, "delta"), ctypes.byref(out),
                   self._t(timeout_s))
        return out.value

    def compare_set(self, key: str, expected: bytes | str,
                    desired: bytes | str,
                    timeout_s: Optional[float] = None) -> tuple[bool, bytes]:
        """Sets key to desired if it holds expected (b"": missing). Returns
        (whether it did, the value now)."""
        e, d = _bytes(expected), _bytes(desired)
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        try:
            self._call(f"compare_set {key!r}", _lib.lib.rdzv_store_cas,
                       _name(key), e, len(e), d, len(d), ctypes.byref(p),
                       ctypes.byref(n), self._t(timeout_s))
            did = True
        except RdzvError as err:
            if err.name != "RDZV_ECAS_FAILED":
                raise
            did = False
        try:
            return did, ctypes.string_at(p, n.value) if p else b""
        finally:
            _lib.lib.rdzv_free(p)

    def delete(self, key: str, timeout_s: Optional[float] = None) -> bool:
        """Deletes key; whether it existed."""
        deleted = ctypes.c_int()
        try:
            self._call(f"delete {key!r}", _lib.lib.rdzv_store_delete,
                       _name(key), ctypes.byref(deleted), self._t(timeout_s))
        except RdzvError as err:
            if err.name == "RDZV_ENOKEY":
                return False
            raise
        return bool(deleted.value)

    def wait(self, keys: Iterable[str],
             timeout_s: Optional[float] = None) -> None:
        """Returns once every key exists (errors.DeadlineError names the
        missing ones)."""
        ks = [_name(k) for k in keys]
        arr = (ctypes.c_char_p * len(ks))(*ks)
        self._call(f"wait {[k.decode() for k in ks]}",
                   _lib.lib.rdzv_store_wait, arr, len(ks),
                   self._t(timeout_s))

    def num_keys(self, timeout_s: Optional[float] = None) -> int:
        """How many keys the job holds."""
        out = ctypes.c_int64()
        self._call("num_keys", _lib.lib.rdzv_store_num_keys,
                   ctypes.byref(out), self._t(timeout_s))
        return out.value

    def tcpstore_space(self, prefix: str, holder_pid: int = 0,
                       timeout_s: Optional[float] = None) -> int:
        """Opens (or joins) a PyTorch TCPStore key space at the daemon this
        client is connected to and returns its port on that host's
        127.0.0.1: torch.distributed.TCPStore clients there keep their keys
        in this job under prefix (rdzv_store_tcpstore_space_held). It
        closes about a second after the last holder is gone: this client
        (holder_pid 0), or process holder_pid of the daemon's host (asked
        over a Unix socket only; ProcessLookupError's status ESRCH when it
        does not exist)."""
        if not 0 <= holder_pid <= 2**31 - 1:
            raise ValueError(f"holder_pid {holder_pid}: a pid, 1..2**31-1 "
                             "(0: this client)")
        out = ctypes.c_int32()
        self._call(f"TCPStore key space {prefix!r}",
                   _lib.lib.rdzv_store_tcpstore_space_held,
                   _name(prefix, "prefix"), holder_pid, ctypes.byref(out),
                   self._t(timeout_s))
        return out.value

    def close(self) -> None:
        """Closes the connection (idempotent; a rendezvous's store is
        closed with its rendezvous)."""
        with self._lock:
            if self._owner is None and self._c:
                _lib.lib.rdzv_client_destroy(self._c)
            self._c = ctypes.c_void_p()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_lock", None) is not None:
            self.close()


MakeId = Callable[[], bytes]


class Rendezvous:
    """This rank's place in a round (rdzv_rendezvous_t): rank, world size,
    local rank and size, node rank and count, generation; unique ids and
    barriers of this generation; the job's store (.store, the same
    connection). The round is left at close(), or when neither this
    object nor its .store is referenced any more."""

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self._hold = _Handle(handle)
        self.store = Client("", "", _owner=self._hold)

    @classmethod
    def join(cls, addr: Optional[str] = None, job: Optional[str] = None,
             round: str = "world", host: Optional[str] = None,
             local_rank: Optional[int] = None,
             local_size: Optional[int] = None,
             world_size: Optional[int] = None, min_size: int = 0,
             timeout_s: float = 60.0, last_call_s: Optional[float] = None,
             location: Optional[str] = None, spare: bool = False,
             domain: Optional[str] = None,
             segment_hosts: int = 0) -> "Rendezvous":
        """Joins the round and blocks until the root answers. What is not
        given comes from the launcher's environment, as in C
        (rdzv_rendezvous_opts_from_env: RDZV_ADDR, RDZV_JOB, RDZV_HOST,
        LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE and their Slurm and
        torchrun fallbacks). An elastic round (min_size > 0, below
        world_size, the maximum) completes last_call_s (default 5) after
        min_size joined, or at world_size. location: network labels
        ("pod1/rack7") that order the hosts. spare: this host waits parked
        until the root needs it in place of a lost host (then returns with
        that host's place), or timeout_s passes (ParkedError); domain: the
        host's NVLink domain, which a lost host's replacement shares when
        it can ("auto": read from NVML, none where it finds none);
        segment_hosts: the job places whole domains, segments of this many
        hosts of one domain (0: hosts one by one; else RDZV_SEGMENT_HOSTS). Raises DeadlineError naming the hosts that lack ranks,
        DuplicateClaimError, ParkedError (a complete round at its maximum
        parked this host: it may join again when that generation ends),
        AbortedError, ..."""
        o = _lib.RendezvousOpts()
        _lib.lib.rdzv_rendezvous_opts_init(ctypes.byref(o))
        keep = []  # the bytes the struct points at, alive until the join

        def s(v: Optional[str], what: str) -> Optional[bytes]:
            if v is None:
                return None
            b = _name(v, what)
            keep.append(b)
            return b

        o.addr, o.job_id = s(addr, "address"), s(job, "job id")
        o.host, o.round = s(host, "host"), s(round, "round")
        o.location = s(location, "location")
        o.domain = s(domain, "domain")
        o.role = 1 if spare else 0  # RDZV_MEMBER_SPARE, RDZV_MEMBER_ACTIVE
        if last_call_s is not None:
            o.last_call_s = float(last_call_s)
        i32 = (-(1 << 31), (1 << 31) - 1)
        if local_rank is not None:
            o.local_rank = _int(local_rank, 0, i32[1], "local_rank")
        if local_size is not None:
            o.local_size = _int(local_size, 1, i32[1], "local_size")
        if world_size is not None:
            o.world_size = _int(world_size, 1, i32[1], "world_size")
        o.min_size = _int(min_size, 0, i32[1], "min_size")
        o.segment_hosts = _int(segment_hosts, 0, i32[1], "segment_hosts")
        o.timeout_s = timeout_s
        err = ctypes.create_string_buffer(512)
        check(_lib.lib.rdzv_rendezvous_opts_from_env(ctypes.byref(o), err,
                                                     len(err)),
              err.value.decode(errors="replace"))
        h = ctypes.c_void_p()
        rc = _lib.lib.rdzv_rendezvous_join(ctypes.byref(o), ctypes.byref(h),
                                           err, len(err))
        check(rc, err.value.decode(errors="replace"))
        return cls(h)

    def _call(self, what: str, fn, *args) -> int:
        with self._hold.lock:
            if not self._hold.h:
                raise error(-1013, "this rendezvous handle is closed")
            rc = fn(self._hold.h, *args)
            if rc < 0:
                last = _lib.lib.rdzv_rendezvous_last_error(self._hold.h)
                last = (last or b"").decode(errors="replace")
                raise error(rc, f"{what}: {last}" if last else what)
            return rc

    def _get(self, what: str) -> int:
        with self._hold.lock:
            if not self._hold.h:
                raise error(-1013, "this rendezvous handle is closed")
            return getattr(_lib.lib, f"rdzv_rendezvous_{what}")(self._hold.h)

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

    def unique_ids(self, comm: str, make_id: MakeId,
                   ranks_per_root: int = 128,
                   timeout_s: float = 60.0) -> list[bytes]:
        """The communicator's unique ids in this generation: ceil(world /
        ranks_per_root) of UNIQUE_ID_BYTES bytes, the same on every rank.
        make_id() returns one id as bytes (e.g. ncclGetUniqueId's); it runs
        on the first rank of each block only."""
        failure: list[BaseException] = []

        def cb(_arg: Optional[int], out: ctypes.Array) -> int:
            try:
                b = make_id()
                if not isinstance(b, (bytes, bytearray)) or \
                        len(b) != UNIQUE_ID_BYTES:
                    raise ValueError(f"make_id must return {UNIQUE_ID_BYTES} "
                                     f"bytes, not {b!r:.60}")
                ctypes.memmove(out, bytes(b), UNIQUE_ID_BYTES)
                return 0
            except BaseException as e:  # reported after the call
                failure.append(e)
                return -errno.EINVAL

        fn = _lib.MAKE_ID(cb)
        ids = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_int64()
        try:
            self._call(f"unique ids of {comm!r}",
                       _lib.lib.rdzv_rendezvous_unique_ids, _name(comm, "comm"),
                       _int(ranks_per_root, 1, _INT64[1], "ranks_per_root"),
                       fn, None, ctypes.byref(ids), ctypes.byref(n), timeout_s)
        except RdzvError:
            if failure:
                raise failure[0]
            raise
        try:
            raw = ctypes.string_at(ids, n.value * UNIQUE_ID_BYTES)
        finally:
            _lib.lib.rdzv_free(ids)
        return [raw[i * UNIQUE_ID_BYTES:(i + 1) * UNIQUE_ID_BYTES]
                for i in range(n.value)]

    def barrier(self, name: str, timeout_s: float = 60.0) -> None:
        """Every rank of this generation reaches name (DeadlineError names
        the missing ranks and their hosts)."""
        self._call(f"barrier {name!r}", _lib.lib.rdzv_rendezvous_barrier,
                   _name(name, "barrier name"), timeout_s)

    def close(self) -> None:
        """Leaves cleanly and frees the handle (idempotent); .store is
        closed with it."""
        self._hold.close()

    def __enter__(self) -> "Rendezvous":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
