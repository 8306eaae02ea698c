"""Dense blocks with Keras Dropout, for checkpointing with --wrap 'block*'.

    python3 -m ckpt_harness.keras verify examples/keras/dropout_mlp.py --wrap 'block*'
        tf.recompute_grad replays no random state: each Dropout's seed generator has moved
        on by the recomputation, which draws a new mask: caught (exit 1)
    ... --modes recompute_grad:preserve-state
        the seed generators are set back for the recomputation: the same mask, passes
"""
import keras
from keras import layers


def build():
    inp = keras.Input((16,), batch_size=8, name="x")
    h = inp
    for i in range(3):
        blk = keras.Sequential([layers.Dense(32, activation="relu", name=f"block{i}_dense"),
                                layers.Dropout(0.2, seed=100 + i, name=f"block{i}_drop")],
                               name=f"block{i}")
        h = blk(h)
    out = layers.Dense(10, name="head")(h)
    model = keras.Model(inp, out, name="dropout_mlp")
    x = keras.random.normal((8, 16), seed=3)
    y = keras.random.randint((8,), 0, 10, seed=4)

    def loss_fn(logits, step):
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            y, logits, from_logits=True))
    return model, (x,), loss_fn
