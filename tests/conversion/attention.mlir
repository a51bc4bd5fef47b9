// --transformer-to-linalg, causal_attention: a fused flash-attention loop nest.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// Attention between split_heads and merge_heads, laid out as --transformer-attention-layout
// leaves it: each head's rows of q, k and v are read where the token-major [T, H, d] views of the
// projections hold them, and the result is written token-major, [T, H, d], which merge_heads
// only collapses: no transpose is left.
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
  %qh = transformer.split_heads %q {num_heads = 2 : i64, token_major} : tensor<64x8xf32> -> tensor<64x2x4xf32>
  %kh = transformer.split_heads %k {num_heads = 2 : i64, token_major} : tensor<64x8xf32> -> tensor<64x2x4xf32>
  %vh = transformer.split_heads %v {num_heads = 2 : i64, token_major} : tensor<64x8xf32> -> tensor<64x2x4xf32>
  %a = transformer.causal_attention %qh, %kh, %vh {query_token_major, key_token_major, value_token_major, result_token_major, scale = 0.5 : f32}
      : (tensor<64x2x4xf32>, tensor<64x2x4xf32>, tensor<64x2x4xf32>) -> tensor<64x2x4xf32>
  %m = transformer.merge_heads %a {token_major} : tensor<64x2x4xf32> -> tensor<64x8xf32>
  return %m : tensor<64x8xf32>
}

// -----

// Grouped-query attention: a decode step of 4 query heads over 2 key/value heads of the cache.
// Query head h reads the cache's head h / 2, for its keys and its values alike.
// CHECK-LABEL: func.func @grouped_query_decode
// CHECK: scf.forall (%{{.*}}) in (1) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<4x1x4xf32>)
// CHECK: %[[H:.*]] = arith.addi %{{.*}}, %{{[^ ]*}} : index
// CHECK: scf.for %[[K0:.*]] = %c0{{.*}} to %{{.*}} step %c16
// CHECK: %[[G:.*]] = arith.divui %[[H]], %c2{{.*}} : index
// CHECK: tensor.extract_slice %{{.*}}[%[[G]], %[[K0]], 0] [1, 16, 4] [1, 1, 1] : tensor<2x48x4xf32> to tensor<16x4xf32>
// CHECK: tensor.extract_slice %{{.*}}[%[[G]], %[[K0]], 0] [1, 16, 4] [1, 1, 1] : tensor<2x48x4xf32> to tensor<16x4xf32>
func.func @grouped_query_decode(%q: tensor<4x1x4xf32>, %k: tensor<2x48x4xf32>, %v: tensor<2x48x4xf32>, %pos: index)
    -> tensor<4x1x4xf32> {
  %a = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32}
      : (tensor<4x1x4xf32>, tensor<2x48x4xf32>, tensor<2x48x4xf32>, index) -> tensor<4x1x4xf32>
  return %a : tensor<4x1x4xf32>
}

// -----

// Each operand is read in its own layout: a decode step as the step program has it, with a
// token-major query [1, H, d] and result, and head-major caches [H, 48, d].
// CHECK-LABEL: func.func @decode_token_major_query
// CHECK: scf.forall (%{{.*}}) in (1) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x2x4xf32>)
// CHECK: %[[H:.*]] = arith.addi %{{.*}}, %[[LOCAL:[^ ]*]] : index
// CHECK: scf.for %[[Q0:.*]] = %c0{{.*}} to %c1{{.*}} step %c1
// CHECK: tensor.extract_slice %{{.*}}[%[[Q0]], %[[H]], 0] [1, 1, 4] [1, 1, 1] : tensor<1x2x4xf32> to tensor<1x4xf32>
// CHECK: scf.for %[[K0:.*]] = %c0{{.*}} to %{{.*}} step %c16
// CHECK: tensor.extract_slice %{{.*}}[%[[H]], %[[K0]], 0] [1, 16, 4] [1, 1, 1] : tensor<2x48x4xf32> to tensor<16x4xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[Q0]], %[[LOCAL]], 0] [1, 1, 4] [1, 1, 1] : tensor<1x4xf32> into tensor<1x2x4xf32>
// CHECK-NOT: linalg.transpose
func.func @decode_token_major_query(%q: tensor<1x2x4xf32>, %k: tensor<2x48x4xf32>, %v: tensor<2x48x4xf32>, %pos: index) -> tensor<1x2x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {query_token_major, result_token_major, scale = 0.5 : f32}
      : (tensor<1x2x4xf32>, tensor<2x48x4xf32>, tensor<2x48x4xf32>, index) -> tensor<1x2x4xf32>
  return %0 : tensor<1x2x4xf32>
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

