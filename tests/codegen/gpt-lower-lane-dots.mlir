// --gpt-lower-lane-dots: lane dot products become vdpbf16ps / vpdpbusd, one call per 16 lanes of
// each row, where the target (the module's gpt.target, named here by --gpt-set-target) has the
// instruction, and plain arithmetic where it does not (no target, or a target without them).
// Cooper Lake has AVX512-VNNI and AVX512-BF16, Cascade Lake AVX512-VNNI only, Alder Lake AVX-VNNI
// and AVX2, Haswell AVX2, Skylake-AVX512 AVX512-BW.
// RUN: gpt-opt %s --gpt-set-target="cpu=cooperlake" --gpt-lower-lane-dots | FileCheck %s --check-prefix=DOTS
// RUN: gpt-opt %s --gpt-lower-lane-dots | FileCheck %s --check-prefix=PLAIN
// RUN: gpt-opt %s --gpt-set-target="cpu=aarch64:neoverse-v1" --gpt-lower-lane-dots | FileCheck %s --check-prefix=PLAIN
// RUN: gpt-opt %s --gpt-set-target="cpu=cascadelake" --gpt-lower-lane-dots | FileCheck %s --check-prefix=VNNI
// RUN: gpt-opt %s --gpt-set-target="cpu=alderlake" --gpt-lower-lane-dots | FileCheck %s --check-prefix=AVXVNNI
// RUN: gpt-opt %s --gpt-set-target="cpu=haswell" --gpt-lower-lane-dots | FileCheck %s --check-prefix=AVX2
// RUN: gpt-opt %s --gpt-set-target="cpu=skylake-avx512" --gpt-lower-lane-dots | FileCheck %s --check-prefix=AVX512BW

// A bf16 tile of 2 rows x 32 lanes: 4 instructions, each on a row's 16-lane piece, its i32 lanes
// reinterpreted as 32 bf16.
// DOTS-LABEL: func.func @bf16_tile
// DOTS-COUNT-4: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
// DOTS-NOT: transformer.lane_dot_bf16
// Without avx512bf16: each lane's high bf16 masked in place and its low one shifted up, as f32,
// then two FMAs, the high pair first.
// PLAIN-LABEL: func.func @bf16_tile
// PLAIN: %[[MASK:.*]] = arith.constant dense<-65536> : vector<2x32xi32>
// PLAIN: %[[AH:.*]] = arith.andi %[[A:.*]], %[[MASK]] : vector<2x32xi32>
// PLAIN: %[[AHF:.*]] = arith.bitcast %[[AH]] : vector<2x32xi32> to vector<2x32xf32>
// PLAIN: %[[BH:.*]] = arith.andi %[[B:.*]], %[[MASK]] : vector<2x32xi32>
// PLAIN: %[[BHF:.*]] = arith.bitcast %[[BH]] : vector<2x32xi32> to vector<2x32xf32>
// PLAIN: %[[HIGH:.*]] = math.fma %[[AHF]], %[[BHF]], %{{.*}} : vector<2x32xf32>
// PLAIN: %[[AL:.*]] = arith.shli %[[A]], %{{.*}} : vector<2x32xi32>
// PLAIN: %[[ALF:.*]] = arith.bitcast %[[AL]] : vector<2x32xi32> to vector<2x32xf32>
// PLAIN: %[[BL:.*]] = arith.shli %[[B]], %{{.*}} : vector<2x32xi32>
// PLAIN: %[[BLF:.*]] = arith.bitcast %[[BL]] : vector<2x32xi32> to vector<2x32xf32>
// PLAIN: math.fma %[[ALF]], %[[BLF]], %[[HIGH]] : vector<2x32xf32>
// PLAIN-NOT: llvm.call_intrinsic
// VNNI-LABEL: func.func @bf16_tile
// VNNI-NOT: llvm.call_intrinsic
// VNNI: math.fma
func.func @bf16_tile(%acc: vector<2x32xf32>, %x: vector<2x32xi32>, %w: vector<2x32xi32>) -> vector<2x32xf32> {
  %0 = transformer.lane_dot_bf16 %acc, %x, %w : vector<2x32xi32> -> vector<2x32xf32>
  return %0 : vector<2x32xf32>
}

