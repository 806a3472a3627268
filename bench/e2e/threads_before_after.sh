#!/usr/bin/env bash
# Two builds of tower, interleaved: `tower bench` images/s of lenet, cifar10 and resnet20, train
# and infer, on 1 and 2 threads (one tower, global batch 128), the median of ROUNDS runs each,
# and the ratio of the second binary to the first. For a change to the kernels' threading: build
# the commit before it into another folder and give both binaries.
#
#   bench/e2e/threads_before_after.sh OLD_TOWER [NEW_TOWER]   (default NEW: build/bin/tower)
#   ROUNDS=3 STEPS=5 WINDOWS=3 MODELS="lenet cifar10 resnet20" THREADS="1 2" MODES="train infer"
#   TOWER_MAX_CPU_ISA=avx2 caps both binaries' kernels (the AVX2 floor on a bigger machine).
set -euo pipefail
if [ $# -lt 1 ]; then  # (scripts/bench-all runs every script without arguments)
  echo "usage: $0 OLD_TOWER [NEW_TOWER]: needs the binary of another build; skipped" >&2
  exit 0
fi
old=$1
new=${2:-build/bin/tower}
rounds=${ROUNDS:-3}
steps=${STEPS:-5}
windows=${WINDOWS:-3}

# images/s of one bench run
rate() {
  "$1" bench --model "$2" --mode "$3" --threads "$4" --steps "$steps" --windows "$windows" \
    2>/dev/null | python3 -c 'import json, sys; print(json.loads(sys.stdin.readlines()[-1])["images_per_sec"])'
}
median() { python3 -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ISA cap: ${TOWER_MAX_CPU_ISA:-none}"
echo "| model | mode | threads | old img/s | new img/s | new / old |"
echo "|---|---|---|---|---|---|"
for model in ${MODELS:-lenet cifar10 resnet20}; do
  for mode in ${MODES:-train infer}; do
    for threads in ${THREADS:-1 2}; do
      a=() b=()
      for ((r = 0; r < rounds; ++r)); do  # interleaved, the order alternating
        if ((r % 2 == 0)); then
          a+=("$(rate "$old" "$model" "$mode" "$threads")")
          b+=("$(rate "$new" "$model" "$mode" "$threads")")
        else
          b+=("$(rate "$new" "$model" "$mode" "$threads")")
          a+=("$(rate "$old" "$model" "$mode" "$threads")")
        fi
      done
      ma=$(median "${a[@]}")
      mb=$(median "${b[@]}")
      python3 -c "print(f'| $model | $mode | $threads | {$ma:.0f} | {$mb:.0f} | {$mb / $ma:.3f} |')"
    done
  done
done
