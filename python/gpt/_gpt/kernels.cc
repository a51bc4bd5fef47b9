// Bindings of the hand-written kernels that python/gpt calls (panel packing, the GGUF block types
// and their dequantization, the weight-format table); those only tests call are in tests/python/kernels_testing.cc.
#include "python/gpt/_gpt/bindings.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/WeightFormats.h"

#include <pybind11/numpy.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace gpt::python {

namespace {

// Integer arrays are taken only in their own dtype (no silent cast of codes).
template <typename T> using Ints = py::array_t<T, py::array::c_style>;

/// The GGUF block types (kernels::ggufBlockTypes): their shapes and fp16 fields, as gguf/container.py
/// checks a tensor's blocks, and their rows widened to float32, as it reads a tensor the compiler
/// does not keep in its own format.
void initBlockTypes(py::module_ &m) {
  m.def(
      "gguf_block_types",
      [] {
        py::list rows;
        for (const kernels::GgufBlockType &type : kernels::ggufBlockTypes()) {
          py::dict halves;
          for (int64_t h = 0; h < type.halves; ++h) halves[type.halfNames[h]] = type.halfOffsets[h];
          rows.append(py::make_tuple(type.name, type.values, type.bytes, halves));
        }
        return rows;
      },
      "The GGUF block types the loaders read (cc/kernels/BlockTranscoding.h), a row per type: (name, values: "
      "weights per block, bytes per block, {fp16 field name: byte offset in the block}).");
  m.def(
      "dequantize_rows",
      [](const std::string &typeName, Ints<uint8_t> blocks, int64_t threads) {
        const kernels::GgufBlockType &type = kernels::ggufBlockType(typeName);
        if (blocks.ndim() < 1 || blocks.shape(blocks.ndim() - 1) % type.bytes != 0)
          throw std::invalid_argument(typeName + " blocks must be rows of whole blocks of " +
                                      std::to_string(type.bytes) + " bytes in their last dimension");
        const int64_t k = blocks.shape(blocks.ndim() - 1) / type.bytes * type.values;
        const int64_t n = k ? blocks.size() / (k / type.values * type.bytes) : 0;
        std::vector<py::ssize_t> shape(blocks.shape(), blocks.shape() + blocks.ndim());
        shape.back() = k;
        py::array_t<float> values(shape);
        if (k > 0) {
          py::gil_scoped_release unlocked; // tens of MB: other Python threads may run meanwhile
          type.dequantizeRows(blocks.data(), k, n, values.mutable_data(), kernels::loadThreads(threads));
        }
        return values;
      },
      py::arg("type"), py::arg("blocks"), py::arg("threads") = 0,
      "llama.cpp blocks of GGUF type `type` (a name of gguf_block_types) [..., row bytes] as float32 [..., K], bit "
      "for bit as gguf.quants dequantizes them, on `threads` threads (0: every core) where the type's kernel "
      "splits rows.");
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
      "code_bits: bits of one weight's code in the lanes (q6_k: 6, 16 codes in 3 words; q5_k, q5_0 and q5_1: 5, 32 "
      "in 5; "
      "rows_per_word 0)).");
  initBlockTypes(m);
}

} // namespace gpt::python
