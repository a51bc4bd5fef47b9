// Machine code for a target (see MachineCode.h).
#include "cc/compiler/MachineCode.h"

#include "cc/compiler/ProgramLinker.h"
#include "cc/runtime/ProgramCompiler.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/AMX/AMXToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/Transforms/IPO/AlwaysInliner.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"
#include "llvm/Transforms/IPO/MergeFunctions.h"
#include "llvm/Transforms/Utils/SplitModule.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace gpt {

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // Cross-compiling (an AArch64 object on an x86 host) needs the other targets too.
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    // No list scheduling after register allocation. Zen's scheduling models ask for it, and it
    // took 15% of a program's code generation (27 ms of the 1.7B model's 86 ms entry alone:
    // thousands of loads in one block), for code that the out-of-order cores it runs on reorder
    // anyway: a 16-token prefill of SmolLM2-1.7B compiled in 290 ms instead of 333, and its
    // prefill and decode speeds did not move (alternated runs, docs/JOURNAL.md). LLVM has no
    // per-target switch for it; the option is LLVM's own (llc -post-RA-scheduler=false), set once
    // for this process's code generation.
    auto &options = llvm::cl::getRegisteredOptions();
    if (auto option = options.find("post-RA-scheduler"); option != options.end())
      option->second->addOccurrence(1, "post-RA-scheduler", "false");
  });
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const JitTarget &target) {
  initializeNativeTarget();
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple(target.triple())};
  builder.setCPU(target.cpu());
  // Code that runs here leaves out the system features the host hides (JitTarget's isSystemFeature).
  const std::map<std::string, bool> host =
      target.runsOnHost() ? JitTarget::hostFeatures() : std::map<std::string, bool>{};
  llvm::SubtargetFeatures subtarget;
  for (const auto &[feature, enabled] : target.features()) {
    auto found = host.find(feature);
    subtarget.AddFeature(feature, enabled && (found == host.end() || found->second));
  }
  builder.addFeatures(subtarget.getFeatures());
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // Position-independent, small code model: what a shared object needs (SharedObject.h).
  builder.setRelocationModel(llvm::Reloc::PIC_);
  builder.setCodeModel(llvm::CodeModel::Small);
  auto machine = builder.createTargetMachine();
  if (!machine)
    throw std::runtime_error("cannot create a TargetMachine for " + target.cpu() + ": " +
                             llvm::toString(machine.takeError()));
  return std::move(*machine);
}

namespace {

std::string describe(llvm::Error error) { return llvm::toString(std::move(error)); }

/// Makes the packed wrapper `entry` (`_mlir__mlir_ciface_<name>(void **)`) the module's only
/// external function, with the C interface wrapper `_mlir_ciface_<name>` and the entry point
/// `<name>` inlined into it.
///
/// The entry point takes every weight (and KV cache) of every layer: in the LLVM calling
/// convention each memref is 5 or more scalars, so at 24 layers the C interface wrapper calls it
/// with 1,874 arguments, 1,868 of them stored to the stack. SelectionDAG's store combining is
/// quadratic in the stores of one call sequence (98% of llc's time at 24 layers was X86 DAG->DAG
/// instruction selection of `_mlir_ciface_forward`), and IPSCCP and CalledValuePropagation slow
/// down on such signatures too, so compile time grew with the square of n_layer. Inlined, the
/// wrappers' loads feed the per-layer calls of the block function directly: one call per layer,
/// each with one layer's arguments, each memref as one pointer (--gpt-bare-pointer-calls; as
/// descriptors the 24 calls were 2,700 stores in one block, the same quadratic cost again).
/// Internal linkage lets GlobalDCE drop what nothing calls.
void keepOnlyEntry(llvm::Module &module, llvm::StringRef name, llvm::StringRef entry) {
  for (llvm::Function &function : module)
    if (!function.isDeclaration() && function.getName() != entry)
      function.setLinkage(llvm::GlobalValue::InternalLinkage);
  for (const std::string &wrapped : {name.str(), "_mlir_ciface_" + name.str()})
    if (llvm::Function *function = module.getFunction(wrapped)) {
      function->removeFnAttr(llvm::Attribute::NoInline);
      function->addFnAttr(llvm::Attribute::AlwaysInline);
    }
}

/// Runs `passes` (built by `build` from a PassBuilder for `machine`) on `module`.
template <typename Build> void runModulePasses(llvm::Module &module, llvm::TargetMachine *machine, Build build) {
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = false;
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgsccs;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(machine, tuning);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgsccs);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgsccs, modules);
  llvm::ModulePassManager passes = build(builder);
  passes.run(module, modules);
}

