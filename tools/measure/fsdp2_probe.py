#!/usr/bin/env python3
"""Measurements on one GPU for the PyTorch FSDP2 stacks (torchtitan's software).

1. FSDP2's memory layout: a Llama 3 8B cut to 4 layers (embedding, output layer, 4 decoder
   layers), each layer and the root under fully_shard with torchtitan's
   MixedPrecisionPolicy (bf16 parameters, fp32 reduce), AdamW: bytes allocated after
   sharding, after each phase of a step, and the peak of each phase. One rank: FSDP2
   still keeps the fp32 sharded parameters, casts them to bf16 into its all-gather input,
   gathers into a bf16 unsharded buffer and reduces in fp32, so every buffer it makes is
   there to be counted.
2. Decoder layer forward and backward times (the layer of h100_probe.py), eager and under
   torch.compile (each layer compiled, as torchtitan does), on this GPU.
3. Host link bandwidth: pinned host <-> device copies, what activation offload moves over.

Usage: python3 tools/measure/fsdp2_probe.py OUT_DIR
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h100_probe import Layer, RMSNorm, layer_times  # noqa: E402

VOCAB, HIDDEN = 128256, 4096


class Model(torch.nn.Module):
    def __init__(self, layers=4):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))
        self.norm = RMSNorm(HIDDEN)
        self.output = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def fsdp2_memory(layers=4, seq=8192, steps=3):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    cuda = torch.cuda
    cuda.empty_cache()
    base = cuda.memory_allocated()
    model = Model(layers).cuda()  # fp32, as torchtitan builds it before sharding
    params = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    cuda.synchronize()
    record = {"parameters": params, "layers": layers, "seq_len": seq, "micro_batch": 1,
              "after_shard": cuda.memory_allocated() - base, "steps": []}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tokens = torch.randint(0, VOCAB, (1, seq), device="cuda")
    labels = torch.randint(0, VOCAB, (1, seq), device="cuda")
    for _ in range(steps):
        step = {}
        cuda.reset_peak_memory_stats()
        logits = model(tokens)
        cuda.synchronize()
        step["after_forward"] = cuda.memory_allocated() - base
        step["peak_forward"] = cuda.max_memory_allocated() - base
        cuda.reset_peak_memory_stats()
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))
        del logits
        loss.backward()
        cuda.synchronize()
        step["after_backward"] = cuda.memory_allocated() - base
        step["peak_loss_backward"] = cuda.max_memory_allocated() - base
        cuda.reset_peak_memory_stats()
        opt.step()
        cuda.synchronize()
        step["after_optimizer"] = cuda.memory_allocated() - base
        step["peak_optimizer"] = cuda.max_memory_allocated() - base
        opt.zero_grad(set_to_none=True)
        step["after_zero_grad"] = cuda.memory_allocated() - base
        step["reserved"] = cuda.memory_reserved()
        record["steps"].append(step)
    dtypes = {}
    for name, p in model.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        dtypes.setdefault(str(local.dtype), 0)
        dtypes[str(local.dtype)] += local.numel()
    record["sharded_parameter_dtypes"] = dtypes
    record["optimizer_state_dtypes"] = sorted(
        {str(v.dtype) for s in opt.state.values() for v in s.values() if torch.is_tensor(v)})
    del model, opt, tokens, labels
    cuda.empty_cache()
    return record


def host_link(nbytes=1 << 30, iters=5):
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out = {}
    for name, dst, src in (("device_to_host", host, dev), ("host_to_device", dev, host)):
        times = []
        for _ in range(iters + 1):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        times = sorted(times[1:])
        out[name] = {"bytes": nbytes, "seconds_median": times[len(times) // 2],
                     "bytes_per_second": nbytes / times[len(times) // 2]}
    del dev, host
    return out


def shard_like_torchtitan(model):
    """fully_shard each decoder layer and then the root, with torchtitan's mixed precision
    (bf16 parameters in compute, fp32 reduce); returns the model."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def run_variants(script, variants, run):
    """`script OUT_DIR [VARIANT]`: one variant in this process, or each of `variants` in
    its own process (so every one starts with an empty caching allocator)."""
    import subprocess

    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if len(sys.argv) > 2:
        run(sys.argv[2], out)
        return
    for variant in variants:
        subprocess.run([sys.executable, os.path.abspath(script), out, variant], check=True)


def single_rank(port):
    """A one-rank NCCL process group, what fully_shard needs on one GPU."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    single_rank(29511)
    t0 = time.time()
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name()}
    result = dict(info)
    result["fsdp2_memory"] = fsdp2_memory()
    print("fsdp2", time.time() - t0, flush=True)
    result["host_link"] = host_link()
    result["layer_times"] = [layer_times()]
    print("eager", time.time() - t0, flush=True)
    try:
        result["layer_times"].append(layer_times(compiled=True))
    except Exception as e:  # a compiler failure must not lose the measurements above
        result["compile_error"] = repr(e)
    print("compiled", time.time() - t0, flush=True)
    with open(os.path.join(out, "fsdp2_probe.json"), "w") as f:
        json.dump(result, f, indent=1)
    dist.destroy_process_group()
    print(json.dumps({k: v for k, v in result.items() if k != "layer_times"}, indent=1))
    for t in result["layer_times"]:
        print(t["compiled"], t["forward_seconds_median"], t["backward_seconds_median"])


if __name__ == "__main__":
    main()
