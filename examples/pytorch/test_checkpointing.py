"""The pytest example of docs/pytorch.md: checkpointing verified in CI.

    PYTHONPATH=python python3 -m pytest examples/pytorch/test_checkpointing.py

Each test builds a model, lets the PyTorch driver train it plain twice and checkpointed,
and fails with the harness's own summary when checkpointing changed anything.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ckpt_harness.torch import assert_checkpoint_equivalent, verify  # noqa: E402

import resnet_cnn  # noqa: E402
import unet3d_bn  # noqa: E402


def test_resnet_blocks_checkpoint_cleanly():
    model, inputs, loss_fn = resnet_cnn.build()
    assert_checkpoint_equivalent(model, inputs, loss_fn, wrap_type=["BasicBlock"],
                                 modes=["nonreentrant", "reentrant"], steps=2)


def test_unet_batchnorm_inside_checkpoint_is_caught():
    model, inputs, loss_fn = unet3d_bn.build()
    r = verify(model, inputs, loss_fn, wrap=["enc*", "dec*"], echo=False)
    assert not r.passed
    assert "BatchNorm running statistics updated by the recomputation" in r.summary
