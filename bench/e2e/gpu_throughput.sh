#!/usr/bin/env bash
# GPU machine (issue: CUDA backend): cifar10 and resnet20 training images/s on cuda:0 at batch 128
# and 512, with the achieved FP32 GFLOP/s as a share of the GPU's peak (H200: 67 TFLOP/s FP32
# without tensor cores; set GPU_PEAK_TFLOPS for another GPU), then --precision bf16 (cuDNN's and
# cuBLAS's bf16 on tensor cores) against fp32 in the same run. A few minutes in all. Prints that it
# skipped where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
peak=${GPU_PEAK_TFLOPS:-67}
if ! $TOWER devices | grep -q "cuda:0"; then
  echo "no CUDA device on this machine (or no CUDA backend in this build): skipped"
  exit 0
fi
$TOWER devices
printf "%-10s %6s %-16s %12s %10s %10s %12s\n" model batch cudnn images/s ms/step GFLOP/s "% of peak"
for model in cifar10 resnet20; do
  for batch in 128 512; do
    for mode in deterministic no-deterministic; do
      j=$($TOWER bench --model $model --global_batch_size $batch --devices cuda:0 --$mode --steps 10 --windows 3 | tail -1)
      echo "# $j" >&2
      python3 - "$j" "$peak" "$mode" <<'PY'
import json, sys
j, peak, mode = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print("%-10s %6d %-16s %12.1f %10.2f %10.1f %11.1f%%" % (j["model"], j["batch_size"], mode, j["images_per_sec"],
      j["ms_per_step"], j["gflops"], 100 * j["gflops"] / (peak * 1e3)))
PY
    done
  done
done
# bf16 against fp32, interleaved (compute capability 8.0 and later).
printf "%-10s %6s %12s %12s %8s\n" model batch "fp32 img/s" "bf16 img/s" ratio
for model in cifar10 resnet20; do
  for batch in 128 512; do
    run() { $TOWER bench --model $model --global_batch_size $batch --devices cuda:0 --steps 10 --windows 3 "$@" | tail -1; }
    fp32=$(run --precision fp32) bf16=$(run --precision bf16) || { echo "bf16: not on this GPU"; break 2; }
    python3 - "$fp32" "$bf16" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("%-10s %6d %12.1f %12.1f %7.2fx" % (a["model"], a["batch_size"], a["images_per_sec"], b["images_per_sec"],
      b["images_per_sec"] / a["images_per_sec"]))
PY
  done
done
# Where a GPU step goes (each kernel waited for, so the sum runs above the step above).
$TOWER bench --model cifar10 --global_batch_size 128 --devices cuda:0 --steps 5 --windows 1 --profile >/dev/null
