"""What the Keras driver watches while a model trains: every layer call (original forward or
recomputation in backward), variable creation, seed-generator state and TensorFlow's
allocator.

Nothing here decides anything: it collects facts (counts, bytes, tensors) that the runner
writes into the judge input.

The phase. The runner marks the time inside `model(x)` and the loss as "forward" and the
time inside `tape.gradient(...)` as "backward". A layer call in the backward phase is a
recomputation (tf.recompute_grad, keras.RematScope, or the user's own mechanism): eager
TensorFlow runs no layer code during backward otherwise.

Layers. Every layer the model tracks gets a counting `call` (instance attribute, so the
layer's own class is untouched and tf.recompute_grad / Keras remat call through it). A
layer the model does not track (created inside a call: the origin scenario) is seen by a
class-level hook on `keras.layers.Layer.__call__` that is active only while a run is
recorded, and reported as untracked.
"""
import contextlib
import fnmatch

import numpy as np
import tensorflow as tf
import keras

FORWARD, BACKWARD, IDLE = "forward", "backward", "idle"

# ---------------------------------------------------------------------------------------
# rounding to a low dtype's significand with fp32's exponent range (calibration runs)
# ---------------------------------------------------------------------------------------

SIGNIFICAND_BITS = {"fp16": 11, "bf16": 8}
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


