// An arbitrary transformer-dialect function (an imported PyTorch graph): its inputs and
// parameters are arguments, its results tensors. Compiled by the same named pipelines, JIT and
// disk cache as the builder's entry points, and called with dense buffers of any rank.
#ifndef GPT_CC_RUNTIME_COMPILEDFUNCTION_H
#define GPT_CC_RUNTIME_COMPILEDFUNCTION_H

#include "cc/codegen/cpu/PipelineLevels.h"
#include "cc/runtime/CompileOptions.h"
#include "cc/runtime/JitTarget.h"
#include "cc/runtime/ProgramCompiler.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpt {

class JitFunction;

class CompiledFunction {
public:
  /// Parses `ir`, a module holding the transformer-dialect `func.func` named `name` whose
  /// arguments and results are statically shaped tensors. Throws CompileError (with MLIR's
  /// diagnostics) when it does not parse or verify, std::invalid_argument when the function is
  /// missing or has a dynamically shaped argument or result.
  CompiledFunction(const std::string &ir, const std::string &name, const CompileOptions &options);
  ~CompiledFunction();

  const std::vector<TensorSignature> &arguments() const { return arguments_; }
  const std::vector<TensorSignature> &results() const { return results_; }

  /// The module after `stage` of the pipeline, as text.
  std::string ir(Stage stage);

  /// Lowers and JIT-compiles the function (or loads it from the disk cache), once.
  void compile();
  bool isCompiled() const;
  /// Seconds compile() took (0 before), and whether its object came from the disk cache.
  double compileSeconds() const;
  bool loadedFromDiskCache() const;

  /// Calls the function: `buffers` holds one pointer per argument, then one per result, each to
  /// a dense row-major buffer of that signature's shape and type, owned by the caller; results
  /// are written in place. Compiles first if needed.
  void call(const std::vector<void *> &buffers);

private:
  std::string text_, name_;
  CompileOptions options_;
  JitTarget target_;
  std::vector<TensorSignature> arguments_, results_;
  std::unique_ptr<FunctionCompiler> compiler_; // the parsed module (the compiler library)
  mutable std::mutex mutex_;                   // guards the compiler and the compiled function
  std::unique_ptr<JitFunction> function_;
  double compileSeconds_ = 0;
  bool loaded_ = false;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILEDFUNCTION_H
