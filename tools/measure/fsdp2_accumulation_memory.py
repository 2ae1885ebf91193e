#!/usr/bin/env python3
"""FSDP2's memory under gradient accumulation on one GPU, for shardplan's no_sync,
main_param_dtype and loss_kernel settings: the 4-layer Llama 3 8B of fsdp2_probe.py
under fully_shard (each layer and the root), fused AdamW, two micro-batches of 8192
tokens per step, no recompute, three steps (the third is the steady state).

Variants (one process each, so the allocator starts empty):
  fp32_no_sync   torchtitan's mixed precision (fp32 parameters, bf16 compute, fp32
                 reduce), set_requires_gradient_sync(False) on the first micro-batch,
                 cross_entropy(logits.float())
  bf16_no_sync   KempnerForge's: the model cast to bf16 before fully_shard (bf16 master
                 weights, so AdamW's states are bf16 too), fp32 reduce, no_sync on all but
                 the last micro-batch (kempnerforge/training/grad.py), F.cross_entropy on
                 the bf16 logits (kempnerforge/training/loss.py)
  bf16_synced    the same, reducing every micro-batch

Records per step the peak of memory_allocated and memory_reserved over the step, what
stays after each micro-batch's backward and after zero_grad, and the dtypes FSDP2 used
for the accumulated gradients and AdamW's states.

Usage: python3 tools/measure/fsdp2_accumulation_memory.py OUT_DIR [VARIANT]
       (no VARIANT: runs each in its own process)
"""
import json
import os
import sys

VARIANTS = ("fp32_no_sync", "bf16_no_sync", "bf16_synced")


def run(variant, out):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp2_probe import VOCAB, Model, shard_like_torchtitan, single_rank  # noqa: E402

    single_rank(29530 + VARIANTS.index(variant))
    bf16_master = variant.startswith("bf16")
    no_sync = variant.endswith("no_sync")
    cuda = torch.cuda
    torch.manual_seed(0)
    base = cuda.memory_allocated()
    model = Model(4).cuda()
    if bf16_master:
        model = model.to(torch.bfloat16)
    shard_like_torchtitan(model)
    cuda.synchronize()
    after_shard = cuda.memory_allocated() - base
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    labels = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    accumulated_dtype = None
    steps = []
    for _ in range(3):
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        step = {"micro_batches": []}
        for micro in range(2):
            last = micro == 1
            if no_sync:
                model.set_requires_gradient_sync(last)
            pred = model(tokens)
            logits = pred.view(-1, VOCAB)
            loss = F.cross_entropy(logits if bf16_master else logits.float(), labels.view(-1)) / 2
            del pred, logits
            loss.backward()
            cuda.synchronize()
            step["micro_batches"].append({"after_backward": cuda.memory_allocated() - base,
                                          "reserved": cuda.memory_reserved()})
            if no_sync and not last and accumulated_dtype is None:
                try:  # FSDP2 internals (torch/distributed/fsdp/_fully_shard/_fsdp_param.py)
                    state = model.layers[0]._get_fsdp_state()
                    param = state._fsdp_param_group.fsdp_params[0]
                    acc = getattr(param, "unsharded_accumulated_grad", None)
                    grad = getattr(param._unsharded_param, "grad", None)
                    accumulated_dtype = str((acc if acc is not None else grad).dtype)
                except (AttributeError, IndexError) as e:
                    accumulated_dtype = f"unknown ({e})"
        opt.step()
        opt.zero_grad(set_to_none=True)
        cuda.synchronize()
        step["after_zero_grad"] = cuda.memory_allocated() - base
        step["peak_allocated"] = cuda.max_memory_allocated() - base
        step["peak_reserved"] = cuda.max_memory_reserved()
        steps.append(step)
    state_dtypes = sorted({str(v.dtype) for s in opt.state.values() for v in s.values()
                           if torch.is_tensor(v) and v.dim() > 0})
    result = {"variant": variant, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(),
              "parameters": sum(p.numel() for p in model.parameters()),
              "after_shard": after_shard, "accumulated_grad_dtype": accumulated_dtype,
              "optimizer_state_dtypes": state_dtypes, "steps": steps}
    with open(os.path.join(out, f"fsdp2_accumulation_{variant}.json"), "w") as f:
        json.dump(result, f, indent=1)
    s = steps[-1]
    print(f"{variant:14s} peak allocated {s['peak_allocated'] / 1e9:7.3f} GB reserved "
          f"{s['peak_reserved'] / 1e9:7.3f} GB after zero_grad {s['after_zero_grad'] / 1e9:7.3f}"
          f" acc {accumulated_dtype} states {state_dtypes}")
    dist.destroy_process_group()


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp2_probe import run_variants  # noqa: E402

    run_variants(__file__, VARIANTS, run)


if __name__ == "__main__":
    main()
