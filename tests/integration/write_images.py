"""Writes the first COUNT test images of a data set as a user would have them: PNG files made with
Pillow (and one JPEG of another size, and one corrupt file), named <index>.png.

usage: write_images.py FORMAT DIR OUT COUNT   (FORMAT: idx or cifar10, as check_onnx.py)
"""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
from check_onnx import test_split  # noqa: E402

fmt, folder, out, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
images, _ = test_split(fmt, folder)
os.makedirs(out, exist_ok=True)
for i in range(count):
    image = images[i]
    Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image).save(
        os.path.join(out, "%04d.png" % i))
big = np.repeat(np.repeat(images[0], 3, axis=0), 3, axis=1)
Image.fromarray(big[:, :, 0] if big.shape[2] == 1 else big).convert("RGB").save(
    os.path.join(out, "large.jpg"), quality=95)
with open(os.path.join(out, "corrupt.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
