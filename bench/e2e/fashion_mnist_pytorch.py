"""The default tower run re-done in PyTorch, for a time-to-accuracy comparison on this machine:
the same network (conv 5x5x32 - max-pool 2 - conv 3x3x64 - max-pool 2 - fc 256 - linear 10, SAME
padding), Adam at 3e-3 with 50 warm-up steps and cosine decay over 2.5 epochs, global batch 128,
pixels scaled to [0, 1], test accuracy every `--eval_every` steps. Prints one JSON line per
evaluation: step, wall_time (s since start, data loading included), precision_at_1.
"""
import argparse
import gzip
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

DIR = "/usr/share/datasets/fashion-mnist/"


def load(prefix):
    with gzip.open(DIR + prefix + "-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(DIR + prefix + "-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(images, dtype=torch.float32) / 255.0, torch.tensor(labels, dtype=torch.long)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(7 * 7 * 64, 256)
        self.logits = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.logits(F.relu(self.fc1(x.flatten(1))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=float, default=2.5)
    p.add_argument("--eval_every", type=int, default=117)
    a = p.parse_args()
    start = time.perf_counter()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    x, y = load("train")
    tx, ty = load("t10k")
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch, per_epoch = 128, 60000 // 128
    total = math.ceil(a.epochs * per_epoch)
    warmup = 50

    def lr_at(step):
        if step < warmup:
            return 3e-3 * step / warmup
        return 3e-3 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))

    def evaluate():
        model.eval()
        with torch.no_grad():
            correct = sum((model(tx[i:i + 500]).argmax(1) == ty[i:i + 500]).sum().item()
                          for i in range(0, 10000, 500))
        model.train()
        return correct / 10000

    step = 0
    while step < total:
        order = torch.randperm(60000)
        for b in range(per_epoch):
            if step == total:
                break
            idx = order[b * batch:(b + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            step += 1
            if step % a.eval_every == 0 or step == total:
                print(json.dumps({"step": step, "wall_time": time.perf_counter() - start,
                                  "precision_at_1": evaluate()}), flush=True)


if __name__ == "__main__":
    main()
