// ExecutionEngine setup for the host CPU (see JitFunction.h). The codegen level has to sit on the
// TargetMachine: ExecutionEngineOptions::jitCodeGenOptLevel is ignored by MLIR 19 (a TargetMachine built
// at CodeGenOptLevel::None runs about 4x slower whatever that option says).
#include "cc/runtime/JitFunction.h"

#include "cc/runtime/ObjectCache.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/Transforms/IPO/AlwaysInliner.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace gpt {
namespace {

std::string describe(llvm::Error error) { return llvm::toString(std::move(error)); }

/// ExecutionEngine's packed wrapper of `name`'s C interface: `void(void **)`, what the runtime calls.
std::string packedEntryName(llvm::StringRef name) { return ("_mlir__mlir_ciface_" + name).str(); }

/// Makes the packed wrapper `entry` (ExecutionEngine's `_mlir__mlir_ciface_<name>(void **)`) the
/// module's only external function, with the C interface wrapper `_mlir_ciface_<name>` and the
/// entry point `<name>` inlined into it.
///
/// The entry point takes every weight (and KV cache) of every layer: in the LLVM calling
/// convention each memref is 5 or more scalars, so at 24 layers the C interface wrapper calls it
/// with 1,874 arguments, 1,868 of them stored to the stack, and ExecutionEngine's packed wrappers
/// make two such calls. SelectionDAG's store combining is quadratic in the stores of one call
/// sequence (98% of llc's time at 24 layers was X86 DAG->DAG instruction selection of
/// `_mlir_ciface_forward`), and IPSCCP and CalledValuePropagation slow down on such signatures
/// too, so compile time grew with the square of n_layer. Inlined, the wrappers' loads feed the
/// per-layer calls of the block function directly: one call per layer, each with one layer's
/// arguments. Internal linkage lets GlobalDCE drop the wrappers nothing calls (`_mlir_forward`,
/// `_mlir_gpt_block`, ...).
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

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

llvm::SubtargetFeatures hostFeatures() {
  llvm::SubtargetFeatures features;
  for (const auto &[feature, enabled] : llvm::sys::getHostCPUFeatures()) features.AddFeature(feature, enabled);
  return features;
}

std::unique_ptr<llvm::TargetMachine> hostTargetMachine() {
  initializeNativeTarget();
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple(llvm::sys::getProcessTriple())};
  builder.setCPU(llvm::sys::getHostCPUName().str());
  builder.addFeatures(hostFeatures().getFeatures());
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto machine = builder.createTargetMachine();
  if (!machine)
    throw std::runtime_error("cannot create a TargetMachine for the host: " + describe(machine.takeError()));
  return std::move(*machine);
}

} // namespace

JitFunction::JitFunction(mlir::ModuleOp module, llvm::StringRef name) {
  mlir::registerBuiltinDialectTranslation(*module.getContext());
  mlir::registerLLVMDialectTranslation(*module.getContext());
  mlir::registerOpenMPDialectTranslation(*module.getContext());

  std::unique_ptr<llvm::TargetMachine> machine = hostTargetMachine();
  // IR level O2 without unrolling (see optimizeModule); the codegen level stays Aggressive.
  llvm::TargetMachine *target = machine.get();
  const std::string entry = packedEntryName(name);
  std::function<llvm::Error(llvm::Module *)> optimize = [target, name, &entry](llvm::Module *m) {
    return optimizeModule(m, target, name, entry);
  };
  mlir::ExecutionEngineOptions options;
  options.transformer = optimize; // a function_ref: `optimize` outlives create()
  // Multi-threaded programs call the OpenMP runtime (__kmpc_fork_call, ...).
  llvm::StringRef sharedLibraries[] = {GPT_LIBOMP_PATH};
  options.sharedLibPaths = sharedLibraries;
  options.enableObjectDump = true; // keeps the object so that dumpObject() can show the machine code
  options.enableGDBNotificationListener = false;
  // jit-<pid>.dump files for `perf inject --jit` only on request: they would otherwise pile up.
  options.enablePerfNotificationListener = std::getenv("GPT_PERF_JITDUMP") != nullptr;
  auto created = mlir::ExecutionEngine::create(module, options, std::move(machine));
  if (!created) throw std::runtime_error("JIT compilation failed: " + describe(created.takeError()));
  engine = std::move(*created);

  // memref.copy of strided views lowers to a call of the runner-utils memrefCopy; give the JIT
  // its address instead of a path to the shared library.
  engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {llvm::orc::ExecutorAddr::fromPtr(&memrefCopy), llvm::JITSymbolFlags::Exported};
    return symbols;
  });

  auto function = engine->lookupPacked(("_mlir_ciface_" + name).str()); // that is, `entry`
  if (!function)
    throw std::runtime_error("compiled module has no entry point " + name.str() + ": " +
                             describe(function.takeError()));
  packed = *function;
}

