// Bindings of the hand-written kernels that python/gpt calls (panel packing, GGUF row dequantization,
// the weight-format table); those only tests call are in tests/python/kernels_testing.cc.
#include "python/gpt/_gpt/bindings.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/GgufDequantizing.h"
#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/LanePacking.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"
#include "cc/kernels/WeightFormats.h"

#include <functional>
#include <pybind11/numpy.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace gpt::python {

namespace {

// Integer arrays are taken only in their own dtype (no silent cast of codes).
template <typename T> using Ints = py::array_t<T, py::array::c_style>;

/// llama.cpp rows widened to float32, as gguf/container.py reads a GGUF tensor the compiler does
/// not keep in its own format.
void initRowKernels(py::module_ &m) {
  // llama.cpp blocks [..., row bytes] widened to float32 [..., K].
  auto dequantizeRows = [](auto dequantize, int64_t blockBytes) {
    return [=](Ints<uint8_t> blocks) {
      if (blocks.ndim() < 1 || blocks.shape(blocks.ndim() - 1) % blockBytes != 0)
        throw std::invalid_argument("blocks must be rows of whole blocks of " + std::to_string(blockBytes) +
                                    " bytes in their last dimension");
      const int64_t k = blocks.shape(blocks.ndim() - 1) / blockBytes * kernels::kQuantBlock;
      const int64_t n = k ? blocks.size() / (k / kernels::kQuantBlock * blockBytes) : 0;
      std::vector<py::ssize_t> shape(blocks.shape(), blocks.shape() + blocks.ndim());
      shape.back() = k;
      py::array_t<float> values(shape);
      if (k > 0) {
        py::gil_scoped_release unlocked; // tens of MB: other Python threads may run meanwhile
        dequantize(blocks.data(), k, n, values.mutable_data());
      }
      return values;
    };
  };
  m.def("dequantize_q8_0_rows", dequantizeRows(kernels::dequantizeQ8_0Rows, kernels::kQ8_0BlockBytes),
        py::arg("blocks"),
        "llama.cpp q8_0 blocks [..., K/32*34] as float32 [..., K], as gguf.quants dequantizes them.");
  m.def("dequantize_q4_0_rows", dequantizeRows(kernels::dequantizeQ4_0Rows, kernels::kQ4_0BlockBytes),
        py::arg("blocks"),
        "llama.cpp q4_0 blocks [..., K/32*18] as float32 [..., K], as gguf.quants dequantizes them.");
  m.def("dequantize_q4_1_rows", dequantizeRows(kernels::dequantizeQ4_1Rows, kernels::kQ4_1BlockBytes),
        py::arg("blocks"),
        "llama.cpp q4_1 blocks [..., K/32*20] as float32 [..., K], as gguf.quants dequantizes them.");
  // The formats llama.cpp's quantizers write beside those (q5_0, q5_1, the K-quants), whose rows
  // the compiler does not keep: widened at load, on `threads` threads (0: every core).
  auto dequantizeOtherRows = [](auto dequantize, int64_t blockValues, int64_t blockBytes) {
    return [=](Ints<uint8_t> blocks, int64_t threads) {
      if (blocks.ndim() < 1 || blocks.shape(blocks.ndim() - 1) % blockBytes != 0)
        throw std::invalid_argument("blocks must be rows of whole blocks of " + std::to_string(blockBytes) +
                                    " bytes in their last dimension");
      const int64_t k = blocks.shape(blocks.ndim() - 1) / blockBytes * blockValues;
      const int64_t n = k ? blocks.size() / (k / blockValues * blockBytes) : 0;
      std::vector<py::ssize_t> shape(blocks.shape(), blocks.shape() + blocks.ndim());
      shape.back() = k;
      py::array_t<float> values(shape);
      if (k > 0) {
        py::gil_scoped_release unlocked;
        dequantize(blocks.data(), k, n, values.mutable_data(), kernels::loadThreads(threads));
      }
      return values;
    };
  };
  const std::tuple<const char *, void (*)(const uint8_t *, int64_t, int64_t, float *, int64_t), int64_t, int64_t,
                   const char *>
      others[] = {
          {"dequantize_q5_0_rows", kernels::dequantizeQ5_0Rows, kernels::kQuantBlock, kernels::kQ5_0BlockBytes,
           "llama.cpp q5_0 blocks [..., K/32*22] as float32 [..., K], bit for bit as gguf.quants dequantizes them, on "
           "`threads` threads (0: every core)."},
          {"dequantize_q5_1_rows", kernels::dequantizeQ5_1Rows, kernels::kQuantBlock, kernels::kQ5_1BlockBytes,
           "llama.cpp q5_1 blocks [..., K/32*24] as float32 [..., K], bit for bit as gguf.quants dequantizes them, on "
           "`threads` threads (0: every core)."},
          {"dequantize_q4_k_rows", kernels::dequantizeQ4_KRows, kernels::kSuperBlock, kernels::kQ4_KBlockBytes,
           "llama.cpp q4_K super-blocks [..., K/256*144] as float32 [..., K], bit for bit as gguf.quants dequantizes "
           "them, on `threads` threads (0: every core)."},
          {"dequantize_q5_k_rows", kernels::dequantizeQ5_KRows, kernels::kSuperBlock, kernels::kQ5_KBlockBytes,
           "llama.cpp q5_K super-blocks [..., K/256*176] as float32 [..., K], bit for bit as gguf.quants dequantizes "
           "them, on `threads` threads (0: every core)."},
          {"dequantize_q6_k_rows", kernels::dequantizeQ6_KRows, kernels::kSuperBlock, kernels::kQ6_KBlockBytes,
           "llama.cpp q6_K super-blocks [..., K/256*210] as float32 [..., K], bit for bit as gguf.quants dequantizes "
           "them, on `threads` threads (0: every core)."},
      };
  for (const auto &[name, dequantize, blockValues, blockBytes, doc] : others)
    m.def(name, dequantizeOtherRows(dequantize, blockValues, blockBytes), py::arg("blocks"), py::arg("threads") = 0,
          doc);
}

} // namespace

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
      "weight_formats",
      [] {
        py::list rows;
        for (const WeightFormatTraits &row : weightFormats()) {
          py::list types;
          for (const std::string &type : kernels::convertedTypes(row.name)) types.append(type);
          py::tuple convertsFrom(types);
          rows.append(py::make_tuple(row.name, row.blockValues, row.blockBytes, row.rowsPerWord, row.hasMins,
                                     weightFormatName(row.head), convertsFrom, row.precision, row.scaleRows,
                                     row.codeBits()));
        }
        return rows;
      },
      "The weight-format table (cc/kernels/WeightFormats.h), a row per format in its order: (name, block_values, "
      "block_bytes, rows_per_word, has_mins, head_format, converts_from: the GGUF block types set_weights repacks "
      "into it, precision: higher is more precise, scale_rows: 16-bit scale values per block and column, "
      "code_bits: bits of one weight's code in the lanes (q6_k: 6, 16 codes in 3 words; rows_per_word 0)).");
  initRowKernels(m);
}

} // namespace gpt::python
