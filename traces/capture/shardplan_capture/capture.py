"""One capture from parsed arguments to the model file: build the model and its
inputs, run the measured (and timed) steps, assemble the explicit model and write it."""

from __future__ import annotations

import os
import sys

import torch
from torch import nn

from .errors import PROG, CaptureError, brief
from .inputs import batch_and_seq, make_inputs, parse_input_spec
from .loading import build_model
from .measure import activation_dtype_of
from .model_file import build_tree, capture_record, write_atomically
from .step import analysis_step, timing_step
from .units import count_units, default_units


def capture(args):
    warnings = []
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise CaptureError("-o", f"directory '{out_dir}' does not exist")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CaptureError("--device", "cuda requested but torch.cuda.is_available() is False")
    for name in ("batch", "seq"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise CaptureError(f"--{name}", f"must be positive, got {value}")
    if args.input:  # check specs before the (maybe slow) model build
        for spec in args.input:
            parse_input_spec(spec)
    torch.manual_seed(args.seed)
    model, example_inputs = build_model(args, warnings)
    model.train()
    inputs, kwargs, specs = make_inputs(args, model, example_inputs, warnings)
    batch, seq = batch_and_seq(args, inputs, kwargs)
    tokens = batch * seq
    act_dtype = activation_dtype_of(model)
    model_dims = {int(d) for p in model.parameters() for d in p.shape}
    if seq in model_dims:
        warnings.append(f"seq {seq} equals a parameter dimension, so [.., seq, seq] saved "
                        "tensors (counted as context-scaled) may be confused with others; "
                        "a --seq unlike any model size is safer")

    rec, _, failure = analysis_step(model, inputs, kwargs, args, True, act_dtype, seq)
    full_backward = True
    if failure is not None:
        # Full backward hooks wrap module inputs and outputs, which some models (in-place
        # updates of a module's output) reject; parameter hooks never interfere.
        first_failure = failure
        rec, _, failure = analysis_step(model, inputs, kwargs, args, False, act_dtype, seq)
        full_backward = False
        if failure is None:
            warnings.append(f"full backward hooks failed ({brief(first_failure[1])}); "
                            "backward order comes from parameter gradient hooks")
    if failure is not None:
        phase, exc = failure
        if phase == "forward":
            arg = "--input" if args.input else ("--module" if args.module else "--file")
            raise CaptureError(arg, f"forward of the model failed: {type(exc).__name__}: {exc}")
        if args.device != "meta":
            raise CaptureError("--loss", f"backward failed: {type(exc).__name__}: {exc}")
        warnings.append(f"backward failed on meta ({brief(exc)}); forward data recorded, "
                        "backward order is the reverse of forward order")
        backward_source = "reverse_forward_order"
    else:
        backward_source = ("full_backward_hooks+parameter_grad_hooks" if full_backward
                           else "parameter_grad_hooks")
    warnings.extend(rec.warnings)

    timed = args.device != "meta" and not args.no_timing
    if timed:
        try:
            timing_step(model, inputs, kwargs, args, full_backward, rec)
        except Exception as exc:  # timings are a bonus; the model file stands without them
            warnings.append(f"timing step failed ({brief(exc)}); no durations")
            timed = False

    root, order = build_tree(model, rec, tokens, seq, warnings)
    units = args.units if args.units else default_units(model)
    if not units:
        warnings.append("no repeated block list found; default_unit_modules is empty "
                        "(give --units)")
    embedding = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    document = {
        "name": args.name or type(model).__name__.lower(),
        "family": "explicit",
        "source": f"captured from {_source_text(args)} with PyTorch {torch.__version__} "
                  f"by {PROG}",
        "default_unit_modules": units,
        "hidden_size": int(embedding.embedding_dim) if embedding is not None else 0,
        "num_layers": count_units(order, units) if units else 0,
        "vocab_size": int(embedding.num_embeddings) if embedding is not None else 0,
        "max_seq_len": 0,
        "root": root,
    }
    document["capture"] = capture_record(args, model, rec, batch, seq, tokens, specs,
                                         backward_source, warnings, timed)
    write_atomically(args.output, document)
    params = sum(p.numel() for p in model.parameters())
    # With --plan, stdout is the plan's JSON alone.
    print(f"{PROG}: wrote {args.output}: {len(order)} modules, {params} parameters, "
          f"{document['num_layers']} units ({', '.join(units) or 'none'}), "
          f"{tokens} tokens per step", file=sys.stderr if args.plan else sys.stdout)
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    return document


def _source_text(args):
    if args.module:
        return f"--module {args.module}"
    return f"--file {os.path.basename(args.file)} (builder {args.builder})"
