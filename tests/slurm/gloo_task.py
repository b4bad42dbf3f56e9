# One Slurm task of tests/slurm/slurm_test.sh's torch job: gloo
# init_process_group through env:// (MASTER_ADDR/MASTER_PORT: this host's
# rdzv node's TCPStore front end, exported by deploy/slurm/task-prolog.sh,
# with TORCHELASTIC_USE_AGENT_STORE so that no rank starts a server), then
# an all_reduce of rank+1 over every task. Prints "all_reduce ok RANK SUM".
import os
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", init_method="env://", rank=rank,
                        world_size=world)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
if t.item() != want:
    print(f"all_reduce wrong {rank} {t.item()} != {want}", flush=True)
    sys.exit(1)
print(f"all_reduce ok {rank} {t.item():.0f}", flush=True)
dist.destroy_process_group()
