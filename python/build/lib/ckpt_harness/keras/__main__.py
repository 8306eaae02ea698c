"""python3 -m ckpt_harness.keras verify SCRIPT.py [options]: see docs/keras.md."""
import os
import sys

# TensorFlow's CPU allocator counts bytes only with its BFC allocator, chosen when
# TensorFlow starts: set it before anything imports tensorflow.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from ckpt_harness.keras.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
