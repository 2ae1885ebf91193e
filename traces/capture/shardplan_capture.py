#!/usr/bin/env python3
"""shardplan_capture: measure a PyTorch model and write it as a shardplan model file.

Runs one forward + backward step of a user's ``nn.Module`` on a sample batch and writes
the module tree in shardplan's "explicit" form (docs/formats.md), so that
``shardplan describe|plan|simulate|sweep --model captured.json`` plan the real model.
Needs only the standard library and torch (1.13 or 2.x).

Usage::

    python3 traces/capture/shardplan_capture.py --module mypkg.models:GPT \
        --kwargs '{"n_layer": 12}' --input int64:4x1024:50257 -o gpt.json
    python3 traces/capture/shardplan_capture.py --file my_model.py --device meta \
        --input int64:1x4096:32000 -o big.json
    PYTHONPATH=traces/capture python3 -m shardplan_capture --file my_model.py -o m.json

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

Errors print ``shardplan_capture: error: ARG: ...`` on stderr, exit with status 2 and
leave no output file.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import time
import weakref

PROG = "shardplan_capture"
EXIT_ERROR = 2


class CaptureError(Exception):
    """A user-facing error: which argument is at fault, and why."""

    def __init__(self, arg, message):
        super().__init__(f"{arg}: {message}" if arg else message)


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # the tool is useless without torch; say how to get it
        raise CaptureError(None, f"cannot import torch ({exc}); install it with "
                           "'apt-get install python3-torch' or 'pip install torch'")
    return torch


torch = None  # imported in main(), so --help and argument errors work without torch
nn = None


# --------------------------------------------------------------------------- arguments

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Capture a PyTorch model's module tree, costs and execution order "
                    "as a shardplan 'explicit' model file.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--module", metavar="PKG.MOD:ATTR",
                     help="importable class or factory returning the nn.Module")
    src.add_argument("--file", metavar="PATH.py",
                     help="Python file defining a builder function (and optionally "
                          "example_inputs(batch, seq))")
    p.add_argument("--builder", default="build_model",
                   help="builder function in --file (default: build_model)")
    p.add_argument("--args", default="[]", metavar="JSON",
                   help="positional arguments for the class/builder, a JSON list")
    p.add_argument("--kwargs", default="{}", metavar="JSON",
                   help="keyword arguments for the class/builder, a JSON object")
    p.add_argument("--input", action="append", default=[], metavar="DTYPE:DIMS[:HIGH]",
                   help="an input tensor, e.g. int64:2x128:32000 (random ints in "
                        "[0, HIGH)) or float32:2x128x64; repeat for more inputs")
    p.add_argument("--batch", type=int, help="sequences in the sample batch")
    p.add_argument("--seq", type=int, help="tokens per sequence")
    p.add_argument("--seq-first", action="store_true",
                   help="inputs are [S, B, ...] instead of [B, S, ...]")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "meta"],
                   help="where to run (meta: shapes only, no memory; default cpu)")
    p.add_argument("--name", help="model name (default: class name, lowercased)")
    p.add_argument("--units", nargs="+", metavar="PATTERN",
                   help="FSDP unit module patterns (default: children of the largest "
                        "ModuleList/Sequential of repeated blocks, e.g. layers.*)")
    p.add_argument("--loss", default="sum", choices=["sum", "mean", "loss"],
                   help="scalar for backward: sum or mean of the first floating output "
                        "tensor (default sum), or 'loss': the output's .loss / a 0-d output")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-timing", action="store_true",
                   help="skip the timed second step on real devices")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="model JSON file to write")
    return p.parse_args(argv)


# ------------------------------------------------------------------------ loading

def _parse_json_arg(text, arg, kind):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaptureError(arg, f"not valid JSON ({exc})")
    if not isinstance(value, kind):
        raise CaptureError(arg, f"must be a JSON {'list' if kind is list else 'object'}")
    return value


def _load_from_module(spec):
    if ":" not in spec:
        raise CaptureError("--module", f"'{spec}' must be PKG.MOD:ATTR")
    mod_name, attr = spec.split(":", 1)
    # Like `python -m`, let the user's working directory provide packages.
    if os.getcwd() not in sys.path:
        sys.path.insert(1, os.getcwd())
    try:
        obj = importlib.import_module(mod_name)
    except Exception as exc:
        raise CaptureError("--module", f"cannot import '{mod_name}': {type(exc).__name__}: {exc}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CaptureError("--module", f"'{mod_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CaptureError("--module", f"'{spec}' is not a class or function")
    return obj, None


def _load_from_file(path, builder):
    if not os.path.isfile(path):
        raise CaptureError("--file", f"'{path}' is not a file")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)  # so the file can import its neighbours
    name = "_shardplan_capture_user_" + os.path.splitext(os.path.basename(path))[0]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CaptureError("--file", f"cannot load '{path}': {type(exc).__name__}: {exc}")
    fn = getattr(module, builder, None)
    if fn is None or not callable(fn):
        raise CaptureError("--builder", f"'{path}' defines no function '{builder}'")
    return fn, getattr(module, "example_inputs", None)


def _device_constructors():
    """Tensor factories that take device=, as torch.device's own context mode uses them."""
    names = ["empty", "empty_strided", "empty_permuted", "zeros", "ones", "full", "arange",
             "range", "linspace", "logspace", "eye", "rand", "randn", "randint", "randperm",
             "tensor", "as_tensor", "scalar_tensor", "tril_indices", "triu_indices",
             "bartlett_window", "blackman_window", "hamming_window", "hann_window",
             "kaiser_window", "asarray"]
    return {getattr(torch, n) for n in names if hasattr(torch, n)}


