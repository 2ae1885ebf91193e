"""Tests of the capture tool (traces/capture/shardplan-capture, which runs the
shardplan_capture package beside it): capture real PyTorch models and check the files
against PyTorch itself and against the shardplan binary that reads them.

Run from the repository root with a Python that has torch:

    SHARDPLAN=build/cli/shardplan /usr/bin/python3 -m unittest discover -s tests/capture -v

SHARDPLAN is the shardplan binary (default build/cli/shardplan). Without torch or the
binary the tests fail and say so, rather than pass without running. The --plan test uses
the Python module beside the binary (<build>/python) and is skipped where the build has
none (the sanitizer build).
"""

import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "traces", "capture", "shardplan-capture")  # the launcher
SHARDPLAN = os.environ.get("SHARDPLAN", os.path.join(ROOT, "build", "cli", "shardplan"))
# The Python module (python/) beside the binary: <build>/python for <build>/cli/shardplan.
PYTHON_MODULE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(SHARDPLAN))),
                                 "python")

try:
    import torch.nn as nn
except ImportError as exc:  # fail, naming the fix, instead of skipping silently
    raise ImportError(f"tests/capture need torch ({exc}); run them with /usr/bin/python3 "
                      "(Debian python3-torch) or pip install torch") from exc

# A Llama-style decoder in plain PyTorch. lm_head and norm are registered BEFORE the
# layers, so registration order differs from execution order.
LLAMA_SRC = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    CONFIG = dict(vocab=256, hidden=64, layers=3, heads=4, kv_heads=2, ffn=160)


    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            var = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


    def rotate_half(x):
        a, b = x.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)


    def repeat_kv(x, rep):
        b, kv, s, d = x.shape
        return x[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)


    class Attention(nn.Module):
        def __init__(self, hidden, heads, kv_heads):
            super().__init__()
            self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
            self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
            self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, x):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            t = torch.arange(s, device=x.device, dtype=self.inv_freq.dtype)
            emb = torch.outer(t, self.inv_freq)
            emb = torch.cat([emb, emb], dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = repeat_kv(k, self.heads // self.kv_heads)
            v = repeat_kv(v, self.heads // self.kv_heads)
            if hasattr(F, "scaled_dot_product_attention"):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
                mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), 1)
                scores = scores.masked_fill(mask, float("-inf"))
                o = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
            return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


    class MLP(nn.Module):
        def __init__(self, hidden, ffn):
            super().__init__()
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


    class DecoderLayer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.input_layernorm = RMSNorm(c["hidden"])
            self.self_attn = Attention(c["hidden"], c["heads"], c["kv_heads"])
            self.post_attention_layernorm = RMSNorm(c["hidden"])
            self.mlp = MLP(c["hidden"], c["ffn"])

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))


    class Llama(nn.Module):
        def __init__(self, c, tie=False):
            super().__init__()
            self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
            self.norm = RMSNorm(c["hidden"])
            self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
            self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["layers"]))
            if tie:
                self.lm_head.weight = self.embed_tokens.weight

        def forward(self, ids):
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.norm(x))


    def build_model(tie=False, **overrides):
        return Llama(dict(CONFIG, **overrides), tie=tie)


    def example_inputs(batch, seq):
        return (torch.randint(0, CONFIG["vocab"], (batch, seq)),)
''')

ENCODER_SRC = textwrap.dedent('''
    import torch.nn as nn

    def build_model():
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128)
        return nn.TransformerEncoder(layer, num_layers=2)
''')

BROKEN_SRC = textwrap.dedent('''
    import torch.nn as nn

    class Broken(nn.Linear):
        def forward(self, x):
            raise ValueError("this model cannot run")

    def build_model():
        return Broken(4, 4)