JitFunction::JitFunction() = default;
JitFunction::~JitFunction() = default;

std::string JitFunction::hostDescription() {
  // Sorted: the feature map's iteration order differs between processes.
  std::vector<std::string> features = hostFeatures().getFeatures();
  std::sort(features.begin(), features.end());
  std::string description = llvm::sys::getProcessTriple() + " " + llvm::sys::getHostCPUName().str();
  for (const std::string &feature : features) description += " " + feature;
  return description;
}

std::unique_ptr<JitFunction> JitFunction::load(const std::string &object, llvm::StringRef name) {
  initializeNativeTarget();
  std::unique_ptr<llvm::MemoryBuffer> buffer = llvm::MemoryBuffer::getMemBufferCopy(object, "gpt-jit-object");
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) {
    llvm::consumeError(jit.takeError());
    return nullptr;
  }
  llvm::orc::JITDylib &dylib = (*jit)->getMainJITDylib();
  // The same symbols the ExecutionEngine gave the code when it was compiled: the process (libc,
  // libm), the OpenMP runtime and memrefCopy.
  char prefix = (*jit)->getDataLayout().getGlobalPrefix();
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
  auto openmp = llvm::orc::DynamicLibrarySearchGenerator::Load(GPT_LIBOMP_PATH, prefix);
  if (!process || !openmp) {
    llvm::consumeError(process.takeError());
    llvm::consumeError(openmp.takeError());
    return nullptr;
  }
  dylib.addGenerator(std::move(*process));
  dylib.addGenerator(std::move(*openmp));
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  symbols[interner("memrefCopy")] = {llvm::orc::ExecutorAddr::fromPtr(&memrefCopy), llvm::JITSymbolFlags::Exported};
  if (llvm::Error error = dylib.define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
    llvm::consumeError(std::move(error));
    return nullptr;
  }
  if (llvm::Error error = (*jit)->addObjectFile(std::move(buffer))) {
    llvm::consumeError(std::move(error));
    return nullptr;
  }
  auto address = (*jit)->lookup(packedEntryName(name));
  if (!address) {
    llvm::consumeError(address.takeError());
    return nullptr;
  }
  std::unique_ptr<JitFunction> function(new JitFunction());
  function->packed = address->toPtr<void (*)(void **)>();
  function->loaded = std::move(*jit);
  function->object = object;
  return function;
}

std::string JitFunction::objectBytes() const {
  if (!engine) return object;
  // ExecutionEngine only writes its object to a file, and a failed write there ends the process
  // (LLVM's "IO failure on output stream"). An in-memory file cannot fill a disk; the bytes are
  // then written, or not, by code that checks every step.
  int fd = ::memfd_create("gpt-jit-object", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("cannot create an in-memory file: ") + std::strerror(errno));
  engine->dumpToObjectFile("/proc/self/fd/" + std::to_string(fd));
  std::string bytes;
  char chunk[1 << 16];
  for (off_t offset = 0;;) {
    ssize_t got = ::pread(fd, chunk, sizeof chunk, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    bytes.append(chunk, static_cast<size_t>(got));
    offset += got;
  }
  ::close(fd);
  if (bytes.empty()) throw std::runtime_error("the JIT kept no object code for this program");
  return bytes;
}

void JitFunction::dumpObject(const std::string &path) const { writeFileChecked(path, objectBytes()); }

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
