// --gpt-verify-vectorized: fails when an op marked for vectorization is still a linalg op after the
// schedule, instead of letting it reach the LLVM lowering as scalar loops.
#include "cc/codegen/cpu/Passes.h"

#include "cc/codegen/common/CodegenAttributes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_VERIFYVECTORIZED
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

class VerifyVectorizedPass : public impl::VerifyVectorizedBase<VerifyVectorizedPass> {
public:
  void runOnOperation() override {
    WalkResult result = getOperation().walk([](linalg::LinalgOp op) {
      for (StringRef marker : kVectorizedMarkers) {
        if (!op->hasAttr(marker)) continue;
        op->emitOpError() << "is marked '" << marker << "' but the schedule left it unvectorized: "
                          << "cc/codegen/cpu/schedules/ has no block that applies this attribute to this op";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) signalPassFailure();
  }
};

} // namespace
} // namespace gpt::codegen
