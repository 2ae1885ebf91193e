"""The campaign's classifier on hand-made outcomes, its mutators and its reproducer
quoting. python3 -m unittest discover -s tools/campaign -p '*_test.py'"""

import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import campaign  # noqa: E402
import classify  # noqa: E402
import kinds  # noqa: E402
import mutate  # noqa: E402
from classify import Outcome, classify as run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def err(text):
    return text.encode("utf-8", errors="surrogateescape")


def summary(**fields):
    base = {"step_seconds": 0.5, "mfu": 0.4, "peak_allocated_bytes": 1 << 30,
            "tflops_per_gpu": 300.0, "critical_path": {"compute": 0.4, "all_gather": 0.01}}
    base.update(fields)
    return json.dumps({"model": "tiny", "summary": base}).encode()


class ClearErrors(unittest.TestCase):
    def test_one_line_naming_the_file(self):
        v = run(Outcome(1, stderr=err("shardplan: error: plan.json: /ops/3/bytes: must be at most 2^50, got -1\n"),
                        subjects=("plan.json",)))
        self.assertEqual(v.cls, "clear-error")

    def test_cli11_code_naming_the_flag(self):
        v = run(Outcome(105, stderr=err("shardplan: error: --gpus: expected a whole number, got 'abc' (see --help)\n"),
                        subjects=("--gpus",)))
        self.assertEqual(v.cls, "clear-error")

    def test_unknown_command(self):
        v = run(Outcome(2, stderr=err("shardplan: error: unknown command 'simulat' (valid: plan, simulate)\n")))
        self.assertEqual(v.cls, "clear-error")

    def test_warnings_before_the_error_are_not_the_error(self):
        text = ("shardplan: warning: run.sh: not Megatron-LM arguments, left out: --foo\n"
                "shardplan: note: run.sh: 3 argument(s) with no effect\n"
                "shardplan: error: run.sh: --num-layers: is required\n")
        self.assertEqual(run(Outcome(1, stderr=err(text), subjects=("run.sh",))).cls, "clear-error")

    def test_the_launchers_hwloc_line_is_not_the_message(self):
        # Open MPI's hwloc where /sys is not mounted (a chroot): printed before shardplan runs.
        text = ("[hwloc/linux] failed to find sysfs cpu topology directory, aborting linux discovery.\n"
                "shardplan: error: plan.json: segment 999 out of range\n")
        v = run(Outcome(1, stderr=err(text), under_mpirun=True, subjects=("plan.json",)))
        self.assertEqual(v.cls, "clear-error")
        # Anything else before the error still is.
        v = run(Outcome(1, stderr=err("[hwloc] x\n" + text.split("\n", 1)[1]),
                        under_mpirun=True, subjects=("plan.json",)))
        self.assertEqual(v.cls, "unclear")

    def test_a_rank_of_execute_says_which(self):
        v = run(Outcome(1, stderr=err("shardplan: error (rank 1): plan.json: segment 999 out of range\n"),
                        under_mpirun=True, subjects=("plan.json",)))
        self.assertEqual(v.cls, "clear-error")

    def test_a_json_path_names_a_field(self):
        v = run(Outcome(1, stderr=err("shardplan: error: config (with flags): /tp: must be positive, got 0\n")))
        self.assertEqual(v.cls, "clear-error")

    def test_a_name_that_is_not_utf8_is_named_escaped(self):
        v = run(Outcome(1, stderr=err("shardplan: error: \\xFF: cannot open file: No such file\n"),
                        subjects=("--from-megatron", "\udcff")))
        self.assertEqual(v.cls, "clear-error", v.reason)

    def test_a_long_name_shortened_by_its_ends_is_named(self):
        v = run(Outcome(1, stderr=err("shardplan: error: nnnnn…(300 bytes in all)…nnnnn: cannot "
                                      "write the file (rename over it): File name too long\n")))
        self.assertEqual(v.cls, "clear-error", v.reason)

    def test_a_run_as_long_as_asked_is_no_hang(self):
        v = run(Outcome(-9, timed_out=True, long_by_request="--steps 100000 asks for a long run"))
        self.assertEqual(v.cls, "sane")

    def test_an_escaped_byte_is_printable(self):
        v = run(Outcome(1, stderr=err("shardplan: error: x.csv: line 1, column \\u{FEFF}id: unknown column\n")))
        self.assertEqual(v.cls, "clear-error")


