#!/usr/bin/env python3
"""PyTorch's saved-for-backward bytes and its peak of saved tensors plus gradients for
`make bench`: the bench models built in torch (the same shapes and checkpoint segments as
tests/bench/cases/), fp32, one forward and backward, measured with
torch.autograd.graph.saved_tensors_hooks and autograd node hooks over unique storages.

Printed per model, one line: `<name> <plain> <ckpt_boundaries> <ckpt_largest_recompute>
<input> <live_plain> <live_checkpointed>`, bytes:
  plain                   every storage autograd saves in the plain forward (parameters
                          excluded: the harness does not count them either)
  ckpt_boundaries         what the checkpointed forward saves (torch.utils.checkpoint,
                          reentrant: each segment's inputs, plus what the layers outside
                          segments save)
  ckpt_largest_recompute  the largest one segment's recomputation saves during backward
  input                   the bytes of the model input among those (the harness keeps the
                          model input outside its activation allocator, so compare the
                          harness's peak with the figures minus this)
  live_plain              the plain run's peak of live saved tensors plus activation
                          gradients during backward (LiveBytes below; the model input and
                          parameters left out): what the harness's peak counts
  live_checkpointed       the same for the checkpointed run, recomputations included
PyTorch's checkpointed figure is ckpt_boundaries + ckpt_largest_recompute.
Usage: torch_memory.py model...   (models: seed unet2d gpt)
"""
import sys

import torch
import torch.nn as nn
import torch.utils.checkpoint as ckpt


def seed():
    blocks = []
    cin = 1
    for _ in range(5):
        layers = []
        for _ in range(12):
            layers += [nn.Conv3d(cin, 4, 3, padding=1, bias=False), nn.ReLU()]
            cin = 4
        blocks.append(nn.Sequential(*layers))
    model = nn.ModuleList(blocks)
    segs = [(lambda x, b=b: b(x)) for b in blocks]
    return model, segs, torch.randn(1, 1, 64, 64, 32), "mean"


class UNet2d(nn.Module):
    """tests/bench/cases/unet2d_128.json: segments [c1..r1b], [c2..r2b], [c3..r3b]."""

    def __init__(self):
        super().__init__()
        c = lambda i, o: nn.Conv2d(i, o, 3, padding=1)
        self.c1, self.c1b = c(3, 32), c(32, 32)
        self.c2, self.c2b = c(32, 64), c(64, 64)
        self.c3, self.c3b = c(64, 128), c(128, 128)
        self.c4 = c(128 + 64, 64)
        self.c5 = c(64 + 32, 32)
        self.head = nn.Conv2d(32, 1, 1)


def unet2d():
    m = UNet2d()
    r = torch.relu
    f = nn.functional
    up = lambda t: f.interpolate(t, scale_factor=2, mode="nearest")
    segs = [
        lambda x: r(m.c1b(r(m.c1(x)))),
        None,  # p1 outside segments
        lambda p: r(m.c2b(r(m.c2(p)))),
        None,
        lambda p: r(m.c3b(r(m.c3(p)))),
    ]

    def run(x, wrap):
        a = wrap(0, segs[0], x)
        b = wrap(2, segs[2], f.max_pool2d(a, 2))
        mid = wrap(4, segs[4], f.max_pool2d(b, 2))
        u = r(m.c4(torch.cat([up(mid), b], 1)))
        u = r(m.c5(torch.cat([up(u), a], 1)))
        return m.head(u)

    return m, run, torch.randn(4, 3, 128, 128), "mse"