/// Inlines the wrappers of `name` into `entry` (see keepOnlyEntry) and drops what nothing calls:
/// before the O2 pipeline, whose interprocedural passes (IPSCCP, CalledValuePropagation) would
/// otherwise meet the wrappers' thousands of arguments. Then merges functions whose bodies are the
/// same: a model whose layers attend in windows of two sizes (Gemma's local and global layers) has
/// a block function per window, and the OpenMP regions they share (the matmuls) would be
/// optimized and compiled once per block. (Layers that differ only in their weights' formats share
/// one block function already, GPTBuilder's LayerBlocks; when they had one each, this merge took
/// 13% off a 1.7B Q4_K_M compile.)
void inlineWrappers(llvm::Module &module, llvm::TargetMachine *machine, llvm::StringRef name, llvm::StringRef entry) {
  keepOnlyEntry(module, name, entry);
  runModulePasses(module, machine, [](llvm::PassBuilder &) {
    llvm::ModulePassManager passes;
    passes.addPass(llvm::AlwaysInlinerPass(/*InsertLifetimeIntrinsics=*/false));
    passes.addPass(llvm::GlobalDCEPass());
    passes.addPass(llvm::MergeFunctionsPass());
    return passes;
  });
}

/// LLVM's O2 module pipeline without its loop unroller. MLIR has already unrolled what matters
/// (each vector.outerproduct is a whole register tile); LLVM's full unrolling of the remaining
/// constant-trip-count loops turned the 4-layer/256-wide model's 16-token cached step from 4.9 k
/// into 51 k instructions, and machine scheduling of those blocks took 16-26 s (0.3 s without).
void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine) {
  runModulePasses(module, machine, [](llvm::PassBuilder &builder) {
    return builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  });
}

/// `module` compiled by `machine` into a relocatable object.
std::string emitObject(llvm::Module &module, llvm::TargetMachine &machine) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, stream, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw std::runtime_error("the target's TargetMachine cannot emit object files");
  codegen.run(module);
  return std::string(object.begin(), object.end());
}

/// Adds `_mlir_<function>(void **arguments)`, which loads each argument of `function` from the
/// pointer at its position and calls it: one entry that takes any signature (the wrapper MLIR's
/// ExecutionEngine adds to every function, here for the entry point only).
void addPackedWrapper(llvm::Module &module, llvm::Function &function) {
  llvm::IRBuilder<> builder(module.getContext());
  auto *type = llvm::FunctionType::get(builder.getVoidTy(), builder.getPtrTy(), /*isVarArg=*/false);
  auto *wrapper =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, "_mlir_" + function.getName(), module);
  builder.SetInsertPoint(llvm::BasicBlock::Create(module.getContext(), "entry", wrapper));
  llvm::SmallVector<llvm::Value *> arguments;
  for (llvm::Argument &argument : function.args()) {
    llvm::Value *slot =
        builder.CreateGEP(builder.getPtrTy(), wrapper->getArg(0), builder.getInt64(argument.getArgNo()));
    arguments.push_back(builder.CreateLoad(argument.getType(), builder.CreateLoad(builder.getPtrTy(), slot)));
  }
  builder.CreateCall(&function, arguments);
  builder.CreateRetVoid();
}

/// The LLVM IR of `module` for `machine`, its entry's wrappers inlined (inlineWrappers), not yet
/// optimized: the packed wrapper of `name` added, and (`vectorBits` > 0, x86) every function kept
/// to registers of that many bits.
std::unique_ptr<llvm::Module> translate(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                                        llvm::TargetMachine *machine, llvm::LLVMContext &context, int64_t vectorBits) {
  mlir::registerAMXDialectTranslation(*module.getContext()); // the intrinsics of AMX tile code
  mlir::registerBuiltinDialectTranslation(*module.getContext());
  mlir::registerLLVMDialectTranslation(*module.getContext());
  mlir::registerOpenMPDialectTranslation(*module.getContext());
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, context, "gpt");
  if (!llvmModule) throw std::runtime_error("translating " + name.str() + " to LLVM IR failed");
  mlir::ExecutionEngine::setupTargetTripleAndDataLayout(llvmModule.get(), machine);
  llvm::Function *entry = llvmModule->getFunction(("_mlir_ciface_" + name).str());
  if (!entry || entry->isDeclaration())
    throw std::runtime_error("compiled module has no entry point _mlir_ciface_" + name.str());
  addPackedWrapper(*llvmModule, *entry);
  if (vectorBits > 0 && target.isX86())
    for (llvm::Function &function : *llvmModule)
      if (!function.isDeclaration()) {
        // Both: the X86 backend keeps 512-bit registers legal unless the function neither
        // prefers nor requires them.
        function.addFnAttr("prefer-vector-width", std::to_string(vectorBits));
        function.addFnAttr("min-legal-vector-width", std::to_string(vectorBits));
      }
  inlineWrappers(*llvmModule, machine, name, packedEntryName(name.str()));
  return llvmModule;
}

