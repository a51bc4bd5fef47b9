// The compiler fuzzer's body (see CompilerFuzzTarget.h).
#include "tools/fuzz/CompilerFuzzTarget.h"

#include "cc/ParseInput.h"
#include "cc/Registration.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace gpt::fuzz {
namespace {

// The pipelines users run. The first three are what `python -m gpt stages FILE` runs, one
// after another; gpt-compile is the whole pipeline behind `model.ir(stage)` and compilation,
// at each level and with threads (scf-to-openmp), up to the LLVM dialect. No JIT.
constexpr const char *kPipelines[] = {
    "canonicalize",
    "canonicalize,func.func(transformer-shape-inference),canonicalize",
    "canonicalize,func.func(transformer-shape-inference),canonicalize,transformer-to-linalg,canonicalize,cse",
    "gpt-compile{level=baseline}",
    "gpt-compile{level=fused}",
    "gpt-compile{level=vectorized}",
    "gpt-compile{level=vectorized threads=4}",
};

std::string print(mlir::ModuleOp module, bool generic) {
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::OpPrintingFlags flags;
  if (generic) flags.printGenericOpForm();
  module.print(os, flags);
  return text;
}

} // namespace

void runCompilerOnInput(const uint8_t *data, size_t size) {
  if (size > kMaxInputBytes) return;
  // A copy: MLIR's lexer reads up to a terminating NUL, which the fuzzer's buffer lacks.
  const std::string text(reinterpret_cast<const char *>(data), size);

  // A fresh context per input, single-threaded (deterministic, and nothing accumulates across
  // inputs); diagnostics are kept (the first few KB), not printed.
  mlir::MLIRContext ctx(gpt::processRegistry(), mlir::MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler capture(&ctx, [&diagnostics](mlir::Diagnostic &diag) {
    if (diagnostics.size() < 4096) {
      llvm::raw_string_ostream os(diagnostics);
      os << diag.getLocation() << ": " << diag << "\n";
    }
    return mlir::success();
  });

  mlir::OwningOpRef<mlir::ModuleOp> module = gpt::parseModuleText(text, &ctx, "fuzz-input");
  if (!module) return;

  // A verified module must print, in the custom and in the generic form, to text that parses
  // back. Its nesting may exceed the input's: the printer wraps top-level ops in an explicit
  // `module {`, and the generic form opens two brackets, `({`, per region (and more inside).
  for (bool generic : {false, true}) {
    const std::string printed = print(*module, generic);
    const unsigned depthLimit = generic ? 3 * gpt::kMaxNestingDepth : gpt::kMaxNestingDepth + 1;
    diagnostics.clear();
    if (gpt::parseModuleText(printed, &ctx, "fuzz-printed", depthLimit)) continue;
    llvm::errs() << "fuzz: the printed " << (generic ? "generic" : "custom")
                 << " form of a verified module does not parse:\n"
                 << llvm::StringRef(printed).take_front(4000) << "\n"
                 << diagnostics;
    llvm::report_fatal_error("printed IR does not round-trip");
  }

  for (const char *pipeline : kPipelines) {
    mlir::OwningOpRef<mlir::ModuleOp> clone(module->clone());
    mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
    std::string pipelineErrors;
    llvm::raw_string_ostream errors(pipelineErrors);
    if (mlir::failed(mlir::parsePassPipeline(pipeline, pm, errors)))
      llvm::report_fatal_error(llvm::Twine("fuzz: bad pipeline '") + pipeline + "': " + pipelineErrors);
    (void)pm.run(*clone);
  }
}

} // namespace gpt::fuzz
