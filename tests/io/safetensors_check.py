"""Reads and writes safetensors files with the reference Python library, for safetensors_test.cc.

  safetensors_check.py dump FILE    prints {"metadata": ..., "tensors": {name: {dtype, shape, values}}}
  safetensors_check.py write FILE   writes a known file with safetensors.numpy.save_file
"""
import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def dump(path):
    tensors = load_file(path)
    with safe_open(path, framework="np") as f:
        metadata = f.metadata() or {}
    out = {"metadata": metadata, "tensors": {}}
    for name, array in tensors.items():
        out["tensors"][name] = {
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "values": array.reshape(-1).tolist(),
        }
    print(json.dumps(out))


def write(path):
    save_file(
        {
            "weights": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
            "counts": np.array([-3, 7], dtype=np.int64),
            "pixels": np.array([[0, 255]], dtype=np.uint8),
            "scalar": np.array(2.5, dtype=np.float32),
        },
        path,
        metadata={"written_by": "python"},
    )


if __name__ == "__main__":
    {"dump": dump, "write": write}[sys.argv[1]](sys.argv[2])
