// --transformer-attention-layout: token-major heads where causal_attention alone reads or writes them.
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/TransformerDialect.h"
#include "cc/dialect/transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_TRANSFORMERATTENTIONLAYOUT
#include "cc/dialect/transforms/Passes.h.inc"

namespace {

/// The name of the layout flag of `use` when it is the query, key or value of a causal_attention,
/// else null.
StringAttr layoutFlag(OpOperand &use) {
  auto attention = dyn_cast<CausalAttentionOp>(use.getOwner());
  if (!attention) return {};
  if (&use == &attention.getQueryMutable()) return attention.getQueryTokenMajorAttrName();
  if (&use == &attention.getKeyMutable()) return attention.getKeyTokenMajorAttrName();
  if (&use == &attention.getValueMutable()) return attention.getValueTokenMajorAttrName();
  return {};
}

/// True when `use` is an attention input that reads its value head-major.
bool isHeadMajorAttentionInput(OpOperand &use) {
  StringAttr flag = layoutFlag(use);
  return flag && !use.getOwner()->hasAttr(flag);
}

/// A split_heads that only attention reads is laid out [T, H, d], a view of its input; each of
/// its attention users reads that operand token-major.
void layOutSplitHeads(SplitHeadsOp split) {
  Value heads = split.getResult();
  if (split.getTokenMajor() || heads.use_empty() || !llvm::all_of(heads.getUses(), isHeadMajorAttentionInput)) return;
  split.setTokenMajor(true);
  heads.setType(swapHeadsAndTokens(heads.getType()));
  for (OpOperand &use : heads.getUses()) use.getOwner()->setAttr(layoutFlag(use), UnitAttr::get(split.getContext()));
}

/// The merge_heads of an attention result that nothing else reads: the attention writes it
/// [T, H, d], which merge_heads then only views as [T, H*d].
void layOutMergeHeads(MergeHeadsOp merge) {
  auto attention = merge.getInput().getDefiningOp<CausalAttentionOp>();
  if (merge.getTokenMajor() || !attention || attention.getResultTokenMajor() || !attention->hasOneUse()) return;
  merge.setTokenMajor(true);
  attention.setResultTokenMajor(true);
  Value result = attention.getResult();
  result.setType(swapHeadsAndTokens(result.getType()));
}

class TransformerAttentionLayoutPass : public impl::TransformerAttentionLayoutBase<TransformerAttentionLayoutPass> {
public:
  void runOnOperation() override {
    getOperation().walk([](Operation *op) {
      if (auto split = dyn_cast<SplitHeadsOp>(op))
        layOutSplitHeads(split);
      else if (auto merge = dyn_cast<MergeHeadsOp>(op))
        layOutMergeHeads(merge);
    });
  }
};

} // namespace
} // namespace mlir::transformer
