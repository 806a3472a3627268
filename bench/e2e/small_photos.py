"""Writes a small photo folder as a user brings one: 3 classes of 600 RGB 64x64 JPEGs each, from
the real Fashion-MNIST images Debian installs (shirt, pullover, coat: classes that look alike,
so accuracy tells models apart), each upscaled and tinted a little.

usage: small_photos.py OUT [PER_CLASS]
"""
import gzip
import os
import sys

import numpy as np
from PIL import Image

SOURCE = "/usr/share/datasets/fashion-mnist"
CLASSES = {6: "shirt", 2: "pullover", 4: "coat"}


def read_idx(name):
    with gzip.open(os.path.join(SOURCE, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    out, per_class = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 600
    images, labels = read_idx("train-images-idx3-ubyte.gz"), read_idx("train-labels-idx1-ubyte.gz")
    rng = np.random.default_rng(0)
    for label, name in CLASSES.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for i, index in enumerate(np.flatnonzero(labels == label)[:per_class]):
            gray = Image.fromarray(images[index]).resize((64, 64), Image.BILINEAR)
            tint = rng.uniform(0.7, 1.0, size=3)
            rgb = (np.asarray(gray, np.float32)[:, :, None] * tint).astype(np.uint8)
            Image.fromarray(rgb).save(os.path.join(out, name, "%04d.jpg" % i), quality=90)


main()
