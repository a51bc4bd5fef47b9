// gpt_kernels_testing: the kernels of cc/kernels that only tests call (lane packing, repacking,
// quantization, transcoding), bound apart from gpt._gpt so the package's public module holds only
// what python/gpt uses; tests check each against numpy bit for bit. A binding takes the format (or
// GGUF type) by name and reaches its kernel through the tables (WeightFormats.h,
// BlockTranscoding.h), as the runtime does: a new format's row is all these need to test it.

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"
#include "cc/kernels/WeightFormats.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
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
using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

/// `values` as `Array`, converted as pybind11 converts an argument of that type (floats from any
/// numbers; integers only where numpy casts them safely); TypeError naming `what` otherwise.
template <typename Array> Array arrayOf(const py::handle &values, const char *what) {
  Array array = Array::ensure(values);
  if (!array)
    throw py::type_error(std::string(what) + " must be an array of " +
                         py::str(py::dtype::of<typename Array::value_type>()).cast<std::string>());
  return array;
}

/// The row of a block-quantized format (codes and scales); std::invalid_argument otherwise.
const WeightFormatTraits &blockFormat(const std::string &name) {
  const WeightFormatTraits &row = parseWeightFormat(name);
  if (!row.blockQuantized()) throw std::invalid_argument(name + " is no block format (" + blockFormatNames() + ")");
  return row;
}

/// q8_0's codes are int8 (two's complement), the others' unsigned: the dtype numpy gives them.
bool signedCodes(const WeightFormatTraits &row) { return row.format == WeightFormat::Q8_0; }

/// `before`, then the axes of `row`'s scale rows for K weights, then `after`: the K / B * S rows
/// (B the block's weights, S its 16-bit rows), or, where a block's two rows are its scale and min,
/// [K / B, 2] (each block's pair, as quant_reference.py lays them out).
std::vector<py::ssize_t> withScaleRows(const WeightFormatTraits &row, int64_t k, std::vector<py::ssize_t> before,
                                       py::ssize_t after) {
  const int64_t blocks = k / row.blockValues;
  if (row.hasMins && row.scaleRows == 2)
    before.insert(before.end(), {blocks, 2});
  else
    before.push_back(blocks * row.scaleRows);
  before.push_back(after);
  return before;
}

/// "[a, b, c]".
std::string shapeText(const std::vector<py::ssize_t> &shape) {
  std::string text;
  for (py::ssize_t extent : shape) text += (text.empty() ? "[" : ", ") + std::to_string(extent);
  return text + "]";
}

/// [K, N] of a 2-D array, checked to divide into panels of `width` columns.
template <typename Array> std::pair<int64_t, int64_t> panelMatrixShape(const Array &matrix, int64_t width) {
  if (matrix.ndim() != 2) throw std::invalid_argument("lane packing needs a 2-D [K, N] matrix");
  if (width <= 0 || matrix.shape(1) % width != 0)
    throw std::invalid_argument("the column count " + std::to_string(matrix.shape(1)) +
                                " is not a multiple of the panel width " + std::to_string(width));
  return {matrix.shape(0), matrix.shape(1)};
}

/// (K, N, width) of `row`'s lane words [N/width, K * code_bits / 32, width].
std::tuple<int64_t, int64_t, int64_t> laneShape(const WeightFormatTraits &row, const Ints<uint32_t> &lanes) {
  if (lanes.ndim() != 3) throw std::invalid_argument("lanes must be 3-D [N/width, K*code_bits/32, width]");
  // The scales' shape check divides by it before the kernel checks it.
  if (lanes.shape(2) <= 0) throw std::invalid_argument("lanes need a panel width (their last dim) of at least 1");
  const int64_t words = lanes.shape(1), bits = row.codeBits();
  if (words * 32 % bits != 0)
    throw std::invalid_argument(std::string(row.name) + " lanes of " + std::to_string(words) +
                                " words a column hold no whole number of rows");
  return {words * 32 / bits, lanes.shape(0) * lanes.shape(2), lanes.shape(2)};
}

