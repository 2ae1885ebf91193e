#!/usr/bin/env python3
"""shardplan's bad-input campaign: mutated inputs, flags and file-system faults, each run
through the real binary under a memory and a time limit, every outcome classified.

  python3 tools/campaign/campaign.py --cases 2000 --jobs 2 --out /tmp/campaign

Per input kind (models, clusters, configs, --set, plans, sweep spaces, step traces,
timelines, nccl-tests logs, buffer tables, Megatron, Bridge and torchtitan configs,
Kineto traces, probe files, flags, input files that are not files, outputs that cannot
be written), a case takes a seed from the committed corpora, mutates it and runs one
command that reads it, in a fresh folder, under an address-space limit (RLIMIT_AS) and a
wall-clock limit. classify.py sorts the outcome; every case that is not a clear error or
a sane result is kept under --out/repro/ as a folder with its files and a run.sh.
Case N depends only on (--seed, N): a run with more --jobs or fewer --kinds draws the same
cases for the same numbers. Python 3 standard library only. See docs/user-guide.md,
"Checking shardplan itself".
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import classify  # noqa: E402
import kinds  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The campaign's own faults that stop a run are not the binary's: SIGXFSZ past this file
# size marks an output running away (no output of an accepted input is near 1 GiB).
MAX_OUTPUT_FILE_BYTES = 2 << 30
# A sweep's --json lists every point: a space of 10^5 points prints tens of MB.
STDOUT_READ_BYTES = MAX_OUTPUT_FILE_BYTES
STDERR_READ_BYTES = 1 << 20
TEMPORARY = re.compile(r"(\.shardplan\.tmp$)|(^\..+\.[A-Za-z0-9]{6}\.tmp$)")


@dataclasses.dataclass
class Settings:
    binary: str
    seed: int
    time_limit: float
    memory_bytes: int
    out: str
    kinds: tuple
    work: str
    can_mknod: bool
    is_root: bool


_settings: Settings | None = None
_seeds: kinds.Seeds | None = None


# --- seeds the binary makes -----------------------------------------------------------------

def mpirun_prefix(ranks):
    prefix = ["mpirun", "--oversubscribe", "-q", "-np", str(ranks)]
    if os.geteuid() == 0:
        prefix.insert(1, "--allow-run-as-root")
    return prefix


def generate_seeds(binary, folder):
    """Stack configs the binary writes (--emit) and a CPU probe file: seeds for readers
    whose committed corpus is small. A failure leaves that seed out, with a note."""
    os.makedirs(folder, exist_ok=True)
    made = collections.defaultdict(list)

    def run(argv, ranks=0, output=None):
        cmd = (mpirun_prefix(ranks) if ranks else []) + [binary, *argv]
        try:
            p = subprocess.run(cmd, cwd=folder, capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"campaign: seed {' '.join(argv)}: timed out", file=sys.stderr)
            return None
        if p.returncode != 0:
            print(f"campaign: seed {' '.join(argv)}: exit {p.returncode}: "
                  f"{p.stderr.decode(errors='replace')[:200]}", file=sys.stderr)
            return None
        if output:
            with open(os.path.join(folder, output), "rb") as f:
                return f.read()
        return p.stdout

    for model, gpus in (("llama3-8b", "8"), ("mixtral-8x7b", "16"), ("tiny", "4")):
        text = run(["plan", "--model", model, "--gpus", gpus, "--emit", "megatron-bridge"])
        if text:
            made["bridge"].append(kinds.Seed(f"emit-bridge-{model}", text))
            made["bridge"].append(kinds.Seed(f"emit-bridge-{model}.json", bridge_as_json(text)))
        text = run(["plan", "--model", model, "--gpus", gpus, "--emit", "megatron-args"])
        if text:
            made["megatron"].append(kinds.Seed(f"emit-megatron-{model}", text))
    # torchtitan's flavours are Llama 3 and DeepSeek-V3 only.
    for model, tp in (("llama3-8b", "2"), ("llama3-70b", "8"), ("deepseek-v3-16b", "1")):
        text = run(["plan", "--model", model, "--gpus", "16", "--set", f"tp={tp}", "--emit",
                    "torchtitan"])
        if text:
            made["torchtitan"].append(kinds.Seed(f"emit-torchtitan-{model}", text))
    probe = run(["probe", "--backend", "cpu", "--max-bytes", "64K", "--iterations", "2", "-o",
                 "cpu-probe.json"], ranks=2, output="cpu-probe.json")
    if probe:
        made["probe"].append(kinds.Seed("cpu-probe.json", probe))
    return made


def bridge_as_json(text):
    """cfg.a.b = v lines as Bridge's JSON form ({"a": {"b": v}})."""
    document = {}
    for line in text.decode().splitlines():
        line = line.split("  #", 1)[0].strip()
        if not line.startswith("cfg.") or "=" not in line:
            continue
        path, value = (s.strip() for s in line.split("=", 1))
        value = {"True": "true", "False": "false", "None": "null"}.get(value, value)
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value.strip("'\"")
        node = document
        parts = path.split(".")[1:]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = parsed
    return json.dumps(document, indent=1).encode()


