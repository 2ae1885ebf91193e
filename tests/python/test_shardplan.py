"""Tests of the Python module (python/module.cc, python/requests.cc): each command run
in-process returns what the shardplan binary prints with --json for the same request,
and bad input raises shardplan.Error with the binary's message.

Run from the repository root after building (ctest -R python_tests does this):

    PYTHONPATH=build/python SHARDPLAN=build/cli/shardplan \\
        python3 -m unittest discover -s tests/python -v

SHARDPLAN is the shardplan binary (default build/cli/shardplan). Without the module or the
binary the tests fail and say so, rather than pass without running.
"""

import ctypes
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import tracemalloc
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARDPLAN = os.environ.get("SHARDPLAN", os.path.join(ROOT, "build", "cli", "shardplan"))
TINY = os.path.join(ROOT, "models", "zoo", "tiny.json")
# MiniMalloc's README example (../shared/benchmarks/minimalloc/SOURCE.md): 5 buffers that
# fit in capacity 12 with alignment 1.
PACK_CSV = os.path.join(ROOT, "..", "shared", "benchmarks", "minimalloc", "examples",
                        "input.12.csv")

try:
    import shardplan
except ImportError as exc:  # fail, naming the fix, instead of skipping
    raise ImportError(f"tests/python need the shardplan module ({exc}); build it (ninja -C "
                      "build) and run with PYTHONPATH=build/python") from exc


def run_cli(*args):
    if not os.access(SHARDPLAN, os.X_OK):
        raise AssertionError(f"no shardplan binary at {SHARDPLAN}; build it or set SHARDPLAN")
    return subprocess.run([SHARDPLAN, *args], capture_output=True, text=True, timeout=120)


def cli_json(*args):
    result = run_cli(*args, "--json")
    if result.returncode != 0:
        raise AssertionError(f"shardplan {' '.join(args)} failed:\n{result.stderr}")
    return json.loads(result.stdout)


def cli_error(*args):
    """The message `shardplan` prints after 'shardplan: error: ' (exit status 1)."""
    result = run_cli(*args)
    if result.returncode != 1 or not result.stderr.startswith("shardplan: error: "):
        raise AssertionError(f"shardplan {' '.join(args)}: expected a bad-input error, got "
                             f"status {result.returncode}:\n{result.stderr}")
    return result.stderr[len("shardplan: error: "):].rstrip("\n")


