#!/usr/bin/env bash
# A good model from a user's small photo folder: 3 classes of 600 RGB 64x64 JPEGs
# (bench/e2e/small_photos.py: the real Fashion-MNIST shirts, pullovers and coats, classes that look
# alike), resnet20 with its recipe and no other flag, for each of EPOCHS (25 60) epochs and SEEDS
# (1 2 3). With BEFORE=path/to/an/older/tower, that binary runs each case too, interleaved.
# FLAGS adds training flags to every run (e.g. FLAGS="--augmentation random-resized-crop").
# Prints a table: the train accuracy of the last log line (the mean over its window), the test
# precision @ 1 of the run's final evaluation, and the gap between them.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
BEFORE=${BEFORE:-}
FLAGS=${FLAGS:-}
EPOCHS=${EPOCHS:-25 60}
SEEDS=${SEEDS:-1 2 3}
PY=$(scripts/pyenv build/pyenv pillow numpy)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" bench/e2e/small_photos.py "$dir/photos"

echo "| epochs | seed | binary | train accuracy | test precision @ 1 | gap (points) |"
echo "|---|---|---|---|---|---|"
for epochs in $EPOCHS; do
  for seed in $SEEDS; do
    for which in ${BEFORE:+before} now; do
      binary=$TOWER
      [ "$which" = before ] && binary=$BEFORE
      # shellcheck disable=SC2086  # FLAGS holds several words
      out=$("$binary" train --model resnet20 --data "folder:$dir/photos" --epochs "$epochs" \
        --seed "$seed" --train_dir "$dir/run-$which-$epochs-$seed" $FLAGS 2>&1)
      train=$(grep -o 'train accuracy [0-9.]*%' <<<"$out" | tail -1 | grep -o '[0-9.]*')
      test=$(grep -o 'test precision @ 1 = [0-9.]*' <<<"$out" | tail -1 | grep -o '[0-9.]*$')
      awk -v e="$epochs" -v s="$seed" -v w="$which" -v a="$train" -v t="$test" \
        'BEGIN { printf "| %s | %s | %s | %.1f%% | %.1f%% | %+.1f |\n", e, s, w, a, 100 * t, 100 * t - a }'
    done
  done
done
