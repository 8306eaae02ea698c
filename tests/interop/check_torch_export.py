#!/usr/bin/env python3
"""`python3 -m ckpt_harness.torch export` end to end (tests/interop/run.sh; also under torch
2.x: `$TORCH2_PYTHON tests/interop/check_torch_export.py PROG TMPDIR`): a healthy BatchNorm
model and a token model export, import and match PyTorch, the case runs plain vs
checkpointed; an export that loses BatchNorm is refused (torch 2.x: the dynamo exporter
through the command; every torch: an eval-mode, constant-folded TorchScript export judged by
the same reference and check); a model the importer cannot take is refused with the
importer's line naming the module; functional dropout, two inputs and bad options are one
line with exit 2; a refusal leaves nothing behind.

Usage: check_torch_export.py PROG TMPDIR. Exit 0 when every outcome is as documented.
Skips (exit 0, one line) when torch cannot be imported.
"""
import contextlib
import io
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch export: skipped: {sys.executable} cannot import torch/numpy ({e})")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from ckpt_harness.torch import __main__ as cli  # noqa: E402
from ckpt_harness.torch import onnx_export  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
passed = failed = 0

MODELS = {
    # a token model: embedding, LayerNorm, GELU MLP, head; cross_entropy over (N, L, V)
    "tokens.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 16)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16, 16)
    def forward(self, ids):
        return self.head(self.drop(torch.nn.functional.gelu(self.fc(self.ln(self.emb(ids))))))
def build():
    torch.manual_seed(0)
    return M(), lambda step: (torch.randint(0, 16, (2, 6)),), lambda out, step: out.mean()
''',
    # linear layers and a head tied to the embedding: torch 2.x's dynamo exporter folds the
    # transposed weights into new initializers (val_N) and keeps the tied weight as
    # head.weight, which PyTorch names emb.weight
    "tied.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight
    def forward(self, ids):
        return self.head(torch.tanh(self.fc(self.emb(ids))))
def build():
    torch.manual_seed(0)
    return M(), lambda step: (torch.randint(0, 16, (2, 6)),), lambda out, step: out.mean()
''',
    # the corpus's 3-D U-Net at 2x1x32^3: with --loss mean BatchNorm cancels most of a
    # gradient and PyTorch's own fp32 gradients differ from its fp64 ones by ~1e-3
    "big_unet.py": '''
import os, sys, torch
sys.path.insert(0, os.path.join(%r, "tests", "fixtures", "onnx", "corpus"))
from make_corpus import UNet3DOrigin
def build():
    torch.manual_seed(0)
    return UNet3DOrigin(), (torch.randn(2, 1, 32, 32, 32),), lambda out, step: out.mean()
''' % ROOT,
    "conv_only.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 1, 1)
    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))
def build():
    torch.manual_seed(0)
    return M(), (torch.randn(2, 2, 8, 8),), lambda out, step: out.mean()
''',
    # a BatchNorm and a Dropout the model holds but its forward never calls (a block's
    # leftover norm): they export no node and must not count as folded
    "unused_bn.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.spare_bn = nn.BatchNorm2d(4)
        self.spare_drop = nn.Dropout(0.3)
        self.c2 = nn.Conv2d(4, 1, 1)
    def forward(self, x):
        return self.c2(torch.relu(self.bn(self.c1(x))))
def build():
    torch.manual_seed(0)
    return M(), (torch.randn(2, 2, 8, 8),), lambda out, step: (out ** 2).mean()
''',
    "grouped.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(4, 4, 3, padding=1, groups=2)
    def forward(self, x):
        return self.stem(x)
def build():
    return M(), (torch.randn(2, 4, 6, 6),), lambda out, step: out.mean()
''',
    "fdropout.py": '''
import torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        return F.dropout(self.fc(x), 0.3, training=self.training)
def build():
    return M(), (torch.randn(4, 8),), lambda out, step: out.mean()
''',
    "two_inputs.py": '''
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x, y):
        return self.fc(x) + y
def build():
    return M(), (torch.randn(4, 8), torch.randn(4, 8)), lambda out, step: out.mean()
