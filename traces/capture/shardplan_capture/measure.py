"""Measurement state of one step: per-module statistics, tensor provenance tags,
the module stack, the op counter (FLOPs, activation traffic, causal evidence) and the
tracker of tensors saved for backward."""

from __future__ import annotations

import weakref

import torch

from .aten_ops import (MASK_OPS, MATMUL_OPS, VIEW_OPS, attention_flops, bind_arguments,
                       is_attention_op, looks_causal, matmul_flops)
from .errors import brief


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


def flatten(x):
    """Tensors inside nested tuples/lists/dicts, in order."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from flatten(y)


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
            self.causal_cache[key] = (weakref.ref(t), looks_causal(t))
        ref, value = self.causal_cache[key]
        return value if ref() is t else looks_causal(t)

    def on_op(self, func, args, kwargs, out):
        schema = getattr(func, "_schema", None)
        if schema is None:
            return  # a higher-order op; its inner ops are dispatched on their own
        name = schema.name
        name = name[6:] if name.startswith("aten::") else name
        inputs = list(flatten(args)) + list(flatten(kwargs or {}))
        outputs = list(flatten(out))
        in_tags = [self.tags.get(t) for t in inputs]
        self._propagate(name, inputs, in_tags, outputs)
        stats = self.rec.innermost()
        if stats is None:
            return  # outside the model (inputs, loss)
        if name in MATMUL_OPS or is_attention_op(name):
            try:
                self._count_matmul(func, name, args, kwargs, out, stats)
            except Exception as exc:  # an unfamiliar overload must not fail the capture
                note = f"FLOPs of aten::{name} not counted ({brief(exc)})"
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
        bound = bind_arguments(func, args, kwargs)
        if is_attention_op(name):
            flops, causal, mask = attention_flops(name, bound)
            stats.ctx_flops += flops
            if causal or (isinstance(mask, torch.Tensor) and (
                    self.tags.get(mask) == "tri" or (self.real and self._mask_is_causal(mask)))):
                stats.causal = True
            return
        result = out[0] if isinstance(out, (tuple, list)) else out
        flops, operands = matmul_flops(name, bound, result)
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


def activation_dtype_of(model):
    """The dominant floating parameter dtype: what 'elements' are counted in."""
    counts = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.get) if counts else torch.float32
