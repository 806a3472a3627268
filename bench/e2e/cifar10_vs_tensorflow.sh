#!/usr/bin/env bash
# End-to-end benchmark (issue 14, item 5): the cifar10 model at batch 128 on 24x24x3, tower vs
# TensorFlow 2.21 (bench/e2e/cifar10_tensorflow.py: the classic multi-tower program, tf.compat.v1
# graph, oneDNN on), measured in the same run, interleaved (tower then TF, REPEAT pairs, best of
# each), for: train and infer x 1 and 2 threads x 1 and 2 towers (towers <= threads) x fp32 and
# bf16 x quiet and with one busy core (a shell busy loop, pinned to nothing, running during the
# pairs). Prints each JSON line on stderr and one table row per configuration on stdout: images/s,
# the ratio tower/TF, peak RSS, GFLOP/s (tower's FLOP count for both) and tower's share of the fp32
# and bf16 peaks of the cores it was given.
#
# bf16: TF is run both ways (grappler's auto_mixed_precision_onednn_bfloat16, and the mixed_bfloat16
# policy written out) and the faster is kept; the row names it and says whether TF's bf16 ran on
# oneDNN or on its Eigen fallback (oneDNN's bf16 needs AVX-512). tower runs --precision bf16 where
# the CPU has bf16 instructions (AVX512-BF16 or AMX); elsewhere its bf16 rows show its fp32
# figure, marked "tower fp32 (no bf16 on this CPU)".
#
# Peaks: fp32 = one core's measured FMA throughput (bench/e2e/fma_peak.c, built here for the
# CPU or its AVX2 cap) x threads, or PEAK_FP32_GFLOPS_PER_CORE; bf16 = 2 x fp32 where the CPU has
# AVX512_BF16 (two multiply-adds per fp32 lane), "-" otherwise (or PEAK_BF16_GFLOPS_PER_CORE).
# towers: TF's are logical CPU devices; tower's are CPU towers (--num_devices). Inference is one
# program in tower (its towers are for training), the batch split over the towers in TF.
#
# Needs build/bin/tower (or TOWER=...), a C compiler, and PyPI: tensorflow-cpu is installed into
# build/venv-tf when missing (scripts/pyenv). QUICK=1: 2 threads x 2 towers only and few steps (a
# smoke test, a few minutes). REPEAT=N: pairs per configuration (default 2; 1 with QUICK).
# COMBOS="1x1 2x2": the threads x towers to run; PRECISIONS="fp32" skips bf16. TensorFlow's log goes to build/bench/tf.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  REPEAT=${REPEAT:-1}
  COMBOS=${COMBOS:-2x2}  # threads x towers
  TOWER_STEPS="--steps 2 --windows 2"
  TF_STEPS="--warmup 1 --steps 2 --windows 2"
  TF_BF16_STEPS="--warmup 1 --steps 2 --windows 2 --budget_s 2"
else
  REPEAT=${REPEAT:-2}
  COMBOS=${COMBOS:-1x1 2x1 2x2}
  TOWER_STEPS="--steps 10 --windows 5"
  TF_STEPS="--warmup 3 --steps 10 --windows 5"
  TF_BF16_STEPS="--warmup 2 --steps 10 --windows 5 --budget_s 10"
fi
if [ ! -x "$TOWER" ]; then
  echo "$TOWER not found: build it first (make build) or set TOWER" >&2
  exit 1
fi
echo "installing tensorflow-cpu into build/venv-tf when missing (the TensorFlow peer) ..." >&2
TFPY=$(scripts/pyenv build/venv-tf tensorflow-cpu==2.21.0)
TF_PROG=bench/e2e/cifar10_tensorflow.py

# shellcheck source=bench/e2e/common.bash
. bench/e2e/common.bash
measure_peaks
: >build/bench/tf.log
TOWER_BF16=0
if "$TOWER" bench --model mlp --mode infer --global_batch_size 8 --steps 1 --windows 1 --precision bf16 \
  >/dev/null 2>&1; then TOWER_BF16=1; fi

tmp=$(mktemp -d)
trap 'stop_busy; rm -rf "$tmp"' EXIT

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores," \
  "$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo "no AVX-512");" \
  "fp32 peak ${PEAK_FP32} GFLOP/s per core (${PEAK_FP32_GFLOPS_PER_CORE:+given}${PEAK_FP32_GFLOPS_PER_CORE:-measured});" \
  "bf16 peak: $([ "$PEAK_BF16" = 0 ] && echo "none (no AVX512_BF16)" || echo "$PEAK_BF16 GFLOP/s per core")"
