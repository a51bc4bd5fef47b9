// --transformer-to-linalg, paged_cache_write and paged_attention: the batched step's KV pool.
// RUN: gpt-opt %s --split-input-file --transformer-to-linalg | FileCheck %s

// Each token's [H, d] row goes to block slot / S, row slot % S of the pool, in place, one head's
// d lanes at a time (vector transfers into the loop-carried pool, never a strided [H, d] copy);
// a negative slot (a padding token) writes nothing.
// CHECK-LABEL: func.func @cache_write
// CHECK-SAME: %[[U:[a-z0-9]+]]: tensor<2x3x8xf32>, %[[P:[a-z0-9]+]]: tensor<6x2x4x8xf32>, %[[S:[a-z0-9]+]]: tensor<3xi64>
// CHECK: %[[R:.*]] = scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[POOL:.*]] = %[[P]])
// CHECK:   %[[SLOT:.*]] = tensor.extract %[[S]][%[[T]]]
// CHECK:   %[[REAL:.*]] = arith.cmpi sge, %[[SLOT]], %{{.*}} : i64
// CHECK:   scf.if %[[REAL]]
// CHECK:     %[[BLOCK:.*]] = arith.divui %{{.*}}, %[[C4:.*]] : index
// CHECK:     %[[ROW:.*]] = arith.remui %{{.*}}, %[[C4]] : index
// CHECK:     scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[HPOOL:.*]] = %[[POOL]])
// CHECK:       %[[LANES:.*]] = vector.transfer_read %[[U]][%[[H]], %[[T]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x3x8xf32>, vector<8xf32>
// CHECK:       %[[W:.*]] = vector.transfer_write %[[LANES]], %[[HPOOL]][%[[BLOCK]], %[[H]], %[[ROW]], %{{.*}}] {in_bounds = [true]} : vector<8xf32>, tensor<6x2x4x8xf32>
// CHECK:       scf.yield %[[W]]
// CHECK:   } else {
// CHECK:     scf.yield %[[POOL]]
// CHECK: return %[[R]]
func.func @cache_write(%u: tensor<2x3x8xf32>, %p: tensor<6x2x4x8xf32>, %s: tensor<3xi64>) -> tensor<6x2x4x8xf32> {
  %0 = transformer.paged_cache_write %u into %p[%s] : tensor<2x3x8xf32>, tensor<6x2x4x8xf32>, tensor<3xi64> -> tensor<6x2x4x8xf32>
  return %0 : tensor<6x2x4x8xf32>
}

// -----