/// A program smaller than this many LLVM instructions is optimized and compiled on one thread: a
/// split and its bitcode round trip would cost more than the second thread saves. A model of 2
/// layers takes 5,000 to 15,000; SmolLM2-1.7B's Q4_K_M programs more.
constexpr size_t kSplitInstructions = 20000;

/// kSplitInstructions, or $GPT_SPLIT_INSTRUCTIONS when it is a number (the tests split small
/// programs with it, to check a split program against a whole one).
size_t splitInstructions() {
  const char *setting = std::getenv("GPT_SPLIT_INSTRUCTIONS");
  if (!setting || !*setting) return kSplitInstructions;
  char *end = nullptr;
  const unsigned long long value = std::strtoull(setting, &end, 10);
  return *end == '\0' ? static_cast<size_t>(value) : kSplitInstructions;
}

/// The threads a program's optimization and code generation are split over: one for a small
/// program or a single core, else two. A model's programs are mostly a layer's block function
/// or two and their OpenMP regions, which split into two parts of about the same size.
unsigned partsFor(const llvm::Module &module) {
  size_t instructions = 0;
  for (const llvm::Function &function : module) instructions += function.getInstructionCount();
  return instructions >= splitInstructions() && std::thread::hardware_concurrency() >= 2 ? 2 : 1;
}

/// Optimizes and compiles `module` in parts (partsFor) on threads of their own: one relocatable
/// object per part, which together define what `module` defines. Each part goes to its thread as
/// bitcode, read back into a context of its own: an LLVMContext is not shared between threads.
/// SplitModule makes the functions one part calls in another external (hidden, for the link).
std::vector<std::string> compileInParts(std::unique_ptr<llvm::Module> module, llvm::TargetMachine &machine,
                                        const JitTarget &target) {
  const unsigned parts = partsFor(*module);
  if (parts == 1) {
    optimizeModule(*module, &machine);
    return {emitObject(*module, machine)};
  }
  std::vector<llvm::SmallVector<char, 0>> bitcode;
  llvm::SplitModule(*module, parts, [&](std::unique_ptr<llvm::Module> part) {
    llvm::raw_svector_ostream stream(bitcode.emplace_back());
    llvm::WriteBitcodeToFile(*part, stream);
  });
  module.reset();
  std::vector<std::string> objects(bitcode.size());
  std::vector<std::exception_ptr> failures(bitcode.size());
  auto compilePart = [&](size_t i) {
    try {
      llvm::LLVMContext context;
      llvm::Expected<std::unique_ptr<llvm::Module>> part = llvm::parseBitcodeFile(
          llvm::MemoryBufferRef(llvm::StringRef(bitcode[i].data(), bitcode[i].size()), "part"), context);
      if (!part) throw std::runtime_error("reading a split part back failed: " + describe(part.takeError()));
      std::unique_ptr<llvm::TargetMachine> partMachine = createTargetMachine(target);
      optimizeModule(**part, partMachine.get());
      objects[i] = emitObject(**part, *partMachine);
    } catch (...) {
      failures[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads; // parts 1 .., part 0 on this thread
  for (size_t i = 1; i < bitcode.size(); ++i) threads.emplace_back(compilePart, i);
  if (!bitcode.empty()) compilePart(0);
  for (std::thread &thread : threads) thread.join();
  for (const std::exception_ptr &failure : failures)
    if (failure) std::rethrow_exception(failure);
  return objects;
}

} // namespace

std::string compileToObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target, int64_t vectorBits) {
  std::unique_ptr<llvm::TargetMachine> machine = createTargetMachine(target);
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule = translate(module, name, target, machine.get(), context, vectorBits);
  optimizeModule(*llvmModule, machine.get());
  return emitObject(*llvmModule, *machine);
}

std::string compileToSharedObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                                  int64_t vectorBits) {
  std::unique_ptr<llvm::TargetMachine> machine = createTargetMachine(target);
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule = translate(module, name, target, machine.get(), context, vectorBits);
  return linkSharedObject(compileInParts(std::move(llvmModule), *machine, target));
}

} // namespace gpt
