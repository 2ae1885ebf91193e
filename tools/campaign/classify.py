"""Sorts one run of shardplan on a bad input into a class, with the reason.

The classes, from worst to best:

  crash     killed by a signal (other than the campaign's own timeout kill), exit 3
            ("internal error"), a sanitizer report, an unexpected exit code, or execute's
            integrity check failing on a plan that passed validation
  hang      still running at the time limit
  oom       std::bad_alloc / "out of memory", or a sanitizer's memory limit, under the
            campaign's address-space limit (4 GiB by default: far more than any input
            within docs/formats.md's limits needs)
  damage    an output fault left the file system other than it was (a device node,
            symbolic link or directory replaced, a temporary file left behind)
  absurd    exit 0 with a result that cannot be: a number that is not finite, above
            1e30, negative bytes or times, MFU outside [0, 1], a step of a day or more;
            or exit 0 though the output could not have been written (a full device)
  unclear   an error, but not one a user can act on: several lines of noise, raw control
            bytes or invalid UTF-8, over 1,000 characters, library internals
            ("[json.exception", "std::", "terminate called", CLI11's "Could not
            convert"), the same error from several ranks, or naming neither a file nor a
            flag nor a field
  clear-error  exit 1 or 2 (or CLI11's codes 100-127) with one short "shardplan: error:"
            message that names what is wrong
  sane      exit 0 and every number of the JSON output physical

Everything here is a pure function of an Outcome, so classify_test.py checks it on
hand-made outcomes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import signal as signal_module

CLASSES = ("crash", "hang", "oom", "damage", "absurd", "unclear", "clear-error", "sane")
CLEAN = ("clear-error", "sane")

# A message past this many characters is noise, not a message (the bound).
MAX_MESSAGE_CHARS = 1000
# An error is one line, or a few short ones (the reason, then a hint).
MAX_ERROR_LINES = 3
# 2^62: the largest byte count any reader accepts (docs/formats.md, Limits: pool, buffer
# and capacity bytes); sums of accepted sizes stay below it, so a byte count above it is
# an overflow, not a size.
MAX_BYTES = float(2**62)
# Three centuries: an overflow or a propagated 1e308, not a prediction. A step of days is
# a true answer for a config no one trains (simulate prints llama3.1-405b on one A100 at
# grad_accum 1500 as 41 hours); a timeline file refuses more than a day (traces/timeline.h),
# which simulate --timeline-out says rather than write.
MAX_STEP_SECONDS = 1e10
# Above this, a number is an overflow or a propagated 1e308, not a quantity.
MAX_MAGNITUDE = 1e30
# 10^17 FLOP/s per GPU: the largest dense rate the cluster reader accepts (Rubin Ultra as
# announced, docs/formats.md, Limits) is 10^5 TFLOP/s.
MAX_TFLOPS_PER_GPU = 1e5

# Text that only a library or the C++ runtime writes: a user cannot act on it.
INTERNAL_MARKERS = (
    "[json.exception",
    "basic_string",
    "std::",
    "terminate called",
    "Could not convert",
    "what():",
    "nlohmann",
    "__cxa",
    "vector::_M",
    "stoi",
    "stod",
    "stoll",
    "Assertion `",
    "Segmentation fault",
    "core dumped",
)
SANITIZER_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "UndefinedBehaviorSanitizer",
    "runtime error:",
    "ERROR: ThreadSanitizer",
)
SANITIZER_OOM_MARKERS = (
    "allocation-size-too-big",
    "requested allocation size",
    "hard rss limit exhausted",
    "out of memory: allocator is trying to allocate",
    "rss-limit",
)
OOM_MARKERS = ("bad_alloc", "out of memory", "Cannot allocate memory", "std::length_error")

ERROR_LINE = re.compile(r"^shardplan: (error|integrity check failed)( \(rank \d+\))?: ")
# Lines shardplan prints beside a result or before an error, which are not the error.
NOTE_LINE = re.compile(r"^(shardplan: (warning|note)|warning|note)\b")
FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
# A field named in a message: a JSON path (/ops/3/bytes), a TOML or dotted key
# ([training].steps, cfg.model.num_layers) or a line number.
FIELD = re.compile(r"(?:(?<![\w.])/[A-Za-z_]\w*|\[\w+\]\.\w+|\bcfg(\.\w+)+|\bline \d+)")
FILE_NAME = re.compile(r"[\w-]+\.(json|toml|csv|sh|out|txt|gz|log|html|cmdline)\b"
                       # a long name as messages shorten it: its two ends and its length
                       r"|…\(\d[\d.]* (bytes|kB|MB) in all\)…")


@dataclasses.dataclass
class Outcome:
    """What one run did; everything the classifier looks at."""

    returncode: int  # negative: killed by that signal (subprocess's convention)
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    under_mpirun: bool = False  # mpirun reports a rank's signal as 128 + signal
    expects_json: bool = False  # the command had --json: stdout must be a physical JSON
    subjects: tuple = ()  # files and flags the case made bad: a message should name one
    postcheck_failures: tuple = ()  # what an output fault damaged (see campaign.py)
    exit_zero_is_wrong: str = ""  # why exit 0 cannot be right here (empty: it can)
    long_by_request: str = ""  # why reaching the time limit is what was asked (empty: a hang)


@dataclasses.dataclass
class Verdict:
    cls: str
    reason: str


def signal_of(outcome: Outcome) -> int:
    """The signal that ended the run, or 0."""
    if outcome.returncode < 0:
        return -outcome.returncode
    # mpirun exits 128 + N when a rank was killed by signal N (Open MPI 4.1).
    if outcome.under_mpirun and 128 < outcome.returncode <= 128 + 64:
        return outcome.returncode - 128
    return 0


def signal_name(number: int) -> str:
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _first_line_with(text: str, markers) -> str:
    for line in text.splitlines():
        if any(m in line for m in markers):
            return line.strip()[:200]
    return ""


def classify(outcome: Outcome) -> Verdict:
    err = _text(outcome.stderr)
    if outcome.timed_out:
        if outcome.long_by_request:
            return Verdict("sane", "ran to the time limit: " + outcome.long_by_request)
        return Verdict("hang", "still running at the time limit")
    if outcome.postcheck_failures:
        return Verdict("damage", "; ".join(outcome.postcheck_failures))
    if any(m in err for m in SANITIZER_MARKERS):
        if any(m in err for m in SANITIZER_OOM_MARKERS):
            return Verdict("oom", "sanitizer: " + _first_line_with(err, SANITIZER_OOM_MARKERS))
        return Verdict("crash", "sanitizer: " + _first_line_with(err, SANITIZER_MARKERS))
    sig = signal_of(outcome)
    if sig:
        if any(m in err for m in OOM_MARKERS):
            return Verdict("oom", f"{signal_name(sig)} after " + _first_line_with(err, OOM_MARKERS))
        return Verdict("crash", f"killed by {signal_name(sig)}")
    if any(m in err for m in OOM_MARKERS):
        return Verdict("oom", _first_line_with(err, OOM_MARKERS))
    rc = outcome.returncode
    if rc == 3 or "internal error" in err:
        return Verdict("crash", "internal error: " + _first_line_with(err, ("internal error",)))
    if "integrity check failed" in err:
        return Verdict("crash", "execute's integrity check failed on a plan that validated: "
                       + _first_line_with(err, ("integrity check failed",)))
    if rc == 0:
        return _classify_success(outcome, err)
    # 1 bad input, 2 unknown command, CLI11's parse errors 100-127, 124 execute's
    # watchdog (only within the campaign's time limit when --timeout was made short).
    if rc in (1, 2) or 100 <= rc <= 127:
        problem = message_problem(outcome.stderr, outcome.subjects)
        if problem:
            return Verdict("unclear", problem)
        return Verdict("clear-error", error_lines(err)[0][:200])
    return Verdict("crash", f"unexpected exit code {rc}")


def _classify_success(outcome: Outcome, err: str) -> Verdict:
    if outcome.exit_zero_is_wrong:
        return Verdict("absurd", "exit 0 though " + outcome.exit_zero_is_wrong)
    noise = stderr_noise(outcome.stderr)
    if noise:
        return Verdict("unclear", "beside a result: " + noise)
    if outcome.expects_json:
        try:
            document = json.loads(outcome.stdout.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            return Verdict("absurd", f"--json output is not JSON ({str(error)[:80]})")
        problems = unphysical(document)
        if problems:
            return Verdict("absurd", "; ".join(problems[:3]))
    return Verdict("sane", "")


# What the launcher's own libraries print before shardplan runs, not shardplan's message:
# hwloc where /sys is not mounted (a chroot or a minimal container), as Open MPI starts.
LAUNCHER_LINE = re.compile(r"^\[hwloc/[\w-]+\] ")


def error_lines(err: str) -> list:
    """The lines of an error message, without the warnings and notes before it."""
    lines = [line for line in err.splitlines()
             if line.strip() and not LAUNCHER_LINE.match(line)]
    errors = [line for line in lines if not NOTE_LINE.match(line)]
    return errors or lines or [""]


def _control_problem(text: str) -> str:
    for ch in text:
        code = ord(ch)
        if ch in "\n\t":
            continue
        if code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F:
            return f"echoes a raw control byte ({code:#04x})"
        if ch == "\ufeff":
            return "echoes a raw byte-order mark"
    return ""


def stderr_noise(stderr: bytes) -> str:
    """What makes the text beside a successful result unreadable, or ''."""
    try:
        text = stderr.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid UTF-8 on stderr"
    problem = _control_problem(text)
    if problem:
        return problem
    marker = next((m for m in INTERNAL_MARKERS if m in text), "")
    if marker:
        return f"library internals on stderr ({marker!r})"
    return ""


def message_problem(stderr: bytes, subjects=()) -> str:
    """Why an error message is not one clear message, or '' when it is."""
    try:
        text = stderr.decode("utf-8")
    except UnicodeDecodeError:
        return "the message is not UTF-8 (echoes raw bytes)"
    if not text.strip():
        return "no message at all"
    problem = _control_problem(text)
    if problem:
        return problem
    lines = error_lines(text)
    if not ERROR_LINE.match(lines[0]):
        return "does not start 'shardplan: error:': " + repr(lines[0][:120])
    message = "\n".join(lines)
    if len(message) > MAX_MESSAGE_CHARS:
        return f"{len(message)} characters"
    marker = next((m for m in INTERNAL_MARKERS if m in message), "")
    if marker:
        return f"library internals ({marker!r}): " + repr(lines[0][:160])
    starts = [line for line in lines if ERROR_LINE.match(line)]
    if len(starts) > 1:
        same = len(set(ERROR_LINE.sub("", line) for line in starts)) < len(starts)
        return ("the same error printed by several ranks" if same
                else f"{len(starts)} errors in one message")
    if len(lines) > MAX_ERROR_LINES:
        return f"{len(lines)} lines of message"
    if not names_something(message, subjects):
        return "names neither a file, a flag nor a field: " + repr(lines[0][:160])
    return ""


def names_something(message: str, subjects=()) -> bool:
    body = ERROR_LINE.sub("", message)
    for subject in subjects:
        if not subject:
            continue
        for form in (subject, escaped(subject)):
            base = form.rstrip("/").rsplit("/", 1)[-1]
            if form in body or (len(base) >= 3 and base in body):
                return True
    if "unknown command" in body:
        return True
    return bool(FLAG.search(body) or FIELD.search(body) or FILE_NAME.search(body))


def escaped(text: str) -> str:
    """A name as shardplan's messages print it: bytes that are not UTF-8 as \\xNN."""
    data = text.encode("utf-8", errors="surrogateescape")
    return "".join(
        ch if not 0xDC80 <= ord(ch) <= 0xDCFF else f"\\x{ord(ch) - 0xDC00:02X}"
        for ch in data.decode("utf-8", errors="surrogateescape"))


