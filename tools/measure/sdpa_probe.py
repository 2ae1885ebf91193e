#!/usr/bin/env python3
"""Which kernels eager PyTorch runs for a Llama 3 8B layer's attention and norms, and how
fast: causal SDPA (32 query heads, 8 KV heads of 128, GQA) at 1 x 8192 tokens, forward and
backward, with each SDPA backend PyTorch offers on this GPU, and F.rms_norm's kernels.

Usage: python3 tools/measure/sdpa_probe.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


def time_pair(fn, warmup=3, iters=10):
    fwd, bwd = [], []
    for i in range(warmup + iters):
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        out = fn()
        b.record()
        out.backward(torch.ones_like(out))
        c.record()
        torch.cuda.synchronize()
        if i >= warmup:
            fwd.append(a.elapsed_time(b) / 1e3)
            bwd.append(b.elapsed_time(c) / 1e3)
    fwd.sort()
    bwd.sort()
    return fwd[len(fwd) // 2], bwd[len(bwd) // 2]


def kernels_of(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn()
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows.append({"name": e.key[:160], "calls": e.count, "device_us": t})
    rows.sort(key=lambda r: -r["device_us"])
    return rows[:12]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    b, s, heads, kv, d = 1, 8192, 32, 8, 128
    q = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    # Causal attention: 2 GEMMs of 2·s²·d per head in forward, halved by the mask;
    # backward does 2.5 times the forward's work (FlashAttention-2 paper).
    fwd_flops = 2 * 2 * b * heads * s * s * d / 2
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "shape": {"batch": b, "seq": s, "heads": heads, "kv_heads": kv, "head_dim": d},
              "forward_flops": fwd_flops, "backward_flops": 2.5 * fwd_flops, "backends": {}}

    def attn():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    for name, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            if backend is None:
                f, bw = time_pair(attn)
                kernels = kernels_of(attn)
            else:
                with sdpa_kernel(backend):
                    f, bw = time_pair(attn)
                    kernels = kernels_of(attn)
            result["backends"][name] = {
                "forward_seconds": f, "backward_seconds": bw,
                "forward_tflops": fwd_flops / f / 1e12,
                "backward_tflops": 2.5 * fwd_flops / bw / 1e12, "kernels": kernels}
        except Exception as e:  # a backend this GPU or build lacks
            result["backends"][name] = {"error": repr(e)[:300]}
        q.grad = k.grad = v.grad = None
    x = torch.randn(b, s, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    result["rms_norm_kernels"] = kernels_of(lambda: F.rms_norm(x, (4096,), w, 1e-5))
    with open(os.path.join(out_dir, "sdpa_probe.json"), "w") as f:
        json.dump(result, f, indent=1)
    for name, r in result["backends"].items():
        if "error" in r:
            print(name, r["error"])
        else:
            print(name, round(r["forward_tflops"]), round(r["backward_tflops"]),
                  [k["name"][:70] for k in r["kernels"][:3]])
    print("rms_norm", [(k["name"][:70], k["calls"]) for k in result["rms_norm_kernels"][:6]])


if __name__ == "__main__":
    main()
