// Parsing of user-written MLIR text behind a nesting limit: MLIR's parser recurses once per
// nested region, attribute or bracket and overflows the stack somewhere between 4,000 and 8,000
// levels, so every entry point that parses text from a user (gpt-opt, gpt.run_pipeline, the
// fuzzer) refuses deeper input with an error instead of crashing.
#ifndef GPT_CC_PARSEINPUT_H
#define GPT_CC_PARSEINPUT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace gpt {

/// The deepest bracket nesting ({, (, [ and <) accepted. Real programs stay under 50; 1,000 keeps
/// the parser and the passes' recursion over nested regions well inside an 8 MB stack (and a
/// 2 MB thread stack).
constexpr unsigned kMaxNestingDepth = 1000;

/// The offset of the first opening bracket that nests deeper than `limit`, if any. Brackets in
/// string literals and `//` comments do not count; the `>` of `->` closes nothing.
std::optional<size_t> findExcessiveNesting(llvm::StringRef text, unsigned limit = kMaxNestingDepth);

/// The error reported for input that nests deeper than `limit`.
std::string nestingLimitMessage(unsigned limit = kMaxNestingDepth);

/// Parses `text` as a module (verified), reporting errors as diagnostics of `ctx`; input nested
/// deeper than `depthLimit` gets one error at the offending bracket and is not parsed.
mlir::OwningOpRef<mlir::ModuleOp> parseModuleText(llvm::StringRef text, mlir::MLIRContext *ctx,
                                                  llvm::StringRef bufferName, unsigned depthLimit = kMaxNestingDepth);

} // namespace gpt

#endif // GPT_CC_PARSEINPUT_H
