// --transformer-to-linalg on half-width KV caches (f16, bf16): writes round the f32 keys and values
// to the cache's format, reads widen them back to f32, and attention computes in f32.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// An f16 cache takes the update rounded by arith.truncf (LLVM's fptrunc: nearest even), then
// inserted at the offset as in an f32 cache.
// CHECK-LABEL: func.func @update_f16
// CHECK-SAME: %[[U:[a-z0-9]+]]: tensor<2x3x8xf32>, %[[C:[a-z0-9]+]]: tensor<2x16x8xf16>, %[[POS:[a-z0-9]+]]: index
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[U]] : tensor<2x3x8xf32>) outs(%{{.*}} : tensor<2x3x8xf16>)
// CHECK:   arith.truncf %{{.*}} : f32 to f16
// CHECK: %[[S:.*]] = tensor.insert_slice %[[R]] into %[[C]][0, %[[POS]], 0] [2, 3, 8] [1, 1, 1] : tensor<2x3x8xf16> into tensor<2x16x8xf16>
// CHECK: return %[[S]]
func.func @update_f16(%u: tensor<2x3x8xf32>, %c: tensor<2x16x8xf16>, %pos: index) -> tensor<2x16x8xf16> {
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x8xf32>, tensor<2x16x8xf16> -> tensor<2x16x8xf16>
  return %0 : tensor<2x16x8xf16>
}

// -----

// A bf16 cache rounds with integer ops (kernels::toBf16's rule, no libcall on targets without
// avx512bf16): bits + 0x7fff + the lowest kept bit, the upper half kept; a NaN made quiet.
// CHECK-LABEL: func.func @update_bf16
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<2x3x8xbf16>)
// CHECK:   %[[BITS:.*]] = arith.bitcast %{{.*}} : f32 to i32
// CHECK:   %[[HIGH:.*]] = arith.shrui %[[BITS]], %[[C16:.*]] : i32
// CHECK:   %[[ODD:.*]] = arith.andi %[[HIGH]], %{{.*}} : i32
// CHECK:   %[[BIAS:.*]] = arith.addi %[[ODD]], %{{.*}} : i32
// CHECK:   %[[SUM:.*]] = arith.addi %[[BITS]], %[[BIAS]] : i32
// CHECK:   %[[ROUNDED:.*]] = arith.shrui %[[SUM]], %[[C16]] : i32
// CHECK:   %[[NAN:.*]] = arith.cmpi ugt, %{{.*}}, %{{.*}} : i32
// CHECK:   %[[QUIET:.*]] = arith.ori %[[HIGH]], %{{.*}} : i32
// CHECK:   %[[PICK:.*]] = arith.select %[[NAN]], %[[QUIET]], %[[ROUNDED]] : i32
// CHECK:   %[[HALF:.*]] = arith.trunci %[[PICK]] : i32 to i16
// CHECK:   arith.bitcast %[[HALF]] : i16 to bf16
// CHECK: tensor.insert_slice %{{.*}} : tensor<2x3x8xbf16> into tensor<2x16x8xbf16>
func.func @update_bf16(%u: tensor<2x3x8xf32>, %c: tensor<2x16x8xbf16>, %pos: index) -> tensor<2x16x8xbf16> {
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x8xf32>, tensor<2x16x8xbf16> -> tensor<2x16x8xbf16>
  return %0 : tensor<2x16x8xbf16>
}

// -----

