"""What the PyTorch driver observes during a step: every leaf module's output (forward and
recomputation) and output gradient, the bytes autograd keeps for backward, and the
calibration runs' rounding."""
import hashlib

import torch

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                torch.float64: "fp32"}


def to_numpy(t):
    """A host copy as numpy: floats as fp32 (bf16 has no numpy dtype), integers as they are."""
    t = t.detach()
    if t.is_floating_point():
        t = t.float()
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.cpu().contiguous().numpy().copy()


def first_tensor(out):
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            if torch.is_tensor(o):
                return o
    return None


class Recorder:
    """Hooks on every module: outputs of the original forward and of the recomputation (a
    module forward that runs while backward runs), their gradients, the order modules are
    first entered, and which modules draw random numbers (the CPU/CUDA generator state
    differs after their forward)."""

    def __init__(self, model, keep_tensors=True, device="cpu"):
        self.keep = keep_tensors
        self.cuda = device == "cuda"
        self.handles = []
        self.order = []          # module names in first-entry order (over the run)
        self.types = {}
        self.random = set()
        self.fwd_dtypes, self.rec_dtypes = {}, {}
        self.phase = "forward"
        self._rng_before = {}
        for name, m in model.named_modules():
            if name:
                self.types[name] = type(m).__name__
                self.handles.append(m.register_forward_pre_hook(self._pre(name)))
                self.handles.append(m.register_forward_hook(self._hook(name)))
        self._seen = set()
        self.begin_step()

    def begin_step(self):
        self.phase = "forward"
        self.calls, self.rcalls = {}, {}
        self.outputs, self.recomputed, self.output_grads = {}, {}, {}
        self.recomputed_calls = 0

    def _rng(self):
        s = torch.random.get_rng_state()
        return (s, torch.cuda.get_rng_state()) if self.cuda else (s,)

    def _pre(self, name):
        def pre(mod, inp):
            if self.phase != "forward":
                # counted on entry: a recomputation stops once it has remade the tensors
                # backward needs (torch's early stop), before the module's forward hook
                self.recomputed_calls += 1
            if name not in self._seen:
                self._seen.add(name)
                self.order.append(name)
            if name not in self.random:
                self._rng_before[name] = self._rng()
            return None
        return pre

    def _hook(self, name):
        def hook(mod, inp, out):
            before = self._rng_before.pop(name, None)
            if before is not None and any(not torch.equal(a, b)
                                          for a, b in zip(before, self._rng())):
                self.random.add(name)
            t = first_tensor(out)
            if t is None or not t.is_floating_point():
                return None
            if self.phase == "forward":
                k = self.calls.get(name, 0)
                self.calls[name] = k + 1
                self.fwd_dtypes[name] = _DTYPE_NAMES.get(t.dtype, "fp32")
                store = self.outputs
            else:
                k = self.rcalls.get(name, 0)
                self.rcalls[name] = k + 1
                self.rec_dtypes[name] = _DTYPE_NAMES.get(t.dtype, "fp32")
                store = self.recomputed
            key = name if k == 0 else f"{name}#{k}"
            if self.keep:
                store[key] = to_numpy(t)
                if t.requires_grad and key not in self.output_grads:
                    self.output_grads[key] = None  # reserved: the first hook on it wins

                    def grad_hook(g, _key=key):
                        self.output_grads[_key] = to_numpy(g)
                    t.register_hook(grad_hook)
            return None
        return hook

    def grads_seen(self):
        return {k: v for k, v in self.output_grads.items() if v is not None}

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _storage(t):
    if hasattr(t, "untyped_storage"):
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    s = t.storage()
    return s.data_ptr(), (s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size())


class _Held:
    __slots__ = ("t", "meter", "key", "__weakref__")

    def __init__(self, t, meter, key):
        self.t, self.meter, self.key = t, meter, key

    def __del__(self):
        m = self.meter
        if m is not None and self.key is not None:
            m._release(self.key)


