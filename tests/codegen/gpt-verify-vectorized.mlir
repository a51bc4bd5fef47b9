// RUN: gpt-opt %s --split-input-file --verify-diagnostics --gpt-verify-vectorized | FileCheck %s

// An op still marked for vectorization after the schedule is an error naming the attribute: the
// schedule skipped it, and it would reach the LLVM lowering as scalar loops.
func.func @skipped_matmul(%a: tensor<16x64xf32>, %b: tensor<64x96xf32>, %c: tensor<16x96xf32>) -> tensor<16x96xf32> {
  // expected-error @below {{is marked 'gpt.register_tile' but the schedule left it unvectorized}}
  %0 = linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
  return %0 : tensor<16x96xf32>
}

// -----

#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func @skipped_reduction(%x: tensor<16x768xf32>, %init: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @below {{is marked 'gpt.row_reduction_tile' but the schedule left it unvectorized}}
  %0 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x768xf32>) outs(%init : tensor<16xf32>) attrs = {gpt.row_reduction_tile = 32 : i64} {
    ^bb0(%in: f32, %acc: f32):
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
  } -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

// Unmarked linalg ops (left to loops on purpose) and vector code pass.
// CHECK-LABEL: func.func @unmarked
// CHECK: linalg.matmul ins
func.func @unmarked(%a: tensor<3x5xf32>, %b: tensor<5x7xf32>, %c: tensor<3x7xf32>) -> tensor<3x7xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<3x5xf32>, tensor<5x7xf32>) outs(%c : tensor<3x7xf32>) -> tensor<3x7xf32>
  return %0 : tensor<3x7xf32>
}
