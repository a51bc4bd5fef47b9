// --transformer-to-linalg, ops that move data: transpose, embedding, slice, split/merge_heads, cache_update,
// permute, reshape, broadcast, concat.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @transpose
// CHECK: linalg.transpose ins(%{{.*}} : tensor<2x4x8xf32>) outs(%{{.*}} : tensor<2x8x4xf32>) permutation = [0, 2, 1]
func.func @transpose(%x: tensor<2x4x8xf32>) -> tensor<2x8x4xf32> {
  %0 = transformer.transpose %x : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  return %0 : tensor<2x8x4xf32>
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

// A table stored as a q8_0 LM head [D = 64, V' = 256] (8 panels of 32 columns, lanes of 4
// codes): id v reads column v % 32 of panel v / 32 (clamped into the 256 padded ids); feature
// j = 32 b + q + 8 i is byte i of lane row 8 b + q, sign-extended by shifting it to the top and
// back; the element is code * scale of block b.
// CHECK-LABEL: func.func @packed_embedding
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}} : tensor<5xi64>) outs(%{{.*}} : tensor<5x64xf32>)
// CHECK: %[[ID:.*]] = arith.minsi %{{.*}}, %c255 : index
// CHECK: %[[PANEL:.*]] = arith.divui %[[ID]], %c32
// CHECK: %[[COLUMN:.*]] = arith.remui %[[ID]], %c32
// CHECK: %[[F:.*]] = linalg.index 1 : index
// CHECK: %[[BLOCK:.*]] = arith.divui %[[F]], %c32
// CHECK: %[[IN:.*]] = arith.remui %[[F]], %c32
// CHECK: %[[FIRST:.*]] = arith.muli %[[BLOCK]], %c8
// CHECK: %[[Q:.*]] = arith.remui %[[IN]], %c8
// CHECK: %[[ROW:.*]] = arith.addi %[[FIRST]], %[[Q]]
// CHECK: %[[BYTE:.*]] = arith.divui %[[IN]], %c8
// CHECK: %[[LANE:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %[[ROW]], %[[COLUMN]]] : tensor<8x16x32xi32>
// CHECK: %[[UP:.*]] = arith.shli %[[LANE]], %{{.*}} : i32
// CHECK: %[[CODE:.*]] = arith.shrsi %[[UP]], %c24_i32 : i32
// CHECK: %[[SCALE:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %[[BLOCK]], %[[COLUMN]]] : tensor<8x2x32xf16>
// CHECK-DAG: %[[S:.*]] = arith.extf %[[SCALE]] : f16 to f32
// CHECK-DAG: %[[C:.*]] = arith.sitofp %[[CODE]] : i32 to f32
// CHECK: arith.mulf %[[C]], %[[S]] : f32
func.func @packed_embedding(%c: tensor<8x16x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) -> tensor<5x64xf32> {
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<5x64xf32>
  return %0 : tensor<5x64xf32>
}

// -----

