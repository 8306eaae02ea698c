"""Small Keras models for the driver's tests (each build() as SCRIPT.py's)."""
import keras
from keras import layers


def global_seed_dropout():
    """Dropout drawn from Keras's global SeedGenerator (keras.random.dropout without a
    seed): only keras.utils.set_random_seed after clear_session resets it, tf.random.set_seed
    does not. The layers have no seed state of their own to copy between runs."""

    class GlobalDropout(keras.layers.Layer):
        def call(self, x, training=None):
            return keras.random.dropout(x, 0.3) if training else x

    inp = keras.Input((12,), batch_size=4, name="x")
    h = layers.Dense(16, activation="relu", name="d0")(inp)
    h = GlobalDropout(name="gdrop")(h)
    out = layers.Dense(3, name="head")(h)
    model = keras.Model(inp, out, name="global_seed_dropout")
    x = keras.random.normal((4, 12), seed=5)

    def loss_fn(o, step):
        return keras.ops.mean(keras.ops.square(o))
    return model, (x,), loss_fn


def dense_blocks(n=3, width=32):
    """Dense blocks without randomness: tf.recompute_grad around them is bitwise exact."""
    inp = keras.Input((16,), batch_size=8, name="x")
    h = inp
    for i in range(n):
        h = keras.Sequential([layers.Dense(width, activation="relu", name=f"b{i}_dense"),
                              layers.LayerNormalization(name=f"b{i}_ln")],
                             name=f"block{i}")(h)
    out = layers.Dense(4, name="head")(layers.Add(name="skip")([h, h]))
    model = keras.Model(inp, out, name="dense_blocks")
    x = keras.random.normal((8, 16), seed=7)

    def loss_fn(o, step):  # small enough that 2^15 loss scaling does not overflow fp16
        return 1e-3 * keras.ops.mean(keras.ops.square(keras.ops.cast(o, "float32")))
    return model, (x,), loss_fn


def non_scalar_loss():
    model, x, _ = dense_blocks(1)
    return model, x, lambda o, step: keras.ops.square(o)


def loss_scale_overflow():
    """dense_blocks with a loss large enough that Keras' LossScaleOptimizer (initial scale
    2^15) overflows fp16 in its first steps: the mixed_float16 run skips those updates, as
    PyTorch's GradScaler does, and trains on from the same weights."""
    model, x, _ = dense_blocks(2, 16)

    def loss_fn(o, step):
        return 2.0 * keras.ops.mean(keras.ops.square(keras.ops.cast(o, "float32")))
    return model, x, loss_fn
