// --transformer-to-linalg on q8_0 KV caches (i8 rows: head_dim int8 codes, then head_dim / 32 fp16
// scales as bytes): writes quantize each row in place, block by block; reads dequantize each key
// and value block to f32 before attention computes with it.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// Each [d] row of the update is quantized where it goes: per block of 32, amax = max|x|, codes
// round_even(x * 127 / amax) (0 when amax is 0) written at the block's columns, then the scales
// amax / 127 in f16, bitcast to bytes, written after the codes.
// CHECK-LABEL: func.func @update_q8_0
// CHECK-SAME: %[[U:[a-z0-9]+]]: tensor<2x3x64xf32>, %[[C:[a-z0-9]+]]: tensor<2x16x68xi8>, %[[POS:[a-z0-9]+]]: index
// CHECK: scf.for %[[H:[a-z0-9_]+]] = {{.*}} iter_args(%{{.*}} = %[[C]]) -> (tensor<2x16x68xi8>)
// CHECK: scf.for %[[T:[a-z0-9_]+]] = {{.*}} iter_args(%[[ACC:[a-z0-9_]+]] = %{{.*}}) -> (tensor<2x16x68xi8>)
// CHECK:   %[[ROW:.*]] = vector.transfer_read %[[U]][%[[H]], %[[T]], %{{.*}}]{{.*}} : tensor<2x3x64xf32>, vector<64xf32>
// CHECK:   %[[P:.*]] = arith.addi %[[POS]], %[[T]] : index
// CHECK:   %[[X0:.*]] = vector.extract_strided_slice %[[ROW]] {offsets = [0], sizes = [32], strides = [1]}
// CHECK:   %[[ABS0:.*]] = math.absf %[[X0]] : vector<32xf32>
// CHECK:   %[[MAX0:.*]] = vector.reduction <maximumf>, %[[ABS0]] : vector<32xf32> into f32
// CHECK:   %[[NZ0:.*]] = arith.cmpf one, %[[MAX0]], %{{.*}} : f32
// CHECK:   %[[INV0:.*]] = arith.divf %{{.*}}, %[[MAX0]] : f32
// CHECK:   %[[ID0:.*]] = arith.select %[[NZ0]], %[[INV0]], %{{.*}} : f32
// CHECK:   %[[SCALED0:.*]] = arith.mulf %[[X0]], %{{.*}} : vector<32xf32>
// CHECK:   %[[ROUND0:.*]] = math.roundeven %[[SCALED0]] : vector<32xf32>
// CHECK:   %[[CODES0:.*]] = arith.fptosi %[[ROUND0]] : vector<32xf32> to vector<32xi8>
// CHECK:   %[[W0:.*]] = vector.transfer_write %[[CODES0]], %[[ACC]][%[[H]], %[[P]], %{{.*}}] {{.*}} : vector<32xi8>, tensor<2x16x68xi8>
// CHECK:   %[[D0:.*]] = arith.divf %[[MAX0]], %{{.*}} : f32
// CHECK:   %[[S0:.*]] = arith.truncf %[[D0]] : f32 to f16
// CHECK:   vector.extract_strided_slice %[[ROW]] {offsets = [32], sizes = [32], strides = [1]}
// CHECK:   %[[W1:.*]] = vector.transfer_write %{{.*}}, %[[W0]][%[[H]], %[[P]], %[[C32:.*]]] {{.*}} : vector<32xi8>, tensor<2x16x68xi8>
// CHECK:   %[[S1:.*]] = arith.truncf %{{.*}} : f32 to f16
// CHECK:   %[[HALVES:.*]] = vector.from_elements %[[S0]], %[[S1]] : vector<2xf16>
// CHECK:   %[[BYTES:.*]] = vector.bitcast %[[HALVES]] : vector<2xf16> to vector<4xi8>
// CHECK:   %[[C64:.*]] = arith.constant 64 : index
// CHECK:   %[[W2:.*]] = vector.transfer_write %[[BYTES]], %[[W1]][%[[H]], %[[P]], %[[C64]]] {{.*}} : vector<4xi8>, tensor<2x16x68xi8>
// CHECK:   scf.yield %[[W2]]
func.func @update_q8_0(%u: tensor<2x3x64xf32>, %c: tensor<2x16x68xi8>, %pos: index) -> tensor<2x16x68xi8> {
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x64xf32>, tensor<2x16x68xi8> -> tensor<2x16x68xi8>
  return %0 : tensor<2x16x68xi8>
}

// -----