def _meta_context():
    """A context in which new tensors land on the meta device (no memory)."""
    device = torch.device("meta")
    if hasattr(device, "__enter__"):
        return device  # a context manager from PyTorch 2.0 on
    # PyTorch 1.13: inject device="meta" into factory calls with a function mode.
    from torch.overrides import TorchFunctionMode

    constructors = _device_constructors()

    class MetaFactories(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in constructors and kwargs.get("device") is None:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return MetaFactories()


def build_model(args, warnings):
    call_args = _parse_json_arg(args.args, "--args", list)
    call_kwargs = _parse_json_arg(args.kwargs, "--kwargs", dict)
    if args.module:
        factory, example_inputs = _load_from_module(args.module)
        arg = "--module"
    else:
        factory, example_inputs = _load_from_file(args.file, args.builder)
        arg = "--builder"
    context = _meta_context() if args.device == "meta" else contextlib.nullcontext()
    try:
        with context:
            model = factory(*call_args, **call_kwargs)
    except Exception as exc:
        raise CaptureError(arg, f"building the model failed: {type(exc).__name__}: {exc}")
    if not isinstance(model, nn.Module):
        raise CaptureError(arg, f"returned {type(model).__name__}, not a torch.nn.Module")
    if args.device == "meta":
        stray = [n for n, t in _tensors_of(model) if t.device.type != "meta"]
        if stray:
            warnings.append(f"{len(stray)} tensors were created off the meta device "
                            f"(e.g. {stray[0]}); moved to meta after allocation")
            model = model.to("meta")
    elif args.device == "cuda":
        model = model.to("cuda")
    return model, example_inputs


def _tensors_of(model):
    yield from model.named_parameters()
    yield from model.named_buffers()


# -------------------------------------------------------------------------- inputs

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


# ----------------------------------------------------------------- measurement state

class ModuleStats:
    """What one module did in the measured step; all sums over its calls."""

    def __init__(self, fqn, index):
        self.fqn = fqn
        self.index = index          # registration order (named_modules)
        self.calls = 0
        self.first_call = None      # sequence number of the first forward pre-hook
        self.param_flops = 0.0      # matmul with a parameter-derived operand
        self.other_flops = 0.0      # matmul of an activation with a constant
        self.ctx_flops = 0.0        # matmul between two activations
        self.io_elements = 0.0
        self.causal = False
        self.saved_elements = 0.0
        self.saved_fixed_bytes = 0.0
        self.saved_bytes = 0.0
        self.saved_ctx_elements = 0.0   # [.., seq, seq] tensors: grow with the context
        self.saved_ctx_fixed_bytes = 0.0
        self.input_elements = 0.0
        self.input_fixed_bytes = 0.0
        self.backward_done = None   # sequence number of its last backward event
        self.forward_seconds = 0.0
        self.backward_seconds = 0.0
        self.backward_timed = False
        self.causal_subtree = False    # set when the tree is built
        self.saved_bytes_subtree = 0.0
        self.backward_end = None       # last backward event in its subtree


def _flatten(x):
    """Tensors inside nested tuples/lists/dicts, in order."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)


class Tags:
    """Where a tensor came from: 'param' (parameters and tensors made only from them),
    'const' (buffers and factory outputs), 'tri' (triu/tril of constants: a causal mask);
    untagged tensors are activations. Keyed by object identity, which PyTorch preserves
    for a tensor while it lives (weakrefs guard against reused ids)."""

    def __init__(self):
        self._tags = {}

    def set(self, t, tag):
        if tag is None:
            self._tags.pop(id(t), None)
        else:
            self._tags[id(t)] = (weakref.ref(t), tag)

    def get(self, t):
        entry = self._tags.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        return None


VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "transpose_", "t",
    "t_", "permute", "expand", "expand_as", "slice", "select", "squeeze", "squeeze_",
    "unsqueeze", "unsqueeze_", "detach", "detach_", "alias", "split", "split_with_sizes",
    "unbind", "chunk", "as_strided", "narrow", "view_as", "unflatten", "lift_fresh",
    "diagonal", "unfold", "view_as_real", "view_as_complex", "_conj", "_neg_view",
    "real", "imag", "tensor_split", "movedim", "flatten", "_unsafe_split",
}
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
              "_scaled_mm", "_int_mm", "linear", "convolution", "_convolution",
              "_addmm_activation"}


# Ops that apply an attention mask; a mask made from the inputs (padding masks) is an
# activation, so on real devices its content is checked too.
MASK_OPS = {"add", "add_", "sub", "masked_fill", "masked_fill_", "where"}


def _is_attention_op(name):
    return (("scaled_dot_product" in name and "attention" in name)
            or name in ("_flash_attention_forward", "_efficient_attention_forward")) \
        and "backward" not in name


def _bind(func, args, kwargs):
    """Arguments by schema name, so variants with different positions read alike."""
    bound = dict(kwargs or {})
    for schema_arg, value in zip(func._schema.arguments, args):
        bound[schema_arg.name] = value
    return bound


def _matmul_flops(name, bound, out):
    """(FLOPs, the two multiplied operands) of a matmul-family op."""
    if name in ("convolution", "_convolution"):
        x, w = bound["input"], bound["weight"]
        # Every output (or, transposed, input) element costs one dot over the kernel.
        n = x.numel() if bound.get("transposed") else out.numel()
        return 2.0 * n * (w.numel() / max(w.shape[0], 1)), (x, w)
    if name == "linear":
        x, w = bound["input"], bound["weight"]
        return 2.0 * out.numel() * w.shape[-1], (x, w)
    if name in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
        a, b = bound.get("mat1", bound.get("batch1")), bound.get("mat2", bound.get("batch2"))
    elif name in ("mv", "addmv"):
        a, b = bound.get("mat", bound.get("self")), bound["vec"]
        return 2.0 * a.numel(), (a, b)
    elif name in ("dot", "vdot"):
        a, b = bound["self"], bound.get("tensor", bound.get("other"))
        return 2.0 * a.numel(), (a, b)
    else:  # mm, bmm, _scaled_mm, _int_mm: a [..., m, k] @ b [..., k, n]
        a, b = bound["self"], bound.get("mat2")
    return 2.0 * a.numel() * b.shape[-1], (a, b)


def _attention_flops(name, bound):
    q, k, v = bound["query"], bound["key"], bound["value"]
    e, ev = q.shape[-1], v.shape[-1]
    # SDPA ops take [B, H, L, E]; the raw flash/efficient kernels [B, L, H, E].
    s = k.shape[1] if name.startswith("_flash") or name.startswith("_efficient") else k.shape[-2]
    rows = q.numel() / e  # B·H·L
    causal = bool(bound.get("is_causal", False)) or bound.get("custom_mask_type", 0) in (1, 2)
    mask = bound.get("attn_mask", bound.get("attn_bias", bound.get("bias")))
    return 2.0 * rows * s * (e + ev), causal, mask


def _looks_causal(mask):
    """True if a square mask (bool keep/drop or additive float) is triangular-causal."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or mask.device.type == "meta":
        return False
    n = mask.shape[-1]
    if mask.shape[-2] != n or n < 2 or mask.numel() > (1 << 26):
        return False
    if not (mask.dtype == torch.bool or mask.dtype.is_floating_point):
        return False
    with torch.no_grad():
        m = mask.reshape(-1, n, n)[0]
        above = torch.ones(n, n, dtype=torch.bool, device=m.device).triu(1)
        dropped = m if m.dtype == torch.bool else (m < -1e3)
        # A bool mask may mean "keep" (SDPA) or "drop" (masked_fill): accept both.
        return bool(torch.equal(dropped, above)) or (
            m.dtype == torch.bool and bool(torch.equal(~m, above)))


class Recorder:
    """Module hooks, the module stack, and per-module statistics of one step."""

    def __init__(self, model):
        self.model = model
        self.stats = {}
        for index, (fqn, module) in enumerate(model.named_modules()):
            self.stats[id(module)] = ModuleStats(fqn, index)
        self.stack = []
        self.seq = 0
        self.bwd_seq = 0
        self.activation_dtype = None
        self.handles = []
        self.warnings = []  # about this step only

    def innermost(self):
        return self.stats[id(self.stack[-1])] if self.stack else None

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _supports_kwargs_hooks():
    return "with_kwargs" in inspect.signature(nn.Module.register_forward_pre_hook).parameters


class OpCounter:
    """Counts FLOPs and activation traffic per innermost module during forward."""

    def __init__(self, recorder, tags, real_device, warnings):
        self.rec = recorder
        self.tags = tags
        self.real = real_device
        self.warnings = warnings
        self.causal_cache = {}

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                counter.on_op(func, args, kwargs, out)
                return out

        return Mode()

    def _mask_is_causal(self, t):
        key = id(t)
        if key not in self.causal_cache:
            self.causal_cache[key] = (weakref.ref(t), _looks_causal(t))
        ref, value = self.causal_cache[key]
        return value if ref() is t else _looks_causal(t)

    def on_op(self, func, args, kwargs, out):
        schema = getattr(func, "_schema", None)
        if schema is None:
            return  # a higher-order op; its inner ops are dispatched on their own
        name = schema.name
        name = name[6:] if name.startswith("aten::") else name
        inputs = list(_flatten(args)) + list(_flatten(kwargs or {}))
        outputs = list(_flatten(out))
        in_tags = [self.tags.get(t) for t in inputs]
        self._propagate(name, inputs, in_tags, outputs)
        stats = self.rec.innermost()
        if stats is None:
            return  # outside the model (inputs, loss)
        if name in MATMUL_OPS or _is_attention_op(name):
            try:
                self._count_matmul(func, name, args, kwargs, out, stats)
            except Exception as exc:  # an unfamiliar overload must not fail the capture
                note = f"FLOPs of aten::{name} not counted ({_brief(exc)})"
                if note not in self.warnings:
                    self.warnings.append(note)
            return
        activations = [t for t, tag in zip(inputs, in_tags) if tag is None]
        if activations and not stats.causal:
            stats.causal = "tri" in in_tags or (self.real and any(
                (tag == "const" or (tag is None and name in MASK_OPS)) and self._mask_is_causal(t)
                for t, tag in zip(inputs, in_tags)))
        if name in VIEW_OPS or not outputs:
            return
        if all(self.tags.get(t) is not None for t in outputs):
            return  # weight casts and mask building: per step, not per token
        stats.io_elements += sum(t.numel() for t in activations) + \
            sum(t.numel() for t in outputs)

    def _propagate(self, name, inputs, in_tags, outputs):
        if not inputs:
            tag = "const"  # a factory
        elif name in ("triu", "tril", "triu_", "tril_") and all(
                t in ("const", "tri") for t in in_tags):
            tag = "tri"
        elif any(t is None for t in in_tags):
            tag = None
        elif all(t == "param" for t in in_tags) or ("param" in in_tags and "tri" not in in_tags):
            tag = "param"
        elif "tri" in in_tags:
            tag = "tri"
        else:
            tag = "const"
        for t in outputs:
            self.tags.set(t, tag)  # also re-tags in-place outputs

    def _count_matmul(self, func, name, args, kwargs, out, stats):
        bound = _bind(func, args, kwargs)
        if _is_attention_op(name):
            flops, causal, mask = _attention_flops(name, bound)
            stats.ctx_flops += flops
            if causal or (isinstance(mask, torch.Tensor) and (
                    self.tags.get(mask) == "tri" or (self.real and self._mask_is_causal(mask)))):
                stats.causal = True
            return
        result = out[0] if isinstance(out, (tuple, list)) else out
        flops, operands = _matmul_flops(name, bound, result)
        kinds = [self.tags.get(t) for t in operands]
        if all(k is not None for k in kinds):
            return  # no activation operand: weight preparation, not per-token work
        if "param" in kinds:
            stats.param_flops += flops
        elif all(k is None for k in kinds):
            stats.ctx_flops += flops
        else:
            stats.other_flops += flops


class SavedTracker:
    """Tensors autograd saves for backward during forward, excluding parameters."""

    def __init__(self, recorder, tags, params, real_device, seq):
        self.rec = recorder
        self.seq = seq
        self.tags = tags
        self.params = params      # id -> parameter
        self.real = real_device
        self.param_storages = set()
        if real_device:
            self.param_storages = {_storage_ptr(p) for p in params.values()}
        self.seen = set()
        self.keep = []            # meta: identity keys must outlive the step

    def _is_param(self, t):
        if id(t) in self.params or self.tags.get(t) == "param":
            return True
        base = getattr(t, "_base", None)
        if base is not None and id(base) in self.params:
            return True
        return self.real and _storage_ptr(t) in self.param_storages

    def _key(self, t):
        # The same memory, even through a reshaped or transposed view, counts once.
        if self.real:
            ptr = _storage_ptr(t)
            if ptr is not None:
                return (ptr, t.storage_offset(), t.numel(), t.dtype)
        root = t
        while getattr(root, "_base", None) is not None:
            root = root._base
        self.keep.append(root)
        return (id(root), t.storage_offset(), t.numel(), t.dtype)

    def pack(self, t):
        stats = self.rec.innermost()
        if stats is not None and isinstance(t, torch.Tensor) and not self._is_param(t):
            key = self._key(t)
            if key not in self.seen:
                self.seen.add(key)
                nbytes = t.numel() * t.element_size()
                stats.saved_bytes += nbytes
                # Attention probabilities and masks are [..., seq, seq]: they scale with
                # the context too, which one capture can only tell by shape.
                ctx = self.seq > 1 and t.dim() >= 2 and t.shape[-1] == t.shape[-2] == self.seq
                if t.dtype == self.rec.activation_dtype:
                    if ctx:
                        stats.saved_ctx_elements += t.numel()
                    else:
                        stats.saved_elements += t.numel()
                elif ctx:
                    stats.saved_ctx_fixed_bytes += nbytes
                else:
                    stats.saved_fixed_bytes += nbytes
        return t

    @staticmethod
    def unpack(t):
        return t


def _storage_ptr(t):
    try:
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        return storage.data_ptr()
    except Exception:  # sparse, nested or subclass tensors have no plain storage
        return None


# ------------------------------------------------------------------- running a step

def _loss_of(output, how):
    if how == "loss":
        loss = getattr(output, "loss", None)
        if loss is None and isinstance(output, dict):
            loss = output.get("loss")
        if loss is None and isinstance(output, torch.Tensor) and output.dim() == 0:
            loss = output
        if not isinstance(loss, torch.Tensor):
            raise CaptureError("--loss", "'loss' needs an output with a .loss tensor or a "
                               "0-d tensor output")
        return loss.float()
    values = output.values() if isinstance(output, dict) else \
        output.to_tuple() if hasattr(output, "to_tuple") else output
    first = next((t for t in _flatten(values) if t.is_floating_point()), None)
    if first is None:
        raise CaptureError("--loss", "the model's output holds no floating tensor")
    return first.float().sum() if how == "sum" else first.float().mean()


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _param_owners(model):
    owner = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owner.setdefault(id(p), module)
    return owner


def install_backward_hooks(model, full_backward, on_done, handles):
    """Calls on_done(module) each time part of a module's backward completes: its input
    gradients (a full backward hook) or the gradient of one of its own parameters. A
    module whose inputs need no gradient (an embedding, the root) gets its full backward
    hook as its backward starts, so the parameter hooks say when it really ends."""
    if full_backward:
        for module in model.modules():
            handles.append(module.register_full_backward_hook(
                lambda m, grad_input, grad_output: on_done(m)))
    owner = _param_owners(model)
    for p in model.parameters():
        if p.requires_grad and id(p) in owner:
            handles.append(p.register_hook(_param_done_hook(owner[id(p)], on_done)))


def _param_done_hook(module, on_done):
    def hook(grad):
        on_done(module)
    return hook


def install_analysis_hooks(rec, full_backward):
    """Forward order, calls and inputs of every module, and when its backward ends."""
    kwargs_hooks = _supports_kwargs_hooks()

    def pre(module, args, kwargs=None):
        stats = rec.stats[id(module)]
        stats.calls += 1
        if stats.first_call is None:
            stats.first_call = rec.seq
            rec.seq += 1
        seen = set()
        for t in list(_flatten(args)) + list(_flatten(kwargs or {})):
            if id(t) in seen:
                continue
            seen.add(id(t))
            if t.dtype == rec.activation_dtype:
                stats.input_elements += t.numel()
            else:
                stats.input_fixed_bytes += t.numel() * t.element_size()
        rec.stack.append(module)

    def post(module, args, *rest):
        rec.stack.pop()

    def backward_done(module):
        rec.stats[id(module)].backward_done = rec.bwd_seq  # the last event wins
        rec.bwd_seq += 1

    for module in rec.model.modules():
        if kwargs_hooks:
            rec.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            rec.handles.append(module.register_forward_pre_hook(pre))
        rec.handles.append(module.register_forward_hook(post))
    install_backward_hooks(rec.model, full_backward, backward_done, rec.handles)


def analysis_step(model, inputs, kwargs, args, full_backward, activation_dtype, seq):
    """One measured forward + backward. Returns (recorder, backward_ok, error or None)."""
    params = {id(p): p for p in model.parameters()}
    real = args.device != "meta"
    rec = Recorder(model)
    rec.activation_dtype = activation_dtype
    tags = Tags()
    for p in params.values():
        tags.set(p, "param")
    for b in model.buffers():
        tags.set(b, "const")
    counter = OpCounter(rec, tags, real, rec.warnings)
    saved = SavedTracker(rec, tags, params, real, seq)
    install_analysis_hooks(rec, full_backward)
    try:
        try:
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                with counter.mode():
                    output = model(*inputs, **kwargs)
        except CaptureError:
            raise
        except Exception as exc:
            return rec, False, ("forward", exc)
        loss = _loss_of(output, args.loss)
        if not loss.requires_grad:
            raise CaptureError("--loss", "the loss does not require grad (no trainable "
                               "parameter reaches the output)")
        try:
            loss.backward()
        except Exception as exc:
            return rec, False, ("backward", exc)
        return rec, True, None
    finally:
        rec.remove()
        for p in params.values():
            p.grad = None


def timing_step(model, inputs, kwargs, args, full_backward, rec):
    """A second, unobserved step timing each module (inclusive of its children). Backward
    spans from the first gradient reaching its outputs to its last input or parameter
    gradient."""
    starts = {}
    bwd_start = {}
    bwd_end = {}
    handles = []

    def pre(module, *unused):
        _sync(args.device)
        starts.setdefault(id(module), []).append(time.perf_counter())

    def post(module, inp, out):
        _sync(args.device)
        stats = rec.stats[id(module)]
        stats.forward_seconds += time.perf_counter() - starts[id(module)].pop()
        for t in _flatten(out):
            if t.requires_grad:
                t.register_hook(_backward_start_hook(module, bwd_start, args.device))

    def done(module):
        _sync(args.device)
        bwd_end[id(module)] = time.perf_counter()

    for module in model.modules():
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    install_backward_hooks(model, full_backward, done, handles)
    try:
        output = model(*inputs, **kwargs)
        _loss_of(output, args.loss).backward()
        for key, end in bwd_end.items():
            if key in bwd_start and key in rec.stats:
                rec.stats[key].backward_seconds = max(0.0, end - bwd_start[key])
                rec.stats[key].backward_timed = True
    finally:
        for h in handles:
            h.remove()
        for p in model.parameters():
            p.grad = None


def _backward_start_hook(module, bwd_start, device):
    def hook(grad):
        if id(module) not in bwd_start:
            _sync(device)
            bwd_start[id(module)] = time.perf_counter()
    return hook


# ---------------------------------------------------------------------- the model file

def shardplan_dtype(dtype, where, warnings):
    name = str(dtype).replace("torch.", "")
    table = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
             "float8_e4m3fn": "fp8_e4m3", "float8_e4m3fnuz": "fp8_e4m3",
             "float8_e5m2": "fp8_e5m2", "float8_e5m2fnuz": "fp8_e5m2"}
    if name in table:
        return table[name]
    if name == "float64":
        warnings.append(f"{where} is float64, written as fp32 (shardplan has no fp64)")
        return "fp32"
    raise CaptureError(None, f"{where} has dtype {name}, which shardplan cannot model "
                       "(floating parameters only)")


