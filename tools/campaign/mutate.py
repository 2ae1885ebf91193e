"""Mutators: turn a good input into a bad one, deterministically from a random.Random.

Every mutator takes (rng, data: bytes) and returns (bytes, description). The byte-level
ones work on any input; the structure-aware ones (JSON, TOML, CSV, shell, text tables)
parse what they can and fall back to a byte-level mutation when the seed does not parse,
so each input kind can list the mutators that suit it.
"""

from __future__ import annotations

import json
import re

# Numbers at the edges of the types a reader might hold them in, and past them.
BOUNDARY_NUMBERS = (
    "0", "-1", "1", "2", "-0",
    "2147483647", "2147483648", "-2147483649", "4294967296",
    "9007199254740993",  # 2^53 + 1: the first integer a double cannot hold
    "9223372036854775807", "9223372036854775808",  # 2^63 - 1, 2^63
    "-9223372036854775808", "-9223372036854775809",
    "18446744073709551616",  # 2^64
    "1e308", "-1e308", "1e-309", "1e-300", "1e30", "1e-30", "1e999", "-1e999",
    "0.5", "1.5", "3.0000001",
)
# Text a careless number parser might take for a number.
NUMBER_LIKE_TEXT = ("NaN", "nan", "Infinity", "-Infinity", "inf", "0x10", "1_000", "١٢",
                    "", " ", "1e", "--1", "+5", "1,5", "true")
INVALID_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                b"\xc0\xaf", b"\x80")
BOM = b"\xef\xbb\xbf"
# How a mutation that gives a JSON or TOML key twice says so: every reader refuses that
# (docs/user-guide.md, Exit codes and errors), so exit 0 on it is a silent choice.
DUPLICATE_KEY = "key given twice"
# Sizes of "huge" values: large enough to find quadratic work and unbounded copies, small
# enough that a case stays within its time limit when the reader is linear.
HUGE_SIZES = (10_000, 100_000, 1_000_000, 4_000_000)


def boundary_number(rng) -> str:
    return rng.choice(BOUNDARY_NUMBERS)


def _span(rng, n):
    if n == 0:
        return 0, 0
    a = rng.randrange(n)
    length = min(n - a, max(1, int(rng.expovariate(1 / 64))))
    return a, a + length


# --- byte level -------------------------------------------------------------------------

def flip_bits(rng, data):
    if not data:
        return b"\x00", "empty input given one NUL byte"
    out = bytearray(data)
    count = rng.choice((1, 1, 2, 8, 64))
    for _ in range(count):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out), f"{count} bit(s) flipped"


def truncate(rng, data):
    if not data:
        return data, "empty input kept empty"
    at = rng.randrange(len(data))
    return data[:at], f"truncated at byte {at} of {len(data)}"


def duplicate_range(rng, data):
    a, b = _span(rng, len(data))
    times = rng.choice((1, 2, 10, 1000))
    return data[:b] + data[a:b] * times + data[b:], f"bytes {a}-{b} repeated {times} more time(s)"


def delete_range(rng, data):
    a, b = _span(rng, len(data))
    return data[:a] + data[b:], f"bytes {a}-{b} deleted"


def insert_special(rng, data):
    choice = rng.randrange(6)
    at = rng.randrange(len(data) + 1)
    if choice == 0:
        return data[:at] + b"\x00" + data[at:], f"NUL inserted at {at}"
    if choice == 1:
        return BOM + data, "UTF-8 byte-order mark prepended"
    if choice == 2:
        return data[:at] + BOM + data[at:], f"byte-order mark inserted at {at}"
    if choice == 3:
        return data.replace(b"\n", b"\r\n"), "line ends made CRLF"
    if choice == 4:
        return data[:at] + b"\r" + data[at:], f"lone CR inserted at {at}"
    bad = rng.choice(INVALID_UTF8)
    return data[:at] + bad + data[at:], f"invalid UTF-8 {bad!r} inserted at {at}"


