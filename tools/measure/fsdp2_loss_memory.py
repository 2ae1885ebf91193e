#!/usr/bin/env python3
"""FSDP2's peak memory with each way PyTorch jobs run the cross entropy, on one GPU, for
shardplan's loss_kernel: the 4-layer Llama 3 8B of fsdp2_probe.py under fully_shard with
torchtitan's mixed precision (fp32 parameters, bf16 compute, fp32 reduce), fused AdamW,
one micro-batch of 8192 tokens, eager model, three steps (the third is the steady state).

Variants (one process each):
  upcast    F.cross_entropy(pred.float()) in eager PyTorch (torchtitan before April 2025)
  native    F.cross_entropy(pred) on the bf16 logits (KempnerForge)
  compiled  torch.compile of torchtitan's loss function (torchtitan with compile on since
            April 2025: torchtitan/components/loss.py build_cross_entropy_loss)

Usage: python3 tools/measure/fsdp2_loss_memory.py OUT_DIR [VARIANT]
"""
import json
import os
import sys

VARIANTS = ("upcast", "native", "compiled")


def run(variant, out):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp2_probe import VOCAB, Model, shard_like_torchtitan, single_rank  # noqa: E402

    single_rank(29550 + VARIANTS.index(variant))
    cuda = torch.cuda
    torch.manual_seed(0)
    base = cuda.memory_allocated()
    model = shard_like_torchtitan(Model(4).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def torchtitan_loss(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    if variant == "upcast":
        loss_fn = torchtitan_loss
    elif variant == "native":
        def loss_fn(pred, labels):
            return F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1))
    else:
        loss_fn = torch.compile(torchtitan_loss)
    tokens = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    labels = torch.randint(0, VOCAB, (1, 8192), device="cuda")
    steps = []
    for _ in range(3):
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        pred = model(tokens)
        loss = loss_fn(pred, labels)
        del pred
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        cuda.synchronize()
        steps.append({"peak_allocated": cuda.max_memory_allocated() - base,
                      "peak_reserved": cuda.max_memory_reserved(),
                      "after_zero_grad": cuda.memory_allocated() - base})
    result = {"variant": variant, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "steps": steps}
    with open(os.path.join(out, f"fsdp2_loss_{variant}.json"), "w") as f:
        json.dump(result, f, indent=1)
    s = steps[-1]
    print(f"{variant:9s} peak allocated {s['peak_allocated'] / 1e9:7.3f} GB reserved "
          f"{s['peak_reserved'] / 1e9:7.3f} GB")
    dist.destroy_process_group()


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp2_probe import run_variants  # noqa: E402

    run_variants(__file__, VARIANTS, run)


if __name__ == "__main__":
    main()