def without(document, *keys):
    return {k: v for k, v in document.items() if k not in keys}


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_bytes():
    """Bytes malloc has handed out and not had back (glibc 2.33+ mallinfo2)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


class SameAsCliTest(unittest.TestCase):
    """1. Each command returns the object the binary prints with --json."""

    def test_describe(self):
        request = {"model": "tiny", "cluster": "dgx-a100", "gpus": 4, "micro_batch": 2,
                   "seq_len": 1024, "recompute": "selective"}
        expected = cli_json("describe", "--model", "tiny", "--cluster", "dgx-a100", "--gpus", "4",
                            "--micro-batch", "2", "--seq-len", "1024", "--recompute",
                            "selective")
        result = shardplan.describe(request)
        self.assertEqual(result, expected)
        self.assertEqual(result["config"]["micro_batch"], 2)  # the request was read

    def test_plan(self):
        result = shardplan.plan({"model": "tiny", "cluster": "dgx-h100", "nodes": 2,
                                 "set": ["recompute=full", "seq_len=2048"]})
        self.assertEqual(result, cli_json("plan", "--model", "tiny", "--cluster", "dgx-h100",
                                          "--nodes", "2", "--set", "recompute=full",
                                          "--set", "seq_len=2048"))
        self.assertEqual((result["num_gpus"], result["config"]["recompute"]), (16, "full"))

    def test_plan_writes_the_same_plan_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            ours, theirs = os.path.join(tmp, "ours.json"), os.path.join(tmp, "cli.json")
            result = shardplan.plan({"model": "tiny", "gpus": 8, "output": ours})
            expected = cli_json("plan", "--model", "tiny", "--gpus", "8", "-o", theirs)
            self.assertEqual(result["output"], ours)
            self.assertEqual(without(result, "output"), without(expected, "output"))
            with open(ours) as a, open(theirs) as b:
                self.assertEqual(a.read(), b.read())

    def test_simulate(self):
        result = shardplan.simulate({"model": "tiny", "gpus": 8, "set": {"micro_batch": 2}})
        self.assertEqual(result, cli_json("simulate", "--model", "tiny", "--gpus", "8",
                                          "--set", "micro_batch=2"))
        self.assertGreater(result["summary"]["step_seconds"], 0)

    def test_simulate_a_plan_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            plan = os.path.join(tmp, "plan.json")
            shardplan.plan({"model": "tiny", "gpus": 8, "output": plan})
            self.assertEqual(shardplan.simulate({"plan": plan}),
                             cli_json("simulate", "--plan", plan))
            self.assertEqual(shardplan.simulate({"plan": plan, "cluster": "h100-96gb"}),
                             cli_json("simulate", "--plan", plan, "--cluster", "h100-96gb"))

    def test_sweep(self):
        request = {"model": "tiny", "gpus": 8, "tp": [1, 2], "prefetch": [1],
                   "recompute": ["none", "full"], "micro_batch": [1, 2], "jobs": 1, "top": 3}
        result = shardplan.sweep(request)
        expected = cli_json("sweep", "--model", "tiny", "--gpus", "8", "--tp", "1,2",
                            "--prefetch", "1", "--recompute", "none,full", "--micro-batch", "1,2",
                            "-j", "1", "--top", "3")
        # "seconds" is the sweep's wall-clock time: the only field two runs may differ in.
        self.assertEqual(without(result, "seconds"), without(expected, "seconds"))
        self.assertEqual(len(result["ranking"]), 3)
        self.assertGreater(result["fitting"], 3)

    def test_pack(self):
        request = {"input": PACK_CSV, "algorithm": "exact", "capacity": 12, "alignment": 1}
        result = shardplan.pack(request)
        expected = cli_json("pack", "--input", PACK_CSV, "--algorithm", "exact", "--capacity",
                            "12", "--alignment", "1")
        # Wall-clock times, the only fields two runs may differ in.
        self.assertEqual(without(result, "seconds", "total_seconds"),
                         without(expected, "seconds", "total_seconds"))
        self.assertEqual((result["status"], result["height"]), ("solved", 12))

    def test_collective(self):
        result = shardplan.collective({"op": "all_gather", "bytes": "1GiB", "nodes": 2})
        self.assertEqual(result, cli_json("collective", "--op", "all_gather", "--bytes", "1GiB",
                                          "--nodes", "2"))
        self.assertEqual(result["ranks"], 16)
        # A size may also be an int; --sweep is a bool.
        self.assertEqual(shardplan.collective({"op": "all_reduce", "bytes": 4096, "gpus": 4}),
                         cli_json("collective", "--op", "all_reduce", "--bytes", "4096",
                                  "--gpus", "4"))
        self.assertEqual(shardplan.collective({"op": "reduce_scatter", "sweep": True}),
                         cli_json("collective", "--op", "reduce_scatter", "--sweep"))

    def test_request_keys_are_the_cli_flags(self):
        # A flag added to a command must reach the module too (python/requests.cc).
        for call in (shardplan.describe, shardplan.plan, shardplan.simulate, shardplan.sweep,
                     shardplan.pack, shardplan.collective):
            with self.subTest(command=call.__name__):
                help_text = run_cli(call.__name__, "--help").stdout
                flags = re.findall(r"^  (?:-\w,)?--([a-z0-9-]+)", help_text, re.MULTILINE)
                self.assertIn("json", flags)
                expected = {f.replace("-", "_") for f in flags} - {"help", "json"}
                keys = re.search(r"'_'\):\n  (.*)\n", call.__doc__).group(1).split(", ")
                self.assertEqual(set(keys), expected)

    def test_zoo_lists_and_version(self):
        self.assertEqual(shardplan.models(), cli_json("models"))
        self.assertEqual(shardplan.clusters(), cli_json("clusters"))
        self.assertEqual(shardplan.__version__, cli_json("version")["version"])


class InlineInputTest(unittest.TestCase):
    """2, 3. A model dict, a config dict and a set dict."""

    def test_model_dict(self):
        with open(TINY) as f:
            model = json.load(f)
        self.assertEqual(shardplan.plan({"model": model, "gpus": 8}),
                         cli_json("plan", "--model", TINY, "--gpus", "8"))
        self.assertEqual(shardplan.describe({"model": model}),
                         cli_json("describe", "--model", TINY))
        # A changed dict is planned as changed: the dict is what is read.
        model["num_layers"] = 8
        self.assertEqual(shardplan.describe({"model": model})["model"]["num_layers"], 8)

    def test_config_and_set_dicts(self):
        config = {"micro_batch": 2, "seq_len": 4096, "recompute": "selective",
                  "forward_prefetch": 2}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "config.json")
            with open(path, "w") as f:
                json.dump(config, f)
            expected = cli_json("simulate", "--model", "tiny", "--gpus", "8", "--config", path,
                                "--set", "tp=2", "--set", "recompute=full")
            for request_config in (config, path):
                with self.subTest(config=type(request_config).__name__):
                    result = shardplan.simulate({"model": "tiny", "gpus": 8,
                                                 "config": request_config,
                                                 "set": {"tp": 2, "recompute": "full"}})
                    self.assertEqual(result, expected)
        self.assertEqual((result["config"]["tp"], result["config"]["recompute"],
                          result["config"]["micro_batch"]), (2, "full", 2))

    def test_paths_may_be_pathlike(self):
        import pathlib
        self.assertEqual(shardplan.describe({"model": pathlib.Path(TINY)}),
                         cli_json("describe", "--model", TINY))


class ErrorTest(unittest.TestCase):
    """4. Bad input raises shardplan.Error with the binary's message."""

    def assert_error(self, call, request, message=None, field=None):
        with self.assertRaises(shardplan.Error) as caught:
            call(request)
        error = caught.exception
        self.assertIsInstance(error, ValueError)
        if message is not None:
            self.assertEqual(str(error), message)
        if field is not None:
            self.assertEqual(error.field, field)
        # str() is built from the parts, as InputError's what() is.
        parts = [p for p in (error.file, error.field) if p]
        self.assertEqual(str(error), "".join(p + ": " for p in parts) + error.reason)
        return error

    def test_unknown_model(self):
        self.assert_error(shardplan.plan, {"model": "llama-9b"},
                          cli_error("plan", "--model", "llama-9b"), "--model")

    def test_bad_config_field(self):
        self.assert_error(shardplan.plan, {"model": "tiny", "set": {"prefetch": 2}},
                          cli_error("plan", "--model", "tiny", "--set", "prefetch=2"),
                          "prefetch")
        self.assert_error(shardplan.plan, {"model": "tiny", "set": {"recompute": "sometimes"}},
                          cli_error("plan", "--model", "tiny", "--set", "recompute=sometimes"))

    def test_bad_config_dict_field(self):
        # The CLI names its --config file where the request says "config".
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.json")
            with open(path, "w") as f:
                json.dump({"micro_batch": "two"}, f)
            expected = cli_error("plan", "--model", "tiny", "--config", path)
        error = self.assert_error(shardplan.plan,
                                  {"model": "tiny", "config": {"micro_batch": "two"}},
                                  expected.replace(path, "config", 1))
        self.assertEqual(error.file, "config")

    def test_impossible_config(self):
        # tp = 8 does not divide tiny's 4 heads.
        self.assert_error(shardplan.simulate, {"model": "tiny", "gpus": 8, "set": {"tp": 8}},
                          cli_error("simulate", "--model", "tiny", "--gpus", "8",
                                    "--set", "tp=8"), "/tp")

    def test_unknown_request_key(self):
        error = self.assert_error(shardplan.plan, {"model": "tiny", "gpu": 8}, field="gpu")
        self.assertEqual(error.file, "shardplan.plan")
        self.assertIn("unknown request key 'gpu'; did you mean 'gpus'?", str(error))
        # sweep's keys are not plan's.
        error = self.assert_error(shardplan.plan, {"model": "tiny", "top": 3}, field="top")
        self.assertIn("unknown request key 'top'", str(error))

    def test_wrong_types(self):
        cases = [
            (shardplan.plan, {"gpus": "8"}, "gpus", "expected a whole number, got \"8\" (str)"),
            (shardplan.plan, {"gpus": 8.0}, "gpus", "expected a whole number, got 8.0 (float)"),
            (shardplan.plan, {"gpus": True}, "gpus", "expected a whole number, got true (bool)"),
            (shardplan.plan, {"model": 7}, "model", "expected a zoo name or file"),
            (shardplan.plan, {"set": "tp=2"}, "set", None),  # a str is one assignment: fine
            (shardplan.plan, {"set": [2]}, "set", "expected a list of str"),
            (shardplan.sweep, {"tp": ["2"]}, "tp", "expected a list of whole numbers"),
            (shardplan.sweep, {"fp8": 1}, "fp8", "expected True or False, got 1 (int)"),
            (shardplan.pack, {"input": PACK_CSV, "time_limit": "10"}, "time_limit",
             "expected a number"),
            (shardplan.collective, {"op": "all_gather", "bytes": [1]}, "bytes",
             "expected a size"),
            (shardplan.plan, {"set": {"tp": float("nan")}}, "set", "cannot be read as JSON"),
            (shardplan.plan, {"output": {1, 2}}, "output", "cannot be read as JSON"),
        ]
        for call, request, key, reason in cases:
            with self.subTest(request=request):
                if reason is None:
                    call(request)
                    continue
                error = self.assert_error(call, request, field=key)
                self.assertIn(reason, error.reason)
                self.assertTrue(str(error).startswith(f"shardplan.{call.__name__}: {key}: "))
        self.assert_error(shardplan.plan, ["model", "tiny"])
        self.assert_error(shardplan.plan, {1: "tiny"})

    def test_flag_ranges_as_the_cli(self):
        # The CLI's positive_whole_number: the same reason, naming the key for the flag.
        cases = [(shardplan.plan, "gpus", 0), (shardplan.describe, "micro_batch", -1),
                 (shardplan.sweep, "global_batch", 0), (shardplan.collective, "ranks", 0)]
        for call, key, value in cases:
            with self.subTest(key=key):
                flag = "--" + key.replace("_", "-")
                request = {key: value, "op": "all_gather"} if call is shardplan.collective else {
                    key: value}
                args = [call.__name__, flag, str(value)]
                if call is shardplan.collective:
                    args += ["--op", "all_gather"]
                result = run_cli(*args)
                reason = re.fullmatch(r"shardplan: error: " + flag + r": (.*) \(see --help\)\n",
                                      result.stderr)
                self.assertIsNotNone(reason, result.stderr)
                self.assert_error(call, request, f"shardplan.{call.__name__}: {key}: "
                                  + reason.group(1), key)

    def test_missing_files_and_required_keys(self):
        self.assert_error(shardplan.pack, {}, field="input")
        self.assert_error(shardplan.collective, {"bytes": "1GiB"}, field="op")
        self.assert_error(shardplan.plan, {"config": "/no/such/config.json"}, field="config")
        self.assert_error(shardplan.simulate, {"plan": HERE}, field="plan")  # a directory
        self.assert_error(shardplan.simulate, {"plan": TINY, "model": "tiny"}, field="model")

    def test_text_that_is_not_unicode_and_deep_nesting(self):
        # A lone surrogate is a str Python holds but no UTF-8 text: an input error, in the
        # key or in a value; so is nesting past Python's recursion limit.
        self.assert_error(shardplan.plan, {"model": "tiny\ud800"}, field="model")
        self.assert_error(shardplan.plan, {"model\ud800": "tiny"})
        deep = []
        for _ in range(100_000):
            deep = [deep]
        error = self.assert_error(shardplan.plan, {"model": "tiny", "set": deep}, field="set")
        self.assertIn("nested too deeply", error.reason)

    def test_empty_inputs_are_errors_not_the_default_job(self):
        # "" is not "not given": the CLI refuses it, so does the module.
        self.assert_error(shardplan.plan, {"from_megatron": ""}, field="from_megatron")
        self.assert_error(shardplan.plan, {"from_megatron": " \n"}, field="from_megatron")
        for key in ("from_megatron_bridge", "from_torchtitan", "config"):
            with self.subTest(key=key):
                self.assert_error(shardplan.plan, {key: ""}, field=key)

    def test_messages_are_printable_and_bounded(self):
        error = self.assert_error(shardplan.plan, {"model": "\x1b[31m" + "x" * 1_000_000})
        self.assertNotIn("\x1b", str(error))
        self.assertLess(len(str(error)), 5000)

    def test_internal_errors_are_not_input_errors(self):
        self.assertFalse(issubclass(shardplan.Error, RuntimeError))
        self.assertTrue(issubclass(shardplan.Error, ValueError))
        self.assertEqual((shardplan.Error.file, shardplan.Error.field), ("", ""))


