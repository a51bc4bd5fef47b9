// The row kernel families: one block per token row. The embedding gather, LayerNorm and RMSNorm,
// and SwiGLU's silu(gate) * up (see GpuKernels.h; the text helpers are GpuKernelText.h's).
#include "cc/codegen/gpu/GpuKernelText.h"

namespace gpt::gpu {
using namespace text;

int64_t Strides::span() const {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) last += (sizes[i] - 1) * strides[i];
  return last + 1;
}

KernelSource gatherRows(const GatherRows &g) {
  KernelText k;
  int64_t threads = std::min<int64_t>(256, (g.width + kWarp - 1) / kWarp * kWarp);
  std::string tableType = memrefType(g.rows * g.rowStride, g.element);
  std::string signature = "%table: " + tableType + ", %ids: " + i64Memref(g.tokens);
  if (g.second) signature += ", %table2: " + f32Memref(g.rows2 * g.rowStride2) + ", %ids2: " + i64Memref(g.tokens);
  signature += ", %out: " + f32Memref(g.tokens * g.width);

  k.line("%t = gpu.block_id x");
  k.line("%tid = gpu.thread_id x");
  auto rowBase = [&](const std::string &ids, int64_t stride) {
    std::string id = k.fresh("id"), row = k.fresh("row"), base = k.fresh("base");
    k.line("$0 = memref.load $1[%t] : $2", {id, ids, i64Memref(g.tokens)});
    k.line("$0 = arith.index_cast $1 : i64 to index", {row, id});
    k.line("$0 = arith.muli $1, $2 : index", {base, row, k.index(stride)});
    return base;
  };
  std::string base = rowBase("%ids", g.rowStride);
  std::string base2 = g.second ? rowBase("%ids2", g.rowStride2) : "";
  std::string outBase = k.binary("arith.muli", "%t", k.index(g.width), "index");
  k.line("scf.for %e = %tid to $0 step $1 {", {k.index(g.width), k.index(threads)});
  k.open();
  std::string at = k.binary("arith.addi", base, "%e", "index");
  std::string v = k.loadScalar("%table", tableType, at, g.element);
  if (g.second) {
    std::string at2 = k.binary("arith.addi", base2, "%e", "index");
    std::string v2 = k.loadScalar("%table2", f32Memref(g.rows2 * g.rowStride2), at2, ElementType::F32);
    v = k.binary("arith.addf", v, v2, "f32");
  }
  std::string o = k.binary("arith.addi", outBase, "%e", "index");
  k.line("memref.store $0, %out[$1] : $2", {v, o, f32Memref(g.tokens * g.width)});
  k.close();
  llvm::json::Object op{{"family", "gather"}, {"tokens", g.tokens},        {"width", g.width},
                        {"rows", g.rows},     {"row_stride", g.rowStride}, {"bf16", g.element == ElementType::BF16},
                        {"second", g.second}, {"rows2", g.rows2},          {"row_stride2", g.rowStride2}};
  return {k.function(signature, "", ""), {g.tokens, 1, 1}, {threads, 1, 1}, std::move(op)};
}

