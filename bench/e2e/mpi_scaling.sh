#!/usr/bin/env bash
# Many processes (MPI): cifar10 at global batch 128 on this machine, 1 rank x 2 threads against
# 2 ranks x 1 thread (mpirun), with the share of the step spent waiting on communication; then
# the alpha-beta model of the ring all-reduce (allreduce_model.py), fitted to this machine's MPI
# transport and fed with the measured compute time and bucket sizes, predicts scaling to 8, 64
# and 512 workers on a 100 Gb/s network.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
command -v mpirun >/dev/null || { echo "mpirun not found: apt-get install openmpi-bin"; exit 0; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf "%-34s %10s %9s %9s %10s %18s\n" layout images/s ms/step comm_ms wait_ms comm_wait_share
run() {
  local label=$1; shift
  local j
  j=$("$@" | tail -1)
  echo "$j" >> "$out"
  python3 - "$label" "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[2])
print("%-34s %10.1f %9.1f %9.2f %10.2f %17.1f%%" % (sys.argv[1], j["images_per_sec"], j["ms_per_step"],
      j["comm_ms"], j["reduce_wait_ms"], 100 * j["reduce_wait_share"]))
PY
}
flags="--model cifar10 --global_batch_size 128 --steps 5 --windows 5"
run "1 rank x 2 threads" $TOWER bench $flags --threads 2
run "2 ranks x 1 thread, 25 MB buckets" $MPIRUN -np 2 $TOWER bench $flags --threads 1
run "2 ranks x 1 thread, 1 MB buckets" $MPIRUN -np 2 $TOWER bench $flags --threads 1 --bucket_mb 1
$MPIRUN -np 2 $TOWER bench --mode allreduce --steps 10 --windows 3 | tail -1 >> "$out"
echo
python3 bench/e2e/allreduce_model.py < "$out"