// heads * queries * keys * head_dim = 2^95 once wrapped to 0 (signed overflow), so all heads ran
// in one iteration; the estimate saturates, and each head gets its own iteration.
// CHECK-LABEL: func.func @work_overflow
// CHECK: scf.forall (%{{.*}}) in (2147483648) shared_outs
func.func @work_overflow(%q: tensor<2147483648x2147483648x4xf32>) -> tensor<2147483648x2147483648x4xf32> {
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32}
      : (tensor<2147483648x2147483648x4xf32>, tensor<2147483648x2147483648x4xf32>, tensor<2147483648x2147483648x4xf32>) -> tensor<2147483648x2147483648x4xf32>
  return %0 : tensor<2147483648x2147483648x4xf32>
}

// -----

// A sliding window of 8 keys: the key loop starts at the block holding the first query's first
// visible key, offset + q0 + 1 - 8 (0 when negative) rounded down to a block of 32, and ends where
// causal attention ends; inside, a key is visible when it is at most the query's position and
// less than 8 before it.
// CHECK-LABEL: func.func @windowed_attention
// CHECK-SAME: %[[OFFSET:[^:]*]]: index
// CHECK: scf.for %[[Q0:.*]] = %c0{{.*}} to %c64 step %c32
// CHECK: %[[KEYEND:.*]] = arith.muli %{{.*}}, %c32{{.*}} : index
// CHECK: %[[A:.*]] = arith.addi %[[OFFSET]], %[[Q0]] : index
// CHECK: %[[FIRST:.*]] = arith.addi %[[A]], %c1{{.*}} : index
// CHECK: %[[PAST:.*]] = arith.cmpi ugt, %[[FIRST]], %c8{{.*}} : index
// CHECK: %[[SUB:.*]] = arith.subi %[[FIRST]], %c8{{.*}} : index
// CHECK: %[[BEGIN:.*]] = arith.select %[[PAST]], %[[SUB]], %c0{{.*}} : index
// CHECK: %[[BLOCK:.*]] = arith.divui %[[BEGIN]], %c32{{.*}} : index
// CHECK: %[[KEYBEGIN:.*]] = arith.muli %[[BLOCK]], %c32{{.*}} : index
// CHECK: scf.for %{{.*}} = %[[KEYBEGIN]] to %[[KEYEND]] step %c32{{.*}} iter_args
// CHECK: %[[CAUSAL:.*]] = arith.cmpi ule
// CHECK: %[[INWINDOW:.*]] = arith.cmpi ult
// CHECK: arith.andi %[[CAUSAL]], %[[INWINDOW]] : i1
func.func @windowed_attention(%q: tensor<2x64x4xf32>, %k: tensor<2x64x4xf32>, %v: tensor<2x64x4xf32>, %pos: index) -> tensor<2x64x4xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32, window = 8 : i64} : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x64x4xf32>
  return %0 : tensor<2x64x4xf32>
}

// -----