KernelSource normRows(const NormRows &n) {
  KernelText k;
  constexpr int64_t threads = 256, warps = threads / kWarp;
  int64_t perThread = (n.width + threads - 1) / threads;
  bool ragged = n.width % threads != 0;
  std::string inType = f32Memref(n.rows * n.inputStride), outType = f32Memref(n.rows * n.width);
  std::string vecType = f32Memref(n.width);
  std::string signature = "%in: " + inType + ", %weight: " + vecType;
  if (!n.rms) signature += ", %bias: " + vecType;
  signature += ", %out: " + outType;
  std::string smem = "memref<" + str(warps) + "xf32, #gpu.address_space<workgroup>>";
  std::string workgroup = "%sum1: " + smem + ", %sum2: " + smem;

  k.line("%row = gpu.block_id x");
  k.line("%tid = gpu.thread_id x");
  k.line("%lane = arith.remui %tid, $0 : index", {k.index(kWarp)});
  k.line("%warp = arith.divui %tid, $0 : index", {k.index(kWarp)});
  std::string inBase = k.binary("arith.muli", "%row", k.index(n.inputStride), "index");
  std::string outBase = k.binary("arith.muli", "%row", k.index(n.width), "index");
  std::vector<std::string> element(perThread), valid(perThread), x(perThread);
  for (int64_t j = 0; j < perThread; ++j) {
    element[j] = k.binary("arith.addi", "%tid", k.index(j * threads), "index");
    std::string at = k.binary("arith.addi", inBase, element[j], "index");
    if (ragged) {
      valid[j] = k.fresh("valid");
      x[j] = k.fresh("x");
      k.line("$0 = arith.cmpi ult, $1, $2 : index", {valid[j], element[j], k.index(n.width)});
      k.line("$0 = scf.if $1 -> (f32) {", {x[j], valid[j]});
      k.open();
      std::string v = k.loadScalar("%in", inType, at, ElementType::F32);
      k.line("scf.yield $0 : f32", {v});
      k.close("} else {");
      k.open();
      k.line("scf.yield $0 : f32", {k.f32(0.0f)});
      k.close();
    } else {
      x[j] = k.loadScalar("%in", inType, at, ElementType::F32);
    }
  }
  // The block's sum of one value per thread: warp sums, then every thread adds the warps'.
  auto blockSum = [&](const std::string &v, const std::string &scratch) {
    std::string warpTotal = k.warpSum(v);
    std::string first = k.fresh("first");
    k.line("$0 = arith.cmpi eq, %lane, $1 : index", {first, k.index(0)});
    k.line("scf.if $0 {", {first});
    k.open();
    k.line("memref.store $0, $1[%warp] : $2", {warpTotal, scratch, smem});
    k.close();
    k.line("gpu.barrier");
    std::string total = k.f32(0.0f);
    for (int64_t w = 0; w < warps; ++w) {
      std::string part = k.fresh("part");
      k.line("$0 = memref.load $1[$2] : $3", {part, scratch, k.index(w), smem});
      total = k.binary("arith.addf", total, part, "f32");
    }
    return total;
  };
  std::string mean;
  std::vector<std::string> centered = x;
  if (!n.rms) {
    std::string sum = k.f32(0.0f);
    for (const std::string &v : x) sum = k.binary("arith.addf", sum, v, "f32");
    mean = k.binary("arith.mulf", blockSum(sum, "%sum1"), k.f32(1.0f / n.width), "f32");
    for (int64_t j = 0; j < perThread; ++j) {
      centered[j] = k.binary("arith.subf", x[j], mean, "f32");
      // Padding lanes hold 0, and must stay 0 in the sum of squares.
      if (ragged) centered[j] = k.binary("arith.select", valid[j], centered[j] + ", " + k.f32(0.0f), "f32");
    }
  }
  std::string squares = k.f32(0.0f);
  for (const std::string &v : centered)
    squares = k.binary("arith.addf", squares, k.binary("arith.mulf", v, v, "f32"), "f32");
  std::string variance = k.binary("arith.mulf", blockSum(squares, "%sum2"), k.f32(1.0f / n.width), "f32");
  std::string shifted = k.binary("arith.addf", variance, k.f32(n.epsilon), "f32");
  std::string inverse = k.fresh("inv");
  k.line("$0 = math.rsqrt $1 : f32", {inverse, shifted});
  for (int64_t j = 0; j < perThread; ++j) {
    if (ragged) {
      k.line("scf.if $0 {", {valid[j]});
      k.open();
    }
    std::string normalized = k.binary("arith.mulf", centered[j], inverse, "f32");
    std::string w = k.loadScalar("%weight", vecType, element[j], ElementType::F32);
    std::string y = k.binary("arith.mulf", normalized, w, "f32");
    if (!n.rms) y = k.binary("arith.addf", y, k.loadScalar("%bias", vecType, element[j], ElementType::F32), "f32");
    std::string at = k.binary("arith.addi", outBase, element[j], "index");
    k.line("memref.store $0, %out[$1] : $2", {y, at, outType});
    if (ragged) k.close();
  }
  llvm::json::Object op{{"family", "norm"},     {"rows", n.rows}, {"width", n.width}, {"input_stride", n.inputStride},
                        {"epsilon", n.epsilon}, {"rms", n.rms}};
  return {k.function(signature, workgroup, ""), {n.rows, 1, 1}, {threads, 1, 1}, std::move(op)};
}

KernelSource swiglu(const Swiglu &g) {
  KernelText k;
  int64_t threads = std::min<int64_t>(256, (g.width + kWarp - 1) / kWarp * kWarp);
  std::string gateType = f32Memref((g.tokens - 1) * g.gateStride + g.width);
  std::string upType = f32Memref((g.tokens - 1) * g.upStride + g.width);
  std::string outType = f32Memref(g.tokens * g.width);
  std::string signature = "%gate: " + gateType + ", %up: " + upType + ", %out: " + outType;
  k.line("%t = gpu.block_id x");
  k.line("%tid = gpu.thread_id x");
  std::string gateBase = k.binary("arith.muli", "%t", k.index(g.gateStride), "index");
  std::string upBase = k.binary("arith.muli", "%t", k.index(g.upStride), "index");
  std::string outBase = k.binary("arith.muli", "%t", k.index(g.width), "index");
  k.line("scf.for %e = %tid to $0 step $1 {", {k.index(g.width), k.index(threads)});
  k.open();
  std::string gate = k.loadScalar("%gate", gateType, k.binary("arith.addi", gateBase, "%e", "index"), ElementType::F32);
  std::string up = k.loadScalar("%up", upType, k.binary("arith.addi", upBase, "%e", "index"), ElementType::F32);
  // gate * up / (1 + exp(-gate)), as the CPU lowering computes silu(gate) * up.
  std::string negated = k.fresh("neg"), e = k.fresh("exp");
  k.line("$0 = arith.negf $1 : f32", {negated, gate});
  k.line("$0 = math.exp $1 : f32", {e, negated});
  std::string denominator = k.binary("arith.addf", e, k.f32(1.0f), "f32");
  std::string y = k.binary("arith.divf", k.binary("arith.mulf", gate, up, "f32"), denominator, "f32");
  k.line("memref.store $0, %out[$1] : $2", {y, k.binary("arith.addi", outBase, "%e", "index"), outType});
  k.close();
  llvm::json::Object op{{"family", "swiglu"},
                        {"tokens", g.tokens},
                        {"width", g.width},
                        {"gate_stride", g.gateStride},
                        {"up_stride", g.upStride}};
  return {k.function(signature, "", ""), {g.tokens, 1, 1}, {threads, 1, 1}, std::move(op)};
}

} // namespace gpt::gpu