// Decode over a q8_0 cache: each key block's rows are dequantized (the scales' bytes bitcast to
// f16 and widened, each block of 32 codes converted and multiplied by its scale) into an f32
// block, which the dot products then read; the value block likewise before p . v.
// CHECK-LABEL: func.func @decode_q8_0
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<2x1x32xf32>, %[[K:[a-z0-9]+]]: tensor<2x48x34xi8>, %[[V:[a-z0-9]+]]: tensor<2x48x34xi8>
// CHECK: %[[KB:.*]] = tensor.extract_slice %[[K]]{{.*}} : tensor<2x48x34xi8> to tensor<16x34xi8>
// CHECK: %[[KW:.*]] = scf.for %[[R:[a-z0-9_]+]] = {{.*}} -> (tensor<16x32xf32>)
// CHECK:   %[[SB:.*]] = vector.transfer_read %[[KB]][%[[R]], %{{.*}}]{{.*}} : tensor<16x34xi8>, vector<2xi8>
// CHECK:   %[[SH:.*]] = vector.bitcast %[[SB]] : vector<2xi8> to vector<1xf16>
// CHECK:   %[[SF:.*]] = arith.extf %[[SH]] : vector<1xf16> to vector<1xf32>
// CHECK:   %[[CODES:.*]] = vector.transfer_read %[[KB]][%[[R]], %{{.*}}]{{.*}} : tensor<16x34xi8>, vector<32xi8>
// CHECK:   %[[VALUES:.*]] = arith.sitofp %[[CODES]] : vector<32xi8> to vector<32xf32>
// CHECK:   %[[SCALE:.*]] = vector.extract %[[SF]][0] : f32 from vector<1xf32>
// CHECK:   %[[SPLAT:.*]] = vector.broadcast %[[SCALE]] : f32 to vector<32xf32>
// CHECK:   %[[PRODUCT:.*]] = arith.mulf %[[VALUES]], %[[SPLAT]] : vector<32xf32>
// CHECK:   vector.transfer_write %[[PRODUCT]], %{{.*}}[%[[R]], %{{.*}}] {{.*}} : vector<32xf32>, tensor<16x32xf32>
// CHECK: %[[VB:.*]] = tensor.extract_slice %[[V]]{{.*}} : tensor<2x48x34xi8> to tensor<16x34xi8>
// CHECK: %[[VW:.*]] = scf.for {{.*}} -> (tensor<16x32xf32>)
// CHECK:   vector.transfer_read %[[VB]]{{.*}} : tensor<16x34xi8>, vector<2xi8>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[KW]], %{{.*}} : tensor<16x32xf32>, tensor<32xf32>) outs(%{{.*}} : tensor<16xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %[[VW]] : tensor<1x16xf32>, tensor<16x32xf32>) outs(%{{.*}} : tensor<1x32xf32>)
func.func @decode_q8_0(%q: tensor<2x1x32xf32>, %k: tensor<2x48x34xi8>, %v: tensor<2x48x34xi8>, %pos: index) -> tensor<2x1x32xf32> {
  %0 = transformer.causal_attention %q, %k, %v offset %pos {scale = 0.5 : f32} : (tensor<2x1x32xf32>, tensor<2x48x34xi8>, tensor<2x48x34xi8>, index) -> tensor<2x1x32xf32>
  return %0 : tensor<2x1x32xf32>
}

// -----

// The paged pool's write quantizes each token's row of each head into its slot, as cache_update;
// paged attention dequantizes each block of a head before its dot products.
// CHECK-LABEL: func.func @paged_q8_0
// CHECK: scf.if
// CHECK:   vector.transfer_read %{{.*}} : tensor<2x3x64xf32>, vector<64xf32>
// CHECK:   math.roundeven %{{.*}} : vector<32xf32>
// CHECK:   vector.transfer_write %{{.*}} : vector<32xi8>, tensor<8x2x4x68xi8>
// CHECK:   vector.bitcast %{{.*}} : vector<2xf16> to vector<4xi8>
// CHECK:   vector.transfer_write %{{.*}} : vector<4xi8>, tensor<8x2x4x68xi8>
// CHECK: scf.forall
// CHECK: %[[BLOCK:.*]] = tensor.extract_slice %{{.*}} : tensor<8x2x4x68xi8> to tensor<4x68xi8>
// CHECK: %[[KEYS:.*]] = scf.for {{.*}} -> (tensor<4x64xf32>)
// CHECK:   vector.bitcast %{{.*}} : vector<4xi8> to vector<2xf16>
// CHECK:   arith.sitofp %{{.*}} : vector<32xi8> to vector<32xf32>
// CHECK: linalg.generic {{.*}} ins(%[[KEYS]], %{{.*}} : tensor<4x64xf32>, tensor<64xf32>)
func.func @paged_q8_0(%q: tensor<2x3x64xf32>, %k: tensor<8x2x4x68xi8>, %v: tensor<8x2x4x68xi8>, %t: tensor<2x4xi64>,
                      %s: tensor<3xi64>, %pos: tensor<3xi64>) -> tensor<2x3x64xf32> {
  %k2 = transformer.paged_cache_write %q into %k[%s] : tensor<2x3x64xf32>, tensor<8x2x4x68xi8>, tensor<3xi64> -> tensor<8x2x4x68xi8>
  %0 = transformer.paged_attention %q, %k2, %v tables %t sequences %s positions %pos {scale = 0.25 : f32}
      : tensor<2x3x64xf32>, tensor<8x2x4x68xi8>, tensor<8x2x4x68xi8>, tensor<2x4xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<2x3x64xf32>
  return %0 : tensor<2x3x64xf32>
}

// -----

// A q8_0 cache's rows must hold whole blocks: 33 bytes is no head_dim's codes and scales.
func.func @bad_q8_0_row(%u: tensor<2x3x32xf32>, %c: tensor<2x16x33xi8>, %pos: index) -> tensor<2x16x33xi8> {
  // expected-error @+1 {{cache 'tensor<2x16x33xi8>' is a q8_0 KV cache (i8) whose rows of 33 bytes are not head_dim int8 codes}}
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x32xf32>, tensor<2x16x33xi8> -> tensor<2x16x33xi8>
  return %0 : tensor<2x16x33xi8>
}

// -----

// An update of 64 values does not fit rows of 34 bytes (head_dim 32).
func.func @q8_0_head_dim_mismatch(%u: tensor<2x3x64xf32>, %c: tensor<2x16x34xi8>, %pos: index) -> tensor<2x16x34xi8> {
  // expected-error @+1 {{must agree on heads and head_dim}}
  %0 = transformer.cache_update %u into %c[%pos] : tensor<2x3x64xf32>, tensor<2x16x34xi8> -> tensor<2x16x34xi8>
  return %0 : tensor<2x16x34xi8>
}
