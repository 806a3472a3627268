#!/usr/bin/env bash
# The default `tower train` run (lenet on Fashion-MNIST, 2.5 epochs, Adam 3e-3 with 50 warm-up
# steps and cosine decay, EMA 0.9999 evaluated on the 10,000 test images) against its TensorFlow
# 2.x Keras twin (bench/e2e/fashion_mnist_tensorflow.py: the same network, initializer kinds,
# data, global batch, schedule, Adam epsilon and moving-average rule, one tf.function step,
# oneDNN on), same machine, same threads, interleaved: tower then TensorFlow, ROUNDS times.
#
# Prints one row per round and the medians (and the best of each side):
#   loop s   the training loop only. tower: the wall_time of its last training step in
#            metrics.jsonl (its "done: N steps in X s" also counts the final evaluation and the
#            checkpoint, about 1 s; X is shown on stderr); TensorFlow: its loop_seconds (the
#            steps and the batching, not the tracing nor the evaluation).
#   img/s    steps x global batch / loop s, and the ratio tower/TF (> 1: tower is faster).
#   wall s   the whole process as the shell sees it (start-up, data loading, tracing or program
#            building, evaluation, tower's checkpoint and logs), and the ratio tower/TF (< 1:
#            tower is faster).
#   acc      test accuracy with the moving-average weights, and tower - TF in points.
#
# TensorFlow's twin has been seen bimodal on this machine (some runs markedly slower than others
# with nothing else running): run at least two rounds and compare against its faster mode (the
# "best" row) as well as the medians.
#
# usage: bench/e2e/fashion_mnist_vs_tensorflow.sh [--rounds R] [--epochs E] [--threads T]
#   --rounds R   pairs of runs (default 2)
#   --epochs E   passed to both sides (default: the recipe's 2.5); e.g. 0.1 for a smoke test
#   --threads T  tower's --num_threads and TensorFlow's intra-op threads (default 2)
# Needs build/bin/tower (or TOWER=...) and PyPI: tensorflow-cpu 2.21 is installed into
# build/venv-tf when missing (scripts/pyenv, the venv of cifar10_vs_tensorflow.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
ROUNDS=2
EPOCHS=""
THREADS=2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$TOWER" ]; then
  echo "$TOWER not found: build it first (make build) or set TOWER" >&2
  exit 1
fi
echo "installing tensorflow-cpu into build/venv-tf when missing (the TensorFlow peer) ..." >&2
TFPY=$(scripts/pyenv build/venv-tf tensorflow-cpu==2.21.0)
TF_PROG=bench/e2e/fashion_mnist_tensorflow.py
export TF_ENABLE_ONEDNN_OPTS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
epochs_args=()
if [ -n "$EPOCHS" ]; then epochs_args=(--epochs "$EPOCHS"); fi
now() { date +%s.%N; }

# The table, from the rounds recorded so far in $tmp/rounds.jsonl: "header", "row N" or "summary".
table() {
  python3 - "$tmp/rounds.jsonl" "$@" <<'PY'
import json, statistics, sys
path, what = sys.argv[1], sys.argv[2:]
FMT = "%-6s | %8s %8s | %8s %8s %6s | %8s %8s %6s | %7s %7s %6s"
if what[0] == "header":
    print(FMT % ("round", "tower", "TF", "tower", "TF", "ratio", "tower", "TF", "ratio",
                 "tower", "TF", "diff"))
    print(FMT % ("", "loop s", "loop s", "img/s", "img/s", "t/TF", "wall s", "wall s", "t/TF",
                 "acc", "acc", "points"))
    sys.exit()
rounds = [json.loads(l) for l in open(path)]
def cells(r):
    return ("%8.2f %8.2f | %8.0f %8.0f %6.2f | %8.1f %8.1f %6.2f" % (
        r["tower_loop"], r["tf_loop"], r["tower_ips"], r["tf_ips"], r["tower_ips"] / r["tf_ips"],
        r["tower_wall"], r["tf_wall"], r["tower_wall"] / r["tf_wall"]))
if what[0] == "row":
    r = rounds[int(what[1]) - 1]
    print("%-6s | %s | %7.4f %7.4f %+6.2f" % (what[1], cells(r), r["tower_acc"], r["tf_acc"],
                                              100 * (r["tower_acc"] - r["tf_acc"])))
    sys.exit()
med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
print("%-6s | %s | %7.4f %7.4f %+6.2f" % ("median", cells(med), med["tower_acc"], med["tf_acc"],
                                          100 * (med["tower_acc"] - med["tf_acc"])))
best = {k: (max if k.endswith("ips") else min)(r[k] for r in rounds) for k in rounds[0]}
print("%-6s | %s | %7s %7s %6s" % ("best", cells(best), "-", "-", "-"))
PY
}

