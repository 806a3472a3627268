#!/usr/bin/env bash
# Builds the data readers' libFuzzer targets (clang, libFuzzer + ASan) straight from the core and
# data sources, then runs each for a bounded time. Used by the CTest test `data_fuzz`.
#   usage: run_fuzzers.sh SOURCE_DIR WORK_DIR [SECONDS_PER_TARGET]
# Exits 77 (CTest's skip code here) when clang++ or the libFuzzer runtime is missing.
set -euo pipefail
src=$1
work=$2
seconds=${3:-12}
targets=(cifar_fuzz idx_fuzz npy_fuzz image_fuzz)

cxx=${TOWER_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [ -z "$cxx" ]; then
  echo "SKIP: clang++ not found; install clang-14 and libclang-rt-14-dev (scripts/install-deps)"
  exit 77
fi
mkdir -p "$work/obj" "$work/seeds"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$work/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address "$work/probe.cc" -o "$work/probe" 2> "$work/probe.log"; then
  echo "SKIP: $cxx cannot link libFuzzer (install libclang-rt-14-dev):"
  cat "$work/probe.log"
  exit 77
fi

sources=("$src"/src/tower/core/*.cc "$src"/src/tower/data/*.cc)
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I"$src/src")
# Rebuild only when a source, header, this script or the compiler changed.
stamp=$(cat "$src"/src/tower/core/* "$src"/src/tower/data/* "$src"/tests/fuzz/* | sha256sum | cut -c1-16)
stamp="$stamp $("$cxx" --version | head -1)"
if [ "$(cat "$work/stamp" 2>/dev/null)" != "$stamp" ] || ! ls "${targets[@]/#/$work/}" > /dev/null 2>&1; then
  echo "building fuzz targets with $cxx"
  rm -f "$work"/obj/*.o "$work/stamp"
  export cxx work
  printf '%s\n' "${sources[@]}" | xargs -P 2 -I{} sh -c \
    'f={}; o="$work/obj/$(basename $(dirname $f))_$(basename ${f%.cc}).o"; '"$(printf '%q ' "$cxx" "${flags[@]}")"' -fsanitize=fuzzer-no-link,address -c "$f" -o "$o"'
  for t in "${targets[@]}"; do
    "$cxx" "${flags[@]}" -fsanitize=fuzzer,address "$src/tests/fuzz/$t.cc" "$work"/obj/*.o \
      -lfmt -lz -lturbojpeg -lspng -lpthread -ldl -o "$work/$t"
  done
  echo "$stamp" > "$work/stamp"
fi

# Seeds: small valid inputs, so the fuzzer starts past the magic numbers and sizes.
mkdir -p "$work/seeds/cifar_fuzz" "$work/seeds/idx_fuzz" "$work/seeds/npy_fuzz" "$work/seeds/image_fuzz"
record() { printf "$1"; head -c 3072 /dev/zero | tr '\0' '\7'; }
record '\003' > "$work/seeds/cifar_fuzz/cifar10_one"
{ record '\001\011'; record '\023\143'; } > "$work/seeds/cifar_fuzz/cifar100_two"
idx_images() { printf '\000\000\010\003\000\000\000\002\000\000\000\002\000\000\000\003\001\002\003\004\005\006\007\010\011\012\013\014'; }
idx_labels() { printf '\000\000\010\001\000\000\000\002\003\011'; }
{ printf '\000\000\034'; idx_images; idx_labels; } > "$work/seeds/idx_fuzz/plain"
idx_images | gzip -n > "$work/images.gz"
n=$(stat -c %s "$work/images.gz")
{ printf '\003'; printf "$(printf '\\%03o\\%03o' $((n >> 8)) $((n & 255)))"; cat "$work/images.gz";
  idx_labels | gzip -n; } > "$work/seeds/idx_fuzz/gzip"

# A .npy of 2x3 uint8, and a 2x2 grey PNG and 2x2 JPEG (made by this script's own bytes).
{ printf '\223NUMPY\001\000\166\000'
  printf "%-117s\n" "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }"
  printf '\001\002\003\004\005\006'; } > "$work/seeds/npy_fuzz/u8"
printf '\045\211PNG\r\n\032\n\000\000\000\rIHDR\000\000\000\002\000\000\000\002\010\000\000\000\000\127\335\122\370\000\000\000\016IDATx\234c\140\140\140\140\000\000\000\005\000\001\245\366\105\100\000\000\000\000IEND\256B\140\202' > "$work/seeds/image_fuzz/png"
status=0
for t in "${targets[@]}"; do
  corpus="$work/corpus_$t"
  mkdir -p "$corpus"
  echo "running $t for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 "$work/$t" -max_total_time="$seconds" -max_len=8192 \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/${t}_" \
      "$corpus" "$work/seeds/$t" > "$work/$t.log" 2>&1; then
    echo "FAIL: $t found a problem; see $work/$t.log and the ${t}_* artifacts:"
    tail -40 "$work/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_runs|cov:" "$work/$t.log" | tail -2
  fi
done
exit $status
