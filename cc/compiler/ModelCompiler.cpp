// A model's entry points built, lowered and compiled (see Compilers.h).
#include "cc/compiler/Compilers.h"

#include "cc/DiagnosticCapture.h"
#include "cc/Registration.h"
#include "cc/builder/GPTBuilder.h"
#include "cc/compiler/MachineCode.h"
#include "cc/runtime/Files.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

namespace gpt {

namespace {

/// What an entry point of these shapes is, for error messages.
std::string describeEntry(const EntryRequest &entry) {
  return entry.batch          ? "the batched step for " + std::to_string(entry.batch->tokens) + " tokens"
         : entry.cacheLen > 0 ? "the cached step for " + std::to_string(entry.seqLen) + " tokens" +
                                    (entry.logitsRows > 1 ? " (logits of every one)" : "")
                              : "forward for " + std::to_string(entry.seqLen) + " tokens";
}

class MlirModelCompiler : public ModelCompiler {
public:
  MlirModelCompiler(const GPTConfig &config, const WeightStorage &storage, const CompileOptions &options,
                    const JitTarget &target)
      : config(config), storage(storage), options(options), target(target) {
    // The dialects are registered, not loaded: the builder loads the few it uses, and
    // prepareForPasses() the rest before the first pipeline.
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    // A failure on a whole model would otherwise print the entire module into the message.
    context->printOpOnDiagnostic(false);
  }

  std::string compile(const EntryRequest &entry) override {
    mlir::OwningOpRef<mlir::ModuleOp> module = lowerToLLVM(entry);
    return compileToSharedObject(*module, entry.name, target, vectorBitsFor(entry));
  }

  std::string ir(const EntryRequest &entry, Stage stage) override {
    mlir::OwningOpRef<mlir::ModuleOp> module = build(entry);
    runPipeline(*module, stage, describeEntry(entry));
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    return text;
  }

  void writeObject(const EntryRequest &entry, const std::string &path) override {
    mlir::OwningOpRef<mlir::ModuleOp> module = lowerToLLVM(entry);
    writeFileChecked(path, compileToObject(*module, entry.name, target, vectorBitsFor(entry)));
  }

private:
  /// Decode (the cached step of one token) of float32 weights on an AVX-512 target runs in
  /// 256-bit registers. It streams every weight once, and on an Intel Xeon with AVX-512 the
  /// same programs decode 1.15x to 1.17x faster on ymm than on zmm (docs/PERFORMANCE.md,
  /// "Decode in 256-bit registers"); the logits are the same bits. Every other program keeps
  /// the target's width: prefill and forward are bound by the FMA units, which zmm doubles, and
  /// the low-precision formats' lane-dot intrinsics exist only on the target's widest registers
  /// here. 0: the target's own width.
  int64_t vectorBitsFor(const EntryRequest &entry) const {
    const bool decode = !entry.batch && entry.cacheLen > 0 && entry.seqLen == 1;
    return decode && storage.format == WeightFormat::F32 && target.isX86() && target.vectorBits() > 256 ? 256 : 0;
  }

  /// The builder's module of the entry point, which the pipeline starts from.
  mlir::OwningOpRef<mlir::ModuleOp> build(const EntryRequest &entry) {
    DiagnosticCapture diagnostics(*context);
    if (entry.batch) return buildBatchStep(*context, config, *entry.batch, storage);
    if (entry.cacheLen > 0) return buildStep(*context, config, entry.seqLen, entry.cacheLen, storage, entry.logitsRows);
    return buildForward(*context, config, entry.seqLen, storage);
  }

  /// Registers the passes and loads every dialect into the context, once, before the first
  /// pipeline: schedules run upstream passes by name (transform.apply_registered_pass), and the
  /// passes create ops of dialects no input module mentions.
  void prepareForPasses() {
    if (passesPrepared) return;
    registerAllPasses();
    context->loadAllAvailableDialects();
    passesPrepared = true;
  }

  /// Runs the pipeline up to `stage` on `module` (`what` names it in errors).
  void runPipeline(mlir::ModuleOp module, Stage stage, const std::string &what) {
    prepareForPasses();
    runPipelineUpTo(module, stage, options, target, "compiling " + what + " failed");
  }

  /// The entry point lowered to the LLVM dialect, checked on the way to write [logitsRows, padded
  /// vocab] logits into its last argument and return nothing (what the runtime relies on).
  mlir::OwningOpRef<mlir::ModuleOp> lowerToLLVM(const EntryRequest &entry) {
    mlir::OwningOpRef<mlir::ModuleOp> module = build(entry);
    const std::string what = describeEntry(entry);
    runPipeline(*module, Stage::Bufferized, what);
    // The calling convention: nothing returned, the logits written into the last argument, and
    // (for the cached step) the caches updated where they are, not copied out.
    auto function = module->lookupSymbol<mlir::func::FuncOp>(entry.name);
    const int64_t vocab = config.paddedVocabSize(storage.tiles);
    auto logitsType = mlir::MemRefType::get({entry.logitsRows, vocab}, mlir::Float32Type::get(context.get()));
    if (!function || function.getNumResults() != 0 || function.getNumArguments() == 0 ||
        function.getArgumentTypes().back() != logitsType)
      throw CompileError("internal error: " + entry.name + " does not take its logits as a " +
                         std::to_string(entry.logitsRows) + "x" + std::to_string(vocab) +
                         " buffer in its last argument and return nothing");
    runLLVMStage(*module, options, "lowering " + entry.name + " to LLVM failed");
    return module;
  }

  const GPTConfig config;
  const WeightStorage storage;
  const CompileOptions options;
  const JitTarget target;
  std::unique_ptr<mlir::MLIRContext> context;
  bool passesPrepared = false; // prepareForPasses() ran
};

} // namespace

std::unique_ptr<ModelCompiler> newModelCompiler(const GPTConfig &config, const WeightStorage &storage,
                                                const CompileOptions &options, const JitTarget &target) {
  return std::make_unique<MlirModelCompiler>(config, storage, options, target);
}

} // namespace gpt