def activation_dtype_of(model):
    """The dominant floating parameter dtype: what 'elements' are counted in."""
    counts = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.get) if counts else torch.float32


def pattern_matches(pattern, name):
    """module_name_matches from models/module_pattern.cc: '*' within a segment, '**' across."""
    if not pattern:
        return not name
    if pattern.startswith("**"):
        return any(pattern_matches(pattern[2:], name[i:]) for i in range(len(name) + 1))
    if pattern[0] == "*":
        for i in range(len(name) + 1):
            if pattern_matches(pattern[1:], name[i:]):
                return True
            if i < len(name) and name[i] == ".":
                break
        return False
    return bool(name) and pattern[0] == name[0] and pattern_matches(pattern[1:], name[1:])


def default_units(model):
    """Children of the largest ModuleList/Sequential of repeated blocks, as 'fqn.*': one
    whose children of a single class (two or more) hold most of its parameters."""
    best, best_size = None, 0
    for fqn, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        by_type = {}
        for child in module.children():
            count, size = by_type.get(type(child), (0, 0))
            by_type[type(child)] = (count + 1, size + sum(p.numel() for p in child.parameters()))
        total = sum(p.numel() for p in module.parameters())
        repeated = max((size for count, size in by_type.values() if count >= 2), default=0)
        if total > best_size and repeated > 0 and 2 * repeated >= total:
            best, best_size = fqn, total
    if best is None:
        return []
    return [f"{best}.*" if best else "*"]


