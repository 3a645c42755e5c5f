"""A tiny training loop that writes what it sees into probe.json in its working directory:
the DataLoader's settings, the optimizer's foreach/fused flags, whether its model's forward runs
under autocast and in which dtype, PYTORCH_CUDA_ALLOC_CONF, and which empty_cache it calls
(tests/test_tryfix.py turns gpudoctor's knobs on it). Flags: --crash-when-foreach raises at the
third step when the optimizer has foreach=True; --hang-when-fused sleeps when it has fused=True."""

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--crash-when-foreach", action="store_true")
parser.add_argument("--hang-when-fused", action="store_true")
args = parser.parse_args()

seen = {}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        seen["autocast"] = torch.is_autocast_enabled("cpu")
        seen["autocast_dtype"] = str(torch.get_autocast_dtype("cpu")) if seen["autocast"] else None
        out = self.body(x)
        seen["output_dtype"] = str(out.dtype)
        return out.float()


data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
loader = DataLoader(data, batch_size=8, num_workers=0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
seen.update(num_workers=loader.num_workers, pin_memory=loader.pin_memory,
            persistent_workers=loader.persistent_workers, foreach=opt.defaults.get("foreach"),
            fused=opt.defaults.get("fused"), alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            empty_cache=getattr(torch.cuda.empty_cache, "__module__", ""))
step = 0
while step < args.iters:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.empty_cache()
        step += 1
        if step == 1:
            with open("probe.json", "w") as f:
                json.dump(seen, f)
        if step == 3 and args.crash_when_foreach and opt.defaults.get("foreach"):
            raise RuntimeError("planted crash: foreach optimizer")
        if args.hang_when_fused and opt.defaults.get("fused"):
            time.sleep(600)
        if step >= args.iters:
            break
print(f"done {step} steps")
