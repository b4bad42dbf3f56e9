"""torchrun's rendezvous over rdzv (torch >= 2.5; torch 1.13 too, see
below):

    torchrun --rdzv-backend=rdzv --rdzv-endpoint=<this host's node>
             --rdzv-id=<job> --nnodes=MIN:MAX --nproc-per-node=G train.py

The endpoint is the host's rdzvd node ("unix:/run/rdzv/node.sock" or
"HOST:PORT"). pip-installing this package registers the backend through
the entry-point group "torchrun.handlers"; `python -m rdzv.torchrun ARGS`
registers it and runs torchrun with ARGS where the entry point is not
read.

What each agent does (docs/pytorch.md has the whole story):
- next_rendezvous is one rdzv join of round "agents" (one member per
  agent, its host the member's host): the root completes it at MAX, or
  last_call_timeout after MIN joined; the node rank is rdzv's rank
  (hosts in network-location order, then by name). A join that finds the
  running generation at MAX with every agent alive is refused: the agent
  is parked, joins again when a generation ends, and exits 0 once the
  rendezvous is closed (SystemExit(0): torch 2.6's launcher fails on its
  own handling of RendezvousGracefulExitError).
- num_nodes_waiting is local: a thread per generation waits on the key
  the root writes when the next generation opens (rdzv/agents/g<N>/next;
  nodes hold one such wait upstream for all their agents), or learns the
  generation failed (an agent died). No state key is polled.
- The workers' store (use_agent_store) is a TCPStore key space at this
  host's node, "rdzv/agents/w<N>/" for generation N: MASTER_ADDR is
  127.0.0.1 and MASTER_PORT that space's port, so env:// and
  ProcessGroupNCCL's id exchange go through the tree, and each restart
  round has keys of its own. The agents' store is the same space under
  "torchelastic/".

A spare agent (RDZV_ROLE=spare in its environment, RDZV_DOMAIN its
NVLink domain): its join waits parked, not counted as waiting, until an
agent is lost; it then takes that agent's node rank, so its workers get the
lost workers' ranks.

--rdzv-conf keys: join_timeout (s, 600), last_call_timeout (s, 30),
host (RDZV_HOST, else the hostname), location (RDZV_LOCATION), job (the
rdzv job id: RDZV_JOB, else the run id), round ("agents" when the job is
the run id, else "agents-<run id>-<hash of it>"). The endpoint defaults to RDZV_ADDR.
The job's secret, if any, comes from RDZV_SECRET_FILE as for every client.

torch 1.13: its torchrun reads no entry points, so `python -m
rdzv.torchrun ARGS` (or register() before torch.distributed.run.main) is
the way in. The agents' rendezvous is the same; the workers use the
store torch 1.13 gives them (a server of worker 0 at agent 0's host:
torch 1.13 gives the agent store to the "static" backend only)."""
from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Optional

import rdzv
from rdzv import errors


def _entry() -> Any:
    """The "torchrun.handlers" entry point: returns the creator. Defined
    before torch's imports below: importing this module first imports
    torch's handler registry, which reads this entry point from the module
    while it is still being imported; the creator is looked up when torch
    calls it."""
    return lambda params: create_handler(params)


from torch.distributed import PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError, RendezvousConnectionError, RendezvousError,
    RendezvousHandler, RendezvousParameters, RendezvousTimeoutError)

try:  # torch >= 2.5: RendezvousInfo, and the agent store for workers
    from torch.distributed.elastic.rendezvous import (
        RendezvousInfo, RendezvousStoreInfo)
    _TORCH1 = False
except ImportError:  # torch 1.13: next_rendezvous returns a tuple
    _TORCH1 = True

BACKEND = "rdzv"
# Statuses that say the node is not there (connection refused or lost, no
# socket, a daemon on the way cut off).
_CONNECTION = {"ECONNREFUSED", "ENOENT", "ECONNRESET", "EPIPE", "ETIMEDOUT",
               "EHOSTUNREACH", "ENETUNREACH", "RDZV_ENOTCONN",
               "RDZV_ECONN_CLOSED", "RDZV_EUNREACHABLE", "RDZV_ESILENT",
               "RDZV_EBAD_ADDR", "RDZV_EHELLO", "RDZV_EAUTH",
               "RDZV_EJOB_MISMATCH"}
# Of those, the ones that say the node is there but does not take this job
# (a node of another job, no secret of this one, another secret).
_REFUSED = {"RDZV_EAUTH", "RDZV_EJOB_MISMATCH"}
# How long one wait of a generation's watcher lasts before it waits again
# (s): a node holds it, so this bounds only how late a stopped handler's
# thread ends.
_WATCH_S = 30.0
# How often a parked agent (over the maximum) asks again (s).
_PARK_S = 2.0


