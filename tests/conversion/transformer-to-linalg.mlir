// --transformer-to-linalg: every transformer op becomes linalg/tensor/arith/math on tensors.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[LAST:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @add_bias
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[LAST]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%[[X]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>) outs(%[[E]] : tensor<4x8xf32>)
// CHECK: arith.addf
// CHECK-NOT: transformer.
func.func @add_bias(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// A size-1 dim broadcasts by reading index 0.
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @mul_column
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[COL]], #{{.*}}]
// CHECK: arith.mulf
func.func @mul_column(%x: tensor<4x8xf32>, %c: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %0 = transformer.mul %x, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @unary
// CHECK: arith.negf
// CHECK: arith.maximumf
// GELU, tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
// CHECK: arith.constant 4.471500e-02 : f32
// CHECK: arith.constant 0.797884583 : f32
// CHECK: math.tanh
// CHECK: arith.constant 5.000000e-01 : f32
// CHECK-NOT: transformer.
func.func @unary(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.neg %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = transformer.relu %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = transformer.gelu %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @constant
// CHECK: %[[C:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: return %[[C]]
func.func @constant() -> tensor<2xf32> {
  %0 = transformer.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @transpose
// CHECK: linalg.transpose ins(%{{.*}} : tensor<2x4x8xf32>) outs(%{{.*}} : tensor<2x8x4xf32>) permutation = [0, 2, 1]
func.func @transpose(%x: tensor<2x4x8xf32>) -> tensor<2x8x4xf32> {
  %0 = transformer.transpose %x : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  return %0 : tensor<2x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_2d
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32>) outs(%[[FILL]] : tensor<4x16xf32>)
func.func @matmul_2d(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// A weight shared by every batch: the batch folds into M and one 2-D matmul runs.
// CHECK-LABEL: func.func @matmul_shared_weight
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[FLAT]], %{{.*}} : tensor<8x8xf32>, tensor<8x16xf32>)
// CHECK: tensor.expand_shape %[[MM]] {{\[\[}}0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
func.func @matmul_shared_weight(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
  %0 = transformer.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_batched
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<3x4x8xf32>, tensor<3x8x5xf32>) outs(%{{.*}} : tensor<3x4x5xf32>)
func.func @matmul_batched(%a: tensor<3x4x8xf32>, %b: tensor<3x8x5xf32>) -> tensor<3x4x5xf32> {
  %0 = transformer.matmul %a, %b : (tensor<3x4x8xf32>, tensor<3x8x5xf32>) -> tensor<3x4x5xf32>
  return %0 : tensor<3x4x5xf32>
}

// -----

// Rank 4 (batch x heads): the two batch dims fold into one for linalg.batch_matmul.
// CHECK-LABEL: func.func @matmul_rank4
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2], [3]] : tensor<2x3x4x8xf32> into tensor<6x4x8xf32>
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2], [3]] : tensor<2x3x8x5xf32> into tensor<6x8x5xf32>
// CHECK: %[[BMM:.*]] = linalg.batch_matmul
// CHECK: tensor.expand_shape %[[BMM]] {{\[\[}}0, 1], [2], [3]] output_shape [2, 3, 4, 5]
func.func @matmul_rank4(%a: tensor<2x3x4x8xf32>, %b: tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32> {
  %0 = transformer.matmul %a, %b : (tensor<2x3x4x8xf32>, tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32>
  return %0 : tensor<2x3x4x5xf32>
}

// -----

// LayerNorm: a row sum, a row sum of squared deviations, then one elementwise generic.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[FEAT:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @layer_norm
// CHECK: %[[SUM:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK: arith.addf
// CHECK: %[[SQ:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ROW]], #[[FEAT]], #[[FEAT]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%{{.*}}, %[[SUM]], %[[SQ]], %{{.*}}, %{{.*}} :
// CHECK: arith.constant 1.000000e-03 : f32
// CHECK: math.rsqrt
func.func @layer_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-3 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Softmax: row max (from -inf), row sum of exp(x - max), then exp(x - max) / sum.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: linalg.fill ins(%[[NEGINF]] : f32)
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: math.exp
// CHECK: arith.divf
// CHECK-NOT: transformer.
func.func @softmax(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = transformer.softmax %x : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// Unranked types: a clear error, not a failed legalization.
func.func @needs_shapes(%x: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1 {{has type 'tensor<*xf32>'; --transformer-to-linalg needs static shapes (run --transformer-shape-inference first)}}
  %0 = transformer.neg %x : tensor<*xf32> -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// Embedding: a gather through tensor.extract, with the id clamped into the table.
// CHECK-LABEL: func.func @embedding
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}} : tensor<8xi64>) outs(%{{.*}} : tensor<8x64xf32>)
// CHECK: %[[ID:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[LO:.*]] = arith.maxsi %[[ID]], %{{.*}} : index
// CHECK: %[[HI:.*]] = arith.minsi %[[LO]], %{{.*}} : index
// CHECK: %[[F:.*]] = linalg.index 1 : index
// CHECK: tensor.extract %{{.*}}[%[[HI]], %[[F]]] : tensor<256x64xf32>
func.func @embedding(%table: tensor<256x64xf32>, %ids: tensor<8xi64>) -> tensor<8x64xf32> {
  %0 = transformer.embedding %table, %ids : (tensor<256x64xf32>, tensor<8xi64>) -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

// merge_heads undoes split_heads' transpose instead of transposing back: neither transpose is
// left to run.
// CHECK-LABEL: func.func @slice_and_heads
// CHECK: %[[S:.*]] = tensor.extract_slice %{{.*}}[0, 64] [8, 64] [1, 1] : tensor<8x192xf32> to tensor<8x64xf32>
// CHECK: %[[E:.*]] = tensor.expand_shape %[[S]] {{\[\[}}0], [1, 2]] output_shape [8, 4, 16] : tensor<8x64xf32> into tensor<8x4x16xf32>
// CHECK-NOT: linalg.transpose
// CHECK: tensor.collapse_shape %[[E]] {{\[\[}}0], [1, 2]] : tensor<8x4x16xf32> into tensor<8x64xf32>
func.func @slice_and_heads(%qkv: tensor<8x192xf32>) -> tensor<8x64xf32> {
  %k = transformer.slice %qkv {offset = 64 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<8x64xf32>
  %h = transformer.split_heads %k {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  %m = transformer.merge_heads %h : tensor<4x8x16xf32> -> tensor<8x64xf32>
  return %m : tensor<8x64xf32>
}

// -----

// On their own, split_heads and merge_heads are transposes.
// CHECK-LABEL: func.func @heads
// CHECK: linalg.transpose ins(%{{.*}} : tensor<8x4x16xf32>) outs(%{{.*}} : tensor<4x8x16xf32>) permutation = [1, 0, 2]
// CHECK: linalg.transpose ins(%{{.*}} : tensor<4x8x16xf32>) outs(%{{.*}} : tensor<8x4x16xf32>) permutation = [1, 0, 2]
func.func @heads(%x: tensor<8x64xf32>, %h: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<8x64xf32>) {
  %s = transformer.split_heads %x {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  %m = transformer.merge_heads %h : tensor<4x8x16xf32> -> tensor<8x64xf32>
  return %s, %m : tensor<4x8x16xf32>, tensor<8x64xf32>
}

// -----

// Attention between split_heads and merge_heads reads each head's rows of q, k and v where the
// [T, H, d] views of the projections hold them, and writes its result token-major, [T, H, d],
// which merge_heads only collapses: no transpose is left.
// CHECK-LABEL: func.func @attention_between_heads
// CHECK-NOT: linalg.transpose
// CHECK: scf.forall (%{{.*}}) in (1) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<64x2x4xf32>)
// CHECK: tensor.extract_slice %{{.*}}[%{{.*}}, %{{.*}}, 0] [32, 1, 4] [1, 1, 1] : tensor<64x2x4xf32> to tensor<32x4xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}, 0] [32, 1, 4] [1, 1, 1] : tensor<32x4xf32> into tensor<64x2x4xf32>
// CHECK-NOT: linalg.transpose
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2]] : tensor<64x2x4xf32> into tensor<64x8xf32>
func.func @attention_between_heads(%qkv: tensor<64x24xf32>) -> tensor<64x8xf32> {
  %q = transformer.slice %qkv {offset = 0 : i64, size = 8 : i64} : tensor<64x24xf32> -> tensor<64x8xf32>
  %k = transformer.slice %qkv {offset = 8 : i64, size = 8 : i64} : tensor<64x24xf32> -> tensor<64x8xf32>
  %v = transformer.slice %qkv {offset = 16 : i64, size = 8 : i64} : tensor<64x24xf32> -> tensor<64x8xf32>
  %qh = transformer.split_heads %q {num_heads = 2 : i64} : tensor<64x8xf32> -> tensor<2x64x4xf32>
  %kh = transformer.split_heads %k {num_heads = 2 : i64} : tensor<64x8xf32> -> tensor<2x64x4xf32>
  %vh = transformer.split_heads %v {num_heads = 2 : i64} : tensor<64x8xf32> -> tensor<2x64x4xf32>
  %a = transformer.causal_attention %qh, %kh, %vh {scale = 0.5 : f32} : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
  %m = transformer.merge_heads %a : tensor<2x64x4xf32> -> tensor<64x8xf32>
  return %m : tensor<64x8xf32>
}

// -----

// RoPE: the partner element j +/- half is read with tensor.extract; the angle is computed in f64.
// CHECK-LABEL: func.func @rope
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<4x8x16xf32>, tensor<8xi64>)
// CHECK: %[[J:.*]] = linalg.index 2 : index
// CHECK: %[[FIRST:.*]] = arith.cmpi ult, %[[J]], %c8 : index
// CHECK: tensor.extract
// CHECK: math.exp %{{.*}} : f64
// CHECK: math.cos %{{.*}} : f64
// CHECK: math.sin %{{.*}} : f64
// CHECK: arith.select %[[FIRST]]
func.func @rope(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) -> tensor<4x8x16xf32> {
  %0 = transformer.rope %x, %pos : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  return %0 : tensor<4x8x16xf32>
}

// -----

// Causal attention, fused (flash-attention style): a forall over heads, a loop over blocks of
// 32 queries, and inside it a loop over blocks of 32 keys with a running max, sum and output.
// The key loop ends at the last key the block's last query may see, min(offset + q0 + 32, 64)
// rounded up to a block: key blocks the causal mask removes entirely are never visited (with
// offset 0 the first query block visits 1 of the 2 key blocks), and a decode step reads the
// cache only up to its own position. Only [32, 32] score tiles exist, never the [64, 64] matrix.
// Each key block is transposed once and multiplied as a plain matmul (contiguous rows for the
// register tiles), where a decode step (one query, below) uses matmul_transpose_b.
// This attention is too small to split across threads (2*64*64*4 < 2^18 multiply-adds): one
// forall iteration runs both heads.
// CHECK-LABEL: func.func @causal_attention
// CHECK-SAME: %[[OFFSET:[^:]*]]: index
// CHECK-NOT: tensor<2x64x64xf32>
// CHECK: scf.forall (%{{.*}}) in (1) shared_outs
// CHECK: scf.for %[[LOCAL:.*]] = %c0 to %c2{{.*}} step %c1
// CHECK: %[[H:.*]] = arith.addi %{{.*}}, %[[LOCAL]] : index
// CHECK: scf.for %[[Q0:.*]] = %c0{{.*}} to %c64 step %c32
// CHECK: %[[A:.*]] = arith.addi %[[OFFSET]], %[[Q0]] : index
// CHECK: %[[B:.*]] = arith.addi %[[A]], %c32{{.*}} : index
// CHECK: %[[END:.*]] = arith.minui %[[B]], %c64{{.*}} : index
// CHECK: %[[UP:.*]] = arith.addi %[[END]], %c31 : index
// CHECK: %[[BLOCKS:.*]] = arith.divui %[[UP]], %c32{{.*}} : index
// CHECK: %[[KEYEND:.*]] = arith.muli %[[BLOCKS]], %c32{{.*}} : index
// CHECK: scf.for %[[K0:.*]] = %c0{{.*}} to %[[KEYEND]] step %c32{{.*}} iter_args
// CHECK: %[[KBLOCK:.*]] = tensor.extract_slice %{{.*}}[%[[H]], %[[K0]], 0] [1, 32, 4] [1, 1, 1] : tensor<2x64x4xf32> to tensor<32x4xf32>
// CHECK: %[[KT:.*]] = linalg.transpose ins(%[[KBLOCK]] : tensor<32x4xf32>) outs(%{{.*}} : tensor<4x32xf32>) permutation = [1, 0]
// CHECK: linalg.matmul ins(%{{.*}}, %[[KT]] : tensor<32x4xf32>, tensor<4x32xf32>) outs(%{{.*}} : tensor<32x32xf32>)
// CHECK: arith.cmpi ule
// CHECK: math.exp
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<32x32xf32>, tensor<32x4xf32>) outs(%{{.*}} : tensor<32x4xf32>)
// CHECK: scf.yield
// CHECK: arith.divf
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[LOCAL]], %[[Q0]], 0] [1, 32, 4] [1, 1, 1] : tensor<32x4xf32> into tensor<2x64x4xf32>
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[%{{.*}}, 0, 0] [2, 64, 4] [1, 1, 1]
// CHECK-NOT: linalg.batch_matmul
func.func @causal_attention(%q: tensor<2x64x4xf32>, %k: tensor<2x64x4xf32>, %v: tensor<2x64x4xf32>, %pos: index) -> tensor<2x64x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32} : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x64x4xf32>
  return %0 : tensor<2x64x4xf32>
}