def count_units(tree_fqns_in_order, patterns):
    """Outermost modules matching a pattern, as match_modules counts them."""
    matched = []
    for fqn in tree_fqns_in_order:
        if fqn and any(pattern_matches(p, fqn) for p in patterns) and not any(
                fqn.startswith(m + ".") for m in matched):
            matched.append(fqn)
    return len(matched)


def _number(x):
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def module_cost(module, stats, tokens, seq):
    matmul = stats.param_flops + stats.other_flops
    if isinstance(module, nn.Embedding):
        kind = "embedding"
    elif matmul > 0 or stats.ctx_flops > 0:
        kind = "attention" if stats.ctx_flops > matmul else "gemm"
    elif stats.io_elements > 0:
        kind = "elementwise"
    else:
        kind = "none"
    cost = {
        "kind": kind,
        "fwd_flops_per_token": _number(matmul / tokens),
        "fwd_flops_per_token_ctx": _number(stats.ctx_flops / (tokens * seq)),
        "causal": bool(stats.causal_subtree) if stats.ctx_flops > 0 else False,
        "bwd_flops_factor": 2.0,
        "fwd_io_elements_per_token": _number(stats.io_elements / tokens),
        "saved_per_token": {"elements": _number(stats.saved_elements / tokens),
                            "fixed_bytes": _number(stats.saved_fixed_bytes / tokens)},
        "saved_per_token_ctx": {
            "elements": _number(stats.saved_ctx_elements / (tokens * seq)),
            "fixed_bytes": _number(stats.saved_ctx_fixed_bytes / (tokens * seq))},
        "input_per_token": {"elements": _number(stats.input_elements / tokens),
                            "fixed_bytes": _number(stats.input_fixed_bytes / tokens)},
    }
    return cost