// Classified tiles (--transformer-classify-attention-tiles: ["PE", "FP"]): each query block reads
// its full and its partial key blocks from constant tables (compressed rows: per query block a
// range of entries, each a key block) and runs two key loops over the same running state: the
// full tiles' scores are only scaled (no mask, no select), the partial tiles' are masked.
// CHECK-LABEL: func.func @classified_causal
// CHECK-DAG: %[[FULL_STARTS:.*]] = arith.constant dense<[0, 0, 1]> : tensor<3xindex>
// CHECK-DAG: %[[FULL_BLOCKS:.*]] = arith.constant dense<0> : tensor<1xindex>
// CHECK-DAG: %[[PARTIAL_STARTS:.*]] = arith.constant dense<[0, 1, 2]> : tensor<3xindex>
// CHECK-DAG: %[[PARTIAL_BLOCKS:.*]] = arith.constant dense<[0, 1]> : tensor<2xindex>
// CHECK: %[[QB:.*]] = arith.divui %{{.*}}, %c32{{.*}} : index
// CHECK: %[[NEXT:.*]] = arith.addi %[[QB]], %c1{{.*}} : index
// CHECK: %[[F0:.*]] = tensor.extract %[[FULL_STARTS]][%[[QB]]]
// CHECK: %[[F1:.*]] = tensor.extract %[[FULL_STARTS]][%[[NEXT]]]
// CHECK: %[[STATE:.*]]:3 = scf.for %[[E:.*]] = %[[F0]] to %[[F1]] step %c1
// CHECK: tensor.extract %[[FULL_BLOCKS]][%[[E]]]
// CHECK: linalg.matmul
// CHECK: linalg.generic
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: arith.constant 5.000000e-01
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: linalg.yield
// CHECK: %[[P0:.*]] = tensor.extract %[[PARTIAL_STARTS]][%[[QB]]]
// CHECK: %[[P1:.*]] = tensor.extract %[[PARTIAL_STARTS]][%[[NEXT]]]
// CHECK: scf.for %[[E2:.*]] = %[[P0]] to %[[P1]] step %c1{{.*}} iter_args(%{{.*}} = %[[STATE]]#0, %{{.*}} = %[[STATE]]#1, %{{.*}} = %[[STATE]]#2)
// CHECK: tensor.extract %[[PARTIAL_BLOCKS]][%[[E2]]]
// CHECK: linalg.matmul
// CHECK: linalg.generic
// CHECK: arith.cmpi ule
// CHECK: arith.select
func.func @classified_causal(%q: tensor<2x64x4xf32>) -> tensor<2x64x4xf32> {
  %a = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32, tile_classes = ["PE", "FP"], tile_sizes = array<i64: 32, 32>}
      : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// -----

// A constant mask operand: a partial tile reads its [32, 32] corner of the mask, as bytes (a
// vector of i1 is bit-packed in memory, a buffer of i1 is not), as one more input of the masking
// generics and selects where the byte is nonzero; a full tile does not read the mask at all.
// CHECK-LABEL: func.func @mask_operand
// CHECK: %[[MASK:.*]] = arith.constant dense<1> : tensor<64x64xi8>
// CHECK: scf.for
// CHECK-NOT: %[[MASK]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1{{.*}} iter_args
// CHECK: %[[BITS:.*]] = tensor.extract_slice %[[MASK]][%{{.*}}, %{{.*}}] [32, 32] [1, 1] : tensor<64x64xi8> to tensor<32x32xi8>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[BITS]] : tensor<32x32xf32>, tensor<32x32xi8>)
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %[[BYTE:.*]]: i8, %{{.*}}: f32):
// CHECK: %[[BIT:.*]] = arith.cmpi ne, %[[BYTE]], %{{.*}} : i8
// CHECK: arith.select %[[BIT]]
func.func @mask_operand(%q: tensor<2x64x4xf32>) -> tensor<2x64x4xf32> {
  %mask = arith.constant dense<true> : tensor<64x64xi1>
  %a = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.5 : f32, tile_classes = ["FP", "EP"], tile_sizes = array<i64: 32, 32>}
      : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<64x64xi1>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// -----