// Decode over an f16 cache: the key block is read as f16 and each key widened inside the dot
// product's reduction (no f32 copy of the keys); the value block is widened once per block before
// p . v, which then multiplies f32 by f32.
// CHECK-LABEL: func.func @decode_f16
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<2x1x4xf32>, %[[K:[a-z0-9]+]]: tensor<2x48x4xf16>, %[[V:[a-z0-9]+]]: tensor<2x48x4xf16>
// CHECK: %[[KB:.*]] = tensor.extract_slice %[[K]]{{.*}} : tensor<2x48x4xf16> to tensor<16x4xf16>
// CHECK: %[[VB:.*]] = tensor.extract_slice %[[V]]{{.*}} : tensor<2x48x4xf16> to tensor<16x4xf16>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[KB]], %{{.*}} : tensor<16x4xf16>, tensor<4xf32>) outs(%{{.*}} : tensor<16xf32>)
// CHECK: ^bb0(%[[KEY:.*]]: f16, %[[QUERY:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK:   %[[WIDE:.*]] = arith.extf %[[KEY]] : f16 to f32
// CHECK:   %[[PRODUCT:.*]] = arith.mulf %[[WIDE]], %[[QUERY]] : f32
// CHECK:   arith.addf %[[ACC]], %[[PRODUCT]] : f32
// CHECK: %[[VW:.*]] = linalg.generic {{.*}} ins(%[[VB]] : tensor<16x4xf16>) outs(%{{.*}} : tensor<16x4xf32>)
// CHECK:   arith.extf %{{.*}} : f16 to f32
// CHECK: linalg.matmul ins(%{{.*}}, %[[VW]] : tensor<1x16xf32>, tensor<16x4xf32>) outs(%{{.*}} : tensor<1x4xf32>)
func.func @decode_f16(%q: tensor<2x1x4xf32>, %k: tensor<2x48x4xf16>, %v: tensor<2x48x4xf16>, %pos: index) -> tensor<2x1x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32} : (tensor<2x1x4xf32>, tensor<2x48x4xf16>, tensor<2x48x4xf16>, index) -> tensor<2x1x4xf32>
  return %0 : tensor<2x1x4xf32>
}

// -----

// Prefill over a bf16 cache (32 queries: a step of 16 or fewer takes decode's path, one query per
// block): the key block is widened and transposed in one copy (the [d, Bk] operand q . k^T reads),
// the value block widened; both matmuls are f32.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[SWAP:.*]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @prefill_bf16
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x32x4xf32>, %[[K:[a-z0-9]+]]: tensor<2x64x4xbf16>, %[[V:[a-z0-9]+]]: tensor<2x64x4xbf16>
// CHECK: %[[KB:.*]] = tensor.extract_slice %[[K]]{{.*}} : tensor<2x64x4xbf16> to tensor<32x4xbf16>
// CHECK: %[[VB:.*]] = tensor.extract_slice %[[V]]{{.*}} : tensor<2x64x4xbf16> to tensor<32x4xbf16>
// CHECK: %[[KT:.*]] = linalg.generic {indexing_maps = [#[[SWAP]], #[[ID]]], {{.*}} ins(%[[KB]] : tensor<32x4xbf16>) outs(%{{.*}} : tensor<4x32xf32>)
// CHECK:   arith.extf %{{.*}} : bf16 to f32
// CHECK: linalg.matmul ins(%{{.*}}, %[[KT]] : tensor<32x4xf32>, tensor<4x32xf32>)
// CHECK: %[[VW:.*]] = linalg.generic {{.*}} ins(%[[VB]] : tensor<32x4xbf16>) outs(%{{.*}} : tensor<32x4xf32>)
// CHECK:   arith.extf %{{.*}} : bf16 to f32
// CHECK: linalg.matmul ins(%{{.*}}, %[[VW]] : tensor<32x32xf32>, tensor<32x4xf32>)
func.func @prefill_bf16(%q: tensor<2x32x4xf32>, %k: tensor<2x64x4xbf16>, %v: tensor<2x64x4xbf16>, %pos: index) -> tensor<2x32x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32} : (tensor<2x32x4xf32>, tensor<2x64x4xbf16>, tensor<2x64x4xbf16>, index) -> tensor<2x32x4xf32>
  return %0 : tensor<2x32x4xf32>
}

// -----

