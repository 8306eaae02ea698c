"""ckpt_harness.keras: verify a Keras 3 (TensorFlow backend) model's recompute setup.

    python3 -m ckpt_harness.keras verify SCRIPT.py --wrap 'enc*' --dtype fp32,mixed_float16

SCRIPT.py defines build() -> (model, inputs, loss_fn) and optionally
enable_checkpointing(model). The driver trains the plain configuration twice (the
control) and the checkpointed one, writes every step's loss, gradients, variables,
non-trainable variables, layer outputs, recompute counts and allocator bytes in the judge
input layout, and `ckpt-harness judge` decides. docs/keras.md is the user's page.

TensorFlow is imported on first use of verify, assert_checkpoint_equivalent or
wrap_recompute (so `python3 -m ckpt_harness.keras --help` and bad usage need no TensorFlow,
and the command can set TF_CPU_ALLOCATOR_USE_BFC before TensorFlow starts).
"""
from ckpt_harness.judge import Result, UsageError  # noqa: F401

__all__ = ["verify", "assert_checkpoint_equivalent", "wrap_recompute", "Result", "UsageError"]


def __getattr__(name):
    if name in ("verify", "assert_checkpoint_equivalent"):
        from ckpt_harness.keras import api
        return getattr(api, name)
    if name == "wrap_recompute":
        from ckpt_harness.keras import instrument
        return instrument.wrap_recompute
    raise AttributeError(f"module 'ckpt_harness.keras' has no attribute {name!r}")