// Tile sizes that are not the lowering's blocks (the shapes changed after classification).
func.func @stale_tile_sizes(%q: tensor<2x64x4xf32>) -> tensor<2x64x4xf32> {
  // expected-error @+2 {{tile_sizes [16, 16] are not the lowering's blocks: rerun --transformer-classify-attention-tiles}}
  // expected-error @+1 {{failed to legalize operation 'transformer.causal_attention'}}
  %a = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32, tile_classes = ["PEEE", "FPEE", "FFPE", "FFFP"], tile_sizes = array<i64: 16, 16>}
      : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// -----

// A mask that is not a constant cannot be lowered: its bytes are read from the constant.
func.func @runtime_mask(%q: tensor<2x64x4xf32>, %mask: tensor<64x64xi1>) -> tensor<2x64x4xf32> {
  // expected-error @+2 {{the mask must be a compile-time constant (an arith.constant)}}
  // expected-error @+1 {{failed to legalize operation 'transformer.causal_attention'}}
  %a = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.5 : f32}
      : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<64x64xi1>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// -----

// A mask expression (prefix-LM, prefix 40): a partial tile evaluates the expression inline in
// its masking generic, at query position queryStart + i and key keyStart + j (no [T, T] mask
// exists anywhere); a full tile does not evaluate it.
// CHECK-LABEL: func.func @mask_expression
// CHECK-NOT: tensor<64x64xi8>
// CHECK: scf.for
// CHECK: linalg.generic
// CHECK-NOT: arith.cmpi
// CHECK: linalg.matmul
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1{{.*}} iter_args
// CHECK: linalg.generic
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK: %[[QUERY:.*]] = arith.addi %{{.*}}, %[[I]] : index
// CHECK: %[[J:.*]] = linalg.index 1 : index
// CHECK: %[[KEY:.*]] = arith.addi %{{.*}}, %[[J]] : index
// CHECK: %[[POSITION:.*]] = arith.addi %[[QUERY]], %{{.*}} : index
// CHECK: %[[PREFIX:.*]] = arith.cmpi slt, %[[KEY]], %{{.*}} : index
// CHECK: %[[CAUSAL:.*]] = arith.cmpi sle, %[[KEY]], %[[POSITION]] : index
// CHECK: %[[SEEN:.*]] = arith.ori %[[PREFIX]], %[[CAUSAL]] : i1
// CHECK: arith.select %[[SEEN]]
func.func @mask_expression(%q: tensor<2x64x4xf32>) -> tensor<2x64x4xf32> {
  %a = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: index):
    %c40 = arith.constant 40 : index
    %prefix = arith.cmpi slt, %j, %c40 : index
    %causal = arith.cmpi sle, %j, %i : index
    %seen = arith.ori %prefix, %causal : i1
    transformer.yield %seen : i1
  } {scale = 0.5 : f32, tile_classes = ["FP", "FP"], tile_sizes = array<i64: 32, 32>}
      : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// -----