// A table stored as a q6_k LM head [D = 256, V' = 256]: feature k = 16 h + 4 i + l of run h has
// its low nibble in bits 8 i + 4 (l / 2) of lane row 3 h + l % 2 and its top 2 bits in bits
// 8 i + 2 l of row 3 h + 2; the run's int8 scale is byte h % 2 of scale row h / 2 (the f16's bits),
// and d is row 8 + k / 256; the element is (d * scale) * (code - 32).
// CHECK-LABEL: func.func @packed_embedding_q6_k
// CHECK: %[[ID:.*]] = arith.minsi %{{.*}}, %c255{{[_0-9]*}} : index
// CHECK: %[[PANEL:.*]] = arith.divui %[[ID]], %c32
// CHECK: %[[COLUMN:.*]] = arith.remui %[[ID]], %c32
// CHECK: %[[F:.*]] = linalg.index 1 : index
// CHECK: %[[H:.*]] = arith.divui %[[F]], %c16
// CHECK: %[[FIRST:.*]] = arith.muli %[[H]], %c3
// CHECK: %[[LOWROW:.*]] = arith.addi %[[FIRST]], %{{.*}} : index
// CHECK: %[[HIGHROW:.*]] = arith.addi %[[FIRST]], %c2{{[_0-9]*}} : index
// CHECK: %[[LOWWORD:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %[[LOWROW]], %[[COLUMN]]] : tensor<8x48x32xi32>
// CHECK: %[[HIGHWORD:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %[[HIGHROW]], %[[COLUMN]]] : tensor<8x48x32xi32>
// CHECK: %[[LOW:.*]] = arith.andi %{{.*}}, %c15_i32{{[_0-9]*}} : i32
// CHECK: %[[HIGH:.*]] = arith.andi %{{.*}}, %c3_i32{{[_0-9]*}} : i32
// CHECK: %[[HIGHBITS:.*]] = arith.shli %[[HIGH]], %c4_i32{{[_0-9]*}} : i32
// CHECK: %[[CODE:.*]] = arith.ori %[[LOW]], %[[HIGHBITS]] : i32
// CHECK: %[[CENTRED:.*]] = arith.subi %[[CODE]], %c32_i32{{[_0-9]*}} : i32
// CHECK: %[[SCALEHALF:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %{{.*}}, %[[COLUMN]]] : tensor<8x9x32xf16>
// CHECK: arith.bitcast %[[SCALEHALF]] : f16 to i16
// CHECK: %[[SCALEI8:.*]] = arith.trunci %{{.*}} : i32 to i8
// CHECK: %[[SCALEI32:.*]] = arith.extsi %[[SCALEI8]] : i8 to i32
// CHECK: %[[SCALE:.*]] = arith.sitofp %[[SCALEI32]] : i32 to f32
// CHECK: %[[DROW:.*]] = arith.addi %{{.*}}, %c8{{[_0-9]*}} : index
// CHECK: %[[DHALF:.*]] = tensor.extract %{{.*}}[%[[PANEL]], %[[DROW]], %[[COLUMN]]] : tensor<8x9x32xf16>
// CHECK: %[[D:.*]] = arith.extf %[[DHALF]] : f16 to f32
// CHECK: %[[RUNSCALE:.*]] = arith.mulf %[[D]], %[[SCALE]] : f32
// CHECK: %[[VALUE:.*]] = arith.sitofp %[[CENTRED]] : i32 to f32
// CHECK: arith.mulf %[[RUNSCALE]], %[[VALUE]] : f32
func.func @packed_embedding_q6_k(%c: tensor<8x48x32xi32>, %s: tensor<8x9x32xf16>, %ids: tensor<5xi64>) -> tensor<5x256xf32> {
  %0 = transformer.packed_embedding q6_k %c, %s, %ids : (tensor<8x48x32xi32>, tensor<8x9x32xf16>, tensor<5xi64>) -> tensor<5x256xf32>
  return %0 : tensor<5x256xf32>
}

// -----

