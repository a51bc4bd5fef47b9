// Collects the diagnostics of an MLIRContext as text, so failures become exceptions that carry
// MLIR's messages and locations instead of lines printed to stderr.
#ifndef GPT_CC_DIAGNOSTICCAPTURE_H
#define GPT_CC_DIAGNOSTICCAPTURE_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace gpt {

class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext &ctx)
      : handler(&ctx, [this](mlir::Diagnostic &diag) {
          llvm::raw_string_ostream os(text);
          if (!text.empty()) os << "\n";
          os << diag.getLocation() << ": " << severity(diag.getSeverity()) << ": " << diag;
          for (const mlir::Diagnostic &note : diag.getNotes()) os << "\n" << note.getLocation() << ": note: " << note;
          return mlir::success();
        }) {}

  /// `what`, followed by every diagnostic seen so far.
  std::string message(const std::string &what) const { return text.empty() ? what : what + ":\n" + text; }

private:
  static const char *severity(mlir::DiagnosticSeverity s) {
    switch (s) {
    case mlir::DiagnosticSeverity::Error:
      return "error";
    case mlir::DiagnosticSeverity::Warning:
      return "warning";
    case mlir::DiagnosticSeverity::Note:
      return "note";
    case mlir::DiagnosticSeverity::Remark:
      return "remark";
    }
    return "diagnostic";
  }

  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace gpt

#endif // GPT_CC_DIAGNOSTICCAPTURE_H
