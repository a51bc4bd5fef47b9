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

// The 5-bit formats' codes of lanes 1 and 5 (nibbleCodeSum: word w's low and high nibbles with the
// fifth bits of f shifted left by 3 and right by 1) take 3 vgf2p8affineqb for the pair, not 4 and
// a shift: g moves bit 1 of each byte of f to bit 4 and bit 5 to bit 0 (matrix bytes 3 and 7:
// 0x02 and 0x20, the qword 0x2000000002000000); lane 1's code is (w & 0x0F) | (g & 0xF0); lane 5's
// is (w & 0xF0) | (g & 0x0F) with its nibbles moved down and bit 0 up to bit 4 (bytes 7-4: 0x10,
// 0x20, 0x40, 0x80, byte 3: 0x01, the qword 0x1020408001000000). Each code computes g (CSE shares
// it later). Not for words shared by the rows of a tile, nor without GFNI.
// ZMM-LABEL: func.func @five_bit_pair
// ZMM-DAG: %[[TOGETHER:.*]] = arith.constant dense<2305843009247248384> : vector<8xi64>
// ZMM-DAG: %[[SWAPPED:.*]] = arith.constant dense<1161999622378356736> : vector<8xi64>
// ZMM-DAG: %[[LOW:.*]] = arith.constant dense<252645135> : vector<16xi32>
// ZMM-DAG: %[[HIGH:.*]] = arith.constant dense<-252645136> : vector<16xi32>
// ZMM: %[[T:.*]] = vector.bitcast %[[TOGETHER]] : vector<8xi64> to vector<64xi8>
// ZMM: %[[G:.*]] = llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.512"(%{{.*}}, %[[T]], %{{.*}})
// ZMM: %[[GW:.*]] = vector.bitcast %[[G]] : vector<64xi8> to vector<16xi32>
// ZMM: %[[WL:.*]] = arith.andi %{{.*}}, %[[LOW]] : vector<16xi32>
// ZMM: %[[GH:.*]] = arith.andi %[[GW]], %[[HIGH]] : vector<16xi32>
// ZMM: %[[LANE1:.*]] = arith.ori %[[WL]], %[[GH]] : vector<16xi32>
// ZMM: %[[T2:.*]] = vector.bitcast %[[TOGETHER]] : vector<8xi64> to vector<64xi8>
// ZMM: %[[S:.*]] = vector.bitcast %[[SWAPPED]] : vector<8xi64> to vector<64xi8>
// ZMM: %[[G2:.*]] = llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.512"(%{{.*}}, %[[T2]], %{{.*}})
// ZMM: %[[G2W:.*]] = vector.bitcast %[[G2]] : vector<64xi8> to vector<16xi32>
// ZMM: %[[WH:.*]] = arith.andi %{{.*}}, %[[HIGH]] : vector<16xi32>
// ZMM: %[[GL:.*]] = arith.andi %[[G2W]], %[[LOW]] : vector<16xi32>
// ZMM: %[[PAIR:.*]] = arith.ori %[[WH]], %[[GL]] : vector<16xi32>
// ZMM: %[[PB:.*]] = vector.bitcast %[[PAIR]] : vector<16xi32> to vector<64xi8>
// ZMM: %[[LANE5:.*]] = llvm.call_intrinsic "llvm.x86.vgf2p8affineqb.512"(%[[PB]], %[[S]], %{{.*}})
// ZMM: %[[LANE5W:.*]] = vector.bitcast %[[LANE5]]
// ZMM-NOT: llvm.call_intrinsic
// ZMM: return %[[LANE1]], %[[LANE5W]]
// ZMM-LABEL: func.func @five_bit_pair_shared_by_rows
// ZMM-NOT: arith.constant dense<2305843009247248384>
// ZMM: return
// PLAIN-LABEL: func.func @five_bit_pair
// PLAIN-NOT: llvm.call_intrinsic
// PLAIN: return
func.func @five_bit_pair(%w: vector<16xi32>, %f: vector<16xi32>) -> (vector<16xi32>, vector<16xi32>) {
  %nibbles = arith.constant dense<252645135> : vector<16xi32>
  %fifth = arith.constant dense<269488144> : vector<16xi32>
  %one = arith.constant dense<1> : vector<16xi32>
  %three = arith.constant dense<3> : vector<16xi32>
  %four = arith.constant dense<4> : vector<16xi32>
  %low = arith.andi %w, %nibbles : vector<16xi32>
  %up = arith.shli %f, %three : vector<16xi32>
  %lowFifth = arith.andi %up, %fifth : vector<16xi32>
  %lane1 = arith.ori %low, %lowFifth : vector<16xi32>
  %shifted = arith.shrui %w, %four : vector<16xi32>
  %high = arith.andi %shifted, %nibbles : vector<16xi32>
  %down = arith.shrui %f, %one : vector<16xi32>
  %highFifth = arith.andi %down, %fifth : vector<16xi32>
  %lane5 = arith.ori %high, %highFifth : vector<16xi32>
  return %lane1, %lane5 : vector<16xi32>, vector<16xi32>
}

func.func @five_bit_pair_shared_by_rows(%word: vector<16xi32>, %f: vector<4x16xi32>) -> vector<4x16xi32> {
  %w = vector.broadcast %word : vector<16xi32> to vector<4x16xi32>
  %nibbles = arith.constant dense<252645135> : vector<4x16xi32>
  %fifth = arith.constant dense<269488144> : vector<4x16xi32>
  %three = arith.constant dense<3> : vector<4x16xi32>
  %low = arith.andi %w, %nibbles : vector<4x16xi32>
  %up = arith.shli %f, %three : vector<4x16xi32>
  %lowFifth = arith.andi %up, %fifth : vector<4x16xi32>
  %lane1 = arith.ori %low, %lowFifth : vector<4x16xi32>
  return %lane1 : vector<4x16xi32>
}
