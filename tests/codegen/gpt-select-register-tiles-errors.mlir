// --gpt-select-register-tiles refuses a gpt.target whose register file it cannot tile for (fewer
// than 128 bits, not a whole number of f32 lanes, or fewer than 8 registers), by name.
// RUN: not gpt-opt %s --split-input-file --gpt-select-register-tiles 2>&1 | FileCheck %s

// CHECK: error: gpt-select-register-tiles: unsupported register file in gpt.target (vector_bits = 96, vector_registers = 32)
module attributes {gpt.target = {cpu = "odd", triple = "x86_64-pc-linux-gnu", vector_bits = 96 : i64,
                                 vector_registers = 32 : i64, features = []}} {
  func.func @f() {
    return
  }
}

// -----

// CHECK: error: gpt-select-register-tiles: unsupported register file in gpt.target (vector_bits = 256, vector_registers = 4)
module attributes {gpt.target = {cpu = "few", triple = "x86_64-pc-linux-gnu", vector_bits = 256 : i64,
                                 vector_registers = 4 : i64, features = []}} {
  func.func @f() {
    return
  }
}