/// A [K, N] matrix of `row`'s codes (bf16: of f32 values) packed into lanes [N/width, K * code_bits
/// / 32, width] by the row's kernel, on `threads` threads.
py::array_t<uint32_t> packLanes(const WeightFormatTraits &row, const py::handle &values, int64_t width,
                                int64_t threads) {
  auto lanesOf = [&](const auto &matrix, auto pack) {
    auto [rows, cols] = panelMatrixShape(matrix, width);
    py::array_t<uint32_t> lanes({cols / width, row.laneWords(rows), width});
    pack(matrix.data(), rows, cols, lanes.mutable_data());
    return lanes;
  };
  if (row.packFloats)
    return lanesOf(arrayOf<Floats>(values, "the matrix"),
                   [&](const float *matrix, int64_t rows, int64_t cols, uint32_t *lanes) {
                     row.packFloats(matrix, rows, cols, width, lanes, threads);
                   });
  if (!row.pack) throw std::invalid_argument(std::string(row.name) + " weights are not packed in lanes");
  // The row's kernel takes the codes as the bytes they are.
  auto packCodes = [&](const auto *codes, int64_t rows, int64_t cols, uint32_t *lanes) {
    row.pack(reinterpret_cast<const uint8_t *>(codes), rows, cols, width, lanes, threads);
  };
  if (signedCodes(row)) return lanesOf(arrayOf<Ints<int8_t>>(values, "the codes"), packCodes);
  return lanesOf(arrayOf<Ints<uint8_t>>(values, "the codes"), packCodes);
}

/// The [K, N] f32 matrix of `row`'s lanes and (a block format's) scale panels.
py::array_t<float> dequantizeLanes(const WeightFormatTraits &row, const Ints<uint32_t> &lanes,
                                   const std::optional<Ints<uint16_t>> &scales) {
  if (!row.dequantize) throw std::invalid_argument(std::string(row.name) + " weights are not packed in lanes");
  auto [rows, cols, width] = laneShape(row, lanes);
  if (row.blockQuantized() != scales.has_value())
    throw std::invalid_argument(std::string(row.name) +
                                (scales ? " lanes have no scales" : " lanes need their scales"));
  if (scales) {
    const std::vector<py::ssize_t> expected = withScaleRows(row, rows, {cols / width}, width);
    if (std::vector<py::ssize_t>(scales->shape(), scales->shape() + scales->ndim()) != expected)
      throw std::invalid_argument(std::string(row.name) + " scales must be " + shapeText(expected) +
                                  " for K = " + std::to_string(rows) + " (" + std::to_string(row.scaleRows) +
                                  " rows per block of " + std::to_string(row.blockValues) + ")");
  }
  py::array_t<float> matrix({rows, cols});
  row.dequantize(lanes.data(), scales ? scales->data() : nullptr, rows, cols, width, matrix.mutable_data());
  return matrix;
}

