"""The Keras 3 training runs behind `python3 -m ckpt_harness.keras verify`.

From one build() and one snapshot of every variable (trainable, non-trainable and the seed
generators' states), each run rebuilds the model after keras.utils.clear_session() and
keras.utils.set_random_seed(seed), assigns the snapshot, and trains `steps` steps eagerly
with a tf.GradientTape: the plain configuration twice (the control), the checkpointed one
(tf.recompute_grad around the --wrap layers, or the script's enable_checkpointing(model)),
and for each mixed-precision policy the same in that policy plus three fp32 calibration
runs (the low dtype's rounding at every layer, runner docs in docs/keras.md). Per step it
writes the loss, every trainable variable's gradient and value after the update, every
non-trainable variable, layer outputs of the forward and of the recomputation, recompute
counts and TensorFlow's allocator bytes into the judge input. Nothing here judges.
"""
import numpy as np
import tensorflow as tf
import keras

from ckpt_harness.judge import UsageError
from ckpt_harness.keras import instrument as ins

POLICIES = {"fp32": "float32", "mixed_float16": "mixed_float16",
            "mixed_bfloat16": "mixed_bfloat16"}
JUDGE_DTYPE = {"fp32": "fp32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
DTYPE_WORD = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}
MODES = ("recompute_grad", "recompute_grad:preserve-state")
NORM_TYPES = ("BatchNormalization", "LayerNormalization", "GroupNormalization",
              "UnitNormalization", "RMSNormalization")


class LossFnError(Exception):
    """The script's loss_fn raised (not the model): api names loss_fn and the output's dtype."""

    def __init__(self, step, out, cause):
        super().__init__(str(cause))
        self.step, self.cause = step, cause
        self.out_dtype = str(getattr(out, "dtype", "?")).replace("<dtype: '", "").rstrip("'>")


class Config:
    """What verify() runs (the CLI's options)."""

    def __init__(self, steps=2, dtypes=("fp32",), optimizer="sgd", lr=0.01, seed=0,
                 wrap=(), modes=("recompute_grad",), record_outputs=True, reseed=True,
                 device=None):
        self.steps = int(steps)
        self.dtypes = list(dtypes)
        self.optimizer = optimizer
        self.lr = float(lr)
        self.seed = int(seed)
        self.wrap = list(wrap)
        self.modes = list(modes)
        self.record_outputs = record_outputs
        self.reseed = reseed
        self.device = device or "CPU:0"
        for d in self.dtypes:
            if d not in POLICIES:
                raise UsageError(f"--dtype: unknown dtype {d!r} (known: {', '.join(POLICIES)})")
        for m in self.modes:
            if m not in MODES:
                raise UsageError(f"--modes: unknown mode {m!r} (known: {', '.join(MODES)})")

    def as_dict(self):
        return {"steps": self.steps, "dtypes": self.dtypes, "optimizer": self.optimizer,
                "lr": self.lr, "seed": self.seed, "wrap": self.wrap, "modes": self.modes,
                "deterministic_ops": True, "reseed": self.reseed,
                "memory": "TensorFlow allocator bytes on " + self.device}


def make_optimizer(name, lr, policy):
    if name == "sgd":
        opt = keras.optimizers.SGD(learning_rate=lr)
    elif name == "adam":
        opt = keras.optimizers.Adam(learning_rate=lr)
    elif name == "adamw":
        opt = keras.optimizers.AdamW(learning_rate=lr)
    else:
        raise UsageError(f"--optimizer: unknown optimizer {name!r} (known: sgd, adam, adamw)")
    if policy == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


def _as_inputs(inputs, step):
    x = inputs(step) if callable(inputs) else inputs
    if isinstance(x, (list, tuple)):
        return tuple(tf.convert_to_tensor(t) for t in x)
    return (tf.convert_to_tensor(x),)


def _np32(t):
    a = np.asarray(t.numpy() if hasattr(t, "numpy") else t)
    if a.dtype.kind == "f" and a.dtype != np.float64:
        return a.astype(np.float32)
    if a.dtype.kind == "V" or str(a.dtype) == "bfloat16":
        return a.astype(np.float32)
    return a


def _word(dt):
    s = str(dt)
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(s, "fp32")


