// The seam between the runtime and the compiler. The runtime (the Python extension `_gpt.so`)
// binds weights, keys and loads programs, and calls them; it links neither MLIR nor LLVM's shared
// libraries. Everything that builds IR, runs pass pipelines or generates code lives in the
// compiler library (`_gpt_compiler.so`, cc/compiler), which the runtime loads with dlopen the
// first time it must compile: on a disk-cache miss, for `ir()`, an imported function, a named
// target CPU or the GPU target. A process whose programs all come from the disk cache never maps
// the compiler (about 60 MiB of resident memory and most of `import gpt`'s time).
//
// Only types of this project and the standard library cross the seam, and both sides are built
// from the same sources by the same build: their layouts agree, and exceptions (CompileError,
// std::invalid_argument) propagate through it.
#ifndef GPT_CC_RUNTIME_PROGRAMCOMPILER_H
#define GPT_CC_RUNTIME_PROGRAMCOMPILER_H

#include "cc/builder/EntryPoints.h"
#include "cc/builder/GPTConfig.h"
#include "cc/builder/Parameters.h"
#include "cc/codegen/cpu/PipelineLevels.h"
#include "cc/codegen/gpu/GpuArtifact.h"
#include "cc/runtime/CompileOptions.h"
#include "cc/runtime/JitTarget.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

/// One entry point of a model, as the runtime asks for it.
struct EntryRequest {
  std::string name;       ///< "forward", "step" (cacheLen > 0) or "batch_step" (batch set)
  int64_t seqLen = 0;     ///< tokens per call
  int64_t cacheLen = 0;   ///< the step's cache positions; 0 for forward
  int64_t logitsRows = 0; ///< rows of the logits buffer the entry writes into its last argument
  const BatchShape *batch = nullptr;
};

/// A model's entry points built, lowered and compiled over one MLIR context (CompiledModel's
/// compiler, made on its first miss).
class ModelCompiler {
public:
  virtual ~ModelCompiler() = default;
  /// The entry point compiled for the model's target and linked: a shared object's bytes, whose
  /// packed entry takes the arguments of entryArguments() and writes [logitsRows, padded vocab]
  /// logits into its last one (checked). Throws CompileError.
  virtual std::string compile(const EntryRequest &entry) = 0;
  /// The entry point's program after `stage`, as text.
  virtual std::string ir(const EntryRequest &entry, Stage stage) = 0;
  /// The entry point compiled into a relocatable object file at `path`, neither linked nor
  /// loaded: how code for a target the host cannot run is inspected.
  virtual void writeObject(const EntryRequest &entry, const std::string &path) = 0;
};

/// The static type of an argument or result: its shape and element type ("f32", "i64", ...).
struct TensorSignature {
  std::vector<int64_t> shape;
  std::string elementType;
};

/// An imported transformer-dialect function (CompiledFunction.h), parsed once.
class FunctionCompiler {
public:
  virtual ~FunctionCompiler() = default;
  virtual const std::vector<TensorSignature> &arguments() const = 0;
  virtual const std::vector<TensorSignature> &results() const = 0;
  /// The function compiled and linked: a shared object's bytes whose packed entry takes the
  /// arguments, then one dense out-buffer per result (checked). Throws CompileError.
  virtual std::string compile() = 0;
  /// The module after `stage`, as text.
  virtual std::string ir(Stage stage) = 0;
};

/// What the compiler library offers; one instance per process.
class ProgramCompiler {
public:
  /// The compiler of a model's entry points with `config`, its weights stored as `storage`.
  virtual std::unique_ptr<ModelCompiler> compileModel(const GPTConfig &config, const WeightStorage &storage,
                                                      const CompileOptions &options, const JitTarget &target) = 0;
  /// Parses `ir`, a module holding the transformer-dialect `func.func` named `name` whose arguments
  /// and results are statically shaped tensors. Throws CompileError (with MLIR's diagnostics)
  /// when it does not parse or verify, std::invalid_argument when the function is missing or has
  /// a dynamically shaped argument or result.
  virtual std::unique_ptr<FunctionCompiler> compileFunction(const std::string &ir, const std::string &name,
                                                            const CompileOptions &options, const JitTarget &target) = 0;
  /// Every processor feature LLVM has for `triple`, on where `cpu` has it. Throws
  /// std::invalid_argument naming the CPU when LLVM does not know it.
  virtual std::map<std::string, bool> cpuFeatures(const std::string &triple, const std::string &cpu) = 0;
  /// Parses MLIR text, runs a textual pass pipeline over it (function passes nest implicitly) and
  /// returns the printed module. Throws CompileError with MLIR's diagnostics.
  virtual std::string runPipeline(const std::string &ir, const std::string &pipeline, bool verifyEach) = 0;
  /// A config's entry points compiled for an NVIDIA GPU (GpuArtifact.h).
  virtual gpu::GpuArtifact compileGpuArtifact(const GPTConfig &config, const gpu::GpuTargetOptions &options) = 0;
  /// Does now, once per process, what the first compile would do before its own work: LLVM's
  /// targets initialized, MLIR's passes registered.
  virtual void prepare() = 0;

protected:
  ~ProgramCompiler() = default;
};

/// The symbol a compiled program exports for entry point `name`: its packed wrapper,
/// `void _mlir__mlir_ciface_<name>(void **arguments)` (cc/compiler/MachineCode.cpp adds it).
inline std::string packedEntryName(const std::string &name) { return "_mlir__mlir_ciface_" + name; }

/// The C symbol the compiler library exports: `ProgramCompiler *gpt_program_compiler()`.
constexpr const char *kProgramCompilerSymbol = "gpt_program_compiler";

/// The compiler library, `_gpt_compiler.so` beside the binary the runtime is linked into (the
/// Python extension), loaded on the first call. Throws CompileError naming the file when it is
/// missing or cannot be loaded.
ProgramCompiler &programCompiler();
/// Whether programCompiler() has loaded the library in this process.
bool programCompilerLoaded();
/// The compiler library's path (whether or not it exists).
std::string programCompilerPath();

/// The target CompileOptions(target_cpu=`name`) names: "host"; an LLVM CPU name of the host's
/// architecture ("haswell", "znver3", "skylake-avx512", "znver4", "sapphirerapids", ...); or
/// "<arch>:<cpu>" for another architecture ("aarch64:neoverse-v1", "aarch64:apple-m1"). A named CPU
/// has its own features (those LLVM gives it, through the compiler library), not the host's.
/// Where the environment sets GPT_TARGET_CPU to a CPU name, "host" means that CPU: how this
/// machine runs the code another machine kind would get (an AVX-512 host testing AVX2 code). Throws
/// std::invalid_argument when LLVM does not know the name.
JitTarget resolveTarget(const std::string &name);

} // namespace gpt

#endif // GPT_CC_RUNTIME_PROGRAMCOMPILER_H