class UnclearErrors(unittest.TestCase):
    def check(self, stderr, contains, rc=1, subjects=("input.json",), mpirun=False):
        v = run(Outcome(rc, stderr=err(stderr) if isinstance(stderr, str) else stderr,
                        subjects=subjects, under_mpirun=mpirun))
        self.assertEqual(v.cls, "unclear", v.reason)
        self.assertIn(contains, v.reason)

    def test_nlohmann_text(self):
        self.check("shardplan: error: input.json: [json.exception.parse_error.101] parse error\n",
                   "[json.exception")

    def test_cli11_could_not_convert(self):
        self.check("shardplan: error: Could not convert: --jobs = 2147483648\n", "Could not convert",
                   rc=104, subjects=("--jobs",))

    def test_std_text(self):
        self.check("shardplan: error: input.json: basic_string::_M_create\n", "basic_string")

    def test_raw_control_byte(self):
        self.check("shardplan: error: input.json: bad value 'a\x1b[31m'\n", "control byte")

    def test_raw_bom(self):
        self.check("shardplan: error: input.csv: column \ufeffid\n", "byte-order mark",
                   subjects=("input.csv",))

    def test_invalid_utf8(self):
        self.check(b"shardplan: error: input.json: got '\xff\xfe'\n", "not UTF-8")

    def test_too_long(self):
        self.check("shardplan: error: input.json: unknown field '" + "x" * 2000 + "'\n", "characters")

    def test_many_lines(self):
        self.check("shardplan: error: input.json: bad\nline two\nline three\nline four\n", "lines")

    def test_every_rank_prints_it(self):
        line = "shardplan: error: input.json: /tp: must be positive\n"
        self.check(line + line, "several ranks", mpirun=True)

    def test_names_nothing(self):
        self.check("shardplan: error: value out of range\n", "names neither", subjects=("input.json",))

    def test_no_prefix(self):
        self.check("terminate called after throwing an instance of 'X'\n", "does not start")

    def test_silence(self):
        self.check("", "no message")


class Failures(unittest.TestCase):
    def test_signal(self):
        v = run(Outcome(-11, stderr=b""))
        self.assertEqual((v.cls, v.reason), ("crash", "killed by SIGSEGV"))

    def test_signal_through_mpirun(self):
        self.assertEqual(run(Outcome(139, under_mpirun=True)).cls, "crash")
        self.assertEqual(run(Outcome(136, under_mpirun=True)).reason, "killed by SIGFPE")

    def test_exit_139_without_mpirun_is_no_signal(self):
        self.assertEqual(run(Outcome(139)).reason, "unexpected exit code 139")

    def test_internal_error(self):
        v = run(Outcome(3, stderr=err("shardplan: internal error: vector::_M_range_check\n")))
        self.assertEqual(v.cls, "crash")

    def test_sanitizer(self):
        text = "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
        self.assertEqual(run(Outcome(1, stderr=err(text))).cls, "crash")
        ub = "plan.cc:10:5: runtime error: signed integer overflow\n"
        self.assertEqual(run(Outcome(0, stderr=err(ub))).cls, "crash")

    def test_sanitizer_memory_limit_is_oom(self):
        text = "==1==ERROR: AddressSanitizer: requested allocation size 0x1000000000 exceeds\n"
        self.assertEqual(run(Outcome(1, stderr=err(text))).cls, "oom")

    def test_timeout_is_a_hang_whatever_else(self):
        self.assertEqual(run(Outcome(-9, timed_out=True)).cls, "hang")

    def test_bad_alloc(self):
        text = "shardplan: internal error: std::bad_alloc\n"
        self.assertEqual(run(Outcome(3, stderr=err(text))).cls, "oom")

    def test_plain_out_of_memory_is_still_oom(self):
        text = "shardplan: error: out of memory: the job is larger than this machine allows\n"
        self.assertEqual(run(Outcome(1, stderr=err(text))).cls, "oom")

    def test_abort_after_bad_alloc(self):
        text = "terminate called after throwing an instance of 'std::bad_alloc'\n"
        self.assertEqual(run(Outcome(-6, stderr=err(text))).cls, "oom")

    def test_integrity_failure(self):
        text = "shardplan: integrity check failed (rank 0): buffer 3 overwritten\n"
        self.assertEqual(run(Outcome(1, stderr=err(text), under_mpirun=True)).cls, "crash")

    def test_damage(self):
        v = run(Outcome(0, postcheck_failures=("'full' was a character device 1,7, is now regular file",)))
        self.assertEqual(v.cls, "damage")

    def test_odd_exit_code(self):
        self.assertEqual(run(Outcome(42)).cls, "crash")