def children_in_execution_order(model, rec, warnings):
    """id(module) -> [(local name, child)], siblings in the order they first run.

    Execution order is what shardplan's planner reads as tree order. Containers
    (ModuleList) are never called themselves: they run when their first child does.
    Shared submodules appear once, where named_modules() puts them."""
    children_of = {}
    start = {}  # first forward call in a module's subtree
    memo = {id(model)}

    def walk(module):
        kids = []
        calls = [rec.stats[id(module)].first_call]
        for local, child in module._modules.items():
            if child is None or id(child) in memo:
                continue
            memo.add(id(child))
            kids.append((local, child))
            calls.append(walk(child))
        kids.sort(key=lambda lc: (start[id(lc[1])] is None, start[id(lc[1])] or 0,
                                  rec.stats[id(lc[1])].index))
        children_of[id(module)] = kids
        called = [c for c in calls if c is not None]
        start[id(module)] = min(called) if called else None
        return start[id(module)]

    walk(model)
    unused = [rec.stats[id(m)].fqn for m in model.modules() if start.get(id(m)) is None]
    if unused:
        shown = ", ".join(unused[:8]) + (" ..." if len(unused) > 8 else "")
        warnings.append(f"{len(unused)} modules never called in forward (placed after their "
                        f"called siblings, with no cost of their own): {shown}")
    return children_of


