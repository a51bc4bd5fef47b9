// gpt_kernels_testing: the kernels of cc/kernels that only tests call (lane packing, repacking,
// quantization, transcoding), bound apart from gpt._gpt so the package's public module holds only
// what python/gpt uses; tests check each against numpy bit for bit.

#include "cc/kernels/BlockTranscoding.h"
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

/// [K, N] of a 2-D array, checked to divide into panels of `width` columns.
template <typename Array> std::pair<int64_t, int64_t> panelMatrixShape(const Array &matrix, int64_t width) {
  if (matrix.ndim() != 2) throw std::invalid_argument("lane packing needs a 2-D [K, N] matrix");
  if (width <= 0 || matrix.shape(1) % width != 0)
    throw std::invalid_argument("the column count " + std::to_string(matrix.shape(1)) +
                                " is not a multiple of the panel width " + std::to_string(width));
  return {matrix.shape(0), matrix.shape(1)};
}

/// (K, N, width) of lane words [N/width, K/rowsPerWord, width].
std::tuple<int64_t, int64_t, int64_t> laneShape(const Ints<uint32_t> &lanes, int64_t rowsPerWord) {
  if (lanes.ndim() != 3) throw std::invalid_argument("lanes must be 3-D [N/width, K/rows_per_word, width]");
  // checkScalePanels divides by it before the kernel checks it.
  if (lanes.shape(2) <= 0) throw std::invalid_argument("lanes need a panel width (their last dim) of at least 1");
  return {lanes.shape(1) * rowsPerWord, lanes.shape(0) * lanes.shape(2), lanes.shape(2)};
}

/// Checks that fp16 scale bits are the [N/width, K/32, width] panels of lanes of a [K, N] weight
/// (with `pairs`, q4_1's scale and min pairs [N/width, K/32, 2, width]).
void checkScalePanels(const Ints<uint16_t> &scales, int64_t rows, int64_t cols, int64_t width, bool pairs = false) {
  const int64_t blocks = rows / kernels::kQuantBlock;
  const bool ok = pairs ? scales.ndim() == 4 && scales.shape(0) == cols / width && scales.shape(1) == blocks &&
                              scales.shape(2) == 2 && scales.shape(3) == width
                        : scales.ndim() == 3 && scales.shape(0) == cols / width && scales.shape(1) == blocks &&
                              scales.shape(2) == width;
  if (!ok)
    throw std::invalid_argument(std::string("scales must be [N/width, K/32, ") + (pairs ? "2, " : "") + "width] = [" +
                                std::to_string(cols / width) + ", " + std::to_string(blocks) + ", " +
                                (pairs ? "2, " : "") + std::to_string(width) + "]");
}