// -----

// A decode step: one query against a cache of 48 positions, blocks of 16 keys (the largest
// power of two up to 32 dividing 48); the key loop ends at min(offset + 1, 48) rounded up. The
// scores of a block are one dot product per key: a row reduction over the head dimension that
// reads each key row as it is stored, consumed as [1, 16] through an indexing map.
// CHECK-LABEL: func.func @decode_attention
// CHECK-SAME: %[[OFFSET:[^:]*]]: index
// CHECK: scf.for %[[Q0:.*]] = %c0{{.*}} to %c1{{.*}} step %c1
// CHECK: %[[A:.*]] = arith.addi %[[OFFSET]], %[[Q0]] : index
// CHECK: %[[B:.*]] = arith.addi %[[A]], %c1{{.*}} : index
// CHECK: arith.minui %[[B]], %c48{{.*}} : index
// CHECK: %[[KEYS:.*]] = tensor.extract_slice %{{.*}} [1, 16, 4] [1, 1, 1] : tensor<2x48x4xf32> to tensor<16x4xf32>
// CHECK: %[[QUERY:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1]] : tensor<1x4xf32> into tensor<4xf32>
// CHECK: %[[DOTS:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[KEYS]], %[[QUERY]] : tensor<16x4xf32>, tensor<4xf32>) outs(%{{.*}} : tensor<16xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[DOTS]] : tensor<16xf32>) outs(%{{.*}} : tensor<1x16xf32>)
// CHECK-NOT: linalg.matmul_transpose_b
func.func @decode_attention(%q: tensor<2x1x4xf32>, %k: tensor<2x48x4xf32>, %v: tensor<2x48x4xf32>, %pos: index) -> tensor<2x1x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32} : (tensor<2x1x4xf32>, tensor<2x48x4xf32>, tensor<2x48x4xf32>, index) -> tensor<2x1x4xf32>
  return %0 : tensor<2x1x4xf32>
}

