#!/usr/bin/env bash
# ResNet-20 (He et al. 2016, section 4.2, projection shortcuts) at batch 128 on 32x32x3: `tower
# bench --model resnet20` against its TensorFlow 2.x Keras twin (bench/e2e/resnet20_tensorflow.py:
# the same network, batch norm settings and weight decay, SGD with momentum 0.9 on both sides,
# oneDNN on), measured in the same run, interleaved (tower then TF, REPEAT pairs, best of each),
# for: train and infer x THREADS x fp32 and bf16 (where the CPU has bf16 instructions) x quiet and
# with one busy core (a shell busy loop during the pairs).
#
# Prints each JSON line on stderr and one row per configuration on stdout: images/s of both sides
# and the ratio tower/TF (> 1: tower is faster), peak RSS of both, tower's GFLOP/s (its own FLOP
# count: 2 per multiply-add of direct convolutions and matmuls, forward and backward) and its share
# of the peak of the cores it was given: fp32 = one core's measured FMA throughput
# (bench/e2e/fma_peak.c, built here for the CPU or its AVX2 cap) x threads, or
# PEAK_FP32_GFLOPS_PER_CORE; bf16 = 2 x fp32 where the CPU has AVX512_BF16, or
# PEAK_BF16_GFLOPS_PER_CORE. Where the Winograd
# kernels run (AVX-512 on AMD CPUs) fewer multiply-adds are made than counted, so the share can
# pass 100%.
#
# Environment: THREADS="1 2" (default), MODES="train infer", PRECISIONS="fp32 bf16",
# LOADS="quiet busy", REPEAT=2, STEPS="--steps 10 --windows 5" (both sides; TF also warms up 3
# steps, tower as `tower bench` does). QUICK=1: 2 threads, quiet, 1 pair, short windows.
# Needs build/bin/tower (or TOWER=...), a C compiler, and PyPI: tensorflow-cpu 2.21 is installed
# into build/venv-tf when missing (scripts/pyenv). TensorFlow's log goes to build/bench/tf.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
if [ "${QUICK:-0}" = 1 ]; then
  THREADS=${THREADS:-2} LOADS=${LOADS:-quiet} REPEAT=${REPEAT:-1} STEPS=${STEPS:---steps 3 --windows 2}
fi
THREADS=${THREADS:-1 2}
MODES=${MODES:-train infer}
PRECISIONS=${PRECISIONS:-fp32 bf16}
LOADS=${LOADS:-quiet busy}
REPEAT=${REPEAT:-2}
STEPS=${STEPS:---steps 10 --windows 5}
if [ ! -x "$TOWER" ]; then
  echo "$TOWER not found: build it first (make build) or set TOWER" >&2
  exit 1
fi
echo "installing tensorflow-cpu into build/venv-tf when missing (the TensorFlow peer) ..." >&2
TFPY=$(scripts/pyenv build/venv-tf tensorflow-cpu==2.21.0)
export TF_ENABLE_ONEDNN_OPTS=1
# shellcheck source=bench/e2e/common.bash
. bench/e2e/common.bash
measure_peaks
: >build/bench/tf.log
tmp=$(mktemp -d)
trap 'stop_busy; rm -rf "$tmp"' EXIT

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores;" \
  "fp32 peak $PEAK_FP32 GFLOP/s per core; bf16 peak:" \
  "$([ "$PEAK_BF16" = 0 ] && echo "none (no AVX512_BF16)" || echo "$PEAK_BF16 GFLOP/s per core");" \
  "$("$TFPY" -c 'import importlib.metadata as m; print("tensorflow-cpu", m.version("tensorflow-cpu"))');" \
  "batch 128, SGD momentum 0.9; best of $REPEAT pairs"
printf "%-5s %3s %-4s %-5s | %9s %9s %6s | %6s %6s | %7s %6s\n" \
  mode thr prec load tower_i/s tf_i/s ratio tow_MB tf_MB tow_GF/s %peak
for mode in $MODES; do
  for threads in $THREADS; do
    for precision in $PRECISIONS; do
      if [ "$precision" = bf16 ] && [ "$PEAK_BF16" = 0 ]; then continue; fi
      for load in $LOADS; do
        rm -f "$tmp/tower" "$tmp/tf"
        if [ "$load" = busy ]; then start_busy; fi
        for _ in $(seq "$REPEAT"); do
          # shellcheck disable=SC2086
          t=$("$TOWER" bench --model resnet20 --mode "$mode" --threads "$threads" \
            --global_batch_size 128 --num_devices 1 --optimizer momentum \
            --precision "$precision" $STEPS | tail -1)
          echo "# tower: $t" >&2
          echo "$t" >>"$tmp/tower"
          # shellcheck disable=SC2086
          if ! p=$("$TFPY" bench/e2e/resnet20_tensorflow.py --threads "$threads" --mode "$mode" \
            --precision "$precision" $STEPS 2>>build/bench/tf.log | tail -1); then
            tail -20 build/bench/tf.log >&2
            exit 1
          fi
          echo "# tensorflow: $p" >&2
          echo "$p" >>"$tmp/tf"
        done
        stop_busy
        python3 - "$(best "$tmp/tower")" "$(best "$tmp/tf")" "$mode" "$threads" "$precision" \
          "$load" "$PEAK_FP32" "$PEAK_BF16" <<'PY'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
mode, threads, precision, load = sys.argv[3:7]
peak = float(sys.argv[8 if precision == "bf16" else 7]) * int(threads)
print("%-5s %3s %-4s %-5s | %9.1f %9.1f %6.2f | %6.0f %6.0f | %7.1f %5.1f%%" % (
    mode, threads, precision, load, t["images_per_sec"], p["images_per_sec"],
    t["images_per_sec"] / p["images_per_sec"], t["peak_rss_mb"], p["peak_rss_mb"], t["gflops"],
    100 * t["gflops"] / peak), flush=True)
PY
      done
    done
  done
done