def sum_subtrees(module, rec, children_of):
    """Causal evidence, saved bytes and backward end over each module's subtree."""
    stats = rec.stats[id(module)]
    # A mask may be applied in a submodule of the one doing the matmuls.
    stats.causal_subtree = stats.causal
    stats.saved_bytes_subtree = stats.saved_bytes
    ends = [stats.backward_done]
    for _, child in children_of[id(module)]:
        child_stats = sum_subtrees(child, rec, children_of)
        stats.causal_subtree |= child_stats.causal_subtree
        stats.saved_bytes_subtree += child_stats.saved_bytes_subtree
        ends.append(child_stats.backward_end)
    # A module's backward is over when its children's is.
    ends = [e for e in ends if e is not None]
    stats.backward_end = max(ends) if ends else None
    return stats


def module_node(module, local, rec, children_of, written, tokens, seq, warnings):
    """One module of the explicit tree, with its subtree. A parameter shared by several
    modules (tied weights) is written once, by its first owner in execution order."""
    stats = rec.stats[id(module)]
    node = {} if local is None else {"name": local}
    node["type"] = type(module).__name__
    params = []
    for pname, p in module.named_parameters(recurse=False):
        if id(p) in written:
            continue
        written.add(id(p))
        where = f"parameter '{stats.fqn + '.' if stats.fqn else ''}{pname}'"
        params.append({"name": pname, "shape": [int(d) for d in p.shape],
                       "dtype": shardplan_dtype(p.dtype, where, warnings),
                       "requires_grad": bool(p.requires_grad)})
    if params:
        node["parameters"] = params
    node["cost"] = module_cost(module, stats, tokens, seq)
    kids = [module_node(child, name, rec, children_of, written, tokens, seq, warnings)
            for name, child in children_of[id(module)]]
    if kids:
        node["children"] = kids
    return node


