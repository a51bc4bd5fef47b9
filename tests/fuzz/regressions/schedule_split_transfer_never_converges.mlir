func.func @one_tile(%a: memref<8x64xf32>, %w: memref<4x64x32xf32>, %out: memref<8x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c4 step %c1 {
    scf.for %m = %c0 to %c16 step %c8 {
      %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
        %x = memref.load %a[%m, %k] : memref<8x64xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<4x64x32xf32>, vector<32xf32>
        %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
        scf.yield %s : vector<32xf32>
      }
      %col = arith.muli %p, %c8 : index
      vector.transfer_write %acc, %out[%m, %col] {inXbounds = [true]} : vector<32xf32>, memref<8x128xf32>
    }
  }
  return
}