class ResourceTest(unittest.TestCase):
    """5. No leaks; 'the GIL is released while the C++ work runs'."""

    def test_no_leak_over_many_calls(self):
        good = {"model": "tiny", "gpus": 8}
        bad_library = {"model": "tiny", "gpus": 8, "set": {"tp": 8}}  # thrown deep in planning
        bad_request = {"model": "tiny", "gpu": 8}  # thrown while reading the request
        text_bytes = len(run_cli("plan", "--model", "tiny", "--gpus", "8", "--json").stdout)

        def fail(request):
            try:
                shardplan.plan(request)
            except shardplan.Error:
                return
            raise AssertionError(f"{request} did not fail")

        def plan_good():
            shardplan.plan(good)

        def plan_bad(i):
            fail(bad_library if i % 2 else bad_request)

        for i in range(200):  # warm-up: caches, allocator arenas, interned strings
            plan_good()
            plan_bad(i)
        # RSS, the whole process: keeping even one copy of plan's JSON text (the smallest
        # thing a good call makes) per call would add 1000 x that; allow half of it, for
        # allocator noise. RSS misses small leaks, which fill the free space earlier calls
        # left, so also: C/C++ heap bytes in use (glibc mallinfo2) and Python's own
        # allocations (tracemalloc), where a leaked exception, message or std::string per
        # call (100 bytes and more) would add 100 KB; allow 32 KiB, for caches and free lists.
        rss_bound, heap_bound = 1000 * text_bytes // 2, 32 * 1024
        for name, call in [("plan", lambda i: plan_good()), ("failing", plan_bad)]:
            with self.subTest(calls=name):
                rss, heap = rss_bytes(), heap_bytes()
                for i in range(1000):
                    call(i)
                rss_growth, heap_growth = rss_bytes() - rss, heap_bytes() - heap
                tracemalloc.start()  # after: its own tables would count as the process's
                python_start = tracemalloc.get_traced_memory()[0]
                for i in range(1000):
                    call(i)
                python_growth = tracemalloc.get_traced_memory()[0] - python_start
                tracemalloc.stop()
                print(f"\n1000 {name} calls: RSS {rss / 2**20:.2f} MiB {rss_growth:+d} B "
                      f"(bound {rss_bound} B); C/C++ heap in use {heap_growth:+d} B; 1000 more: "
                      f"Python allocations {python_growth:+d} B (bound {heap_bound} B each)")
                self.assertLess(rss_growth, rss_bound)
                self.assertLess(heap_growth, heap_bound)
                self.assertLess(python_growth, heap_bound)

    def test_threads_get_the_same_results(self):
        requests = [{"model": "tiny", "gpus": g, "set": {"micro_batch": m}}
                    for g in (4, 8) for m in (1, 2)]
        expected = [shardplan.simulate(r) for r in requests]
        results = [None] * 16

        def work(i):
            results[i] = shardplan.simulate(requests[i % len(requests)])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [expected[i % len(requests)] for i in range(len(results))])

    def test_gil_released_during_a_sweep(self):
        request = {"model": "tiny", "gpus": 8, "jobs": 1}
        start = time.monotonic()
        shardplan.sweep(request)
        alone = time.monotonic() - start
        thread = threading.Thread(target=shardplan.sweep, args=(request,))
        ticks = [time.monotonic()]
        thread.start()
        while thread.is_alive():
            ticks.append(time.monotonic())
        gap = max(b - a for a, b in zip(ticks, ticks[1:]))
        print(f"\nsweep alone {alone:.3f} s; longest pause of this thread meanwhile {gap:.3f} s")
        # Holding the GIL would stop this loop for the whole sweep; released, only for the
        # request's conversion and json.loads of the result.
        self.assertGreater(alone, 0.1)  # the premise: a sweep long enough to see
        self.assertLess(gap, alone / 2)