class Results(unittest.TestCase):
    def test_sane(self):
        self.assertEqual(run(Outcome(0, stdout=summary(), expects_json=True)).cls, "sane")

    def test_no_json_asked(self):
        self.assertEqual(run(Outcome(0, stdout=b"a table\n")).cls, "sane")

    def test_mfu_above_one(self):
        v = run(Outcome(0, stdout=summary(mfu=9.8e2), expects_json=True))
        self.assertEqual(v.cls, "absurd")
        self.assertIn("MFU", v.reason)

    def test_mfu_null_is_allowed(self):
        # execute on CPUs reports no MFU (mfu_note says why).
        self.assertEqual(run(Outcome(0, stdout=summary(mfu=None), expects_json=True)).cls, "sane")

    def test_step_of_more_than_a_day(self):
        v = run(Outcome(0, stdout=summary(step_seconds=1e296), expects_json=True))
        self.assertEqual(v.cls, "absurd")

    def test_negative_bytes(self):
        v = run(Outcome(0, stdout=json.dumps({"collectives": [{"bytes": -2.0}]}).encode(),
                        expects_json=True))
        self.assertEqual(v.cls, "absurd")
        self.assertIn("/collectives/0/bytes", v.reason)

    def test_negative_headroom_is_allowed(self):
        doc = {"memory": {"headroom_bytes": -(1 << 30), "fits": False}}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "sane")

    def test_negative_critical_path_time(self):
        v = run(Outcome(0, stdout=summary(critical_path={"compute": -1.0}), expects_json=True))
        self.assertEqual(v.cls, "absurd")

    def test_not_finite(self):
        text = b'{"summary": {"step_seconds": NaN}}'
        self.assertEqual(run(Outcome(0, stdout=text, expects_json=True)).cls, "absurd")

    def test_huge_unnamed_number(self):
        doc = {"constants": [{"name": "x", "after": 1e31}]}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "absurd")

    def test_negative_error_or_r2_is_allowed(self):
        doc = {"checks": [{"worst_relative_error_after": -0.05, "r2": -3.0}]}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "sane")

    def test_group_of_zero(self):
        doc = {"collectives": [{"group_size": 0}]}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "absurd")

    def test_unknown_size_is_minus_one(self):
        # trace import: -1 where the trace does not say (docs/formats.md); below it is wrong.
        doc = {"collectives": [{"group_size": -1, "in_elements": -1, "out_elements": -1, "bytes": 0}]}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "sane")
        doc = {"collectives": [{"group_size": 4, "in_elements": -2}]}
        self.assertEqual(run(Outcome(0, stdout=json.dumps(doc).encode(), expects_json=True)).cls, "absurd")

    def test_output_not_json(self):
        v = run(Outcome(0, stdout=b"table\n", expects_json=True))
        self.assertEqual(v.cls, "absurd")

    def test_exit_zero_on_a_full_device(self):
        v = run(Outcome(0, exit_zero_is_wrong="the output went to a full device"))
        self.assertEqual(v.cls, "absurd")

    def test_noise_beside_a_result(self):
        v = run(Outcome(0, stderr=err("warning: raw \x07 bell\n")))
        self.assertEqual(v.cls, "unclear")


class Mutators(unittest.TestCase):
    SEED = json.dumps({"a": 1, "b": [1, 2.5, "x"], "c": {"d": True, "e": "y"}}).encode()

    def test_deterministic(self):
        for mutator in mutate.BYTE_MUTATORS + (mutate.json_mutation, mutate.replace_number,
                                                mutate.toml_mutation, mutate.csv_mutation,
                                                mutate.shell_mutation, mutate.table_mutation):
            a = mutator(random.Random(7), self.SEED)
            b = mutator(random.Random(7), self.SEED)
            self.assertEqual(a, b, mutator.__name__)
            self.assertIsInstance(a[0], bytes)
            self.assertIsInstance(a[1], str)

    def test_json_mutation_changes_the_document(self):
        changed = sum(mutate.json_mutation(random.Random(i), self.SEED)[0] != self.SEED
                      for i in range(50))
        self.assertGreater(changed, 45)

    def test_raw_numbers_and_duplicate_keys_are_written_as_such(self):
        raw = mutate._Placeholders()
        doc = {"a": raw.value("1e999"), raw.key("a"): 2}
        self.assertEqual(raw.render(doc, compact=True), b'{"a": 1e999, "a": 2}')

    def test_a_duplicate_key_is_seen_only_where_it_is(self):
        self.assertTrue(mutate.has_duplicate_key(b'{"a": {"b": 1, "b": 2}}'))
        self.assertFalse(mutate.has_duplicate_key(b'{"a": {"b": 1}, "b": 2}'))
        self.assertTrue(mutate.has_duplicate_key(b"[job]\nx = 1\nx = 2\n"))
        self.assertFalse(mutate.has_duplicate_key(b"[job]\nx = 1\n[other]\nx = 2\n"))
        self.assertTrue(mutate.has_duplicate_key(b"[job]\n[job]\n"))

    def test_boundaries_include_the_type_edges(self):
        for value in ("2147483648", "9223372036854775808", "9007199254740993", "1e999", "1e-309"):
            self.assertIn(value, mutate.BOUNDARY_NUMBERS)