// A decode row of 32 int8 lanes: 2 instructions.
// DOTS-LABEL: func.func @u8i8_row
// DOTS: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xi32>, vector<16xi32>, vector<16xi32>) -> vector<16xi32>
// DOTS: vector.extract_strided_slice %{{.*}} {offsets = [16], sizes = [16], strides = [1]} : vector<32xi32> to vector<16xi32>
// DOTS: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// DOTS-NOT: transformer.lane_dot_u8i8
// VNNI-LABEL: func.func @u8i8_row
// VNNI-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// Without vnni: byte i of the unsigned operand shifted down and masked, of the signed one shifted
// to the top and arithmetically back; four multiply-adds in i32.
// PLAIN-LABEL: func.func @u8i8_row
// PLAIN: %[[U0:.*]] = arith.andi %[[U:.*]], %{{.*}} : vector<32xi32>
// PLAIN: %[[S0T:.*]] = arith.shli %[[S:.*]], %{{.*}} : vector<32xi32>
// PLAIN: %[[S0:.*]] = arith.shrsi %[[S0T]], %{{.*}} : vector<32xi32>
// PLAIN: %[[P0:.*]] = arith.muli %[[U0]], %[[S0]] : vector<32xi32>
// PLAIN: %[[SUM0:.*]] = arith.addi %{{.*}}, %[[P0]] : vector<32xi32>
// PLAIN-COUNT-3: arith.muli
// PLAIN-NOT: llvm.call_intrinsic
// With AVX-VNNI (no AVX-512): the VEX vpdpbusd on 8 lanes, 4 calls for the row.
// AVXVNNI-LABEL: func.func @u8i8_row
// AVXVNNI-COUNT-4: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<8xi32>, vector<8xi32>, vector<8xi32>) -> vector<8xi32>
// AVXVNNI-NOT: arith.muli
// With AVX2 only: per 8 lanes, the unsigned bytes 0, 2 and 1, 3 masked into 16-bit halves, the
// signed ones shifted into them with their sign, two vpmaddwd added to the accumulator; no
// 32-bit multiplies.
// AVX2-LABEL: func.func @u8i8_row
// AVX2: %[[EVEN:.*]] = arith.andi %{{.*}}, %[[MASK:.*]] : vector<8xi32>
// AVX2: %[[ODDSHIFT:.*]] = arith.shrui %{{.*}} : vector<8xi32>
// AVX2: arith.andi %[[ODDSHIFT]], %[[MASK]] : vector<8xi32>
// AVX2: vector.bitcast %{{.*}} : vector<8xi32> to vector<16xi16>
// AVX2: arith.shli %{{.*}} : vector<16xi16>
// AVX2: arith.shrsi %{{.*}} : vector<16xi16>
// AVX2: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"(%{{.*}}, %{{.*}}) : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
// AVX2: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX2-COUNT-6: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX2-NOT: arith.muli
// AVX512BW-LABEL: func.func @u8i8_row
// AVX512BW-COUNT-4: llvm.call_intrinsic "llvm.x86.avx512.pmaddw.d.512"(%{{.*}}, %{{.*}}) : (vector<32xi16>, vector<32xi16>) -> vector<16xi32>
// AVX512BW-NOT: arith.muli
func.func @u8i8_row(%acc: vector<32xi32>, %w: vector<32xi32>, %x: vector<32xi32>) -> vector<32xi32> {
  %0 = transformer.lane_dot_u8i8 %acc, %w, %x : vector<32xi32> -> vector<32xi32>
  return %0 : vector<32xi32>
}

// Scalars (a level that does not vectorize) always get the plain arithmetic.
// AVXVNNI-LABEL: func.func @scalars
// AVX2-LABEL: func.func @scalars
// AVX512BW-LABEL: func.func @scalars
// DOTS-LABEL: func.func @scalars
// DOTS-NOT: llvm.call_intrinsic
// DOTS: math.fma
// DOTS: arith.muli
func.func @scalars(%f: f32, %i: i32, %a: i32, %b: i32) -> (f32, i32) {
  %0 = transformer.lane_dot_bf16 %f, %a, %b : i32 -> f32
  %1 = transformer.lane_dot_u8i8 %i, %a, %b : i32 -> i32
  return %0, %1 : f32, i32
}