echo "# $("$TFPY" -c 'import importlib.metadata as m; print("tensorflow-cpu", m.version("tensorflow-cpu"))');" \
  "tower $([ $TOWER_BF16 = 1 ] && echo "runs bf16 here" || echo "has no bf16 on this CPU: its bf16 rows are its fp32 figure")"
printf "%-5s %3s %3s %-4s %-5s | %9s %9s %6s | %6s %6s | %7s %6s %6s %7s | %s\n" \
  mode thr twr prec load tower_i/s tf_i/s ratio tow_MB tf_MB tow_GF/s %fp32 %bf16 tf_GF/s notes
for mode in train infer; do
  for combo in $COMBOS; do
    threads=${combo%x*}
    towers=${combo#*x}
    for precision in ${PRECISIONS:-fp32 bf16}; do
      for load in quiet busy; do
        tower_args=(bench --model cifar10 --global_batch_size 128 --threads "$threads" --mode "$mode")
        if [ "$mode" = train ]; then tower_args+=(--num_devices "$towers"); fi
        if [ "$precision" = bf16 ] && [ $TOWER_BF16 = 1 ]; then tower_args+=(--precision bf16); fi
        tf_args=(--threads "$threads" --towers "$towers" --mode "$mode" --precision "$precision")
        methods=(fp32)
        if [ "$precision" = bf16 ]; then methods=(grappler keras); fi
        rm -f "$tmp"/*
        if [ "$load" = busy ]; then start_busy; fi
        for _ in $(seq "$REPEAT"); do
          # shellcheck disable=SC2086
          t=$("$TOWER" "${tower_args[@]}" $TOWER_STEPS | tail -1)
          echo "# tower: $t" >&2
          echo "$t" >>"$tmp/tower"
          for m in "${methods[@]}"; do
            steps=$TF_STEPS
            if [ "$m" != fp32 ]; then steps="--bf16 $m $TF_BF16_STEPS"; fi
            # shellcheck disable=SC2086
            if ! p=$("$TFPY" "$TF_PROG" "${tf_args[@]}" $steps 2>"$tmp/tf.err" | tail -1); then
              cat "$tmp/tf.err" >&2
              exit 1
            fi
            cat "$tmp/tf.err" >>build/bench/tf.log
            echo "# tensorflow: $p" >&2
            echo "$p" >>"$tmp/tf-$m"
          done
        done
        stop_busy
        t=$(best "$tmp/tower")
        per_method=()  # the best of each TF method; the faster method is the row's TF figure
        for m in "${methods[@]}"; do per_method+=("$(best "$tmp/tf-$m")"); done
        p=$(best "${methods[@]/#/$tmp/tf-}")
        python3 - "$t" "$p" "$mode" "$threads" "$towers" "$precision" "$load" "$PEAK_FP32" \
          "$PEAK_BF16" "$TOWER_BF16" "${per_method[@]}" <<'EOF'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
mode, threads, towers, precision, load = sys.argv[3:8]
peak32, peak16 = float(sys.argv[8]) * int(threads), float(sys.argv[9]) * int(threads)
tower_bf16 = sys.argv[10] == "1"
notes = []
if precision == "bf16":
    if not tower_bf16:
        notes.append("tower fp32 (no bf16 on this CPU)")
    others = [json.loads(s) for s in sys.argv[11:]]
    notes.append("tf %s (%s img/s), %d bf16 nodes on %s" % (
        p["bf16"], ", ".join("%s %.0f" % (o["bf16"], o["images_per_sec"]) for o in others),
        p["bf16_nodes"], p["bf16_kernels"]))
if mode == "infer" and towers != "1":
    notes.append("tower: 1 program")
gf = t["gflops"]
tf_gf = p["images_per_sec"] * t["mflop_per_image"] / 1e3  # tower's FLOP count for both
print("%-5s %3s %3s %-4s %-5s | %9.1f %9.1f %6.2f | %6.0f %6.0f | %7.1f %5.1f%% %6s %7.1f | %s" % (
    mode, threads, towers, precision, load, t["images_per_sec"], p["images_per_sec"],
    t["images_per_sec"] / p["images_per_sec"], t["peak_rss_mb"], p["peak_rss_mb"], gf,
    100 * gf / peak32, "%.1f%%" % (100 * gf / peak16) if peak16 else "-", tf_gf,
    "; ".join(notes)), flush=True)
EOF
      done
    done
  done
done
