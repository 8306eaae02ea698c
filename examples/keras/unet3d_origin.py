"""The model this project started from, fixed: a small Keras 3-D U-Net whose layers are
built once.

Two checkpointed parts of Conv3D + BatchNormalization + ReLU blocks (`enc` at 16^3, `dec`
at 8^3 after a MaxPool3D), an UpSampling3D back to 16^3 and a skip add, on a 2 x 16^3 x 1
input (channels last, Keras's default). The origin report's model was the same shape at
368 x 368 x 224.

    python3 -m ckpt_harness.keras verify examples/keras/unet3d_origin.py --wrap enc --wrap dec
        tf.recompute_grad around both parts: gradients identical, but every BatchNormalization's
        moving mean and variance are updated a second time by the recomputation: caught (exit 1)
    ... --modes recompute_grad:preserve-state
        the recomputation leaves the moving statistics as the forward left them: passes
    python3 -m ckpt_harness.keras verify examples/keras/unet3d_origin.py
        enable_checkpointing(model) below (the model's own tf.recompute_grad): the same
        double update as --wrap, caught
"""
import tensorflow as tf
import keras
from keras import layers

SHAPE = (16, 16, 16, 1)
BATCH = 2


def conv_block(name, filters):
    return [layers.Conv3D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv"),
            layers.BatchNormalization(name=f"{name}_bn"),
            layers.ReLU(name=f"{name}_relu")]


class Part(keras.layers.Layer):
    """Blocks of layers built once in __init__; checkpointed by the model's own
    tf.recompute_grad when `checkpoint` is set (enable_checkpointing below)."""

    def __init__(self, name, filters, n_blocks=2, **kw):
        super().__init__(name=name, **kw)
        self.blocks = [l for i in range(n_blocks) for l in conv_block(f"{name}{i}", filters)]
        self.checkpoint = False

    def body(self, x, training=None):
        for l in self.blocks:
            x = l(x, training=training)
        return x

    def call(self, x, training=None):
        if self.checkpoint:
            return tf.recompute_grad(lambda t: self.body(t, training=training))(x)
        return self.body(x, training=training)


def make_model(filters=8):
    inp = keras.Input(SHAPE, batch_size=BATCH, name="x")
    h = Part("enc", filters)(inp)
    # TensorFlow has no float16 MaxPool3D kernel on the CPU: under mixed_float16 the pool
    # runs in float32 (a per-layer dtype policy, as Keras users do for such ops)
    p = layers.MaxPool3D(2, name="pool", dtype="float32")(h)
    d = Part("dec", filters)(p)
    u = layers.UpSampling3D(2, name="up")(d)
    s = layers.Add(name="skip")([h, u])
    out = layers.Conv3D(1, 1, name="head")(s)
    return keras.Model(inp, out, name="unet3d_origin")


def build():
    model = make_model()
    x = keras.random.normal((BATCH,) + SHAPE, seed=1)
    y = keras.random.normal((BATCH,) + SHAPE, seed=2)

    def loss_fn(out, step):
        return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32") - y))
    return model, (x,), loss_fn


def enable_checkpointing(model):
    for name in ("enc", "dec"):
        model.get_layer(name).checkpoint = True
