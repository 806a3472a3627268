"""Runs a model that `tower export` wrote with ONNX Runtime on a data set's test split, the way a
user would (pixels as they are in the files, NHWC), and compares with `tower eval --save_logits`.

usage: check_onnx.py MODEL.onnx FORMAT DIR TOWER_LOGITS.npy
  FORMAT: idx (DIR holds t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]) or cifar10
Prints one JSON line.
"""
import gzip
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort


def read_maybe_gzip(path):
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def test_split(fmt, folder):
    if fmt == "idx":
        images = np.frombuffer(read_maybe_gzip(os.path.join(folder, "t10k-images-idx3-ubyte")),
                               np.uint8, offset=16)
        labels = np.frombuffer(read_maybe_gzip(os.path.join(folder, "t10k-labels-idx1-ubyte")),
                               np.uint8, offset=8)
        return images.reshape(len(labels), 28, 28, 1), labels.astype(np.int64)
    if fmt == "cifar10":
        raw = np.fromfile(os.path.join(folder, "test_batch.bin"), np.uint8).reshape(-1, 3073)
        return raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), raw[:, 0].astype(np.int64)
    raise SystemExit("unknown format " + fmt)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    path, fmt, folder, tower_logits = sys.argv[1:5]
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    images, labels = test_split(fmt, folder)
    if feed.type == "tensor(float)":
        images = images.astype(np.float32)
    logits, probabilities = [], []
    for start in range(0, len(images), 500):
        out = session.run(["logits", "probabilities"], {"images": images[start:start + 500]})
        logits.append(out[0])
        probabilities.append(out[1])
    logits = np.concatenate(logits)
    probabilities = np.concatenate(probabilities)
    tower = np.load(tower_logits)
    print(json.dumps({
        "examples": int(len(images)),
        "input": [feed.type, [d if isinstance(d, int) else str(d) for d in feed.shape]],
        "accuracy": float(np.mean(np.argmax(logits, 1) == labels)),
        "tower_accuracy": float(np.mean(np.argmax(tower, 1) == labels)),
        "top1_differs": int(np.sum(np.argmax(logits, 1) != np.argmax(tower, 1))),
        "max_abs_diff": float(np.max(np.abs(logits - tower))),
        "within_tolerance": bool(np.allclose(logits, tower, rtol=1e-4, atol=1e-5)),
        "probabilities_sum": float(np.max(np.abs(probabilities.sum(1) - 1))),
        "classes": json.loads(meta.get("classes", "[]")),
        "opset": int(model.opset_import[0].version),
    }))


if __name__ == "__main__":
    main()
