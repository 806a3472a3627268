#!/usr/bin/env bash
# From image files to classes (docs/export.md): `tower predict` on a folder of PNGs against the
# model that `tower export` wrote, run by ONNX Runtime from Python (Pillow decodes the same files),
# at batch 1 and 128, the same number of threads for both, interleaved for R rounds.
#   tower:  the wall time of the command (process start, checkpoint, decode, batches, printing);
#           `tower predict` of one image measures the fixed start-up cost, reported apart and
#           subtracted for the "less start-up" column.
#   ORT:    the wall time of the Python process (interpreter, imports, session creation, ...), the
#           decode + run loop timed inside Python (Pillow decode, channels and size as tower
#           brings them, stacking, session.run, printing), and session.run alone.
# ORT runs with its default session options (its threads spin while they wait) but
# intra_op_num_threads = --threads and inter_op_num_threads = 1; tower's threads spin briefly,
# then sleep, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is in the environment (README). Both print the top class of every
# image; the script counts the images where the two differ (a near tie may; normally none).
#
# usage: bench/e2e/predict_vs_onnxruntime.sh [--train_dir DIR] [--images N] [--rounds R]
#                                            [--threads T]
#   --train_dir  a trained run to use (default: lenet trained for 100 steps on Fashion-MNIST)
#   --images     test images written as PNG files (default 2000, from Fashion-MNIST's test set)
#   --rounds     rounds of interleaved runs (default 3)
#   --threads    tower's --num_threads and ORT's intra_op_num_threads (default 2)
# TOWER=... sets the binary; FASHION_MNIST=... the folder of the IDX files.
set -euo pipefail
train_dir="" images=2000 rounds=3 threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --train_dir) train_dir=$(cd "$2" && pwd); shift 2 ;;
    --images) images=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.."
TOWER=${TOWER:-build/bin/tower}
FASHION_MNIST=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$TOWER" ]; then
  echo "$TOWER not found: build it first (make) or set TOWER" >&2
  exit 1
fi
PY=$(scripts/pyenv build/pyenv numpy pillow onnxruntime)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

if [ -z "$train_dir" ]; then
  train_dir=$dir/train
  echo "training lenet for 100 steps into a temporary folder ..." >&2
  $TOWER train --model lenet --max_steps 100 --num_threads "$threads" --train_dir "$train_dir" \
    >"$dir/train.log" 2>&1 || { cat "$dir/train.log" >&2; exit 1; }
fi
$TOWER export --train_dir "$train_dir" --out "$dir/model.onnx" >&2

# The first N test images of Fashion-MNIST as PNG files, and one more folder with a single image.
"$PY" - "$FASHION_MNIST" "$images" "$dir/png" "$dir/one" <<'PY'
import gzip, os, sys
import numpy as np
from PIL import Image
folder, n, out, one = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
path = os.path.join(folder, "t10k-images-idx3-ubyte")
gz = os.path.exists(path + ".gz")
with (gzip.open(path + ".gz", "rb") if gz else open(path, "rb")) as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
if n > len(x):
    sys.exit("--images %d: the test set has %d images" % (n, len(x)))
os.makedirs(out)
os.makedirs(one)
for i in range(n):
    Image.fromarray(x[i]).save(os.path.join(out, "%05d.png" % i))
Image.fromarray(x[0]).save(os.path.join(one, "00000.png"))
PY

# The ONNX Runtime peer: prints "file: class probability" per image, then one JSON line of times.
cat >"$dir/ort.py" <<'PY'
import glob, json, os, sys, time
t_process = time.perf_counter()
import numpy as np
import onnxruntime as ort
from PIL import Image

model, folder, batch, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
classes = json.loads(session.get_modelmeta().custom_metadata_map["classes"])
_, height, width, channels = session.get_inputs()[0].shape
files = sorted(glob.glob(os.path.join(folder, "**", "*.png"), recursive=True))

def load(path):  # as tower predict: channels converted, shorter side fitted, centre cropped
    image = Image.open(path).convert("L" if channels == 1 else "RGB")
    if image.size != (width, height):
        scale = max(width / image.width, height / image.height)
        size = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
        image = image.resize(size, Image.BILINEAR)
        left, top = (size[0] - width) // 2, (size[1] - height) // 2
        image = image.crop((left, top, left + width, top + height))
    return np.asarray(image, dtype=np.uint8).reshape(height, width, channels)

out = sys.stdout
run_s = 0.0
t0 = time.perf_counter()
for start in range(0, len(files), batch):
    chunk = files[start:start + batch]
    images = np.stack([load(f) for f in chunk])
    t = time.perf_counter()
    probabilities = session.run(["probabilities"], {"images": images})[0]
    run_s += time.perf_counter() - t
    for f, p in zip(chunk, probabilities):
        c = int(p.argmax())
        out.write("%s: %s %.4f\n" % (f, classes[c], p[c]))
