"""What the ImageNet-model peers share: their flags, and timing a step like `tower bench` (the
median of timed windows after warm-up) into the one JSON line they print."""
import argparse
import json
import resource
import statistics
import time


def parse_flags(classes=10):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="train")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--classes", type=int, default=classes)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--windows", type=int, default=3)
    # bf16: each framework's own mixed precision (PyTorch's CPU autocast, Keras's
    # mixed_bfloat16), weights kept in fp32, as tower's --precision bf16.
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    return p.parse_args()


def report(flags, peer, step, finish=lambda result: None, **extra):
    """Runs `step` twice to warm up, then `flags.windows` windows of `flags.steps` steps
    (`finish` waits for a window's last result), and prints the JSON line."""
    for _ in range(2):
        finish(step())
    windows = []
    for _ in range(flags.windows):
        t0 = time.perf_counter()
        for _ in range(flags.steps):
            result = step()
        finish(result)
        windows.append((time.perf_counter() - t0) / flags.steps)
    sec = statistics.median(windows)
    print(json.dumps({"peer": peer, "model": flags.model, "mode": flags.mode,
                      "threads": flags.threads, "batch_size": flags.batch_size,
                      "precision": flags.precision, **extra,
                      "images_per_sec": flags.batch_size / sec,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
