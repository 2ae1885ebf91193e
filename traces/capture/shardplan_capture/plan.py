"""--plan: plan the captured model in-process with shardplan's Python module (python/ in
the repository), the same as ``shardplan plan --model FILE --json`` would."""

from __future__ import annotations

import glob
import importlib
import os
import sys

from .errors import CaptureError

# Flags that only mean something with --plan: (argparse dest, flag).
PLAN_FLAGS = [("cluster", "--cluster"), ("gpus", "--gpus"), ("nodes", "--nodes"),
              ("set", "--set")]


def check_plan_flags(args):
    for dest, flag in PLAN_FLAGS:
        if getattr(args, dest) is not None and not args.plan:
            raise CaptureError(flag, "only with --plan")


def _installed_module_dirs():
    """Where `cmake --install --prefix P` put the module, seen from the installed capture
    tool (P/lib/shardplan/capture): P/lib/python3*/dist-packages (cmake/install.cmake)."""
    capture_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    lib = os.path.dirname(os.path.dirname(capture_dir))
    return sorted(glob.glob(os.path.join(lib, "python3*", "dist-packages")))


def import_shardplan():
    """The shardplan module, checked before the (maybe long) capture."""
    try:
        return importlib.import_module("shardplan")
    except ImportError:
        pass
    # Installed under a prefix Python does not search: the module beside the tool.
    for folder in _installed_module_dirs():
        if folder not in sys.path:
            sys.path.append(folder)
    try:
        return importlib.import_module("shardplan")
    except ImportError as exc:
        raise CaptureError("--plan", f"cannot import the shardplan Python module ({exc}); "
                           "build it (ninja -C build) and run with PYTHONPATH=build/python, "
                           "or install it (cmake --install build)")


def plan_captured(shardplan, args, document):
    """plan's JSON summary of the captured model (a dict)."""
    request = {"model": document}
    for dest, _ in PLAN_FLAGS:
        if getattr(args, dest) is not None:
            request[dest] = getattr(args, dest)
    try:
        return shardplan.plan(request)
    except shardplan.Error as exc:
        raise CaptureError("--plan", f"{exc} (the model file {args.output} was written)")
