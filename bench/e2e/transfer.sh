#!/usr/bin/env bash
# Transfer pays: resnet20 pretrained on 5 classes of the real Fashion-MNIST (all 30,000 training
# images, PRE_EPOCHS epochs), then trained on the other 5 with PER_CLASS images each (a small
# set) for STEPS steps, from scratch and with --init_from (all layers; the backbone frozen; frozen
# then thawed halfway), each with its recipe otherwise, for each of SEEDS. Prints the test
# precision @ 1 on the 5,000 test images of those classes, and the training speed of the fine-tune
# runs (examples/sec of the last log line: a frozen backbone's backward pass is pruned).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
PER_CLASS=${PER_CLASS:-100}
PRE_EPOCHS=${PRE_EPOCHS:-3}
STEPS=${STEPS:-300}
SEEDS=${SEEDS:-1 2 3}
PY=$(scripts/pyenv build/pyenv numpy)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" bench/e2e/transfer.py "$dir" "$PER_CLASS"
common=(--model resnet20 --batch_size 32 --log_every 50)
"$TOWER" train "${common[@]}" --data "npy:$dir/pre" --epochs "$PRE_EPOCHS" \
  --train_dir "$dir/pre-run" | grep -E "^training|precision"

half=$(python3 -c "print($STEPS / 2 / ($PER_CLASS * 5 / 64))")
echo "| seed | start | test precision @ 1 | examples/sec (last log line) |"
echo "|---|---|---|---|"
for seed in $SEEDS; do
  for how in scratch init freeze thaw; do
    flags=()
    case $how in
      init) flags=(--init_from "$dir/pre-run") ;;
      freeze) flags=(--init_from "$dir/pre-run" --freeze backbone) ;;
      thaw) flags=(--init_from "$dir/pre-run" --freeze backbone --unfreeze_after_epochs "$half") ;;
    esac
    out=$("$TOWER" train "${common[@]}" --data "npy:$dir/fine" --max_steps "$STEPS" \
      --seed "$seed" --train_dir "$dir/$how-$seed" "${flags[@]}" 2>&1)
    test=$(grep -o 'test precision @ 1 = [0-9.]*' <<<"$out" | tail -1 | grep -o '[0-9.]*$')
    speed=$(grep -o '([0-9.]* examples/sec' <<<"$out" | tail -1 | grep -o '[0-9.]*')
    awk -v s="$seed" -v h="$how" -v t="$test" -v v="$speed" \
      'BEGIN { printf "| %s | %s | %.1f%% | %.0f |\n", s, h, 100 * t, v }'
  done
done
