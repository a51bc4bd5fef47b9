// gpt-opt refuses input nested deeper than 1,000 brackets with an error at the bracket, before
// MLIR's parser overflows its stack (8,000 nested modules once crashed it); 1,000 levels parse.
// RUN: python3 -c "print('module {\n' * 8000 + '}\n' * 8000)" > %t.deep.mlir
// RUN: not gpt-opt %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: python3 -c "print('func.func @f() { %%0 = arith.constant dense<' + '[' * 5000 + '1' + ']' * 5000 + '> : tensor<1xf32> return }')" \
// RUN:   | not gpt-opt 2>&1 | FileCheck %s --check-prefix=ARRAY
// RUN: python3 -c "print('module {\n' * 999 + '}\n' * 999)" | gpt-opt | FileCheck %s --check-prefix=OK

// DEEP: deep.mlir:1001:8: error: input nests brackets more than 1000 levels deep ({, (, [, <); the MLIR parser would overflow its stack, so the input is refused
// DEEP-NOT: PLEASE submit a bug report
// ARRAY: <stdin>:1:{{[0-9]+}}: error: input nests brackets more than 1000 levels deep
// OK: module {
// OK-NEXT: module {
