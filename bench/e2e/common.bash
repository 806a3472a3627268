# Shared by the peer benchmarks of bench/e2e (sourced, from the repository root; not a benchmark
# itself, so not *.sh: scripts/bench-all runs those).

# PEAK_FP32 and PEAK_BF16, GFLOP/s per core: fp32 = one core's measured FMA throughput
# (fma_peak.c, built with -march=native, or with -mavx2 -mfma under an AVX2 cap:
# TOWER_MAX_CPU_ISA=avx2 or ONEDNN_MAX_CPU_ISA=AVX2) or PEAK_FP32_GFLOPS_PER_CORE; bf16 = 2 x
# fp32 where the CPU has AVX512_BF16 and no cap hides it, else 0, or PEAK_BF16_GFLOPS_PER_CORE.
measure_peaks() {
  mkdir -p build/bench
  local arch=-march=native avx2_cap=0
  if [ "${TOWER_MAX_CPU_ISA:-}" = avx2 ] || [[ "${ONEDNN_MAX_CPU_ISA:-}" == AVX2* ]]; then
    arch="-mavx2 -mfma"
    avx2_cap=1
  fi
  # shellcheck disable=SC2086  # (two flags)
  cc -O2 $arch bench/e2e/fma_peak.c -o build/bench/fma_peak
  PEAK_FP32=${PEAK_FP32_GFLOPS_PER_CORE:-$(build/bench/fma_peak)}
  if [ -n "${PEAK_BF16_GFLOPS_PER_CORE:-}" ]; then
    PEAK_BF16=$PEAK_BF16_GFLOPS_PER_CORE
  elif [ "$avx2_cap" = 0 ] && grep -qw avx512_bf16 /proc/cpuinfo; then
    PEAK_BF16=$(python3 -c "print(2 * $PEAK_FP32)")
  else
    PEAK_BF16=0  # no bf16 arithmetic on this CPU
  fi
}

# A shell busy loop (one core's worth of load) while the pairs of a "busy" row run.
busy_pid=""
start_busy() {
  (while :; do :; done) &
  busy_pid=$!
}
stop_busy() {
  if [ -n "$busy_pid" ]; then
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true
    busy_pid=""
  fi
}

# best FILE...: of the JSON lines in the files, the one with the most images_per_sec.
best() {
  python3 -c 'import json, sys
lines = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip()]
print(json.dumps(max(lines, key=lambda d: d["images_per_sec"])))' "$@"
}
