// A C model of GPT-2 small's decode matvecs: how fast the layers' 48 weight matrices (324 MiB of
// float32) can be streamed, against a plain sum of the same bytes. It is a yardstick for the
// compiled code, not part of the project: the inner loop is the one the compiler emits for a
// one-row packed matmul (two 32-wide panels per register tile: docs/PERFORMANCE.md, "Decode over
// two weight panels at once"), in one OpenMP region per matrix as the compiled step has.
//
//   gcc -O3 -march=native -fopenmp tools/bench/c_models/decode_matvecs.c -o /tmp/decode_matvecs
//   /tmp/decode_matvecs matvecs whole    # weights wholly in 2 MiB-advised ranges (WeightArena.h)
//   /tmp/decode_matvecs matvecs tails    # each matrix's tail past its last 2 MiB in small pages
//   /tmp/decode_matvecs sum whole        # the plain sum: the most memory gives
//   gcc -O3 -march=native -fopenmp -DYMM tools/bench/c_models/decode_matvecs.c -o /tmp/decode_matvecs_ymm
//   /tmp/decode_matvecs_ymm matvecs whole  # the matvecs in 256-bit registers
//
// Prints the median and best of 30 passes over all 48 matrices, on 2 threads (OMP_NUM_THREADS).
// Needs AVX-512F.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { kHugePage = 2 << 20, kPanel = 32, kLayers = 12, kMatrices = 4 * kLayers, kPasses = 30 };

typedef struct {
  int rows, cols; // K and N: N / 32 panels of K x 32 floats, each contiguous
  float *panels;
} Matrix;

static float x[4096] __attribute__((aligned(64)));
static float y[4096] __attribute__((aligned(64)));

// One allocation per matrix on a 2 MiB boundary, as the runtime made them before WeightArena.h:
// `tails` advises only the whole 2 MiB ranges, the way those allocations did.
static float *allocate(size_t count, int tails) {
  size_t bytes = count * sizeof(float), rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  float *data = aligned_alloc(kHugePage, rounded);
  madvise(data, tails ? bytes / kHugePage * kHugePage : rounded, MADV_HUGEPAGE);
  for (size_t i = 0; i < count; ++i) data[i] = (float)(i % 7) * 0.01f;
  return data;
}

// y[p*32 .. p*32+64) = x . panels p and p+1, summed along K: four zmm accumulators, or with
// -DYMM eight ymm ones (the same loop in 256-bit registers, as decode of float32 weights is
// compiled for AVX-512 targets: ModelCompiler.cpp).
static void twoPanels(const Matrix *m, int p) {
  const float *a = m->panels + (size_t)p * m->rows * kPanel, *b = a + (size_t)m->rows * kPanel;
#ifdef YMM
  __m256 c[8];
  for (int j = 0; j < 8; ++j) c[j] = _mm256_setzero_ps();
  for (int k = 0; k < m->rows; ++k) {
    __m256 xk = _mm256_set1_ps(x[k]);
    for (int j = 0; j < 4; ++j) c[j] = _mm256_fmadd_ps(_mm256_load_ps(a + k * kPanel + 8 * j), xk, c[j]);
    for (int j = 0; j < 4; ++j) c[4 + j] = _mm256_fmadd_ps(_mm256_load_ps(b + k * kPanel + 8 * j), xk, c[4 + j]);
  }
  for (int j = 0; j < 8; ++j) _mm256_store_ps(y + p * kPanel + 8 * j, c[j]);
#else
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (int k = 0; k < m->rows; ++k) {
    __m512 xk = _mm512_set1_ps(x[k]);
    c0 = _mm512_fmadd_ps(_mm512_load_ps(a + k * kPanel), xk, c0);
    c1 = _mm512_fmadd_ps(_mm512_load_ps(a + k * kPanel + 16), xk, c1);
    c2 = _mm512_fmadd_ps(_mm512_load_ps(b + k * kPanel), xk, c2);
    c3 = _mm512_fmadd_ps(_mm512_load_ps(b + k * kPanel + 16), xk, c3);
  }
  _mm512_store_ps(y + p * kPanel, c0);
  _mm512_store_ps(y + p * kPanel + 16, c1);
  _mm512_store_ps(y + p * kPanel + 32, c2);
  _mm512_store_ps(y + p * kPanel + 48, c3);
#endif
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int ascending(const void *a, const void *b) {
  double d = *(const double *)a - *(const double *)b;
  return d < 0 ? -1 : d > 0;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "matvecs") && strcmp(argv[1], "sum")) ||
      (strcmp(argv[2], "whole") && strcmp(argv[2], "tails"))) {
    fprintf(stderr, "usage: %s matvecs|sum whole|tails\n", argv[0]);
    return 2;
  }
  const int sum = !strcmp(argv[1], "sum"), tails = !strcmp(argv[2], "tails");
  // Per layer: c_attn [768, 2304], attn.c_proj [768, 768], c_fc [768, 3072], mlp.c_proj [3072, 768].
  const int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  Matrix m[kMatrices];
  size_t total = 0;
  for (int i = 0; i < kMatrices; ++i) {
    m[i].rows = shapes[i % 4][0];
    m[i].cols = shapes[i % 4][1];
    m[i].panels = allocate((size_t)m[i].rows * m[i].cols, tails);
    total += (size_t)m[i].rows * m[i].cols * sizeof(float);
  }
  for (int i = 0; i < 4096; ++i) x[i] = 0.001f * i;
  double times[kPasses], checksum = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    double start = seconds();
    for (int i = 0; i < kMatrices; ++i) {
      if (sum) {
        double partial = 0;
        const size_t lines = (size_t)m[i].rows * m[i].cols / 16; // 64-byte lines, a multiple of 4
#pragma omp parallel reduction(+ : partial)
        {
          const size_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
          const float *data = m[i].panels;
          __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
          for (size_t line = lines / 4 * thread / threads * 4; line < lines / 4 * (thread + 1) / threads * 4; line += 4) {
            s0 = _mm512_add_ps(s0, _mm512_load_ps(data + line * 16));
            s1 = _mm512_add_ps(s1, _mm512_load_ps(data + line * 16 + 16));
            s2 = _mm512_add_ps(s2, _mm512_load_ps(data + line * 16 + 32));
            s3 = _mm512_add_ps(s3, _mm512_load_ps(data + line * 16 + 48));
          }
          partial += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
        }
        checksum += partial;
      } else {
        // Each thread takes a contiguous run of panel pairs, as the compiled step's chunks do.
#pragma omp parallel for schedule(static)
        for (int pair = 0; pair < m[i].cols / (2 * kPanel); ++pair) twoPanels(&m[i], 2 * pair);
        x[0] += y[1] * 1e-9f; // the next matrix depends on this one
      }
    }
    times[pass] = seconds() - start;
  }
  qsort(times, kPasses, sizeof(double), ascending);
  printf("%s, %s: median %.3f ms, best %.3f ms, %.1f GB/s at the median (%zu MiB, %d threads, checksum %g)\n",
         argv[1], tails ? "tails in small pages" : "whole in huge pages", times[kPasses / 2] * 1e3, times[0] * 1e3,
         total / times[kPasses / 2] / 1e9, total >> 20, omp_get_max_threads(), checksum + y[0]);
  return 0;
}