''')

# Llama-2-7B sizes: big enough that allocating it (27 GB in fp32) could not go unnoticed.
BIG = dict(vocab=32000, hidden=4096, layers=32, heads=32, kv_heads=32, ffn=11008)


def llama_parameter_count(c):
    head_dim = c["hidden"] // c["heads"]
    attention = c["hidden"] * head_dim * (2 * c["heads"] + 2 * c["kv_heads"])
    layer = attention + 3 * c["hidden"] * c["ffn"] + 2 * c["hidden"]
    return 2 * c["vocab"] * c["hidden"] + c["layers"] * layer + c["hidden"]


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)


def shardplan(*args):
    if not os.access(SHARDPLAN, os.X_OK):
        raise AssertionError(f"no shardplan binary at {SHARDPLAN}; build it "
                             "(scripts/build.sh) or set SHARDPLAN")
    result = run([SHARDPLAN, *args])
    if result.returncode != 0:
        raise AssertionError(f"shardplan {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def nodes(tree, prefix=""):
    """(fqn, node) of every module in tree order."""
    yield prefix, tree
    for child in tree.get("children", []):
        name = f"{prefix}.{child['name']}" if prefix else child["name"]
        yield from nodes(child, name)


class CaptureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardplan_capture_test_")
        cls.dir = cls.tmp.name
        for name, src in [("llama_model.py", LLAMA_SRC), ("encoder_model.py", ENCODER_SRC),
                          ("broken_model.py", BROKEN_SRC)]:
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(src)
        spec = importlib.util.spec_from_file_location(
            "llama_model", os.path.join(cls.dir, "llama_model.py"))
        cls.llama = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.llama)
        cls.llama_file = cls.capture("llama.json", "--file", cls.path("llama_model.py"),
                                     "--input", "int64:2x24")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def capture(cls, out_name, *args):
        out = cls.path(out_name)
        result = run([sys.executable, TOOL, *args, "-o", out])
        if result.returncode != 0:
            raise AssertionError(f"capture failed ({result.returncode}):\n{result.stderr}")
        with open(out) as f:
            return out, json.load(f)

    def total_parameters(self, path):
        return json.loads(shardplan("describe", "--model", path, "--json"))["summary"][
            "total_parameters"]

    def plan_units(self, path):
        plan = self.path(os.path.basename(path) + ".plan.json")
        shardplan("plan", "--model", path, "--cluster", "dgx-h100", "--json", "-o", plan)
        with open(plan) as f:
            return [u["name"] for u in json.load(f)["units"]]

    # -------------------------------------------------------------------- 1. nn.Transformer

    def encoder_capture(self):
        cls = type(self)
        if not hasattr(cls, "_encoder"):  # one capture serves both encoder tests
            cls._encoder = cls.capture("encoder.json", "--file", cls.path("encoder_model.py"),
                                       "--input", "float32:24x2x64", "--seq-first")
        return cls._encoder

    def test_transformer_encoder(self):
        path, doc = self.encoder_capture()
        model = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128), 2)
        self.assertEqual(self.total_parameters(path), sum(p.numel() for p in model.parameters()))
        self.assertEqual(doc["default_unit_modules"], ["layers.*"])
        self.assertEqual(doc["num_layers"], 2)
        self.assertEqual((doc["capture"]["batch"], doc["capture"]["seq"]), (2, 24))
        mha = dict(nodes(doc["root"]))["layers.0.self_attn"]["cost"]
        # in_proj (3·d²) and out_proj (d²), 2 FLOPs per multiply-add; QK^T and PV: 4·d.
        self.assertEqual(mha["fwd_flops_per_token"], 2 * 4 * 64 * 64)
        self.assertEqual(mha["fwd_flops_per_token_ctx"], 4 * 64)
        self.assertFalse(mha["causal"])

    def test_transformer_encoder_plans_layers_as_units(self):
        # Every parameter sits inside a layer, so the root unit holds none.
        path, _ = self.encoder_capture()
        self.assertEqual([u for u in self.plan_units(path) if u], ["layers.0", "layers.1"])

    # --------------------------------------------------------------- 2. Llama-style decoder

    def llama_model(self, **kwargs):
        return self.llama.build_model(**kwargs)

    def test_llama_parameter_count(self):
        path, _ = self.llama_file
        model = self.llama_model()
        count = sum(p.numel() for p in model.parameters())
        self.assertEqual(count, llama_parameter_count(self.llama.CONFIG))
        self.assertEqual(self.total_parameters(path), count)

    def test_llama_tree_and_units_follow_execution_order(self):
        path, doc = self.llama_file
        model = self.llama_model()
        self.assertEqual(list(model._modules)[:2], ["lm_head", "norm"])  # the premise
        top = [c["name"] for c in doc["root"]["children"]]
        self.assertEqual(top, ["embed_tokens", "layers", "norm", "lm_head"])
        layers = [f"layers.{i}" for i in range(self.llama.CONFIG["layers"])]
        self.assertEqual([u for u in self.plan_units(path) if u], layers)
        order = doc["capture"]["forward_order"]
        expected = ["embed_tokens", *layers, "norm", "lm_head"]
        self.assertEqual([m for m in order if m in expected], expected)
        backward = doc["capture"]["backward_order"]
        self.assertLess(backward.index("lm_head"), backward.index("layers.2"))
        self.assertLess(backward.index("layers.2"), backward.index("layers.0"))
        self.assertLess(backward.index("layers.0"), backward.index("embed_tokens"))

    def test_llama_gemm_flops_match_linear_weights(self):
        _, doc = self.llama_file
        model = self.llama_model()
        expected = 2 * sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        measured = sum(n["cost"]["fwd_flops_per_token"] for _, n in nodes(doc["root"])
                       if n["type"] == "Linear")
        self.assertEqual(measured, expected)
        for fqn, n in nodes(doc["root"]):
            if n["type"] == "Linear":
                self.assertEqual(n["cost"]["kind"], "gemm", fqn)

    def test_llama_attention_context_flops(self):
        _, doc = self.llama_file
        c = self.llama.CONFIG
        attention = [(fqn, n) for fqn, n in nodes(doc["root"]) if n["type"] == "Attention"]
        self.assertEqual(len(attention), c["layers"])
        for fqn, n in attention:
            cost = n["cost"]
            # QK^T and PV: 2·heads·head_dim FLOPs each per token per context token.
            self.assertEqual(cost["fwd_flops_per_token_ctx"], 4 * c["hidden"], fqn)
            self.assertTrue(cost["causal"], fqn)
            self.assertEqual(cost["kind"], "attention", fqn)

    def test_llama_saved_activations_and_inputs(self):
        _, doc = self.llama_file
        modules = doc["capture"]["modules"]
        self.assertGreater(modules["layers.0"]["saved_bytes_subtree"], 0)
        layer_saved = sum(n["cost"]["saved_per_token"]["elements"]
                          for fqn, n in nodes(doc["root"]) if fqn.startswith("layers.0."))
        self.assertGreater(layer_saved, 0)
        by_name = dict(nodes(doc["root"]))
        for i in range(self.llama.CONFIG["layers"]):
            self.assertEqual(by_name[f"layers.{i}"]["cost"]["input_per_token"],
                             {"elements": self.llama.CONFIG["hidden"], "fixed_bytes": 0})
        self.assertEqual((doc["hidden_size"], doc["vocab_size"], doc["num_layers"]),
                         (64, 256, 3))

    # ------------------------------------------------------------------ 3. tied embeddings

    def test_tied_embeddings_counted_once(self):
        # No --input: the file's example_inputs(batch, seq) provides the batch.
        path, doc = self.capture("tied.json", "--file", self.path("llama_model.py"),
                                 "--kwargs", '{"tie": true}', "--batch", "2", "--seq", "24")
        model = self.llama_model(tie=True)
        deduped = sum(p.numel() for p in model.parameters())
        self.assertLess(deduped, llama_parameter_count(self.llama.CONFIG))
        self.assertEqual(self.total_parameters(path), deduped)
        by_name = dict(nodes(doc["root"]))
        self.assertIn("parameters", by_name["embed_tokens"])  # first user in forward
        self.assertNotIn("parameters", by_name["lm_head"])
        self.assertEqual(by_name["lm_head"]["cost"]["fwd_flops_per_token"],
                         2 * model.lm_head.weight.numel())
        self.assertEqual(doc["capture"]["tokens"], 48)

    # ------------------------------------------------------------------------ 4. meta

    def test_meta_device_allocates_nothing(self):
        out = self.path("big.json")
        start = time.monotonic()
        result = run([sys.executable, TOOL, "--file", self.path("llama_model.py"),
                      "--kwargs", json.dumps(BIG), "--device", "meta",
                      "--input", "int64:1x256", "-o", out])
        elapsed = time.monotonic() - start
        self.assertEqual(result.returncode, 0, result.stderr)
        count = llama_parameter_count(BIG)
        self.assertGreater(count, 6e9)
        # ru_maxrss of the largest child so far (KiB on Linux): far below fp32 weights.
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        self.assertLess(peak, count * 4 / 10)
        self.assertLess(elapsed, 60)
        self.assertEqual(self.total_parameters(out), count)
        with open(out) as f:
            doc = json.load(f)
        self.assertEqual(doc["capture"]["device"], "meta")
        self.assertEqual(doc["num_layers"], 32)
        self.assertNotIn("forward_seconds", doc["capture"]["modules"]["layers.0"])

    # ------------------------------------------------------------------------ 5. errors

    def test_errors_exit_2_and_write_nothing(self):
        llama = self.path("llama_model.py")
        cases = [
            ("--module", ["--module", "no_such_package.models:Net", "--input", "int64:2x8"]),
            ("--builder", ["--file", llama, "--builder", "no_such_builder",
                           "--input", "int64:2x8"]),
            ("--input", ["--file", llama, "--input", "int64:2xeight"]),
            ("--input", ["--file", self.path("broken_model.py"), "--input", "float32:2x8x4"]),
        ]
        for i, (arg, argv) in enumerate(cases):
            with self.subTest(arg=arg, argv=argv):
                out = self.path(f"error{i}.json")
                result = run([sys.executable, TOOL, *argv, "-o", out])
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(f"shardplan_capture: error: {arg}", result.stderr)
                self.assertFalse(os.path.exists(out))
                self.assertEqual([f for f in os.listdir(self.dir) if f.endswith(".tmp")], [])

    # ---------------------------------------------------------------------- 6. --plan

    def test_plan_in_process(self):
        built = os.listdir(PYTHON_MODULE_DIR) if os.path.isdir(PYTHON_MODULE_DIR) else []
        if not any(f.startswith("shardplan.") and f.endswith(".so") for f in built):
            self.skipTest(f"no shardplan Python module in {PYTHON_MODULE_DIR} (not built with "
                          "SHARDPLAN_SANITIZE, SHARDPLAN_FUZZ or -DSHARDPLAN_PYTHON=OFF)")
        out = self.path("planned.json")
        env = dict(os.environ, PYTHONPATH=PYTHON_MODULE_DIR)
        result = run([sys.executable, TOOL, "--file", self.path("llama_model.py"),
                      "--input", "int64:2x24", "--no-timing", "-o", out, "--plan",
                      "--cluster", "dgx-a100", "--gpus", "4", "--set", "recompute=full"],
                     env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"wrote {out}", result.stderr)  # stdout is the plan alone
        expected = shardplan("plan", "--model", out, "--cluster", "dgx-a100", "--gpus", "4",
                             "--set", "recompute=full", "--json")
        self.assertEqual(json.loads(result.stdout), json.loads(expected))
        self.assertEqual(json.loads(result.stdout)["config"]["recompute"], "full")

    def test_plan_without_the_module_says_how_to_get_it(self):
        # A shardplan that cannot be imported, first on the path: even one installed
        # elsewhere is not found.
        blocker = os.path.join(self.dir, "no_module")
        os.makedirs(blocker, exist_ok=True)
        with open(os.path.join(blocker, "shardplan.py"), "w") as f:
            f.write("raise ImportError('blocked by the test')\n")
        out = self.path("never.json")
        result = run([sys.executable, TOOL, "--file", self.path("llama_model.py"),
                      "--input", "int64:2x24", "-o", out, "--plan"],
                     env=dict(os.environ, PYTHONPATH=blocker))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("shardplan_capture: error: --plan: cannot import the shardplan Python "
                      "module", result.stderr)
        self.assertIn("PYTHONPATH=build/python", result.stderr)
        self.assertFalse(os.path.exists(out))  # checked before capturing
        result = run([sys.executable, TOOL, "--file", self.path("llama_model.py"), "-o", out,
                      "--gpus", "8"])
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--gpus: only with --plan", result.stderr)

    def test_runs_as_module(self):
        env = dict(os.environ, PYTHONPATH=os.path.dirname(TOOL))  # the package's parent
        result = run([sys.executable, "-m", "shardplan_capture", "--file",
                      self.path("llama_model.py"), "--input", "bogus:2x8",
                      "-o", self.path("m.json")], env=env, cwd=self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("unknown dtype 'bogus'", result.stderr)


if __name__ == "__main__":
    unittest.main()
