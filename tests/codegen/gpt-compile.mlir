// The named pipelines: every level takes transformer IR to the LLVM dialect; each stage pipeline
// leaves the IR at its stage.
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=baseline})' | FileCheck %s --check-prefix=LLVM
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=fused})' | FileCheck %s --check-prefix=LLVM
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=fused})' | FileCheck %s --check-prefix=SCALAR
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=default})' | FileCheck %s --check-prefixes=LLVM,VECTOR
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-transformer-stage,gpt-linalg-stage{level=fused})' | FileCheck %s --check-prefix=LINALG
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-transformer-stage,gpt-linalg-stage{level=baseline})' | FileCheck %s --check-prefix=UNFUSED
// RUN: not gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=O3})' 2>&1 | FileCheck %s --check-prefix=BADLEVEL
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=default threads=2})' | FileCheck %s --check-prefix=OPENMP
// target-cpu names the CPU (--gpt-set-target first): its gpt.target stays on the module.
// RUN: gpt-opt %s --pass-pipeline='builtin.module(gpt-compile{level=default target-cpu=haswell})' | FileCheck %s --check-prefix=HASWELL
// HASWELL: module attributes {gpt.target = {cpu = "haswell", features = ["avx2", "fma"]

// Two threads: the matmul's pieces of N run in an OpenMP parallel region of 2 threads, each
// taking the next piece from a shared counter (--gpt-share-loops-dynamically).
// OPENMP: omp.parallel num_threads(%{{.*}} : i32)
// OPENMP: llvm.atomicrmw add

// The default level multiplies in 32-wide vectors (the register tile's N); the others do not.
// LLVM-LABEL: llvm.func @mlp
// VECTOR: llvm.intr.fmuladd{{.*}} : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// LLVM: llvm.func @_mlir_ciface_mlp
// LLVM-NOT: transformer.
// LLVM-NOT: linalg.
// LLVM-NOT: memref.alloc
// SCALAR-NOT: vector<32xf32>

// Fusion merges the bias add into the GELU generic: one generic after the matmul, not two.
// LINALG: linalg.matmul
// LINALG-COUNT-1: linalg.generic
// LINALG-NOT: linalg.generic
// UNFUSED: linalg.matmul
// UNFUSED-COUNT-2: linalg.generic

// BADLEVEL: Cannot find option named 'O3'

func.func @mlp(%x: tensor<64x64xf32>, %w: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<*xf32>
    attributes {llvm.emit_c_interface} {
  %0 = transformer.matmul %x, %w : (tensor<64x64xf32>, tensor<64x256xf32>) -> tensor<*xf32>
  %1 = transformer.add %0, %b : (tensor<*xf32>, tensor<256xf32>) -> tensor<*xf32>
  %2 = transformer.gelu %1 : tensor<*xf32> -> tensor<*xf32>
  return %2 : tensor<*xf32>
}
