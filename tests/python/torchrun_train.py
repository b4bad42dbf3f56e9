"""A worker of torchrun_test.sh: an unmodified gloo job (env://), plus a
probe of where its store is. TRAIN_STEPS all_reduces, 0.2 s apart."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
# The key space the workers were given: a key set here is read back by the
# test through rdzvctl under the space's prefix.
probe = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                      is_master=False)
probe.set(f"probe/{rank}", f"{world}")
print(f"RESULT host={os.environ.get('RDZV_HOST')} rank={rank} world={world} "
      f"sum={t.item():g} master={os.environ['MASTER_ADDR']}:"
      f"{os.environ['MASTER_PORT']} restart="
      f"{os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
for _ in range(int(os.environ.get("TRAIN_STEPS", "0"))):
    dist.all_reduce(torch.tensor([1.0]))
    time.sleep(0.2)
dist.destroy_process_group()