// Token-major split_heads and merge_heads are views: an expand_shape and a collapse_shape, no
// transpose.
// CHECK-LABEL: func.func @slice_and_heads
// CHECK: %[[S:.*]] = tensor.extract_slice %{{.*}}[0, 64] [8, 64] [1, 1] : tensor<8x192xf32> to tensor<8x64xf32>
// CHECK: %[[E:.*]] = tensor.expand_shape %[[S]] {{\[\[}}0], [1, 2]] output_shape [8, 4, 16] : tensor<8x64xf32> into tensor<8x4x16xf32>
// CHECK-NOT: linalg.transpose
// CHECK: tensor.collapse_shape %[[E]] {{\[\[}}0], [1, 2]] : tensor<8x4x16xf32> into tensor<8x64xf32>
func.func @slice_and_heads(%qkv: tensor<8x192xf32>) -> tensor<8x64xf32> {
  %k = transformer.slice %qkv {offset = 64 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<8x64xf32>
  %h = transformer.split_heads %k {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<8x4x16xf32>
  %m = transformer.merge_heads %h {token_major} : tensor<8x4x16xf32> -> tensor<8x64xf32>
  return %m : tensor<8x64xf32>
}

// -----

// Head-major, split_heads and merge_heads are a reshape and a transpose.
// CHECK-LABEL: func.func @heads
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2]] output_shape [8, 4, 16] : tensor<8x64xf32> into tensor<8x4x16xf32>
// CHECK: linalg.transpose ins(%{{.*}} : tensor<8x4x16xf32>) outs(%{{.*}} : tensor<4x8x16xf32>) permutation = [1, 0, 2]
// CHECK: %[[T:.*]] = linalg.transpose ins(%{{.*}} : tensor<4x8x16xf32>) outs(%{{.*}} : tensor<8x4x16xf32>) permutation = [1, 0, 2]
// CHECK: tensor.collapse_shape %[[T]] {{\[\[}}0], [1, 2]] : tensor<8x4x16xf32> into tensor<8x64xf32>
func.func @heads(%x: tensor<8x64xf32>, %h: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<8x64xf32>) {
  %s = transformer.split_heads %x {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  %m = transformer.merge_heads %h : tensor<4x8x16xf32> -> tensor<8x64xf32>
  return %s, %m : tensor<4x8x16xf32>, tensor<8x64xf32>
}

// -----

// update -> cache[:, offset : offset + T, :], one insert_slice (in place once bufferized).
// CHECK-LABEL: func.func @cache_update
// CHECK-SAME: (%[[U:.*]]: tensor<4x2x16xf32>, %[[C:.*]]: tensor<4x64x16xf32>, %[[POS:.*]]: index)
// CHECK: tensor.insert_slice %[[U]] into %[[C]][0, %[[POS]], 0] [4, 2, 16] [1, 1, 1] : tensor<4x2x16xf32> into tensor<4x64x16xf32>
func.func @cache_update(%u: tensor<4x2x16xf32>, %cache: tensor<4x64x16xf32>, %pos: index) -> tensor<4x64x16xf32> {
  %0 = transformer.cache_update %u into %cache[%pos] : tensor<4x2x16xf32>, tensor<4x64x16xf32> -> tensor<4x64x16xf32>
  return %0 : tensor<4x64x16xf32>
}

// -----

// permute: a linalg.transpose with the same permutation.
// CHECK-LABEL: func.func @permute
// CHECK: linalg.transpose ins(%{{.*}} : tensor<2x3x4xf32>) outs(%{{.*}} : tensor<3x4x2xf32>) permutation = [1, 2, 0]
// CHECK-NOT: transformer.
func.func @permute(%x: tensor<2x3x4xf32>) -> tensor<3x4x2xf32> {
  %0 = transformer.permute %x {permutation = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  return %0 : tensor<3x4x2xf32>
}

// -----

// reshape: collapsed to one dimension, expanded to the result's (no copy).
// CHECK-LABEL: func.func @reshape
// CHECK: %[[F:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1, 2]] : tensor<2x3x4xf32> into tensor<24xf32>
// CHECK: tensor.expand_shape %[[F]] {{\[}}[0, 1]] output_shape [6, 4] : tensor<24xf32> into tensor<6x4xf32>
// CHECK-NOT: transformer.
func.func @reshape(%x: tensor<2x3x4xf32>) -> tensor<6x4xf32> {
  %0 = transformer.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// -----

// broadcast: a linalg.generic reading the size-1 and missing dimensions at index 0.
// CHECK-DAG: #[[IN:.*]] = affine_map<(d0, d1, d2) -> (0, d2)>
// CHECK-LABEL: func.func @broadcast
// CHECK: linalg.generic {indexing_maps = [#[[IN]], #{{.*}}]
// CHECK-NOT: transformer.
func.func @broadcast(%x: tensor<1x8xf32>) -> tensor<4x3x8xf32> {
  %0 = transformer.broadcast %x : tensor<1x8xf32> -> tensor<4x3x8xf32>
  return %0 : tensor<4x3x8xf32>
}

// -----

// concat: each input inserted at its offset along dim 1.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x2xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4x10xf32>
// CHECK: %[[R:.*]] = tensor.insert_slice %[[A]] into %[[E]][0, 0] [4, 8] [1, 1]
// CHECK: tensor.insert_slice %[[B]] into %[[R]][0, 8] [4, 2] [1, 1]
// CHECK-NOT: transformer.
func.func @concat(%a: tensor<4x8xf32>, %b: tensor<4x2xf32>) -> tensor<4x10xf32> {
  %0 = transformer.concat %a, %b {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}
