#!/usr/bin/env python3
"""SDPA at long sequences and in ring-attention chunk shapes, for context parallelism:
Llama 3 8B's attention (32 query heads of 128) with keys and values repeated to 32 heads
(torchtitan's repeat_kv before SDPA), forward and backward, FlashAttention-2 and cuDNN:

  causal S      one rank's whole causal attention at S tokens (S = 8k, 32k, 64k)
  block QxK     the non-causal blocks a load-balanced ring step runs (PyTorch's
                _templated_ring_attention and Transformer Engine: a rank's 2 chunks of
                queries against one chunk of keys, or one chunk of queries against two)

TFLOP/s count what runs: causal blocks half of the 4·Q·K·d per head forward, backward
2.5 times the forward (FlashAttention-2 paper).

Usage: python3 tools/measure/sdpa_long_probe.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_probe import time_pair  # noqa: E402

HEADS, D = 32, 128
SHAPES = [("causal", 8192, 8192), ("causal", 32768, 32768), ("causal", 65536, 65536),
          ("block", 32768, 16384), ("block", 16384, 32768)]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "cudnn": torch.backends.cudnn.version(), "heads": HEADS, "head_dim": D, "runs": []}
    for kind, sq, sk in SHAPES:
        causal = kind == "causal"
        q = torch.randn(1, HEADS, sq, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, HEADS, sk, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, HEADS, sk, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        fwd_flops = 4 * HEADS * sq * sk * D / (2 if causal else 1)
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def fn():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                fwd, bwd = time_pair(fn, warmup=2, iters=5)
            except RuntimeError as e:
                result["runs"].append({"kind": kind, "q": sq, "k": sk, "backend": name,
                                       "error": str(e)[:200]})
                continue
            row = {"kind": kind, "q": sq, "k": sk, "backend": name, "forward_s": fwd,
                   "backward_s": bwd, "forward_tflops": fwd_flops / fwd / 1e12,
                   "backward_tflops": 2.5 * fwd_flops / bwd / 1e12,
                   "step_tflops": 3.5 * fwd_flops / (fwd + bwd) / 1e12}
            result["runs"].append(row)
            print(f"{kind:6s} {sq:6d}x{sk:<6d} {name:5s} fwd {row['forward_tflops']:6.1f} "
                  f"bwd {row['backward_tflops']:6.1f} fwd+bwd {row['step_tflops']:6.1f} TFLOP/s")
            q.grad = k.grad = v.grad = None
        del q, k, v
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "sdpa_long_probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
