#!/usr/bin/env python3
"""Generate megatron_flags.json: every CLI flag Megatron-LM's pretrain_gpt.py accepts.

Static analysis only (Python ``ast``); Megatron/torch are never imported.

Usage:
    gen_megatron_flags.py GIT_DIR COMMIT [-o OUT.json]

GIT_DIR is a (bare) git directory of NVIDIA/Megatron-LM; files are read with
``git --git-dir GIT_DIR show COMMIT:PATH``.

What is modelled (megatron/training/arguments.py, megatron/training/argument_utils.py):
  * ``add_megatron_arguments`` -> every ``_add_*`` helper it calls, in order;
  * inside each helper: every ``<x>.add_argument(...)`` call (hand-written flags) and
    every ``ArgumentGroupFactory(Cls, exclude=[...])`` whose ``build_group`` is called
    (generated flags);
  * generated flags replicate ArgumentGroupFactory._build_argparse_kwargs_from_field:
    flag = "--" + name.replace("_", "-"); Optional[X] -> X; list[X] -> nargs '+';
    Literal[...] -> choices; Enum -> choices = member names; bool -> store_true when
    ``default == False`` else store_false with names --no-<name> and --disable-<name>;
    ``metadata={"argparse_meta": {...}}`` is applied last (arg_names, dest, default...);
    fields with init=False or in ``exclude`` get no flag.
  * flags added under an ``if`` (e.g. kitchen) carry a "condition"; flags added by
    pretrain_gpt.py's ``extra_args_provider`` (add_modelopt_args, only when
    nvidia-modelopt is importable) are listed separately under "extra_args_provider_flags".
"""
import argparse
import ast
import json
import subprocess
import sys

ARGS_PY = "megatron/training/arguments.py"
UTILS_PY = "megatron/training/argument_utils.py"
ENTRY_PY = "pretrain_gpt.py"

NONE_ARITY_ACTIONS = {"store_true", "store_false", "store_const", "count",
                      "append_const", "help", "version", "BooleanOptionalAction"}
_NOVALUE = object()


class TypeInferenceError(Exception):
    pass


class Repo:
    def __init__(self, git_dir, commit):
        self.git_dir, self.commit = git_dir, commit
        self._src, self._mods = {}, {}

    def read(self, path):
        if path not in self._src:
            r = subprocess.run(["git", "--git-dir", self.git_dir, "show", f"{self.commit}:{path}"],
                               capture_output=True, text=True)
            self._src[path] = r.stdout if r.returncode == 0 else None
        return self._src[path]

    def module(self, modname):
        if modname in self._mods:
            return self._mods[modname]
        base = modname.replace(".", "/")
        mod = None
        for path, is_pkg in ((base + ".py", False), (base + "/__init__.py", True)):
            src = self.read(path)
            if src is not None:
                mod = Module(self, modname, path, src, is_pkg)
                break
        self._mods[modname] = mod
        return mod


def _walk_toplevel(body):
    """Module-level statements, descending into try/if blocks (conditional imports)."""
    for st in body:
        yield st
        if isinstance(st, ast.Try):
            yield from _walk_toplevel(st.body)
            for h in st.handlers:
                yield from _walk_toplevel(h.body)
            yield from _walk_toplevel(st.orelse)
        elif isinstance(st, ast.If):
            yield from _walk_toplevel(st.body)
            yield from _walk_toplevel(st.orelse)


class Module:
    def __init__(self, repo, name, path, src, is_pkg):
        self.repo, self.name, self.path, self.is_pkg = repo, name, path, is_pkg
        self.tree = ast.parse(src)
        self.classes, self.functions, self.imports, self.consts = {}, {}, {}, {}
        for st in _walk_toplevel(self.tree.body):
            if isinstance(st, ast.ClassDef):
                self.classes[st.name] = st
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[st.name] = st
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                self.imports.update(import_bindings(self, st))
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                v = const_eval(st.value)
                if v is not _NOVALUE:
                    self.consts[st.targets[0].id] = v

    def abs_module(self, level, modname):
        if level == 0:
            return modname
        parts = self.name.split(".")
        if not self.is_pkg:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        return ".".join(parts + ([modname] if modname else []))


