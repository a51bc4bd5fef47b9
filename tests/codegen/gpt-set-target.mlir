// --gpt-set-target: a CPU named as CompileOptions(target_cpu) names it becomes the module's
// gpt.target, with that CPU's own register file and the features code generation chooses by
// (whatever the host running the test has).
// RUN: gpt-opt %s --gpt-set-target="cpu=haswell" | FileCheck %s --check-prefix=HASWELL
// RUN: gpt-opt %s --gpt-set-target="cpu=alderlake" | FileCheck %s --check-prefix=ALDERLAKE
// RUN: gpt-opt %s --gpt-set-target="cpu=znver4" | FileCheck %s --check-prefix=ZNVER4
// RUN: gpt-opt %s --gpt-set-target="cpu=sapphirerapids" | FileCheck %s --check-prefix=SPR
// RUN: gpt-opt %s --gpt-set-target="cpu=aarch64:neoverse-v1" | FileCheck %s --check-prefix=NEOVERSE
// RUN: not gpt-opt %s --gpt-set-target="cpu=pentium-9000" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not gpt-opt %s --gpt-set-target="cpu=riscv64:generic" 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not gpt-opt %s --gpt-set-target 2>&1 | FileCheck %s --check-prefix=NONE

// HASWELL: module attributes {gpt.target = {cpu = "haswell", features = ["avx2", "fma"], triple = "x86_64-{{.*}}", vector_bits = 256 : i64, vector_registers = 16 : i64}}
// ALDERLAKE: module attributes {gpt.target = {cpu = "alderlake", features = ["avx2", "fma", "avxvnni", "gfni"], triple = "x86_64-{{.*}}", vector_bits = 256 : i64, vector_registers = 16 : i64}}
// ZNVER4: module attributes {gpt.target = {cpu = "znver4", features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "gfni"], triple = "x86_64-{{.*}}", vector_bits = 512 : i64, vector_registers = 32 : i64}}
// SPR: module attributes {gpt.target = {cpu = "sapphirerapids", features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "avxvnni", "amx-bf16", "amx-int8", "gfni"], triple = "x86_64-{{.*}}", vector_bits = 512 : i64, vector_registers = 32 : i64}}
// NEOVERSE: module attributes {gpt.target = {cpu = "neoverse-v1", features = ["neon", "dotprod", "bf16", "i8mm", "sve"], triple = "aarch64-unknown-linux-gnu", vector_bits = 128 : i64, vector_registers = 32 : i64}}
// UNKNOWN: error: 'pentium-9000' is not a CPU LLVM knows for x86_64
// ARCH: error: target 'riscv64:generic': unknown architecture 'riscv64'
// NONE: error: --gpt-set-target needs cpu=<name>
module {
}
