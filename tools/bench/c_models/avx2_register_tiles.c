// A C model of AVX2 register tiles for packed matmuls: an R x W tile of accumulators (W = 8 * V
// columns, V ymm registers a row) over weight panels of K x W floats, for a prefill's M rows, on
// 2 threads split by panel, optionally walking K in blocks of KC (each block over every tile of
// the M rows, so that the block's slice of the panel is reused from L1). The weights rotate over
// 12 copies, so each pass reads them from memory as a prefill does. Compiled with the project's
// clang, so that the loop is LLVM's, as in the compiled programs (gcc folds the weight loads
// into the multiply-adds and reloads them per row, which makes walking whole panels look worse).
// A yardstick for docs/PERFORMANCE.md ("K in blocks for AVX2's 2-row tiles"), not part of the
// project.
//
//   $(bazel info output_base)/external/llvm/bin/clang -O3 -mavx2 -mfma -fopenmp \
//       tools/bench/c_models/avx2_register_tiles.c -o /tmp/avx2_tiles \
//       -L$(bazel info output_base)/external/llvm/lib -Wl,-rpath,$(bazel info output_base)/external/llvm/lib
//   /tmp/avx2_tiles K N R V M [KC]     # e.g. 768 3072 2 4 128 128: GPT-2's c_fc at T=128, 2 x 32 tiles
//
// Tiles built in: 2x4, 4x3, 6x2, 4x2 and 3x4 (R x V). Prints the best and mean of 40 passes.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define TILE(R, V) \
static void tile_##R##x##V(const float*A,int K,const float*P,float*C,int N,int r0,int k0,int k1){ \
  __m256 c[R][V]; for(int r=0;r<R;++r)for(int j=0;j<V;++j)c[r][j]=_mm256_loadu_ps(C+(size_t)(r0+r)*N+j*8); \
  for(int k=k0;k<k1;++k){ __m256 b[V]; for(int j=0;j<V;++j)b[j]=_mm256_load_ps(P+(size_t)k*V*8+j*8); \
    for(int r=0;r<R;++r){__m256 a=_mm256_broadcast_ss(A+(size_t)(r0+r)*K+k); for(int j=0;j<V;++j)c[r][j]=_mm256_fmadd_ps(a,b[j],c[r][j]);}} \
  for(int r=0;r<R;++r)for(int j=0;j<V;++j)_mm256_storeu_ps(C+(size_t)(r0+r)*N+j*8,c[r][j]);}
TILE(2,4) TILE(4,3) TILE(6,2) TILE(4,2) TILE(3,4)
int main(int argc,char**argv){
  int M=atoi(argv[5]),K=atoi(argv[1]),N=atoi(argv[2]),R=atoi(argv[3]),V=atoi(argv[4]),KC=argc>6?atoi(argv[6]):K,W=V*8;
  int NB=12; float*A=aligned_alloc(64,(size_t)M*K*4),*C=aligned_alloc(64,(size_t)M*N*4+4096); float*Bs[12];
  for(int i=0;i<NB;++i){Bs[i]=aligned_alloc(64,(size_t)K*N*4); for(size_t j=0;j<(size_t)K*N;++j)Bs[i][j]=(j%7)*0.01f;}
  for(size_t i=0;i<(size_t)M*K;++i)A[i]=(i%13)*0.01f;
  double best=1e9,sum=0; int rows=M/R*R;
  for(int rep=0;rep<40;++rep){const float*B=Bs[rep%NB];double t0=now();
#pragma omp parallel for schedule(static) num_threads(2)
    for(int p=0;p<N/W;++p){const float*P=B+(size_t)p*K*W;
      for(int k0=0;k0<K;k0+=KC) for(int r0=0;r0<rows;r0+=R){
        if(R==2&&V==4)tile_2x4(A,K,P,C+p*W,N,r0,k0,k0+KC); else if(R==4&&V==3)tile_4x3(A,K,P,C+p*W,N,r0,k0,k0+KC);
        else if(R==6&&V==2)tile_6x2(A,K,P,C+p*W,N,r0,k0,k0+KC); else if(R==4&&V==2)tile_4x2(A,K,P,C+p*W,N,r0,k0,k0+KC); else tile_3x4(A,K,P,C+p*W,N,r0,k0,k0+KC);}}
    double t=now()-t0;sum+=t;if(t<best)best=t;}
  printf("K=%d N=%d tile %dx%d KC=%d M=%d: best %.1f mean %.1f GFLOP/s\n",K,N,R,W,KC,rows,2.0*rows*K*N/best/1e9,2.0*rows*K*N/(sum/40)/1e9);
}
