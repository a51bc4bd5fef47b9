// The compiler library's one export: the ProgramCompiler the runtime loads it for
// (cc/runtime/ProgramCompiler.h).
#include "cc/Registration.h"
#include "cc/codegen/cpu/TargetCpus.h"
#include "cc/compiler/Compilers.h"
#include "cc/compiler/MachineCode.h"

namespace gpt {
namespace {

class MlirProgramCompiler final : public ProgramCompiler {
public:
  std::unique_ptr<ModelCompiler> compileModel(const GPTConfig &config, const WeightStorage &storage,
                                              const CompileOptions &options, const JitTarget &target) override {
    return newModelCompiler(config, storage, options, target);
  }
  std::unique_ptr<FunctionCompiler> compileFunction(const std::string &ir, const std::string &name,
                                                    const CompileOptions &options, const JitTarget &target) override {
    return newFunctionCompiler(ir, name, options, target);
  }
  std::map<std::string, bool> cpuFeatures(const std::string &triple, const std::string &cpu) override {
    return codegen::cpuFeatures(triple, cpu);
  }
  std::string runPipeline(const std::string &ir, const std::string &pipeline, bool verifyEach) override {
    return runTextPipeline(ir, pipeline, verifyEach);
  }
  gpu::GpuArtifact compileGpuArtifact(const GPTConfig &config, const gpu::GpuTargetOptions &options) override {
    return gpu::compileGpuArtifact(config, options);
  }
  void prepare() override {
    initializeNativeTarget();
    registerAllPasses();
  }
};

} // namespace
} // namespace gpt

extern "C" __attribute__((visibility("default"))) gpt::ProgramCompiler *gpt_program_compiler() {
  static gpt::MlirProgramCompiler compiler;
  return &compiler;
}
