// One place that registers everything the gpt compiler can parse and run, shared by gpt-opt
// and the Python extension so that both accept exactly the same IR and pass pipelines.
#ifndef GPT_CC_REGISTRATION_H
#define GPT_CC_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace gpt {

/// Adds the transformer dialect and all upstream dialects and dialect extensions.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers the transformer passes and all upstream passes with the global pass registry, so
/// textual pipelines can name any of them. Safe to call more than once.
void registerAllPasses();

/// A registry holding every dialect, made once per process (registering the passes on the way):
/// what a fresh MLIRContext for user IR starts from.
const mlir::DialectRegistry &processRegistry();

} // namespace gpt

#endif // GPT_CC_REGISTRATION_H
