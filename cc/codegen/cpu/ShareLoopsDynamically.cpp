// --gpt-share-loops-dynamically: OpenMP worksharing loops hand out their iterations on demand.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/OpenMP/OpenMPDialect.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_SHARELOOPSDYNAMICALLY
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

class ShareLoopsDynamicallyPass : public impl::ShareLoopsDynamicallyBase<ShareLoopsDynamicallyPass> {
public:
  void runOnOperation() override {
    getOperation()->walk([](omp::WsloopOp loop) {
      // A schedule set on purpose (none is, today) is kept.
      if (!loop.getScheduleVal()) loop.setScheduleVal(omp::ClauseScheduleKind::Dynamic);
    });
  }
};

} // namespace
} // namespace gpt::codegen
