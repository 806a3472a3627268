"""torchvision's resnet18, resnet50 or mobilenet_v2 in PyTorch eager, channels_last (its oneDNN
path on CPU), timed like `tower bench`: prints one JSON line (images_per_sec = median of timed
windows after warm-up; peak_rss_mb). Training is forward, backward and SGD with momentum 0.9.

usage: imagenet_models_pytorch.py --model M --threads T --mode train|infer [--batch_size 32]
       [--image_size 224]
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision

# The parameter counts of tower's built-ins, for 1,000 classes: the same networks.
PARAMETERS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032,
              "mobilenet_v2": 3504872}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="train")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--windows", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(num_classes=a.classes)
    if a.classes == 1000:
        params = sum(t.numel() for t in model.parameters())
        assert params == PARAMETERS[a.model], params
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size).to(
        memory_format=torch.channels_last)
    y = torch.arange(a.batch_size) % a.classes
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train_step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def infer_step():
        with torch.no_grad():
            model(x)

    step = train_step if a.mode == "train" else infer_step
    model.train(a.mode == "train")
    for _ in range(2):
        step()
    windows = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        windows.append((time.perf_counter() - t0) / a.steps)
    sec = statistics.median(windows)
    print(json.dumps({"peer": "pytorch " + torch.__version__, "model": a.model, "mode": a.mode,
                      "threads": a.threads, "batch_size": a.batch_size,
                      "images_per_sec": a.batch_size / sec,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
