// --gpt-bare-pointer-calls: private functions whose memrefs all have static shapes take each as one
// pointer (see Passes.td).
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_BAREPOINTERCALLS
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// The attribute convert-func-to-llvm reads on a function (and, for a call, on its callee).
constexpr StringLiteral kBarePointerAttr = "llvm.bareptr";

/// True if a value of `type` crosses a call as one pointer without losing anything: a scalar, or
/// a memref whose shape and (identity) layout the type alone gives.
bool passesAsBarePointer(Type type) {
  if (isa<UnrankedMemRefType>(type)) return false;
  auto memref = dyn_cast<MemRefType>(type);
  return !memref || (memref.hasStaticShape() && memref.getLayout().isIdentity());
}

/// The functions some operation other than a direct call names (taking their address, say): they
/// keep the convention that such a use expects.
llvm::DenseSet<StringAttr> namedOtherThanByCalls(ModuleOp module) {
  llvm::DenseSet<StringAttr> named;
  if (std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(&module.getBodyRegion()))
    for (const SymbolTable::SymbolUse &use : *uses)
      if (!isa<func::CallOp>(use.getUser())) named.insert(use.getSymbolRef().getRootReference());
  return named;
}

class BarePointerCallsPass : public impl::BarePointerCallsBase<BarePointerCallsPass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const llvm::DenseSet<StringAttr> named = namedOtherThanByCalls(module);
    for (auto function : module.getOps<func::FuncOp>()) {
      if (!function.isPrivate() || function.isExternal() || named.contains(function.getSymNameAttr())) continue;
      FunctionType type = function.getFunctionType();
      if (llvm::all_of(type.getInputs(), passesAsBarePointer) && llvm::all_of(type.getResults(), passesAsBarePointer))
        function->setAttr(kBarePointerAttr, UnitAttr::get(&getContext()));
    }
  }
};

} // namespace
} // namespace gpt::codegen