/// The lane layouts (kernels/WeightFormats.h) and the repacking of a GGUF file's blocks into them
/// (kernels/GgufRepacking.h), for bit-exact tests.
void initLanes(py::module_ &m) {
  m.def(
      "pack_lanes",
      [](const std::string &format, const py::object &values, int64_t width, int64_t threads) {
        return packLanes(parseWeightFormat(format), values, width, threads);
      },
      py::arg("format"), py::arg("values"), py::arg("width"), py::arg("threads") = 1,
      "A [K, N] matrix in `format`'s lanes [N/width, K*code_bits/32, width] (uint32), on `threads` threads: bf16 "
      "rounds f32 values (word r = bf16(w[r][j]) | bf16(w[r + K/2][j]) << 16), a block format packs its codes (int8 "
      "for q8_0, uint8 otherwise; byte i of q8_0's word 8b + q is row 32b + q + 8i, of the 4-bit formats' word "
      "4b + o rows 32b + o + 8i | 32b + 4 + o + 8i << 4).");
  m.def(
      "dequantize_lanes",
      [](const std::string &format, const Ints<uint32_t> &lanes, const std::optional<Ints<uint16_t>> &scales) {
        return dequantizeLanes(parseWeightFormat(format), lanes, scales);
      },
      py::arg("format"), py::arg("lanes"), py::arg("scales") = py::none(),
      "The [K, N] f32 matrix of `format`'s lanes and, for a block format, its fp16 scale panels [N/width, K/B * S, "
      "width] (S = scale_rows per block of B weights; q4_1's scale and min pairs [N/width, K/32, 2, width]), as the "
      "model's state_dict() reads it back.");
  m.def(
      "repack_rows",
      [](const std::string &format, const Ints<uint8_t> &blocks, int64_t k, int64_t paddedN, int64_t width,
         int64_t threads, int64_t permutedHeads) {
        const WeightFormatTraits &row = blockFormat(format);
        const int64_t rowBytes = k > 0 && k % row.blockValues == 0 ? k / row.blockValues * row.blockBytes : 0;
        if (rowBytes == 0 || blocks.size() % rowBytes != 0)
          throw std::invalid_argument("blocks must be whole rows of K = " + std::to_string(k) + " weights in " +
                                      row.name + " blocks of " + std::to_string(row.blockBytes) + " bytes");
        const int64_t n = blocks.size() / rowBytes;
        if (width <= 0 || paddedN < n || paddedN % width != 0)
          throw std::invalid_argument("padded_n " + std::to_string(paddedN) + " must be at least the " +
                                      std::to_string(n) + " rows and a multiple of the panel width");
        py::array_t<uint32_t> codes({paddedN / width, row.laneWords(k), width});
        py::array_t<uint16_t> scales(withScaleRows(row, k, {paddedN / width}, width));
        row.repack({{blocks.data(), n, {}, permutedHeads}}, k, paddedN, width, codes.mutable_data(),
                   scales.mutable_data(), threads);
        return py::make_tuple(codes, scales);
      },
      py::arg("format"), py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
      py::arg("permuted_heads") = 0,
      "llama.cpp blocks of `format` (rows of K weights, [out, in]) as (lanes uint32 [padded_n/width, K*code_bits/32, "
      "width], scale bits uint16 in dequantize_lanes' layout), as from_gguf repacks them (on `threads` threads: the "
      "same result); a NaN or infinite fp16 field raises ValueError naming its block. `permuted_heads`: the rows "
      "are a q or k weight's as llama.cpp permuted them within that many heads, read in the model's order.");
}

/// Rows of GGUF blocks rewritten as blocks of a format the compiler keeps (BlockTranscoding.h):
/// how a Q4_K_M file loads in its own precision.
void initTranscoding(py::module_ &m) {
  m.def(
      "transcode_rows",
      [](const std::string &type, const std::string &target, const Ints<uint8_t> &blocks, int64_t threads) {
        const kernels::GgufBlockType &in = kernels::ggufBlockType(type), &out = kernels::ggufBlockType(target);
        if (blocks.ndim() < 1 || blocks.shape(blocks.ndim() - 1) % in.bytes != 0)
          throw std::invalid_argument(type + " blocks must be rows of whole blocks of " + std::to_string(in.bytes) +
                                      " bytes in their last dimension");
        const int64_t k = blocks.shape(blocks.ndim() - 1) / in.bytes * in.values;
        const int64_t n = k ? blocks.size() / (k / in.values * in.bytes) : 0;
        std::vector<py::ssize_t> shape(blocks.shape(), blocks.shape() + blocks.ndim());
        shape.back() = k / out.values * out.bytes;
        py::array_t<uint8_t> converted(shape);
        if (k > 0) {
          py::gil_scoped_release unlocked;
          kernels::transcodeRows(type, target, blocks.data(), k, n, converted.mutable_data(),
                                 kernels::loadThreads(threads));
        }
        return converted;
      },
      py::arg("type"), py::arg("target"), py::arg("blocks"), py::arg("threads") = 0,
      "Rows of GGUF `type` blocks [..., row bytes] as blocks of `target` (a kept format whose converts_from names "
      "`type`) [..., K/B * bytes], each converted as set_weights converts it: the file's codes where `target`'s "
      "blocks hold them (q4_k as q4_1: each sub-block's scale and min rounded once to fp16; q4_0 and q5_0 as q8_0 "
      "exactly), otherwise widened and quantized as the model quantizes `target`, on `threads` threads (0: every "
      "core).");
}

