#!/usr/bin/env python3
"""Writes a large Kineto trace by repeating a real one's steps end to end.

Usage: make_repeated_trace.py SOURCE.json.gz COPIES OUT.json[.gz]

Each copy shifts every time stamp by the source's span (plus 1 ms), renumbers the
ProfilerStep#k ranges so every step keeps its own name, and offsets the ids that link
events (correlation, fwdbwd flow ids, autograd sequence numbers) so that no two copies
share one. The importer then sees COPIES times the steps of the source, each as the source
had it. Used for the memory and time figures of tests/bench/trace_import_bench.cc; the trace
itself is not kept in the repository (22 copies of the DHEN trace are 1.06 GB).
"""
import gzip
import json
import sys


def main():
    source, copies, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    times = [float(e["ts"]) + float(e.get("dur", 0)) for e in events if "ts" in e]
    begin = min(float(e["ts"]) for e in events if "ts" in e)
    span = max(times) - begin + 1000.0
    steps = sorted({int(e["name"].split("#")[1]) for e in events
                    if str(e.get("name", "")).startswith("ProfilerStep#")})
    step_count = len(steps)

    def ids(e, key, shift):
        args = e.get("args")
        if isinstance(args, dict) and isinstance(args.get(key), int) and args[key] >= 0:
            args[key] += shift

    opener = gzip.open if out_path.endswith(".gz") else open
    with opener(out_path, "wt") as out:
        head = json.dumps(doc)[:-1]
        out.write(head + (", " if doc else "") + '"traceEvents": [\n')
        first = True
        for copy in range(copies):
            shift = copy * span
            id_shift = copy * 10_000_000
            for original in events:
                e = json.loads(json.dumps(original)) if copy else original
                if "ts" in e:
                    e["ts"] = float(e["ts"]) + shift
                name = str(e.get("name", ""))
                if name.startswith("ProfilerStep#"):
                    k = int(name.split("#")[1])
                    e["name"] = "ProfilerStep#%d" % (k + copy * step_count)
                ids(e, "correlation", id_shift)
                ids(e, "External id", id_shift)
                ids(e, "Sequence number", id_shift)
                if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                    e["id"] += id_shift
                out.write(("" if first else ",\n") + json.dumps(e))
                first = False
        out.write("\n]}\n")


if __name__ == "__main__":
    main()
