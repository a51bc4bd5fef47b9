// Operations of the `transformer` dialect.
#ifndef GPT_TRANSFORMER_OPS_TD
#define GPT_TRANSFORMER_OPS_TD

include "cc/dialect/TransformerDialect.td"
include "cc/dialect/ShapeInferenceInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Keys and values as a KV cache stores them: f32, a half-width format (f16, bf16) that
// attention widens to f32 as it reads them, or q8_0 as i8: each row of head_dim values is its
// head_dim int8 codes followed by its head_dim / 32 fp16 scales as 2 bytes each (llama.cpp's
// block_q8_0 per 32 values, head_dim * 17/16 bytes a row), which attention dequantizes.
def Transformer_KvCacheTensor : TensorOf<[F32, F16, BF16, I8]>;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Transformer_ConstantOp : Transformer_Op<"constant",
    [ConstantLike, Pure, InferTypeOpAdaptor]> {
  let summary = "A constant f32 tensor";
  let description = [{
    Holds its data in the `value` attribute; the result type is the attribute's type.
    Model weights are function arguments, not constants: this op is for small literals.

    ```mlir
    %c = transformer.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
    ```
  }];
  let arguments = (ins FloatElementsAttr<32>:$value);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

// Binary elementwise op with numpy-style broadcasting (shapes aligned on the trailing dims).
class Transformer_BroadcastBinaryOp<string mnemonic, string algebra>
    : Transformer_Op<mnemonic,
        [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Elementwise " # algebra # " with numpy-style broadcasting";
  let description = [{
    Operand shapes are aligned on their trailing dimensions; each pair of dimensions must be
    equal or one of them must be 1 (numpy broadcasting), so a bias `tensor<N>` combines with
    activations `tensor<MxN>`.

    ```mlir
    %y = transformer.}] # mnemonic # [{ %x, %bias : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$lhs, F32Tensor:$rhs);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  // The same verifier and shape function for every such op, written once here rather than per op.
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::verify() { return verifyBroadcast(*this); }
    ::mlir::LogicalResult $cppClass::inferShapes() { return refineBroadcast(*this); }
  }];
}

def Transformer_AddOp : Transformer_BroadcastBinaryOp<"add", "addition">;
def Transformer_MulOp : Transformer_BroadcastBinaryOp<"mul", "multiplication">;

// Unary op whose result has the shape of its operand, of rank `minRank` at least: its verifier and
// shape function are the same for every such op, written once here rather than per op.
class Transformer_UnaryOp<string mnemonic, string meaning, int minRank = 0>
    : Transformer_Op<mnemonic, [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let arguments = (ins F32Tensor:$input);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::verify() { return verifySameShape(*this, }] # minRank # [{); }
    ::mlir::LogicalResult $cppClass::inferShapes() { return refineSameShape(*this, }] # minRank # [{); }
  }];
  let description = meaning # [{

    ```mlir
    %y = transformer.}] # mnemonic # [{ %x : tensor<4x8xf32> -> tensor<4x8xf32>
    ```
  }];
}

def Transformer_NegOp : Transformer_UnaryOp<"neg", "Elementwise negation: `-x`."> {
  let summary = "Elementwise negation";
  let hasCanonicalizer = 1;
}

def Transformer_ReluOp : Transformer_UnaryOp<"relu", "Elementwise rectified linear unit: `max(x, 0)`."> {
  let summary = "Elementwise ReLU";
}

def Transformer_GeluOp : Transformer_UnaryOp<"gelu", [{
    Elementwise GELU, tanh approximation (as in GPT-2):
    `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`.}]> {
  let summary = "Elementwise GELU (tanh approximation)";
}

// Softmax normalizes over the last dimension, so it needs one.
def Transformer_SoftmaxOp : Transformer_UnaryOp<"softmax",
    "Softmax over the last dimension: `exp(x - max(x)) / sum(exp(x - max(x)))`.", 1> {
  let summary = "Softmax over the last dimension";
}

//===----------------------------------------------------------------------===//
// Shape and contraction ops
//===----------------------------------------------------------------------===//

def Transformer_TransposeOp : Transformer_Op<"transpose",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Swaps the last two dimensions";
  let description = [{
    Exchanges the two innermost dimensions of a tensor of rank 2 or more; leading (batch)
    dimensions are kept in place.

    ```mlir
    %t = transformer.transpose %x : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Transformer_MatmulOp : Transformer_Op<"matmul",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Matrix product, batched on leading dimensions";
  let description = [{
    `[..., M, K] x [..., K, N] -> [..., M, N]`. Both operands have rank 2 or more. The leading
    (batch) dimensions of the two operands must be equal, or the right operand may have rank 2,
    in which case the same matrix (a weight) multiplies every batch of the left operand.

    ```mlir
    %y = transformer.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %s = transformer.matmul %q, %kt : (tensor<12x64x64xf32>, tensor<12x64x64xf32>) -> tensor<12x64x64xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$lhs, F32Tensor:$rhs);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1; // recovers causal_attention (RecoverWrittenOutOps.h)
}

def Transformer_PackedMatmulOp : Transformer_Op<"packed_matmul",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Product with a weight stored in column panels";
  let description = [{
    `[..., M, K] x [N / P, K, P] -> [..., M, N]`: the same product as `transformer.matmul` with a
    `[K, N]` weight `w`, whose columns are stored as `N / P` contiguous panels of width `P`:
    `packed[j / P, k, j % P] = w[k, j]`. The runtime repacks each weight once, at load; a
    register tile `P` columns wide then reads its whole slice of the weight from consecutive
    addresses, so prefill matmuls stay in cache and decode streams the weight sequentially.

    The weight's format is the op's first word: one of the weight-format table's names
    (`cc/kernels/WeightFormats.h`), whose row also gives the operands' shapes: the weight is
    `[N / P, K * b / 32, P]` (32-bit words of `b`-bit codes per column, `b` the row's `codeBits`;
    `f32`: `[N / P, K, P]` of floats), and a block format's `scales` are `[N / P, K / B * S, P] x
    f16`, `S` 16-bit rows (the row's `scaleRows`) per block of `B` weights (`blockValues`) along K.
    An `f32` weight multiplies f32 activations.
    The low-precision formats store the weights one 32-bit **lane** at a time: each `i32` holds
    the weights of one column that one 32-bit lane of a dot product multiplies (2 bf16 pairs or 4
    byte pairs: the unit of x86's `vdpbf16ps` and `vpdpbusd`, and of AArch64's `bfdot` and
    `sdot`), and the activations are converted to match at run time (see
    `transformer.lane_dot_bf16` and `lane_dot_u8i8`, whose meaning is their own arithmetic, not
    one CPU's instruction). Which rows of K a lane holds is chosen for the activations: those that
    one lane of them holds, taken from contiguous runs of an activation row (whole vectors, no
    gather). `bf16`'s lane `[p, r, c]` holds rows `r` (low half) and `r + K / 2` (high half) of
    column `j = p * P + c`; a block format's rows of a lane, and its `S` scale rows of a block (its
    fp16 scale, a min beside it where the format has mins, a K-quant's sub-block scales and
    super-block `d`), are in the order its section of `cc/kernels/FormatKernels.h` gives.
    `bf16` rounds the activations to bf16 (to nearest even) and accumulates the products in f32.
    Block formats quantize each row of the activations per block of 32 along K, as llama.cpp
    does: `d = max|x| / 127`, `code = round_even(x * min(1 / d, FLT_MAX))` (0 where `d = 0`;
    the cap keeps a block with max |x| below ~3.7e-37 finite); a block contributes
    `d_w * d_x * sum(code_x * code_w)`, the sum exact in i32; a format's mins, sub-block scales
    and code offsets enter as llama.cpp's product of that format with its q8 activation blocks
    computes them. Each format's arithmetic is in `cc/conversion/MatmulLowering.cpp`, and what its
    weights are in `docs/USAGE.md`. A NaN or infinite activation makes its row of the result NaN.

    ```mlir
    %y = transformer.packed_matmul f32 %x, %w : (tensor<8x768xf32>, tensor<96x768x32xf32>) -> tensor<8x3072xf32>
    %z = transformer.packed_matmul bf16 %x, %h : (tensor<8x768xf32>, tensor<96x384x32xi32>) -> tensor<8x3072xf32>
    %q = transformer.packed_matmul q8_0 %x, %c, %d
        : (tensor<8x768xf32>, tensor<96x192x32xi32>, tensor<96x24x32xf16>) -> tensor<8x3072xf32>
    %t = transformer.packed_matmul q4_k %x, %c4, %s
        : (tensor<8x768xf32>, tensor<96x96x32xi32>, tensor<96x30x32xf16>) -> tensor<8x3072xf32>
    ```
  }];
  let arguments = (ins StrAttr:$format, F32Tensor:$lhs, TensorOf<[F32, I32]>:$rhs,
                       Optional<TensorOf<[F16]>>:$scales);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = [{
    custom<WeightFormatName>($format) $lhs `,` $rhs (`,` $scales^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Weights per scale of the 32-weight block formats (llama.cpp's QK8_0 and its kin), and per
    /// sub-block of the K-quants.
    static constexpr int64_t kBlockSize = 32;
    /// q4_K's super-block (QK_K) and its scale rows: 8 sub-blocks' scale and min, d and dmin.
    static constexpr int64_t kSuperBlockSize = 256;
    static constexpr int64_t kQ4_KScaleRows = 10;
    /// q5_K's lane words per sub-block: q4_K's 4 nibble words and one of fifth bits (q4_K's scales);
    /// q5_0's and q5_1's per block likewise.
    static constexpr int64_t kQ5_KWordsPerBlock = 5;
    /// q6_K's runs of 16 weights (one int8 scale each), their 3 lanes, and its scale rows per
    /// super-block: 8 rows of two run scales, and d.
    static constexpr int64_t kQ6_KRunSize = 16;
    static constexpr int64_t kQ6_KWordsPerRun = 3;
    static constexpr int64_t kQ6_KScaleRows = 9;
    /// The weight's format: the row of the weight-format table `format` names (the verifier
    /// checks that it names one).
    const ::gpt::WeightFormatTraits &getWeightFormat();
  }];
}

class Transformer_LaneDotOp<string mnemonic, Type accumulator, string meaning>
    : Transformer_Op<mnemonic, [Pure, ElementwiseMappable, AllTypesMatch<["accumulator", "result"]>,
                                AllTypesMatch<["lhs", "rhs"]>]> {
  let arguments = (ins AnyTypeOf<[accumulator, VectorOf<[accumulator]>]>:$accumulator,
                       AnyTypeOf<[I32, VectorOf<[I32]>]>:$lhs, AnyTypeOf<[I32, VectorOf<[I32]>]>:$rhs);
  let results = (outs AnyTypeOf<[accumulator, VectorOf<[accumulator]>]>:$result);
  let assemblyFormat = "$accumulator `,` $lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
  let description = meaning # [{

    Elementwise on scalars or vectors (a vector of lanes and its accumulators, of one shape), so
    that linalg's vectorizer widens it like any arith op; `--gpt-lower-lane-dots` then emits
    the instructions of the module's target (`gpt.target`) that compute it, and the same
    arithmetic in plain integer and float ops where the target has none.
  }];
}

def Transformer_LaneDotBf16Op : Transformer_LaneDotOp<"lane_dot_bf16", F32, [{
    A dot product of two bf16 pairs into f32: `lhs` and `rhs` each hold two bf16 values (low
    half, high half); the result is `accumulator + lhs.high * rhs.high + lhs.low * rhs.low`, each
    product exact in f32 and added in that order. This is one 32-bit lane of x86's `vdpbf16ps`
    (AVX512-BF16), which computes it where the target has it; that instruction also flushes
    subnormal inputs and results to zero, which the plain-arithmetic lowering does not: the two
    agree wherever no subnormal occurs.

    ```mlir
    %s = transformer.lane_dot_bf16 %acc, %x, %w : vector<32xi32> -> vector<32xf32>
    ```
  }]> {
  let summary = "Multiply-add of two bf16 pairs into an f32 accumulator";
}

def Transformer_LaneDotU8I8Op : Transformer_LaneDotOp<"lane_dot_u8i8", I32, [{
    A dot product of four byte pairs into i32: `lhs` holds four unsigned bytes and `rhs` four
    signed bytes; the result is `accumulator + sum over i of lhs.byte(i) * rhs.byte(i)` in i32
    (wrapping). x86 computes it with `vpdpbusd` (AVX512-VNNI, AVX-VNNI) or exactly with two
    `vpmaddwd` (AVX2, AVX512-BW); AArch64's `usdot` (i8mm) is the same lane.

    ```mlir
    %s = transformer.lane_dot_u8i8 %acc, %w, %x : vector<32xi32> -> vector<32xi32>
    ```
  }]> {
  let summary = "Multiply-add of four unsigned by signed byte pairs into an i32 accumulator";
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

def Transformer_LayerNormOp : Transformer_Op<"layer_norm",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    `(x - mean(x)) / sqrt(var(x) + epsilon) * weight + bias`, with mean and (biased) variance
    taken over the last dimension. `weight` and `bias` are rank-1 tensors of the size of that
    dimension.

    ```mlir
    %y = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-05 : f32}
        : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, F32Tensor:$weight, F32Tensor:$bias,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Transformer_RmsNormOp : Transformer_Op<"rms_norm",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "RMS normalization over the last dimension";
  let description = [{
    `x * rsqrt(mean(x^2) + epsilon) * weight`, the mean taken over the last dimension (Llama's
    RMSNorm: no centering, no bias). `weight` is a rank-1 tensor of the size of that dimension.

    ```mlir
    %y = transformer.rms_norm %x, %w {epsilon = 1.0e-05 : f32}
        : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, F32Tensor:$weight, DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Model-level ops
//===----------------------------------------------------------------------===//

def Transformer_SwigluOp : Transformer_Op<"swiglu",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "SiLU-gated product: silu(gate) * up";
  let description = [{
    `result = gate * sigmoid(gate) * up`, elementwise, on two tensors of one shape: the gated
    product of a SwiGLU MLP (Llama, Qwen2), `down(swiglu(gate(x), up(x)))`.

    ```mlir
    %h = transformer.swiglu %gate, %up : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$gate, F32Tensor:$up);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$gate `,` $up attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Transformer_EmbeddingOp : Transformer_Op<"embedding",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Gathers rows of an embedding table";
  let description = [{
    `result[t, :] = table[ids[t], :]`. The table is `[V, D]`, the ids a rank-1 tensor of `i64`.
    Ids outside `[0, V)` are the caller's error; the lowering clamps them so that compiled code
    never reads outside the table.

    ```mlir
    %x = transformer.embedding %wte, %ids : (tensor<256x64xf32>, tensor<8xi64>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$table, TensorOf<[I64]>:$ids);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$table `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Transformer_PackedEmbeddingOp : Transformer_Op<"packed_embedding",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Gathers rows of an embedding table stored as a packed matmul weight";
  let description = [{
    `result[t, :] = table[ids[t], :]`, where the `[V, D]` table is the transpose of the `[D, V']`
    weight of a `transformer.packed_matmul` of the same format (`V' >= V`, columns past `V`
    zero), given as that op's lanes and scales, shaped as the format's row of the weight-format
    table says: `table[v, j] = w[j, v]`. This is how a tied embedding is stored once, as
    llama.cpp stores it: the LM head reads it as its weight and the lookup dequantizes one row
    per token. The formats a table is stored in are those of a model's LM head: `q8_0` (the
    head format of every block format) and `q6_k` (a GGUF file's Q6_K table, kept as it is).
    Ids outside `[0, V')` are the caller's error; the lowering clamps them.

    ```mlir
    %x = transformer.packed_embedding q8_0 %codes, %scales, %ids
        : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<5x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$format, TensorOf<[I32]>:$codes, TensorOf<[F16]>:$scales, TensorOf<[I64]>:$ids);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = [{
    custom<WeightFormatName>($format) $codes `,` $scales `,` $ids attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The row of the weight-format table the op names (verified to exist).
    const ::gpt::WeightFormatTraits &getWeightFormat();
  }];
}

def Transformer_SliceOp : Transformer_Op<"slice",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "A contiguous range of the last dimension";
  let description = [{
    `result[..., i] = input[..., offset + i]` for `i` in `[0, size)`. Splits the fused
    query/key/value projection into its three parts.

    ```mlir
    %k = transformer.slice %qkv {offset = 64 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, I64Attr:$offset, I64Attr:$size);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Transformer_SplitHeadsOp : Transformer_Op<"split_heads",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "[T, H*d] -> [H, T, d], or [T, H, d] when token-major";
  let description = [{
    Splits the feature dimension into `num_heads` heads and moves the head dimension first:
    `result[h, t, i] = input[t, h * d + i]`. With `token_major` the heads stay second,
    `result[t, h, i] = input[t, h * d + i]`: the same data viewed as [T, H, d], nothing moves.
    Attention reads either layout; `--transformer-attention-layout` chooses token-major where
    attention is the only user.

    ```mlir
    %q = transformer.split_heads %x {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
    %t = transformer.split_heads %x {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<8x4x16xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, I64Attr:$num_heads, UnitAttr:$token_major);
  let results = (outs F32Tensor:$output);
  let builders = [
    // Head-major, as a model is first written (the generated builders want the layout too).
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$input, "::mlir::IntegerAttr":$num_heads), [{
      build($_builder, $_state, output, input, num_heads, /*token_major=*/nullptr);
    }]>
  ];
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Transformer_MergeHeadsOp : Transformer_Op<"merge_heads",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "[H, T, d], or [T, H, d] when token-major, -> [T, H*d]";
  let description = [{
    The inverse of `split_heads`: `result[t, h * d + i] = input[h, t, i]`, or with `token_major`
    (an input laid out [T, H, d]) `result[t, h * d + i] = input[t, h, i]`, a view of the input.

    ```mlir
    %y = transformer.merge_heads %a : tensor<4x8x16xf32> -> tensor<8x64xf32>
    %z = transformer.merge_heads %b {token_major} : tensor<8x4x16xf32> -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, UnitAttr:$token_major);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Transformer_RopeOp : Transformer_Op<"rope",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Rotary position embedding";
  let description = [{
    For `x : [H, T, d]` and the absolute position `p = positions[t]` of each row, pairs of
    dimensions rotate by the angle `a_i = p * theta_i`, with `theta_i = base^(-2 i / d)` for the
    pair's frequency index `i` in `[0, d / 2)`. Which dimensions pair up:
    - by default (GPT-NeoX's and HF's rotate-half) `j` and `j + d / 2`, `i = j mod d / 2`:
      `result[h, t, j] = x[h, t, j] * cos(a) - x[h, t, j + d/2] * sin(a)` for `j < d / 2`, and
      `result[h, t, j] = x[h, t, j] * cos(a) + x[h, t, j - d/2] * sin(a)` for `j >= d / 2`;
    - with `interleaved` (GPT-J's; llama.cpp's `llama` files, whose converter permuted q and k
      into this order) `2 i` and `2 i + 1`:
      `result[.., 2i] = x[.., 2i] cos(a) - x[.., 2i+1] sin(a)`,
      `result[.., 2i+1] = x[.., 2i+1] cos(a) + x[.., 2i] sin(a)`.

    `scaling = array<f32: factor, low_freq_factor, high_freq_factor, original_max_positions>` is
    Llama 3's frequency scaling: with wavelength `w_i = 2 pi / theta_i`, `low = original / low_freq_factor`
    and `high = original / high_freq_factor`, `theta_i` becomes `theta_i / factor` where
    `w_i > low`, stays where `w_i < high`, and in between
    `(1 - s) theta_i / factor + s theta_i` with `s = (original / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)`.

    ```mlir
    %q2 = transformer.rope %q, %pos : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
    %k2 = transformer.rope %k, %pos {base = 5.0e+05 : f32, interleaved, scaling = array<f32: 32.0, 1.0, 4.0, 8192.0>}
        : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, TensorOf<[I64]>:$positions,
                       DefaultValuedAttr<F32Attr, "10000.0">:$base, UnitAttr:$interleaved,
                       OptionalAttr<DenseF32ArrayAttr>:$scaling);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input `,` $positions attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// theta_i for each of the d / 2 pairs of a head of `headDim` dimensions, in f64, with the
    /// scaling applied: the frequencies the lowering rotates by.
    ::llvm::SmallVector<double> getFrequencies(int64_t headDim);
  }];
}

def Transformer_CausalAttentionOp : Transformer_Op<"causal_attention",
    [Pure, AttrSizedOperandSegments, IsolatedFromAbove, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Causal scaled dot-product attention over heads";
  let description = [{
    `q : [H, Tq, d]`, `k, v : [Hkv, Tk, d]`. Query row `i` sits at absolute position
    `query_offset + i` (0 when the operand is absent) and attends to the keys `j <= query_offset + i`:
    `result[h, i] = softmax_j(scale * q[h, i] . k[g, j], masked) . v[g, j]` with `g = h / (H / Hkv)`.
    `Hkv < H` is grouped-query attention: `Hkv` must divide `H`, and each key/value head serves
    `H / Hkv` consecutive query heads (a KV cache then holds `Hkv` heads).
    Keys past every query's position (an unfilled cache) are never read into the result.
    `k` and `v` may be f16 or bf16 (a half-width KV cache): they are widened to f32 as they are
    read, and scores, softmax and the weighted sum are computed in f32.
    With `window = W` (W >= 1) the mask is a sliding window: query `i` sees only the keys
    `query_offset + i - W < j <= query_offset + i`, its own position and the W - 1 before it.

    With a `mask` operand, an `i1` tensor `[Tq, Tk]`, the mask alone decides: query `i` sees key
    `j` iff `mask[i, j]` (no causal rule; for bidirectional prefixes, documents, block patterns).
    A mask comes without `offset` and `window`, and must be a constant (`arith.constant`) by the
    time attention is classified and lowered: it is analysed tile by tile at compile time
    (`--transformer-classify-attention-tiles`). Every query row must see
    at least one key. `tile_sizes = array<i64: Bq, Bk>` and `tile_classes` (one string per block
    of Bq queries, one letter per block of Bk keys: `E` empty, `F` full, `P` partial) record that
    pass's classification; the lowering then visits only the `F` and `P` tiles and evaluates the
    mask only in the `P` ones.

    A mask may instead be an expression of positions: the region after `visible`, with block
    arguments `(%i, %j : index)` (query `query_offset + i`'s absolute position and key `j`), built
    of `arith` ops only and ending in `transformer.yield` of an `i1` (true: visible). No
    `[Tq, Tk]` tensor exists: the classification evaluates the expression tile by tile, the
    lowering evaluates it inline in partial tiles. It replaces the causal rule as a mask operand
    does (no `window`, no `mask`), and works with `offset` too (prefill, decode): there a key
    `j` is read only when `j < query_offset + Tq` (keys past the last new token are not written
    yet), and the tiles, unknown at compile time, are all visited and masked. The region is
    isolated from above: its constants live inside it.

    Each of `query_token_major`, `key_token_major`, `value_token_major` and `result_token_major`
    says that this operand (or the result) is laid out token-major, `[T, H, d]`, instead of
    `[H, T, d]`: the layout of a token-major `split_heads` / `merge_heads`, which then move no
    data. The meaning is the same; `--transformer-attention-layout` sets them.

    ```mlir
    %a = transformer.causal_attention %q, %k, %v {scale = 0.25 : f32}
        : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
    %d = transformer.causal_attention %q1, %kc, %vc offset %pos {scale = 0.25 : f32}
        : (tensor<4x1x16xf32>, tensor<4x64x16xf32>, tensor<4x64x16xf32>, index) -> tensor<4x1x16xf32>
    %t = transformer.causal_attention %qt, %kc, %vc offset %pos {query_token_major, result_token_major, scale = 0.25 : f32}
        : (tensor<8x4x16xf32>, tensor<4x64x16xf32>, tensor<4x64x16xf32>, index) -> tensor<8x4x16xf32>
    %w = transformer.causal_attention %q, %k, %v {scale = 0.25 : f32, window = 4 : i64}
        : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
    %m = transformer.causal_attention %q, %k, %v mask %bits {scale = 0.25 : f32}
        : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<8x8xi1>) -> tensor<4x8x16xf32>
    // Prefix-LM: keys 0-3 seen by every query (bidirectional prefix), causal after.
    %p = transformer.causal_attention %q, %k, %v visible {
    ^bb0(%i: index, %j: index):
      %c4 = arith.constant 4 : index
      %prefix = arith.cmpi ult, %j, %c4 : index
      %causal = arith.cmpi ule, %j, %i : index
      %seen = arith.ori %prefix, %causal : i1
      transformer.yield %seen : i1
    } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$query, Transformer_KvCacheTensor:$key, Transformer_KvCacheTensor:$value,
                       Optional<Index>:$query_offset, Optional<TensorOf<[I1]>>:$mask, F32Attr:$scale,
                       UnitAttr:$query_token_major, UnitAttr:$key_token_major,
                       UnitAttr:$value_token_major, UnitAttr:$result_token_major,
                       OptionalAttr<I64Attr>:$window, OptionalAttr<DenseI64ArrayAttr>:$tile_sizes,
                       OptionalAttr<StrArrayAttr>:$tile_classes);
  let results = (outs F32Tensor:$output);
  let regions = (region AnyRegion:$mask_expression);
  let builders = [
    // Every operand and the result head-major, as a model is first written.
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$query, "::mlir::Value":$key, "::mlir::Value":$value,
                   "::mlir::Value":$query_offset, "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, output, query, key, value, query_offset, /*mask=*/::mlir::Value(), scale, nullptr,
            nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The mask's shape [Tq, Tk] and its exclusions, and the tile attributes' shape.
    ::mlir::LogicalResult verifyMaskAndTiles();
  }];
  let assemblyFormat = [{
    $query `,` $key `,` $value (`offset` $query_offset^)? (`mask` $mask^)? (`visible` $mask_expression^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
}

def Transformer_CacheUpdateOp : Transformer_Op<"cache_update",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Writes new keys or values into a KV cache at a position";
  let description = [{
    `cache : [H, M, d]` (M = the cache's capacity), `update : [H, T, d]`: the result is `cache`
    with rows `offset .. offset + T - 1` replaced by `update`. `offset + T <= M` is the caller's
    precondition (the runtime checks it before calling compiled code). When the cache is a
    writable function argument, bufferization performs the update in place. A cache of f16 or
    bf16 (a half-width KV cache) stores each update rounded to nearest even; a cache of i8 (q8_0,
    `[H, M, d * 17/16]`) stores each row of d values as d int8 codes round_even(x * 127 / max|x|)
    per block of 32, then the blocks' fp16 scales max|x| / 127 as bytes. The result has the
    cache's type.

    ```mlir
    %k2 = transformer.cache_update %k into %cache[%pos] : tensor<4x1x16xf32>, tensor<4x64x16xf32> -> tensor<4x64x16xf32>
    %h2 = transformer.cache_update %k into %half[%pos] : tensor<4x1x16xf32>, tensor<4x64x16xf16> -> tensor<4x64x16xf16>
    %q2 = transformer.cache_update %k into %q8[%pos] : tensor<4x1x32xf32>, tensor<4x64x34xi8> -> tensor<4x64x34xi8>
    ```
  }];
  let arguments = (ins F32Tensor:$update, Transformer_KvCacheTensor:$cache, Index:$offset);
  let results = (outs Transformer_KvCacheTensor:$output);
  let assemblyFormat = [{
    $update `into` $cache `[` $offset `]` attr-dict `:` type($update) `,` type($cache) `->` type($output)
  }];
  let hasVerifier = 1;
}

def Transformer_PagedCacheWriteOp : Transformer_Op<"paged_cache_write",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Writes new keys or values into the slots of a paged KV pool";
  let description = [{
    `pool : [N, H, S, d]` is a pool of N blocks of S positions each, `update : [H, T, d]` the
    keys (or values) of T new tokens and `slots : [T]` where each goes: token `t` is written at
    block `slots[t] / S`, position `slots[t] % S` of every head. A negative slot writes nothing
    (a padding token). The result is the pool with those rows replaced; slots are distinct and
    inside the pool (the runtime checks both before calling compiled code). When the pool is a
    writable function argument, bufferization performs the writes in place. A pool of f16 or
    bf16 stores each row rounded to nearest even, a pool of i8 each row in q8_0 as
    `cache_update` does (`[N, H, S, d * 17/16]`); the result has the pool's type.

    ```mlir
    %k2 = transformer.paged_cache_write %k into %pool[%slots]
        : tensor<4x3x16xf32>, tensor<32x4x16x16xf32>, tensor<3xi64> -> tensor<32x4x16x16xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$update, Transformer_KvCacheTensor:$pool, TensorOf<[I64]>:$slots);
  let results = (outs Transformer_KvCacheTensor:$output);
  let assemblyFormat = [{
    $update `into` $pool `[` $slots `]` attr-dict `:` type($update) `,` type($pool) `,` type($slots) `->` type($output)
  }];
  let hasVerifier = 1;
}

def Transformer_PagedAttentionOp : Transformer_Op<"paged_attention",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Causal attention of the tokens of many sequences over a paged KV pool";
  let description = [{
    `query : [H, T, d]` holds the new tokens of B sequences; token `t` belongs to sequence
    `sequences[t]` and sits at position `positions[t]` of it. `key_pool, value_pool : [N, Hkv, S, d]`
    are pools of N blocks of S positions (`Hkv` divides `H`: with grouped-query attention query head
    `h` reads key/value head `h / (H / Hkv)`); `block_tables : [B, M]` lists each sequence's blocks in
    order: position `p` of sequence `b` is row `p % S` of block `block_tables[b, p / S]`. Token `t`
    attends to positions `0 .. positions[t]` of its own sequence, read through its block table
    (no sequence is ever copied out of the pool):
    `result[h, t] = softmax_p(scale * q[h, t] . k_p) . v_p`. The caller guarantees that every
    block those positions need is listed and inside the pool. With `window = W` (W >= 1) the
    attention is a sliding window, as `causal_attention`'s: token `t` sees only positions
    `positions[t] - W + 1 .. positions[t]`, and blocks wholly before them are not read (nor need
    they be listed correctly: the table's entries there are ignored). Pools of f16 or bf16 are
    widened to f32 as they are read, pools of i8 (q8_0, `cache_update`'s rows) dequantized.

    ```mlir
    %a = transformer.paged_attention %q, %kp, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32}
        : tensor<4x3x16xf32>, tensor<32x4x16x16xf32>, tensor<32x4x16x16xf32>, tensor<2x8xi64>, tensor<3xi64>,
          tensor<3xi64> -> tensor<4x3x16xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$query, Transformer_KvCacheTensor:$key_pool, Transformer_KvCacheTensor:$value_pool,
                       TensorOf<[I64]>:$block_tables, TensorOf<[I64]>:$sequences,
                       TensorOf<[I64]>:$positions, F32Attr:$scale, OptionalAttr<I64Attr>:$window);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = [{
    $query `,` $key_pool `,` $value_pool `tables` $block_tables `sequences` $sequences `positions` $positions
    attr-dict `:` type($query) `,` type($key_pool) `,` type($value_pool) `,` type($block_tables) `,`
    type($sequences) `,` type($positions) `->` type($output)
  }];
  let hasVerifier = 1;
}

def Transformer_YieldOp : Transformer_Op<"yield",
    [Pure, Terminator, HasParent<"CausalAttentionOp">]> {
  let summary = "Ends a mask expression: whether the key is visible";
  let description = [{
    The terminator of `causal_attention`'s `visible` region: `value` is true when key `%j` is
    visible from the query at position `%i`.

    ```mlir
    transformer.yield %seen : i1
    ```
  }];
  let arguments = (ins I1:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Ops of imported PyTorch graphs (gpt.compile_module)
//===----------------------------------------------------------------------===//

def Transformer_GeluErfOp : Transformer_UnaryOp<"gelu_erf", [{
    Elementwise GELU, exact: `0.5 * x * (1 + erf(x / sqrt(2)))` (PyTorch's `F.gelu` with
    `approximate="none"`, its default). `transformer.gelu` is the tanh approximation.}]> {
  let summary = "Elementwise GELU (exact, with erf)";
}

def Transformer_TanhOp : Transformer_UnaryOp<"tanh", [{
    Elementwise hyperbolic tangent. An imported tanh GELU written out op by op (nanoGPT's,
    HF's `gelu_new`) is folded back into `transformer.gelu` by canonicalization.}]> {
  let summary = "Elementwise tanh";
}

def Transformer_WhereOp : Transformer_Op<"where",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Elementwise select by an i1 condition, with numpy-style broadcasting";
  let description = [{
    `result = condition ? true_value : false_value`, elementwise, the three operands broadcast
    together as `transformer.add` broadcasts two (`torch.where`; `masked_fill(x, m, v)` is
    `where(m, v, x)`). A constant condition feeding a softmax whose other value is `-inf` is an
    attention mask: canonicalization recovers `transformer.causal_attention` from
    `softmax(where(mask, q @ k^T * scale, -inf)) @ v` (RecoverWrittenOutOps.h).

    ```mlir
    %m = transformer.where %mask, %scores, %fill
        : (tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<1xf32>) -> tensor<4x8x8xf32>
    ```
  }];
  let arguments = (ins TensorOf<[I1]>:$condition, F32Tensor:$true_value, F32Tensor:$false_value);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = [{
    $condition `,` $true_value `,` $false_value attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Transformer_ExpOp : Transformer_UnaryOp<"exp", "Elementwise exponential: `e^x`."> {
  let summary = "Elementwise exponential";
}

def Transformer_RsqrtOp : Transformer_UnaryOp<"rsqrt",
    "Elementwise reciprocal square root: `1 / sqrt(x)` (RMSNorm's and LayerNorm's written out)."> {
  let summary = "Elementwise reciprocal square root";
}

def Transformer_SiluOp : Transformer_UnaryOp<"silu", [{
    Elementwise SiLU (swish): `x * sigmoid(x) = x / (1 + e^-x)` (`F.silu`). The gated product of
    an imported SwiGLU MLP, `silu(gate) * up`, is folded into `transformer.swiglu` by
    canonicalization; a SiLU used otherwise stays this op.}]> {
  let summary = "Elementwise SiLU";
}

def Transformer_MeanOp : Transformer_Op<"mean",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Mean over the last dimension, kept as a dimension of size 1";
  let description = [{
    `result[..., 0] = (input[..., 0] + ... + input[..., n - 1]) / n` over the `n` elements of the
    last dimension (`x.mean(-1, keepdim=True)`). An imported RMSNorm written out,
    `weight * (x * rsqrt(mean(x * x) + epsilon))`, is folded into `transformer.rms_norm` by
    canonicalization (RecoverWrittenOutOps.h).

    ```mlir
    %m = transformer.mean %x : tensor<4x8xf32> -> tensor<4x1xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Transformer_PowOp : Transformer_BroadcastBinaryOp<"pow", "power, `lhs ^ rhs`"> {
  let description = [{
    `result = lhs ^ rhs` elementwise, the operands broadcast as `transformer.add` broadcasts
    them: a scalar exponent is a splat constant (`torch.pow(x, 0.5)`). Squares and cubes are
    imported as products instead (the written-out tanh GELU is recovered from those).

    ```mlir
    %y = transformer.pow %x, %half : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
    ```
  }];
}

def Transformer_PermuteOp : Transformer_Op<"permute",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Permutes the dimensions of a tensor";
  let description = [{
    `result[i_p0, ..., i_pn] = input[i_0, ..., i_n]` with `permutation = [p0, ..., pn]`: result
    dimension `k` is input dimension `permutation[k]` (`torch.permute`). `transformer.transpose`
    is the swap of the last two.

    ```mlir
    %y = transformer.permute %x {permutation = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Transformer_ReshapeOp : Transformer_Op<"reshape", [Pure]> {
  let summary = "The same elements, row-major, in another static shape";
  let description = [{
    `view` / `reshape` of a contiguous tensor: the result's type gives its shape, which must hold
    as many elements as the input's (both static).

    ```mlir
    %y = transformer.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Transformer_BroadcastOp : Transformer_Op<"broadcast", [Pure]> {
  let summary = "Broadcasts a tensor to a larger static shape (numpy rules)";
  let description = [{
    `expand`: the result's type gives the shape; the input's dimensions, aligned on the trailing
    ones, must each equal the result's or be 1 (numpy broadcasting).

    ```mlir
    %y = transformer.broadcast %x : tensor<1x8xf32> -> tensor<4x3x8xf32>
    ```
  }];
  let arguments = (ins F32Tensor:$input);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Transformer_ConcatOp : Transformer_Op<"concat",
    [Pure, DeclareOpInterfaceMethods<ShapeInferenceOpInterface>]> {
  let summary = "Concatenates tensors along a dimension";
  let description = [{
    `torch.cat(inputs, dim)`: the inputs have one rank and equal dimensions except `dim`, which
    the result has the sum of.

    ```mlir
    %y = transformer.concat %a, %b {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<4x10xf32>
    ```
  }];
  let arguments = (ins Variadic<F32Tensor>:$inputs, I64Attr:$dim);
  let results = (outs F32Tensor:$output);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // GPT_TRANSFORMER_OPS_TD
