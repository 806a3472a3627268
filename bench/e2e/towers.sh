#!/usr/bin/env bash
# Towers benchmark (issue: multi-device data parallelism): cifar10 at global batch 256 on this
# machine, 1 tower x 2 threads against 2 towers x 1 thread, for both strategies, with the share of
# the step spent waiting for gradient reduction (the part not overlapped with backward).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
threads=$(nproc)
printf "%-24s %12s %10s %10s %16s\n" layout images/s ms/step reduce_ms reduce_wait_share
run() {
  local label=$1; shift
  local j
  j=$($TOWER bench --model cifar10 --global_batch_size 256 --threads "$threads" --steps 5 --windows 3 "$@" | tail -1)
  echo "# $j" >&2
  python3 - "$label" "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[2])
print("%-24s %12.1f %10.1f %10.2f %15.1f%%" % (sys.argv[1], j["images_per_sec"], j["ms_per_step"],
      j["reduce_ms"], 100 * j["reduce_wait_share"]))
PY
}
run "1 tower x $threads threads" --num_devices 1 --strategy allreduce
run "2 towers, allreduce" --num_devices 2 --strategy allreduce
run "2 towers, central" --num_devices 2 --strategy central

# The fixed-tree micro-batches (--micro_batch_size, the same bits on any layout) against the
# classic towers at the same global batch, interleaved, two rounds: what the tree costs.
echo
printf "%-34s %12s %12s %8s\n" "2 towers, global batch 256" classic tree tree/classic
images_per_sec() {
  $TOWER bench --model cifar10 --global_batch_size 256 --threads "$threads" --num_devices 2 --steps 5 \
    --windows 3 "$@" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_sec"])'
}
for micro in 128 64 32; do
  for round in 1 2; do
    classic=$(images_per_sec)
    tree=$(images_per_sec --micro_batch_size "$micro")
    python3 -c "import sys; c, t = map(float, sys.argv[2:]); print('%-34s %12.1f %12.1f %8.2f' % (sys.argv[1], c, t, t / c))" \
      "micro-batch $micro (round $round)" "$classic" "$tree"
  done
done