// Tokens in parallel (scf.forall); per token the blocks 0 .. position / S of its sequence's table
// row, each read where it lies in the pool ([1, 1, S, d] slices at the block id the table gives).
// Blocks outside, heads inside: a block's slices of every head in turn (one contiguous piece of
// the pool), each head's online-softmax state a row of the [H], [H] and [H, d] state that the
// block loop carries. The blocks before the last are full tiles: an online softmax step with no
// mask. The last one, holding the token's position, is the partial tile: its keys past the
// position are masked (index < position - last * S + 1). Then acc / l for every head.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x3x8xf32>, %[[KP:[a-z0-9]+]]: tensor<6x2x4x8xf32>, %[[VP:[a-z0-9]+]]: tensor<6x2x4x8xf32>, %[[TABLES:[a-z0-9]+]]: tensor<2x2xi64>, %[[SEQS:[a-z0-9]+]]: tensor<3xi64>, %[[POS:[a-z0-9]+]]: tensor<3xi64>
// CHECK: scf.forall (%[[T:.*]]) in (3) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<2x3x8xf32>)
// CHECK:   %[[P:.*]] = tensor.extract %[[POS]][%[[T]]] : tensor<3xi64>
// CHECK:   %[[B:.*]] = tensor.extract %[[SEQS]][%[[T]]] : tensor<3xi64>
// CHECK:   %[[SEQ:.*]] = arith.index_cast %[[B]]
// CHECK:   %[[LAST:.*]] = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:   %[[LASTSTART:.*]] = arith.muli %[[LAST]], %{{.*}} : index
// CHECK:   %[[SINCE:.*]] = arith.subi %{{.*}}, %[[LASTSTART]] : index
// CHECK:   %[[VISIBLE:.*]] = arith.addi %[[SINCE]], %{{.*}} : index
// CHECK:   %[[LASTID:.*]] = tensor.extract %[[TABLES]][%[[SEQ]], %[[LAST]]] : tensor<2x2xi64>
// CHECK:   %[[LASTBLK:.*]] = arith.index_cast %[[LASTID]]
// CHECK:   %[[FULL:.*]]:3 = scf.for %[[I:.*]] = %{{.*}} to %[[LAST]] step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<2xf32>, tensor<2xf32>, tensor<2x8xf32>)
// CHECK:     %[[ID:.*]] = tensor.extract %[[TABLES]][%[[SEQ]], %[[I]]] : tensor<2x2xi64>
// CHECK:     %[[BLK:.*]] = arith.index_cast %[[ID]]
// CHECK:     scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[M:.*]] = %{{.*}}, %[[L:.*]] = %{{.*}}, %[[ACC:.*]] = %{{.*}}) -> (tensor<2xf32>, tensor<2xf32>, tensor<2x8xf32>)
// CHECK:       tensor.extract_slice %[[M]][%[[H]]] [1] [1] : tensor<2xf32> to tensor<1xf32>
// CHECK:       tensor.extract_slice %[[ACC]][%[[H]], 0] [1, 8] [1, 1] : tensor<2x8xf32> to tensor<1x8xf32>
// CHECK:       tensor.extract_slice %[[KP]][%[[BLK]], %[[H]], 0, 0] [1, 1, 4, 8] [1, 1, 1, 1] : tensor<6x2x4x8xf32> to tensor<4x8xf32>
// CHECK:       tensor.extract_slice %[[VP]][%[[BLK]], %[[H]], 0, 0] [1, 1, 4, 8] [1, 1, 1, 1] : tensor<6x2x4x8xf32> to tensor<4x8xf32>
// CHECK:       linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK-NOT:   arith.cmpi
// CHECK:       math.exp
// CHECK-NOT:   arith.cmpi
// CHECK:       linalg.matmul {{.*}} -> tensor<1x8xf32>
// CHECK:       tensor.insert_slice %{{.*}} into %[[ACC]][%[[H]], 0] [1, 8] [1, 1] : tensor<1x8xf32> into tensor<2x8xf32>
// CHECK:       scf.yield
// CHECK:   scf.for %[[H2:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[FULL]]#0, %{{.*}} = %[[FULL]]#1, %{{.*}} = %[[FULL]]#2)
// CHECK:     tensor.extract_slice %[[KP]][%[[LASTBLK]], %[[H2]], 0, 0] [1, 1, 4, 8]
// CHECK:     tensor.extract_slice %[[VP]][%[[LASTBLK]], %[[H2]], 0, 0] [1, 1, 4, 8]
// CHECK:     %[[KEY:.*]] = linalg.index 1 : index
// CHECK:     arith.cmpi ult, %[[KEY]], %[[VISIBLE]] : index
// CHECK:     math.exp
// CHECK:     linalg.matmul {{.*}} -> tensor<1x8xf32>
// CHECK:   arith.divf
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice
func.func @attention(%q: tensor<2x3x8xf32>, %kp: tensor<6x2x4x8xf32>, %vp: tensor<6x2x4x8xf32>, %tables: tensor<2x2xi64>, %seqs: tensor<3xi64>, %pos: tensor<3xi64>) -> tensor<2x3x8xf32> {
  %a = transformer.paged_attention %q, %kp, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32}
      : tensor<2x3x8xf32>, tensor<6x2x4x8xf32>, tensor<6x2x4x8xf32>, tensor<2x2xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<2x3x8xf32>
  return %a : tensor<2x3x8xf32>
}

// -----

