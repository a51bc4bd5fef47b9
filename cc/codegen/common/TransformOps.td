// Transform-dialect extension ops (`transform.gpt.*`) that apply the decisions the codegen passes
// record as `gpt.*` attributes: the schedule names an attribute, and the op reads the tile, the
// thread split or the fused operand from each payload op. One schedule block then serves every
// tile shape, and a new shape is one row of the tile table in SelectRegisterTiles.cpp.
#ifndef GPT_CC_CODEGEN_TRANSFORMOPS_TD
#define GPT_CC_CODEGEN_TRANSFORMOPS_TD

include "mlir/Dialect/Transform/IR/TransformDialect.td"
include "mlir/Dialect/Transform/Interfaces/TransformInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpBase.td"

class GptTransformOp<string mnemonic, list<Trait> traits = []>
    : Op<Transform_Dialect, "gpt." # mnemonic, traits # [DeclareOpInterfaceMethods<TransformOpInterface>]> {
  let cppNamespace = "::gpt::codegen";
}

def MatchAttributeOp : GptTransformOp<"match_attribute", [MemoryEffectsOpInterface, NavigationTransformOpTrait]> {
  let summary = "Every op nested in the target that carries a named gpt.* attribute";
  let description = [{
    Returns a handle to the ops under `root` (in pre-order) that carry the attribute `name`,
    whatever its value: upstream `transform.structured.match` compares values, and a schedule
    that listed every value would repeat the tile table. `name` must be one of the attributes of
    cc/codegen/common/CodegenAttributes.h.

    ```mlir
    %tiled = transform.gpt.match_attribute "gpt.register_tile" in %root
        : (!transform.any_op) -> !transform.any_op
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$root, StrAttr:$name);
  let results = (outs TransformHandleTypeInterface:$result);
  let assemblyFormat = "$name `in` $root attr-dict `:` functional-type(operands, results)";
}

def TileByAttributeOp : GptTransformOp<"tile_by_attribute", [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface]> {
  let summary = "Tile each target with scf.for loops by the tile its attribute records";
  let description = [{
    For each target, reads the tile sizes from the attribute `name` (`gpt.register_tile` or
    `gpt.epilogue_tile`) and the loop order from `gpt.tile_interchange` when present, and tiles
    it as `transform.structured.tile_using_for` would with those sizes. Returns the tiled ops and
    one handle to all the loops created, outermost first (interchanged order), target by target.

    ```mlir
    // %op carries {gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]}
    %tile, %loops = transform.gpt.tile_by_attribute %op "gpt.register_tile"
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$target, StrAttr:$name);
  let results = (outs TransformHandleTypeInterface:$tiled, TransformHandleTypeInterface:$loops);
  let assemblyFormat = "$target $name attr-dict `:` functional-type(operands, results)";
}

def TileReductionByAttributeOp
    : GptTransformOp<"tile_reduction_by_attribute", [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface]> {
  let summary = "Tile the reduction of each row-reduction target by its gpt.row_reduction_tile";
  let description = [{
    For each target (a rank-2 generic reducing its second loop, marked
    `gpt.row_reduction_tile = w`), does what `transform.structured.tile_reduction_using_for
    %target by tile_sizes = [0, w]` does: `w` partial results are kept across the row and combined
    at its end. Returns the fill of the partial results, the partial reduction, the combining op
    and the loop.

    ```mlir
    %init, %partial, %combine, %loop = transform.gpt.tile_reduction_by_attribute %row
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$fill, TransformHandleTypeInterface:$partial,
                      TransformHandleTypeInterface:$combine, TransformHandleTypeInterface:$loop);
  let assemblyFormat = "$target attr-dict `:` functional-type(operands, results)";
}

def SplitForThreadsOp : GptTransformOp<"split_for_threads", [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface]> {
  let summary = "Split each target into the pieces its gpt.parallel_chunks records, one scf.forall";
  let description = [{
    For each target, reads the number of pieces per loop from `gpt.parallel_chunks` (or, for an
    epilogue generic, `gpt.epilogue_chunks` pieces of its panel loop: `[0, k]`) and does what
    `transform.structured.tile_using_forall %target num_threads [...]` does with them.
    Returns the pieces (ops inside the `scf.forall`, keeping the target's attributes) and the
    `scf.forall` loops.

    ```mlir
    // %op carries {gpt.parallel_chunks = [0, 4]}
    %chunk, %forall = transform.gpt.split_for_threads %op
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$chunks, TransformHandleTypeInterface:$forall);
  let assemblyFormat = "$target attr-dict `:` functional-type(operands, results)";
}

def GetEpilogueMatmulOp : GptTransformOp<"get_epilogue_matmul", [MemoryEffectsOpInterface, NavigationTransformOpTrait]> {
  let summary = "The packed matmul an epilogue generic computes inside its tiles, and its fill";
  let description = [{
    For each target (a generic marked `gpt.epilogue_operand = i`), the producer of its input
    `i` (the matmul: `transform.get_producer_of_operand %target[i]` with `i` read from the
    payload), and the producer of that matmul's init operand (its zero fill), wherever the
    matmul's inputs end: a block-quantized weight's matmul has more inputs than a plain one.

    ```mlir
    %matmul, %fill = transform.gpt.get_epilogue_matmul %epilogue
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$matmul, TransformHandleTypeInterface:$fill);
  let assemblyFormat = "$target attr-dict `:` functional-type(operands, results)";
}

def FuseIntoLoopOp : GptTransformOp<"fuse_into_loop", [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Fuse each producer into the loop that reads slices of its result";
  let description = [{
    What `transform.structured.fuse_into_containing_op` does on its first path: each
    `tensor.extract_slice` of a producer's result inside `loop` (an `scf.for` or `scf.forall`)
    is replaced by the producer's tile at that slice (`TilingInterface::generateResultTileValue`).
    Returns the tiled producers and `loop`. Uses of a producer outside the loop (a zero fill that
    CSE shared between matmuls) keep the producer itself, as upstream's op keeps them for any
    producer but a `linalg.generic`.

    It exists because MLIR 19's op prints the producer and the whole containing loop into a
    diagnostic on every call, whether or not the fusion fails: that text was 6% of every JIT
    compile. Its other paths (through a `scf.forall`'s shared outputs, by cloning, or yielding
    a generic's result for uses after the loop) are never taken by these schedules: a producer
    the loop does not read in slices is a silenceable failure.

    ```mlir
    %fused, %loop2 = transform.gpt.fuse_into_loop %matmul into %rows
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$producer, TransformHandleTypeInterface:$loop);
  let results = (outs TransformHandleTypeInterface:$fused, TransformHandleTypeInterface:$new_loop);
  let assemblyFormat = "$producer `into` $loop attr-dict `:` functional-type(operands, results)";
}

def VectorizeBlockMatmulOp : GptTransformOp<"vectorize_block_matmul", [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface]> {
  let summary = "Vectorize the tiles of low-precision packed matmuls, with their partial sums; return the other targets";
  let description = [{
    A block-quantized packed matmul is the sum over K blocks of its `gpt.block_partials` (per
    block, activation codes times weight codes, with `transformer.lane_dot_u8i8`) times the
    block's scales. For each target that is a tile of such a matmul stepped one block at a time
    (its partial sums reached through slices), this op
    - fuses the block's partial sums at the tile, starting from zeros of their own (a new fill:
      the untiled partial sums die and are never stored), and steps them one lane at a time;
      the first step reads those zeros as a constant, so no buffer of zeros is written per block;
    - drops the unit loops of both (`linalg::dropUnitDims`, rank-reducing slices; all but M),
      leaving `acc[m, c] = lane_dot(acc[m, c], code[c], x[m])` per step and
      `out[m, c] = fma(acc[m, c] - comp[m], scale[c] * d[m], out[m, c])` per block: the
      vectorizer recognizes no lane dot as a reduction's combiner, and a contraction with unit
      reduction dims would not lower to outer products;
    - vectorizes them, reading each row's activation as one value broadcast along its row
      instead of the column of M activations (`K` apart) broadcast and transposed that the
      vectorizer reads, which lowers to a serial gather and shuffles;
    - unrolls the partial sums' loop over the block's lanes (8 steps for q8_0, 4 for q4_0): the
      JIT's LLVM pipeline does not unroll. Partial sums whose step is a whole block (the
      K-quants' 8 blocks of a super-block, `gpt.block_partials = 8`) keep that loop: unrolled,
      LLVM hoisted 8 blocks' loads ahead of their use and spilled.
    A tile of a bf16 packed matmul (accumulating with `transformer.lane_dot_bf16`, stepped one
    lane of K at a time) gets the second and third steps only. The other targets (f32 tiles) are returned,
    for `transform.structured.vectorize`.

    ```mlir
    %rest = transform.gpt.vectorize_block_matmul %tile : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %rest : !transform.any_op
    ```
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$rest);
  let assemblyFormat = "$target attr-dict `:` functional-type(operands, results)";
}

def ApplyElementwiseOnSplatsPatternsOp : Op<Transform_Dialect, "apply_patterns.gpt.elementwise_on_splats",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let cppNamespace = "::gpt::codegen";
  let summary = "Elementwise ops on a broadcast value computed once, before the broadcast";
  let description = [{
    Inside `transform.apply_patterns`: the patterns of ElementwiseOnSplats.h (an elementwise op
    on broadcasts from vectors of one shape computed on that shape, then broadcast), which keep
    `reduction_to_contract` from leaving a row's statistic on a [N, 1] vector, and a register
    tile from decoding a column's scale once per row.

    ```mlir
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.gpt.elementwise_on_splats
    } : !transform.any_op
    ```
  }];
  let assemblyFormat = "attr-dict";
}

#endif // GPT_CC_CODEGEN_TRANSFORMOPS_TD