def round_significand_np(x, dtype):
    """x (float32 array) rounded to nearest-even at the low dtype's significand width, fp32
    exponent range: what a correct low-precision op does to a value, without underflow or
    overflow. Non-finite values stay as they are."""
    x = np.ascontiguousarray(x, np.float32)
    drop = 24 - SIGNIFICAND_BITS[dtype]
    b = x.view(np.uint32).astype(np.uint64)
    lsb = (b >> drop) & 1
    r = ((b + ((1 << (drop - 1)) - 1) + lsb) >> drop) << drop
    out = (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def round_significand_tf(x, dtype):
    """The same in TensorFlow, for float32 tensors (others pass unchanged)."""
    if x.dtype != tf.float32:
        return x
    drop = 24 - SIGNIFICAND_BITS[dtype]
    b = tf.cast(tf.bitcast(x, tf.uint32), tf.uint64)
    lsb = tf.bitwise.bitwise_and(tf.bitwise.right_shift(b, drop), 1)
    r = tf.bitwise.left_shift(tf.bitwise.right_shift(b + ((1 << (drop - 1)) - 1) + lsb, drop),
                              drop)
    out = tf.bitcast(tf.cast(tf.bitwise.bitwise_and(r, 0xFFFFFFFF), tf.uint32), tf.float32)
    return tf.where(tf.math.is_finite(x), out, x)


class Rounder:
    """Rounds every recorded layer output in the forward and its gradient in backward (a
    calibration run). dither > 0: each value is first multiplied by (1 + u*r), r uniform in
    [-1, 1) from a seeded stateless stream, so other rounding errors are sampled."""

    def __init__(self, dtype, dither_seed=None):
        self.dtype = dtype
        self.u = UNIT_ROUNDOFF[dtype]
        self.dither_seed = dither_seed
        self.count = 0

    def _dither(self, x):
        if self.dither_seed is None or x.dtype != tf.float32:
            return x
        self.count += 1
        r = tf.random.stateless_uniform(tf.shape(x), seed=[self.dither_seed, self.count],
                                        minval=-1.0, maxval=1.0)
        return x * (1.0 + self.u * r)

    def __call__(self, x):
        if not isinstance(x, tf.Tensor) or x.dtype != tf.float32:
            return x
        rounder = self

        @tf.custom_gradient
        def rounded(t):
            def grad(dy):
                return round_significand_tf(rounder._dither(dy), rounder.dtype)
            return round_significand_tf(rounder._dither(t), rounder.dtype), grad
        return rounded(x)


# ---------------------------------------------------------------------------------------
# the model's layer tree
# ---------------------------------------------------------------------------------------

def layer_path(layer):
    return getattr(layer, "path", None) or layer.name


def sublayers(layer):
    try:
        return [l for l in layer._flatten_layers(include_self=False, recursive=False)]
    except (AttributeError, TypeError):
        return list(getattr(layer, "layers", []) or [])


def walk(model):
    """Every layer the model tracks (itself excluded), parents before children, without
    InputLayers; each once."""
    seen, out = set(), []

    def rec(l):
        for s in sublayers(l):
            if id(s) in seen or isinstance(s, keras.layers.InputLayer):
                continue
            seen.add(id(s))
            out.append(s)
            rec(s)
    rec(model)
    return out


def is_leaf(layer):
    return not any(not isinstance(s, keras.layers.InputLayer) for s in sublayers(layer))


def match_wrap(model, patterns):
    """The layers whose path or name matches a --wrap shell pattern, outermost only (a
    layer inside a matched one is already recomputed with it). Each pattern must match."""
    chosen, used = [], {p: 0 for p in patterns}
    inside = set()
    for l in walk(model):
        hit = [p for p in patterns
               if fnmatch.fnmatchcase(layer_path(l), p) or fnmatch.fnmatchcase(l.name, p)]
        for p in hit:
            used[p] += 1
        if hit and id(l) not in inside:
            chosen.append(l)
            for s in walk(l):
                inside.add(id(s))
    return chosen, [p for p, n in used.items() if n == 0]


def variable_names(model):
    """{id(variable): unique name} for every variable the model tracks: the variable's
    Keras path (`enc/conv0/kernel`; Keras 3's bare `.name` would collapse them), and for a
    seed generator's state `<layer path>/seed_generator_state` (Keras names those
    `seed_generator_N/...` outside the layer's path). Raises ValueError naming a clash."""
    names = {}
    for l in walk(model):
        for k, sg in enumerate(getattr(l, "_seed_generators", []) or []):
            st = getattr(sg, "state", None)
            if st is not None:
                names[id(st)] = f"{layer_path(l)}/seed_generator_state" + (f"_{k}" if k else "")
    for v in model.variables:
        if id(v) not in names:
            names[id(v)] = getattr(v, "path", None) or v.name
    seen = {}
    for v in model.variables:
        n = names[id(v)]
        if n in seen and seen[n] is not v:
            raise ValueError(f"two variables share the name {n!r}")
        seen[n] = v
    return names


def owner_map(model):
    """{id(variable): the leaf-most layer that owns it}."""
    own = {}
    for l in walk(model):
        for v in list(getattr(l, "_trainable_variables", [])) + \
                list(getattr(l, "_non_trainable_variables", [])):
            own[id(v)] = l
        for sg in getattr(l, "_seed_generators", []) or []:
            if getattr(sg, "state", None) is not None:
                own[id(sg.state)] = l
    return own


# ---------------------------------------------------------------------------------------
# the recorder: one per training run
# ---------------------------------------------------------------------------------------

def _tensor_out(out):
    if isinstance(out, (tf.Tensor, tf.Variable)) or hasattr(out, "numpy"):
        try:
            return np.array(out.numpy(), copy=True)
        except Exception:
            return None
    return None


class Memory:
    """TensorFlow's allocator bytes on the run's device (the CPU's counts only when the
    process started with TF_CPU_ALLOCATOR_USE_BFC=true, which the driver's command sets)."""

    def __init__(self, device):
        self.device = device
        self.ok = False
        try:
            with tf.device(device):
                probe = tf.zeros((4096,), tf.float32) + 1.0  # an allocation it must count
            self.ok = tf.config.experimental.get_memory_info(device)["current"] > 0
            del probe
        except Exception:
            self.ok = False

    def current(self):
        if not self.ok:
            return None
        return int(tf.config.experimental.get_memory_info(self.device)["current"])

    def peak(self):
        if not self.ok:
            return None
        return int(tf.config.experimental.get_memory_info(self.device)["peak"])

    def reset_peak(self):
        if self.ok:
            try:
                tf.config.experimental.reset_memory_stats(self.device)
            except Exception:
                self.ok = False


class Recorder:
    """Counts and records layer calls of one run. Module names are layer paths; a layer
    called several times in one step's forward has outputs `name`, `name#1`, `name#2`..."""

    def __init__(self, model, memory, record_outputs=True, rounder=None, parts=()):
        self.model = model
        self.memory = memory
        self.record_outputs = record_outputs
        self.rounder = rounder
        self.phase = IDLE
        self.layers = walk(model)
        self.tracked = {id(l) for l in self.layers}
        self.names = {id(l): layer_path(l) for l in self.layers}
        self.types = {layer_path(l): type(l).__name__ for l in self.layers}
        self.leaves = {id(l) for l in self.layers if is_leaf(l)}
        self.parts = {id(l): layer_path(l) for l in parts}
        self.order = []            # module names in order of first forward call
        self._patched = []
        self.new_step()

    def new_step(self):
        self.fwd_calls, self.bwd_calls = {}, {}
        self.outputs, self.recomputed = {}, {}
        self.out_dtypes, self.rec_dtypes = {}, {}
        self.part_bytes = {}          # part -> bytes its forward call left allocated
        self.untracked_calls = {FORWARD: {}, BACKWARD: {}}
        self.created = {FORWARD: [], BACKWARD: []}

    # -- hooks ---------------------------------------------------------------------------
    def _counting_call(self, layer, orig):
        rec = self
        name = self.names[id(layer)]
        leaf = id(layer) in self.leaves
        part = id(layer) in self.parts

        def call(*args, **kwargs):
            before = rec.memory.current() if part and rec.phase == FORWARD else None
            out = orig(*args, **kwargs)
            if rec.phase == FORWARD:
                k = rec.fwd_calls.get(name, 0)
                rec.fwd_calls[name] = k + 1
                if name not in rec.order:
                    rec.order.append(name)
                if leaf and rec.rounder is not None:
                    out = tf.nest.map_structure(rec.rounder, out)
                if leaf and rec.record_outputs:
                    t = _tensor_out(out)
                    if t is not None:
                        key = name if k == 0 else f"{name}#{k}"
                        rec.out_dtypes[key] = t.dtype
                        rec.outputs[key] = t
                if before is not None:
                    after = rec.memory.current()
                    rec.part_bytes[name] = rec.part_bytes.get(name, 0) + (after - before)
            elif rec.phase == BACKWARD:
                k = rec.bwd_calls.get(name, 0)
                rec.bwd_calls[name] = k + 1
                if leaf and rec.rounder is not None:
                    out = tf.nest.map_structure(rec.rounder, out)
                if leaf and rec.record_outputs:
                    t = _tensor_out(out)
                    if t is not None:
                        key = name if k == 0 else f"{name}#{k}"
                        rec.rec_dtypes[key] = t.dtype
                        rec.recomputed[key] = t
            return out
        return call

    def install(self):
        """Counting calls on every tracked layer (before any checkpoint wrapper, so the
        wrapper's recomputation runs through them)."""
        for l in self.layers:
            orig = l.call
            l.call = self._counting_call(l, orig)
            self._patched.append((l, orig))

    def uninstall(self):
        for l, orig in reversed(self._patched):
            try:
                l.call = orig
            except Exception:
                pass
        self._patched = []

    @contextlib.contextmanager
    def watching(self):
        """The class-level hook for untracked layers and the variable-creation watch."""
        rec = self
        orig_call = keras.layers.Layer.__call__

        def hooked(layer, *args, **kwargs):
            if id(layer) not in rec.tracked and layer is not rec.model \
                    and rec.phase in (FORWARD, BACKWARD) \
                    and not isinstance(layer, keras.layers.InputLayer):
                d = rec.untracked_calls[rec.phase]
                d[type(layer).__name__] = d.get(type(layer).__name__, 0) + 1
            return orig_call(layer, *args, **kwargs)

        def creator(next_creator, **kw):
            v = next_creator(**kw)
            if rec.phase in (FORWARD, BACKWARD):
                rec.created[rec.phase].append(str(kw.get("name") or getattr(v, "name", "?")))
            return v

        keras.layers.Layer.__call__ = hooked
        try:
            with tf.variable_creator_scope(creator):
                yield
        finally:
            keras.layers.Layer.__call__ = orig_call

    @contextlib.contextmanager
    def in_phase(self, phase):
        prev, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = prev


# ---------------------------------------------------------------------------------------
# checkpointing the matched layers with tf.recompute_grad
# ---------------------------------------------------------------------------------------

def _state_variables(layer):
    """Every non-trainable variable inside layer (BatchNorm moving statistics, seed
    generator states), each once."""
    out, seen = [], set()
    for v in layer.non_trainable_variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    for l in [layer] + walk(layer):
        for sg in getattr(l, "_seed_generators", []) or []:
            st = getattr(sg, "state", None)
            if st is not None and id(st) not in seen:
                seen.add(id(st))
                out.append(st)
    return out


def wrap_recompute(layer, preserve_state=False):
    """Checkpoints layer: replaces layer.call with one that runs the original call under
    tf.recompute_grad (tensor positional arguments are differentiated; keyword arguments
    such as training= pass through).

    preserve_state: the recomputation starts from the non-trainable state its forward
    started from (seed generators, so dropout draws the same mask) and leaves that state as
    the forward left it (BatchNorm moving statistics are updated once per step, not twice).
    Plain tf.recompute_grad does neither.

    Returns a counter {"forward": n, "recomputed": n}: forward calls and recomputations."""
    orig = layer.call
    counter = {"forward": 0, "recomputed": 0}
    state_vars = _state_variables(layer) if preserve_state else []

    def call(*args, **kwargs):
        if not args or not all(isinstance(a, tf.Tensor) for a in args):
            return orig(*args, **kwargs)  # a list input or a non-tensor: not wrapped
        counter["forward"] += 1
        saved = {"start": None, "end": None, "runs": 0}

        def body(*xs):
            saved["runs"] += 1
            if saved["runs"] == 1:
                if state_vars:
                    saved["start"] = [v.numpy() for v in state_vars]
                out = orig(*xs, **kwargs)
                if state_vars:
                    saved["end"] = [v.numpy() for v in state_vars]
                return out
            counter["recomputed"] += 1
            if saved["start"] is not None:
                for v, a in zip(state_vars, saved["start"]):
                    v.assign(a)
            try:
                return orig(*xs, **kwargs)
            finally:
                if saved["end"] is not None:
                    for v, a in zip(state_vars, saved["end"]):
                        v.assign(a)
        return tf.recompute_grad(body)(*args)

    layer.call = call
    return counter


