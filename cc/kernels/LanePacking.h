// The lane layouts low-precision matmul weights are stored in: made once when a model's weights are
// bound, read by compiled code (transformer.packed_matmul), and read back to f32 for
// CompiledModel::storedWeight. This header declares nothing: each format's packing and reading
// kernels, and which of its rows share a word, are its section of FormatKernels.h, reached through
// its table row (WeightFormatTraits::pack, packFloats and dequantize, WeightFormats.h). What every
// layout shares is here.
//
// The packed matmul multiplies with the CPU's dot-product instructions, which see a 32-bit lane
// as several narrow values along K: vdpbf16ps multiplies 2 bf16 pairs per lane, vpdpbusd 4 byte
// pairs. So each 32-bit word of a lane layout holds weights of ONE column, and a panel row of P
// words is one zmm-sized load that feeds P columns at once. With P the panel width, panel p holds
// columns j = p P + c (c < P) of a row-major [K, N] weight w, as
//
//   lanes [N/P, K * codeBits / 32, P]     (codeBits: the table row's, 32 / rowsPerWord or q6_k's 6)
//
// Which rows share a word is chosen for the activations, which compiled code converts at run time
// into the same lanes: a word's rows are those one activation lane holds, taken from contiguous
// runs of the activation row (whole vectors, no gather). Byte i of a word is bits 8 i .. 8 i + 7
// (little-endian). A block format's fp16 scales (and mins, and sub-block scales) keep their column
// panels, [N/P, K / blockValues * scaleRows, P] (PanelPacking.h's packPanels of the table row's
// scale rows).
#ifndef GPT_CC_KERNELS_LANEPACKING_H
#define GPT_CC_KERNELS_LANEPACKING_H
#endif // GPT_CC_KERNELS_LANEPACKING_H