def huge_repeat(rng, data):
    a, b = _span(rng, len(data))
    piece = data[a:b] or b"9"
    size = rng.choice(HUGE_SIZES)
    times = max(1, size // len(piece))
    return data[:b] + piece * times + data[b:], f"bytes {a}-{b} repeated to {len(piece) * times} bytes"


def random_bytes(rng, data):
    size = rng.choice((1, 16, 4096, 1 << 20))
    return rng.randbytes(size), f"replaced by {size} random bytes"


BYTE_MUTATORS = (flip_bits, truncate, duplicate_range, delete_range, insert_special,
                 huge_repeat, random_bytes)

# --- numbers anywhere in text -----------------------------------------------------------

NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def replace_number(rng, data):
    """A number token of any text replaced by a boundary value (logs, scripts, CSV)."""
    matches = list(NUMBER.finditer(data))
    if not matches:
        return insert_special(rng, data)
    count = 1 if rng.random() < 0.7 else min(len(matches), rng.choice((2, 5, 50)))
    chosen = sorted(rng.sample(matches, count), key=lambda m: m.start(), reverse=True)
    out = data
    values = []
    for m in chosen:
        value = boundary_number(rng) if rng.random() < 0.85 else rng.choice(NUMBER_LIKE_TEXT)
        values.append(value)
        out = out[:m.start()] + value.encode() + out[m.end():]
    first = chosen[-1]
    return out, (f"{count} number(s) replaced, e.g. {first.group().decode()!r} at byte "
                 f"{first.start()} -> {values[-1]!r}")


# --- JSON -------------------------------------------------------------------------------

class _Placeholders:
    """Raw JSON text (1e999, NaN, duplicate keys, deep nesting) that json.dumps cannot
    write: a unique string stands in for it, replaced in the dumped text."""

    def __init__(self):
        self.raw = {}

    def value(self, text: str) -> str:
        token = f"@@campaign-raw-{len(self.raw)}@@"
        self.raw[json.dumps(token)] = text
        return token

    def key(self, name: str) -> str:
        token = f"@@campaign-key-{len(self.raw)}@@"
        self.raw[json.dumps(token)] = json.dumps(name)
        return token

    def render(self, document, compact=False) -> bytes:
        text = json.dumps(document, indent=None if compact else 1, ensure_ascii=False)
        for token, raw in self.raw.items():
            text = text.replace(token, raw, 1)
        return text.encode("utf-8", errors="surrogatepass")


def _random_node(rng, document, prefer_leaf: float):
    """A random (container, key, path) by descending from the root: O(depth) on any size."""
    parent, key, node, path = None, None, document, ""
    while isinstance(node, (dict, list)) and node:
        if parent is not None and rng.random() > prefer_leaf:
            break
        keys = list(node.keys()) if isinstance(node, dict) else range(len(node))
        k = rng.choice(list(keys)) if isinstance(node, dict) else rng.randrange(len(node))
        parent, key, node = node, k, node[k]
        path += f"/{k}"
    return parent, key, path


def _deep(rng, inner: str) -> str:
    depth = rng.choice((100, 1000, 10_000, 100_000))
    if rng.random() < 0.5:
        return "[" * depth + inner + "]" * depth
    return '{"a":' * depth + inner + "}" * depth


# In-type edges: a reader that checks types but not ranges takes these.
INT_EDGES = (0, -1, 1, 2, 3, 7, 2**20, 2**24 + 1, 2**31 - 1, 2**31, 2**32, 2**40, 2**50,
             2**53 + 1, 2**62, 2**62 + 1, 2**63 - 1, -(2**63))
FLOAT_EDGES = (0.0, -0.0, 1e-300, 5e-324, 1e-30, 1e-9, 0.999999, 1.000001, 1e9, 1e17, 1e30,
               1e300, 1.7976931348623157e308, -1.0, -1e-300)


def _same_type_edge(rng, value):
    """An edge value of the number's own type, or the number scaled by a power of ten."""
    if rng.random() < 0.35:
        scaled = value * 10 ** rng.choice((-12, -6, -3, 3, 6, 9, 12, 18))
        if isinstance(value, int):
            scaled = int(scaled)
        return scaled, f"scaled to {scaled!r}"
    if isinstance(value, int):
        new = rng.choice(INT_EDGES)
    else:
        new = rng.choice(FLOAT_EDGES)
    return new, f"-> {new!r}"


def _mutate_json_value(rng, raw: _Placeholders, parent, key, value):
    """A replacement for one value and what was done."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.6:
        return _same_type_edge(rng, value)
    op = rng.randrange(12)
    if op <= 3:
        text = boundary_number(rng) if rng.random() < 0.8 else rng.choice(
            ("NaN", "Infinity", "-Infinity", "1e999", "-0.0", "1E400"))
        return raw.value(text), f"-> {text}"
    if op == 4:  # the other types
        new = rng.choice(("text", "", True, None, [], {}, [value], {"value": value}, "1"))
        return new, f"-> {json.dumps(new)[:40]}"
    if op == 5:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            new = str(value) if rng.random() < 0.5 else rng.choice(NUMBER_LIKE_TEXT)
            return new, f"number -> string {new!r}"
        return raw.value(boundary_number(rng)), "-> a number"
    if op == 6:
        size = rng.choice(HUGE_SIZES)
        return "x" * size, f"-> a string of {size} characters"
    if op == 7:
        inner = json.dumps(value) if value is not None else "1"
        return raw.value(_deep(rng, inner if len(inner) <= 1000 else "1")), "nested deep"
    if op == 8:
        new = [] if isinstance(value, list) or rng.random() < 0.5 else {}
        return new, f"-> {json.dumps(new)}"
    if op == 9 and isinstance(value, list) and value:
        times = rng.choice((2, 100, 10_000, 100_000))
        return value * times if len(value) * times <= 400_000 else value * 2, f"array repeated x{times}"
    if op == 10 and isinstance(value, str):
        bad = rng.choice(("\x00", "\x1b[31m", "\ufeff", "\ud800", "é" * 3, "\r\n", "../" * 50))
        return value + bad, f"string + {bad[:12]!r}"
    return raw.value(rng.choice(("-1", "0", "1e308", "-1e308", "1e-309"))), "-> an edge number"


def json_mutation(rng, data):
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return rng.choice(BYTE_MUTATORS)(rng, data)
    raw = _Placeholders()
    count = 1 if rng.random() < 0.75 else rng.choice((2, 3, 10))
    done = []
    for _ in range(count):
        parent, key, path = _random_node(rng, document, prefer_leaf=0.85)
        if parent is None:  # a scalar or empty document: wrap it
            document = {"value": document} if rng.random() < 0.5 else [document, document]
            done.append("document wrapped")
            continue
        op = rng.random()
        if isinstance(parent, dict) and op < 0.12:
            del parent[key]
            done.append(f"{path} dropped")
        elif isinstance(parent, dict) and op < 0.22:
            parent[raw.key(key)] = _mutate_json_value(rng, raw, parent, key, parent[key])[0]
            done.append(f"{path}: {DUPLICATE_KEY}")
        elif isinstance(parent, dict) and op < 0.27:
            parent[rng.choice(("unknown_field", "Bytes", key + "_", ""))] = 1
            done.append(f"unknown key beside {path}")
        elif isinstance(parent, list) and op < 0.15:
            parent.insert(key, parent[key])
            done.append(f"{path} duplicated")
        elif isinstance(parent[key], str) and op < 0.5:
            # Another string of the same document: a valid name in the wrong place (an op's
            # kind, a strategy, a dtype), which type checks cannot refuse.
            other = _other_string(rng, document, parent[key])
            if other is not None:
                parent[key] = other
                done.append(f"{path} -> {other[:40]!r} (from elsewhere in the file)")
            else:
                parent[key], what = _mutate_json_value(rng, raw, parent, key, parent[key])
                done.append(f"{path} {what}")
        else:
            parent[key], what = _mutate_json_value(rng, raw, parent, key, parent[key])
            done.append(f"{path} {what}")
    return raw.render(document, compact=len(data) > (2 << 20)), "; ".join(done)[:300]


def _other_string(rng, document, current):
    for _ in range(30):
        parent, key, _ = _random_node(rng, document, prefer_leaf=1.0)
        value = parent[key] if parent is not None else None
        if isinstance(value, str) and value != current and not value.startswith("@@campaign-"):
            return value
    return None


# --- TOML (torchtitan) ------------------------------------------------------------------

TOML_KEY = re.compile(rb"^(\s*)([A-Za-z0-9_.\"-]+)(\s*=\s*)(.*?)\s*$")


def toml_mutation(rng, data):
    lines = data.split(b"\n")
    keyed = [i for i, line in enumerate(lines) if TOML_KEY.match(line)]
    tables = [i for i, line in enumerate(lines) if line.strip().startswith(b"[")]
    if not keyed:
        return rng.choice(BYTE_MUTATORS)(rng, data)
    i = rng.choice(keyed)
    m = TOML_KEY.match(lines[i])
    key = m.group(2).decode(errors="replace")
    op = rng.randrange(10)
    if op <= 3:
        value = boundary_number(rng).encode()
        what = f"{key} = {value.decode()}"
    elif op == 4:
        value = rng.choice((b'"text"', b'""', b"true", b"[]", b"{}", b"[1, \"a\"]", b"nan", b"inf",
                            b'"int8"', b"1979-05-27T07:32:00Z", b"'''multi\nline'''"))
        what = f"{key} = {value.decode()!r}"
    elif op == 5:
        depth = rng.choice((100, 10_000, 100_000))
        value = b"[" * depth + b"1" + b"]" * depth
        what = f"{key} nested {depth} deep"
    elif op == 6:
        size = rng.choice(HUGE_SIZES)
        value = b'"' + b"x" * size + b'"'
        what = f"{key} = a string of {size}"
    elif op == 7:
        # Given again with another value: a TOML reader must refuse any repeat, a Bridge
        # reader one that disagrees.
        other = m.group(1) + m.group(2) + m.group(3) + boundary_number(rng).encode()
        lines.insert(i + 1, other)
        return b"\n".join(lines), f"{key}: {DUPLICATE_KEY}"
    elif op == 8:
        del lines[i]
        return b"\n".join(lines), f"{key} dropped"
    else:
        if tables and rng.random() < 0.5:
            t = rng.choice(tables)
            lines.append(lines[t])
            return b"\n".join(lines), f"table {lines[t].decode(errors='replace')}: {DUPLICATE_KEY}"
        value = b'"\\q\\u00"' if rng.random() < 0.5 else b'"unterminated'
        what = f"{key} = a bad string"
    lines[i] = m.group(1) + m.group(2) + m.group(3) + value
    return b"\n".join(lines), what


# --- CSV (MiniMalloc buffer tables) -----------------------------------------------------

def csv_mutation(rng, data):
    lines = data.split(b"\n")
    if len(lines) < 2:
        return rng.choice(BYTE_MUTATORS)(rng, data)
    op = rng.randrange(9)
    row = rng.randrange(1, max(2, len(lines) - 1))
    if op <= 3:
        fields = lines[row].split(b",")
        col = rng.randrange(len(fields))
        value = boundary_number(rng) if op <= 2 else rng.choice(NUMBER_LIKE_TEXT)
        fields[col] = value.encode()
        lines[row] = b",".join(fields)
        return b"\n".join(lines), f"row {row} column {col} -> {value!r}"
    if op == 4:
        lines.insert(row, b"")
        return b"\n".join(lines), f"blank line before row {row}"
    if op == 5:
        lines[row] += b"," + boundary_number(rng).encode()
        return b"\n".join(lines), f"row {row} given an extra column"
    if op == 6:
        lines[row] = lines[row].rsplit(b",", 1)[0]
        return b"\n".join(lines), f"row {row} missing its last column"
    if op == 7:
        times = rng.choice((100, 10_000, 200_000))
        body = [line for line in lines[1:] if line.strip()]
        lines = lines[:1] + (body * (times // max(1, len(body)) + 1))[:times]
        return b"\n".join(lines), f"{times} rows (ids repeated)"
    header = lines[0].split(b",")
    rng.shuffle(header)
    lines[0] = b",".join(header)
    return b"\n".join(lines), "header columns shuffled"


# --- shell (Megatron command lines and launch scripts) ----------------------------------

SHELL_FLAG_VALUE = re.compile(rb"(--[A-Za-z0-9_-]+)([ =]+)([^\s\\\"')]+)")
SHELL_ASSIGN = re.compile(rb"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)


def shell_mutation(rng, data):
    op = rng.randrange(12)
    flags = list(SHELL_FLAG_VALUE.finditer(data))
    assigns = list(SHELL_ASSIGN.finditer(data))
    if op <= 3 and flags:
        m = rng.choice(flags)
        value = boundary_number(rng) if op <= 2 else rng.choice(NUMBER_LIKE_TEXT + ("''", '""'))
        out = data[:m.start(3)] + value.encode() + data[m.end(3):]
        return out, f"{m.group(1).decode()} {m.group(3).decode(errors='replace')} -> {value!r}"
    if op == 4 and flags:
        m = rng.choice(flags)
        return data[:m.start()] + data[m.end():], f"{m.group(1).decode()} dropped"
    if op == 5 and flags:
        m = rng.choice(flags)
        return data + b" " + m.group(0) + b" " + m.group(0), f"{m.group(1).decode()} given twice more"
    if op == 6:
        count = rng.choice((1, 1000, 100_000))
        extra = b" ".join(b"--unknown-flag-%d %d" % (i, i) for i in range(count))
        return data.rstrip(b"\n") + b" " + extra + b"\n", f"{count} unknown flags appended"
    if op == 7 and assigns:
        m = rng.choice(assigns)
        name = m.group(2)
        doubling = rng.choice((10, 30, 64))
        growth = b"\n".join([name + b'="$' + name + b" $" + name + b'"'] * doubling)
        return data[:m.end()] + b"\n" + growth + data[m.end():], \
            f"${name.decode()} doubled {doubling} times"
    if op == 8:
        depth = rng.choice((100, 10_000))
        nested = b"${X:-" * depth + b"8" + b"}" * depth
        return data.replace(b"--num-layers", b"--num-layers " + nested + b" --ignored", 1) \
            if b"--num-layers" in data else data + b" --num-layers " + nested, \
            f"a default nested {depth} deep"
    if op == 9:
        piece = rng.choice((b'"', b"'", b"$(", b"`", b"${", b"\\", b"$((1/0))", b"$((2**63))",
                            b"${1:-}", b"$UNSET_VARIABLE", b"eval $X", b"'$'\\x01'"))
        at = rng.randrange(len(data) + 1)
        return data[:at] + piece + data[at:], f"{piece.decode(errors='replace')!r} inserted at {at}"
    if op == 10 and assigns:
        m = rng.choice(assigns)
        value = rng.choice((boundary_number(rng).encode(), b"", b'"', b"$(( 1 << 70 ))",
                            b"x" * rng.choice(HUGE_SIZES)))
        return data[:m.start(3)] + value + data[m.end(3):], \
            f"{m.group(2).decode()}= -> {value[:30]!r}"
    return replace_number(rng, data)


# --- nccl-tests logs and other whitespace tables ----------------------------------------

def table_mutation(rng, data):
    lines = data.split(b"\n")
    rows = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(b"#")]
    op = rng.randrange(6)
    if op <= 1 or not rows:
        return replace_number(rng, data)
    i = rng.choice(rows)
    if op == 2:
        times = rng.choice((100, 1000, 2048, 5000, 70_000))
        lines[i:i + 1] = [lines[i]] * times
        return b"\n".join(lines), f"row {i} repeated to {times} rows"
    if op == 3:
        fields = lines[i].split()
        if fields:
            del fields[rng.randrange(len(fields))]
        lines[i] = b" ".join(fields)
        return b"\n".join(lines), f"row {i} lost a column"
    if op == 4:
        lines[i] = lines[i] + b" " + b"9" * rng.choice((30, 400, 40_000))
        return b"\n".join(lines), f"row {i} given a long extra field"
    comment = [j for j, line in enumerate(lines) if line.lstrip().startswith(b"#")]
    if comment:
        j = rng.choice(comment)
        lines[j] = lines[j] + b" x" * rng.choice((10, 20_000))
        return b"\n".join(lines), f"comment line {j} made long"
    return replace_number(rng, data)


def has_duplicate_key(data) -> bool:
    """Whether a JSON document, or TOML-like key = value lines, really gives a key twice
    (a later mutation of the same case may have dropped one of the two)."""
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith(("{", "[")):
        class Duplicate(Exception):
            pass

        def pairs(items):
            keys = [k for k, _ in items]
            if len(keys) != len(set(keys)):
                raise Duplicate()
            return dict(items)
        try:
            json.loads(text, object_pairs_hook=pairs)
            return False
        except Duplicate:
            return True
        except (ValueError, RecursionError):
            if text.lstrip().startswith("{"):
                return False  # not JSON: the reader refuses it for that
    seen, table = set(), ""  # TOML tables, or Bridge's cfg.x.y = v lines
    for line in data.split(b"\n"):
        stripped = line.strip()
        if stripped.startswith(b"["):
            table = stripped.decode(errors="replace")
            if ("table", table) in seen:
                return True
            seen.add(("table", table))
            continue
        m = TOML_KEY.match(line)
        if m:
            key = (table, m.group(2))
            if key in seen:
                return True
            seen.add(key)
    return False
