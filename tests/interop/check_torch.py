#!/usr/bin/env python3
"""The interop examples under PyTorch, each outcome asserted (tests/interop/run.sh).

Runs in one process (importing torch takes seconds): every documented option of
examples/pytorch_checkpoint_dump.py (a thin use of the PyTorch driver) with its documented
exit code and cause, and
examples/replay_torch.py on two shipped cases' dumps (plus a corrupted dump that must
mismatch and a case it must refuse). Usage: check_torch.py PROG TMPDIR
Exit 0 when every outcome is as documented; 1 otherwise. Skips (exit 0, one line) when
torch cannot be imported.
"""
import contextlib
import os
import subprocess
import sys

try:
    import numpy as np
    import torch  # noqa: F401
except ImportError as e:
    print(f"interop: skipped: {sys.executable} cannot import torch/numpy ({e}); "
          "apt-get install python3-torch python3-numpy")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import pytorch_checkpoint_dump  # noqa: E402
import replay_torch  # noqa: E402
import safetensors_lite  # noqa: E402

PROG, TMP = sys.argv[1], sys.argv[2]
passed = failed = 0


def expect(desc, want, fn, argv, must_print=()):
    global passed, failed
    log = os.path.join(TMP, "log_%02d.txt" % (passed + failed))
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            got = fn(argv)
        except SystemExit as e:
            got = e.code
    text = open(log).read()
    missing = [m for m in must_print if m not in text]
    if got == want and not missing:
        passed += 1
        return
    failed += 1
    why = f"exit {got}, want {want}" if got != want else f"output lacks {missing}"
    print(f"FAIL: {desc}: {why}")
    print("".join("    " + line for line in text.splitlines(True)[-15:]))


ex = pytorch_checkpoint_dump.main
common = ["--harness", PROG, "--out", os.path.join(TMP, "pt")]
expect("pytorch default (healthy)", 0, ex, common, ["PASS pytorch_checkpoint_dump nonreentrant"])
expect("pytorch --reentrant", 0, ex, common + ["--reentrant"], ["PASS pytorch_checkpoint_dump reentrant"])
expect("pytorch --dropout (RNG state stashed)", 0, ex, common + ["--dropout"], ["verdict identical"])
expect("pytorch --dropout --reentrant", 0, ex, common + ["--dropout", "--reentrant"])
expect("pytorch --no-preserve-rng is caught", 1, ex, common + ["--no-preserve-rng"],
       ["dropout mask redrawn on recompute"])
expect("pytorch --batchnorm shows pytorch 96136", 1, ex, common + ["--batchnorm"],
       ["num_batches_tracked 2 vs 1", "BatchNorm running statistics updated by the recomputation"])
expect("pytorch --batchnorm --reentrant likewise", 1, ex, common + ["--batchnorm", "--reentrant"],
       ["BatchNorm running statistics updated by the recomputation"])
expect("pytorch --amp: same-autocast identical, vs fp32 by the calibrated rule", 0, ex,
       common + ["--amp"], ["vs fp32: close"])
expect("pytorch: a --harness that does not exist is exit 2", 2, ex,
       ["--harness", os.path.join(TMP, "nope"), "--out", os.path.join(TMP, "pt")])

# replay: dump two shipped cases with the harness, replay them in PyTorch
dump = os.path.join(TMP, "dump")
rc = subprocess.run([PROG, "run", os.path.join(ROOT, "cases", "cnn_bn.json"),
                     os.path.join(ROOT, "cases", "conv1d_seq.json"),
                     os.path.join(ROOT, "cases", "mlp_dropout.json"),
                     "--dtype", "fp32", "--dump", dump, "--quiet"],
                    stdout=subprocess.DEVNULL).returncode
if rc != 0:
    failed += 1
    print(f"FAIL: run --dump exit {rc}")
rp = replay_torch.main
tol = os.path.join(ROOT, "examples", "interop", "replay_tolerances.json")
for case in ("cnn_bn", "conv1d_seq"):
    expect(f"replay {case}", 0, rp, [os.path.join(dump, case), "--harness", PROG],
           ["PASS close"])
expect("replay cnn_bn reentrant", 0, rp, [os.path.join(dump, "cnn_bn"), "--harness", PROG,
                                          "--reentrant", "--out", os.path.join(TMP, "re")],
       ["second time (pytorch issue 96136"])
# a dump whose step-0 input was changed by 1%: the replay must notice
data = os.path.join(dump, "conv1d_seq", "plain", "step_0000", "data.safetensors")
d = safetensors_lite.load(data)
d["input"] = d["input"] * np.float32(1.01)
safetensors_lite.save(data, d)
expect("replay of a corrupted dump mismatches", 1, rp, [os.path.join(dump, "conv1d_seq"),
                                                        "--harness", PROG], ["mismatch: s0."])
expect("replay of dropout applies the dump's masks", 0, rp,
       [os.path.join(dump, "mlp_dropout"), "--harness", PROG, "--out", os.path.join(TMP, "dr")],
       ["PASS close"])
# shared parameters (one tensor, both uses' gradients) and a label-smoothed cross-entropy
rc = subprocess.run([PROG, "run", os.path.join(ROOT, "tests", "cli", "cases", "mlp_tied.json"),
                     "--dtype", "fp32", "--dump", dump, "--quiet"],
                    stdout=subprocess.DEVNULL).returncode
expect("replay of shared parameters and label smoothing", 0, rp,
       [os.path.join(dump, "mlp_tied"), "--harness", PROG, "--out", os.path.join(TMP, "tied")],
       ["PASS close"])
# an op the example does not replay is refused as such, not blamed on missing masks
rc = subprocess.run([PROG, "run", os.path.join(ROOT, "cases", "unet3d_groupnorm.json"),
                     "--dtype", "fp32", "--dump", dump, "--quiet"],
                    stdout=subprocess.DEVNULL).returncode
expect("replay refuses an op it does not replay, naming it", 2, rp,
       [os.path.join(dump, "unet3d_groupnorm"), "--harness", PROG],
       ["is not among the ops this example replays"])
# a 0-d tensor keeps shape [] through safetensors_lite, as the harness writes scalars
scalar = os.path.join(TMP, "scalar.safetensors")
safetensors_lite.save(scalar, {"bn.num_batches_tracked": np.array(3, np.int64),
                               "loss": np.array(1.5, np.float64)})
back = safetensors_lite.load(scalar)
if back["bn.num_batches_tracked"].shape == () and back["loss"].shape == () and \
        int(back["bn.num_batches_tracked"]) == 3:
    passed += 1
else:
    failed += 1
    print(f"FAIL: 0-d tensors come back shaped {back['bn.num_batches_tracked'].shape}")
expect("replay of a folder that is no dump", 2, rp, [TMP, "--harness", PROG])
print(f"interop: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
