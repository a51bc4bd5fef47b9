// Building, compiling, caching and calling a GPT's entry points (see CompiledModel.h).
#include "cc/runtime/CompiledModel.h"

#include "cc/Registration.h"
#include "cc/runtime/DiagnosticCapture.h"
#include "cc/runtime/JitFunction.h"
#include "cc/runtime/MemRefDescriptor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>
#include <stdexcept>

namespace gpt {

namespace {
constexpr int64_t kSmallestBucket = 8;  // the register-tile height of the matmul schedules
}

CompiledModel::CompiledModel(const GPTConfig &config, const CompileOptions &options)
    : config_(config), options_(options) {
  if (std::string problem = config.validate(); !problem.empty()) throw std::invalid_argument(problem);
  parameters_ = parameterSpecs(config);
  // Schedules run upstream passes by name (transform.apply_registered_pass).
  registerAllPasses();
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  context = std::make_unique<mlir::MLIRContext>(registry);
  context->loadAllAvailableDialects();
  // A failure on a whole model would otherwise print the entire module into the message.
  context->printOpOnDiagnostic(false);
}

CompiledModel::~CompiledModel() = default;

int64_t CompiledModel::bucketFor(int64_t seqLen) const {
  int64_t bucket = kSmallestBucket;
  while (bucket < seqLen) bucket *= 2;
  return std::min(bucket, std::max(config_.blockSize, seqLen));
}

std::string CompiledModel::ir(Stage stage, int64_t seqLen) {
  std::lock_guard<std::mutex> lock(mutex);
  DiagnosticCapture diagnostics(*context);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForward(*context, config_, seqLen);
  mlir::PassManager pm(context.get(), mlir::ModuleOp::getOperationName());
  PipelineOptions pipeline;
  pipeline.level = options_.level;
  addPipelineUpTo(pm, stage, pipeline);
  if (mlir::failed(pm.run(*module))) throw CompileError(diagnostics.message("pipeline failed"));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

const JitFunction &CompiledModel::forwardFor(int64_t bucket) {
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = forwardCache.find(bucket); it != forwardCache.end()) return *it->second;

  auto start = std::chrono::steady_clock::now();
  DiagnosticCapture diagnostics(*context);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForward(*context, config_, bucket);
  mlir::PassManager pm(context.get(), mlir::ModuleOp::getOperationName());
  PipelineOptions pipeline;
  pipeline.level = options_.level;
  addPipelineUpTo(pm, Stage::LLVM, pipeline);
  if (mlir::failed(pm.run(*module)))
    throw CompileError(diagnostics.message("compiling forward for " + std::to_string(bucket) + " tokens failed"));
  auto function = std::make_unique<JitFunction>(*module, "forward");
  compileSeconds[bucket] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return *(forwardCache[bucket] = std::move(function));
}

Logits CompiledModel::forward(const int64_t *ids, int64_t count, const std::vector<const float *> &weights) {
  if (count < 1 || count > config_.blockSize)
    throw std::invalid_argument("sequence length " + std::to_string(count) + " is outside [1, block_size=" +
                                std::to_string(config_.blockSize) + "]");
  if (weights.size() != parameters_.size())
    throw std::invalid_argument("expected " + std::to_string(parameters_.size()) + " weights, got " +
                                std::to_string(weights.size()));
  int64_t bucket = bucketFor(count);
  const JitFunction &function = forwardFor(bucket);

  // Padding tokens (id 0) sit after the real ones, so causal attention keeps them out of every
  // real position's result.
  std::vector<int64_t> paddedIds(bucket, 0), positions(bucket);
  std::copy(ids, ids + count, paddedIds.begin());
  for (int64_t i = 0; i < bucket; ++i) positions[i] = i;

  std::vector<MemRefDescriptor> descriptors;
  descriptors.reserve(parameters_.size() + 3);
  descriptors.push_back(MemRefDescriptor::result(2));
  descriptors.push_back(MemRefDescriptor::view(paddedIds.data(), {bucket}));
  descriptors.push_back(MemRefDescriptor::view(positions.data(), {bucket}));
  for (size_t i = 0; i < parameters_.size(); ++i)
    descriptors.push_back(MemRefDescriptor::view(weights[i], parameters_[i].shape));
  std::vector<void *> pointers;
  for (MemRefDescriptor &d : descriptors) pointers.push_back(d.pointer());
  function(pointers);

  const MemRefDescriptor &out = descriptors.front();
  if (out.stride(1) != 1 || out.stride(0) != out.size(1))
    throw std::logic_error("compiled forward returned non-contiguous logits");
  return Logits{out.data(), out.allocated(), out.size(0), out.size(1)};
}

std::map<int64_t, double> CompiledModel::compiledBuckets() const {
  std::lock_guard<std::mutex> lock(mutex);
  return compileSeconds;
}

} // namespace gpt
