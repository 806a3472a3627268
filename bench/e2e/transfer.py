"""Two data sets from the real Fashion-MNIST for the transfer benchmark (bench/e2e/transfer.sh),
as --data npy:DIR folders:
  OUT/pre   classes 0-4 (T-shirt/top, Trouser, Pullover, Dress, Coat): every training image;
  OUT/fine  classes 5-9 (Sandal, Shirt, Sneaker, Bag, Ankle boot): PER_CLASS training images of
            each (a user's small set), every test image of those classes.
Images are 32x32 RGB (resnet20's input). Usage: transfer.py OUT PER_CLASS"""
import gzip
import os
import sys

import numpy as np

SOURCE = "/usr/share/datasets/fashion-mnist"
NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def idx(name, offset):
    with gzip.open(os.path.join(SOURCE, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def split(kind):
    """The images as resnet20 takes them: 32x32 RGB (2 pixels of black around, grey in 3)."""
    prefix = "train" if kind == "train" else "t10k"
    images = idx(f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    images = np.repeat(np.pad(images, ((0, 0), (2, 2), (2, 2)))[..., None], 3, axis=3)
    return images, idx(f"{prefix}-labels-idx1-ubyte.gz", 8)


def write(out, classes, per_class):
    os.makedirs(out, exist_ok=True)
    for kind in ("train", "test"):
        images, labels = split(kind)
        keep = np.isin(labels, classes)
        x, y = images[keep], labels[keep]
        if kind == "train" and per_class:
            rows = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in classes])
            rows.sort()
            x, y = x[rows], y[rows]
        np.save(os.path.join(out, f"{kind}_images.npy"), x)
        np.save(os.path.join(out, f"{kind}_labels.npy"),
                np.searchsorted(classes, y).astype(np.int32))
    with open(os.path.join(out, "class_names.txt"), "w") as f:
        f.write("".join(NAMES[c].replace("/", " or ") + "\n" for c in classes))


if __name__ == "__main__":
    out, per_class = sys.argv[1], int(sys.argv[2])
    write(os.path.join(out, "pre"), [0, 1, 2, 3, 4], 0)
    write(os.path.join(out, "fine"), [5, 6, 7, 8, 9], per_class)