class Block(nn.Module):
    """tests/bench/cases/gpt_block_4x128x128.json: pre-LN, causal 4-head attention."""

    def __init__(self, d=128, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj, self.fc, self.fc2 = nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def attn_half(self, x):
        n, t, d = x.shape
        h = self.ln1(x)
        sh = lambda z: z.view(n, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = sh(self.q(h)), sh(self.k(h)), sh(self.v(h))
        s = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
        o = (p @ v).transpose(1, 2).reshape(n, t, d)
        return x + self.proj(o)

    def mlp_half(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def gpt():
    b = Block()
    segs = [b.attn_half, b.mlp_half]
    return b, segs, torch.randn(4, 128, 128), "mse"


MODELS = {"seed": seed, "unet2d": unet2d, "gpt": gpt}


def storage_key(t):
    s = t.storage() if hasattr(t, "storage") else t.untyped_storage()
    return s.data_ptr(), s.nbytes() if hasattr(s, "nbytes") else s.size() * s.element_size()


def measure(name, checkpointed):
    torch.manual_seed(0)
    model, segs, x, loss_kind = MODELS[name]()
    params = {storage_key(p)[0] for p in model.parameters()}
    groups = {"forward": {}}
    state = {"phase": "forward", "backward": False}

    def pack(t):
        ptr, nbytes = storage_key(t)
        if ptr not in params:
            groups.setdefault(state["phase"], {})[ptr] = nbytes
        return t

    def wrap(k, fn, inp):
        if not checkpointed:
            return fn(inp)

        def seg(z):
            if state["backward"]:
                state["phase"] = f"recompute {k}"
            return fn(z)

        return ckpt.checkpoint(seg, inp)

    x.requires_grad_(True)  # reentrant checkpointing needs an input that requires grad
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if callable(segs) and not isinstance(segs, list):
            y = segs(x, wrap)
        else:
            h = x
            for k, fn in enumerate(segs):
                h = wrap(k, fn, h)
            y = h
        loss = ((y - torch.zeros_like(y)) ** 2).mean() if loss_kind == "mse" else y.mean()
        state["backward"] = True
        loss.backward()
    ptr_in = storage_key(x)[0]
    fwd = groups["forward"]
    inp = fwd.get(ptr_in, 0)
    rec = max((sum(g.values()) for k, g in groups.items() if k != "forward"), default=0)
    return sum(fwd.values()), rec, inp


class LiveBytes:
    """PyTorch's live activation-side bytes during backward, sampled after every autograd
    node ran (its saved tensors, its incoming gradients and the gradients it produced are
    all alive then, as the harness's peak counts a backward's tensors): unique storages of

      saved tensors   from saved_tensors_hooks until autograd releases them (the packed
                      object autograd holds is dropped right after the node ran)
      gradients       from the node that produced one until the node it flows to ran;
                      gradients for one node are summed into one buffer after the sample

    Parameters, their gradients and the model input (and its gradient) are left out, as the
    harness leaves them out. Tensors alive only through Python references or inside a
    kernel are not seen, so this is a lower bound of what PyTorch holds."""

    def __init__(self, params, model_input):
        self.params = params  # storage pointers of the parameters
        self.param_ids = set()
        self.model_input = model_input
        self.saved_refs, self.saved_bytes = {}, {}
        self.grad_refs, self.grad_bytes = {}, {}
        self.pending = {}  # node -> [storage pointer of each gradient waiting for it]
        self.leaf_held = []  # gradients of a reentrant checkpoint's detached inputs
        self.hooked = {}
        self.peak = 0

    def live(self):
        return sum(self.saved_bytes[p] for p in self.saved_refs) + sum(
            self.grad_bytes[p] for p in self.grad_refs)

    # saved tensors
    def pack(self, t):
        ptr, nbytes = storage_key(t)
        if ptr in self.params or ptr == storage_key(self.model_input)[0]:
            return t
        tracker = self

        class Held:
            def __init__(self):
                self.t = t
                tracker.saved_refs[ptr] = tracker.saved_refs.get(ptr, 0) + 1
                tracker.saved_bytes[ptr] = nbytes

            def __del__(self):
                tracker.saved_refs[ptr] -= 1
                if tracker.saved_refs[ptr] == 0:
                    del tracker.saved_refs[ptr]

        return Held()

    @staticmethod
    def unpack(h):
        return h.t if not isinstance(h, torch.Tensor) else h

    # gradients
    def grad_ref(self, ptr, nbytes):
        self.grad_refs[ptr] = self.grad_refs.get(ptr, 0) + 1
        self.grad_bytes[ptr] = nbytes

    def grad_unref(self, ptr):
        self.grad_refs[ptr] -= 1
        if self.grad_refs[ptr] == 0:
            del self.grad_refs[ptr]

    def hook_graph(self, fn):
        todo = [fn]
        while todo:
            node = todo.pop()
            if node is None or node in self.hooked:
                continue
            self.hooked[node] = True
            if type(node).__name__ == "AccumulateGrad":
                continue
            node.register_hook(lambda gi, go, n=node: self.after(n, gi))
            todo.extend(f for f, _ in node.next_functions)

    def after(self, node, grad_inputs):
        arrivals = []
        for (dest, _), g in zip(node.next_functions, grad_inputs):
            if g is None or dest is None:
                continue
            ptr, nbytes = storage_key(g)
            if type(dest).__name__ == "AccumulateGrad":
                v = dest.variable
                if storage_key(v)[0] in self.params or v is self.model_input:
                    continue
                self.grad_ref(ptr, nbytes)  # a checkpoint's detached input: its .grad
                self.leaf_held.append(ptr)
                continue
            self.grad_ref(ptr, nbytes)
            arrivals.append((dest, ptr))
        self.peak = max(self.peak, self.live())
        for ptr in self.pending.pop(node, []):
            self.grad_unref(ptr)
        if "CheckpointFunction" in type(node).__name__:
            for ptr in self.leaf_held:  # returned by the checkpoint as its gradients
                self.grad_unref(ptr)
            self.leaf_held = []
        for dest, ptr in arrivals:
            waiting = self.pending.setdefault(dest, [])
            if waiting:  # summed into the buffer already waiting there
                self.grad_unref(ptr)
            else:
                waiting.append(ptr)


def measure_live(name, checkpointed):
    """The peak of LiveBytes over one backward (and the forward's end)."""
    torch.manual_seed(0)
    model, segs, x, loss_kind = MODELS[name]()
    x.requires_grad_(True)
    tr = LiveBytes({storage_key(p)[0] for p in model.parameters()}, x)
    state = {"backward": False}

    def wrap(k, fn, inp):
        if not checkpointed:
            return fn(inp)

        def seg(z):
            out = fn(z)
            if state["backward"]:  # the recomputation: hook the graph it builds
                tr.hook_graph(out.grad_fn)
            return out

        return ckpt.checkpoint(seg, inp)

    with torch.autograd.graph.saved_tensors_hooks(tr.pack, tr.unpack):
        if callable(segs) and not isinstance(segs, list):
            y = segs(x, wrap)
        else:
            h = x
            for k, fn in enumerate(segs):
                h = wrap(k, fn, h)
            y = h
        loss = ((y - torch.zeros_like(y)) ** 2).mean() if loss_kind == "mse" else y.mean()
        tr.hook_graph(loss.grad_fn)
        tr.peak = tr.live()
        state["backward"] = True
        loss.backward()
    return tr.peak


def main():
    for name in sys.argv[1:]:
        plain, _, inp = measure(name, False)
        bound, rec, _ = measure(name, True)
        live_plain = measure_live(name, False)
        live_ckpt = measure_live(name, True)
        print(f"{name} {plain} {bound} {rec} {inp} {live_plain} {live_ckpt}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
