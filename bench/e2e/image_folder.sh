#!/usr/bin/env bash
# Own data at speed (docs/data.md): a folder of 50,000 32x32 PNGs (and the same as JPEGs) made
# from a CIFAR-10-format set, against the same images as CIFAR's binary files.
#   1. decode throughput: tower's first epoch (decode + cache, all cores) against Pillow (one
#      process per core) on the same files, and libjpeg-turbo's own tjbench on one of the JPEGs;
#   2. cached epochs: cifar10 training images/s on folder:DIR against cifar10:DIR, interleaved;
#   3. the share of the step spent waiting for the input (from a --trace of 40 steps).
# NUM=... sets the number of images (50000); STEPS=... the training steps per run (150).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
NUM=${NUM:-50000}
STEPS=${STEPS:-150}
threads=$(nproc)
PY=$(scripts/pyenv build/pyenv pillow numpy)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

$TOWER make-dataset --format cifar10 --out "$dir/bin" --num_train "$NUM" --num_test 1000 --seed 1 >/dev/null
# The binary records as image files: train/<class>/<i>.png and test/..., and a JPEG copy.
"$PY" - "$dir" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
for split, files in (("train", [f"data_batch_{i}.bin" for i in range(1, 6)]), ("test", ["test_batch.bin"])):
    raw = np.concatenate([np.fromfile(os.path.join(root, "bin", f), dtype=np.uint8) for f in files])
    rec = raw.reshape(-1, 3073)
    for i, r in enumerate(rec):
        img = Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0))
        for kind, ext in (("png", "png"), ("jpg", "jpg")):
            d = os.path.join(root, kind, split, f"class{r[0]}")
            os.makedirs(d, exist_ok=True)
            img.save(os.path.join(d, f"{i:05d}.{ext}"), **({"quality": 90} if ext == "jpg" else {}))
PY

echo "## 1. decode throughput, $NUM train images of 32x32 ($threads threads)"
decode_tower() {  # images/s of tower's first epoch: (run with decoding) - (run from the cache)
  local kind=$1 t0 t1 t2
  rm -rf "$dir/$kind/.tower-cache"
  t0=$(date +%s.%N)
  $TOWER train --model cifar10 --data "folder:$dir/$kind" --max_steps 1 --train_dir "$dir/t_$kind" >/dev/null 2>&1
  t1=$(date +%s.%N)
  rm -rf "$dir/t_$kind"
  $TOWER train --model cifar10 --data "folder:$dir/$kind" --max_steps 1 --train_dir "$dir/t_$kind" >/dev/null 2>&1
  t2=$(date +%s.%N)
  rm -rf "$dir/t_$kind"
  python3 -c "n=$NUM+1000; d=($t1-$t0)-($t2-$t1); print('%.0f' % (n/d))"
}
decode_pillow() {  # images/s of Pillow decoding the same files, one process per core
  "$PY" - "$dir/$1" "$threads" <<'PY'
import glob, multiprocessing, sys, time
from PIL import Image
files = sorted(glob.glob(sys.argv[1] + "/*/*/*.*"))
def work(chunk):
    for f in chunk:
        with Image.open(f) as im:
            im.convert("RGB").load()
n = int(sys.argv[2])
chunks = [files[i::n] for i in range(n)]
t = time.time()
with multiprocessing.Pool(n) as pool:
    pool.map(work, chunks)
print("%.0f" % (len(files) / (time.time() - t)))
PY
}
printf "%-6s %14s %14s %8s\n" format tower Pillow ratio
for kind in png jpg; do
  a=$(decode_tower $kind); b=$(decode_pillow $kind)
  python3 -c "print('%-6s %14s %14s %7.2fx' % ('$kind', '$a img/s', '$b img/s', $a/$b))"
done
if command -v tjbench >/dev/null || { apt-get install -y -qq libjpeg-turbo-progs >/dev/null 2>&1 && command -v tjbench >/dev/null; }; then
  jpegs=("$dir"/jpg/train/class0/*.jpg)
  one=${jpegs[0]}
  tj=$(cd "$dir" && tjbench "$one" -quiet -benchtime 2 2>/dev/null | awk 'NF>0 {line=$0} END {print line}')
  python3 - "$tj" "$threads" <<'PY'
import sys
# tjbench -quiet prints: format subsamp qual width height comp_perf comp_ratio decomp_perf (Mpixels/s)
cols = sys.argv[1].split()
mp = float(cols[-1])
print("tjbench (libjpeg-turbo itself, one core, one 32x32 JPEG in memory): %.1f Mpixel/s = %.0f img/s; x %s cores = %.0f img/s"
      % (mp, mp * 1e6 / 1024, sys.argv[2], mp * 1e6 / 1024 * int(sys.argv[2])))
PY
fi

echo
echo "## 2. cached epochs: cifar10 training images/s, $STEPS steps, folder:DIR / cifar10:DIR (interleaved)"
ips() {  # the mean of the log lines' examples/sec after the first
  $TOWER train --model cifar10 --data "$1" --max_steps "$STEPS" --log_every 25 --train_dir "$dir/t" \
    2>&1 | grep -o '([0-9.]* examples/sec' | tail -n +2 | tr -d '(' | awk '{s+=$1; n++} END {printf "%.0f", s/n}'
  rm -rf "$dir/t"
}
$TOWER train --model cifar10 --data "folder:$dir/png" --max_steps 1 --train_dir "$dir/t" >/dev/null 2>&1; rm -rf "$dir/t"
for round in 1 2 3; do
  f=$(ips "folder:$dir/png"); b=$(ips "cifar10:$dir/bin")
  python3 -c "print('round $round: folder %s, binary %s images/s: %.3fx' % ($f, $b, $f/$b))"
done

echo
echo "## 3. input wait as a share of the step (folder:DIR, 40 traced steps)"
$TOWER train --model cifar10 --data "folder:$dir/png" --max_steps 41 --train_dir "$dir/t" \
  --trace "$dir/trace.json" --trace_steps 40 >/dev/null 2>&1
python3 - "$dir/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
main = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("input", "step", "hooks")]
wait = sum(e["dur"] for e in main if e["name"] == "wait for a batch")
total = sum(e["dur"] for e in main)
print("waiting for a batch: %.2f ms of %.1f ms of the main loop = %.2f%%" % (wait / 1e3, total / 1e3, 100 * wait / max(total, 1)))
PY