/// The lane layouts of kernels/LanePacking.h and kernels/GgufRepacking.h, for bit-exact tests.
void initLanes(py::module_ &m) {
  using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
  // A [K, N] matrix (f32 values or codes) packed by `pack` into [N/width, K/rowsPerWord, width]
  // words, on `threads` threads.
  auto packLanes = [](auto pack, int64_t rowsPerWord) {
    return [pack, rowsPerWord](auto matrix, int64_t width, int64_t threads) {
      auto [rows, cols] = panelMatrixShape(matrix, width);
      py::array_t<uint32_t> packed({cols / width, rows / rowsPerWord, width});
      pack(matrix.data(), rows, cols, width, packed.mutable_data(), threads);
      return packed;
    };
  };
  using PackFloats = std::function<py::array_t<uint32_t>(Floats, int64_t, int64_t)>;
  using PackInt8 = std::function<py::array_t<uint32_t>(Ints<int8_t>, int64_t, int64_t)>;
  using PackUint8 = std::function<py::array_t<uint32_t>(Ints<uint8_t>, int64_t, int64_t)>;
  m.def("pack_bf16_lanes", PackFloats(packLanes(kernels::packBf16Lanes, kernels::kBf16RowsPerWord)), py::arg("matrix"),
        py::arg("width"), py::arg("threads") = 1,
        "bf16 lanes [N/width, K/2, width] (uint32) of a [K, N] matrix: word r = bf16(w[r][j]) | bf16(w[r + K/2][j]) "
        "<< 16.");
  m.def("pack_q8_0_lanes", PackInt8(packLanes(kernels::packQ8_0Lanes, kernels::kQ8_0RowsPerWord)), py::arg("codes"),
        py::arg("width"), py::arg("threads") = 1,
        "q8_0 lanes [N/width, K/4, width] (uint32) of int8 codes [K, N]: byte i of word 8b + q is row 32b + q + 8i.");
  m.def("pack_q4_0_lanes", PackUint8(packLanes(kernels::packQ4_0Lanes, kernels::kQ4_0RowsPerWord)), py::arg("codes"),
        py::arg("width"), py::arg("threads") = 1,
        "q4_0 lanes [N/width, K/8, width] (uint32) of codes in [0, 15] [K, N]: byte i of word 4b + o is row "
        "32b + o + 8i | row 32b + 4 + o + 8i << 4.");
  m.def(
      "dequantize_bf16_lanes",
      [](Ints<uint32_t> lanes) {
        auto [rows, cols, width] = laneShape(lanes, kernels::kBf16RowsPerWord);
        py::array_t<float> matrix({rows, cols});
        kernels::dequantizeBf16Lanes(lanes.data(), rows, cols, width, matrix.mutable_data());
        return matrix;
      },
      py::arg("lanes"), "The [K, N] f32 matrix of bf16 lanes, as the model's state_dict() reads it back.");
  auto dequantizeQuantized = [](auto dequantize, int64_t rowsPerWord, bool pairs = false) {
    return [dequantize, rowsPerWord, pairs](Ints<uint32_t> lanes, Ints<uint16_t> scales) {
      auto [rows, cols, width] = laneShape(lanes, rowsPerWord);
      checkScalePanels(scales, rows, cols, width, pairs);
      py::array_t<float> matrix({rows, cols});
      dequantize(lanes.data(), scales.data(), rows, cols, width, matrix.mutable_data());
      return matrix;
    };
  };
  m.def("dequantize_q8_0_lanes", dequantizeQuantized(kernels::dequantizeQ8_0Lanes, kernels::kQ8_0RowsPerWord),
        py::arg("lanes"), py::arg("scales"),
        "The [K, N] f32 matrix of q8_0 lanes and their [N/width, K/32, width] fp16 scale bits.");
  m.def("dequantize_q4_0_lanes", dequantizeQuantized(kernels::dequantizeQ4_0Lanes, kernels::kQ4_0RowsPerWord),
        py::arg("lanes"), py::arg("scales"),
        "The [K, N] f32 matrix of q4_0 lanes and their [N/width, K/32, width] fp16 scale bits.");
  m.def("dequantize_q4_1_lanes", dequantizeQuantized(kernels::dequantizeQ4_1Lanes, kernels::kQ4_0RowsPerWord, true),
        py::arg("lanes"), py::arg("scales"),
        "The [K, N] f32 matrix of q4_1 lanes (q4_0's) and their [N/width, K/32, 2, width] fp16 scale and min bits.");
  // The contiguous-rows overloads of kernels::repack*Rows.
  using RepackRows = void (*)(const uint8_t *, int64_t, int64_t, int64_t, int64_t, uint32_t *, uint16_t *, int64_t);
  auto repack = [](RepackRows repackRows, int64_t blockBytes, int64_t rowsPerWord, bool pairs = false) {
    return [=](Ints<uint8_t> blocks, int64_t k, int64_t paddedN, int64_t width, int64_t threads) {
      if (k <= 0 || k % kernels::kQuantBlock != 0 || blocks.size() % (k / kernels::kQuantBlock * blockBytes) != 0)
        throw std::invalid_argument("blocks must be whole rows of K = " + std::to_string(k) + " weights in blocks of " +
                                    std::to_string(blockBytes) + " bytes");
      const int64_t n = blocks.size() / (k / kernels::kQuantBlock * blockBytes);
      if (width <= 0 || paddedN < n || paddedN % width != 0)
        throw std::invalid_argument("padded_n " + std::to_string(paddedN) + " must be at least the " +
                                    std::to_string(n) + " rows and a multiple of the panel width");
      py::array_t<uint32_t> codes({paddedN / width, k / rowsPerWord, width});
      py::array_t<uint16_t> scales =
          pairs ? py::array_t<uint16_t>({paddedN / width, k / kernels::kQuantBlock, int64_t{2}, width})
                : py::array_t<uint16_t>({paddedN / width, k / kernels::kQuantBlock, width});
      repackRows(blocks.data(), k, n, paddedN, width, codes.mutable_data(), scales.mutable_data(), threads);
      return py::make_tuple(codes, scales);
    };
  };
  m.def("repack_q8_0_rows", repack(kernels::repackQ8_0Rows, kernels::kQ8_0BlockBytes, kernels::kQ8_0RowsPerWord),
        py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
        "llama.cpp q8_0 blocks (rows of K weights, [out, in]) as (q8_0 lanes uint32 [padded_n/width, K/4, width], "
        "fp16 scale bits uint16 [padded_n/width, K/32, width]), as from_gguf repacks them (on `threads` threads: the "
        "same result).");
  m.def("repack_q4_0_rows", repack(kernels::repackQ4_0Rows, kernels::kQ4_0BlockBytes, kernels::kQ4_0RowsPerWord),
        py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
        "llama.cpp q4_0 blocks (rows of K weights, [out, in]) as (q4_0 lanes uint32 [padded_n/width, K/8, width], "
        "fp16 scale bits uint16 [padded_n/width, K/32, width]), as from_gguf repacks them (on `threads` threads: the "
        "same result).");
  m.def("repack_q4_1_rows",
        repack(kernels::repackQ4_1Rows, kernels::kQ4_1BlockBytes, kernels::kQ4_0RowsPerWord, /*pairs=*/true),
        py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
        "llama.cpp q4_1 blocks (rows of K weights, [out, in]) as (q4_0 lanes uint32 [padded_n/width, K/8, width], "
        "fp16 scale and min bits uint16 [padded_n/width, K/32, 2, width]), as from_gguf repacks them (on `threads` "
        "threads: the same result).");
}