def build_tree(model, rec, tokens, seq, warnings):
    """The module tree in execution order, and its module names in tree order."""
    children_of = children_in_execution_order(model, rec, warnings)
    sum_subtrees(model, rec, children_of)
    root = module_node(model, None, rec, children_of, set(), tokens, seq, warnings)
    order = []

    def names(module):
        order.append(rec.stats[id(module)].fqn)
        for _, child in children_of[id(module)]:
            names(child)

    names(model)
    return root, order


def _depth(fqn):
    return fqn.count(".") + 1 if fqn else 0


def capture_record(args, model, rec, batch, seq, tokens, specs, backward_source,
                   warnings, timed):
    called = sorted((s for s in rec.stats.values() if s.first_call is not None),
                    key=lambda s: s.first_call)
    # On a tie (a parent ends with its last child) the child is listed first.
    finished = sorted((s for s in rec.stats.values() if s.backward_end is not None),
                      key=lambda s: (s.backward_end, -_depth(s.fqn)))
    if backward_source == "reverse_forward_order":
        backward = [s.fqn for s in reversed(called)]
    else:
        backward = [s.fqn for s in finished]
    modules = {}
    for stats in sorted(rec.stats.values(), key=lambda s: s.index):
        entry = {"calls": stats.calls, "saved_bytes": _number(stats.saved_bytes),
                 "saved_bytes_subtree": _number(stats.saved_bytes_subtree)}
        if timed and stats.calls:
            entry["forward_seconds"] = stats.forward_seconds
            if stats.backward_timed:
                entry["backward_seconds"] = stats.backward_seconds
        modules[stats.fqn] = entry
    record = {
        "version": 1,
        "tool": PROG,
        "torch_version": torch.__version__,
        "device": args.device,
        "inputs": specs,
        "batch": batch,
        "seq": seq,
        "tokens": tokens,
        "activation_dtype": str(rec.activation_dtype).replace("torch.", ""),
        "forward_order": [s.fqn for s in called],
        "backward_order": backward,
        "backward_order_source": backward_source,
        "modules": modules,
        "warnings": warnings,
    }
    if timed:
        record["timing"] = ("cuda time (synchronized) per module, inclusive of children"
                            if args.device == "cuda" else
                            "cpu wall time (time.perf_counter) per module, inclusive of "
                            "children")
    return record