// A mask expression with a runtime offset (a prefill chunk of 8 tokens into a cache of 64): every
// key block up to the last new token's, each masked; the mask is the expression at position
// offset + i, and keys past offset + 8 (not written yet) are hidden too.
// CHECK-LABEL: func.func @mask_expression_offset
// CHECK-SAME: %[[POS:[^:]*]]: index
// CHECK: %[[WRITTEN:.*]] = arith.addi %[[POS]], %c8{{.*}} : index
// CHECK: arith.minui %[[WRITTEN]], %c64
// CHECK: scf.for
// CHECK: linalg.generic
// CHECK: arith.cmpi slt
// CHECK: arith.cmpi sle
// CHECK: %[[SEEN:.*]] = arith.ori
// CHECK: %[[END:.*]] = arith.addi %[[POS]], %c8{{.*}} : index
// CHECK: %[[INSIDE:.*]] = arith.cmpi ult, %{{.*}}, %[[END]] : index
// CHECK: %[[BOTH:.*]] = arith.andi %[[SEEN]], %[[INSIDE]] : i1
// CHECK: arith.select %[[BOTH]]
func.func @mask_expression_offset(%q: tensor<2x8x4xf32>, %k: tensor<2x64x4xf32>, %pos: index) -> tensor<2x8x4xf32> {
  %a = transformer.causal_attention %q, %k, %k offset %pos visible {
  ^bb0(%i: index, %j: index):
    %c40 = arith.constant 40 : index
    %prefix = arith.cmpi slt, %j, %c40 : index
    %causal = arith.cmpi sle, %j, %i : index
    %seen = arith.ori %prefix, %causal : i1
    transformer.yield %seen : i1
  } {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x8x4xf32>
  return %a : tensor<2x8x4xf32>
}

// -----

// The same with one query (a decode step; 4 sink keys, causal after): before the head loop, a
// byte per key block written so far, set when the expression at position offset shows the query
// one of the block's keys (tried in order up to the first visible one; keys not written yet
// hidden). The key loop runs a block's scores and softmax step only inside the scf.if that its
// byte is set; else the state passes through.
// CHECK-LABEL: func.func @mask_expression_decode
// CHECK-SAME: %[[POS:[^:]*]]: index
// CHECK: %[[NONE:.*]] = tensor.empty() : tensor<2xi8>
// CHECK: %[[FLAGS:.*]] = scf.for %[[BLOCK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[SOFAR:.*]] = %[[NONE]]) -> (tensor<2xi8>)
// CHECK: %[[KEY0:.*]] = arith.muli %[[BLOCK]], %c32
// CHECK: %[[FOUND:.*]]:2 = scf.while (%[[KEY:.*]] = %{{.*}}, %[[SEEN:.*]] = %false) : (index, i1) -> (index, i1)
// CHECK: arith.cmpi ult, %[[KEY]], %c32
// CHECK: scf.condition
// CHECK: %[[J:.*]] = arith.addi %[[KEY0]], %{{.*}} : index
// CHECK: arith.cmpi slt, %[[J]], %c4
// CHECK: arith.cmpi sle, %[[J]], %[[POS]]
// CHECK: %[[BYTE:.*]] = arith.extui %[[FOUND]]#1 : i1 to i8
// CHECK: tensor.insert %[[BYTE]] into %[[SOFAR]][%[[BLOCK]]] : tensor<2xi8>
// CHECK: scf.forall
// CHECK: scf.for %[[KEYSTART:.*]] = %{{.*}} to %{{.*}} step %c32{{.*}} iter_args(%[[M:[^ ]*]] = %{{.*}}, %[[L:[^ ]*]] = %{{.*}}, %[[ACC:[^ ]*]] = %{{.*}})
// CHECK: %[[INDEX:.*]] = arith.divui %[[KEYSTART]], %c32
// CHECK: %[[FLAG:.*]] = tensor.extract %[[FLAGS]][%[[INDEX]]] : tensor<2xi8>
// CHECK: %[[VISIT:.*]] = arith.cmpi ne, %[[FLAG]], %c0_i8 : i8
// CHECK: scf.if %[[VISIT]] -> (tensor<1xf32>, tensor<1xf32>, tensor<1x4xf32>)
// CHECK: linalg.generic
// CHECK: } else {
// CHECK-NEXT: scf.yield %[[M]], %[[L]], %[[ACC]]
func.func @mask_expression_decode(%q: tensor<2x1x4xf32>, %k: tensor<2x64x4xf32>, %pos: index) -> tensor<2x1x4xf32> {
  %a = transformer.causal_attention %q, %k, %k offset %pos visible {
  ^bb0(%i: index, %j: index):
    %c4 = arith.constant 4 : index
    %sink = arith.cmpi slt, %j, %c4 : index
    %causal = arith.cmpi sle, %j, %i : index
    %seen = arith.ori %sink, %causal : i1
    transformer.yield %seen : i1
  } {scale = 0.5 : f32} : (tensor<2x1x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x1x4xf32>
  return %a : tensor<2x1x4xf32>
}
