// Compiling and calling an arbitrary transformer-dialect function (see CompiledFunction.h).
#include "cc/runtime/CompiledFunction.h"

#include "cc/runtime/CachedJit.h"
#include "cc/runtime/JitFunction.h"
#include "cc/runtime/MemRefDescriptor.h"

#include <chrono>
#include <stdexcept>

namespace gpt {

CompiledFunction::CompiledFunction(const std::string &ir, const std::string &name, const CompileOptions &options)
    : text_(ir), name_(name), options_(options), target_(resolveTarget(options.targetCpu)) {
  compiler_ = programCompiler().compileFunction(text_, name_, options_, target_);
  arguments_ = compiler_->arguments();
  results_ = compiler_->results();
}

CompiledFunction::~CompiledFunction() = default;

std::string CompiledFunction::ir(Stage stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  return compiler_->ir(stage);
}

void CompiledFunction::compile() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (function_) return;
  auto start = std::chrono::steady_clock::now();
  // The imported module and the pipeline's options key the disk cache; a hit skips the pipeline.
  const std::vector<std::string> source = {pipelineKey(options_), text_};
  try {
    function_ = jitThroughDiskCache(
        source, name_, target_, {options_.cacheDir, options_.cacheMaxBytes}, [&] { return compiler_->compile(); },
        &loaded_);
  } catch (const CompileError &) {
    throw;
  } catch (const std::runtime_error &error) {
    throw CompileError(error.what());
  }
  compileSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool CompiledFunction::isCompiled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return function_ != nullptr;
}

double CompiledFunction::compileSeconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return compileSeconds_;
}

bool CompiledFunction::loadedFromDiskCache() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loaded_;
}

void CompiledFunction::call(const std::vector<void *> &buffers) {
  if (buffers.size() != arguments_.size() + results_.size())
    throw std::invalid_argument("expected " + std::to_string(arguments_.size()) + " arguments and " +
                                std::to_string(results_.size()) + " result buffers, got " +
                                std::to_string(buffers.size()) + " buffers");
  compile();
  std::vector<MemRefDescriptor> descriptors;
  descriptors.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const TensorSignature &signature = i < arguments_.size() ? arguments_[i] : results_[i - arguments_.size()];
    descriptors.push_back(MemRefDescriptor::view(buffers[i], signature.shape));
  }
  std::vector<void *> pointers;
  for (MemRefDescriptor &descriptor : descriptors) pointers.push_back(descriptor.pointer());
  function_->call(pointers);
}

} // namespace gpt