/// Rows of the GGUF formats the compiler does not keep rewritten as blocks of one it keeps
/// (BlockTranscoding.h): how a Q4_K_M file loads in its own precision.
void initTranscoding(py::module_ &m) {
  auto transcodeRows = [](const std::string &type, Ints<uint8_t> blocks, int64_t outValues, int64_t outBytes,
                          auto transcode) {
    const kernels::GgufBlockType &in = kernels::ggufBlockType(type);
    if (blocks.ndim() < 1 || blocks.shape(blocks.ndim() - 1) % in.bytes != 0)
      throw std::invalid_argument(type + " blocks must be rows of whole blocks of " + std::to_string(in.bytes) +
                                  " bytes in their last dimension");
    const int64_t k = blocks.shape(blocks.ndim() - 1) / in.bytes * in.values;
    const int64_t n = k ? blocks.size() / (k / in.values * in.bytes) : 0;
    std::vector<py::ssize_t> shape(blocks.shape(), blocks.shape() + blocks.ndim());
    shape.back() = k / outValues * outBytes;
    py::array_t<uint8_t> out(shape);
    if (k > 0) {
      py::gil_scoped_release unlocked;
      transcode(blocks.data(), k, n, out.mutable_data());
    }
    return out;
  };
  m.def(
      "transcode_q4_k_to_q4_1",
      [transcodeRows](Ints<uint8_t> blocks, int64_t threads) {
        return transcodeRows("q4_k", blocks, kernels::kQuantBlock, kernels::kQ4_1BlockBytes,
                             [&](const uint8_t *in, int64_t k, int64_t n, uint8_t *out) {
                               kernels::transcodeQ4_KToQ4_1Rows(in, k, n, out, kernels::loadThreads(threads));
                             });
      },
      py::arg("blocks"), py::arg("threads") = 0,
      "llama.cpp q4_K super-blocks [..., K/256*144] as q4_1 blocks [..., K/32*20]: the file's codes, and each "
      "sub-block's scale and min rounded once to fp16, on `threads` threads (0: every core).");
  m.def(
      "requantize_to_q8_0",
      [transcodeRows](const std::string &type, Ints<uint8_t> blocks, int64_t threads) {
        return transcodeRows(type, blocks, kernels::kQuantBlock, kernels::kQ8_0BlockBytes,
                             [&](const uint8_t *in, int64_t k, int64_t n, uint8_t *out) {
                               kernels::requantizeRowsToQ8_0(type, in, k, n, out, kernels::loadThreads(threads));
                             });
      },
      py::arg("type"), py::arg("blocks"), py::arg("threads") = 0,
      "Rows of GGUF `type` blocks (q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k) as q8_0 blocks [..., K/32*34]: q4_0 "
      "and q5_0 exactly (their scales and codes), the others widened a row at a time and quantized as the model "
      "quantizes q8_0, on `threads` threads (0: every core).");
}

