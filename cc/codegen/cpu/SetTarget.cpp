// --gpt-set-target: writes the module's gpt.target for a CPU named as CompileOptions(target_cpu)
// names it.
#include "cc/codegen/cpu/Passes.h"

#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/codegen/cpu/TargetCpus.h"

#include "llvm/TargetParser/Host.h"

#include <stdexcept>

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_SETTARGET
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

class SetTargetPass : public impl::SetTargetBase<SetTargetPass> {
public:
  using SetTargetBase::SetTargetBase;

  void runOnOperation() override {
    if (cpu.empty()) {
      getOperation().emitError("--gpt-set-target needs cpu=<name> (e.g. haswell, znver4, aarch64:neoverse-v1)");
      return signalPassFailure();
    }
    try {
      const auto [triple, name] = splitTargetName(cpu, llvm::sys::getProcessTriple());
      setTarget(getOperation(), describeTarget(triple, name, cpuFeatures(triple, name)));
    } catch (const std::invalid_argument &error) {
      getOperation().emitError(error.what());
      signalPassFailure();
    }
  }
};

} // namespace
} // namespace gpt::codegen
