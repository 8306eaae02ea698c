#!/usr/bin/env python3
"""He (Kaiming) uniform weights for a sequential stack of conv/ReLU layers, as safetensors.

    python3 tests/gpu/he_init.py CASE.json OUT.safetensors [SEED]

For every conv1d/conv2d/conv3d layer of CASE (layers applied in order, no skip
connections): weight ~ U(-b, b) with b = sqrt(6 / fan_in) (PyTorch's kaiming_uniform_ with
the ReLU gain), fan_in = in_channels * prod(kernel); a bias, when the layer has one, ~
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as PyTorch's default. fp32, Python's own Mersenne
Twister seeded with SEED (default 1): the same file on every machine. tests/gpu/run.sh
passes the file to `ckpt-harness run --init`. Standard library only. Exit 2 with one line
on stderr for a case it cannot handle.
"""
import json
import math
import random
import struct
import sys


def fail(msg):
    sys.stderr.write("he_init.py: %s\n" % msg)
    sys.exit(2)


def main(argv):
    if len(argv) not in (3, 4):
        fail("usage: he_init.py CASE.json OUT.safetensors [SEED]")
    try:
        with open(argv[1]) as f:
            case = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (argv[1], e))
    seed = int(argv[3]) if len(argv) == 4 else 1
    rng = random.Random(seed)
    try:
        channels = int(case["input"]["shape"][1])
        layers = case["layers"]
    except (KeyError, IndexError, TypeError, ValueError):
        fail("%s: needs input.shape [N, C, ...] and layers" % argv[1])
    tensors = []  # (name, shape, values)
    for i, layer in enumerate(layers):
        op = layer.get("op")
        if "inputs" in layer:
            fail("%s: layers[%d] (%s) has inputs: only sequential stacks" % (argv[1], i, layer.get("name")))
        if op == "relu":
            continue
        if op not in ("conv1d", "conv2d", "conv3d"):
            fail("%s: layers[%d] (%s) is %s: only conv1d/2d/3d and relu" % (argv[1], i, layer.get("name"), op))
        nsp = int(op[4])
        k = layer.get("kernel", 3)
        kernel = [int(k)] * nsp if isinstance(k, (int, float)) else [int(v) for v in k]
        if len(kernel) != nsp:
            fail("%s: layers[%d]: kernel %r for %s" % (argv[1], i, k, op))
        filters = int(layer["filters"])
        fan_in = channels * math.prod(kernel)
        bound = math.sqrt(6.0 / fan_in)
        n = filters * fan_in
        tensors.append((layer["name"] + ".weight", [filters, channels] + kernel,
                        [rng.uniform(-bound, bound) for _ in range(n)]))
        if layer.get("bias", True):
            b = 1.0 / math.sqrt(fan_in)
            tensors.append((layer["name"] + ".bias", [filters], [rng.uniform(-b, b) for _ in range(filters)]))
        channels = filters
    header, blobs, offset = {}, [], 0
    for name, shape, values in tensors:
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    try:
        with open(argv[2], "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    except OSError as e:
        fail("%s: %s" % (argv[2], e))
    print("he_init.py: %d tensors, %d values -> %s" % (len(tensors), sum(len(t[2]) for t in tensors), argv[2]))


if __name__ == "__main__":
    main(sys.argv)