// A bf16 pool: each head's row is read as an f32 vector, rounded as a vector (the same integer
// rule) and written as a vector of bf16.
// CHECK-LABEL: func.func @pool_write_bf16
// CHECK: %[[LANES:.*]] = vector.transfer_read %{{.*}} : tensor<2x3x8xf32>, vector<8xf32>
// CHECK: arith.bitcast %[[LANES]] : vector<8xf32> to vector<8xi32>
// CHECK: %[[HALF:.*]] = arith.trunci %{{.*}} : vector<8xi32> to vector<8xi16>
// CHECK: %[[ROW:.*]] = arith.bitcast %[[HALF]] : vector<8xi16> to vector<8xbf16>
// CHECK: vector.transfer_write %[[ROW]], %{{.*}} : vector<8xbf16>, tensor<6x2x4x8xbf16>
func.func @pool_write_bf16(%u: tensor<2x3x8xf32>, %p: tensor<6x2x4x8xbf16>, %s: tensor<3xi64>) -> tensor<6x2x4x8xbf16> {
  %0 = transformer.paged_cache_write %u into %p[%s] : tensor<2x3x8xf32>, tensor<6x2x4x8xbf16>, tensor<3xi64> -> tensor<6x2x4x8xbf16>
  return %0 : tensor<6x2x4x8xbf16>
}

// -----

// Paged attention over f16 pools: a block's keys widened inside the dot products, its values
// widened before p . v.
// CHECK-LABEL: func.func @paged_f16
// CHECK: %[[KB:.*]] = tensor.extract_slice %{{.*}} : tensor<6x2x4x8xf16> to tensor<4x8xf16>
// CHECK: %[[VB:.*]] = tensor.extract_slice %{{.*}} : tensor<6x2x4x8xf16> to tensor<4x8xf16>
// CHECK: linalg.generic {{.*}} ins(%[[KB]], %{{.*}} : tensor<4x8xf16>, tensor<8xf32>)
// CHECK:   arith.extf %{{.*}} : f16 to f32
// CHECK: %[[VW:.*]] = linalg.generic {{.*}} ins(%[[VB]] : tensor<4x8xf16>) outs(%{{.*}} : tensor<4x8xf32>)
// CHECK:   arith.extf %{{.*}} : f16 to f32
// CHECK: linalg.matmul ins(%{{.*}}, %[[VW]] : tensor<1x4xf32>, tensor<4x8xf32>)
func.func @paged_f16(%q: tensor<2x3x8xf32>, %kp: tensor<6x2x4x8xf16>, %vp: tensor<6x2x4x8xf16>, %t: tensor<2x2xi64>, %s: tensor<3xi64>, %p: tensor<3xi64>) -> tensor<2x3x8xf32> {
  %a = transformer.paged_attention %q, %kp, %vp tables %t sequences %s positions %p {scale = 0.25 : f32}
      : tensor<2x3x8xf32>, tensor<6x2x4x8xf16>, tensor<6x2x4x8xf16>, tensor<2x2xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<2x3x8xf32>
  return %a : tensor<2x3x8xf32>
}

// -----

// A write into a cache keeps the cache's format: an f32 result of an f16 cache would reinterpret it.
func.func @update_result_keeps_the_format(%u: tensor<2x3x8xf32>, %c: tensor<2x16x8xf16>, %pos: index) -> tensor<2x16x8xf32> {
  // expected-error @+1 {{result type 'tensor<2x16x8xf32>' does not have the element type 'f16' implied by the operands}}
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x8xf32>, tensor<2x16x8xf16> -> tensor<2x16x8xf32>
  return %0 : tensor<2x16x8xf32>
}

// -----

// A KV cache is f32, f16, bf16 or i8 (q8_0): other element types are refused by the op's type constraint.
func.func @cache_of_another_type(%u: tensor<2x3x8xf32>, %c: tensor<2x16x8xf64>, %pos: index) -> tensor<2x16x8xf64> {
  // expected-error @+1 {{operand #1 must be tensor of 32-bit float or 16-bit float or bfloat16 type or 8-bit signless integer values}}
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x8xf32>, tensor<2x16x8xf64> -> tensor<2x16x8xf64>
  return %0 : tensor<2x16x8xf64>
}
