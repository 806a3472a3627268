#!/usr/bin/env bash
# Time to 91% test accuracy on the real Fashion-MNIST: the default `tower train` run against the
# same network and recipe in PyTorch (bench/e2e/fashion_mnist_pytorch.py), same machine, same
# threads, run one after the other. Both evaluate every 117 steps (a quarter epoch at batch 128);
# the time includes data loading and the evaluations.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
PY=/usr/bin/python3
threads=$(nproc)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$TOWER train --train_dir "$dir/train" --eval_every 117 --log_every 117 > "$dir/tower.log"
$PY bench/e2e/fashion_mnist_pytorch.py --threads "$threads" --eval_every 117 > "$dir/torch.jsonl"
$PY - "$dir/train/metrics.jsonl" "$dir/torch.jsonl" <<'PY'
import json, sys
def first(path, key, target=0.91):
    rows = [json.loads(l) for l in open(path)]
    evals = [r for r in rows if key in r]
    hit = next((r for r in evals if r[key] >= target), None)
    return hit, evals[-1]
t_hit, t_last = first(sys.argv[1], "eval_precision_at_1")
p_hit, p_last = first(sys.argv[2], "precision_at_1")
def fmt(hit):
    return "%.1f s (step %d)" % (hit["wall_time"], hit["step"]) if hit else "not reached"
print("%-8s %-22s %s" % ("", "time to 91%", "final accuracy"))
print("%-8s %-22s %.4f at %.1f s" % ("tower", fmt(t_hit), t_last["eval_precision_at_1"], t_last["wall_time"]))
print("%-8s %-22s %.4f at %.1f s" % ("pytorch", fmt(p_hit), p_last["precision_at_1"], p_last["wall_time"]))
if t_hit and p_hit:
    print("speed-up to 91%%: %.2fx" % (p_hit["wall_time"] / t_hit["wall_time"]))
PY
