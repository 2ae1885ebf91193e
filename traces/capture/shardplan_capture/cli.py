"""The command line: its arguments, and main(), which parses them before importing torch
(so --help and argument errors work without it), runs the capture and turns a
CaptureError into a message and exit status 2."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from .errors import EXIT_ERROR, PROG, CaptureError
from .plan import check_plan_flags, import_shardplan, plan_captured


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
    plan = p.add_argument_group(
        "planning", "plan the captured model in-process with the shardplan Python module "
        "(PYTHONPATH=build/python after a build)")
    plan.add_argument("--plan", action="store_true",
                      help="then print the JSON summary `shardplan plan --json` gives for the "
                           "written model (the 'wrote' line goes to stderr)")
    plan.add_argument("--cluster", help="zoo cluster name or cluster JSON file")
    plan.add_argument("--gpus", type=int, help="GPUs in the job")
    plan.add_argument("--nodes", type=int, help="nodes in the job, instead of --gpus")
    plan.add_argument("--set", action="append", metavar="KEY=VALUE",
                      help="override a config field (repeatable)")
    return p.parse_args(argv)


def _import_torch():
    try:
        importlib.import_module("torch")
    except ImportError as exc:  # the tool is useless without torch; say how to get it
        raise CaptureError(None, f"cannot import torch ({exc}); install it with "
                           "'apt-get install python3-torch' or 'pip install torch'")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_plan_flags(args)
        shardplan = import_shardplan() if args.plan else None
        _import_torch()
        from .capture import capture  # its modules import torch: only once it is known to load
        document = capture(args)
        if shardplan is not None:
            print(json.dumps(plan_captured(shardplan, args, document), indent=2))
    except CaptureError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0
