"""The sample batch: tensors from --input specs or the file's example_inputs(batch,
seq), and the batch size and sequence length read from them."""

from __future__ import annotations

import torch
from torch import nn

from .errors import CaptureError

DTYPES = {
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
}


def parse_input_spec(text):
    """'int64:2x128:32000' -> (torch dtype, [2, 128], 32000 or None)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise CaptureError("--input", f"'{text}' must be DTYPE:DIMS[:HIGH], e.g. int64:2x128:32000")
    if parts[0] not in DTYPES:
        raise CaptureError("--input", f"'{text}': unknown dtype '{parts[0]}' "
                           f"(valid: {', '.join(sorted(DTYPES))})")
    dtype = getattr(torch, DTYPES[parts[0]])
    try:
        dims = [int(d) for d in parts[1].split("x")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        raise CaptureError("--input", f"'{text}': DIMS must be positive integers joined by "
                           "'x', e.g. 2x128")
    high = None
    if len(parts) == 3:
        if dtype.is_floating_point or dtype == torch.bool:
            raise CaptureError("--input", f"'{text}': HIGH applies to integer dtypes only")
        try:
            high = int(parts[2])
        except ValueError:
            high = 0
        if high <= 0:
            raise CaptureError("--input", f"'{text}': HIGH must be a positive integer")
    return dtype, dims, high


def _default_high(model):
    # Token ids must index every embedding table, so stay below the smallest one.
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else 2


def make_inputs(args, model, example_inputs, warnings):
    """The positional and keyword inputs of forward, and their spec strings."""
    device = args.device
    if args.input:
        parsed = [parse_input_spec(s) for s in args.input]
        tensors = []
        for dtype, dims, high in parsed:
            if device == "meta":
                tensors.append(torch.empty(dims, dtype=dtype, device="meta"))
            elif dtype.is_floating_point:
                tensors.append(torch.randn(dims, dtype=dtype, device=device))
            elif dtype == torch.bool:
                tensors.append(torch.rand(dims, device=device) < 0.5)
            else:
                hi = high if high is not None else _default_high(model)
                tensors.append(torch.randint(0, hi, dims, dtype=dtype, device=device))
        return tuple(tensors), {}, list(args.input)
    if example_inputs is None:
        raise CaptureError("--input", "no inputs: give --input DTYPE:DIMS[:HIGH] "
                           "(or define example_inputs(batch, seq) in --file)")
    batch = args.batch or 2
    seq = args.seq or 64
    try:
        produced = example_inputs(batch, seq)
    except Exception as exc:
        raise CaptureError("--file", f"example_inputs({batch}, {seq}) failed: "
                           f"{type(exc).__name__}: {exc}")
    kwargs = {}
    if isinstance(produced, dict):
        kwargs, produced = produced, ()
    elif isinstance(produced, torch.Tensor):
        produced = (produced,)
    produced = tuple(_to_device(x, device) for x in produced)
    kwargs = {k: _to_device(v, device) for k, v in kwargs.items()}
    specs = [_spec_of(t) for t in list(produced) + list(kwargs.values())
             if isinstance(t, torch.Tensor)]
    if args.batch is None or args.seq is None:
        warnings.append(f"example_inputs called with batch={batch}, seq={seq}")
    return produced, kwargs, specs


def _to_device(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _spec_of(t):
    name = str(t.dtype).replace("torch.", "")
    return f"{name}:{'x'.join(str(d) for d in t.shape)}"


def batch_and_seq(args, inputs, kwargs):
    if args.batch and args.seq:
        return args.batch, args.seq
    first = next((t for t in list(inputs) + list(kwargs.values())
                  if isinstance(t, torch.Tensor)), None)
    if first is None or first.dim() < 2:
        raise CaptureError("--batch", "cannot tell batch and sequence length from the first "
                           "input (it needs 2 leading dims); give --batch and --seq")
    b, s = (first.shape[1], first.shape[0]) if args.seq_first else (first.shape[0], first.shape[1])
    return args.batch or int(b), args.seq or int(s)