// -----

// Enough work to split across threads (4*64*64*16 = 2^18 multiply-adds): one head per forall
// iteration.
// CHECK-LABEL: func.func @parallel_heads
// CHECK: scf.forall (%{{.*}}) in (4) shared_outs
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c1{{.*}} step %c1
func.func @parallel_heads(%q: tensor<4x64x16xf32>, %k: tensor<4x64x16xf32>, %v: tensor<4x64x16xf32>) -> tensor<4x64x16xf32> {
  %0 = transformer.causal_attention %q, %k, %v {scale = 0.25 : f32} : (tensor<4x64x16xf32>, tensor<4x64x16xf32>, tensor<4x64x16xf32>) -> tensor<4x64x16xf32>
  return %0 : tensor<4x64x16xf32>
}

// -----

// A packed weight [N/P, K, P]: one generic over (m, panel, column, k) marked gpt.packed_matmul,
// reading the panel as (panel, k, column); its [M, N/P, P] result is viewed as [M, N] and the
// batch dims of x are folded into M and restored.
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[C:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @packed_matmul
// CHECK: %[[X:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<8x3x32xf32>
// CHECK: %[[P:.*]] = linalg.generic {indexing_maps = [#[[A]], #[[W]], #[[C]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[X]], %{{.*}} : tensor<8x8xf32>, tensor<3x8x32xf32>) outs(%[[ZERO]] : tensor<8x3x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[N:.*]] = tensor.collapse_shape %[[P]] {{\[}}[0], [1, 2]] : tensor<8x3x32xf32> into tensor<8x96xf32>
// CHECK: tensor.expand_shape %[[N]] {{\[}}[0, 1], [2]] output_shape [2, 4, 96] : tensor<8x96xf32> into tensor<2x4x96xf32>
func.func @packed_matmul(%x: tensor<2x4x8xf32>, %w: tensor<3x8x32xf32>) -> tensor<2x4x96xf32> {
  %0 = transformer.packed_matmul %x, %w : (tensor<2x4x8xf32>, tensor<3x8x32xf32>) -> tensor<2x4x96xf32>
  return %0 : tensor<2x4x96xf32>
}
