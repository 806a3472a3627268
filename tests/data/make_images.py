"""Writes test data with Pillow and NumPy, as a user's own data would be made.

usage: make_images.py folder DIR N SIZE   class folders of PNG and JPEG images (mixed sizes and
                                          modes), learnable: each class has its own colour and
                                          quadrant; also DIR/notes.txt (not an image)
       make_images.py exact DIR N         PNGs at 32x32 RGB, and DIR.npy with their pixels
       make_images.py npy DIR N DTYPE     train/test images and labels as .npy (uint8|float32)
Prints a JSON line with what it wrote.
"""
import json
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["cat", "dog", "frog"]  # sorted order: cat=0, dog=1, frog=2


def pattern(rng, label, h, w, channels):
    img = rng.integers(0, 60, size=(h, w, 3), dtype=np.int64)
    colour = [(200, 40, 40), (40, 200, 40), (40, 40, 200)][label]
    y0, x0 = (label // 2) * (h // 2), (label % 2) * (w // 2)
    img[y0:y0 + h // 2, x0:x0 + w // 2] = colour
    img = img.astype(np.uint8)
    if channels == 1:
        return Image.fromarray(img).convert("L")
    if channels == 4:
        return Image.fromarray(img).convert("RGBA")
    return Image.fromarray(img)


def folder(root, n, size):
    rng = np.random.default_rng(1)
    written = 0
    for i in range(n):
        label = i % len(CLASSES)
        d = os.path.join(root, CLASSES[label], "sub" if i % 7 == 0 else "")
        os.makedirs(d, exist_ok=True)
        h = int(size * rng.uniform(0.8, 2.0))
        w = int(size * rng.uniform(0.8, 2.0))
        img = pattern(rng, label, h, w, [1, 3, 4][i % 3])
        if i % 2 == 0:
            img.save(os.path.join(d, f"img{i}.png"))
        else:
            img.convert("L" if img.mode == "L" else "RGB").save(os.path.join(d, f"img{i}.JPG"), quality=95)
        written += 1
    with open(os.path.join(root, "notes.txt"), "w") as f:
        f.write("not an image\n")
    print(json.dumps({"images": written, "classes": sorted(CLASSES)}))


def exact(root, n):
    rng = np.random.default_rng(2)
    arrays = []
    for i in range(n):
        label = i % len(CLASSES)
        d = os.path.join(root, CLASSES[label])
        os.makedirs(d, exist_ok=True)
        a = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
        Image.fromarray(a).save(os.path.join(d, f"{i:04d}.png"))
        arrays.append((f"{CLASSES[label]}/{i:04d}.png", a))
    np.save(root + ".npy", np.stack([a.transpose(2, 0, 1) for _, a in sorted(arrays)]))
    print(json.dumps({"images": n, "order": [p for p, _ in sorted(arrays)]}))


def npy(root, n, dtype):
    rng = np.random.default_rng(3)
    os.makedirs(root, exist_ok=True)
    for split, count in (("train", n), ("test", max(n // 5, 3))):
        labels = np.arange(count, dtype=np.int64) % 3
        images = np.stack([np.asarray(pattern(rng, int(l), 28, 28, 1)) for l in labels])
        if dtype == "float32":
            images = images.astype(np.float32) / 255.0
        np.save(os.path.join(root, f"{split}_images.npy"), images)
        np.save(os.path.join(root, f"{split}_labels.npy"), labels.astype(np.int16))
    with open(os.path.join(root, "class_names.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    print(json.dumps({"train": n}))


if __name__ == "__main__":
    kind, root = sys.argv[1], sys.argv[2]
    if kind == "folder":
        folder(root, int(sys.argv[3]), int(sys.argv[4]))
    elif kind == "exact":
        exact(root, int(sys.argv[3]))
    else:
        npy(root, int(sys.argv[3]), sys.argv[4])
