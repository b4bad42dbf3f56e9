"""Makes use_libuv=False the default of torch.distributed.TCPStore.

For Debian's python3-torch 2.6, which is built without libuv: there the
default use_libuv=True makes every TCPStore raise "use_libuv was requested
but PyTorch was build without libuv support", clients included, and torch's
own code creates some without saying (env:// with
TORCHELASTIC_USE_AGENT_STORE=True, torchrun's c10d rendezvous backend and
the store its rank-0 agent hosts for the workers). A torch built with libuv
(PyPI, conda) needs none of this; the client's bytes on the wire are the
same either way. torch2_test.sh puts this directory on PYTHONPATH inside
the chroot, so that it runs in every Python process there (torchrun's
agents and workers inherit it). It changes only that default: an explicit
use_libuv is kept.
"""
import sys

import torch.distributed as _dist
import torch.distributed.rendezvous  # noqa: F401 (sys.modules below)

_TCPStore = _dist.TCPStore


class TCPStore(_TCPStore):
    def __init__(self, *args, **kwargs):
        if len(args) < 9:  # use_libuv is the 9th parameter
            kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)


_dist.TCPStore = TCPStore
# `import torch.distributed.rendezvous as m` gives the function of that
# name, not the module: patch the module's own name.
sys.modules["torch.distributed.rendezvous"].TCPStore = TCPStore

# A process the test finds hung is sent SIGUSR1 first: every thread's
# Python stack goes to stderr, then it is killed.
import faulthandler  # noqa: E402
import signal  # noqa: E402

faulthandler.register(signal.SIGUSR1, all_threads=True)
