"""The model file: shardplan dtypes, per-module costs, the module tree in execution
order, the "capture" record, and writing the file atomically."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

import torch
from torch import nn

from .errors import PROG, CaptureError


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
