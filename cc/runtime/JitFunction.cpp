// Compilation for the host CPU (see JitFunction.h): MLIR's LLVM dialect is translated to LLVM IR,
// optimized and compiled to an object file in memory, which lld links into a shared object that
// dlopen loads (SharedObject.h). Compiled and cached programs are loaded the same way. MLIR's
// ExecutionEngine is not used: it can only hand out its object through a file, and opening one
// registers LLVM's signal handlers (and an alternate signal stack) on whichever thread compiles.
#include "cc/runtime/JitFunction.h"

#include "cc/runtime/ObjectCache.h"
#include "cc/runtime/SharedObject.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/AMX/AMXToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/IPO/AlwaysInliner.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace gpt {
namespace {

std::string describe(llvm::Error error) { return llvm::toString(std::move(error)); }

/// The packed wrapper of `name`'s C interface: `void(void **)`, what the runtime calls.
std::string packedEntryName(llvm::StringRef name) { return ("_mlir__mlir_ciface_" + name).str(); }

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
/// each with one layer's arguments. Internal linkage lets GlobalDCE drop what nothing calls.
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

/// LLVM's O2 module pipeline without its loop unroller, after inlining the wrappers of `name` into
/// `entry` (see keepOnlyEntry). MLIR has already unrolled what matters (each vector.outerproduct
/// is a whole register tile); LLVM's full unrolling of the remaining constant-trip-count loops
/// turned the 4-layer/256-wide model's 16-token cached step from 4.9 k into 51 k instructions, and
/// machine scheduling of those blocks took 16-26 s (0.3 s without).
llvm::Error optimizeModule(llvm::Module *module, llvm::TargetMachine *machine, llvm::StringRef name,
                           llvm::StringRef entry) {
  keepOnlyEntry(*module, name, entry);
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
  // Before the O2 pipeline, whose interprocedural passes (IPSCCP, CalledValuePropagation) would
  // otherwise meet the wrappers' thousands of arguments.
  llvm::ModulePassManager passes;
  passes.addPass(llvm::AlwaysInlinerPass(/*InsertLifetimeIntrinsics=*/false));
  passes.addPass(llvm::GlobalDCEPass());
  passes.addPass(builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2));
  passes.run(*module, modules);
  return llvm::Error::success();
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

/// The LLVM-dialect `module` as an optimized ELF object for the host, its entry point's packed
/// wrapper included.
std::string compileToObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target) {
  mlir::registerAMXDialectTranslation(*module.getContext()); // the intrinsics of AMX tile code
  mlir::registerBuiltinDialectTranslation(*module.getContext());
  mlir::registerLLVMDialectTranslation(*module.getContext());
  mlir::registerOpenMPDialectTranslation(*module.getContext());
  std::unique_ptr<llvm::TargetMachine> machine = target.createTargetMachine();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, context, "gpt");
  if (!llvmModule) throw std::runtime_error("translating " + name.str() + " to LLVM IR failed");
  mlir::ExecutionEngine::setupTargetTripleAndDataLayout(llvmModule.get(), machine.get());
  llvm::Function *entry = llvmModule->getFunction(("_mlir_ciface_" + name).str());
  if (!entry || entry->isDeclaration())
    throw std::runtime_error("compiled module has no entry point _mlir_ciface_" + name.str());
  addPackedWrapper(*llvmModule, *entry);
  if (llvm::Error error = optimizeModule(llvmModule.get(), machine.get(), name, packedEntryName(name)))
    throw std::runtime_error("optimizing " + name.str() + " failed: " + describe(std::move(error)));
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, stream, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw std::runtime_error("the target's TargetMachine cannot emit object files");
  codegen.run(*llvmModule);
  return std::string(object.begin(), object.end());
}

} // namespace

JitFunction::JitFunction() = default;
JitFunction::~JitFunction() = default;

std::string JitFunction::compile(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target) {
  return linkSharedObject(compileToObject(module, name, target));
}

std::unique_ptr<JitFunction> JitFunction::load(std::string sharedObject, llvm::StringRef name, int fd,
                                               std::string *error) {
  std::string reason;
  std::unique_ptr<JitFunction> function(new JitFunction());
  function->sharedObject_ = std::move(sharedObject);
  function->program = fd >= 0 ? LoadedProgram::fromFile(fd, &reason)
                              : LoadedProgram::fromBytes(function->sharedObject_, ("gpt-" + name).str(), &reason);
  if (function->program) {
    function->packed = reinterpret_cast<void (*)(void **)>(function->program->symbol(packedEntryName(name)));
    if (!function->packed) reason = "it exports no " + packedEntryName(name);
  }
  if (function->packed) return function;
  if (error) *error = reason;
  return nullptr;
}

void JitFunction::dumpObject(const std::string &path) const { writeFileChecked(path, sharedObject_); }

void JitFunction::writeObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                              const std::string &path) {
  writeFileChecked(path, compileToObject(module, name, target));
}

void JitFunction::call(llvm::ArrayRef<void *> arguments, llvm::ArrayRef<size_t> scalarArguments) const {
  // The packed wrapper takes a pointer to each argument's value. A memref argument's value is a
  // pointer to its descriptor; a scalar's value is the scalar itself, which `arguments` already
  // points to.
  std::vector<void *> values(arguments.begin(), arguments.end());
  std::vector<void *> packedArgs;
  packedArgs.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bool scalar = std::find(scalarArguments.begin(), scalarArguments.end(), i) != scalarArguments.end();
    packedArgs.push_back(scalar ? values[i] : static_cast<void *>(&values[i]));
  }
  packed(packedArgs.data());
}

} // namespace gpt
