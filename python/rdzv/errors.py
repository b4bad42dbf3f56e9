"""rdzv's statuses as exceptions: one class per RDZV_E* status
(include/rdzv/error.h), each a subclass of RdzvError, carrying the status,
its name, rdzv's message and the detail the call left (which daemon, host,
rank or key failed)."""
from __future__ import annotations

from rdzv import _lib


class RdzvError(Exception):
    """A call of librdzv failed.

    status: the negative status; name: "RDZV_EDEADLINE", "ECONNREFUSED", ...;
    detail: what the call said about it (may be empty)."""

    def __init__(self, status: int, detail: str = "") -> None:
        self.status = status
        self.name = (_lib.lib.rdzv_err_name(status) or b"").decode()
        self.message = (_lib.lib.rdzv_strerror(status) or b"").decode()
        self.detail = detail
        text = f"{self.message} [{self.name}]"
        super().__init__(f"{text}: {detail}" if detail else text)


_BY_STATUS: dict[int, type[RdzvError]] = {}


def _declare() -> None:
    # The project's statuses are -1000 .. -1999; each gets a class named
    # after it without the E: RDZV_EDEADLINE -> rdzv.errors.Deadline.
    for status in range(-1000, -1100, -1):
        name = (_lib.lib.rdzv_err_name(status) or b"").decode()
        if not name.startswith("RDZV_E"):
            continue
        words = name[len("RDZV_E"):].split("_")
        cls_name = "".join(w.capitalize() for w in words) + "Error"
        cls = type(cls_name, (RdzvError,), {
            "__doc__": f"{name}: {_lib.lib.rdzv_strerror(status).decode()}"})
        globals()[cls_name] = cls
        _BY_STATUS[status] = cls


_declare()


def error(status: int, detail: str = "") -> RdzvError:
    """The exception for status (RdzvError itself for a -errno status)."""
    return _BY_STATUS.get(status, RdzvError)(status, detail)


def check(status: int, detail: str = "") -> None:
    """Raises error(status, detail) when status is negative."""
    if status < 0:
        raise error(status, detail)


__all__ = ["RdzvError", "error", "check"] + [c.__name__ for c in
                                             _BY_STATUS.values()]
