"""The cifar10 tutorial CNN in PyTorch, with TensorFlow's LRN and SAME-padding semantics, timed
like `tower bench`: prints one JSON line (images_per_sec = median of timed windows after warm-up).

usage: cifar10_pytorch.py --threads T --mode train|infer [--batch_size 128]
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn.functional as F


class Cifar10(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 64, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(64, 64, 5, padding=2)
        self.local3 = torch.nn.Linear(6 * 6 * 64, 384)
        self.local4 = torch.nn.Linear(384, 192)
        self.logits = torch.nn.Linear(192, 10)
        # TF: x / (bias + alpha * sum over 2r+1 channels)^beta; PyTorch divides alpha by size.
        self.lrn = torch.nn.LocalResponseNorm(9, alpha=0.001 / 9.0 * 9, beta=0.75, k=1.0)

    @staticmethod
    def pool_same(x):
        # 3x3/2 max pool, TF SAME on even sizes: one row/column of padding after.
        return F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=float("-inf")), 3, 2)

    def forward(self, x):
        x = self.lrn(self.pool_same(F.relu(self.conv1(x))))
        x = self.pool_same(self.lrn(F.relu(self.conv2(x))))
        x = F.relu(self.local3(x.flatten(1)))
        x = F.relu(self.local4(x))
        return self.logits(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="train")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--windows", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Cifar10()
    params = sum(p.numel() for p in model.parameters())
    assert params == 1068298, params
    x = torch.randn(a.batch_size, 3, 24, 24)
    y = torch.arange(a.batch_size) % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    def infer_step():
        with torch.no_grad():
            model(x)

    step = train_step if a.mode == "train" else infer_step
    if a.mode != "train":
        model.eval()
    for _ in range(3):
        step()
    windows = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        windows.append((time.perf_counter() - t0) / a.steps)
    sec = statistics.median(windows)
    print(json.dumps({"peer": "pytorch " + torch.__version__, "mode": a.mode, "threads": a.threads,
                      "batch_size": a.batch_size, "images_per_sec": a.batch_size / sec,
                      "ms_per_step": sec * 1e3,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