def _run_round(run_id: str) -> str:
    """The round of a run id other than the rdzv job's: "agents-", the run
    id in ASCII letters, digits, "-", "_" and "." (others as "_", at most
    64), then 10 hex digits of its SHA-256, so that run ids that read alike
    ("run/1", "run_1") stay apart; at most 82 bytes (a round: 1..127, no
    "/")."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.")
                   else "_" for ch in run_id)[:64]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"agents-{safe}-{digest}"


def _seconds(params: RendezvousParameters, key: str, default: float) -> float:
    v = params.get(key)
    if v is None:
        return default
    if isinstance(v, timedelta):
        return v.total_seconds()
    s = float(v)
    if s <= 0:
        raise ValueError(f"--rdzv-conf {key}={v}: must be positive")
    return s


class _Watch:
    """Waits, in a thread of its own with its own connection, for the end of
    generation gen: the next one opened (the root wrote
    rdzv/<round>/g<gen>/next, or the generation is stale) or it failed.
    .ended is set then."""

    def __init__(self, addr: str, job: str, round: str, gen: int) -> None:
        self.ended = threading.Event()
        self.stop = threading.Event()
        self.why = ""
        self._key = f"rdzv/{round}/g{gen}/next"
        self._addr, self._job = addr, job
        threading.Thread(target=self._run, name=f"rdzv-watch-g{gen}",
                         daemon=True).start()

    def _run(self) -> None:
        client: Optional[rdzv.Client] = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = rdzv.Client(self._addr, self._job)
                client.wait([self._key], timeout_s=_WATCH_S)
                self.why = "the next generation opened"
                break
            except errors.DeadlineError:
                continue
            except (errors.StaleGenerationError, errors.AbortedError) as e:
                self.why = str(e)
                break
            except rdzv.RdzvError:
                # The node is gone for now: the workers will notice on
                # their own; try again after a pause.
                if client is not None:
                    client.close()
                    client = None
                self.stop.wait(1.0)
        else:
            if client is not None:
                client.close()
            return
        if client is not None:
            client.close()
        self.ended.set()


class RdzvRendezvousHandler(RendezvousHandler):
    """A torchrun RendezvousHandler over rdzv's own rendezvous (see the
    module's docstring)."""

    def __init__(self, params: RendezvousParameters) -> None:
        # The node: --rdzv-endpoint, else RDZV_ADDR (what Slurm's
        # TaskProlog and the Kubernetes manifests export).
        self._addr = params.endpoint or os.environ.get("RDZV_ADDR", "")
        if not self._addr:
            raise ValueError("--rdzv-endpoint (or RDZV_ADDR): this host's "
                             "rdzvd node (unix:PATH or HOST:PORT)")
        self._params = params
        self._run_id = params.run_id
        # The rdzv job: rdzv-conf job=, else RDZV_JOB (a node that serves
        # one job, as Slurm's per-job nodes do), else the run id. Runs of
        # one rdzv job with other run ids get rounds of their own.
        self._job = str(params.get("job") or os.environ.get("RDZV_JOB")
                        or params.run_id)
        default_round = "agents" if self._job == self._run_id else \
            _run_round(self._run_id)
        self._round = str(params.get("round") or default_round)
        self._host = str(params.get("host") or os.environ.get("RDZV_HOST")
                         or socket.gethostname())
        self._location = params.get("location") or \
            os.environ.get("RDZV_LOCATION")
        self._min, self._max = params.min_nodes, params.max_nodes
        self._join_s = _seconds(params, "join_timeout", 600.0)
        self._last_call_s = _seconds(params, "last_call_timeout", 30.0)
        self._rdzv: Optional[rdzv.Rendezvous] = None
        self._watch: Optional[_Watch] = None
        self._client: Optional[rdzv.Client] = None
        self._lock = threading.Lock()
        # The node could not be reached (each try lasts up to 30 s, so
        # shutdown does not try again), and whether shutdown ran (torchrun
        # calls it twice: the agent, then the launcher).
        self._unreachable = False
        self._shut = False

    # ---- what torchrun asks -------------------------------------------

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return True

    def get_run_id(self) -> str:
        return self._run_id

    def _closed_key(self) -> str:
        return f"rdzv/{self._round}/closed"

    def _store_client(self) -> rdzv.Client:
        if self._client is None:
            self._client = rdzv.Client(self._addr, self._job)
        return self._client

    def _connection_error(self, e: rdzv.RdzvError) -> RendezvousError:
        if e.name in _CONNECTION:
            self._unreachable = True
        if e.name in _REFUSED:
            return RendezvousConnectionError(
                f"rdzv node at {self._addr} refused job {self._job} (host "
                f"{self._host}): it serves another job, or this job's "
                f"secret differs; check --rdzv-id (rdzv-conf job=, "
                f"RDZV_JOB) and RDZV_SECRET_FILE: {e}")
        return RendezvousConnectionError(
            f"rdzv node at {self._addr} (job {self._job}, host "
            f"{self._host}): {e}")

    def is_closed(self) -> bool:
        try:
            self._store_client().get(self._closed_key())
            return True
        except errors.NokeyError:
            return False
        except rdzv.RdzvError as e:
            raise self._connection_error(e) from e

    def set_closed(self) -> None:
        try:
            self._store_client().set(self._closed_key(), b"1")
        except rdzv.RdzvError as e:
            raise self._connection_error(e) from e

    def num_nodes_waiting(self) -> int:
        w = self._watch
        return 1 if w is not None and w.ended.is_set() else 0

    def shutdown(self) -> bool:
        if self._shut or self._unreachable:
            self._leave()
            return not self._unreachable
        self._shut = True
        try:
            self.set_closed()
        except RendezvousError:
            return False
        finally:
            self._leave()
            if self._client is not None:
                self._client.close()
                self._client = None
        return True

    def _leave(self) -> None:
        if self._watch is not None:
            self._watch.stop.set()
            self._watch = None
        if self._rdzv is not None:
            self._rdzv.close()  # a clean leave: aborts nothing
            self._rdzv = None

    def _join_once(self, timeout_s: float) -> rdzv.Rendezvous:
        return rdzv.Rendezvous.join(
            addr=self._addr, job=self._job, round=self._round,
            host=self._host, location=self._location, local_rank=0,
            local_size=1, world_size=self._max,
            min_size=self._min if self._min < self._max else 0,
            timeout_s=timeout_s, last_call_s=self._last_call_s)

    def _join(self) -> rdzv.Rendezvous:
        deadline = time.monotonic() + self._join_s
        parked = False
        while True:
            if self.is_closed():
                if parked:
                    # Exits 0 here: torch 2.6's agent catches
                    # RendezvousGracefulExitError but then returns None,
                    # and its launcher fails on that (AttributeError:
                    # 'NoneType' object has no attribute 'is_failed').
                    print(f"rdzv: rendezvous {self._run_id} closed while "
                          f"host {self._host} was parked over the maximum "
                          f"of {self._max} nodes: exiting 0",
                          file=sys.stderr, flush=True)
                    raise SystemExit(0)
                raise RendezvousClosedError(
                    f"rendezvous {self._run_id} (rdzv job {self._job}) is "
                    f"closed")
            left = deadline - time.monotonic()
            if left <= 0 and not parked:
                raise RendezvousTimeoutError(
                    f"rendezvous {self._run_id}: join_timeout "
                    f"{self._join_s:g} s passed")
            try:
                return self._join_once(max(left, 1.0) if not parked
                                       else self._join_s)
            except (errors.ParkedError, errors.RoundFullError) as e:
                # Over the maximum: parked (not a failure for anyone);
                # asked again until a place opens or the job closes.
                if not parked:
                    print(f"rdzv: host {self._host} parked: {e}",
                          file=sys.stderr, flush=True)
                parked = True
                time.sleep(_PARK_S)
            except errors.DeadlineError as e:
                raise RendezvousTimeoutError(
                    f"rendezvous {self._run_id} (rdzv job {self._job}, round "
                    f"{self._round}): {e}") from e
            except errors.AbortedError:
                # The generation being formed failed (a member died while
                # it formed): the next one is joined.
                time.sleep(0.2)
            except rdzv.RdzvError as e:
                if e.name in _CONNECTION:
                    raise self._connection_error(e) from e
                raise RendezvousError(f"rendezvous {self._run_id}: {e}") \
                    from e

    def next_rendezvous(self) -> Any:
        """torch >= 2.5: a RendezvousInfo; torch 1.13: (store, rank,
        world_size), and its workers use their own store (torch 1.13
        gives the agent store to workers of the "static" backend only)."""
        with self._lock:
            self._leave()
            r = self._join()
            gen = r.generation
            try:
                port = r.store.tcpstore_space(f"rdzv/{self._round}/w{gen}")
            except rdzv.RdzvError as e:
                r.close()
                raise self._connection_error(e) from e
            self._rdzv = r
            self._watch = _Watch(self._addr, self._job, self._round, gen)
            store = _tcpstore("127.0.0.1", port, self._join_s)
            if _TORCH1:
                return (PrefixStore("torchelastic/", store), r.rank,
                        r.world_size)
            return RendezvousInfo(
                PrefixStore("torchelastic/", store), r.rank, r.world_size,
                RendezvousStoreInfo("127.0.0.1", port))


def _tcpstore(host: str, port: int, timeout_s: float) -> Store:
    """A TCPStore client of the key space (no libuv needed by a client; a
    torch built without libuv refuses use_libuv=True; torch 1.13 has no
    such argument)."""
    timeout = timedelta(seconds=timeout_s)
    if _TORCH1:
        return TCPStore(host, port, is_master=False, timeout=timeout)
    return TCPStore(host, port, is_master=False, use_libuv=False,
                    timeout=timeout)


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torchrun's creator of the "rdzv" backend."""
    return RdzvRendezvousHandler(params)


def register() -> None:
    """Registers the "rdzv" backend with torchrun in this process (where
    the entry point is not read)."""
    from torch.distributed.elastic.rendezvous import \
        rendezvous_handler_registry
    try:
        rendezvous_handler_registry.register(BACKEND, create_handler)
    except ValueError:
        pass  # already registered (by the entry point)


def main(argv: Optional[list[str]] = None) -> None:
    """`python -m rdzv.torchrun ARGS`: torchrun ARGS with the backend
    registered."""
    register()
    from torch.distributed.run import main as torchrun_main
    torchrun_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