def check_bases(binary, seeds, folder):
    broken = []
    for n, (argv, files, ranks) in enumerate(kinds.base_commands(seeds)):
        run_dir = os.path.join(folder, str(n))
        os.makedirs(run_dir)
        for name, content in files.items():
            with open(os.path.join(run_dir, name), "wb") as f:
                f.write(content)
        cmd = (mpirun_prefix(ranks) if ranks else []) + [binary, *argv]
        try:
            p = subprocess.run(cmd, cwd=run_dir, capture_output=True, timeout=120)
            if p.returncode != 0:
                broken.append(f"{' '.join(argv)}: exit {p.returncode}: "
                              f"{p.stderr.decode(errors='replace').strip()[:200]}")
        except subprocess.TimeoutExpired:
            broken.append(f"{' '.join(argv)}: over 120 s")
    return broken


# --- one case -------------------------------------------------------------------------------

def case_rng(seed, index):
    return random.Random(f"shardplan-campaign:{seed}:{index}")


def build_case(index):
    s = _settings
    kind = s.kinds[index % len(s.kinds)]
    return kinds.make_case(index, kind, case_rng(s.seed, index), _seeds, s.can_mknod, s.is_root)


def _fs(name):
    return os.fsencode(name)


def materialize(case, folder):
    for name, spec in sorted(case.files.items(), key=lambda item: item[1].special is not None):
        path = os.path.join(_fs(folder), _fs(name))
        special = spec.special
        if special is None:
            with open(path, "wb") as f:
                f.write(spec.content)
        elif special[0] in ("dir", "readonly_dir"):
            os.mkdir(path)
            if special[0] == "readonly_dir":
                os.chmod(path, 0o555)
        elif special[0] == "symlink":
            os.symlink(_fs(special[1]), path)
        elif special[0] == "sparse":
            with open(path, "wb") as f:
                f.truncate(special[1])
        elif special[0] == "chardev":
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(special[1], special[2]))


def snapshot(case, folder):
    """What the run must leave as it was: input contents and kept paths' kinds."""
    state = {}
    for name, spec in case.files.items():
        # real-out is what an output fault's link points at: the command replaces it.
        if spec.special is None and name != "real-out":
            state[("content", name)] = hashlib.sha1(spec.content).hexdigest()
    for name in case.keep:
        state[("kind", name)] = _kind_of(os.path.join(_fs(folder), _fs(name)))
    return state


def _kind_of(path):
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "symlink to " + os.fsdecode(os.readlink(path))
    if stat.S_ISCHR(st.st_mode):
        return f"character device {os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        return "regular file"
    return "other"


