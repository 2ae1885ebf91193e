"""shardplan_capture: measure a PyTorch model and write it as a shardplan model file.

Runs one forward + backward step of a user's ``nn.Module`` on a sample batch and writes
the module tree in shardplan's "explicit" form (docs/formats.md), so that
``shardplan describe|plan|simulate|sweep --model captured.json`` plan the real model.
Needs only the standard library and torch (1.13 or 2.x).

Usage::

    python3 traces/capture/shardplan-capture --module mypkg.models:GPT \
        --kwargs '{"n_layer": 12}' --input int64:4x1024:50257 -o gpt.json
    python3 traces/capture/shardplan-capture --file my_model.py --device meta \
        --input int64:1x4096:32000 -o big.json
    PYTHONPATH=traces/capture python3 -m shardplan_capture --file my_model.py -o m.json
    PYTHONPATH=build/python python3 traces/capture/shardplan-capture --file my_model.py \
        --input int64:2x128:32000 -o m.json --plan --cluster dgx-h100 --gpus 8 --set tp=2

The model comes from ``--module PKG.MOD:ATTR`` (a class or factory, called with
``--args``/``--kwargs`` JSON) or ``--file PATH.py`` with ``--builder NAME`` (default
``build_model``). Inputs come from ``--input DTYPE:DIMS[:HIGH]`` (repeatable; e.g.
``int64:2x128:32000`` or ``float32:2x128x64``) or from ``example_inputs(batch, seq)``
defined in the ``--file`` (a tuple of tensors, or a dict of keyword inputs). Per-token
costs divide by tokens = batch x seq, read from the first input's leading dims
([B, S, ...], or [S, B, ...] with ``--seq-first``) unless ``--batch``/``--seq`` say.

What is measured, per module, for its OWN work (while it is the innermost active module),
in forward only:

* FLOPs of matmul-family aten ops (a TorchDispatchMode). A matmul with an operand
  derived from a parameter is per-token work (``fwd_flops_per_token``); one between two
  activations (attention scores and values, fused attention kernels) grows with the
  context (``fwd_flops_per_token_ctx`` = FLOPs / (tokens x seq), counted as if not
  causal). Matmuls with no activation operand (weight preparation) do not scale with
  tokens and are not counted.
* ``causal``, best effort, from evidence in the module doing the attention or in its
  submodules: an attention op called with ``is_causal``; a mask built in forward by ``triu``/``tril``
  meeting an activation; or, on real devices only, a square mask (a buffer, or the
  operand of add/masked_fill/where) whose content is triangular.
* ``fwd_io_elements_per_token``: activation elements read and written by non-view,
  non-matmul ops.
* Tensors saved for backward (autograd saved_tensors_hooks), excluding parameters and
  their views and casts, each piece of memory counted once, where first saved. Those of
  the activation dtype (the dominant parameter dtype) are ``elements``, which shardplan
  prices in the config's ``param_dtype``; others (masks, ids, fp32 statistics) are
  ``fixed_bytes``. Tensors ending in [seq, seq] (attention probabilities, masks) go to
  ``saved_per_token_ctx``; pick a ``--seq`` unlike any model dimension.
* ``input_per_token``: the module's forward inputs (what full recompute keeps).

The tree is ordered by execution (first forward call), because shardplan takes FSDP
units in tree order; modules never called follow their siblings. The "capture" block
records forward and backward module order (full backward hooks plus parameter gradient
hooks, or parameter hooks alone when a model rejects full backward hooks), calls, saved
bytes and, on cpu/cuda, per-module times from a second step. ``--device meta`` builds
and runs the model without allocating memory: shapes, order, FLOPs and saved sizes, no
durations; if backward fails on meta, the backward order is the reverse forward order.

``--plan`` (with ``--cluster``, ``--gpus``, ``--nodes``, ``--set KEY=VALUE``) then plans the
written model in-process with shardplan's Python module (``import shardplan``: build/python
after a build, or ``cmake --install``) and prints ``shardplan plan --json``'s summary on
stdout.

Errors print ``shardplan_capture: error: ARG: ...`` on stderr, exit with status 2 and
leave no output file.
"""

from .cli import main

__all__ = ["main"]
