"""Building the user's model: from --module or --file, with --args/--kwargs, and on
the meta device without allocating memory."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys

import torch
from torch import nn

from .errors import CaptureError


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