def _key_rules(key: str, parent: str):
    """(low, high, what) for a number under this key, or None for no bound but 1e30."""
    k = key.lower()
    if k == "mfu":
        # Against the BF16 peak: FP8 GEMMs run at up to twice it (simulate gives 1.07 for
        # llama3.1-405b with FP8 on 64 H100).
        return 0.0, 2.0, "MFU"
    if k == "headroom_bytes":
        return -MAX_BYTES, MAX_BYTES, "bytes"
    if k.endswith("_bytes") or k in ("bytes", "height", "lower_bound", "capacity"):
        return 0.0, MAX_BYTES, "bytes"
    if k.endswith("_seconds") or k == "seconds" or parent == "critical_path":
        return 0.0, MAX_STEP_SECONDS, "seconds"
    if k == "tflops_per_gpu":
        return 0.0, MAX_TFLOPS_PER_GPU, "TFLOP/s per GPU"
    # -1: a collective the trace gives no size or group for (docs/formats.md, step trace).
    if k.endswith("_elements"):
        return -1.0, MAX_MAGNITUDE, "an element count"
    if k == "group_size":
        return -1.0, MAX_MAGNITUDE, "a group size"
    if (k.endswith("_flops") or k.endswith("per_second_per_gpu")
            or k in ("gap_percent", "num_gpus", "ranks", "buffers", "units", "points")):
        return 0.0, MAX_MAGNITUDE, "a count or rate"
    return None


def unphysical(document, limit: int = 5) -> list:
    """Numbers of a --json document that cannot be, as 'path: value (why)'."""
    found = []
    stack = [("", "", "", document)]
    while stack and len(found) < limit:
        path, parent, key, value = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                stack.append((f"{path}/{k}", key, str(k), v))
        elif isinstance(value, list):
            # Arrays take their owner's key (collectives[3].bytes is a byte count).
            for i, v in enumerate(value):
                stack.append((f"{path}/{i}", parent, key, v))
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, (int, float)):
            problem = number_problem(key, parent, value)
            if problem:
                found.append(f"{path}: {value!r} ({problem})")
    return found


def number_problem(key: str, parent: str, value) -> str:
    x = float(value)
    if not math.isfinite(x):
        return "not finite"
    if abs(x) > MAX_MAGNITUDE:
        return "above 1e30"
    rule = _key_rules(key, parent)
    if rule is None:
        return ""
    low, high, what = rule
    if x < low:
        return f"negative {what}" if low == 0 else f"{what} below {low:g}"
    if what == "a group size" and x == 0:
        return "a group of no ranks"
    if x > high:
        return f"{what} above {high:g}"
    return ""