def import_bindings(mod, st):
    out = {}
    if isinstance(st, ast.Import):
        for a in st.names:
            if a.asname:
                out[a.asname] = ("module", a.name)
            else:
                out[a.name.split(".")[0]] = ("module", a.name.split(".")[0])
    else:
        src = mod.abs_module(st.level, st.module)
        for a in st.names:
            out[a.asname or a.name] = ("from", src, a.name)
    return out


def resolve(mod, name, local_imports=None, depth=0):
    """Resolve a name in a module: ('class', Module, ClassDef) | ('func', Module, FunctionDef)
    | ('module', modname) | ('external', dotted) | None."""
    if depth > 20 or mod is None:
        return None
    binding = (local_imports or {}).get(name) or mod.imports.get(name)
    if name in mod.classes and not (local_imports and name in local_imports):
        return ("class", mod, mod.classes[name])
    if name in mod.functions and not (local_imports and name in local_imports):
        return ("func", mod, mod.functions[name])
    if binding is None:
        return None
    if binding[0] == "module":
        return ("module", binding[1])
    _, src, orig = binding
    target = mod.repo.module(src)
    if target is None:
        sub = mod.repo.module(src + "." + orig)
        return ("module", src + "." + orig) if sub else ("external", src + "." + orig)
    r = resolve(target, orig, None, depth + 1)
    if r is None:
        sub = mod.repo.module(src + "." + orig)
        return ("module", src + "." + orig) if sub else ("external", src + "." + orig)
    return r


def resolve_expr(mod, node, local_imports=None):
    """Resolve Name / dotted Attribute expressions."""
    if isinstance(node, ast.Name):
        r = resolve(mod, node.id, local_imports)
        if r is None:
            return ("builtin", node.id)
        return r
    if isinstance(node, ast.Attribute):
        base = resolve_expr(mod, node.value, local_imports)
        if base and base[0] == "module":
            m = mod.repo.module(base[1])
            if m is None:
                return ("external", base[1] + "." + node.attr)
            r = resolve(m, node.attr)
            return r if r else ("external", base[1] + "." + node.attr)
        if base and base[0] in ("external", "builtin"):
            return ("external", base[1] + "." + node.attr)
        return ("external", ast.unparse(node))
    return None


def const_eval(node):
    """Evaluate a literal-ish expression (incl. simple arithmetic); _NOVALUE if not literal."""
    try:
        return ast.literal_eval(node)
    except Exception:
        pass
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult, ast.Add, ast.Sub, ast.Div)):
        a, b = const_eval(node.left), const_eval(node.right)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            return {ast.Pow: lambda: a ** b, ast.Mult: lambda: a * b, ast.Add: lambda: a + b,
                    ast.Sub: lambda: a - b, ast.Div: lambda: a / b}[type(node.op)]()
    if isinstance(node, (ast.List, ast.Tuple)):
        vals = [const_eval(e) for e in node.elts]
        if all(v is not _NOVALUE for v in vals):
            return list(vals)
    return _NOVALUE


def jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(jsonable(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and jsonable(x) for k, x in v.items())
    return False


# ----------------------------------------------------------------------------- enums / classes

ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "enum.Enum", "enum.IntEnum",
              "enum.StrEnum", "enum.Flag", "enum.IntFlag"}


def is_enum(mod, cls, depth=0):
    for b in cls.bases:
        txt = ast.unparse(b)
        if txt in ENUM_BASES:
            return True
        r = resolve_expr(mod, b)
        if r and r[0] == "class" and depth < 10 and is_enum(r[1], r[2], depth + 1):
            return True
        if r and r[0] == "external" and r[1].split(".")[-1] in {"Enum", "IntEnum", "StrEnum"}:
            return True
    return False


def enum_members(cls):
    names = []
    for st in cls.body:
        if isinstance(st, ast.Assign):
            for t in st.targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_"):
                    names.append(t.id)
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            names.append(st.target.id)
    return names


# ----------------------------------------------------------------------------- type inference

TYPING_SPECIAL = {"Optional", "Union", "List", "Literal", "Callable", "Tuple", "Dict", "Any",
                  "ContextManager", "Sequence", "Type", "Set", "Iterable", "ClassVar"}


