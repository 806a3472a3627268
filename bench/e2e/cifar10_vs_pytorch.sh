#!/usr/bin/env bash
# End-to-end benchmark (issue: engine performance): the cifar10 model at batch 128 on 24x24x3,
# training (forward + backward + SGD) and inference, 1 and 2 threads, tower vs PyTorch measured in
# the same run. Prints each JSON line and the ratios. Needs build/bin/tower and Debian's
# python3-torch (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
PY=/usr/bin/python3
if ! $PY -c "import torch" 2>/dev/null; then
  echo "installing python3-torch (the PyTorch peer) ..."
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -qq python3-torch >/dev/null
fi
field() { $PY -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }
printf "%-6s %-7s %14s %14s %7s %10s %10s\n" mode threads tower_img/s torch_img/s ratio tower_MB torch_MB
for mode in train infer; do
  for threads in 1 2; do
    t=$($TOWER bench --model cifar10 --global_batch_size 128 --threads $threads --mode $mode | tail -1)
    p=$($PY bench/e2e/cifar10_pytorch.py --threads $threads --mode $mode | tail -1)
    echo "# tower:   $t" >&2
    echo "# pytorch: $p" >&2
    ti=$(field "$t" images_per_sec); pi=$(field "$p" images_per_sec)
    printf "%-6s %-7s %14.1f %14.1f %7.2f %10.0f %10.0f\n" $mode $threads $ti $pi \
      "$($PY -c "print($ti/$pi)")" "$(field "$t" peak_rss_mb)" "$(field "$p" peak_rss_mb)"
    if [ $mode = train ]; then
      g=$(field "$t" gflops)
      echo "#   tower achieved $(printf %.1f $g) GFLOP/s = $($PY -c "print(round(100*$g/(245*$threads),1))")% of the ${threads}-core fp32 FMA peak (~245 GFLOP/s per core)" >&2
    fi
  done
done
