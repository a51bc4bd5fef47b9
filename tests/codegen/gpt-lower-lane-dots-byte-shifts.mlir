// --gpt-lower-lane-dots: a shift and a mask on i32 lanes that keep every byte's bits within the
// byte (`(x << c) & m`, `(x >> c) & m`, m one byte repeated) become one vgf2p8affineqb per 16 lanes
// (512 bits) or 8 (256 bits) of each row where the target has GFNI, the shift and the mask both in
// its bit matrix: output bit j of a byte is the parity of matrix byte 7 - j and'ed with the input
// byte. Zen 4 has GFNI and AVX512-BW, Alder Lake GFNI and AVX2, Haswell no GFNI.
// RUN: gpt-opt %s --gpt-set-target="cpu=znver4" --gpt-lower-lane-dots | FileCheck %s --check-prefix=ZMM
// RUN: gpt-opt %s --gpt-set-target="cpu=alderlake" --gpt-lower-lane-dots | FileCheck %s --check-prefix=YMM
// RUN: gpt-opt %s --gpt-set-target="cpu=haswell" --gpt-lower-lane-dots | FileCheck %s --check-prefix=PLAIN
// RUN: gpt-opt %s --gpt-set-target="cpu=aarch64:neoverse-v1" --gpt-lower-lane-dots | FileCheck %s --check-prefix=PLAIN
// RUN: gpt-opt %s --gpt-lower-lane-dots | FileCheck %s --check-prefix=PLAIN

// q5_k's fifth bits of code lane 1 (bits 1, 9, 17, 25) moved to bit 4 of each byte: output bit 4
// takes input bit 1, so matrix byte 3 is 0x02 (the qword 0x02000000 = 33554432). Two rows of 32
// lanes: 4 zmm pieces, 8 ymm pieces.
// ZMM-LABEL: func.func @fifth_bits_up
// ZMM-DAG: %[[IMM:.*]] = llvm.mlir.constant(0 : i8) : i8
// ZMM-DAG: %[[MATRIX:.*]] = arith.constant dense<33554432> : vector<8xi64>
// ZMM: %[[BYTES:.*]] = vector.bitcast %[[MATRIX]] : vector<8xi64> to vector<64xi8>
// ZMM-COUNT-4: llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.512"(%{{.*}}, %[[BYTES]], %[[IMM]]) : (vector<64xi8>, vector<64xi8>, i8) -> vector<64xi8>
// ZMM-NOT: arith.shli
// ZMM-NOT: arith.andi
// YMM-LABEL: func.func @fifth_bits_up
// YMM: arith.constant dense<33554432> : vector<4xi64>
// YMM-COUNT-8: llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.256"
// PLAIN-LABEL: func.func @fifth_bits_up
// PLAIN: arith.shli
// PLAIN: arith.andi
// PLAIN-NOT: llvm.call_intrinsic
func.func @fifth_bits_up(%h: vector<2x32xi32>) -> vector<2x32xi32> {
  %three = arith.constant dense<3> : vector<2x32xi32>
  %fifth = arith.constant dense<269488144> : vector<2x32xi32>
  %s = arith.shli %h, %three : vector<2x32xi32>
  %m = arith.andi %s, %fifth : vector<2x32xi32>
  return %m : vector<2x32xi32>
}

// q6_k's top bits of a run's last lane, `(h >> 2) & 0x30303030`, the mask first: output bits 4
// and 5 take input bits 6 and 7 (matrix bytes 3 and 2: 0x40 and 0x80, the qword 0x40800000).
// ZMM-LABEL: func.func @top_bits_down
// ZMM: arith.constant dense<1082130432> : vector<8xi64>
// ZMM-COUNT-1: llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.512"
// ZMM-NOT: arith.shrui
func.func @top_bits_down(%h: vector<16xi32>) -> vector<16xi32> {
  %two = arith.constant dense<2> : vector<16xi32>
  %tops = arith.constant dense<808464432> : vector<16xi32>
  %s = arith.shrui %h, %two : vector<16xi32>
  %m = arith.andi %tops, %s : vector<16xi32>
  return %m : vector<16xi32>
}

// Left as they are: a kept bit that would come from another byte (bit 4 from bit -1), a mask that
// is not one byte repeated, a shift of a whole byte, and words shared by the rows of a tile (a
// weight read broadcast to 4 rows, as prefill's: there the dots keep the pipes vgf2p8affineqb
// runs on busy).
// ZMM-LABEL: func.func @across_bytes
// ZMM-NOT: llvm.call_intrinsic
// ZMM-COUNT-4: arith.andi
// ZMM: return
func.func @across_bytes(%h: vector<16xi32>, %w: vector<16xi32>) -> (vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<4x16xi32>) {
  %five = arith.constant dense<5> : vector<16xi32>
  %eight = arith.constant dense<8> : vector<16xi32>
  %fifth = arith.constant dense<269488144> : vector<16xi32>
  %uneven = arith.constant dense<269488145> : vector<16xi32>
  %a = arith.shli %h, %five : vector<16xi32>
  %b = arith.shrui %h, %five : vector<16xi32>
  %c = arith.shrui %h, %eight : vector<16xi32>
  %0 = arith.andi %a, %fifth : vector<16xi32>
  %1 = arith.andi %b, %uneven : vector<16xi32>
  %2 = arith.andi %c, %fifth : vector<16xi32>
  %rows = vector.broadcast %w : vector<16xi32> to vector<4x16xi32>
  %three = arith.constant dense<3> : vector<4x16xi32>
  %fifths = arith.constant dense<269488144> : vector<4x16xi32>
  %d = arith.shli %rows, %three : vector<4x16xi32>
  %3 = arith.andi %d, %fifths : vector<4x16xi32>
  return %0, %1, %2, %3 : vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<4x16xi32>
}