def _typing_name(mod, node):
    """'Optional'/'Union'/... if node denotes a typing special form, else None."""
    r = resolve_expr(mod, node)
    if r and r[0] == "external":
        parts = r[1].split(".")
        if parts[0] in ("typing", "typing_extensions", "collections") and parts[-1] in TYPING_SPECIAL:
            return parts[-1]
    if r and r[0] == "builtin" and r[1] in ("list", "tuple", "dict", "set", "type"):
        return r[1]
    return None


def _union_args(mod, node):
    """Flatten a union into its member nodes, like typing does (None -> 'None')."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_args(mod, node.left) + _union_args(mod, node.right)
    if isinstance(node, ast.Subscript):
        tn = _typing_name(mod, node.value)
        if tn == "Optional":
            return _union_args(mod, node.slice) + ["None"]
        if tn == "Union":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            out = []
            for e in elts:
                out += _union_args(mod, e)
            return out
    if isinstance(node, ast.Constant) and node.value is None:
        return ["None"]
    return [node]


def _dedup(args):
    out, seen = [], set()
    for a in args:
        k = a if isinstance(a, str) else ast.unparse(a)
        if k not in seen:
            seen.add(k)
            out.append(a)
    return out


def extract_type(mod, node):
    """Mirror of ArgumentGroupFactory._extract_type on an annotation AST.
    Returns dict(type=<name>, [nargs], [choices], [enum]) or raises TypeInferenceError."""
    # unions (Optional[X], Union[...], X | None)
    is_union = (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)) or (
        isinstance(node, ast.Subscript) and _typing_name(mod, node.value) in ("Optional", "Union"))
    if is_union:
        args = _dedup(_union_args(mod, node))
        if len(args) == 1:  # typing collapses Union[X] to X
            return extract_type(mod, args[0]) if args[0] != "None" else {"type": "NoneType"}
        if args[1] == "None":
            if args[0] == "None":
                raise TypeInferenceError("Optional[None]")
            return extract_type(mod, args[0])
        raise TypeInferenceError(f"Unions not supported by argparse: {ast.unparse(node)}")

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # string annotation: dataclass field.type is a str -> argparse rejects non-callable type
        return {"type": repr(node.value), "problem": "string annotation (not callable as argparse type)"}

    if isinstance(node, ast.Subscript):
        tn = _typing_name(mod, node.value)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if tn in ("list", "List"):
            if len(elts) == 1:
                kw = extract_type(mod, elts[0])
                kw["nargs"] = "+"
                return kw
            raise TypeInferenceError(f"Multi-type lists not supported by argparse: {ast.unparse(node)}")
        if tn == "Literal":
            vals = [const_eval(e) for e in elts]
            if any(v is _NOVALUE for v in vals):
                raise TypeInferenceError(f"non-literal Literal: {ast.unparse(node)}")
            # typing dedups Literal params
            dv = []
            for v in vals:
                if not any(type(v) is type(x) and v == x for x in dv):
                    dv.append(v)
            types_ = {type(v).__name__ for v in dv}
            if len(types_) != 1:
                raise TypeInferenceError(f"AssertionError: mixed Literal types {ast.unparse(node)}")
            return {"type": types_.pop(), "choices": dv}
        raise TypeInferenceError(f"Unsupported type: {ast.unparse(node)}")

    # bare names / attributes
    tn = _typing_name(mod, node)
    if tn in ("List",):
        raise TypeInferenceError("Multi-type lists not supported by argparse: List")
    if tn in ("Callable", "Tuple", "Dict", "ContextManager", "Sequence", "Type", "Set", "Iterable"):
        raise TypeInferenceError(f"Unsupported type: {ast.unparse(node)}")
    r = resolve_expr(mod, node)
    if r and r[0] == "class" and is_enum(r[1], r[2]):
        return {"type": r[2].name, "enum": r[2].name, "choices": enum_members(r[2])}
    if r and r[0] == "external" and r[1].split(".")[0] in sys.stdlib_module_names:
        # stdlib types (e.g. signal.Signals) can be inspected safely
        import enum, importlib
        modname, _, attr = r[1].rpartition(".")
        try:
            obj = getattr(importlib.import_module(modname), attr)
        except Exception:
            obj = None
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            return {"type": r[1], "enum": r[1], "choices": [m.name for m in obj]}
    return {"type": ast.unparse(node)}


# ----------------------------------------------------------------------------- dataclass fields

class FieldInfo:
    def __init__(self, name, ann, value, mod, owner):
        self.name, self.ann, self.mod, self.owner = name, ann, mod, owner
        self.init = True
        self.default = _NOVALUE          # attribute.default (MISSING -> _NOVALUE)
        self.default_node = None
        self.factory_node = None
        self.meta = None                 # dict key -> AST node
        self.has_default = value is not None
        if value is None:
            return
        if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
            for kw in value.keywords:
                if kw.arg == "default":
                    self.default_node = kw.value
                elif kw.arg == "default_factory":
                    self.factory_node = kw.value
                elif kw.arg == "init":
                    self.init = const_eval(kw.value) is not False
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "argparse_meta":
                            if not isinstance(v, ast.Dict):
                                raise RuntimeError(f"non-literal argparse_meta on {owner}.{name}")
                            self.meta = {kk.value: vv for kk, vv in zip(v.keys, v.values)}
            self.has_default = self.default_node is not None or self.factory_node is not None
        else:
            self.default_node = value

    def attribute_default(self):
        """(python value or _NOVALUE, source text) of attribute.default; MISSING when factory."""
        if self.default_node is None:
            return ("MISSING", "MISSING")
        v = const_eval(self.default_node)
        if v is _NOVALUE and isinstance(self.default_node, ast.Name) and self.default_node.id in self.mod.consts:
            v = self.mod.consts[self.default_node.id]
        return (v, ast.unparse(self.default_node))

    def argparse_default(self):
        if self.factory_node is not None and self.default_node is None:
            f = self.factory_node
            txt = ast.unparse(f) + "()"
            if isinstance(f, ast.Name) and f.id in ("list", "dict", "tuple", "set"):
                return ({"list": [], "dict": {}, "tuple": [], "set": []}[f.id], txt)
            if isinstance(f, ast.Lambda):
                return (const_eval(f.body), "default_factory: " + ast.unparse(f.body))
            return (_NOVALUE, txt)
        return self.attribute_default()


def dataclass_fields(mod, cls, depth=0):
    """Ordered dict name -> FieldInfo, following base classes like dataclasses.fields()."""
    fields = {}
    for b in reversed(cls.bases):
        r = resolve_expr(mod, b)
        if r and r[0] == "class" and depth < 10:
            for k, v in dataclass_fields(r[1], r[2], depth + 1).items():
                fields[k] = v
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            ann_txt = ast.unparse(st.annotation)
            if ann_txt.startswith(("ClassVar", "typing.ClassVar")) or ann_txt in ("KW_ONLY", "dataclasses.KW_ONLY"):
                continue
            fields[st.target.id] = FieldInfo(st.target.id, st.annotation, st.value, mod, cls.name)
    return fields


def fmt_arg(name, prefix=None):
    if prefix:
        name = prefix + "_" + name
    return "--" + name.replace("_", "-")


def meta_value(node, mod=None):
    v = const_eval(node)
    if v is not _NOVALUE:
        return v, True
    if (mod is not None and isinstance(node, ast.ListComp) and len(node.generators) == 1
            and isinstance(node.elt, ast.Attribute) and node.elt.attr == "name"
            and isinstance(node.elt.value, ast.Name) and not node.generators[0].ifs
            and isinstance(node.generators[0].target, ast.Name)
            and node.generators[0].target.id == node.elt.value.id):
        r = resolve_expr(mod, node.generators[0].iter)
        if r and r[0] == "class" and is_enum(r[1], r[2]):
            return enum_members(r[2]), True
    return ast.unparse(node), False


def generated_actions(mod, cls, exclude, where, problems):
    out = []
    for f in dataclass_fields(mod, cls).values():
        if f.name in exclude or not f.init:
            continue
        kw = {"arg_names": [fmt_arg(f.name)], "dest": f.name}
        dval, dtxt = f.argparse_default()
        if f.factory_node is None and f.default_node is None:
            problems.append(f"{cls.name}.{f.name}: no default (factory would call MISSING())")
        kw["default"] = (dval, dtxt)
        try:
            kw.update(extract_type(f.mod, f.ann))
            if kw.get("problem"):
                problems.append(f"{cls.name}.{f.name}: {kw['problem']}")
            if kw["type"] == "bool":
                adef, _ = f.attribute_default()
                is_false = (adef is False or adef == 0) and adef is not _NOVALUE and adef != "MISSING"
                kw["action"] = "store_true" if is_false else "store_false"
                kw.pop("type")
                if kw["action"] == "store_false":
                    kw["arg_names"] = [fmt_arg(f.name, "no"), fmt_arg(f.name, "disable")]
        except TypeInferenceError as e:
            if f.meta is None:
                problems.append(f"{cls.name}.{f.name}: TypeInferenceError without metadata -> "
                                f"build_group would raise: {e}")
                continue
            kw["type_inference_failed"] = str(e)
        if f.meta is not None:
            for k, node in f.meta.items():
                val, lit = meta_value(node, f.mod)
                if k == "arg_names":
                    kw["arg_names"] = val
                elif k == "default":
                    kw["default"] = (val if lit else _NOVALUE, ast.unparse(node))
                elif k == "type":
                    kw["type"] = ast.unparse(node)
                    kw.pop("enum", None)
                elif k == "choices":
                    kw["choices"] = val if lit else None
                    if not lit:
                        kw["choices_expr"] = ast.unparse(node)
                else:
                    kw[k] = val
        kw["origin"] = f"{where}: {f.owner}.{f.name} ({f.mod.path})"
        field_files.add(f.mod.path)
        out.append(kw)
    return out


# ----------------------------------------------------------------------------- hand-written

def handwritten_action(call, mod, where, condition):
    opts = []
    for a in call.args:
        v = const_eval(a)
        if isinstance(v, str):
            opts.append(v)
    kw = {"arg_names": opts}
    explicit = {k.arg: k.value for k in call.keywords if k.arg}
    action = None
    if "action" in explicit:
        v, lit = meta_value(explicit["action"])
        action = v if lit else ast.unparse(explicit["action"]).split(".")[-1]
        kw["action"] = action
    if "dest" in explicit:
        kw["dest"] = const_eval(explicit["dest"])
    else:
        longs = [o for o in opts if o.startswith("--")]
        d = (longs or opts)[0].lstrip("-")
        kw["dest"] = d.replace("-", "_")
    if "default" in explicit:
        v = const_eval(explicit["default"])
        kw["default"] = (v, ast.unparse(explicit["default"]))
    else:  # argparse implicit default
        kw["default"] = ({"store_true": False, "store_false": True}.get(action), "<implicit>")
    if "type" in explicit:
        kw["type"] = ast.unparse(explicit["type"])
    if "nargs" in explicit:
        kw["nargs"] = const_eval(explicit["nargs"])
    if "choices" in explicit:
        v = const_eval(explicit["choices"])
        kw["choices"] = v if v is not _NOVALUE else None
        if v is _NOVALUE:
            kw["choices_expr"] = ast.unparse(explicit["choices"])
    if "help" in explicit and ast.unparse(explicit["help"]) == "argparse.SUPPRESS":
        kw["hidden"] = True
    if "const" in explicit:
        kw["const"] = const_eval(explicit["const"])
    if action == "BooleanOptionalAction":
        kw["arg_names"] = opts + ["--no-" + o[2:] for o in opts if o.startswith("--")]
    kw["origin"] = where
    if condition:
        kw["condition"] = condition
    return kw


def _local_imports(mod, fn):
    li = {}
    for st in ast.walk(fn):
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            li.update(import_bindings(mod, st))
    return li


def scan_function(mod, fn, problems, seen=None, condition=None):
    """Collect actions from one _add_* helper (recursing into helpers it calls)."""
    seen = seen if seen is not None else set()
    key = (mod.path, fn.name)
    if key in seen:
        return []
    seen.add(key)
    li = _local_imports(mod, fn)
    assigns = {}
    for st in ast.walk(fn):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            assigns[st.targets[0].id] = st.value
    built_vars, built_inline = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "build_group":
            if isinstance(node.func.value, ast.Name):
                built_vars.add(node.func.value.id)
            elif isinstance(node.func.value, ast.Call):
                built_inline.add(id(node.func.value))
    factory_var = {id(v): k for k, v in assigns.items()}
    actions = []

    def visit(stmts, cond):
        for st in stmts:
            if isinstance(st, ast.If):
                c = ast.unparse(st.test)
                visit(st.body, " and ".join(x for x in (cond, c) if x))
                visit(st.orelse, " and ".join(x for x in (cond, f"not ({c})") if x))
                continue
            if isinstance(st, (ast.Try,)):
                visit(st.body, cond)
                for h in st.handlers:
                    visit(h.body, cond)
                visit(st.orelse, cond)
                visit(st.finalbody, cond)
                continue
            if isinstance(st, (ast.For, ast.While, ast.With)):
                visit(st.body, cond)
                continue
            if isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                continue
            for node in ast.walk(st):
                if not isinstance(node, ast.Call):
                    continue
                fname = ast.unparse(node.func)
                if isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                    actions.append(handwritten_action(node, mod, f"{mod.path}:{fn.name}", cond))
                elif fname == "ArgumentGroupFactory":
                    var = factory_var.get(id(node))
                    if not (var in built_vars or id(node) in built_inline):
                        problems.append(f"{fn.name}: ArgumentGroupFactory never built")
                        continue
                    cls_r = resolve_expr(mod, node.args[0], li)
                    if not cls_r or cls_r[0] != "class":
                        problems.append(f"{fn.name}: cannot resolve {ast.unparse(node.args[0])}")
                        continue
                    excl = []
                    for k in node.keywords:
                        if k.arg == "exclude":
                            ex = k.value
                            if isinstance(ex, ast.Name):
                                ex = assigns[ex.id]
                            excl = const_eval(ex)
                    if len(node.args) > 1:
                        excl = const_eval(node.args[1])
                    where = f"{mod.path}:{fn.name} ArgumentGroupFactory({cls_r[2].name})"
                    acts = generated_actions(cls_r[1], cls_r[2], set(excl or []), where, problems)
                    for a in acts:
                        if cond:
                            a["condition"] = cond
                    actions.extend(acts)
                    factory_classes.append((cls_r[2].name, cls_r[1].path, sorted(excl or [])))
                elif isinstance(node.func, ast.Name):
                    # helper called with the parser/group: recurse into it if we can find it
                    if any(isinstance(a, ast.Name) and a.id in ("parser", "group") for a in node.args):
                        r = resolve(mod, node.func.id, li)
                        if r and r[0] == "func":
                            actions.extend(scan_function(r[1], r[2], problems, seen, cond))

    visit(fn.body, condition)
    return actions


factory_classes = []
field_files = set()


def to_entry(a):
    e = {"dest": a["dest"]}
    action = a.get("action")
    nargs = a.get("nargs")
    if action in NONE_ARITY_ACTIONS:
        e["arity"] = "none"
    elif nargs in ("+", "*"):
        e["arity"] = "many"
    elif nargs == "?":
        e["arity"] = "optional"
    elif isinstance(nargs, int) and nargs != 1:
        e["arity"] = "many" if nargs > 1 else "none"
    else:
        e["arity"] = "one"
    if action:
        e["action"] = action
    if nargs is not None:
        e["nargs"] = nargs
    dval, dtxt = a["default"]
    if dval is not _NOVALUE and dval != "MISSING" and jsonable(dval):
        e["default"] = list(dval) if isinstance(dval, tuple) else dval
    else:
        e["default_expr"] = dtxt
    if a.get("type") and action is None:
        e["type"] = a["type"]
    if a.get("choices") is not None and jsonable(a["choices"]):
        e["choices"] = list(a["choices"])
    elif a.get("choices_expr"):
        e["choices_expr"] = a["choices_expr"]
    if a.get("enum"):
        e["enum"] = a["enum"]
        if "choices" in e:
            e["choices_note"] = "enum member names (type=Enum[name])"
    for k in ("const", "hidden", "condition", "type_inference_failed"):
        if a.get(k) is not None:
            e[k] = a[k]
    e["origin"] = a["origin"]
    return e


def collect(actions, problems):
    flags, dest_first = {}, {}
    for a in actions:
        dest_first.setdefault(a["dest"], a)
    for a in actions:
        e = to_entry(a)
        first = dest_first[a["dest"]]
        if first is not a:
            fd = first["default"][0]
            if fd != a["default"][0] and jsonable(fd):
                e["effective_default"] = fd  # namespace default comes from first action with this dest
        for name in a["arg_names"]:
            if name in flags:
                problems.append(f"conflicting option string {name} (argparse would raise): "
                                f"{flags[name]['origin']} vs {a['origin']}")
            flags[name] = e
    return flags


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("git_dir")
    ap.add_argument("commit")
    ap.add_argument("-o", "--out", default="megatron_flags.json")
    ns = ap.parse_args()
    repo = Repo(ns.git_dir, ns.commit)
    mod = repo.module("megatron.training.arguments")
    if mod is None:
        sys.exit("arguments.py not found at that commit")
    problems = []
    seen = set()
    adder = mod.functions["add_megatron_arguments"]
    actions = []
    for st in adder.body:
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("_add_"):
                r = resolve(mod, node.func.id)
                if r and r[0] == "func":
                    actions.extend(scan_function(r[1], r[2], problems, seen))
    flags = collect(actions, problems)

    # pretrain_gpt.py extra_args_provider (only when nvidia-modelopt imports)
    extra = {}
    entry_src = repo.read(ENTRY_PY)
    entry_tree = ast.parse(entry_src)
    provider_names = set()
    for node in ast.walk(entry_tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "parse_and_validate_args":
            for k in node.keywords:
                if k.arg == "extra_args_provider":
                    for n in ast.walk(k.value):
                        if isinstance(n, ast.Name):
                            provider_names.add(n.id)
    entry_mod = Module(repo, "pretrain_gpt", ENTRY_PY, entry_src, False)
    for pn in sorted(provider_names):
        r = resolve(entry_mod, pn)
        if r and r[0] == "func":
            acts = scan_function(r[1], r[2], problems, set(),
                                 condition="has_nvidia_modelopt (pretrain_gpt.py extra_args_provider)")
            extra.update(collect(acts, problems))
    for k in list(extra):
        if k in flags:
            problems.append(f"extra_args_provider flag {k} conflicts with core flag")

    files = sorted({ARGS_PY, UTILS_PY} | field_files)
    out = {
        "source": ("NVIDIA/Megatron-LM megatron/training/arguments.py and the dataclasses it generates "
                   f"flags from ({', '.join(files)}), commit {ns.commit}"),
        "flags": dict(sorted(flags.items())),
        "count": len(flags),
        "factories": [{"class": c, "file": p, "exclude": ex} for c, p, ex in factory_classes],
        "notes": [
            "arity: none for store_true/store_false/store_const/count/BooleanOptionalAction, many for "
            "nargs '+'/'*'/N>1, optional for '?', one otherwise",
            "default: argparse default of that option's action when JSON-representable, else default_expr "
            "holds its source text; effective_default: namespace default when an earlier action with the "
            "same dest sets a different one",
            "enum-typed generated flags take member names (type=Enum[name]); choices lists the names",
            "validate_args (and pretrain_gpt's args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}) may "
            "change values after parsing; defaults here are parse-time",
            "condition: flag only registered when that expression is true (e.g. HAVE_KITCHEN)",
            "extra_args_provider_flags: added by megatron.post_training.arguments.add_modelopt_args only "
            "when nvidia-modelopt is importable (pretrain_gpt.py passes it as extra_args_provider)",
        ],
        "problems": problems,
        "extra_args_provider_flags": dict(sorted(extra.items())),
    }
    with open(ns.out, "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=False)
        fh.write("\n")
    print(f"{len(flags)} flags (+{len(extra)} extra_args_provider), {len(problems)} problems -> {ns.out}",
          file=sys.stderr)
    for p in problems:
        print("  problem:", p, file=sys.stderr)


if __name__ == "__main__":
    main()
