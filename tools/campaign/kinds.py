"""The input kinds of the campaign: for each, its seeds, its mutators and the commands
that read it. make_case(kind, rng, seeds) builds one Case; everything it does is drawn
from rng, so a case is a function of (--seed, case number).

A Case names its files relative to its own folder; campaign.py makes them there and runs
the command in that folder, so a reproducer is the folder and the command line.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import os

import mutate

# Execute replays on this many CPU ranks at most (the machine has 2 cores; more ranks
# only make a case slower).
MAX_EXECUTE_RANKS = 4


@dataclasses.dataclass
class FileSpec:
    """A file a case makes: content, or one of the special kinds."""

    content: bytes | None = None
    # None, or ("dir",), ("readonly_dir",), ("symlink", target), ("sparse", bytes),
    # ("chardev", major, minor)
    special: tuple | None = None


@dataclasses.dataclass
class Case:
    index: int
    kind: str
    argv: list  # "shardplan" stands for the binary
    files: dict = dataclasses.field(default_factory=dict)  # name -> FileSpec
    mpirun_np: int = 0
    expects_json: bool = False
    subjects: tuple = ()  # what was made bad (files, flags): the error should name it
    description: str = ""
    # Paths (in the case folder) that must keep their kind after the run: an output
    # fault's device node, link or directory.
    keep: tuple = ()
    exit_zero_is_wrong: str = ""
    # Why running to the time limit is what was asked (execute --steps 100000), or "".
    long_by_request: str = ""


@dataclasses.dataclass
class Seed:
    name: str
    data: bytes
    meta: dict = dataclasses.field(default_factory=dict)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _strip_first_line(data):
    return data.split(b"\n", 1)[1] if b"\n" in data else data


class Seeds:
    """Every seed, read once. Seeds made by running the binary come from campaign.py
    (generated), so they need no network and follow the binary under test."""

    def __init__(self, source_dir, shared_dir, generated):
        self.source_dir = source_dir
        self.shared_dir = shared_dir
        corpus = os.path.join(source_dir, "tests", "fuzz", "corpus")
        data = os.path.join(source_dir, "tests", "data")
        interop = os.path.join(source_dir, "tests", "interop", "data")

        def files(*patterns):
            out = []
            for pattern in patterns:
                out += sorted(glob.glob(pattern))
            return [p for p in out if os.path.isfile(p) and not p.endswith(".md")]

        def seeds(paths, meta=None, transform=None):
            out = []
            for p in paths:
                raw = _read(p)
                out.append(Seed(os.path.basename(p), transform(raw) if transform else raw,
                                dict(meta or {})))
            return out

        self.by_kind = {}
        self.by_kind["model"] = seeds(files(f"{corpus}/model_json/*", f"{data}/h200/llama3-8b-*.json"))
        self.by_kind["cluster"] = seeds(files(f"{corpus}/cluster_json/*",
                                              f"{source_dir}/models/clusters/*.json"))
        configs = seeds(files(f"{corpus}/config/*.json"), {"model": "tiny", "gpus": 8})
        plans = []
        for p in files(f"{corpus}/plan_json/*", f"{data}/h200/plan_a.json"):
            raw = _read(p)
            try:
                doc = json.loads(raw)
                meta = {"gpus": int(doc.get("num_gpus", 8)), "model": doc.get("model", "tiny"),
                        "cluster": doc.get("cluster", "dgx-h100")}
                if meta["model"] in ("tiny", "tiny-moe"):  # zoo models: --model takes the name
                    configs.append(Seed("config-of-" + os.path.basename(p),
                                        json.dumps(doc["config"], indent=1).encode(), dict(meta)))
            except (ValueError, KeyError, TypeError):
                meta = {"gpus": 8, "model": "tiny", "cluster": "dgx-h100"}
            plans.append(Seed(os.path.basename(p), raw, meta))
        self.by_kind["config"] = configs
        self.by_kind["set"] = configs
        self.by_kind["plan"] = plans
        self.by_kind["space"] = seeds(files(f"{corpus}/sweep_space_json/*"))
        self.by_kind["step_trace"] = seeds(files(f"{corpus}/step_trace_json/*"))
        self.by_kind["timeline"] = seeds(files(f"{corpus}/timeline_json/*",
                                               f"{data}/h200/measured_a.json"))
        self.by_kind["nccl_log"] = seeds(files(f"{corpus}/nccl_tests_log/*",
                                               f"{data}/nccl-tests/*/*.out"))
        self.by_kind["pool_csv"] = seeds(files(f"{corpus}/pool_csv/*"))
        stack = {}
        for p in files(f"{corpus}/stack_config/*"):
            raw = _read(p)
            stack.setdefault(raw.split(b"\n", 1)[0].strip().decode(), []).append(
                Seed(os.path.basename(p), _strip_first_line(raw)))
        self.by_kind["megatron"] = stack.get("megatron-args", []) + seeds(
            files(f"{interop}/launch_scripts/*.sh", f"{interop}/megatron/*.cmdline"))
        self.by_kind["bridge"] = stack.get("megatron-bridge", [])
        self.by_kind["torchtitan"] = stack.get("torchtitan", []) + seeds(
            files(f"{interop}/torchtitan/*.toml"))
        self.by_kind["kineto"] = seeds(files(f"{corpus}/kineto/*", f"{data}/fsdp2_*_trace.json",
                                             f"{data}/h200/fsdp2_profile_*.json.gz"))
        # The real traces are 10-54 MB of JSON: read when a case draws one.
        self.real_traces = files(f"{shared_dir}/traces-real/*.json.gz")
        self.by_kind["probe"] = seeds(files(f"{data}/h200/probe.json"))
        for kind, extra in generated.items():
            self.by_kind.setdefault(kind, []).extend(extra)
        self.plan_a = _read(f"{data}/h200/plan_a.json")
        self.measured_a = _read(f"{data}/h200/measured_a.json")
        self.tiny_model = _read(f"{source_dir}/models/zoo/tiny.json")
        self.predicted_timeline = _read(f"{corpus}/timeline_json/tiny-predicted.json")
        self.nccl_log = _read(f"{corpus}/nccl_tests_log/all_gather_ring.out")
        self.pool_csv = _read(f"{corpus}/pool_csv/input.12.csv")
        self.kineto = _read(f"{corpus}/kineto/fsdp2_two_layers_trace.json")
        self.small_plan = next(s.data for s in plans if s.name == "tiny-zero2-ga2.json")
        self.step_trace = _read(f"{corpus}/step_trace_json/fsdp2-two-layers-import.json")

    def tiny2_model(self):
        """tiny with two layers: the model the FSDP2 step-trace seeds were recorded from."""
        model = json.loads(self.tiny_model)
        model["name"] = "tiny2"
        model["num_layers"] = 2
        return json.dumps(model, indent=1).encode()


# --- how each kind mutates ---------------------------------------------------------------

def mutate_with(rng, data, structured, structured_share=0.7):
    """A structure-aware mutation most of the time, a byte-level one otherwise."""
    if structured and rng.random() < structured_share:
        return structured(rng, data)
    return rng.choice(mutate.BYTE_MUTATORS)(rng, data)


STRUCTURE = {
    "model": mutate.json_mutation, "cluster": mutate.json_mutation,
    "config": mutate.json_mutation, "plan": mutate.json_mutation,
    "space": mutate.json_mutation, "step_trace": mutate.json_mutation,
    "timeline": mutate.json_mutation, "probe": mutate.json_mutation,
    "kineto": mutate.json_mutation, "nccl_log": mutate.table_mutation,
    "pool_csv": mutate.csv_mutation, "megatron": mutate.shell_mutation,
    "torchtitan": mutate.toml_mutation,
}


def _bridge_mutation(rng, data):
    if data.lstrip().startswith(b"{"):
        return mutate.json_mutation(rng, data)
    return mutate.replace_number(rng, data) if rng.random() < 0.4 else mutate.toml_mutation(rng, data)


STRUCTURE["bridge"] = _bridge_mutation


def _input_name(kind, seed):
    ext = {"pool_csv": ".csv", "torchtitan": ".toml", "nccl_log": ".out", "megatron": ".sh",
           "bridge": ".txt"}.get(kind, ".json")
    if seed.name.endswith(".gz"):
        ext = ".json.gz"
    return "input" + ext


# --- the commands that read each kind -----------------------------------------------------

def _commands(kind, rng, seeds, name, seed):
    """(argv, files the command needs beside the input, mpirun ranks)."""
    f = name
    m = seed.meta
    if kind == "model":
        sub = rng.choice(("describe", "plan", "simulate", "simulate", "sweep"))
        # gpt3-175b was built with 2,048 positions, fewer than the default 8,192 tokens.
        argv = [sub, "--model", f, "--gpus", "8", "--set", "seq_len=2048", "--json"]
        if sub == "sweep":
            argv += ["-j", "1", "--top", "3"]
        return argv, {}, 0
    if kind == "cluster":
        choice = rng.randrange(6)
        if choice == 0:
            return ["simulate", "--model", "tiny", "--cluster", f, "--nodes", "1", "--json"], {}, 0
        if choice == 1:
            return ["describe", "--model", "llama3-8b", "--cluster", f, "--json"], {}, 0
        if choice == 2:
            return ["collective", "--cluster", f, "--op", "all_reduce", "--bytes", "1GiB",
                    "--json"], {}, 0
        if choice == 3:
            return ["collective", "--cluster", f, "--op", "all_gather", "--sweep", "--json"], {}, 0
        if choice == 4:
            return ["sweep", "--model", "tiny", "--cluster", f, "--gpus", "4", "-j", "1",
                    "--top", "3", "--json"], {}, 0
        return ["calibrate", "--cluster", f, "--nccl-tests", "log.out", "--json"], \
            {"log.out": seeds.nccl_log}, 0
    if kind == "config":
        sub = rng.choice(("plan", "simulate", "describe", "sweep"))
        argv = [sub, "--model", m.get("model", "tiny"), "--gpus", str(m.get("gpus", 8)),
                "--config", f, "--json"]
        if sub == "sweep":
            argv += ["-j", "1", "--top", "3"]
        return argv, {}, 0
    if kind == "plan":
        choice = rng.randrange(6)
        gpus = m.get("gpus", 8)
        if choice <= 1 and gpus <= MAX_EXECUTE_RANKS:
            return ["execute", "--plan", f, "--backend", "cpu", "--warmup", "0", "--steps", "1",
                    "--json"], {}, gpus
        if choice == 2:
            return ["pack", "--input", f, "--time-limit", "2", "--json"], {}, 0
        if choice == 3 and seed.name.startswith("plan_a"):
            return ["calibrate", "--cluster", "dgx-h200", "--plan", f, "--measured",
                    "measured.json", "--json"], {"measured.json": seeds.measured_a}, 0
        if choice == 4:
            return ["simulate", "--plan", f, "--timeline-out", "timeline.json", "--report",
                    "report.html", "--json"], {}, 0
        return ["simulate", "--plan", f, "--json"], {}, 0
    if kind == "space":
        return ["sweep", "--model", "tiny", "--gpus", "8", "--space", f, "-j", "1", "--top", "3",
                "--json"], {}, 0
    if kind == "step_trace":
        return ["plan", "--model", "tiny2.json", "--gpus", "4", "--step-trace", f, "--json"], \
            {"tiny2.json": seeds.tiny2_model()}, 0
    if kind == "timeline":
        choice = rng.randrange(4)
        if choice == 0:
            return ["compare", "predicted.json", f, "--json"], \
                {"predicted.json": seeds.predicted_timeline}, 0
        if choice == 1:
            return ["compare", f, "predicted.json", "--json"], \
                {"predicted.json": seeds.predicted_timeline}, 0
        if choice == 2 and seed.name.startswith("measured_a"):
            return ["calibrate", "--cluster", "dgx-h200", "--plan", "plan.json", "--measured", f,
                    "--json"], {"plan.json": seeds.plan_a}, 0
        return ["compare", f, f, "--json"], {}, 0
    if kind == "nccl_log":
        argv = ["calibrate", "--nccl-tests", f, "--json"]
        if rng.random() < 0.3:
            argv += ["--nccl-algo", "ring"]
        return argv, {}, 0
    if kind == "pool_csv":
        argv = ["pack", "--input", f, "--time-limit", "2", "--json"]
        if rng.random() < 0.5:
            argv += ["--algorithm", rng.choice(("slots", "best-fit", "exact", "auto"))]
        if rng.random() < 0.3:
            argv += ["--alignment", "1"]
        if rng.random() < 0.2:
            argv += ["-o", "placed.csv"]
        return argv, {}, 0
    if kind in ("megatron", "bridge", "torchtitan"):
        flag = {"megatron": "--from-megatron", "bridge": "--from-megatron-bridge",
                "torchtitan": "--from-torchtitan"}[kind]
        emit = {"megatron": "megatron-args", "bridge": "megatron-bridge",
                "torchtitan": "torchtitan"}[kind]
        choice = rng.randrange(6)
        gpus = ["--gpus", "8"] if kind == "bridge" or rng.random() < 0.3 else []
        if choice == 0:
            return ["describe", flag, f, *gpus, "--json"], {}, 0
        if choice == 1:
            return ["plan", flag, f, *gpus, "--emit", emit], {}, 0
        if choice == 2:
            return ["sweep", flag, f, *gpus, "-j", "1", "--top", "3", "--json"], {}, 0
        if choice == 3:
            return ["simulate", flag, f, *gpus, "--json"], {}, 0
        return ["plan", flag, f, *gpus, "--json"], {}, 0
    if kind == "kineto":
        choice = rng.randrange(5)
        if choice == 0:
            return ["trace", "import", f, "-o", "step.json", "--timeline", "timeline.json",
                    "--json"], {}, 0
        if choice == 1:
            return ["calibrate", "--trace", f, "--json"], {}, 0
        if choice == 2:
            return ["trace", "import", f, "--step", rng.choice(("1", "ProfilerStep#5", "-1", "0")),
                    "--depth", rng.choice(("0", "2")), "--json"], {}, 0
        return ["trace", "import", f, "--json"], {}, 0
    if kind == "probe":
        if rng.random() < 0.3:
            return ["calibrate", "--cluster", "dgx-h200", "--probe", f, "--plan", "plan.json",
                    "--measured", "measured.json", "--json"], \
                {"plan.json": seeds.plan_a, "measured.json": seeds.measured_a}, 0
        # The committed probe ran on H200s; the generated one on this machine's CPUs.
        cluster = "dgx-h200" if seed.name == "probe.json" else "dgx-h100"
        return ["calibrate", "--cluster", cluster, "--probe", f, "--json"], {}, 0
    raise KeyError(kind)


def _seed_data(rng, kind, seeds):
    """A seed of this kind; a share of Kineto cases take one of the real traces."""
    if kind == "kineto" and seeds.real_traces and rng.random() < 0.08:
        path = rng.choice(seeds.real_traces)
        return Seed(os.path.basename(path), _read(path))
    return rng.choice(seeds.by_kind[kind])


def input_case(index, kind, rng, seeds):
    seed = _seed_data(rng, kind, seeds)
    data = seed.data
    gz = seed.name.endswith(".gz") or data[:2] == b"\x1f\x8b"
    plain = b""
    if gz and rng.random() < 0.15:
        mutated, what = rng.choice(mutate.BYTE_MUTATORS)(rng, data)
        what = "gzip stream: " + what
    else:
        if gz:
            data = gzip.decompress(data)
        mutated, what = mutate_with(rng, data, STRUCTURE.get(kind))
        plain = mutated
        if gz:
            mutated = gzip.compress(mutated, compresslevel=1, mtime=0)
    name = _input_name(kind, seed)
    argv, extra, ranks = _commands(kind, rng, seeds, name, seed)
    files = {name: FileSpec(content=mutated)}
    files.update({k: FileSpec(content=v) for k, v in extra.items()})
    wrong = ""
    if (mutate.DUPLICATE_KEY in what and kind not in ("megatron", "nccl_log", "pool_csv")
            and mutate.has_duplicate_key(plain)):
        wrong = "a key was given twice (another value, for Bridge), which every reader refuses"
    return Case(index=index, kind=kind, argv=["shardplan", *argv], files=files,
                mpirun_np=ranks, expects_json="--json" in argv, subjects=(name,),
                description=f"{seed.name}: {what}", exit_zero_is_wrong=wrong)


# --- --set overrides ------------------------------------------------------------------------

def set_case(index, rng, seeds):
    seed = rng.choice(seeds.by_kind["config"])
    try:
        keys = sorted(json.loads(seed.data).keys())
    except (ValueError, AttributeError):
        keys = []
    keys = keys or ["tp", "grad_accum", "micro_batch", "seq_len", "bucket_bytes"]
    overrides = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        key = rng.choice(keys)
        op = rng.randrange(8)
        if op <= 3:
            value = mutate.boundary_number(rng)
        elif op == 4:
            value = rng.choice(mutate.NUMBER_LIKE_TEXT + ("true", "null", "[]", "{}", '"x"'))
        elif op == 5:
            value = rng.choice(("\x01", "\x1b[2J", "\u202e", "\udcff", "é", "x" * 100_000))
        elif op == 6:
            key = rng.choice(("", "unknown_field", key + "x", key.upper(), f"{key}.{key}", "/tp"))
            value = "1"
        else:
            overrides.append(rng.choice((key, f"={key}", f"{key}==1", f"{key}=1=2")))
            continue
        overrides.append(f"{key}={value}")
    sub = rng.choice(("plan", "simulate", "describe"))
    argv = ["shardplan", sub, "--model", seed.meta.get("model", "tiny"), "--gpus",
            str(seed.meta.get("gpus", 8)), "--json"]
    for o in overrides:
        argv += ["--set", o]
    return Case(index=index, kind="set", argv=argv, expects_json=True,
                subjects=("--set", *[o.split("=", 1)[0] for o in overrides]),
                description=f"--set {' '.join(repr(o[:40]) for o in overrides)}")


# --- flags ----------------------------------------------------------------------------------

def _flag_bases(seeds):
    """Valid command lines (with the files they read) whose flags the campaign mutates."""
    return [
        (["describe", "--model", "tiny", "--gpus", "8", "--micro-batch", "1", "--seq-len", "1024",
          "--recompute", "selective", "--json"], {}, 0),
        (["plan", "--model", "tiny", "--nodes", "1", "--json"], {}, 0),
        (["plan", "--model", "tiny", "--gpus", "8", "--json"], {}, 0),
        (["simulate", "--model", "tiny", "--gpus", "8", "--set", "micro_batch=2", "--json"], {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "8", "--tp", "1", "2", "--cp", "1",
          "--strategies", "optim_grads_params", "--dp-outer", "1", "--prefetch", "1",
          "--recompute", "none", "--micro-batch", "1", "--global-batch", "16", "--mem-cap",
          "70GiB", "-j", "1", "--top", "3", "--json"], {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "8", "--global-batch-tokens", "131072", "-j", "1",
          "--json"], {}, 0),
        (["pack", "--input", "table.csv", "--algorithm", "auto", "--capacity", "1000000",
          "--time-limit", "1", "--alignment", "256", "--json"], {"table.csv": seeds.pool_csv}, 0),
        (["collective", "--op", "all_reduce", "--bytes", "1GiB", "--ranks", "8", "--gpus", "8",
          "--json"], {}, 0),
        (["trace", "import", "trace.json", "--step", "2", "--depth", "1", "--format", "kineto",
          "--json"], {"trace.json": seeds.kineto}, 0),
        (["calibrate", "--nccl-tests", "log.out", "--nccl-algo", "ring", "--json"],
         {"log.out": seeds.nccl_log}, 0),
        (["execute", "--plan", "plan.json", "--backend", "cpu", "--warmup", "1", "--steps", "1",
          "--compute-scale", "1e-6", "--json"], {"plan.json": seeds.small_plan}, 2),
        (["plan", "--model", "llama3-8b", "--gpus", "8", "--emit", "megatron-args"], {}, 0),
        (["plan", "--from-megatron", "run.sh", "--json"],
         {"run.sh": seeds.by_kind["megatron"][0].data}, 0),
        (["describe", "--from-torchtitan", "job.toml", "--gpus", "8", "--json"],
         {"job.toml": seeds.by_kind["torchtitan"][0].data}, 0),
        (["simulate", "--from-megatron-bridge", "bridge.txt", "--gpus", "16", "--json"],
         {"bridge.txt": seeds.by_kind["bridge"][0].data}, 0),
        (["compare", "predicted.json", "measured.json", "--json"],
         {"predicted.json": seeds.predicted_timeline, "measured.json": seeds.predicted_timeline}, 0),
    ]


FLAG_VALUES = (
    "2147483648", "2147483647", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "-1", "0", "1e999", "1e308", "1e-309",
    "nan", "inf", "-inf", "", " ", "0x10", "١٢", "1.5", "3e9", "64ZiB", "-5GiB", "1e30GiB",
    "100000", "1048576", "\x01", "\x1b[31mred", "\u202eevil", "é", "\udcff", "x" * 100_000, "--json", "-",
)


def _number(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def flag_case(index, rng, seeds):
    argv, files, ranks = rng.choice(_flag_bases(seeds))
    argv = list(argv)
    value_positions = [i for i in range(1, len(argv))
                       if not argv[i].startswith("-") and argv[i - 1].startswith("-")]
    op = rng.randrange(10)
    subject = ""
    subjects_extra = ()
    if op <= 5 and value_positions:
        i = rng.choice(value_positions)
        subject = argv[i - 1]
        value = rng.choice(FLAG_VALUES) if rng.random() < 0.8 else mutate.boundary_number(rng)
        if rng.random() < 0.2:
            argv[i - 1:i + 1] = [f"{argv[i - 1]}={value}"]
        else:
            argv[i] = value
        what = f"{subject} {value[:40]!r}"
        # A value that is a path ("--nccl-tests 1e999") is named by an error about that file.
        subjects_extra = (value,) if value.strip() else ()
    elif op == 6:
        subject = rng.choice(("--bogus", "--gpu", "--json=yes", "---gpus", "-x", "--"))
        argv.insert(rng.randrange(2, len(argv) + 1), subject)
        what = f"{subject!r} inserted"
    elif op == 7 and value_positions:
        i = rng.choice(value_positions)
        subject = argv[i - 1]
        del argv[i]
        if rng.random() < 0.5:  # the flag last, without its value
            argv.append(argv.pop(i - 1))
        what = f"{subject} without its value"
    elif op == 8 and value_positions:
        i = rng.choice(value_positions)
        subject = argv[i - 1]
        value = rng.choice(FLAG_VALUES[:12])
        argv += [subject, value]
        subjects_extra = (value,)
        what = f"{subject} given twice, then {value[:40]!r}"
    else:
        word = argv[0]
        new = rng.choice((word[:-1], word.upper(), word + "\x01", "", "-" + word, word + "s"))
        argv[0] = new
        subject = new
        what = f"command {word!r} -> {new!r}"
    long_by_request = ""
    for flag, most in (("--steps", 100), ("--warmup", 100), ("--time-limit", 10)):
        for i, a in enumerate(argv[:-1]):
            if a == flag and _number(argv[i + 1]) > most:
                long_by_request = f"{flag} {argv[i + 1][:20]} asks for a long run"
    return Case(index=index, kind="flags", argv=["shardplan", *argv], long_by_request=long_by_request,
                files={k: FileSpec(content=v) for k, v in files.items()}, mpirun_np=ranks,
                expects_json="--json" in argv, subjects=(subject, *subjects_extra),
                description=what)


# --- files that are not files ---------------------------------------------------------------

def _reader_bases(seeds):
    """(argv with F for the input, good content of F, name of F, other files, ranks)."""
    return [
        (["describe", "--model", "F", "--gpus", "8", "--json"], seeds.tiny_model, "model.json", {}, 0),
        (["simulate", "--model", "tiny", "--cluster", "F", "--gpus", "8", "--json"],
         seeds.by_kind["cluster"][0].data, "cluster.json", {}, 0),
        (["plan", "--model", "tiny", "--gpus", "8", "--config", "F", "--json"], b"{}", "config.json", {}, 0),
        (["simulate", "--plan", "F", "--json"], seeds.small_plan, "plan.json", {}, 0),
        (["execute", "--plan", "F", "--backend", "cpu", "--steps", "1", "--warmup", "0", "--json"],
         seeds.small_plan, "plan.json", {}, 2),
        (["pack", "--input", "F", "--json"], seeds.pool_csv, "table.csv", {}, 0),
        (["pack", "--input", "F", "--json"], seeds.small_plan, "plan.json", {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "8", "--space", "F", "-j", "1", "--json"],
         seeds.by_kind["space"][0].data, "space.json", {}, 0),
        (["plan", "--model", "tiny2.json", "--gpus", "4", "--step-trace", "F", "--json"],
         seeds.step_trace, "step.json", {"tiny2.json": seeds.tiny2_model()}, 0),
        (["compare", "F", "predicted.json", "--json"], seeds.predicted_timeline, "timeline.json",
         {"predicted.json": seeds.predicted_timeline}, 0),
        (["calibrate", "--nccl-tests", "F", "--json"], seeds.nccl_log, "log.out", {}, 0),
        (["calibrate", "--cluster", "dgx-h200", "--probe", "F", "--json"],
         seeds.by_kind["probe"][0].data, "probe.json", {}, 0),
        (["calibrate", "--trace", "F", "--json"], seeds.kineto, "trace.json", {}, 0),
        (["trace", "import", "F", "--json"], seeds.kineto, "trace.json", {}, 0),
        (["trace", "import", "F", "--json"], gzip.compress(seeds.kineto, mtime=0), "trace.json.gz", {}, 0),
        (["plan", "--from-megatron", "F", "--json"], seeds.by_kind["megatron"][0].data, "run.sh", {}, 0),
        (["plan", "--from-megatron-bridge", "F", "--gpus", "8", "--json"],
         seeds.by_kind["bridge"][0].data, "bridge.txt", {}, 0),
        (["plan", "--from-torchtitan", "F", "--json"], seeds.by_kind["torchtitan"][0].data,
         "job.toml", {}, 0),
    ]


FILE_FAULTS = ("dir", "dev_zero", "dev_null", "dev_urandom", "empty", "symlink_loop",
               "random_bytes", "missing", "sparse_huge", "dangling_symlink", "proc_file",
               "long_path", "control_name", "one_byte", "utf16")


def file_fault_case(index, rng, seeds):
    argv, good, name, extra, ranks = rng.choice(_reader_bases(seeds))
    fault = rng.choice(FILE_FAULTS)
    files = {k: FileSpec(content=v) for k, v in extra.items()}
    path = name
    if fault == "dir":
        files[name] = FileSpec(special=("dir",))
    elif fault in ("dev_zero", "dev_null", "dev_urandom"):
        path = "/dev/" + fault[4:]
    elif fault == "empty":
        files[name] = FileSpec(content=b"")
    elif fault == "symlink_loop":
        files[name] = FileSpec(special=("symlink", "loop-b"))
        files["loop-b"] = FileSpec(special=("symlink", name))
    elif fault == "random_bytes":
        files[name] = FileSpec(content=rng.randbytes(rng.choice((7, 4096, 1 << 20))))
    elif fault == "missing":
        pass
    elif fault == "sparse_huge":
        # Past the 256 MiB input limit (a plan's is 1 GiB), costing nothing on disk.
        files[name] = FileSpec(special=("sparse", rng.choice((300 << 20, 2 << 30))))
    elif fault == "dangling_symlink":
        files[name] = FileSpec(special=("symlink", "nowhere/" + name))
    elif fault == "proc_file":
        path = rng.choice(("/proc/self/status", "/proc/self/maps", "/proc/cpuinfo"))
    elif fault == "long_path":
        path = "d" * rng.choice((256, 5000)) + "/" + name
    elif fault == "control_name":
        path = rng.choice(("a\nb", "\x1b[31mred", "caf\xe9\udcff", " lead", "-dash")) + name
        files[path] = FileSpec(content=good)
        path = "./" + path if path.startswith("-") else path
    elif fault == "one_byte":
        files[name] = FileSpec(content=rng.choice((b"{", b"[", b"\x00", b"\n", b"0", b"\x1f")))
    else:
        files[name] = FileSpec(content=b"\xff\xfe" + good[:20000].decode(
            "utf-8", errors="replace").encode("utf-16-le"))
    argv = ["shardplan", *[path if a == "F" else a for a in argv]]
    return Case(index=index, kind="file_faults", argv=argv, files=files, mpirun_np=ranks,
                expects_json="--json" in argv, subjects=(path, name),
                description=f"{argv[1]} reads {fault} ({path[:60]!r})")


# --- outputs that cannot be written as asked ---------------------------------------------

def _writer_bases(seeds):
    """(argv with T for the output, the files it reads, ranks)."""
    csv, kin = {"table.csv": seeds.pool_csv}, {"trace.json": seeds.kineto}
    return [
        (["plan", "--model", "tiny", "--gpus", "2", "-o", "T"], {}, 0),
        (["simulate", "--model", "tiny", "--gpus", "2", "--timeline-out", "T"], {}, 0),
        (["simulate", "--model", "tiny", "--gpus", "2", "--trace-out", "T"], {}, 0),
        (["simulate", "--model", "tiny", "--gpus", "2", "--report", "T"], {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "2", "-j", "1", "--csv", "T"], {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "2", "-j", "1", "--report", "T"], {}, 0),
        (["sweep", "--model", "tiny", "--gpus", "2", "-j", "1", "--emit-config", "T"], {}, 0),
        (["pack", "--input", "table.csv", "-o", "T"], csv, 0),
        (["trace", "import", "trace.json", "-o", "T"], kin, 0),
        (["trace", "import", "trace.json", "--timeline", "T"], kin, 0),
        (["calibrate", "--nccl-tests", "log.out", "-o", "T"], {"log.out": seeds.nccl_log}, 0),
        (["execute", "--plan", "plan.json", "--steps", "1", "--warmup", "0", "-o", "T"],
         {"plan.json": seeds.small_plan}, 2),
    ]


# Two outputs of one command on one path.
SAME_PATH_BASES = (
    ["simulate", "--model", "tiny", "--gpus", "2", "--timeline-out", "T", "--trace-out", "T"],
    ["simulate", "--model", "tiny", "--gpus", "2", "--report", "T", "--timeline-out", "T"],
    ["sweep", "--model", "tiny", "--gpus", "2", "-j", "1", "--csv", "T", "--report", "T"],
    ["trace", "import", "trace.json", "-o", "T", "--timeline", "T"],
)
OUTPUT_FAULTS = ("full_device", "null_device", "dir", "readonly_dir", "missing_parent",
                 "symlink", "dangling_symlink", "symlink_loop", "same_path", "long_name",
                 "empty_name", "readonly_fs")


def output_fault_case(index, rng, seeds, can_mknod=True, is_root=True):
    fault = rng.choice(OUTPUT_FAULTS)
    if fault == "same_path":
        argv = list(rng.choice(SAME_PATH_BASES))
        files = {"trace.json": FileSpec(content=seeds.kineto)} if argv[0] == "trace" else {}
        ranks = 0
    else:
        argv, reads, ranks = rng.choice(_writer_bases(seeds))
        files = {k: FileSpec(content=v) for k, v in reads.items()}
    target, keep, wrong = "out", (), ""
    if fault in ("full_device", "null_device") and not can_mknod:
        fault = "dir"
    if fault == "full_device":
        # A private node with /dev/full's numbers: the campaign never writes to /dev itself.
        files["full"] = FileSpec(special=("chardev", 1, 7))
        target, keep, wrong = "full", ("full",), "the output went to a full device"
    elif fault == "null_device":
        files["null"] = FileSpec(special=("chardev", 1, 3))
        target, keep = "null", ("null",)
    elif fault == "dir":
        files["outdir"] = FileSpec(special=("dir",))
        target, keep, wrong = "outdir", ("outdir",), "the output path is a directory"
    elif fault == "readonly_dir":
        files["ro"] = FileSpec(special=("readonly_dir",))
        target, keep = "ro/out", ("ro",)
        # root writes into a mode-0555 folder: only a non-root run must fail.
        wrong = "" if is_root else "the output folder is read-only"
    elif fault == "missing_parent":
        target, wrong = "no/such/folder/out", "the output folder does not exist"
    elif fault == "symlink":
        files["real-out"] = FileSpec(content=b"old contents\n")
        files["link"] = FileSpec(special=("symlink", "real-out"))
        target, keep = "link", ("link",)
    elif fault == "dangling_symlink":
        files["link"] = FileSpec(special=("symlink", "missing-dir/out"))
        target, keep = "link", ("link",)
    elif fault == "symlink_loop":
        files["loop-a"] = FileSpec(special=("symlink", "loop-b"))
        files["loop-b"] = FileSpec(special=("symlink", "loop-a"))
        target, keep, wrong = "loop-a", ("loop-a", "loop-b"), "the output path is a loop of links"
    elif fault == "same_path":
        target, wrong = "out", "two outputs were written over one path"
    elif fault == "long_name":
        target, wrong = "n" * 300, "the output name is longer than NAME_MAX"
    elif fault == "empty_name":
        target = ""
    else:
        # /proc is read-only to everyone, root included; a name there does not exist.
        target, wrong = "/proc/shardplan-campaign-out", "the output folder is read-only"
    argv = ["shardplan", *[target if a == "T" else a for a in argv]]
    return Case(index=index, kind="output_faults", argv=argv, files=files, mpirun_np=ranks,
                subjects=(target, target.rsplit("/", 1)[-1]), keep=keep, exit_zero_is_wrong=wrong,
                description=f"{argv[1]} writes to {fault} ({target[:40]!r})")


INPUT_KINDS = ("model", "cluster", "config", "plan", "space", "step_trace", "timeline",
               "nccl_log", "pool_csv", "megatron", "bridge", "torchtitan", "kineto", "probe")
ALL_KINDS = INPUT_KINDS + ("set", "flags", "file_faults", "output_faults")


def make_case(index, kind, rng, seeds, can_mknod=True, is_root=True):
    if kind == "set":
        return set_case(index, rng, seeds)
    if kind == "flags":
        return flag_case(index, rng, seeds)
    if kind == "file_faults":
        return file_fault_case(index, rng, seeds)
    if kind == "output_faults":
        return output_fault_case(index, rng, seeds, can_mknod, is_root)
    return input_case(index, kind, rng, seeds)


def base_commands(seeds):
    """Every command line the flag, file and output kinds start from, unmutated, with its
    files: each must succeed, or what the campaign calls a clear error is the base's."""
    out = []
    for argv, files, ranks in _flag_bases(seeds):
        out.append((argv, dict(files), ranks))
    for argv, good, name, extra, ranks in _reader_bases(seeds):
        files = dict(extra)
        files[name] = good
        out.append(([name if a == "F" else a for a in argv], files, ranks))
    for argv, reads, ranks in _writer_bases(seeds):
        out.append(([("out" if a == "T" else a) for a in argv], dict(reads), ranks))
    return out