class StackConfigTest(unittest.TestCase):
    """6. A Megatron-LM command line in, a stack's config text out."""

    MEGATRON = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 176 "
                "--seq-length 1024 --micro-batch-size 1 --global-batch-size 16 --bf16 "
                "--tensor-model-parallel-size 2 --vocab-size 512 --swiglu --normalization RMSNorm "
                "--position-embedding-type rope --untie-embeddings-and-output-weights "
                "--disable-bias-linear --group-query-attention --num-query-groups 2")

    def test_from_megatron_and_emit(self):
        request = {"from_megatron": self.MEGATRON, "cluster": "dgx-h100",
                   "emit": "megatron-args"}
        result = shardplan.plan(request)
        self.assertEqual(result, cli_json("plan", "--from-megatron", self.MEGATRON, "--cluster",
                                          "dgx-h100", "--emit", "megatron-args"))
        self.assertEqual(result["emit"]["format"], "megatron-args")
        self.assertIn("--tensor-model-parallel-size 2", result["emit"]["text"])
        self.assertEqual(result["config"]["tp"], 2)


class UnderMpirun(unittest.TestCase):
    """A launcher started by mpirun: a sweep spreads over the ranks (rank 0 gets the
    result, the others None) and a second sweep in the same process runs alone, since MPI
    cannot start again once finalized."""

    # Each rank writes its own file: mpirun forwards the ranks' stdout in chunks that can
    # splice two ranks' lines into one (seen on a loaded 2-core machine).
    SCRIPT = (
        "import json, os, shardplan\n"
        "out = os.path.join(os.environ['SWEEP_OUT'], os.environ['OMPI_COMM_WORLD_RANK'])\n"
        "request = {'model': 'tiny', 'gpus': 8, 'tp': [1], 'prefetch': [1], "
        "'recompute': ['none'], 'micro_batch': [1, 2], 'jobs': 1}\n"
        "for call in range(2):\n"
        "    r = shardplan.sweep(request)\n"
        "    with open(out, 'a') as f:\n"
        "        f.write(json.dumps([call, None if r is None else r['ranking'][0]['config']]) + '\\n')\n")

    def test_two_sweeps_in_one_mpi_process(self):
        import sys
        import tempfile
        with tempfile.TemporaryDirectory() as out:
            result = subprocess.run(
                ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "SWEEP_OUT",
                 sys.executable, "-c", self.SCRIPT], capture_output=True, text=True, timeout=300,
                env={**os.environ, "SWEEP_OUT": out})
            self.assertEqual(result.returncode, 0, result.stderr)
            text = "".join(open(os.path.join(out, rank)).read() for rank in sorted(os.listdir(out)))
        lines = sorted((json.loads(line) for line in text.splitlines()),
                       key=lambda line: (line[0], line[1] is not None))
        alone = cli_json("sweep", "--model", "tiny", "--gpus", "8", "--tp", "1", "--prefetch", "1",
                         "--recompute", "none", "--micro-batch", "1,2", "-j", "1")
        best = alone["ranking"][0]["config"]
        # first call: one result (rank 0) and one None; second call: both ranks alone.
        self.assertEqual([line for line in lines if line[0] == 0], [[0, None], [0, best]])
        self.assertEqual([line for line in lines if line[0] == 1], [[1, best], [1, best]])


if __name__ == "__main__":
    unittest.main()
