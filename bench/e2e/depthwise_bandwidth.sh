#!/usr/bin/env bash
# The bandwidth MobileNetV2's depthwise convolutions reach, against the machine's (a STREAM triad,
# memory_bandwidth.c, on the same threads): `tower bench --profile` of inference at 224x224,
# batch 32, for the depthwise kernels among its slowest, each moving its input and output once
# (4 bytes a value; the 3x3 filters are noise). A depthwise convolution does 9 multiply-adds per
# output value: it is bound by memory, not arithmetic.
#
#   bench/e2e/depthwise_bandwidth.sh        THREADS=2 STEPS=5 WINDOWS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
threads=${THREADS:-2}
mkdir -p build/bench
cc -O2 -march=native -fopenmp bench/e2e/memory_bandwidth.c -o build/bench/memory_bandwidth
stream=$(OMP_NUM_THREADS=$threads build/bench/memory_bandwidth)
profile=$("$TOWER" bench --model mobilenet_v2 --mode infer --batch_size 32 --threads "$threads" \
  --steps "${STEPS:-5}" --windows "${WINDOWS:-3}" --profile 2>&1 >/dev/null)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $threads threads; STREAM triad $stream GB/s"
PROFILE=$profile python3 - "$stream" <<'PY'
import os, re, sys
stream = float(sys.argv[1])
# (channels, input side, stride) of each inverted residual's depthwise convolution at 224x224:
# the kernel is the block's first ReLU6 in block 1 (no expansion), its second in the others.
blocks = {1: (32, 112, 1), 2: (96, 112, 2), 3: (144, 56, 1), 4: (144, 56, 2), 5: (192, 28, 1),
          6: (192, 28, 1), 7: (192, 28, 2), 8: (384, 14, 1), 9: (384, 14, 1), 10: (384, 14, 1),
          11: (384, 14, 1), 12: (576, 14, 1), 13: (576, 14, 1), 14: (576, 14, 2), 15: (960, 7, 1),
          16: (960, 7, 1), 17: (960, 7, 1)}
print("| block | channels | in -> out | MB moved | ms | GB/s | of STREAM |")
print("|---|---|---|---|---|---|---|")
for line in os.environ["PROFILE"].splitlines():
    m = re.match(r"\s+Conv2D\+FusedBatchNorm\+Relu6\s+features/(\d+)/(Relu6(?:_1)?)\s+([\d.]+)", line)
    if not m:
        continue
    block, name, ms = int(m.group(1)), m.group(2), float(m.group(3))
    if name != ("Relu6" if block == 1 else "Relu6_1"):
        continue  # an expansion, not a depthwise convolution
    c, side, stride = blocks[block]
    out = side // stride
    mb = 4 * 32 * c * (side * side + out * out) / 1e6
    gbs = mb / ms
    print(f"| {block} | {c} | {side} -> {out} | {mb:.0f} | {ms:.2f} | {gbs:.1f} | {gbs / stream:.2f} |")
PY
