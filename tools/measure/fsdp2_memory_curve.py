#!/usr/bin/env python3
"""FSDP2's memory through one training step, module by module, on one GPU: the model,
sharding and mixed precision of fsdp2_probe.py (a 4-layer Llama 3 8B under fully_shard with
torchtitan's MixedPrecisionPolicy, fused AdamW as torchtitan configures it), with hooks
recording memory_allocated and memory_reserved (and their peaks since the previous
point) before and after each
module's forward and backward, around the loss, and around the optimizer step. Step 3's
curve is the steady state, to hold against the plan's memory timeline.

Usage: python3 tools/measure/fsdp2_memory_curve.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp2_probe import VOCAB, Model, shard_like_torchtitan, single_rank  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    single_rank(29512)
    cuda = torch.cuda
    torch.manual_seed(0)
    base = cuda.memory_allocated()
    model = shard_like_torchtitan(Model(4).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    curve = []

    def point(label):
        cuda.synchronize()
        curve.append({"at": label, "allocated": cuda.memory_allocated() - base,
                      "peak_since_last": cuda.max_memory_allocated() - base,
                      "reserved": cuda.memory_reserved(),
                      "peak_reserved_since_last": cuda.max_memory_reserved()})
        cuda.reset_peak_memory_stats()

    named = [("embed", model.embed)] + [(f"layers.{i}", l) for i, l in enumerate(model.layers)]
    named += [("norm", model.norm), ("output", model.output)]
    for name, module in named:
        module.register_forward_pre_hook(lambda m, a, n=name: point(f"fwd {n} start"))
        module.register_forward_hook(lambda m, a, o, n=name: point(f"fwd {n} end"))
        module.register_full_backward_pre_hook(lambda m, g, n=name: point(f"bwd {n} start"))
        module.register_full_backward_hook(lambda m, gi, go, n=name: point(f"bwd {n} end"))
    tokens = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    labels = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    steps = []
    for step in range(3):
        curve = []
        cuda.reset_peak_memory_stats()
        point("step start")
        pred = model(tokens)
        point("forward done")
        loss = F.cross_entropy(pred.float().view(-1, VOCAB), labels.view(-1))
        point("loss done")
        del pred  # as torchtitan's train step does before backward
        loss.backward()
        point("backward done")
        opt.step()
        point("optimizer done")
        opt.zero_grad(set_to_none=True)
        point("zero_grad done")
        steps.append(curve)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "parameters": sum(p.numel() for p in model.parameters()), "steps": steps}
    with open(os.path.join(out, "fsdp2_memory_curve.json"), "w") as f:
        json.dump(result, f, indent=1)
    for p in steps[-1]:
        print(f"{p['at']:28s} {p['allocated'] / 1e9:8.3f} {p['peak_since_last'] / 1e9:8.3f}"
              f" {p['reserved'] / 1e9:8.3f} {p['peak_reserved_since_last'] / 1e9:8.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
