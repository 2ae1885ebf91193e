"""Running a step: the loss, forward and backward hooks, the measured analysis step
and the timed second step."""

from __future__ import annotations

import inspect
import time

import torch
from torch import nn

from .errors import CaptureError
from .measure import OpCounter, Recorder, SavedTracker, Tags, flatten


def _supports_kwargs_hooks():
    return "with_kwargs" in inspect.signature(nn.Module.register_forward_pre_hook).parameters


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
    first = next((t for t in flatten(values) if t.is_floating_point()), None)
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
        for t in list(flatten(args)) + list(flatten(kwargs or {})):
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
        for t in flatten(out):
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
