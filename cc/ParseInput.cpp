// The nesting limit on user MLIR text and the parse behind it (see ParseInput.h).
#include "cc/ParseInput.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <vector>

namespace gpt {

std::optional<size_t> findExcessiveNesting(llvm::StringRef text, unsigned limit) {
  // A stack of the open brackets, so that a stray closer (the `>` of `>=` inside an affine set's
  // parentheses, an unbalanced `)` in broken input) closes nothing and cannot hide depth.
  std::vector<char> open;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    switch (c) {
    case '"': // a string literal: skip to its unescaped closing quote
      for (++i; i < n && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      break;
    case '/': // a `//` comment: skip to the end of the line
      if (i + 1 < n && text[i + 1] == '/')
        while (i < n && text[i] != '\n') ++i;
      break;
    case '{':
    case '(':
    case '[':
    case '<':
      open.push_back(c);
      if (open.size() > limit) return i;
      break;
    case '}':
    case ')':
    case ']':
    case '>': {
      if (c == '>' && i > 0 && text[i - 1] == '-') break; // the arrow of a function type or map
      const char opener = c == '}' ? '{' : c == ')' ? '(' : c == ']' ? '[' : '<';
      if (!open.empty() && open.back() == opener) open.pop_back();
      break;
    }
    default:
      break;
    }
  }
  return std::nullopt;
}

std::string nestingLimitMessage(unsigned limit) {
  return "input nests brackets more than " + std::to_string(limit) +
         " levels deep ({, (, [, <); the MLIR parser would overflow its stack, so the input is refused";
}

mlir::OwningOpRef<mlir::ModuleOp> parseModuleText(llvm::StringRef text, mlir::MLIRContext *ctx,
                                                  llvm::StringRef bufferName, unsigned depthLimit) {
  if (std::optional<size_t> offset = findExcessiveNesting(text, depthLimit)) {
    llvm::StringRef before = text.take_front(*offset);
    const unsigned line = 1 + before.count('\n');
    const size_t lineStart = before.rfind('\n');
    const size_t column = lineStart == llvm::StringRef::npos ? *offset + 1 : *offset - lineStart;
    mlir::emitError(mlir::FileLineColLoc::get(ctx, bufferName, line, static_cast<unsigned>(column)))
        << nestingLimitMessage(depthLimit);
    return nullptr;
  }
  return mlir::parseSourceString<mlir::ModuleOp>(text, ctx, bufferName);
}

} // namespace gpt
