#!/usr/bin/env python3
"""A PyTorch profiler trace of FSDP2 training steps on one GPU, for `shardplan calibrate
--plan --trace`: the 4-layer Llama 3 8B of fsdp2_probe.py under fully_shard with
torchtitan's mixed precision (fp32 parameters, bf16 compute, fp32 reduce), fused AdamW,
eager. Two warm-up steps, then two profiled steps (ProfilerStep#2 and #3), written as a
Kineto Chrome trace.

Usage: python3 tools/measure/fsdp2_profile.py OUT_DIR NAME SEQ_LEN MICRO_BATCH RECOMPUTE
       (RECOMPUTE: none or full; full checkpoints each decoder layer, as torchtitan's
       full activation checkpointing does)
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp2_probe import VOCAB, Model, shard_like_torchtitan, single_rank  # noqa: E402


def main():
    out, name, seq, micro_batch, recompute = sys.argv[1:6]
    seq, micro_batch = int(seq), int(micro_batch)
    os.makedirs(out, exist_ok=True)
    single_rank(29540)

    torch.manual_seed(0)
    model = Model(4).cuda()
    if recompute == "full":
        for layer in model.layers:
            forward = layer.forward
            layer.forward = lambda x, f=forward: checkpoint(f, x, use_reentrant=False)
    shard_like_torchtitan(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, VOCAB, (micro_batch, seq), device="cuda")
    labels = torch.randint(0, VOCAB, (micro_batch, seq), device="cuda")
    seconds = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=2, active=2, repeat=1)) as prof:
        for _ in range(4):
            torch.cuda.synchronize()
            start = time.perf_counter()
            pred = model(tokens)
            loss = F.cross_entropy(pred.float().view(-1, VOCAB), labels.view(-1))
            del pred
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            prof.step()
    path = os.path.join(out, f"fsdp2_profile_{name}.json")
    prof.export_chrome_trace(path)
    with open(os.path.join(out, f"fsdp2_profile_{name}_steps.json"), "w") as f:
        json.dump({"name": name, "seq_len": seq, "micro_batch": micro_batch,
                   "recompute": recompute, "torch": torch.__version__,
                   "device": torch.cuda.get_device_name(), "step_seconds": seconds}, f, indent=1)
    print(name, "step seconds", [round(s, 4) for s in seconds])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