/// The quantizers the model applies to float weights (the table's), and the LM head's layout.
void initQuantization(py::module_ &m) {
  m.def(
      "transpose_padded",
      [](const Floats &matrix, int64_t paddedRows) {
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
  m.def(
      "quantize_bf16",
      [](const Floats &values) {
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
        kernels::quantizeBf16(values.data(), values.size(), out.mutable_data());
        return out;
      },
      py::arg("values"), "The bf16 bits (uint16) of each value, rounded to nearest even.");
  m.def(
      "to_fp16",
      [](const Floats &values) {
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
        for (py::ssize_t i = 0; i < values.size(); ++i) out.mutable_data()[i] = kernels::toFp16(values.data()[i]);
        return out;
      },
      py::arg("values"), "The IEEE half bits (uint16) of each value, rounded to nearest even.");
  m.def(
      "quantize",
      [](const std::string &format, const Floats &matrix) {
        const WeightFormatTraits &row = blockFormat(format);
        if (matrix.ndim() != 2) throw std::invalid_argument("quantization needs a 2-D [K, N] matrix");
        const int64_t rows = matrix.shape(0), cols = matrix.shape(1);
        py::array codes = signedCodes(row) ? py::array(py::array_t<int8_t>({rows, cols}))
                                           : py::array(py::array_t<uint8_t>({rows, cols}));
        py::array_t<uint16_t> scales(withScaleRows(row, rows, {}, cols));
        row.quantize(matrix.data(), rows, cols, static_cast<uint8_t *>(codes.mutable_data()), scales.mutable_data(), 1);
        return py::make_tuple(codes, scales);
      },
      py::arg("format"), py::arg("matrix"),
      "`format` of a [K, N] matrix along K, as the model quantizes float weights: (codes [K, N], int8 for q8_0 and "
      "uint8 otherwise, scale bits uint16 [K/B * S, N], S = scale_rows per block of B weights; q4_1's scale and min "
      "pairs [K/32, 2, N]).");
  m.def(
      "quantize_rows_to_q8_0_lanes",
      [](const Floats &matrix, int64_t paddedN, int64_t width, int64_t threads) {
        if (matrix.ndim() != 2) throw std::invalid_argument("quantize_rows_to_q8_0_lanes needs a 2-D [N, K] matrix");
        const int64_t n = matrix.shape(0), k = matrix.shape(1);
        if (width <= 0 || paddedN < n || paddedN % width != 0)
          throw std::invalid_argument("padded_n " + std::to_string(paddedN) + " must be at least the " +
                                      std::to_string(n) + " rows and a multiple of the panel width");
        const WeightFormatTraits &q8_0 = weightFormatTraits(WeightFormat::Q8_0);
        py::array_t<uint32_t> codes({paddedN / width, q8_0.laneWords(k), width});
        py::array_t<uint16_t> scales(withScaleRows(q8_0, k, {paddedN / width}, width));
        kernels::quantizeRowsToQ8_0Lanes(matrix.data(), n, k, paddedN, width, codes.mutable_data(),
                                         scales.mutable_data(), threads);
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
      "q8_0 of an [N, K] matrix along its rows, as (lanes uint32 [padded_n/width, K/4, width], scale bits uint16 "
      "[padded_n/width, K/32, width]) of its [K, padded_n] transpose: how a load lays out the LM head from the "
      "[V, D] embedding table.");
}

} // namespace

} // namespace gpt::python

PYBIND11_MODULE(gpt_kernels_testing, m) {
  m.doc() = "The kernels of cc/kernels that only tests call, bound for tests/python (not part of gpt).";
  gpt::python::initLanes(m);
  gpt::python::initTranscoding(m);
  gpt::python::initQuantization(m);
}
