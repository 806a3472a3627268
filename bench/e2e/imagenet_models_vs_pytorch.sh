#!/usr/bin/env bash
# torchvision's architectures, tower's built-ins against PyTorch eager (channels_last), and
# against TensorFlow's Keras applications where Keras has the model (resnet50, mobilenet_v2; its
# own versions of them), measured in the same run and interleaved: images/s of training (forward,
# backward, SGD with momentum) and inference at batch 32, fp32, one tower, their ratios, and peak
# RSS. PyTorch comes from PyPI (`pip install torch torchvision`, a few GB) in the venv
# PYTORCH_VENV (default build/venv-torch), TensorFlow 2.21 (tensorflow-cpu, oneDNN on) in
# build/venv-tf; both are made here when missing. TF=0 leaves TensorFlow out.
#
#   bench/e2e/imagenet_models_vs_pytorch.sh
#   MODELS="resnet18 resnet50 mobilenet_v2" THREADS="2" MODES="train infer" IMAGE_SIZE=224
#   ROUNDS=1 STEPS=3 WINDOWS=3 PRECISION=fp32 (bf16: tower's --precision bf16, PyTorch's CPU
#   autocast, Keras's mixed_bfloat16)
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
venv=${PYTORCH_VENV:-build/venv-torch}
PY=$(scripts/pyenv "$venv" torch torchvision)
TFPY=""
if [ "${TF:-1}" = 1 ]; then TFPY=$(scripts/pyenv build/venv-tf tensorflow-cpu==2.21.0); fi
size=${IMAGE_SIZE:-224}
steps=${STEPS:-3}
windows=${WINDOWS:-3}
rounds=${ROUNDS:-1}
precision=${PRECISION:-fp32}

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }
median() { python3 -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); ${size}x${size}, batch 32, $precision"
echo "| model | mode | threads | tower img/s | PyTorch img/s | tower / PyTorch | TF img/s | tower / TF | tower MB | PyTorch MB | TF MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for model in ${MODELS:-resnet18 resnet50 mobilenet_v2}; do
  for mode in ${MODES:-train infer}; do
    for threads in ${THREADS:-2}; do
      a=() b=() c=() am=0 bm=0 cm=0
      for ((r = 0; r < rounds; ++r)); do
        t=$($TOWER bench --model "$model" --mode "$mode" --threads "$threads" \
          --global_batch_size 32 --optimizer momentum --image_size "$size" \
          --steps "$steps" --windows "$windows" --precision "$precision" 2>/dev/null | tail -1)
        p=$($PY bench/e2e/imagenet_models_pytorch.py --model "$model" --mode "$mode" \
          --threads "$threads" --image_size "$size" --classes 10 --steps "$steps" --windows "$windows" \
          --precision "$precision" | tail -1)
        echo "# tower:   $t" >&2
        echo "# pytorch: $p" >&2
        a+=("$(field "$t" images_per_sec)")
        b+=("$(field "$p" images_per_sec)")
        am=$(field "$t" peak_rss_mb)
        bm=$(field "$p" peak_rss_mb)
        if [ -n "$TFPY" ] && [ "$model" != resnet18 ] && [ "$model" != resnet34 ]; then
          k=$($TFPY bench/e2e/imagenet_models_tensorflow.py --model "$model" --mode "$mode" \
            --threads "$threads" --image_size "$size" --steps "$steps" --windows "$windows" \
            --precision "$precision" |
            tail -1)
          echo "# tensorflow: $k" >&2
          c+=("$(field "$k" images_per_sec)")
          cm=$(field "$k" peak_rss_mb)
        fi
      done
      ta=$(median "${a[@]}")
      pb=$(median "${b[@]}")
      kc=$([ ${#c[@]} -gt 0 ] && median "${c[@]}" || echo 0)
      python3 -c "
tf = f'{$kc:.1f} | {$ta / $kc:.2f}' if $kc > 0 else '- | -'
tm = f'{$cm:.0f}' if $kc > 0 else '-'
print(f'| $model | $mode | $threads | {$ta:.1f} | {$pb:.1f} | {$ta / $pb:.2f} | {tf} | {$am:.0f} | {$bm:.0f} | {tm} |')"
    done
  done
done
