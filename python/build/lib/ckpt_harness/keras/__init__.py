"""ckpt_harness.keras: verify a Keras 3 (TensorFlow backend) model's recompute setup.

    python3 -m ckpt_harness.keras verify SCRIPT.py --wrap 'enc*' --dtype fp32,mixed_float16

SCRIPT.py defines build() -> (model, inputs, loss_fn) and optionally
enable_checkpointing(model). The driver trains the plain configuration twice (the
control) and the checkpointed one, writes every step's loss, gradients, variables,
non-trainable variables, layer outputs, recompute counts and allocator bytes in the judge
input layout, and `ckpt-harness judge` decides. docs/keras.md is the user's page.

Importing this package imports TensorFlow; the rest of ckpt_harness does not need it.
"""
from ckpt_harness.keras.api import verify, assert_checkpoint_equivalent  # noqa: F401
from ckpt_harness.keras.instrument import wrap_recompute  # noqa: F401
from ckpt_harness.judge import Result, UsageError  # noqa: F401
