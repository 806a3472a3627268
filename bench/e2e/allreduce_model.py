#!/usr/bin/env python3
"""Alpha-beta model of the bucketed ring all-reduce, fed with measurements of this machine.

Model (per training step, every worker keeps its per-worker batch: weak scaling):
  * A ring all-reduce of n bytes over p workers sends 2(p-1) messages of n/p bytes each way:
        T(n, p) = 2 (p - 1) alpha + 2 (p - 1) / p * n / beta
    alpha: per-message latency, beta: link bandwidth (bytes/s).
  * Compute per step t_c is measured (`tower bench`, 1 rank). The forward pass takes t_c / 3 and
    the backward pass 2 t_c / 3; bucket i (in reduction order, last layers first) is ready when
    the backward pass has produced its share of the gradient bytes:
        ready_i = t_c / 3 + 2 t_c / 3 * (bytes of buckets 0..i) / (all gradient bytes)
  * Buckets go over one channel, in order: start_i = max(ready_i, end_{i-1}),
    end_i = start_i + T(n_i, p).
  * Step time = max(t_c, end_last); scaling efficiency = t_c / step time.

Input: JSON lines of `tower bench` on stdin: one train line (compute time and bucket sizes) and
optionally an allreduce line measured under mpirun (fits alpha and beta of this machine's MPI
transport, and checks the model against the measured 2-rank step).
"""
import json
import sys


def ring_seconds(n, p, alpha, beta):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta if p > 1 else 0.0


def step_seconds(t_c, buckets, p, alpha, beta):
    total = float(sum(buckets))
    end, done = 0.0, 0.0
    for n in buckets:
        done += n
        ready = t_c / 3 + 2 * t_c / 3 * done / total
        end = max(ready, end) + ring_seconds(n, p, alpha, beta)
    return max(t_c, end)


def fit(sizes, seconds, p):
    """Least squares of T = a + b n in relative error (small messages count as much as large
    ones); alpha = a / (2(p-1)), beta = 2(p-1)/p / b."""
    w = [1 / (y * y) for y in seconds]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, sizes))
    sy = sum(wi * y for wi, y in zip(w, seconds))
    sxx = sum(wi * x * x for wi, x in zip(w, sizes))
    sxy = sum(wi * x * y for wi, x, y in zip(w, sizes, seconds))
    b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    a = (sy - b * sx) / sw
    return max(a, 1e-7) / (2 * (p - 1)), 2 * (p - 1) / p / b


def main():
    lines = [json.loads(l) for l in sys.stdin if l.strip().startswith("{")]
    trains = [l for l in lines if l.get("mode") == "train"]
    one = next(l for l in trains if l.get("ranks", 1) == 1)
    t_c, buckets = one["ms_per_step"] / 1e3, one["bucket_bytes"]
    print(f"model: {one['model']}, batch {one['batch_size']} per worker, compute {t_c * 1e3:.1f} ms/step "
          f"(measured, 1 rank), {len(buckets)} bucket(s) of {', '.join(f'{b / 1e6:.2f}' for b in buckets)} MB")

    measured = next((l for l in lines if l.get("mode") == "allreduce"), None)
    if measured:
        p = measured["ranks"]
        alpha, beta = fit(measured["bytes"], measured["seconds"], p)
        print(f"this machine's MPI transport ({p} ranks, fitted): alpha {alpha * 1e6:.1f} us, "
              f"beta {beta / 1e9:.2f} GB/s")
        many = next((l for l in trains if l.get("ranks", 1) == p), None)
        for many in (l for l in trains if l.get("ranks", 1) == p):
            # Each rank's own compute time: its step less the wait the overlap did not hide.
            t_rank = (many["ms_per_step"] - many["reduce_wait_ms"]) / 1e3
            predicted = step_seconds(t_rank, many["bucket_bytes"], p, alpha, beta) - t_rank
            print(f"  {p} ranks, {len(many['bucket_bytes'])} bucket(s): exposed communication per step "
                  f"predicted {predicted * 1e3:.2f} ms, measured {many['reduce_wait_ms']:.2f} ms")

    alpha, beta = 5e-6, 100e9 / 8  # 100 Gb/s network, 5 us per message
    for label, t in (("measured compute", t_c), ("compute 10x faster (a GPU-class step)", t_c / 10)):
        print(f"\nprediction, 100 Gb/s network, alpha 5 us, {label} = {t * 1e3:.1f} ms/step:")
        print(f"{'workers':>8} {'all-reduce ms':>14} {'exposed ms':>11} {'step ms':>9} {'efficiency':>11}")
        for p in (8, 64, 512):
            comm = sum(ring_seconds(n, p, alpha, beta) for n in buckets)
            step = step_seconds(t, buckets, p, alpha, beta)
            print(f"{p:>8} {comm * 1e3:>14.2f} {(step - t) * 1e3:>11.2f} {step * 1e3:>9.2f} {100 * t / step:>10.1f}%")


if __name__ == "__main__":
    main()
