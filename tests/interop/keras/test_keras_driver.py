"""The Keras driver's documented outcomes (docs/keras.md), judged by the C program.

Run by tests/interop/run_keras.sh (make check-keras; make check when the Python it uses
imports tensorflow). Every verdict asserted here is `ckpt-harness judge`'s exit code and
text; the driver decides nothing.
"""
import json
import os
import subprocess
import sys

import pytest

tf = pytest.importorskip("tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
EXAMPLES = os.path.join(ROOT, "examples", "keras")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)

from ckpt_harness.keras import verify, assert_checkpoint_equivalent  # noqa: E402
import models  # noqa: E402
import unet3d_origin  # noqa: E402
import unet3d_origin_layers_inside  # noqa: E402
import dropout_mlp  # noqa: E402

HARNESS = os.environ.get("CKPT_HARNESS") or os.path.join(ROOT, "build", "ckpt-harness")


def run(build, tmp_path, **kw):
    kw.setdefault("harness", HARNESS)
    kw.setdefault("echo", False)
    kw.setdefault("report", str(tmp_path / "report"))
    kw.setdefault("dump", str(tmp_path / "dump"))
    return verify(build, **kw)


def notes(tmp_path):
    with open(tmp_path / "dump" / "judge.json") as f:
        return json.load(f)["notes"]


# ---- the origin scenario ---------------------------------------------------------------

def test_weights_recreated_on_recompute_are_caught_and_named(tmp_path):
    r = run(unet3d_origin_layers_inside.build, tmp_path,
            enable_checkpointing=unet3d_origin_layers_inside.enable_checkpointing)
    assert r.exit_code == 1, r.summary
    assert "weights re-created on recompute" in r.summary, r.summary


def test_batchnorm_double_update_by_recompute_grad_is_caught_and_named(tmp_path):
    r = run(unet3d_origin.build, tmp_path, wrap=["enc", "dec"])
    assert r.exit_code == 1, r.summary
    assert "BatchNorm" in r.summary and "moving_" in r.summary, r.summary
    assert "updated by the recomputation" in r.summary, r.summary


def test_model_own_recompute_grad_shows_the_same_double_update(tmp_path):
    r = run(unet3d_origin.build, tmp_path,
            enable_checkpointing=unet3d_origin.enable_checkpointing)
    assert r.exit_code == 1, r.summary
    assert "updated by the recomputation" in r.summary, r.summary


def test_fixed_origin_model_passes_with_saving_and_recompute_counts(tmp_path):
    r = run(unet3d_origin.build, tmp_path, wrap=["enc", "dec"],
            modes=["recompute_grad:preserve-state"], min_saving=0.3)
    assert r.exit_code == 0, r.summary
    n = "\n".join(notes(tmp_path))
    assert "enc recomputed 2 times in 2 forward calls" in n, n
    assert "dec recomputed 2 times in 2 forward calls" in n, n
    assert "saving" in n, n


def test_mixed_float16_with_loss_scaling_is_judged_against_fp32(tmp_path):
    r = run(unet3d_origin.build, tmp_path, wrap=["enc", "dec"],
            modes=["recompute_grad:preserve-state"], dtypes=["fp32", "mixed_float16"])
    assert r.exit_code == 0, r.summary
    with open(tmp_path / "dump" / "judge.json") as f:
        runs = json.load(f)["runs"]
    roles = sorted((x["role"], x["dtype"]) for x in runs)
    assert roles.count(("calibration", "fp16")) == 3, roles
    assert any(s["loss_scale"] > 1 for x in runs if x["dtype"] == "fp16" and x["role"] == "plain"
               for s in x["steps"]), "no loss scaling in the mixed_float16 run"