// A sliding window of W = 6: the first visible position is max(position + 1 - 6, 0), in block
// first / S at offset first % S. That block, when it comes before the last, is visited by a loop
// of zero or one iteration and masked below the offset (index >= offset); the full blocks run
// from the one after it to the last, unmasked; the blocks before the window are not visited. The
// last block is masked past the position and, when the window starts inside it, below the offset.
// CHECK-LABEL: func.func @window
// CHECK: scf.forall
// CHECK:   %[[LAST:.*]] = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:   tensor.extract %{{.*}}[%{{.*}}, %[[LAST]]] : tensor<2x2xi64>
// CHECK:   %[[END:.*]] = arith.addi %{{.*}}, %[[ONE:.*]] : index
// CHECK:   %[[BEYOND:.*]] = arith.cmpi ugt, %[[END]], %[[W:.*]] : index
// CHECK:   %[[START:.*]] = arith.subi %[[END]], %[[W]] : index
// CHECK:   %[[FIRST:.*]] = arith.select %[[BEYOND]], %[[START]], %{{.*}} : index
// CHECK:   %[[FIRSTBLOCK:.*]] = arith.divui %[[FIRST]], %{{.*}} : index
// CHECK:   %[[FIRSTSTART:.*]] = arith.muli %[[FIRSTBLOCK]], %{{.*}} : index
// CHECK:   %[[OFFSET:.*]] = arith.subi %[[FIRST]], %[[FIRSTSTART]] : index
// CHECK:   %[[AFTER:.*]] = arith.addi %[[FIRSTBLOCK]], %[[ONE]] : index
// CHECK:   %[[FULLSTART:.*]] = arith.minui %[[AFTER]], %[[LAST]] : index
// CHECK:   %[[SAME:.*]] = arith.cmpi eq, %[[FIRSTBLOCK]], %[[LAST]] : index
// CHECK:   %[[LASTLOWER:.*]] = arith.select %[[SAME]], %[[OFFSET]], %{{.*}} : index
// CHECK:   scf.for %{{.*}} = %[[FIRSTBLOCK]] to %[[FULLSTART]] step
// CHECK:     scf.for
// CHECK:       %[[KEY:.*]] = linalg.index 1 : index
// CHECK:       arith.cmpi uge, %[[KEY]], %[[OFFSET]] : index
// CHECK:       math.exp
// CHECK:   scf.for %{{.*}} = %[[FULLSTART]] to %[[LAST]] step
// CHECK-NOT:   arith.cmpi
// CHECK:       math.exp
// CHECK-NOT:   arith.cmpi
// CHECK:       scf.yield
// CHECK:     %[[KEY2:.*]] = linalg.index 1 : index
// CHECK:     %[[BEFORE:.*]] = arith.cmpi ult, %[[KEY2]], %{{.*}} : index
// CHECK:     %[[INWINDOW:.*]] = arith.cmpi uge, %[[KEY2]], %[[LASTLOWER]] : index
// CHECK:     arith.andi %[[BEFORE]], %[[INWINDOW]] : i1
func.func @window(%q: tensor<2x3x8xf32>, %kp: tensor<6x2x4x8xf32>, %vp: tensor<6x2x4x8xf32>, %tables: tensor<2x2xi64>, %seqs: tensor<3xi64>, %pos: tensor<3xi64>) -> tensor<2x3x8xf32> {
  %a = transformer.paged_attention %q, %kp, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32, window = 6 : i64}
      : tensor<2x3x8xf32>, tensor<6x2x4x8xf32>, tensor<6x2x4x8xf32>, tensor<2x2xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<2x3x8xf32>
  return %a : tensor<2x3x8xf32>
}

// -----

