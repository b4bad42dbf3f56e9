# One Slurm task of tests/slurm/slurm_test.sh's torch job: gloo
# init_process_group through env:// with no arguments but the backend
# (RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT: this host's rdzv node's
# TCPStore front end, all exported by deploy/slurm/task-prolog.sh, with
# TORCHELASTIC_USE_AGENT_STORE so that no rank starts a server), then
# an all_reduce of rank+1 over every task, and a key set in the step's key
# space. Prints "all_reduce ok RANK SUM torch VERSION host HOST port PORT".
import os
import sys

import torch
import torch.distributed as dist

# The TaskProlog's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE agree
# with Slurm's own (4 tasks a host here), and init_process_group reads
# them itself: the call is what an unmodified script makes.
rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
want = {"RANK": str(rank), "WORLD_SIZE": str(world),
        "LOCAL_RANK": os.environ["SLURM_LOCALID"],
        "LOCAL_WORLD_SIZE": os.environ["SLURM_NTASKS_PER_NODE"]}
got = {k: os.environ.get(k) for k in want}
if got != want:
    print(f"env wrong {rank} {got} != {want}", flush=True)
    sys.exit(1)
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
if t.item() != want:
    print(f"all_reduce wrong {rank} {t.item()} != {want}", flush=True)
    sys.exit(1)
# The step's key space (MASTER_PORT, from the TaskProlog): a key set here
# is read back by the batch script through rdzv under the step's prefix.
probe = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                      is_master=False)
probe.set(f"probe/{rank}", torch.__version__)
print(f"all_reduce ok {rank} {t.item():.0f} torch {torch.__version__} host "
      f"{os.environ.get('SLURMD_NODENAME')} port {os.environ['MASTER_PORT']}",
      flush=True)
dist.destroy_process_group()