# field JSON KEY
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores;" \
  "tower --num_threads $THREADS vs $("$TFPY" -c 'import importlib.metadata as m; print("tensorflow-cpu", m.version("tensorflow-cpu"))')" \
  "(intra-op $THREADS, inter-op 1, oneDNN on); epochs ${EPOCHS:-2.5 (recipe)}; $ROUNDS rounds"
table header
for round in $(seq "$ROUNDS"); do
  log=$tmp/tower-$round.log
  train_dir=$tmp/train-$round
  t0=$(now)
  if ! "$TOWER" train --train_dir "$train_dir" --num_threads "$THREADS" "${epochs_args[@]}" \
    >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  t1=$(now)
  done_line=$(grep '^done: ' "$log" || true)
  start_line=$(grep '^training ' "$log" || true)
  echo "# tower: $start_line; $done_line" >&2
  # "training lenet on ...: 2 towers (...), global batch 128, 1170 steps (468 per epoch)"
  # "done: 1170 steps in 41.3 s, test precision @ 1 = 0.9150"
  read -r batch steps < <(sed -n 's/.*global batch \([0-9]*\).*, \([0-9]*\) steps (.*/\1 \2/p' \
    <<<"$start_line") || true
  read -r done_steps done_s acc < <(sed -n \
    's/^done: \([0-9]*\) steps in \([0-9.]*\) s, test precision @ 1 = \([0-9.]*\).*/\1 \2 \3/p' \
    <<<"$done_line") || true
  if [ -z "${batch:-}" ] || [ -z "${acc:-}" ] || [ "$done_steps" != "$steps" ]; then
    echo "could not read tower's start and done lines:" >&2
    cat "$log" >&2
    exit 1
  fi
  # The loop: the wall_time of the last training step's metrics row (logged right after it).
  loop=$(python3 - "$train_dir/metrics.jsonl" "$steps" "$done_s" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = [r for r in rows if r.get("step") == int(sys.argv[2]) and "loss" in r]
print(last[-1]["wall_time"] if last else sys.argv[3])
PY
)

  t2=$(now)
  if ! p=$("$TFPY" "$TF_PROG" --threads "$THREADS" --batch_size "$batch" "${epochs_args[@]}" \
    2>"$tmp/tf.err" | tail -1); then
    cat "$tmp/tf.err" >&2
    exit 1
  fi
  t3=$(now)
  echo "# tensorflow: $p" >&2
  if [ "$(field "$p" steps)" != "$steps" ]; then
    echo "# warning: tower ran $steps steps, TensorFlow $(field "$p" steps)" >&2
  fi
  python3 - "$p" "$batch" "$steps" "$loop" "$acc" "$t0" "$t1" "$t2" "$t3" \
    >>"$tmp/rounds.jsonl" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
batch, steps, loop, acc = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
t0, t1, t2, t3 = map(float, sys.argv[6:10])
print(json.dumps({"tower_loop": loop, "tf_loop": p["loop_seconds"],
                  "tower_ips": steps * batch / loop, "tf_ips": p["images_per_sec"],
                  "tower_wall": t1 - t0, "tf_wall": t3 - t2,
                  "tower_acc": acc, "tf_acc": p["precision_at_1"]}))
PY
  table row "$round"
done
table summary