// A step of a single token (one sequence decoding) splits its heads in two groups, one forall
// iteration each, so that both threads work on it: iteration i is token i / 2 with heads
// (i % 2) * H/2 .. (i % 2 + 1) * H/2 - 1, writing its [H/2, d] slice.
// CHECK-LABEL: func.func @one_token
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x1x8xf32>, %[[KP:[a-z0-9]+]]: tensor<6x2x4x8xf32>
// CHECK: scf.forall (%[[I:.*]]) in (2) shared_outs(%[[OUT:.*]] = %{{.*}}) -> (tensor<2x1x8xf32>)
// CHECK:   %[[T:.*]] = arith.divui %[[I]], %[[C2:.*]] : index
// CHECK:   %[[GROUP:.*]] = arith.remui %[[I]], %[[C2]] : index
// CHECK:   %[[FIRST:.*]] = arith.muli %[[GROUP]], %{{.*}} : index
// CHECK:   tensor.extract_slice %[[OUT]][%[[FIRST]], %[[T]], 0] [1, 1, 8] [1, 1, 1] : tensor<2x1x8xf32> to tensor<1x8xf32>
// CHECK:   scf.for
// CHECK:     scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (tensor<1xf32>, tensor<1xf32>, tensor<1x8xf32>)
// CHECK:       %[[HEAD:.*]] = arith.addi %[[FIRST]], %[[ROW]] : index
// CHECK:       tensor.extract_slice %[[Q]][%[[HEAD]], %[[T]], 0] [1, 1, 8]
// CHECK:       tensor.extract_slice %[[KP]][%{{.*}}, %[[HEAD]], 0, 0] [1, 1, 4, 8]
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice %{{.*}} into %[[OUT]][%[[FIRST]], %[[T]], 0] [1, 1, 8] [1, 1, 1] : tensor<1x8xf32> into tensor<2x1x8xf32>
func.func @one_token(%q: tensor<2x1x8xf32>, %kp: tensor<6x2x4x8xf32>, %vp: tensor<6x2x4x8xf32>, %tables: tensor<1x2xi64>, %seqs: tensor<1xi64>, %pos: tensor<1xi64>) -> tensor<2x1x8xf32> {
  %a = transformer.paged_attention %q, %kp, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32}
      : tensor<2x1x8xf32>, tensor<6x2x4x8xf32>, tensor<6x2x4x8xf32>, tensor<1x2xi64>, tensor<1xi64>, tensor<1xi64> -> tensor<2x1x8xf32>
  return %a : tensor<2x1x8xf32>
}

// -----

// Grouped-query attention: 4 query heads over pools of 2 key/value heads. Query head h reads the
// pools' head h / 2, for its keys and its values alike.
// CHECK-LABEL: func.func @grouped_query_attention
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<4x3x8xf32>, %[[KP:[a-z0-9]+]]: tensor<6x2x4x8xf32>, %[[VP:[a-z0-9]+]]: tensor<6x2x4x8xf32>
// CHECK: scf.forall (%{{.*}}) in (3) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<4x3x8xf32>)
// CHECK:     scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>)
// CHECK:       tensor.extract_slice %[[Q]][%[[H]], %{{.*}}, 0] [1, 1, 8] [1, 1, 1] : tensor<4x3x8xf32> to tensor<8xf32>
// CHECK:       %[[G:.*]] = arith.divui %[[H]], %c2{{.*}} : index
// CHECK:       tensor.extract_slice %[[KP]][%{{.*}}, %[[G]], 0, 0] [1, 1, 4, 8] [1, 1, 1, 1] : tensor<6x2x4x8xf32> to tensor<4x8xf32>
// CHECK:       tensor.extract_slice %[[VP]][%{{.*}}, %[[G]], 0, 0] [1, 1, 4, 8] [1, 1, 1, 1] : tensor<6x2x4x8xf32> to tensor<4x8xf32>
func.func @grouped_query_attention(%q: tensor<4x3x8xf32>, %kp: tensor<6x2x4x8xf32>, %vp: tensor<6x2x4x8xf32>,
                                   %tables: tensor<2x2xi64>, %seqs: tensor<3xi64>, %pos: tensor<3xi64>) -> tensor<4x3x8xf32> {
  %0 = transformer.paged_attention %q, %kp, %vp tables %tables sequences %seqs positions %pos {scale = 0.5 : f32}
      : tensor<4x3x8xf32>, tensor<6x2x4x8xf32>, tensor<6x2x4x8xf32>, tensor<2x2xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<4x3x8xf32>
  return %0 : tensor<4x3x8xf32>
}