def postcheck(state, folder):
    failures = []
    for (what, name), before in sorted(state.items()):
        path = os.path.join(_fs(folder), _fs(name))
        if what == "content":
            try:
                with open(path, "rb") as f:
                    after = hashlib.sha1(f.read()).hexdigest()
            except OSError:
                after = "gone"
            if after != before:
                failures.append(f"input {name!r} was changed or removed")
        else:
            after = _kind_of(path)
            if after != before:
                failures.append(f"{name!r} was a {before}, is now {after}")
    for root, dirs, files in os.walk(folder):
        for n in files + dirs:
            if TEMPORARY.search(n) and not n.startswith("stdout") and not n.startswith("stderr"):
                failures.append(f"temporary file {n!r} left behind")
    return failures


def _limits(memory_bytes):
    def apply():
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_FILE_BYTES, MAX_OUTPUT_FILE_BYTES))
    return apply


def _kill_session(process):
    """Ends the case's processes: its session (mpirun, its ranks), by their ids."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=3)
    except subprocess.TimeoutExpired:
        pass
    for pid in _session_members(process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _session_members(sid):
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    members.append(int(entry))
            except OSError:
                pass
    return members


def command_line(case, binary):
    argv = [binary if a == "shardplan" else a for a in case.argv]
    if case.mpirun_np:
        argv = mpirun_prefix(case.mpirun_np) + argv
    return argv


def _read_capped(path, limit):
    with open(path, "rb") as f:
        return f.read(limit)


def run_case(index):
    s = _settings
    started = time.monotonic()
    case = build_case(index)
    folder = tempfile.mkdtemp(prefix=f"case-{index}-", dir=s.work)
    run_dir = os.path.join(folder, "run")
    os.mkdir(run_dir)
    try:
        materialize(case, run_dir)
        state = snapshot(case, run_dir)
        out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            process = subprocess.Popen(command_line(case, s.binary), cwd=run_dir,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       start_new_session=True, preexec_fn=_limits(s.memory_bytes))
            timed_out = False
            try:
                process.wait(timeout=s.time_limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_session(process)
        seconds = time.monotonic() - started
        outcome = classify.Outcome(
            returncode=process.returncode, stdout=_read_capped(out_path, STDOUT_READ_BYTES),
            stderr=_read_capped(err_path, STDERR_READ_BYTES), timed_out=timed_out,
            under_mpirun=bool(case.mpirun_np), expects_json=case.expects_json,
            subjects=tuple(case.subjects) + tuple(a for a in case.argv[1:] if a in case.files),
            postcheck_failures=tuple(postcheck(state, run_dir)),
            exit_zero_is_wrong=case.exit_zero_is_wrong, long_by_request=case.long_by_request)
        verdict = classify.classify(outcome)
        result = {
            "index": index, "kind": case.kind, "class": verdict.cls, "reason": verdict.reason,
            "description": case.description, "command": display_command(case),
            "exit": process.returncode, "seconds": round(seconds, 2),
        }
        if verdict.cls not in classify.CLEAN:
            result["repro"] = save_reproducer(case, verdict, outcome, result)
        return result
    finally:
        _remove(folder)


def _remove(folder):
    for root, dirs, _ in os.walk(folder):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o755, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(folder, ignore_errors=True)


# --- reproducers ----------------------------------------------------------------------------

def shell_quote(arg):
    """bash quoting that keeps every byte: $'...' with \\xNN for anything unprintable."""
    data = os.fsencode(arg)
    if data and re.fullmatch(rb"[A-Za-z0-9_./=:,+@%-]+", data):
        return arg
    if all(0x20 <= b < 0x7F for b in data):
        return "'" + arg.replace("'", "'\\''") + "'"
    out = []
    for b in data:
        if 0x20 <= b < 0x7F and b not in (0x27, 0x5C):
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "$'" + "".join(out) + "'"


def display_command(case):
    argv = [a for a in case.argv]
    prefix = "mpirun -np %d " % case.mpirun_np if case.mpirun_np else ""
    text = prefix + " ".join(shell_quote(a) if len(a) <= 200 else
                             shell_quote(a[:60]) + f"…[{len(a)} characters]" for a in argv)
    return text[:600]


def save_reproducer(case, verdict, outcome, result):
    s = _settings
    folder = os.path.join(s.out, "repro", f"{case.index:05d}-{case.kind}-{verdict.cls}")
    files = os.path.join(folder, "files")
    os.makedirs(files, exist_ok=True)
    setup = []
    for name, spec in sorted(case.files.items()):
        q = shell_quote(name)
        special = spec.special
        if special is None:
            with open(os.path.join(_fs(files), _fs(name)), "wb") as f:
                f.write(spec.content)
        elif special[0] == "dir":
            setup.append(f"mkdir {q}")
        elif special[0] == "readonly_dir":
            setup.append(f"mkdir -m 0555 {q}")
        elif special[0] == "symlink":
            setup.append(f"ln -s {shell_quote(special[1])} {q}")
        elif special[0] == "sparse":
            setup.append(f"truncate -s {special[1]} {q}")
        elif special[0] == "chardev":
            setup.append(f"mknod {q} c {special[1]} {special[2]}")
    argv = [a for a in case.argv]
    argv[0] = '"$SHARDPLAN"'
    command = " ".join([argv[0]] + [shell_quote(a) for a in argv[1:]])
    if case.mpirun_np:
        command = " ".join(mpirun_prefix(case.mpirun_np)) + " " + command
    script = [
        "#!/bin/bash",
        f"# {case.kind} case {case.index} (--seed {s.seed}): {verdict.cls}: {verdict.reason}"[:400],
        f"# {case.description}"[:400].replace("\n", " "),
        "# Runs in a fresh temporary folder; SHARDPLAN picks the binary.",
        f"SHARDPLAN=${{SHARDPLAN:-{s.binary}}}",
        # The campaign's limits: without them an input that exhausts memory takes the
        # machine's (the kernel's OOM killer then picks a process, not necessarily this one).
        *([f"ulimit -v {s.memory_bytes >> 10}"] if s.memory_bytes else []),
        "ulimit -c 0",
        'here=$(cd "$(dirname "$0")" && pwd)',
        "work=$(mktemp -d)",
        'cp -a "$here/files/." "$work/"',
        'cd "$work" || exit 1',
        *setup,
        'echo "in $work" >&2',
        f"timeout -k 5 {int(s.time_limit)} {command}",
    ]
    with open(os.path.join(folder, "run.sh"), "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(script) + "\n")
    os.chmod(os.path.join(folder, "run.sh"), 0o755)
    with open(os.path.join(folder, "case.txt"), "w", encoding="utf-8") as f:
        f.write(f"kind: {case.kind}\ncase: {case.index} (--seed {s.seed})\n"
                f"class: {verdict.cls}\nreason: {verdict.reason}\n"
                f"mutation: {case.description}\ncommand: {result['command']}\n"
                f"exit: {outcome.returncode}{' (timed out)' if outcome.timed_out else ''}\n"
                f"seconds: {result['seconds']}\n\nstderr (first 4000 bytes):\n"
                f"{outcome.stderr[:4000].decode('utf-8', errors='backslashreplace')}\n\n"
                f"stdout (first 2000 bytes):\n"
                f"{outcome.stdout[:2000].decode('utf-8', errors='backslashreplace')}\n")
    return os.path.relpath(folder, s.out)


# --- the run --------------------------------------------------------------------------------

def _init_worker(settings, seeds):
    global _settings, _seeds
    _settings, _seeds = settings, seeds
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def can_make_device_nodes(folder):
    path = os.path.join(folder, "probe-node")
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(path, "wb") as f:  # a nodev mount makes the node but refuses to open it
            f.write(b"x")
        return True
    except OSError:
        return False
    finally:
        if os.path.lexists(path):
            os.unlink(path)


CAUSE_NUMBERS = re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?")
CAUSE_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def cause_key(result):
    """Cases that fail alike: the class, the command and the reason with its numbers and
    quoted values taken out."""
    command = result["command"].split()
    words = [w for w in command if not w.startswith("mpirun") and not w.startswith("-np")]
    sub = " ".join(w for w in words[1:3] if not w.startswith("-") and "." not in w)
    reason = CAUSE_QUOTED.sub("…", CAUSE_NUMBERS.sub("#", result["reason"]))
    reason = re.sub(r"(input|model|cluster|plan|trace|step|timeline|log|table|space|config|"
                    r"run|job|bridge|probe)[\w.-]*\.(json|gz|csv|out|sh|toml|txt)", "FILE", reason)
    return result["class"], sub, reason[:160]


def report(results, settings, elapsed):
    lines = []
    tally = collections.defaultdict(collections.Counter)
    for r in results:
        tally[r["kind"]][r["class"]] += 1
    classes = [c for c in classify.CLASSES if any(t[c] for t in tally.values())]
    width = max([len(k) for k in tally] + [5])
    lines.append(f"shardplan bad-input campaign: {len(results)} cases, --seed {settings.seed}, "
                 f"{elapsed:.0f} s, binary {settings.binary}")
    lines.append("")
    lines.append(" " * width + "".join(f"{c:>12}" for c in classes) + f"{'total':>8}")
    total = collections.Counter()
    for kind in settings.kinds:
        if kind not in tally:
            continue
        row = tally[kind]
        total.update(row)
        lines.append(f"{kind:<{width}}" + "".join(f"{row[c]:>12}" for c in classes)
                     + f"{sum(row.values()):>8}")
    lines.append(f"{'all':<{width}}" + "".join(f"{total[c]:>12}" for c in classes)
                 + f"{sum(total.values()):>8}")
    bad = [r for r in results if r["class"] not in classify.CLEAN]
    if bad:
        groups = collections.defaultdict(list)
        for r in sorted(bad, key=lambda r: r["index"]):
            groups[cause_key(r)].append(r)
        lines.append("")
        lines.append(f"{len(bad)} cases that are not a clear error or a sane result, "
                     f"{len(groups)} kinds of outcome (reproducers under {settings.out}/repro):")
        order = {c: i for i, c in enumerate(classify.CLASSES)}
        for key, members in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], -len(kv[1]))):
            first = members[0]
            lines.append("")
            lines.append(f"[{key[0]}] x{len(members)} {key[1]}: {first['reason'][:300]}")
            lines.append(f"    e.g. case {first['index']} ({first['kind']}): {first['description'][:200]}")
            lines.append(f"    {first['command'][:300]}")
            lines.append(f"    {first.get('repro', '')}/run.sh"
                         + (f"  (also cases {', '.join(str(m['index']) for m in members[1:8])}"
                            + (" …" if len(members) > 8 else "") + ")" if len(members) > 1 else ""))
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(REPO, "build", "cli", "shardplan"),
                   help="the shardplan to test (default: build/cli/shardplan)")
    p.add_argument("--seed", type=int, default=1, help="case N is a function of (seed, N)")
    p.add_argument("--cases", type=int, default=2000, help="how many cases (default 2000)")
    p.add_argument("--first", type=int, default=0, help="number of the first case (default 0)")
    p.add_argument("--kinds", default=",".join(kinds.ALL_KINDS),
                   help="comma-separated input kinds (default: all): " + ",".join(kinds.ALL_KINDS))
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per case (default 60)")
    p.add_argument("--memory-limit", type=float, default=4.0,
                   help="address space per process in GiB (default 4; 0: none, for sanitizer builds)")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--out", default="campaign-out", help="folder for the report and reproducers")
    p.add_argument("--fail-on", default="crash,hang,oom,damage,absurd,unclear",
                   help="classes that make the exit status 1 (default: all but clear-error, sane)")
    p.add_argument("--copy-binary", action="store_true",
                   help="run a copy of the binary, so that a rebuild during the run does not disturb it")
    p.add_argument("--source-dir", default=REPO, help="the repository (seed corpora)")
    p.add_argument("--shared-dir", default=os.path.join(os.path.dirname(REPO), "shared"),
                   help="../shared, for the real Kineto traces (optional)")
    p.add_argument("--quiet", action="store_true", help="no line per case")
    args = p.parse_args(argv)
    unknown = [k for k in args.kinds.split(",") if k not in kinds.ALL_KINDS]
    if unknown:
        p.error(f"unknown kind(s) {', '.join(unknown)} (valid: {', '.join(kinds.ALL_KINDS)})")
    bad_classes = [c for c in args.fail_on.split(",") if c and c not in classify.CLASSES]
    if bad_classes:
        p.error(f"unknown class(es) {', '.join(bad_classes)} (valid: {', '.join(classify.CLASSES)})")
    return args


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        print(f"campaign: {binary}: not an executable (build the shardplan target, or give --binary)",
              file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    if os.path.isdir(os.path.join(out, "repro")):
        shutil.rmtree(os.path.join(out, "repro"))
    os.makedirs(out, exist_ok=True)
    if args.copy_binary:
        copy = os.path.join(out, "shardplan")
        shutil.copy2(binary, copy)
        binary = copy
    work = tempfile.mkdtemp(prefix="shardplan-campaign-")
    try:
        settings = Settings(binary=binary, seed=args.seed, time_limit=args.time_limit,
                            memory_bytes=int(args.memory_limit * (1 << 30)), out=out,
                            kinds=tuple(args.kinds.split(",")), work=work,
                            can_mknod=can_make_device_nodes(work), is_root=os.geteuid() == 0)
        seeds = kinds.Seeds(args.source_dir, args.shared_dir,
                            generate_seeds(binary, os.path.join(work, "seeds")))
        broken = check_bases(binary, seeds, os.path.join(work, "bases"))
        if broken:
            print("campaign: these unmutated command lines fail, so the cases built on them "
                  "would test nothing:\n  " + "\n  ".join(broken), file=sys.stderr)
            return 2
        if not seeds.real_traces:
            print(f"campaign: no real traces in {args.shared_dir}/traces-real: Kineto cases use "
                  "the corpus only", file=sys.stderr)
        started = time.monotonic()
        results = []
        indices = range(args.first, args.first + args.cases)
        context = multiprocessing.get_context("fork")
        with context.Pool(args.jobs, initializer=_init_worker, initargs=(settings, seeds),
                          maxtasksperchild=200) as pool, \
                open(os.path.join(out, "results.jsonl"), "w", encoding="utf-8") as log:
            for r in pool.imap_unordered(run_case, indices):
                results.append(r)
                log.write(json.dumps(r, ensure_ascii=True) + "\n")
                log.flush()
                if not args.quiet or r["class"] not in classify.CLEAN:
                    print(f"[{len(results)}/{args.cases}] case {r['index']} {r['kind']}: "
                          f"{r['class']} {r['seconds']} s {r['reason'][:120]}", flush=True)
        results.sort(key=lambda r: r["index"])
        text = report(results, settings, time.monotonic() - started)
        with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as f:
            f.write(text)
        print(text)
        fail = set(c for c in args.fail_on.split(",") if c)
        failing = [r for r in results if r["class"] in fail]
        if failing:
            print(f"campaign: {len(failing)} case(s) of class {', '.join(sorted(fail & {r['class'] for r in failing}))}"
                  f"; reproducers: {out}/repro/*/run.sh", file=sys.stderr)
            return 1
        return 0
    finally:
        _remove(work)


if __name__ == "__main__":
    sys.exit(main())
