#!/usr/bin/env python3
"""The PyTorch driver (python/ckpt_harness/torch) end to end, each outcome asserted
(tests/interop/run.sh): healthy models pass in every mode the installed torch has, each
canary is caught with its cause, the memory gate, DDP on 2 gloo processes, bad input as one
line with exit 2, the reports, the Python API and the pytest helper.

Usage: check_torch_driver.py PROG TMPDIR. Exit 0 when every outcome is as documented.
Skips (exit 0, one line) when torch cannot be imported.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import time

try:
    import numpy  # noqa: F401
    import torch
except ImportError as e:
    print(f"torch driver: skipped: {sys.executable} cannot import torch/numpy ({e})")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
from ckpt_harness.torch import __main__ as cli  # noqa: E402
from ckpt_harness.torch import assert_checkpoint_equivalent, verify  # noqa: E402
from ckpt_harness.torch.modes import _sac  # noqa: E402

PROG = TMP = None
EX = os.path.join(ROOT, "examples", "pytorch")
CAN = os.path.join(EX, "canaries")
SAC = ["sac:save-matmuls", "sac:recompute-all"] if _sac() else []
try:
    import torch._functorch.config as _fc
    COMPILE = hasattr(_fc, "activation_memory_budget") and hasattr(torch, "compile")
except ImportError:
    COMPILE = False
passed = failed = 0


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def expect(desc, want_rc, argv, must=(), one_line_error=False):
    global passed, failed
    rc, out, err = run_cli(argv)
    # the judge's own output comes through its subprocess pipe into `out`
    text = out + err
    missing = [m for m in must if m not in text]
    err_lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln
                 and not ln.startswith("  ")]
    bad_err = one_line_error and len(err_lines) != 1
    if rc == want_rc and not missing and not bad_err:
        passed += 1
        return text
    failed += 1
    why = (f"exit {rc}, want {want_rc}" if rc != want_rc else
           f"output lacks {missing}" if missing else f"stderr is not one line: {err_lines}")
    print(f"FAIL: {desc}: {why}")
    print("".join("    " + ln for ln in text.splitlines(True)[-25:]))
    return text


def check(desc, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {desc} {detail}")


def judge(args):
    p = subprocess.run([PROG, "judge"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


def main():
    global PROG, TMP
    PROG, TMP = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.environ["CKPT_HARNESS"] = PROG
    t_start = time.time()
    V = ["verify"]
    fp32_modes = ",".join(["nonreentrant", "reentrant"] + SAC)

    # ---- healthy models pass in every mode -----------------------------------------------------
    expect("GPT block with dropout: every RNG-preserving mode", 0,
           V + [os.path.join(EX, "gpt_block.py"), "--wrap", "blocks.*", "--modes", fp32_modes,
                "--quiet"], ["PASS gpt_block nonreentrant fp32", "PASS gpt_block reentrant fp32"])
    rep = os.path.join(TMP, "unet_report")
    text = expect("3-D U-Net, BatchNorm outside the checkpointed convolutions: every mode", 0,
                  V + [os.path.join(EX, "unet3d_bn.py"), "--wrap", "*.convs", "--modes",
                       fp32_modes + ",no-preserve-rng", "--report", rep,
                       "--junit", os.path.join(TMP, "unet.xml"), "--html",
                       os.path.join(TMP, "unet.html")],
                  ["PASS unet3d_bn no-preserve-rng fp32", "control: the plain run twice is bitwise "
                   "identical", "memory (bytes autograd saved for backward"])
    for line in text.splitlines():
        if line.startswith("memory (bytes autograd saved") and "nonreentrant" in line:
            print("torch driver: unet3d_bn " + line)
    expect("ResNet-style CNN: every mode", 0,
           V + [os.path.join(EX, "resnet_cnn.py"), "--wrap-type", "BasicBlock", "--modes",
                fp32_modes + ",no-preserve-rng", "--quiet"], ["PASS resnet_cnn reentrant fp32"])
    # a wrapped leaf recomputes inside the original forward: its own hooks must still run
    text = expect("leaf modules wrapped (layers.*.conv1): their recomputations are counted", 0,
                  V + [os.path.join(EX, "resnet_cnn.py"), "--wrap", "layers.*.conv1",
                       "--steps", "2"], ["PASS resnet_cnn nonreentrant fp32",
                                         "; 6 module forwards recomputed"])
    check("no 'did not recompute' note when wrapped leaves recomputed",
          "no module forward ran during backward" not in text, text[-600:])
    expect("GPT block in bf16 autocast (judged against fp32 by the calibrated rule)", 0,
           V + [os.path.join(EX, "gpt_block.py"), "--wrap", "blocks.*", "--dtype", "bf16",
                "--quiet"], ["PASS gpt_block nonreentrant bf16"])

    # ---- the reports come from the harness ---------------------------------------------------------
    summary = json.load(open(os.path.join(rep, "summary.json")))
    check("summary.json lists every mode", len(summary.get("items", [])) == 3 + len(SAC),
          str(summary.get("items")))
    r0 = json.load(open(os.path.join(rep, summary["items"][0]["report"])))
    check("the item report is the harness's run report", r0.get("schema") == "ckpt-harness/report"
          and r0.get("status") == "pass" and r0["framework"]["memory"]["saving"] > 0
          and r0["framework"]["control"]["verdict"] == "identical", json.dumps(r0)[:300])
    check("JUnit and HTML written", os.path.getsize(os.path.join(TMP, "unet.xml")) > 0 and
          "<html" in open(os.path.join(TMP, "unet.html")).read().lower())

    # ---- the five failures: caught and named -------------------------------------------------------
    expect("canary: BatchNorm inside the checkpoint (pytorch 96136)", 1,
           V + [os.path.join(EX, "unet3d_bn.py"), "--wrap", "enc*", "--wrap", "dec*", "--quiet",
                "--junit", os.path.join(TMP, "bn.xml")],
           ["BatchNorm running statistics updated by the recomputation",
            "num_batches_tracked 2 vs 1"])
    bn_xml = open(os.path.join(TMP, "bn.xml")).read()
    check("the JUnit failure lists the differing tensors with their numbers",
          "buffer enc1.bn.running_mean             step 0  max_abs" in bn_xml and
          "max_abs nan" not in bn_xml, bn_xml[:800])
    expect("canary: preserve_rng_state=False", 1,
           V + [os.path.join(EX, "gpt_block.py"), "--wrap", "blocks.*", "--modes",
                "no-preserve-rng", "--steps", "1"], ["dropout mask redrawn on recompute",
                                                      "blocks.0.attn"])
    expect("canary: reentrant checkpoint whose input needs no grad", 1,
           V + [os.path.join(CAN, "adapter_reentrant.py"), "--wrap", "block", "--modes",
                "reentrant,nonreentrant", "--quiet"],
           ["no gradient reached parameters inside a reentrant segment",
            "PASS adapter_reentrant nonreentrant fp32"])
    expect("canary: a custom helper that never restores the RNG", 1,
           V + [os.path.join(CAN, "custom_helper_dropout.py"), "--quiet"],
           ["dropout mask redrawn on recompute"])
    expect("--modes user names the script's enable_checkpointing (the same run)", 1,
           V + [os.path.join(CAN, "custom_helper_dropout.py"), "--modes", "user", "--quiet"],
           ["dropout mask redrawn on recompute"])
    expect("--modes user without enable_checkpointing(model) is one line", 2,
           V + [os.path.join(EX, "gpt_block.py"), "--modes", "user"],
           ["--modes user: the script's enable_checkpointing(model), but the script defines "
            "none"], True)
    expect("canary: a custom helper that recomputes outside autocast", 1,
           V + [os.path.join(CAN, "custom_helper_autocast.py"), "--dtype", "bf16", "--quiet"],
           ["recomputed in fp32, forward in bf16"])
    expect("memory: --min-saving that checkpointing does not reach fails", 1,
           V + [os.path.join(EX, "resnet_cnn.py"), "--wrap", "layers.2", "--min-saving", "0.9",
                "--steps", "1", "--quiet"], ["memory: checkpointing saved"])

    # ---- torch.compile with an activation memory budget (torch >= 2.4) ----------------------------
    if COMPILE:
        expect("compile:budget=0 on a model without dropout passes", 0,
               V + [os.path.join(EX, "resnet_cnn.py"), "--modes", "compile:budget=0",
                    "--steps", "1", "--quiet"],
               ["PASS resnet_cnn compile:budget=0 fp32"])
        expect("canary: compile:budget=0 with dropout differs from budget 1", 1,
               V + [os.path.join(CAN, "compile_budget_dropout.py"), "--modes",
                    "compile:budget=0", "--steps", "1"],
               ["the checkpointed run recorded no module outputs", "`2` (Dropout)"])
    else:
        expect("compile modes on a torch without an activation memory budget", 2,
               V + [os.path.join(EX, "resnet_cnn.py"), "--modes", "compile:budget=0.5"], ["has no torch.compile activation memory budget"], True)
        print("torch driver: compile:budget=B tests skipped: torch " + torch.__version__ +
              " has no activation memory budget")

    # ---- torch.distributed ---------------------------------------------------------------------------
    if torch.distributed.is_available():
        expect("DDP on 2 gloo processes", 0,
               V + [os.path.join(EX, "resnet_cnn.py"), "--wrap-type", "BasicBlock", "--nproc", "2",
                    "--steps", "1", "--quiet"],
               ["PASS resnet_cnn nonreentrant fp32 rank1"])
    else:
        print("torch driver: DDP skipped: torch.distributed is not available")

    # ---- bad input: one line, exit 2 -----------------------------------------------------------------
    nob = os.path.join(TMP, "nobuild.py")
    open(nob, "w").write("x = 1\n")
    vec = os.path.join(TMP, "vecloss.py")
    open(vec, "w").write("import torch\nimport torch.nn as nn\n"
                         "def build():\n    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
                         "    return m, (torch.randn(3, 4),), lambda out, step: out.sum(0)\n")
    expect("a script without build()", 2, V + [nob, "--wrap", "x"], ["defines no build()"], True)
    expect("a pattern that wraps nothing", 2, V + [os.path.join(EX, "resnet_cnn.py"), "--wrap",
                                                   "nope*"], ["matches no submodule"], True)
    expect("a loss that is not a scalar", 2, V + [vec, "--wrap", "0"], ["not a scalar"], True)
    expect("an unknown mode", 2, V + [os.path.join(EX, "resnet_cnn.py"), "--wrap", "layers.0",
                                      "--modes", "fancy"], ["unknown mode 'fancy'"], True)
    expect("fp16 on the CPU", 2, V + [os.path.join(EX, "resnet_cnn.py"), "--wrap", "layers.0",
                                      "--dtype", "fp16"], ["fp16 autocast runs on CUDA only"], True)
    if not SAC:
        expect("sac modes on a torch without them", 2,
               V + [os.path.join(EX, "resnet_cnn.py"), "--wrap", "layers.0", "--modes",
                    "sac:save-matmuls"], ["has no selective checkpointing"], True)

    # a step the low-precision run's GradScaler skipped (CUDA fp16 only; simulated here on
    # the bf16 plain run's record): its fp32 reference and calibration runs skip it too
    import ckpt_harness.torch as ckt
    real_train = ckt.train_run

    def train_marking_a_skip(ctx, spec, run, shard=None):
        got = real_train(ctx, spec, run, shard)
        if spec.id == "plain.bf16":
            run.meta["steps"][0]["skipped"] = True
        return got
    ckt.train_run = train_marking_a_skip
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        init = {n: p.detach().clone() for n, p in model.named_parameters()}
        x = torch.randn(4, 8)
        skip_dump = os.path.join(TMP, "skip_dump")
        r = verify(model, x, lambda o, s: (o.float() ** 2).mean(), wrap=["0"], steps=2,
                   dtypes=["fp32", "bf16"], dump=skip_dump, echo=False)
    finally:
        ckt.train_run = real_train
    doc = json.load(open(os.path.join(skip_dump, "judge.json")))
    runs = {m["id"]: m for m in doc["runs"]}
    ref = runs.get("plain.skip_like-bf16.fp32", {})
    check("a skipped low-precision step gets an fp32 reference of variant skip_like:bf16 that "
          "skips it", ref.get("mode") == "skip_like:bf16" and
          [s["skipped"] for s in ref.get("steps", [])] == [True, False], sorted(runs))
    check("the calibration runs skip it too",
          all([s["skipped"] for s in runs[f"calibration.bf16.{j}"]["steps"]] == [True, False]
              for j in range(3)), [runs[f"calibration.bf16.{j}"]["steps"] for j in range(3)])
    head, data = {}, b""
    if ref:
        with open(os.path.join(skip_dump, ref["dir"], "step_0000", "params.safetensors"),
                  "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            head, data = json.loads(f.read(n)), f.read()
    unchanged = bool(head) and all(torch.equal(torch.from_numpy(numpy.frombuffer(
        data[head[k]["data_offsets"][0]:head[k]["data_offsets"][1]], numpy.float32).copy())
        .reshape(init[k].shape), init[k]) for k in init)
    check("the skip_like reference did not update at the skipped step", unchanged)
    check("the judge takes that reference (no refusal)", r.exit_code in (0, 1), r.summary[-400:])

    # checkpointing that never ran is not a pass: the checkpointed run would be a copy of the
    # plain one. The script's enable_checkpointing sets a flag the forward never reads; a
    # --wrap module whose forward runs under no_grad (checkpoint then never recomputes)
    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8),
                                                                  torch.nn.Tanh())
                                              for _ in range(2))
            self.frozen = torch.nn.Linear(8, 8)
            self.ckpt = False
            self.functional = False

        def forward(self, x):
            with torch.no_grad():
                x = x + self.frozen(x)
            for b in self.blocks:
                if self.functional:  # checkpointed code that calls no module
                    w, bias = b[0].weight, b[0].bias
                    x = torch.utils.checkpoint.checkpoint(
                        lambda h, w=w, bias=bias: torch.tanh(h @ w.t() + bias), x,
                        use_reentrant=False)
                else:
                    x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) \
                        if self.ckpt else b(x)
            return x.sum(-1)

    def set_unread_flag(m):
        m.use_checkpointing = True  # the forward reads m.ckpt

    def set_functional(m):
        m.functional = True
    xb = torch.randn(4, 8)
    sq = (lambda o, s: (o ** 2).mean())
    r = verify(Blocks(), xb, sq, enable_checkpointing=set_unread_flag, echo=False)
    check("enable_checkpointing that checkpoints nothing fails, saying so", r.exit_code == 1 and
          "checkpointing did not run inside `enable_checkpointing(model)`" in r.summary,
          r.summary[-600:])
    r = verify(Blocks(), xb, sq, wrap=["frozen"], echo=False)
    check("a --wrap module that never recomputes (forward under no_grad) fails, naming it",
          r.exit_code == 1 and "checkpointing did not run inside `frozen`" in r.summary,
          r.summary[-600:])
    r = verify(Blocks(), xb, sq, wrap=["blocks.*"], echo=False)
    check("the same model with --wrap 'blocks.*' passes", r.passed, r.summary[-600:])
    r = verify(Blocks(), xb, sq, enable_checkpointing=set_functional, echo=False)
    check("checkpointed functional code (no module recomputed, memory saved) passes", r.passed,
          r.summary[-600:])

    # a tied head (GPT-2's head.weight is wte.weight): the bf16 calibration runs round the
    # shared weight once and put that one tensor under both names (torch 2.x's
    # functional_call refuses two values for tied names: the run stopped with exit 2)
    from ckpt_harness.torch.runner import _calibration_params

    class TiedHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(11, 8)
            self.mid = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 11, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            return self.head(torch.tanh(self.mid(self.wte(idx))))
    tied = TiedHead()
    cp = _calibration_params(tied, "bf16")
    check("a tied weight gets one rounded tensor under each of its names",
          cp["wte.weight"] is cp["head.weight"] and
          torch.equal(cp["head.weight"], tied.wte.weight.detach().bfloat16().float()),
          sorted(cp))
    idx = torch.randint(0, 11, (3, 5))
    r = verify(tied, idx, lambda o, s: torch.nn.functional.cross_entropy(
        o.flatten(0, 1).float(), idx.flatten()), wrap=["mid"], dtypes=["fp32", "bf16"],
        echo=False)
    check("a model with a tied head verifies in bf16 (calibration runs included)",
          r.passed, r.summary[-600:])


    # a judge input with a broken manifest: one line naming the file and key
    dump = os.path.join(TMP, "dump")
    model, inputs, loss_fn = __import__("resnet_cnn").build()
    r = verify(model, inputs, loss_fn, wrap_type=["BasicBlock"], steps=1, dump=dump, echo=False)
    check("verify() returns a passing Result", r.passed and r.verdict == "pass", r.summary[-500:])
    doc = json.load(open(os.path.join(dump, "judge.json")))
    del doc["runs"][0]["role"]
    bad = os.path.join(TMP, "bad_dump")
    os.makedirs(bad, exist_ok=True)
    json.dump(doc, open(os.path.join(bad, "judge.json"), "w"))
    rc, out, err = judge([bad])
    check("judge: a manifest without runs[0].role is exit 2 with one line",
          rc == 2 and len(err.strip().splitlines()) == 1 and "runs[0].role" in err, err)
    rc, out, err = judge([])
    check("judge without a folder is exit 2 with one line", rc == 2 and
          len(err.strip().splitlines()) == 1, err)
    rc, out, err = judge([dump, "--min-saving", "2"])
    check("judge --min-saving 2 is exit 2 with one line", rc == 2 and
          len(err.strip().splitlines()) == 1 and "--min-saving" in err, err)
    rc, out, err = judge([dump, "--min-saving", "0.99", "--quiet"])
    check("judge --min-saving replaces the input's and fails the item", rc == 1 and
          "memory:" in out, out)
    rc, out, err = judge([os.path.join(TMP, "no_such_dump")])
    check("judge: a missing folder is exit 2 with one line", rc == 2 and
          len(err.strip().splitlines()) == 1, err)

    # a nondeterministic model: the control differs and every verdict is refused
    nd = os.path.join(TMP, "nondet.py")
    open(nd, "w").write(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "class Jitter(nn.Module):\n    calls = 0\n    def forward(self, x):\n"
        "        Jitter.calls += 1\n        return x * (1 + 1e-3 * Jitter.calls)\n"
        "def build():\n    torch.manual_seed(0)\n"
        "    m = nn.Sequential(nn.Linear(4, 8), Jitter(), nn.Linear(8, 2))\n"
        "    x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))\n"
        "    return m, (x,), lambda out, step: F.cross_entropy(out, y)\n")
    expect("a run that is not deterministic fails the control", 1,
           V + [nd, "--wrap", "0", "--steps", "1"], ["control: the plain run and the plain run again"])

    # ---- the pytest helper ---------------------------------------------------------------------------
    model, inputs, loss_fn = __import__("unet3d_bn").build()
    try:
        assert_checkpoint_equivalent(model, inputs, loss_fn, wrap=["enc*", "dec*"], steps=1)
        check("assert_checkpoint_equivalent raises on the BatchNorm canary", False)
    except AssertionError as e:
        check("assert_checkpoint_equivalent's message is the harness's summary",
              "BatchNorm running statistics updated by the recomputation" in str(e), str(e)[:300])
    import test_checkpointing  # noqa: E402  (the docs' pytest example, run without pytest)
    for name in ("test_resnet_blocks_checkpoint_cleanly",
                 "test_unet_batchnorm_inside_checkpoint_is_caught"):
        try:
            getattr(test_checkpointing, name)()
            check(f"pytest example {name}", True)
        except AssertionError as e:
            check(f"pytest example {name}", False, str(e)[:300])

    print(f"torch driver: torch {torch.__version__}: {passed} passed, {failed} failed "
          f"({time.time() - t_start:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":  # the DDP test spawns processes that import this file
    main()
