// The machine's memory bandwidth in GB/s, measured as STREAM's triad (a = b + s * c over float
// arrays far larger than the caches, 12 bytes per element as STREAM counts them), on THREADS
// threads (OpenMP), best of 10 runs. Used by depthwise_bandwidth.sh; build with
// cc -O2 -march=native -fopenmp.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  const long n = 64L << 20;  // 256 MB per array
  float* a = malloc(n * sizeof(float));
  float* b = malloc(n * sizeof(float));
  float* c = malloc(n * sizeof(float));
  if (!a || !b || !c) return 1;
#pragma omp parallel for
  for (long i = 0; i < n; ++i) a[i] = 0, b[i] = 1, c[i] = 2;  // first touch by the same threads
  double best = 1e30;
  for (int run = 0; run < 10; ++run) {
    const double start = now();
#pragma omp parallel for
    for (long i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
    const double s = now() - start;
    if (s < best) best = s;
  }
  printf("%.1f\n", 12.0 * (double)n / best / 1e9 + 0 * a[n / 2]);
  free(a), free(b), free(c);
  return 0;
}
