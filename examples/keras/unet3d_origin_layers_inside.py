"""The origin report's bug: the checkpointed function creates its layers.

The same 3-D U-Net as unet3d_origin.py, but each part's function builds new Conv3D and
BatchNormalization layers every time it runs. Plain, that is one set of (untrained,
untracked) layers per forward; under tf.recompute_grad the recomputation in backward runs
the function again, so it builds new layers with new random weights, and the gradients
that flow through the recomputed part come from weights the forward never used. In the
origin thread, forcing the seed by hand made the re-created weights equal and the
gradients agree.

    python3 -m ckpt_harness.keras verify examples/keras/unet3d_origin_layers_inside.py
        caught (exit 1): the stem's gradient differs; the report says "weights re-created on
        recompute" with the variables created during backward
"""
import tensorflow as tf
import keras
from keras import layers

SHAPE = (16, 16, 16, 1)
BATCH = 2


class PartBuildingLayers(keras.layers.Layer):
    def __init__(self, name, filters, **kw):
        super().__init__(name=name, **kw)
        self.filters = filters
        self.checkpoint = False

    def body(self, x, training=None):
        for i in range(2):  # the bug: new layers (new weights) on every call
            x = layers.Conv3D(self.filters, 3, padding="same", use_bias=False)(x)
            x = layers.BatchNormalization()(x, training=training)
            x = layers.ReLU()(x)
        return x

    def call(self, x, training=None):
        if self.checkpoint:
            return tf.recompute_grad(lambda t: self.body(t, training=training))(x)
        return self.body(x, training=training)


def build():
    inp = keras.Input(SHAPE, batch_size=BATCH, name="x")
    stem = layers.Conv3D(8, 3, padding="same", name="stem")(inp)
    h = PartBuildingLayers("enc", 8)(stem)
    p = layers.MaxPool3D(2, name="pool", dtype="float32")(h)  # no fp16 MaxPool3D on CPUs
    d = PartBuildingLayers("dec", 8)(p)
    u = layers.UpSampling3D(2, name="up")(d)
    out = layers.Conv3D(1, 1, name="head")(layers.Add(name="skip")([h, u]))
    model = keras.Model(inp, out, name="unet3d_layers_inside")
    x = keras.random.normal((BATCH,) + SHAPE, seed=1)
    y = keras.random.normal((BATCH,) + SHAPE, seed=2)

    def loss_fn(out, step):
        return keras.ops.mean(keras.ops.square(out - y))
    return model, (x,), loss_fn


def enable_checkpointing(model):
    for name in ("enc", "dec"):
        model.get_layer(name).checkpoint = True