loop_s = time.perf_counter() - t0
out.flush()
print(json.dumps({"images": len(files), "loop_s": loop_s, "run_s": run_s,
                  "in_process_s": time.perf_counter() - t_process, "ort": ort.__version__}),
      file=sys.stderr)
PY

now() { date +%s.%N; }
# Runs the command with its stdout into $1 and prints its wall time in seconds.
timed() {
  local into=$1 t0 t1
  shift
  t0=$(now)
  "$@" >"$into"
  t1=$(now)
  python3 -c "print($t1 - $t0)"
}
tower_run() {  # BATCH FOLDER OUT: wall seconds
  timed "$3" $TOWER predict --train_dir "$train_dir" --top_k 1 --batch_size "$1" \
    --num_threads "$threads" "$2"
}
ort_run() {  # BATCH OUT: wall seconds; the JSON of times in OUT.json
  timed "$2" "$PY" "$dir/ort.py" "$dir/model.onnx" "$dir/png" "$1" "$threads" 2>"$2.json" ||
    { cat "$2.json" >&2; exit 1; }
}

# One warm-up of each (page cache, first loads of the libraries), not counted.
tower_run 128 "$dir/png" "$dir/warm.txt" >/dev/null
ort_run 128 "$dir/warm_ort.txt" >/dev/null

: >"$dir/results"
for round in $(seq "$rounds"); do
  start=$(tower_run 1 "$dir/one" "$dir/one.txt")
  for batch in 1 128; do
    t=$(tower_run "$batch" "$dir/png" "$dir/tower_$batch.txt")
    o=$(ort_run "$batch" "$dir/ort_$batch.txt")
    echo "$round $batch $start $t $o $(cat "$dir/ort_$batch.txt.json")" >>"$dir/results"
  done
done

python3 - "$dir" "$images" "$threads" "$train_dir" <<'PY'
import json, statistics, sys
folder, n, threads, train_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = []
for line in open(folder + "/results"):
    round_, batch, start, tower_s, ort_s, js = line.split(" ", 5)
    j = json.loads(js)
    rows.append(dict(round=int(round_), batch=int(batch), start=float(start), tower=float(tower_s),
                     ort=float(ort_s), loop=j["loop_s"], run=j["run_s"], version=j["ort"]))

differ = {}
def top1(path):
    out = {}
    for line in open(path):
        f, rest = line.rsplit(": ", 1)
        out[f.rsplit("/", 1)[-1]] = rest.rsplit(" ", 1)[0]
    return out
for b in (1, 128):
    t, o = top1("%s/tower_%d.txt" % (folder, b)), top1("%s/ort_%d.txt" % (folder, b))
    if len(t) != n or len(o) != n:
        sys.exit("batch %d: tower printed %d images, ORT %d, of %d" % (b, len(t), len(o), n))
    differ[b] = sum(t[k] != v for k, v in o.items())

print("%d PNG images of 28x28 from files to classes, threads %s, ONNX Runtime %s (%s)" %
      (n, threads, rows[0]["version"], train_dir))
print("images/s; tower: wall of the command, and less its start-up (one-image run); ORT: wall of")
print("the Python process, its decode+run loop, session.run alone; ratio = tower / ORT")
head = "%5s %5s %9s %10s %10s %10s %10s %10s %11s %11s"
print(head % ("round", "batch", "start_s", "tower", "tower-st", "ort_wall", "ort_loop", "ort_run",
              "wall ratio", "loop ratio"))
def line(label, batch, start, tower, ort, loop, run):
    net = tower - start  # not positive when the run is too short for the noise
    print("%5s %5d %9.3f %10.0f %10s %10.0f %10.0f %10.0f %10.2fx %11s" % (
        label, batch, start, n / tower, "%.0f" % (n / net) if net > 0 else "-", n / ort, n / loop,
        n / run, ort / tower, "%.2fx" % (loop / net) if net > 0 else "-"))
for r in rows:
    line(r["round"], r["batch"], r["start"], r["tower"], r["ort"], r["loop"], r["run"])
if len(rows) > 2:
    for b in (1, 128):
        m = [r for r in rows if r["batch"] == b]
        med = lambda k: statistics.median(r[k] for r in m)
        line("med", b, med("start"), med("tower"), med("ort"), med("loop"), med("run"))
print("top-1 classes that differ between tower and ORT (last round): %d at batch 1, %d at batch 128"
      % (differ[1], differ[128]))
PY
