// Bindings of the hand-written kernels, so tests can check them against numpy.
#include "python/gpt/_gpt/bindings.h"

#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/Quantization.h"

#include <pybind11/numpy.h>

#include <stdexcept>

namespace py = pybind11;

namespace gpt::python {

void initKernels(py::module_ &m) {
  m.def(
      "pack_panels",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> matrix, int64_t width) {
        if (matrix.ndim() != 2) throw std::invalid_argument("pack_panels needs a 2-D [K, N] matrix");
        if (width <= 0 || matrix.shape(1) % width != 0)
          throw std::invalid_argument("the column count " + std::to_string(matrix.shape(1)) +
                                      " is not a multiple of the panel width " + std::to_string(width));
        int64_t rows = matrix.shape(0), cols = matrix.shape(1);
        py::array_t<float> packed({cols / width, rows, width});
        kernels::packPanels(matrix.data(), rows, cols, width, packed.mutable_data());
        return packed;
      },
      py::arg("matrix"), py::arg("width"),
      "The [N/width, K, width] column panels of a [K, N] matrix, as the runtime packs matmul weights.");
  m.def(
      "transpose_padded",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> matrix, int64_t paddedRows) {
        if (matrix.ndim() != 2) throw std::invalid_argument("transpose_padded needs a 2-D [V, D] matrix");
        int64_t rows = matrix.shape(0), cols = matrix.shape(1);
        if (paddedRows < rows)
          throw std::invalid_argument("padded_rows " + std::to_string(paddedRows) + " is less than the " +
                                      std::to_string(rows) + " rows");
        py::array_t<float> out({cols, paddedRows});
        kernels::transposePadded(matrix.data(), rows, cols, paddedRows, out.mutable_data());
        return out;
      },
      py::arg("matrix"), py::arg("padded_rows"),
      "The [D, padded_rows] transpose of a [V, D] matrix with zero columns past V, as the runtime lays out the "
      "LM head's tied embedding.");
  using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
  m.def(
      "quantize_bf16",
      [](Floats values) {
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
        kernels::quantizeBf16(values.data(), values.size(), out.mutable_data());
        return out;
      },
      py::arg("values"), "The bf16 bits (uint16) of each value, rounded to nearest even.");
  m.def(
      "to_fp16",
      [](Floats values) {
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
        for (py::ssize_t i = 0; i < values.size(); ++i) out.mutable_data()[i] = kernels::toFp16(values.data()[i]);
        return out;
      },
      py::arg("values"), "The IEEE half bits (uint16) of each value, rounded to nearest even.");
  auto blocks = [](const Floats &matrix) {
    if (matrix.ndim() != 2) throw std::invalid_argument("quantization needs a 2-D [K, N] matrix");
    return std::make_pair<int64_t, int64_t>(matrix.shape(0), matrix.shape(1));
  };
  m.def(
      "quantize_q8_0",
      [blocks](Floats matrix) {
        auto [rows, cols] = blocks(matrix);
        py::array_t<int8_t> codes({rows, cols});
        py::array_t<uint16_t> scales({rows / kernels::kQuantBlock, cols});
        kernels::quantizeQ8_0(matrix.data(), rows, cols, codes.mutable_data(), scales.mutable_data());
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"), "q8_0 of a [K, N] matrix along K: (codes int8 [K, N], fp16 scale bits uint16 [K/32, N]).");
  m.def(
      "quantize_q4_0",
      [blocks](Floats matrix) {
        auto [rows, cols] = blocks(matrix);
        py::array_t<uint8_t> codes({rows, cols});
        py::array_t<uint16_t> scales({rows / kernels::kQuantBlock, cols});
        kernels::quantizeQ4_0(matrix.data(), rows, cols, codes.mutable_data(), scales.mutable_data());
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"),
      "q4_0 of a [K, N] matrix along K: (codes uint8 in [0, 15] [K, N], fp16 scale bits uint16 [K/32, N]).");
}

} // namespace gpt::python
