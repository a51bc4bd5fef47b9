// --gpt-apply-schedule: runs a Transform-dialect schedule compiled into the binary.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Transform/IR/TransformDialect.h"
#include "mlir/Dialect/Transform/Interfaces/TransformInterfaces.h"
#include "mlir/Dialect/Transform/Transforms/TransformInterpreterUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Parser/Parser.h"

#include <memory>

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_APPLYSCHEDULE
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

struct EmbeddedSchedule {
  const char *name;
  const char *text;
};

// Generated from cc/codegen/cpu/schedules/*.mlir: {"<file stem>", "<file contents>"}.
const EmbeddedSchedule kSchedules[] = {
#include "cc/codegen/cpu/Schedules.inc"
};

class ApplySchedulePass : public impl::ApplyScheduleBase<ApplySchedulePass> {
public:
  using ApplyScheduleBase::ApplyScheduleBase;

  LogicalResult initialize(MLIRContext *context) override {
    for (const EmbeddedSchedule &s : kSchedules) {
      if (scheduleName != s.name) continue;
      auto parsed = parseSourceString<ModuleOp>(s.text, context, s.name);
      if (!parsed) return failure();
      schedule = std::make_shared<OwningOpRef<ModuleOp>>(std::move(parsed));
      return success();
    }
    std::string known;
    for (const EmbeddedSchedule &s : kSchedules) known += std::string(known.empty() ? "" : ", ") + s.name;
    return emitError(UnknownLoc::get(context)) << "unknown schedule '" << scheduleName << "' (known: " << known << ")";
  }

  void runOnOperation() override {
    ModuleOp library = schedule->get();
    Operation *entry = transform::detail::findTransformEntryPoint(getOperation(), library);
    if (!entry) return signalPassFailure();
    if (failed(transform::applyTransformNamedSequence(getOperation(), entry, library,
                                                      transform::TransformOptions().enableExpensiveChecks(false))))
      signalPassFailure();
  }

private:
  // Shared, not owned: the pass manager copies passes (one per thread) and the parsed schedule
  // is read-only.
  std::shared_ptr<OwningOpRef<ModuleOp>> schedule;
};

} // namespace
} // namespace gpt::codegen