class Built:
    """One build() of the user's script, reseeded."""

    def __init__(self, build, cfg, policy):
        if cfg.reseed:
            keras.utils.clear_session(free_memory=False)  # also resets the dtype policy
            keras.utils.set_random_seed(cfg.seed)
        keras.mixed_precision.set_global_policy(policy)
        got = build()
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise UsageError("build() must return (model, inputs, loss_fn); it returned "
                             f"{type(got).__name__}"
                             + (f" of {len(got)} items" if isinstance(got, (tuple, list)) else ""))
        self.model, self.inputs, self.loss_fn = got
        if not isinstance(self.model, keras.layers.Layer):
            raise UsageError(f"build(): the model is a {type(self.model).__name__}, not a "
                             "Keras model or layer")
        if not callable(self.loss_fn):
            raise UsageError("build(): loss_fn is not callable")
        if not self.model.built or not self.model.variables:
            self.model(*_as_inputs(self.inputs, 0), training=False)  # creates the variables
        if not self.model.trainable_variables:
            raise UsageError("build(): the model has no trainable variables")
        try:
            self.names = ins.variable_names(self.model)
        except ValueError as e:
            raise UsageError(f"build(): {e}")


def snapshot(built):
    return {built.names[id(v)]: v.numpy().copy() for v in built.model.variables}


def restore(built, snap):
    have = {built.names[id(v)]: v for v in built.model.variables}
    missing = sorted(set(snap) - set(have))
    extra = sorted(set(have) - set(snap))
    if missing or extra:
        raise UsageError("build() made a different model on another call: "
                         + (f"variables {', '.join(missing[:4])} missing" if missing else "")
                         + ("; " if missing and extra else "")
                         + (f"new variables {', '.join(extra[:4])}" if extra else ""))
    for n, v in have.items():
        if tuple(v.shape) != snap[n].shape:
            raise UsageError(f"build() made a different model on another call: {n} has shape "
                             f"{tuple(v.shape)}, before {snap[n].shape}")
        v.assign(snap[n])


class RunFacts:
    """What one run tells the runner besides its tensors (for the notes and the checks)."""

    def __init__(self):
        self.recomputed = {}        # wrapped part -> recomputations over all steps
        self.forwards = {}          # wrapped part -> forward calls over all steps
        self.layer_recomputes = {}  # every layer called in backward -> count
        self.part_bytes = {}        # part -> bytes left allocated by its forward (step 0)
        self.held = []              # per step: bytes held after the forward
        self.peak = []              # per step: allocator peak over the step (from its start)
        self.untracked = {"forward": {}, "backward": {}}
        self.created = {"forward": 0, "backward": 0}
        self.created_names = {"forward": [], "backward": []}
        self.order = []
        self.types = {}