def test_mixed_float16_steps_the_loss_scaler_skipped_are_judged_like_run(tmp_path):
    """A loss large enough that LossScaleOptimizer (scale 2^15) overflows fp16 in its first
    two steps: the mixed_float16 run skips those updates and trains on from the same weights.
    Its fp32 reference and calibration runs skip the same updates (as run's fp32 references
    do), so the healthy model passes against fp32; judged against an fp32 run that applied
    them, every parameter after step 0 compared two different models (a false FAIL)."""
    r = run(models.loss_scale_overflow, tmp_path, wrap=["block*"], steps=4,
            dtypes=["mixed_float16"])
    with open(tmp_path / "dump" / "judge.json") as f:
        d = json.load(f)
    runs = {x["id"]: x for x in d["runs"]}
    low = [s["skipped"] for s in runs["plain.fp16"]["steps"]]
    assert any(low) and not all(low), low  # some steps skipped, some updates taken
    ref = runs["plain.fp32.skip_like-fp16"]
    assert ref["mode"] == "skip_like:fp16" and [s["skipped"] for s in ref["steps"]] == low
    for k in range(3):
        assert [s["skipped"] for s in runs[f"calibration{k}.fp16"]["steps"]] == low
    assert r.exit_code == 0, r.summary
    assert "vs fp32: close" in r.summary, r.summary
    # the judge refuses an fp32 reference that applied an update the loss scaler skipped
    d["runs"] = [x for x in d["runs"] if x["id"] != "plain.fp32.skip_like-fp16"]
    (tmp_path / "dump" / "judge.json").write_text(json.dumps(d))
    p = subprocess.run([HARNESS, "judge", str(tmp_path / "dump")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert 'run "plain.fp32" applied the optimizer update at step 0' in p.stderr, p.stderr

# ---- dropout ---------------------------------------------------------------------------

def test_dropout_redrawn_by_recompute_grad_is_caught(tmp_path):
    r = run(dropout_mlp.build, tmp_path, wrap=["block*"])
    assert r.exit_code == 1, r.summary
    assert "dropout mask redrawn on recompute" in r.summary, r.summary


def test_dropout_with_seed_state_replayed_passes(tmp_path):
    r = run(dropout_mlp.build, tmp_path, wrap=["block*"],
            modes=["recompute_grad:preserve-state"])
    assert r.exit_code == 0, r.summary


def test_control_fails_without_reseeding_keras_global_seed_generator(tmp_path):
    r = run(models.global_seed_dropout, tmp_path, wrap=["d0"], reseed=False)
    assert r.exit_code == 1, r.summary
    assert "control" in r.summary.lower(), r.summary


def test_control_passes_with_reseeding(tmp_path):
    r = run(models.global_seed_dropout, tmp_path, wrap=["d0"])
    assert r.exit_code == 0, r.summary


# ---- proof that checkpointing ran -------------------------------------------------------

def test_wrapped_layer_that_never_recomputes_is_reported(tmp_path):
    r = run(models.dense_blocks, tmp_path, wrap=["skip"])  # Add takes a list: not wrapped
    n = "\n".join(notes(tmp_path))
    assert "checkpointing did not run inside skip" in n, n
    assert r.exit_code == 1, r.summary


def test_enable_checkpointing_that_checkpoints_nothing_fails(tmp_path):
    # an attribute nothing reads: the checkpointed run is the plain run again, not a pass
    def unread_flag(model):
        model.use_checkpointing = True
    r = run(models.dense_blocks, tmp_path, enable_checkpointing=unread_flag)
    assert r.exit_code == 1, r.summary
    assert "checkpointing did not run inside `enable_checkpointing(model)`" in r.summary, \
        r.summary


def test_min_saving_fails_a_checkpoint_that_saves_too_little(tmp_path):
    r = run(models.dense_blocks, tmp_path, wrap=["block0"], min_saving=0.99)
    assert r.exit_code == 1, r.summary


def test_healthy_dense_blocks_pass_in_every_dtype(tmp_path):
    r = run(models.dense_blocks, tmp_path, wrap=["block*"],
            dtypes=["fp32", "mixed_float16", "mixed_bfloat16"], optimizer="adam")
    assert r.exit_code == 0, r.summary


def test_pytest_helper_message_is_the_harness_summary(tmp_path):
    with pytest.raises(AssertionError) as e:
        assert_checkpoint_equivalent(dropout_mlp.build, wrap=["block*"], harness=HARNESS)
    assert "checkpointing changed this Keras model's training" in str(e.value)
    assert "dropout mask redrawn on recompute" in str(e.value)
    assert_checkpoint_equivalent(models.dense_blocks, wrap=["block*"], harness=HARNESS)


# ---- the command line -------------------------------------------------------------------

def cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), CKPT_HARNESS=HARNESS)
    p = subprocess.run([sys.executable, "-m", "ckpt_harness.keras"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=e, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def test_cli_origin_run_writes_reports_junit_and_html(tmp_path):
    rc, out, err = cli("verify", os.path.join(EXAMPLES, "unet3d_origin.py"), "--wrap", "enc",
                       "--wrap", "dec", "--modes", "recompute_grad:preserve-state",
                       "--report", str(tmp_path / "rep"), "--junit", str(tmp_path / "j.xml"),
                       "--html", str(tmp_path / "r.html"))
    assert rc == 0, out + err
    assert (tmp_path / "rep" / "summary.json").is_file()
    assert "<testsuite" in (tmp_path / "j.xml").read_text()
    assert "<html" in (tmp_path / "r.html").read_text().lower()


def _bad_script(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("args,words", [
    (["verify", "{nobuild}", "--wrap", "x"], "defines no build()"),
    (["verify", "{origin}", "--wrap", "nothing_matches*"], "matches no layer"),
    (["verify", "{origin}", "--wrap", "enc", "--modes", "bogus"], "unknown mode"),
    (["verify", "{origin}", "--wrap", "enc", "--dtype", "fp8"], "unknown dtype"),
    (["verify", "{nonscalar}", "--wrap", "block0"], "must be a scalar"),
    (["verify", "{dropout}"], "nothing to checkpoint"),
    (["verify", "{f32loss}", "--wrap", "block0", "--dtype", "mixed_bfloat16"],
     "loss_fn(output, 0) raised InvalidArgumentError (the output is bfloat16; a mixed "
     "policy's output: cast it"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    subs = {"{nobuild}": _bad_script(tmp_path, "nobuild.py", "x = 1\n"),
            "{origin}": os.path.join(EXAMPLES, "unet3d_origin.py"),
            "{dropout}": os.path.join(EXAMPLES, "dropout_mlp.py"),
            "{nonscalar}": _bad_script(
                tmp_path, "nonscalar.py", f"import sys; sys.path.insert(0, {HERE!r})\n"
                          "from models import non_scalar_loss as build\n"),
            # a float32 target minus the mixed policy's bfloat16 output: the loss raises
            "{f32loss}": _bad_script(
                tmp_path, "f32loss.py", f"import sys; sys.path.insert(0, {HERE!r})\n"
                "import keras, models\n"
                "def build():\n"
                "    model, x, _ = models.dense_blocks(n=1, width=8)\n"
                "    y = keras.ops.zeros((8, 4))\n"
                "    return model, x, lambda o, s: keras.ops.mean((o - y) ** 2)\n")}
    rc, out, err = cli(*[subs.get(a, a) for a in args])
    lines = [l for l in err.splitlines() if l.startswith("python3 -m ckpt_harness.keras")]
    assert rc == 2, out + err
    assert len(lines) == 1 and words in lines[0], err


# ---- Keras -> tf2onnx -> import ------------------------------------------------------------

def test_onnx_export_refused_when_batchnorm_was_folded(tmp_path):
    pytest.importorskip("tf2onnx")
    rc, out, err = cli("onnx", os.path.join(EXAMPLES, "unet3d_origin.py"),
                       "-o", str(tmp_path / "m.onnx"), "--import", str(tmp_path / "m.json"))
    assert rc == 2, out + err
    assert "no BatchNormalization node" in err and "enc/enc0_bn" in err, err
    assert not (tmp_path / "m.json").exists()


# ---- the judge input's Keras fields are checked strictly ------------------------------------

@pytest.mark.parametrize("edit,words", [
    (lambda d: d["runs"][2].__setitem__("parts", "enc"), "parts: must be a list"),
    (lambda d: d["runs"][2]["parts"][0].pop("recomputed"), "recomputed: missing"),
    (lambda d: d["runs"][2]["steps"][0].__setitem__("created_in_backward", [3]),
     "created_in_backward[0]"),
])
def test_bad_judge_input_fields_are_one_line_and_exit_2(tmp_path, edit, words):
    run(models.dense_blocks, tmp_path, wrap=["block0"])
    path = tmp_path / "dump" / "judge.json"
    d = json.loads(path.read_text())
    assert d["runs"][2]["role"] == "checkpointed"
    edit(d)
    path.write_text(json.dumps(d))
    p = subprocess.run([HARNESS, "judge", str(tmp_path / "dump")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr


def test_onnx_export_of_a_batchnorm_free_model_imports_its_upsampling(tmp_path):
    pytest.importorskip("tf2onnx")
    script = _bad_script(tmp_path, "up.py", (
        "import keras\nfrom keras import layers\n"
        "def build():\n"
        "    i = keras.Input((8, 8, 8, 2), batch_size=2)\n"
        "    h = layers.Conv3D(4, 3, padding='same', bias_initializer='ones')(i)\n"
        "    u = layers.UpSampling3D(2)(layers.MaxPool3D(2)(h))\n"
        "    m = keras.Model(i, layers.Add()([h, u]))\n"
        "    return m, (keras.random.normal((2, 8, 8, 8, 2), seed=1),), "
        "lambda o, s: keras.ops.mean(o)\n"))
    rc, out, err = cli("onnx", script, "-o", str(tmp_path / "up.onnx"),
                       "--import", str(tmp_path / "up.json"))
    assert rc == 0, out + err
    case = json.loads((tmp_path / "up.json").read_text())
    assert [l["scale"] for l in case["layers"] if l["op"] == "upsample3d"] == [[2, 2, 2]], case


# ---- outputs name only files that still exist ---------------------------------------------

def _named_files(junit_text, report_dir):
    import re
    named = re.findall(r"case file: ([^\n<]+)", junit_text)
    for f in sorted(os.listdir(report_dir)):
        with open(os.path.join(report_dir, f)) as fh:
            d = json.load(fh)
        items = d.get("items") or [d]
        for it in items:
            c = it.get("case") if isinstance(it.get("case"), dict) else {}
            for p in (c.get("file"), (it.get("config") or {}).get("judge_input"), it.get("file")):
                if p:
                    named.append(p)
    return named


def test_junit_and_reports_name_no_deleted_judge_input(tmp_path):
    """Without --dump the driver judges a temporary folder and deletes it: the JUnit
    system-out and the reports name the file that defines build(), never that judge.json."""
    r = verify(models.dense_blocks, wrap=["block0"], harness=HARNESS, echo=False,
               junit=str(tmp_path / "j.xml"), report=str(tmp_path / "rep"))
    assert r.exit_code == 0, r.summary
    j = (tmp_path / "j.xml").read_text()
    named = _named_files(j, str(tmp_path / "rep"))
    assert named and all(os.path.isfile(p) for p in named), named
    assert os.path.abspath(models.__file__) in named, named
    # a build() with no source file: nothing is named (no "case file:" line at all)
    ns = {}
    exec("import models\ndef build():\n    return models.dense_blocks()\n", ns)
    r = verify(ns["build"], wrap=["block0"], harness=HARNESS, echo=False,
               junit=str(tmp_path / "j2.xml"), report=str(tmp_path / "rep2"))
    assert r.exit_code == 0, r.summary
    j2 = (tmp_path / "j2.xml").read_text()
    assert "case file:" not in j2 and "judge.json" not in j2, j2
    assert _named_files(j2, str(tmp_path / "rep2")) == []
