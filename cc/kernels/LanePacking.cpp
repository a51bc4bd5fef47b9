// The checks every format's lane packing and reading makes (FormatKernelUtils.h), out of line so
// that the packers' loops stay small: each format's lane kernels are its file in formats/.
#include "cc/kernels/FormatKernelUtils.h"

#include <stdexcept>
#include <string>

namespace gpt::kernels {

void checkLaneShape(const char *what, int64_t rows, int64_t cols, int64_t width, int64_t rowMultiple, const char *why) {
  if (rows < 0 || rows % rowMultiple != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(rows) + " is not a multiple of " +
                                std::to_string(rowMultiple) + " (" + why + ")");
  if (width <= 0 || cols < 0 || cols % width != 0)
    throw std::invalid_argument(std::string(what) + ": the column count " + std::to_string(cols) +
                                " is not a multiple of the panel width " + std::to_string(width));
}

void throwWideCode(const char *what, int bits, int code, int64_t row, int64_t column) {
  throw std::invalid_argument(std::string(what) + ": code " + std::to_string(code) + " at row " + std::to_string(row) +
                              ", column " + std::to_string(column) + " is not a " + std::to_string(bits) + "-bit code");
}

} // namespace gpt::kernels