def write_atomically(path, document):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1)
            f.write("\n")
        # mkstemp makes the file private (0600); give it the mode a plain open would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- main

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
            warnings.append(f"full backward hooks failed ({_brief(first_failure[1])}); "
                            "backward order comes from parameter gradient hooks")
    if failure is not None:
        phase, exc = failure
        if phase == "forward":
            arg = "--input" if args.input else ("--module" if args.module else "--file")
            raise CaptureError(arg, f"forward of the model failed: {type(exc).__name__}: {exc}")
        if args.device != "meta":
            raise CaptureError("--loss", f"backward failed: {type(exc).__name__}: {exc}")
        warnings.append(f"backward failed on meta ({_brief(exc)}); forward data recorded, "
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
            warnings.append(f"timing step failed ({_brief(exc)}); no durations")
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
    print(f"{PROG}: wrote {args.output}: {len(order)} modules, {params} parameters, "
          f"{document['num_layers']} units ({', '.join(units) or 'none'}), "
          f"{tokens} tokens per step")
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)


def _brief(exc):
    """An exception's type and first line, short enough for a warning."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(exc).__name__}: {text}"


def _source_text(args):
    if args.module:
        return f"--module {args.module}"
    return f"--file {os.path.basename(args.file)} (builder {args.builder})"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    global torch, nn
    try:
        torch = _import_torch()
        nn = torch.nn
        capture(args)
    except CaptureError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