class Cases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.seeds = kinds.Seeds(REPO, os.path.join(os.path.dirname(REPO), "shared"), {})

    def test_every_kind_makes_the_same_case_from_the_same_seed(self):
        for n, kind in enumerate(kinds.ALL_KINDS):
            a = kinds.make_case(n, kind, campaign.case_rng(1, n), self.seeds)
            b = kinds.make_case(n, kind, campaign.case_rng(1, n), self.seeds)
            self.assertEqual(a, b, kind)
            self.assertEqual(a.argv[0], "shardplan")
            self.assertTrue(a.subjects, kind)

    def test_output_faults_never_name_a_system_device(self):
        for n in range(200):
            case = kinds.output_fault_case(n, random.Random(n), self.seeds)
            self.assertFalse(any(a.startswith("/dev/") for a in case.argv), case.argv)


class Postchecks(unittest.TestCase):
    """What an output fault must leave as it was (campaign.snapshot / postcheck)."""

    def setUp(self):
        import tempfile
        self.folder = tempfile.mkdtemp(prefix="campaign-test-")
        self.addCleanup(lambda: campaign._remove(self.folder))

    def case(self, files, keep):
        return kinds.Case(index=0, kind="output_faults", argv=["shardplan"], files=files, keep=keep)

    def test_a_replaced_link_and_a_changed_input_are_damage(self):
        case = self.case({"in.json": kinds.FileSpec(content=b"{}"),
                          "link": kinds.FileSpec(special=("symlink", "in.json"))}, ("link",))
        campaign.materialize(case, self.folder)
        state = campaign.snapshot(case, self.folder)
        self.assertEqual(campaign.postcheck(state, self.folder), [])
        os.unlink(os.path.join(self.folder, "link"))
        with open(os.path.join(self.folder, "link"), "w") as f:
            f.write("x")
        with open(os.path.join(self.folder, "in.json"), "w") as f:
            f.write("[]")
        failures = campaign.postcheck(state, self.folder)
        self.assertEqual(len(failures), 2, failures)
        self.assertIn("was a symlink to in.json, is now regular file", failures[1])

    def test_a_temporary_file_left_behind(self):
        case = self.case({}, ())
        state = campaign.snapshot(case, self.folder)
        open(os.path.join(self.folder, ".out.123-0.shardplan.tmp"), "w").close()
        self.assertIn("left behind", campaign.postcheck(state, self.folder)[0])

    def test_a_device_node_replaced(self):
        if not campaign.can_make_device_nodes(self.folder):
            self.skipTest("no mknod here")
        case = self.case({"full": kinds.FileSpec(special=("chardev", 1, 7))}, ("full",))
        campaign.materialize(case, self.folder)
        state = campaign.snapshot(case, self.folder)
        os.unlink(os.path.join(self.folder, "full"))
        open(os.path.join(self.folder, "full"), "w").close()
        self.assertEqual(campaign.postcheck(state, self.folder),
                         ["'full' was a character device 1,7, is now regular file"])


class Reproducers(unittest.TestCase):
    def test_quoting_keeps_every_byte(self):
        for arg in ("plain", "with space", "it's", "\x01\x1b[31m", "caf\xe9", "\udcff", "$HOME", ""):
            script = f"printf %s {campaign.shell_quote(arg)}"
            out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
            self.assertEqual(out, os.fsencode(arg), repr(arg))


if __name__ == "__main__":
    unittest.main()