// A block format's codes are masked bytes below 128 (here a q4 word's two nibbles and a 6-bit
// code): without vpdpbusd, vpmaddubsw multiplies them with the signed bytes into exact i16 pair
// sums. A chain of dots (each the next one's accumulator) adds those sums in i16 while their bound
// (2 * 128 * the largest code) stays below 32768, then one vpmaddwd by ones per group: here the two
// nibble dots share one (2 * 3840), the 6-bit dot (16128) joins them (23808), and the second
// 6-bit dot starts a group of its own.
// AVX2-LABEL: func.func @small_code_chain
// AVX2: %[[ONES:.*]] = arith.constant dense<1> : vector<16xi16>
// AVX2: %[[P0:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"(%{{.*}}, %{{.*}}) : (vector<32xi8>, vector<32xi8>) -> vector<16xi16>
// AVX2: %[[P1:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2: %[[G01:.*]] = arith.addi %[[P0]], %[[P1]] : vector<16xi16>
// AVX2: %[[P2:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2: %[[G012:.*]] = arith.addi %[[G01]], %[[P2]] : vector<16xi16>
// AVX2: %[[W0:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"(%[[G012]], %[[ONES]]) : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
// AVX2: %[[S0:.*]] = arith.addi %{{.*}}, %[[W0]] : vector<8xi32>
// AVX2: %[[P3:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2: %[[W1:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"(%[[P3]], %[[ONES]])
// AVX2: arith.addi %[[S0]], %[[W1]] : vector<8xi32>
// AVX2-COUNT-4: llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2-NOT: transformer.lane_dot_u8i8
// AVX2-NOT: arith.muli
// AVX2-LABEL: func.func @q8_offset_codes
// With AVX-512 BW: the same on 16 lanes.
// AVX512BW-LABEL: func.func @small_code_chain
// AVX512BW-COUNT-3: llvm.call_intrinsic "llvm.x86.avx512.pmaddubs.w.512"(%{{.*}}, %{{.*}}) : (vector<64xi8>, vector<64xi8>) -> vector<32xi16>
// AVX512BW: llvm.call_intrinsic "llvm.x86.avx512.pmaddw.d.512"
// AVX512BW: llvm.call_intrinsic "llvm.x86.avx512.pmaddubs.w.512"
// AVX512BW: llvm.call_intrinsic "llvm.x86.avx512.pmaddw.d.512"
// AVX512BW-LABEL: func.func @q8_offset_codes
// With vpdpbusd, one instruction per dot as before.
// AVXVNNI-LABEL: func.func @small_code_chain
// AVXVNNI-COUNT-8: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"
// AVXVNNI-NOT: pmadd
func.func @small_code_chain(%acc: vector<16xi32>, %w: vector<16xi32>, %six: vector<16xi32>,
                            %x0: vector<16xi32>, %x1: vector<16xi32>, %x2: vector<16xi32>, %x3: vector<16xi32>) -> vector<16xi32> {
  %nibbles = arith.constant dense<0x0F0F0F0F> : vector<16xi32>
  %six_bits = arith.constant dense<0x3F3F3F3F> : vector<16xi32>
  %four = arith.constant dense<4> : vector<16xi32>
  %low = arith.andi %w, %nibbles : vector<16xi32>
  %shifted = arith.shrui %w, %four : vector<16xi32>
  %high = arith.andi %shifted, %nibbles : vector<16xi32>
  %code = arith.andi %six, %six_bits : vector<16xi32>
  %0 = transformer.lane_dot_u8i8 %acc, %low, %x0 : vector<16xi32> -> vector<16xi32>
  %1 = transformer.lane_dot_u8i8 %0, %high, %x1 : vector<16xi32> -> vector<16xi32>
  %2 = transformer.lane_dot_u8i8 %1, %code, %x2 : vector<16xi32> -> vector<16xi32>
  %3 = transformer.lane_dot_u8i8 %2, %code, %x3 : vector<16xi32> -> vector<16xi32>
  return %3 : vector<16xi32>
}

// q8_0's codes with their top bit flipped (xor 0x80808080) reach 255, where vpmaddubsw's pair
// sums would saturate: the exact vpmaddwd form, two per piece.
// AVX2: arith.xori
// AVX2-NOT: pmadd.ub.sw
// AVX2-COUNT-4: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX512BW-NOT: pmaddubs
// AVX512BW-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.pmaddw.d.512"
// AVX512BW-NOT: pmaddubs
func.func @q8_offset_codes(%acc: vector<16xi32>, %w: vector<16xi32>, %x: vector<16xi32>) -> vector<16xi32> {
  %flip = arith.constant dense<0x80808080> : vector<16xi32>
  %offset = arith.xori %w, %flip : vector<16xi32>
  %0 = transformer.lane_dot_u8i8 %acc, %offset, %x : vector<16xi32> -> vector<16xi32>
  return %0 : vector<16xi32>
}

// A shift by an amount that is not a constant bounds nothing, even when the amount's own bits are
// few: here the top bits of the bytes shifted right by 0 or 1, bytes of up to 128 (a shift by the
// amount's bits, 1, would have bounded them by 64): the widened vpmaddwd form.
// AVX2-LABEL: func.func @unknown_shift
// AVX2-NOT: pmadd.ub.sw
// AVX2: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX2-NOT: pmadd.ub.sw
func.func @unknown_shift(%acc: vector<8xi32>, %w: vector<8xi32>, %x: vector<8xi32>, %s: vector<8xi32>) -> vector<8xi32> {
  %tops = arith.constant dense<0x80808080> : vector<8xi32>
  %one = arith.constant dense<1> : vector<8xi32>
  %amount = arith.andi %s, %one : vector<8xi32>
  %top = arith.andi %w, %tops : vector<8xi32>
  %shifted = arith.shrui %top, %amount : vector<8xi32>
  %0 = transformer.lane_dot_u8i8 %acc, %shifted, %x : vector<8xi32> -> vector<8xi32>
  return %0 : vector<8xi32>
}
