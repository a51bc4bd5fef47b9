// A C model of the 4-bit formats' decode inner loop: what bounds a core streaming q4 weight lanes
// through vpdpbusd. It is a yardstick for the compiled code, not part of the project. Each 64-byte
// lane (16 columns, 8 codes each) gives its low and its high nibbles, each multiplied with an
// activation lane by vpdpbusd, as the compiled q4_0 / q4_1 / q4_k matmuls do.
//
//   gcc -O2 -mavx512f -mavx512bw -mavx512vnni -mgfni -pthread \
//       tools/bench/c_models/q4_lane_stream.c -o /tmp/q4_lane_stream
//   /tmp/q4_lane_stream lane shift     # 1 MiB of lanes from L2, the high nibbles by a shift and a mask
//   /tmp/q4_lane_stream lane gfni      # the same with one vgf2p8affineqb a lane
//   /tmp/q4_lane_stream stream 1 0     # 1 GiB of lanes from memory, 1 thread, no software prefetch
//   /tmp/q4_lane_stream stream 1 4096  # prefetcht0 4 KiB ahead of each 1 KiB step
//   /tmp/q4_lane_stream stream 2 0     # 2 threads, each half of the GiB
//
// `lane` prints the best of 20 passes in ns a lane; `stream` the best of 4 passes in GB/s. Needs
// AVX-512 VNNI (and GFNI for `lane gfni`).
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The affine matrix of y = x >> 4 in each byte: result bit i (i < 4) is input bit i + 4.
static __m512i shift4Matrix(void) {
  unsigned long long matrix = 0;
  for (int i = 0; i < 4; ++i) matrix |= (unsigned long long)(1u << (i + 4)) << (8 * (7 - i));
  return _mm512_set1_epi64((long long)matrix);
}

static double lanes(int gfni) {
  const size_t count = 16384; // 1 MiB of lanes: in L2
  __m512i *w = aligned_alloc(64, count * 64);
  for (size_t i = 0; i < count * 16; ++i) ((int *)w)[i] = rand();
  const __m512i x0 = _mm512_set1_epi32(0x01020304), x1 = _mm512_set1_epi32(0x05060708);
  const __m512i nibbles = _mm512_set1_epi32(0x0F0F0F0F), matrix = shift4Matrix();
  __m512i acc[8] = {0};
  double best = 1e9;
  for (int pass = 0; pass < 20; ++pass) {
    const double start = now();
    for (size_t i = 0; i < count; i += 8)
      for (int j = 0; j < 8; ++j) {
        const __m512i v = _mm512_load_si512(&w[i + j]);
        const __m512i low = _mm512_and_si512(v, nibbles);
        const __m512i high =
            gfni ? _mm512_gf2p8affine_epi64_epi8(v, matrix, 0) : _mm512_and_si512(_mm512_srli_epi32(v, 4), nibbles);
        acc[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[j], low, x0), high, x1);
      }
    const double seconds = now() - start;
    if (seconds < best) best = seconds;
  }
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += _mm512_reduce_add_epi32(acc[j]);
  if (sum == 42) printf("(%d)\n", sum); // keeps the sums
  free(w);
  return best / count * 1e9;
}

static char *buffer;
static size_t bufferBytes = (size_t)1 << 30;
static int prefetchBytes;

struct Part {
  size_t first, end;
  float result;
};

// 1 KiB steps (16 lanes) of q4 dots, each step's sums scaled into float accumulators once.
static void *streamPart(void *argument) {
  struct Part *part = argument;
  const __m512i x = _mm512_set1_epi32(0x01020304), nibbles = _mm512_set1_epi32(0x0F0F0F0F);
  const __m512 scale = _mm512_set1_ps(1.0001f);
  __m512 out[4] = {0};
  for (size_t offset = part->first; offset < part->end; offset += 1024) {
    if (prefetchBytes)
      for (int line = 0; line < 16; ++line) _mm_prefetch(buffer + offset + prefetchBytes + 64 * line, _MM_HINT_T0);
    __m512i sums[4] = {0};
    for (int j = 0; j < 16; ++j) {
      const __m512i v = _mm512_load_si512(buffer + offset + 64 * j);
      const int q = j & 3;
      sums[q] = _mm512_dpbusd_epi32(sums[q], _mm512_and_si512(v, nibbles), x);
      sums[q] = _mm512_dpbusd_epi32(sums[q], _mm512_and_si512(_mm512_srli_epi32(v, 4), nibbles), x);
    }
    for (int q = 0; q < 4; ++q) out[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[q]), scale, out[q]);
  }
  part->result = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(out[0], out[1]), _mm512_add_ps(out[2], out[3])));
  return NULL;
}

static double stream(int threads) {
  buffer = aligned_alloc(4096, bufferBytes + 65536);
  memset(buffer, 1, bufferBytes + 65536);
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    pthread_t ids[8];
    struct Part parts[8];
    const double start = now();
    for (int t = 0; t < threads; ++t) {
      parts[t].first = bufferBytes / threads * t;
      parts[t].end = bufferBytes / threads * (t + 1);
      pthread_create(&ids[t], NULL, streamPart, &parts[t]);
    }
    for (int t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
    const double rate = bufferBytes / (now() - start) / 1e9;
    if (rate > best) best = rate;
  }
  free(buffer);
  return best;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "lane") == 0) {
    printf("lane %s: %.2f ns a 64-byte lane (best of 20)\n", argv[2], lanes(strcmp(argv[2], "gfni") == 0));
    return 0;
  }
  if (argc >= 4 && strcmp(argv[1], "stream") == 0) {
    const int threads = atoi(argv[2]);
    prefetchBytes = atoi(argv[3]);
    if (threads < 1 || threads > 8) return 2;
    printf("stream, %d thread(s), prefetch %d bytes ahead: %.1f GB/s (best of 4)\n", threads, prefetchBytes,
           stream(threads));
    return 0;
  }
  fprintf(stderr, "usage: %s lane shift|gfni | stream THREADS PREFETCH_BYTES\n", argv[0]);
  return 2;
}
