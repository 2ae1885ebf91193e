#!/usr/bin/env python3
"""Measurements on one GPU that shardplan's models are checked against.

1. PyTorch's CUDA caching allocator: a seeded random sequence of allocations and frees,
   with memory_allocated / memory_reserved after each, to hold simulator/caching_allocator
   against (tests/data/caching_allocator_trace.json).
2. Llama 3 8B and 70B decoder layers (bf16, GQA, SwiGLU, RMSNorm, causal SDPA): forward
   and backward times against the simulator's per-layer op times, and the activation
   bytes each keeps for backward against the memory model.
3. Fused AdamW bandwidth against the optimizer step's memory-bound cost.

Usage: python3 tools/measure/h100_probe.py OUT_DIR
"""
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F


def allocator_trace(steps=3000, seed=5):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc = torch.cuda.memory_allocated()
    base_res = torch.cuda.memory_reserved()
    rng = random.Random(seed)
    live = {}
    ops = []
    for step in range(steps):
        if not live or rng.random() < 0.6:
            kind = rng.random()
            if kind < 0.4:
                n = rng.randint(1, 1 << 20)  # small pool
            elif kind < 0.8:
                n = rng.randint((1 << 20) + 1, 10 << 20)  # large, < 10 MiB
            else:
                n = rng.randint(10 << 20, 96 << 20)  # large, rounded to 2 MiB
            live[step] = torch.empty(n, dtype=torch.uint8, device="cuda")
            op = {"op": "alloc", "id": step, "bytes": n}
        else:
            k = rng.choice(sorted(live))
            del live[k]
            op = {"op": "free", "id": k}
        op["allocated"] = torch.cuda.memory_allocated() - base_alloc
        op["reserved"] = torch.cuda.memory_reserved() - base_res
        ops.append(op)
    live.clear()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "seed": seed,
        "ops": ops,
    }


class RMSNorm(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


class Layer(torch.nn.Module):
    """Llama 3 8B: hidden 4096, 32 query heads, 8 KV heads of 128, FFN 14336."""

    def __init__(self, h=4096, heads=32, kv=8, ffn=14336):  # defaults: Llama 3 8B
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q = torch.nn.Linear(h, h, bias=False)
        self.k = torch.nn.Linear(h, kv * self.hd, bias=False)
        self.v = torch.nn.Linear(h, kv * self.hd, bias=False)
        self.o = torch.nn.Linear(h, h, bias=False)
        self.gate = torch.nn.Linear(h, ffn, bias=False)
        self.up = torch.nn.Linear(h, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        y = self.n1(x)
        q = self.q(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def layer_times(layers=4, seq=8192, micro_batch=1, dims=(4096, 32, 8, 14336), name="llama3-8b",
                warmup=3, iters=10, compiled=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Layer(*dims) for _ in range(layers)]).cuda().to(torch.bfloat16)
    if compiled:  # each layer on its own, as torchtitan compiles its blocks
        for i, layer in enumerate(model):
            model[i] = torch.compile(layer)
    x = torch.randn(micro_batch, seq, dims[0], device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    fwd, bwd = [], []
    for i in range(warmup + iters):
        s0, s1, s2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s0.record()
        out = model(x)
        s1.record()
        out.float().pow(2).mean().backward()
        s2.record()
        torch.cuda.synchronize()
        if i >= warmup:
            fwd.append(s0.elapsed_time(s1) / 1e3 / layers)
            bwd.append(s1.elapsed_time(s2) / 1e3 / layers)
        model.zero_grad(set_to_none=True)
        x.grad = None
    fwd.sort()
    bwd.sort()
    del model, x, out
    torch.cuda.empty_cache()
    return {
        "model": name,
        "micro_batch": micro_batch,
        "seq_len": seq,
        "layers_timed": layers,
        "forward_seconds_median": fwd[len(fwd) // 2],
        "backward_seconds_median": bwd[len(bwd) // 2],
        "forward_seconds": fwd,
        "backward_seconds": bwd,
        "compiled": compiled,
        "sdpa_backends": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        },
    }


def activation_bytes(layers=4, seq=8192, micro_batch=1, dims=(4096, 32, 8, 14336),
                     name="llama3-8b"):
    """Bytes a decoder layer keeps for backward: memory held after the forward (graph
    alive) less the input and the output, per layer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Layer(*dims) for _ in range(layers)]).cuda().to(torch.bfloat16)
    x = torch.randn(micro_batch, seq, dims[0], device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = model(x)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    per_layer = (after - before - out.numel() * out.element_size()) / layers
    del out, model, x
    torch.cuda.empty_cache()
    return {"model": name, "micro_batch": micro_batch, "seq_len": seq,
            "saved_bytes_per_layer": per_layer, "torch": torch.__version__}


def adamw_bandwidth(parameters=1 << 28, warmup=3, iters=10):
    """Fused AdamW over fp32 master weights, grads and two states: 16 bytes read and 12
    written per parameter."""
    p = torch.nn.Parameter(torch.zeros(parameters, device="cuda"))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    times = []
    for i in range(warmup + iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        opt.step()
        b.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    t = times[len(times) // 2]
    return {"parameters": parameters, "bytes_per_parameter": 28, "seconds_median": t,
            "bytes_per_second": 28 * parameters / t, "torch": torch.__version__}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    with open(os.path.join(out, "caching_allocator_trace.json"), "w") as f:
        json.dump(allocator_trace(), f)
    runs = [
        layer_times(),
        layer_times(seq=4096, micro_batch=2),
        layer_times(layers=2, dims=(8192, 64, 8, 28672), name="llama3-70b"),
    ]
    for timing in runs:
        timing["torch"] = torch.__version__
        timing["device"] = torch.cuda.get_device_name()
    with open(os.path.join(out, "llama3_8b_layer.json"), "w") as f:
        json.dump(runs[0], f, indent=1)
    with open(os.path.join(out, "layer_times.json"), "w") as f:
        json.dump(runs, f, indent=1)
    with open(os.path.join(out, "activations.json"), "w") as f:
        json.dump([activation_bytes(),
                   activation_bytes(layers=2, dims=(8192, 64, 8, 28672), name="llama3-70b")],
                  f, indent=1)
    with open(os.path.join(out, "adamw.json"), "w") as f:
        json.dump(adamw_bandwidth(), f, indent=1)
    for timing in runs:
        print(json.dumps({k: v for k, v in timing.items() if "median" in k or k in ("model", "seq_len", "micro_batch")}))
    print(time.time() - t0)


if __name__ == "__main__":
    main()