''',
}


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def check(desc, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {desc} {detail}")


def expect(desc, want_rc, argv, must=(), one_line_error=False):
    rc, out, err = run_cli(argv)
    text = out + err
    missing = [m for m in must if m not in text]
    err_lines = [ln for ln in err.splitlines() if ln.strip()]
    check(desc, rc == want_rc and not missing and (not one_line_error or len(err_lines) == 1),
          f"(exit {rc}, want {want_rc}; missing {missing}; stderr {err_lines[:4]})\n{text[-3000:]}")
    return text


def left_in(folder):
    return sorted(os.listdir(folder))


def main():
    prog, tmp = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.environ["CKPT_HARNESS"] = prog
    t = os.path.join(tmp, "torch_export")
    os.makedirs(t, exist_ok=True)
    for name, text in MODELS.items():
        with open(os.path.join(t, name), "w") as f:
            f.write(text)
    unet = os.path.join(ROOT, "examples", "pytorch", "unet3d_bn.py")

    # a healthy BatchNorm model: exported, imported, matched; the case runs plain vs checkpointed
    out = os.path.join(t, "unet", "unet.onnx")
    os.makedirs(os.path.dirname(out))
    case = os.path.join(t, "unet", "case.json")
    text = expect("a BatchNorm U-Net exports, imports and matches", 0,
                  ["export", unet, "-o", out, "--case", case],
                  must=["the import matches the framework in training mode",
                        "batchnorm layers 3 (framework: 3)", "gradients", "loss rel L2",
                        "torchscript exporter"])
    check("the model, the reference and the case are written, nothing else",
          left_in(os.path.dirname(out)) == ["case.json", "case.safetensors", "unet.onnx",
                                            "unet.ref.npz"], str(left_in(os.path.dirname(out))))
    ref = np.load(os.path.join(t, "unet", "unet.ref.npz"))
    grads = [k for k in ref.files if k.startswith("grad.")]
    check("the reference holds input, output, loss, a gradient per parameter and the counts",
          {"input", "output", "loss", "output_eval", "count.batchnorm", "count.dropout"}
          <= set(ref.files) and len(grads) == 22 and int(ref["count.batchnorm"]) == 3,
          str(ref.files))
    p = subprocess.run([prog, "run", case, "--backend", "cpu"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    check("the exported case runs plain vs checkpointed and passes", p.returncode == 0,
          p.stdout[-2000:])

    # BatchNorm/Dropout modules the forward never calls are not counted (they export no node)
    out = os.path.join(t, "unused_bn.onnx")
    expect("a model holding an unused BatchNorm and Dropout exports and matches", 0,
           ["export", os.path.join(t, "unused_bn.py"), "-o", out, "--loss", "mse"],
           must=["the import matches", "batchnorm layers 1 (framework: 1)",
                 "dropout layers 0 (framework: 0"])

    # a token model with cross_entropy over (N, L, V), dropout counted and set to 0
    out = os.path.join(t, "tokens.onnx")
    expect("a token model with --loss cross_entropy exports and matches", 0,
           ["export", os.path.join(t, "tokens.py"), "-o", out, "--loss", "cross_entropy"],
           must=["the import matches", "dropout layers 1 (framework: 1"])
    ref = np.load(os.path.join(t, "tokens.ref.npz"))
    check("the token reference holds int64 ids and the (N, L) target",
          ref["input"].dtype == np.int64 and ref["target"].shape == (2, 6), str(ref.files))

    expect("--ignore-index and --class-dim reach the reference and the import", 0,
           ["export", os.path.join(t, "tokens.py"), "-o", os.path.join(t, "tokens_ii.onnx"),
            "--loss", "cross_entropy", "--class-dim", "-1", "--ignore-index", "3"],
           must=["the import matches", "loss rel L2"])
    expect("--loss mse: the reference's target is the case's", 0,
           ["export", unet, "-o", os.path.join(t, "unet_mse.onnx"), "--loss", "mse"],
           must=["the import matches", "loss rel L2"])
    check("the mse reference holds a float target shaped as the output",
          np.load(os.path.join(t, "unet_mse.ref.npz"))["target"].shape == (2, 1, 8, 8, 8))

    expect("an ill-conditioned reference is refused before the check, saying why", 2,
           ["export", os.path.join(t, "big_unet.py"), "-o", os.path.join(t, "big.onnx")],
           must=["differ from its float64 ones", "grad.dec.0.weight"], one_line_error=True)
    expect("the same model with --loss mse is well conditioned and matches", 0,
           ["export", os.path.join(t, "big_unet.py"), "-o", os.path.join(t, "big.onnx"),
            "--loss", "mse"], must=["the import matches"])

    # an export that loses BatchNorm is refused, and nothing is left
    if TORCH2:
        d = os.path.join(t, "dynamo")
        os.makedirs(d)
        expect("torch 2.x's dynamo exporter folds BatchNorm: refused", 2,
               ["export", unet, "-o", os.path.join(d, "unet.onnx"), "--exporter", "dynamo"],
               must=["not written", "module enc1.bn: node `node_Conv_",
                     "the exporter's rewrite of BatchNorm",
                     "the exporter folded BatchNorm into the convolutions"],
               one_line_error=True)
        check("a refused export leaves nothing behind", left_in(d) == [], str(left_in(d)))
        e = os.path.join(t, "external")
        os.makedirs(e)
        expect("a BatchNorm-free model through the dynamo exporter: external data moved, "
               "imported, matched", 0,
               ["export", os.path.join(t, "conv_only.py"), "-o", os.path.join(e, "m.onnx"),
                "--exporter", "dynamo", "--case", os.path.join(e, "c.json")],
               must=["the import matches", "4 gradients"])
        expect("linear layers and a tied head through the dynamo exporter: the folded "
               "weights imported under the module's names, the tie shared", 0,
               ["export", os.path.join(t, "tied.py"), "-o", os.path.join(e, "tied.onnx"),
                "--exporter", "dynamo", "--loss", "cross_entropy"],
               must=["the import matches", "3 gradients"])
        left = [f for f in left_in(e) if not f.startswith("tied.")]
        check("the model's external data file came along",
              left == ["c.json", "c.safetensors", "m.onnx", "m.onnx.data", "m.ref.npz"],
              str(left_in(e)))
    else:
        expect("--exporter dynamo on torch 1.x is one line", 2,
               ["export", unet, "-o", os.path.join(t, "x.onnx"), "--exporter", "dynamo"],
               must=["has no dynamo exporter"], one_line_error=True)
    folded_batchnorm_is_refused(prog, t, unet)

    # what the importer cannot take: its line, naming the module
    expect("a grouped convolution is refused with the importer's line", 2,
           ["export", os.path.join(t, "grouped.py"), "-o", os.path.join(t, "g.onnx")],
           must=["not written", "module stem", "grouped convolution (group 2)"],
           one_line_error=True)
    check("nothing written for the refused model",
          not any(f.startswith(("g.", ".ckpt-export")) for f in os.listdir(t)),
          str(left_in(t)))
    expect("functional dropout cannot be switched off: refused", 2,
           ["export", os.path.join(t, "fdropout.py"), "-o", os.path.join(t, "f.onnx")],
           must=["randomness the driver cannot switch off"], one_line_error=True)
    expect("two inputs: one line", 2,
           ["export", os.path.join(t, "two_inputs.py"), "-o", os.path.join(t, "two.onnx")],
           must=["the model takes 2 inputs"], one_line_error=True)
    expect("-o must be an .onnx file", 2, ["export", unet, "-o", os.path.join(t, "x.json")],
           must=["must end in .onnx"], one_line_error=True)
    expect("--optimizer needs --case", 2,
           ["export", unet, "-o", os.path.join(t, "x.onnx"), "--optimizer", "adam"],
           must=["give --case"], one_line_error=True)
    expect("--class-dim needs cross_entropy", 2,
           ["export", unet, "-o", os.path.join(t, "x.onnx"), "--class-dim", "1"],
           must=["cross_entropy only"], one_line_error=True)
    expect("a missing script is one line", 2,
           ["export", os.path.join(t, "nope.py"), "-o", os.path.join(t, "x.onnx")],
           must=["no such file"], one_line_error=True)
    expect("an output folder that does not exist is one line", 2,
           ["export", unet, "-o", os.path.join(t, "no", "x.onnx")],
           must=["does not exist"], one_line_error=True)
    print(f"torch export (torch {torch.__version__}): {passed} passed, {failed} failed")
    return 1 if failed else 0


def folded_batchnorm_is_refused(prog, t, unet):
    """The settings that fold BatchNorm on every torch (eval mode, constant folding): the
    driver's reference and `import --check-against` refuse the file, naming the folding."""
    from ckpt_harness.cli import load_script
    model, inputs, _ = load_script(unet).build()
    x = onnx_export._one_input(inputs)
    path = os.path.join(t, "folded.onnx")
    kw = dict(opset_version=17, training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    if TORCH2:
        kw["dynamo"] = False
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, **kw)
    ref = os.path.join(t, "folded.ref.npz")
    np.savez(ref, **onnx_export.reference(model, x))
    p = subprocess.run([prog, "import", path, "-o", os.path.join(t, "folded.json"),
                        "--check-against", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    check("an eval-mode constant-folded export loses BatchNorm: refused by the check",
          p.returncode == 2 and "folded BatchNorm" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, p.stderr)


if __name__ == "__main__":
    sys.exit(main())
