// DRR canonicalization patterns of the `transformer` dialect, run by the stock --canonicalize.
#ifndef GPT_TRANSFORMER_CANONICALIZE_TD
#define GPT_TRANSFORMER_CANONICALIZE_TD

include "mlir/IR/PatternBase.td"
include "cc/dialect/TransformerOps.td"

// A rewrite may only replace a value by one of exactly the same type: otherwise users
// (a func.return, a ranked consumer) would see a different shape.
def SameType : Constraint<CPred<"$0.getType() == $1.getType()">, "values of identical type">;
def IsAllZeros : Constraint<CPred<"::mlir::transformer::isSplatOf($0, 0.0f)">, "a constant of zeros">;
def IsAllOnes : Constraint<CPred<"::mlir::transformer::isSplatOf($0, 1.0f)">, "a constant of ones">;
// Head layouts (the `token_major` unit attributes of split_heads / merge_heads) that agree.
def SameLayout : Constraint<CPred<"static_cast<bool>($0) == static_cast<bool>($1)">, "the same head layout">;
def HasStaticShape : Constraint<
    CPred<"::llvm::cast<::mlir::ShapedType>($0.getType()).hasStaticShape()">, "a static shape">;
// Folding computes every element of a non-splat result: only for splats or small results.
def CheapToFold : Constraint<CPred<"::mlir::transformer::isCheapToFold($0, $1)">, "a cheap fold">;
def CheapToFold2 : Constraint<CPred<"::mlir::transformer::isCheapToFold($0, $1, $2)">, "a cheap fold">;

def FoldAdd : NativeCodeCall<"::mlir::transformer::foldBinaryConstants($0, $1, $2, std::plus<float>())">;
def FoldMul : NativeCodeCall<"::mlir::transformer::foldBinaryConstants($0, $1, $2, std::multiplies<float>())">;
def FoldNeg : NativeCodeCall<"::mlir::transformer::foldNegConstant($0, $1)">;
def FoldTranspose : NativeCodeCall<"::mlir::transformer::foldTransposeConstant($0, $1)">;

// add(x, 0) = x
def AddZeroRight : Pat<(Transformer_AddOp:$res $x, (Transformer_ConstantOp $zero)),
                       (replaceWithValue $x), [(IsAllZeros $zero), (SameType $res, $x)]>;
// add(0, x) = x
def AddZeroLeft : Pat<(Transformer_AddOp:$res (Transformer_ConstantOp $zero), $x),
                      (replaceWithValue $x), [(IsAllZeros $zero), (SameType $res, $x)]>;
// mul(x, 1) = x
def MulOneRight : Pat<(Transformer_MulOp:$res $x, (Transformer_ConstantOp $one)),
                      (replaceWithValue $x), [(IsAllOnes $one), (SameType $res, $x)]>;
// mul(1, x) = x
def MulOneLeft : Pat<(Transformer_MulOp:$res (Transformer_ConstantOp $one), $x),
                     (replaceWithValue $x), [(IsAllOnes $one), (SameType $res, $x)]>;
// neg(neg(x)) = x
def NegNeg : Pat<(Transformer_NegOp:$res (Transformer_NegOp $x)),
                 (replaceWithValue $x), [(SameType $res, $x)]>;
// transpose(transpose(x)) = x
def TransposeTranspose : Pat<(Transformer_TransposeOp:$res (Transformer_TransposeOp $x)),
                             (replaceWithValue $x), [(SameType $res, $x)]>;
// merge_heads(split_heads(x)) = x, both head-major or both token-major
def MergeSplitHeads : Pat<(Transformer_MergeHeadsOp:$res (Transformer_SplitHeadsOp $x, $heads, $split), $merge),
                          (replaceWithValue $x), [(SameType $res, $x), (SameLayout $split, $merge)]>;
// split_heads(merge_heads(x), H) = x, when x has H heads and both ops share its layout
def SplitMergeHeads : Pat<(Transformer_SplitHeadsOp:$res (Transformer_MergeHeadsOp $x, $merge), $heads, $split),
                          (replaceWithValue $x), [(SameType $res, $x), (SameLayout $split, $merge)]>;

// mul(silu(g), u) = swiglu(g, u), for g and u of one static shape (swiglu does not broadcast)
def RecoverSwigluRight : Pat<(Transformer_MulOp:$res (Transformer_SiluOp $g), $u), (Transformer_SwigluOp $g, $u),
                             [(HasStaticShape $res), (SameType $res, $g), (SameType $g, $u)]>;
// mul(u, silu(g)) = swiglu(g, u), for g and u of one static shape
def RecoverSwigluLeft : Pat<(Transformer_MulOp:$res $u, (Transformer_SiluOp $g)), (Transformer_SwigluOp $g, $u),
                            [(HasStaticShape $res), (SameType $res, $g), (SameType $g, $u)]>;

// add(c1, c2) = c1 + c2, computed now
def FoldAddOfConstants : Pat<(Transformer_AddOp:$res (Transformer_ConstantOp $a), (Transformer_ConstantOp $b)),
                             (Transformer_ConstantOp (FoldAdd $res, $a, $b)),
                             [(HasStaticShape $res), (CheapToFold2 $res, $a, $b)]>;
// mul(c1, c2) = c1 * c2, computed now
def FoldMulOfConstants : Pat<(Transformer_MulOp:$res (Transformer_ConstantOp $a), (Transformer_ConstantOp $b)),
                             (Transformer_ConstantOp (FoldMul $res, $a, $b)),
                             [(HasStaticShape $res), (CheapToFold2 $res, $a, $b)]>;
// neg(c) = -c, computed now
def FoldNegOfConstant : Pat<(Transformer_NegOp:$res (Transformer_ConstantOp $a)),
                            (Transformer_ConstantOp (FoldNeg $res, $a)), [(HasStaticShape $res), (CheapToFold $res, $a)]>;
// transpose(c) = c^T, computed now
def FoldTransposeOfConstant : Pat<(Transformer_TransposeOp:$res (Transformer_ConstantOp $a)),
                                  (Transformer_ConstantOp (FoldTranspose $res, $a)),
                                  [(HasStaticShape $res), (CheapToFold $res, $a)]>;

#endif // GPT_TRANSFORMER_CANONICALIZE_TD