def train_run(build, cfg, snap, run, policy, checkpointed=False, mode="recompute_grad",
              enable_checkpointing=None, rounder=None, memory=None, modules=None,
              skip_like=None):
    """Trains one run and writes its steps into run (a dump.Run). snap: the variable
    snapshot every run starts from (None: take it from this build and return it).
    skip_like: per step, True where the low-precision run's loss scaler skipped the update:
    this (fp32) run skips it too and says so, as the harness's own fp32 references do, so
    the judgement against fp32 compares the same model at every later step."""
    b = Built(build, cfg, policy)
    if snap is None:
        snap = snapshot(b)
    restore(b, snap)
    model = b.model
    parts = []
    if cfg.wrap:
        parts, unused = ins.match_wrap(model, cfg.wrap)
        if unused:
            raise UsageError(f"--wrap {unused[0]!r} matches no layer of the model (layers: "
                             + ", ".join(ins.layer_path(l) for l in ins.walk(model)[:12]) + ")")
    rec = ins.Recorder(model, memory, record_outputs=cfg.record_outputs, rounder=rounder,
                       parts=parts)
    rec.install()
    counters = {}
    if checkpointed:
        if cfg.wrap:
            for l in parts:
                counters[ins.layer_path(l)] = ins.wrap_recompute(
                    l, preserve_state=(mode == "recompute_grad:preserve-state"))
        elif enable_checkpointing is not None:
            got = enable_checkpointing(model)
            if isinstance(got, keras.layers.Layer) and got is not model:
                raise UsageError("enable_checkpointing(model) returned another model: change "
                                 "the model in place (wrap its layers' call, or set "
                                 "keras.RematScope) and return None")
    facts = RunFacts()
    facts_parts = {ins.layer_path(l): 0 for l in parts}  # forward calls per part
    tvars = model.trainable_variables
    ntvars = model.non_trainable_variables
    opt = make_optimizer(cfg.optimizer, cfg.lr, policy)
    opt.build(tvars)
    scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    rounded_vars = []
    if rounder is not None:
        owners = ins.owner_map(model)
        rounded_vars = [v for v in tvars if v.dtype == "float32"
                        and type(owners.get(id(v))).__name__ not in NORM_TYPES]
    try:
        for step in range(cfg.steps):
            rec.new_step()
            xs = _as_inputs(b.inputs, step)
            if rounder is not None:
                xs = tuple(tf.constant(ins.round_significand_np(x.numpy(), rounder.dtype))
                           if x.dtype == tf.float32 else x for x in xs)
                masters = [v.numpy().copy() for v in rounded_vars]
                for v, m in zip(rounded_vars, masters):
                    v.assign(ins.round_significand_np(m, rounder.dtype))
            memory.reset_peak()
            base = memory.current()
            with rec.watching():
                with tf.GradientTape() as tape:
                    with rec.in_phase(ins.FORWARD):
                        out = model(*xs, training=True)
                        try:
                            loss = b.loss_fn(out, step)
                        except UsageError:
                            raise
                        except Exception as e:  # the script's loss, not the model
                            raise LossFnError(step, out, e) from e
                        if not isinstance(loss, (tf.Tensor, tf.Variable)) and \
                                not hasattr(loss, "shape"):
                            raise UsageError(f"loss_fn returned a {type(loss).__name__}, not "
                                             "a tensor")
                        if len(loss.shape) != 0:
                            raise UsageError(f"loss_fn returned a tensor of shape "
                                             f"{tuple(loss.shape)}: it must be a scalar")
                        loss = tf.cast(loss, tf.float32)
                        scale = float(opt.dynamic_scale.numpy()) if scaled else 1.0
                        target = opt.scale_loss(loss) if scaled else loss
                held = None if base is None else max(0, memory.current() - base)
                with rec.in_phase(ins.BACKWARD):
                    grads = tape.gradient(target, tvars)
            peak = None if base is None else max(0, memory.peak() - base)
            if rounder is not None:
                for v, m in zip(rounded_vars, masters):
                    v.assign(m)
            gnone = [b.names[id(v)] for v, g in zip(tvars, grads) if g is None]
            g_np = {}
            finite = True
            for v, g in reversed(list(zip(tvars, grads))):  # backward order (judge input)
                a = np.zeros(tuple(v.shape), np.float32) if g is None else \
                    _np32(tf.cast(g, tf.float32) / scale)
                finite = finite and bool(np.all(np.isfinite(a)))
                g_np[b.names[id(v)]] = a
            follow_skip = bool(skip_like and skip_like[step])
            if not follow_skip:
                opt.apply([g if g is not None else tf.zeros_like(v)
                           for v, g in zip(tvars, grads)], tvars)
            params = {b.names[id(v)]: _np32(v) for v in tvars}
            buffers = {b.names[id(v)]: _np32(v) for v in ntvars}
            outputs = {k: v.astype(np.float32) if v.dtype.kind in "fV" or
                       str(v.dtype) == "bfloat16" else v for k, v in rec.outputs.items()} \
                if cfg.record_outputs else None
            recomputed = {k: v.astype(np.float32) if v.dtype.kind in "fV" or
                          str(v.dtype) == "bfloat16" else v
                          for k, v in rec.recomputed.items()} if cfg.record_outputs else None
            run.write_step(step, float(loss.numpy()), g_np, params, buffers,
                           outputs=outputs, recomputed=recomputed or None,
                           saved_bytes_peak=held, device_peak_bytes=peak,
                           recomputed_calls=sum(rec.bwd_calls.values()),
                           grads_none=gnone, loss_scale=scale,
                           skipped=(scaled and not finite) or follow_skip,
                           created_in_backward=rec.created[ins.BACKWARD][:64])
            facts.held.append(held)
            facts.peak.append(peak)
            for n in facts_parts:
                facts_parts[n] += rec.fwd_calls.get(n, 0)
            for n, c in rec.bwd_calls.items():
                facts.layer_recomputes[n] = facts.layer_recomputes.get(n, 0) + c
            if step == 0:
                facts.part_bytes = dict(rec.part_bytes)
                run.set_module_dtypes({k: _word(v) for k, v in rec.out_dtypes.items()},
                                      {k: _word(v) for k, v in rec.rec_dtypes.items()})
            for ph in ("forward", "backward"):
                for t, c in rec.untracked_calls[ph].items():
                    facts.untracked[ph][t] = facts.untracked[ph].get(t, 0) + c
                facts.created[ph] += len(rec.created[ph])
                facts.created_names[ph] += rec.created[ph][:8]
            # drop this step's tensors now, not during the next step's forward (where their
            # release would be counted against that forward's bytes)
            out = loss = target = grads = tape = g_np = params = buffers = None
            outputs = recomputed = None
    finally:
        rec.uninstall()
        keras.mixed_precision.set_global_policy("float32")
    for n, c in counters.items():
        facts.recomputed[n] = c["recomputed"]
        facts.forwards[n] = facts_parts.get(n, c["forward"])
    if checkpointed and counters:
        run.set_parts([(n, facts.forwards[n], facts.recomputed[n]) for n in counters])
    facts.order = list(rec.order)
    facts.types = dict(rec.types)
    if modules is not None:
        for n in rec.order:
            if n not in modules:
                modules[n] = rec.types.get(n, "Layer")
    return snap, facts, parts


def memory_for(device):
    return ins.Memory(device)