class SavedBytesMeter:
    """The bytes autograd keeps for backward: every tensor saved during the forward,
    counted once per storage (views share one), parameters excluded, as a peak over the
    step (torch.autograd.graph.saved_tensors_hooks)."""

    def __init__(self, model):
        self.params = {_storage(p)[0] for p in model.parameters()}
        self.live, self.size = {}, {}
        self.cur = self.peak = 0

    def begin_step(self):
        self.peak = self.cur

    def _pack(self, t):
        ptr, nbytes = _storage(t)
        if ptr == 0 or ptr in self.params:
            return _Held(t, None, None)
        key = (ptr, str(t.device))
        n = self.live.get(key, 0)
        if n == 0:
            self.size[key] = nbytes
            self.cur += nbytes
            self.peak = max(self.peak, self.cur)
        self.live[key] = n + 1
        return _Held(t, self, key)

    @staticmethod
    def _unpack(h):
        return h.t

    def _release(self, key):
        n = self.live.get(key, 0) - 1
        if n <= 0:
            self.live.pop(key, None)
            self.cur -= self.size.pop(key, 0)
        else:
            self.live[key] = n

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)


# ---- the calibration runs' rounding (harness/precision.md, "Judging low precision") ------

SIGNIFICAND_BITS = {"fp16": 11, "bf16": 8}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def round_significand(x, bits):
    """x rounded to `bits` significant bits, ties to even, with no exponent limits (fp32's
    range): the rounding a correct low-precision op does, without its underflow/overflow."""
    xd = x.double()
    m, e = torch.frexp(xd)
    r = torch.ldexp(torch.round(torch.ldexp(m, torch.full_like(e, bits))), e - bits)
    return torch.where(torch.isfinite(xd), r, xd).to(x.dtype)


def _seed(*parts):
    h = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def dithered_round(x, bits, rel, seed):
    if rel > 0:
        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        r = torch.rand(x.shape, generator=g, dtype=torch.float64) * 2 - 1
        x = (x.double() * (1 + rel * r.to(x.device))).to(x.dtype)
    return round_significand(x, bits)


class _RoundBoth(torch.autograd.Function):
    """Identity in value except the rounding; the gradient is rounded the same way."""

    @staticmethod
    def forward(ctx, x, bits, rel, seed_fwd, seed_bwd):
        ctx.args = (bits, rel, seed_bwd)
        return dithered_round(x, bits, rel, seed_fwd)

    @staticmethod
    def backward(ctx, g):
        bits, rel, seed = ctx.args
        return dithered_round(g, bits, rel, seed), None, None, None, None


class CalibrationRounding:
    """Forward hooks rounding every leaf module's output and output gradient to the low
    dtype's significand, after a dither of at most rel (one unit roundoff) for calibration
    runs 1 and 2; weight-like modules' weights and the inputs are rounded to the low dtype
    itself by the runner."""

    def __init__(self, model, low, index, seed, unit_roundoff):
        self.bits = SIGNIFICAND_BITS[low]
        self.rel = 0.0 if index == 0 else unit_roundoff
        self.index, self.seed = index, seed
        self.step = 0
        self.handles = []
        leaves = [(n, m) for n, m in model.named_modules()
                  if n and not any(True for _ in m.children())]
        for i, (n, m) in enumerate(leaves):
            self.handles.append(m.register_forward_hook(self._hook(i)))

    def _hook(self, i):
        def hook(mod, inp, out):
            def one(t, j):
                if not torch.is_tensor(t) or not t.is_floating_point():
                    return t
                return _RoundBoth.apply(t, self.bits, self.rel,
                                        _seed(self.seed, self.index, i, self.step, j, 0),
                                        _seed(self.seed, self.index, i, self.step, j, 1))
            if torch.is_tensor(out):
                return one(out, 0)
            if isinstance(out, tuple):
                return tuple(one(t, j) for j, t in enumerate(out))
            return None
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def weight_like(module):
    n = type(module).__name__.lower()
    return any(w in n for w in ("linear", "conv", "embedding", "multiheadattention", "bilinear"))