/// The quantizers the model applies to float weights (Quantization.h), and the LM head's layout.
void initQuantization(py::module_ &m) {
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
      "quantize_q8_0_rows",
      [](Floats matrix) {
        if (matrix.ndim() != 2 || matrix.shape(1) % kernels::kQuantBlock != 0)
          throw std::invalid_argument("quantize_q8_0_rows needs a 2-D [N, K] matrix with K a multiple of 32");
        const int64_t n = matrix.shape(0), k = matrix.shape(1);
        py::array_t<uint8_t> blocks({n, k / kernels::kQuantBlock * kernels::kQ8_0BlockBytes});
        kernels::quantizeQ8_0Rows(matrix.data(), n, k, blocks.mutable_data());
        return blocks;
      },
      py::arg("matrix"),
      "q8_0 of an [N, K] matrix along its rows, as llama.cpp's blocks [N, K/32*34] (fp16 scale bits, "
      "then 32 int8 codes): the layout a load quantizes an LM head in.");
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
  m.def(
      "quantize_q4_1",
      [blocks](Floats matrix) {
        auto [rows, cols] = blocks(matrix);
        py::array_t<uint8_t> codes({rows, cols});
        py::array_t<uint16_t> scales({rows / kernels::kQuantBlock, int64_t{2}, cols});
        kernels::quantizeQ4_1(matrix.data(), rows, cols, codes.mutable_data(), scales.mutable_data());
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"),
      "q4_1 of a [K, N] matrix along K: (codes uint8 in [0, 15] [K, N], fp16 scale and min bits uint16 "
      "[K/32, 2, N]).");
  m.def(
      "quantize_q4_k",
      [blocks](Floats matrix) {
        auto [rows, cols] = blocks(matrix);
        if (rows % kernels::kSuperBlock != 0)
          throw std::invalid_argument("q4_k needs K (" + std::to_string(rows) + ") to be a multiple of 256");
        py::array_t<uint8_t> codes({rows, cols});
        py::array_t<uint16_t> scales({rows / kernels::kSuperBlock * kernels::kQ4_KScaleRows, cols});
        kernels::quantizeQ4_K(matrix.data(), rows, cols, codes.mutable_data(), scales.mutable_data());
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"),
      "q4_K of a [K, N] matrix along K: (codes uint8 in [0, 15] [K, N], uint16 [K/32 + K/128, N]: each sub-block's "
      "6-bit scale | min << 8, then each super-block's fp16 d and dmin bits).");
}

/// q4_k's lanes, as from_gguf keeps a Q4_K tensor.
void initQ4K(py::module_ &m) {
  m.def(
      "repack_q4_k_rows",
      [](Ints<uint8_t> blocks, int64_t k, int64_t paddedN, int64_t width, int64_t threads) {
        const int64_t rowBytes =
            k > 0 && k % kernels::kSuperBlock == 0 ? k / kernels::kSuperBlock * kernels::kQ4_KBlockBytes : 0;
        if (rowBytes == 0 || blocks.size() % rowBytes != 0)
          throw std::invalid_argument("blocks must be whole rows of K = " + std::to_string(k) +
                                      " weights in q4_K super-blocks of 144 bytes");
        const int64_t n = blocks.size() / rowBytes;
        if (width <= 0 || paddedN < n || paddedN % width != 0)
          throw std::invalid_argument("padded_n " + std::to_string(paddedN) + " must be at least the " +
                                      std::to_string(n) + " rows and a multiple of the panel width");
        py::array_t<uint32_t> codes({paddedN / width, k / kernels::kQ4_0RowsPerWord, width});
        py::array_t<uint16_t> scales({paddedN / width, k / kernels::kSuperBlock * kernels::kQ4_KScaleRows, width});
        kernels::repackQ4_KRows({{blocks.data(), n}}, k, paddedN, width, codes.mutable_data(), scales.mutable_data(),
                                threads);
        return py::make_tuple(codes, scales);
      },
      py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
      "llama.cpp q4_K super-blocks (rows of K weights, [out, in]) as (q4_0 lanes uint32 [padded_n/width, K/8, "
      "width], uint16 [padded_n/width, K/32 + K/128, width]: each sub-block's 6-bit scale | min << 8, then each "
      "super-block's fp16 d and dmin bits), as from_gguf keeps them; a NaN or infinite d or dmin raises ValueError.");
  m.def(
      "dequantize_q4_k_lanes",
      [](Ints<uint32_t> lanes, Ints<uint16_t> scales) {
        auto [rows, cols, width] = laneShape(lanes, kernels::kQ4_0RowsPerWord);
        if (rows % kernels::kSuperBlock != 0 || scales.ndim() != 3 || scales.shape(0) != cols / width ||
            scales.shape(1) != rows / kernels::kSuperBlock * kernels::kQ4_KScaleRows || scales.shape(2) != width)
          throw std::invalid_argument("q4_k scales must be [N/width, K/32 + K/128, width] for K = " +
                                      std::to_string(rows));
        py::array_t<float> matrix({rows, cols});
        kernels::dequantizeQ4_KLanes(lanes.data(), scales.data(), rows, cols, width, matrix.mutable_data());
        return matrix;
      },
      py::arg("lanes"), py::arg("scales"),
      "The [K, N] f32 matrix of q4_k lanes and scales (repack_q4_k_rows' layout): (d * sc) * q - dmin * m.");
}

/// q6_k's lanes, as from_gguf keeps a Q6_K tensor, and quantizeQ6_K for float models.
void initQ6K(py::module_ &m) {
  using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
  constexpr int64_t runWords = kernels::kQ6_KWordsPerRun, run = kernels::kQ6_KRunValues;
  m.def(
      "repack_q6_k_rows",
      [](Ints<uint8_t> blocks, int64_t k, int64_t paddedN, int64_t width, int64_t threads) {
        const int64_t rowBytes =
            k > 0 && k % kernels::kSuperBlock == 0 ? k / kernels::kSuperBlock * kernels::kQ6_KBlockBytes : 0;
        if (rowBytes == 0 || blocks.size() % rowBytes != 0)
          throw std::invalid_argument("blocks must be whole rows of K = " + std::to_string(k) +
                                      " weights in q6_K super-blocks of 210 bytes");
        const int64_t n = blocks.size() / rowBytes;
        if (width <= 0 || paddedN < n || paddedN % width != 0)
          throw std::invalid_argument("padded_n " + std::to_string(paddedN) + " must be at least the " +
                                      std::to_string(n) + " rows and a multiple of the panel width");
        py::array_t<uint32_t> codes({paddedN / width, k / run * runWords, width});
        py::array_t<uint16_t> scales({paddedN / width, k / kernels::kSuperBlock * kernels::kQ6_KScaleRows, width});
        kernels::repackQ6_KRows({{blocks.data(), n}}, k, paddedN, width, codes.mutable_data(), scales.mutable_data(),
                                threads);
        return py::make_tuple(codes, scales);
      },
      py::arg("blocks"), py::arg("k"), py::arg("padded_n"), py::arg("width"), py::arg("threads") = 1,
      "llama.cpp q6_K super-blocks (rows of K weights, [out, in]) as (q6_k lanes uint32 [padded_n/width, K*3/16, "
      "width], uint16 [padded_n/width, K/32 + K/256, width]: each pair of runs' int8 scales, then each super-block's "
      "fp16 d bits), as from_gguf keeps them; a NaN or infinite d raises ValueError.");
  m.def(
      "dequantize_q6_k_lanes",
      [=](Ints<uint32_t> lanes, Ints<uint16_t> scales) {
        if (lanes.ndim() != 3 || lanes.shape(2) <= 0 || lanes.shape(1) % runWords != 0)
          throw std::invalid_argument("q6_k lanes must be [N/width, K*3/16, width]");
        const int64_t rows = lanes.shape(1) / runWords * run, width = lanes.shape(2), cols = lanes.shape(0) * width;
        if (rows % kernels::kSuperBlock != 0 || scales.ndim() != 3 || scales.shape(0) != cols / width ||
            scales.shape(1) != rows / kernels::kSuperBlock * kernels::kQ6_KScaleRows || scales.shape(2) != width)
          throw std::invalid_argument("q6_k scales must be [N/width, K/32 + K/256, width] for K = " +
                                      std::to_string(rows));
        py::array_t<float> matrix({rows, cols});
        kernels::dequantizeQ6_KLanes(lanes.data(), scales.data(), rows, cols, width, matrix.mutable_data());
        return matrix;
      },
      py::arg("lanes"), py::arg("scales"),
      "The [K, N] f32 matrix of q6_k lanes and scales (repack_q6_k_rows' layout): (d * sc) * (q - 32).");
  m.def(
      "quantize_q6_k",
      [](Floats matrix) {
        if (matrix.ndim() != 2) throw std::invalid_argument("quantize_q6_k takes a [K, N] matrix");
        const int64_t rows = matrix.shape(0), cols = matrix.shape(1);
        if (rows % kernels::kSuperBlock != 0)
          throw std::invalid_argument("q6_k needs K (" + std::to_string(rows) + ") to be a multiple of 256");
        py::array_t<uint8_t> codes({rows, cols});
        py::array_t<uint16_t> scales({rows / kernels::kSuperBlock * kernels::kQ6_KScaleRows, cols});
        kernels::quantizeQ6_K(matrix.data(), rows, cols, codes.mutable_data(), scales.mutable_data());
        return py::make_tuple(codes, scales);
      },
      py::arg("matrix"),
      "q6_K of a [K, N] matrix along K: (codes uint8 in [0, 63] [K, N], uint16 [K/32 + K/256, N]: each pair of "
      "runs' int8 scales, then each super-block's fp16 d bits).");
}

} // namespace

} // namespace gpt::python

PYBIND11_MODULE(gpt_kernels_testing, m) {
  m.doc() = "The kernels of cc/kernels that only tests call, bound for tests/python (not part of gpt).";
  gpt::python::initLanes(m);
  gpt::python::initTranscoding(m);
  gpt::python::initQuantization(m);
  gpt::python::initQ4K(m);
  gpt::python::initQ6K(m);
}
