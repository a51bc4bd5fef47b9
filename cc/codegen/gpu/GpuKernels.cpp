// The GPU kernel families, as `gpu.func` text with static shapes (see GpuKernels.h).
//
// The text is assembled from small pieces rather than built op by op: a kernel reads top to
// bottom like the CUDA it replaces, and `model.ir("gpu")` shows exactly this source. Every
// constant a kernel uses is declared once at its top (KernelText::constants).
#include "cc/codegen/gpu/GpuKernels.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

namespace gpt::gpu {
namespace {

constexpr int64_t kWarp = 32;

/// `pattern` with $0..$9 replaced by `args`.
std::string subst(const std::string &pattern, const std::vector<std::string> &args) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '$' && i + 1 < pattern.size() && pattern[i + 1] >= '0' && pattern[i + 1] <= '9') {
      out += args.at(pattern[i + 1] - '0');
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::string str(int64_t v) { return std::to_string(v); }

/// A kernel body under construction: lines, fresh SSA names and the constants they use.
class KernelText {
public:
  /// A fresh SSA name, `%<hint><n>`.
  std::string fresh(const std::string &hint) { return "%" + hint + str(counter++); }
  /// Appends `pattern` (see subst) as one line.
  void line(const std::string &pattern, const std::vector<std::string> &args = {}) {
    body += std::string(indent, ' ') + subst(pattern, args) + "\n";
  }
  void open() { indent += 2; }
  void close(const std::string &closing = "}") {
    indent -= 2;
    line(closing);
  }
  std::string index(int64_t v) { return constant("%c" + (v < 0 ? "m" + str(-v) : str(v)), str(v) + " : index"); }
  std::string i32(int64_t v) { return constant("%i" + str(v), str(v) + " : i32"); }
  std::string f32(float v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9e", v);
    std::string name = "%f" + str(static_cast<int64_t>(floatNames.size()));
    auto [it, inserted] = floatNames.try_emplace(text, name);
    if (inserted) constants_ += "    " + name + " = arith.constant " + text + " : f32\n";
    return it->second;
  }
  std::string vectorI32(int64_t v, int64_t lanes) {
    return constant("%vi" + str(v) + "x" + str(lanes), "dense<" + str(v) + "> : vector<" + str(lanes) + "xi32>");
  }

  /// ptr[index] as f32, widening bf16 bits.
  std::string loadScalar(const std::string &memref, const std::string &type, const std::string &index,
                         ElementType element) {
    std::string v = fresh("v");
    if (element == ElementType::F32) {
      line("$0 = memref.load $1[$2] : $3", {v, memref, index, type});
      return v;
    }
    std::string raw = fresh("raw"), wide = fresh("wide"), bits = fresh("bits");
    line("$0 = memref.load $1[$2] : $3", {raw, memref, index, type});
    line("$0 = arith.extui $1 : i16 to i32", {wide, raw});
    line("$0 = arith.shli $1, $2 : i32", {bits, wide, i32(16)});
    line("$0 = arith.bitcast $1 : i32 to f32", {v, bits});
    return v;
  }
  /// ptr[index .. index+3] as vector<4xf32>, widening bf16 bits.
  std::string loadVector4(const std::string &memref, const std::string &type, const std::string &index,
                          ElementType element) {
    std::string v = fresh("v");
    if (element == ElementType::F32) {
      line("$0 = vector.load $1[$2] : $3, vector<4xf32>", {v, memref, index, type});
      return v;
    }
    std::string raw = fresh("raw"), wide = fresh("wide"), bits = fresh("bits");
    line("$0 = vector.load $1[$2] : $3, vector<4xi16>", {raw, memref, index, type});
    line("$0 = arith.extui $1 : vector<4xi16> to vector<4xi32>", {wide, raw});
    line("$0 = arith.shli $1, $2 : vector<4xi32>", {bits, wide, vectorI32(16, 4)});
    line("$0 = arith.bitcast $1 : vector<4xi32> to vector<4xf32>", {v, bits});
    return v;
  }
  /// a * b + c for indices.
  std::string madd(const std::string &a, int64_t b, const std::string &c) {
    std::string product = fresh("p"), sum = fresh("s");
    line("$0 = arith.muli $1, $2 : index", {product, a, index(b)});
    line("$0 = arith.addi $1, $2 : index", {sum, product, c});
    return sum;
  }
  std::string binary(const std::string &op, const std::string &a, const std::string &b, const std::string &type) {
    std::string r = fresh("r");
    line("$0 = $1 $2, $3 : $4", {r, op, a, b, type});
    return r;
  }
  /// The sum of `v` over the warp, in every lane (butterfly shuffles).
  std::string warpSum(const std::string &v) {
    std::string acc = v;
    for (int64_t offset = kWarp / 2; offset >= 1; offset /= 2) {
      std::string other = fresh("sh"), valid = fresh("ok");
      line("$0, $1 = gpu.shuffle xor $2, $3, $4 : f32", {other, valid, acc, i32(offset), i32(kWarp)});
      acc = binary("arith.addf", acc, other, "f32");
    }
    return acc;
  }
  /// tanh-approximated GELU, as transformer.gelu defines it.
  std::string gelu(const std::string &x) {
    std::string x2 = binary("arith.mulf", x, x, "f32");
    std::string x3 = binary("arith.mulf", x2, x, "f32");
    std::string cubic = binary("arith.mulf", x3, f32(0.044715f), "f32");
    std::string inner = binary("arith.addf", x, cubic, "f32");
    std::string scaled = binary("arith.mulf", inner, f32(0.7978845608028654f), "f32");
    std::string t = fresh("tanh");
    line("$0 = math.tanh $1 : f32", {t, scaled});
    std::string onePlus = binary("arith.addf", t, f32(1.0f), "f32");
    std::string half = binary("arith.mulf", x, f32(0.5f), "f32");
    return binary("arith.mulf", half, onePlus, "f32");
  }

  /// `gpu.func @KERNEL(signature) [workgroup(...)] kernel { constants body gpu.return }`.
  std::string function(const std::string &signature, const std::string &workgroup, const std::string &prologue) const {
    std::string text = "  gpu.func @KERNEL(" + signature + ")";
    if (!workgroup.empty()) text += " workgroup(" + workgroup + ")";
    text += " kernel {\n" + prologue + constants_ + body + "    gpu.return\n  }\n";
    return text;
  }

private:
  std::string constant(const std::string &name, const std::string &value) {
    if (names.insert(name).second) constants_ += "    " + name + " = arith.constant " + value + "\n";
    return name;
  }

  std::string body, constants_;
  std::set<std::string> names;
  std::map<std::string, std::string> floatNames;
  int64_t counter = 0;
  int indent = 4;
};

std::string memrefType(int64_t elements, ElementType element) {
  return "memref<" + str(std::max<int64_t>(elements, 1)) + (element == ElementType::F32 ? "xf32>" : "xi16>");
}
std::string f32Memref(int64_t elements) { return memrefType(elements, ElementType::F32); }
std::string i64Memref(int64_t elements) { return "memref<" + str(std::max<int64_t>(elements, 1)) + "xi64>"; }

/// `memref.assume_alignment` lines for pointers read with 16-byte vector loads: the runtime
/// aligns every buffer and offset it passes to 16 bytes (GpuPrograms checks the offsets).
std::string assumeAligned(const std::vector<std::pair<std::string, std::string>> &args) {
  std::string text;
  for (const auto &[name, type] : args) text += "    memref.assume_alignment " + name + ", 16 : " + type + "\n";
  return text;
}

/// Applies `e` to the matmul value `v` of output (m, n); `bias` and `residual` are the kernel's
/// arguments of those names.
std::string applyEpilogue(KernelText &k, const Epilogue &e, const std::string &v, const std::string &m,
                          const std::string &n, int64_t columns, int64_t rows) {
  std::string value = v;
  if (e.bias) {
    std::string b = k.loadScalar("%bias", f32Memref(columns), n, ElementType::F32);
    value = k.binary("arith.addf", value, b, "f32");
  }
  if (e.gelu) value = k.gelu(value);
  if (e.residual) {
    std::string at = k.madd(m, e.residualStride, n);
    std::string r = k.loadScalar("%residual", f32Memref(rows * e.residualStride), at, ElementType::F32);
    value = k.binary("arith.addf", value, r, "f32");
  }
  return value;
}

std::string epilogueSignature(const Epilogue &e, int64_t columns, int64_t rows) {
  std::string text;
  if (e.bias) text += ", %bias: " + f32Memref(columns);
  if (e.residual) text += ", %residual: " + f32Memref(rows * e.residualStride);
  return text;
}

llvm::json::Object describe(const Matmul &m) {
  return llvm::json::Object{{"family", "matmul"},
                            {"rows", m.rows},
                            {"columns", m.columns},
                            {"valid_columns", m.validColumns},
                            {"depth", m.depth},
                            {"a_stride", m.aStride},
                            {"bf16", m.element == ElementType::BF16},
                            {"bias", m.epilogue.bias},
                            {"gelu", m.epilogue.gelu},
                            {"residual", m.epilogue.residual},
                            {"residual_stride", m.epilogue.residualStride}};
}

} // namespace

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

KernelSource matvec(const Matmul &m) {
  if (m.rows > kMatvecMaxRows) throw std::invalid_argument("matvec: too many rows");
  if (m.depth % 4) throw std::invalid_argument("matvec: the depth must be a multiple of 4");
  KernelText k;
  constexpr int64_t threads = 256, warps = threads / kWarp;
  std::string aType = f32Memref(m.rows * m.aStride), bType = memrefType(m.validColumns * m.depth, m.element);
  std::string outType = f32Memref(m.rows * m.columns);
  std::string signature =
      "%a: " + aType + ", %b: " + bType + epilogueSignature(m.epilogue, m.columns, m.rows) + ", %out: " + outType;
  std::string prologue = assumeAligned({{"%a", aType}, {"%b", bType}});

  k.line("%block = gpu.block_id x");
  k.line("%tid = gpu.thread_id x");
  k.line("%lane = arith.remui %tid, $0 : index", {k.index(kWarp)});
  k.line("%warp = arith.divui %tid, $0 : index", {k.index(kWarp)});
  std::string n = k.madd("%block", warps, "%warp");
  std::string inRange = k.fresh("inrange");
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {inRange, n, k.index(m.columns)});
  k.line("scf.if $0 {", {inRange});
  k.open();
  std::string valid = k.fresh("valid");
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {valid, n, k.index(m.validColumns)});
  std::string f32s, zeros, vectors, zeroVectors;
  for (int64_t r = 0; r < m.rows; ++r) {
    f32s += (r ? ", " : "") + std::string("f32");
    zeros += (r ? ", " : "") + k.f32(0.0f);
    vectors += (r ? ", " : "") + std::string("vector<4xf32>");
  }
  std::string zeroVector = k.fresh("zv");
  k.line("$0 = vector.splat $1 : vector<4xf32>", {zeroVector, k.f32(0.0f)});
  std::string sums = k.fresh("sums");
  k.line("$0:$1 = scf.if $2 -> ($3) {", {sums, str(m.rows), valid, f32s});
  k.open();
  std::string bBase = k.binary("arith.muli", n, k.index(m.depth), "index");
  std::string start = k.binary("arith.muli", "%lane", k.index(4), "index");
  std::string accs = k.fresh("acc");
  std::string iterArgs;
  for (int64_t r = 0; r < m.rows; ++r) iterArgs += (r ? ", " : "") + std::string("%a") + str(r) + " = " + zeroVector;
  k.line("$0:$1 = scf.for %k = $2 to $3 step $4 iter_args($5) -> ($6) {",
         {accs, str(m.rows), start, k.index(m.depth), k.index(4 * kWarp), iterArgs, vectors});
  k.open();
  std::string bAt = k.binary("arith.addi", bBase, "%k", "index");
  std::string bv = k.loadVector4("%b", bType, bAt, m.element);
  std::string yields;
  for (int64_t r = 0; r < m.rows; ++r) {
    std::string aAt = k.madd(k.index(r), m.aStride, "%k");
    std::string av = k.loadVector4("%a", aType, aAt, ElementType::F32);
    std::string next = k.fresh("fma");
    k.line("$0 = vector.fma $1, $2, %a$3 : vector<4xf32>", {next, av, bv, str(r)});
    yields += (r ? ", " : "") + next;
  }
  k.line("scf.yield $0 : $1", {yields, vectors});
  k.close();
  std::string results;
  for (int64_t r = 0; r < m.rows; ++r) {
    std::string total = k.f32(0.0f);
    for (int lane = 0; lane < 4; ++lane) {
      std::string e = k.fresh("e");
      k.line("$0 = vector.extract $1#$2[$3] : f32 from vector<4xf32>", {e, accs, str(r), str(lane)});
      total = k.binary("arith.addf", total, e, "f32");
    }
    results += (r ? ", " : "") + total;
  }
  k.line("scf.yield $0 : $1", {results, f32s});
  k.close("} else {");
  k.open();
  k.line("scf.yield $0 : $1", {zeros, f32s});
  k.close();
  std::vector<std::string> totals;
  for (int64_t r = 0; r < m.rows; ++r) totals.push_back(k.warpSum(sums + "#" + str(r)));
  std::string first = k.fresh("first");
  k.line("$0 = arith.cmpi eq, %lane, $1 : index", {first, k.index(0)});
  k.line("scf.if $0 {", {first});
  k.open();
  for (int64_t r = 0; r < m.rows; ++r) {
    std::string value = applyEpilogue(k, m.epilogue, totals[r], k.index(r), n, m.columns, m.rows);
    std::string at = k.madd(k.index(r), m.columns, n);
    k.line("memref.store $0, %out[$1] : $2", {value, at, outType});
  }
  k.close();
  k.close();
  int64_t blocks = (m.columns + warps - 1) / warps;
  return {k.function(signature, "", prologue), {blocks, 1, 1}, {threads, 1, 1}, describe(m)};
}

KernelSource tiledMatmul(const Matmul &m) {
  constexpr int64_t tile = 64, tileK = 16, threads = 256, micro = 4;
  if (m.depth % tileK) throw std::invalid_argument("tiledMatmul: the depth must be a multiple of 16");
  if (m.aStride % 4) throw std::invalid_argument("tiledMatmul: the row stride of a must be a multiple of 4");
  KernelText k;
  std::string aType = f32Memref(m.rows * m.aStride), bType = memrefType(m.validColumns * m.depth, m.element);
  std::string outType = f32Memref(m.rows * m.columns);
  std::string smem = "memref<" + str(tileK) + "x" + str(tile) + "xf32, #gpu.address_space<workgroup>>";
  std::string signature =
      "%a: " + aType + ", %b: " + bType + epilogueSignature(m.epilogue, m.columns, m.rows) + ", %out: " + outType;
  std::string prologue = assumeAligned({{"%a", aType}, {"%b", bType}});

  k.line("%bx = gpu.block_id x");
  k.line("%by = gpu.block_id y");
  k.line("%tid = gpu.thread_id x");
  std::string col0 = k.binary("arith.muli", "%bx", k.index(tile), "index");
  std::string row0 = k.binary("arith.muli", "%by", k.index(tile), "index");
  // This thread's 4x4 outputs: rows row0 + 4 tr .. +3, columns col0 + 4 tc .. +3.
  std::string tr = k.binary("arith.divui", "%tid", k.index(tile / micro), "index");
  std::string tc = k.binary("arith.remui", "%tid", k.index(tile / micro), "index");
  std::string tr4 = k.binary("arith.muli", tr, k.index(micro), "index");
  std::string tc4 = k.binary("arith.muli", tc, k.index(micro), "index");
  // What it loads: row `lr` of each tile, 4 consecutive k at `lk`.
  std::string lr = k.binary("arith.divui", "%tid", k.index(tileK / 4), "index");
  std::string lk =
      k.binary("arith.muli", k.binary("arith.remui", "%tid", k.index(tileK / 4), "index"), k.index(4), "index");
  std::string aRow = k.binary("arith.addi", row0, lr, "index");
  std::string bRow = k.binary("arith.addi", col0, lr, "index");
  std::string aOk = k.fresh("aok"), bOk = k.fresh("bok");
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {aOk, aRow, k.index(m.rows)});
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {bOk, bRow, k.index(m.validColumns)});
  std::string aBase = k.binary("arith.muli", aRow, k.index(m.aStride), "index");
  std::string bBase = k.binary("arith.muli", bRow, k.index(m.depth), "index");
  std::string zeroVector = k.fresh("zv");
  k.line("$0 = vector.splat $1 : vector<4xf32>", {zeroVector, k.f32(0.0f)});
  std::string vectors = "vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>";
  // The tiles of k0 .. k0 + 15: 4 consecutive k at `lk` of row `lr`, read from global memory one
  // iteration ahead (register prefetch), so their latency overlaps the previous tile's FMAs.
  auto fetch = [&](const std::string &ok, const std::string &memref, const std::string &type, const std::string &base,
                   ElementType element, const std::string &k0) {
    std::string at = k.binary("arith.addi", base, k.binary("arith.addi", k0, lk, "index"), "index");
    std::string v = k.fresh("tile");
    k.line("$0 = scf.if $1 -> (vector<4xf32>) {", {v, ok});
    k.open();
    std::string loaded = k.loadVector4(memref, type, at, element);
    k.line("scf.yield $0 : vector<4xf32>", {loaded});
    k.close("} else {");
    k.open();
    k.line("scf.yield $0 : vector<4xf32>", {zeroVector});
    k.close();
    return v;
  };
  std::string firstA = fetch(aOk, "%a", aType, aBase, ElementType::F32, k.index(0));
  std::string firstB = fetch(bOk, "%b", bType, bBase, m.element, k.index(0));
  std::string accs = k.fresh("acc");
  k.line("$0:6 = scf.for %k0 = $1 to $2 step $3 iter_args(%c0a = $4, %c1a = $4, %c2a = $4, %c3a = $4, %pa = $5, "
         "%pb = $6) -> ($7, vector<4xf32>, vector<4xf32>) {",
         {accs, k.index(0), k.index(m.depth), k.index(tileK), zeroVector, firstA, firstB, vectors});
  k.open();
  k.line("gpu.barrier");
  // Stage the tiles transposed (k-major) so the inner loop reads 4 rows or 4 columns at once.
  auto stage = [&](const std::string &v, const std::string &shared) {
    for (int i = 0; i < 4; ++i) {
      std::string e = k.fresh("e");
      k.line("$0 = vector.extract $1[$2] : f32 from vector<4xf32>", {e, v, str(i)});
      std::string kk = k.binary("arith.addi", lk, k.index(i), "index");
      k.line("memref.store $0, $1[$2, $3] : $4", {e, shared, kk, lr, smem});
    }
  };
  stage("%pa", "%as");
  stage("%pb", "%bs");
  std::string next = k.binary("arith.addi", "%k0", k.index(tileK), "index");
  std::string more = k.fresh("more");
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {more, next, k.index(m.depth)});
  std::string nextA = fetch(k.binary("arith.andi", more, aOk, "i1"), "%a", aType, aBase, ElementType::F32, next);
  std::string nextB = fetch(k.binary("arith.andi", more, bOk, "i1"), "%b", bType, bBase, m.element, next);
  k.line("gpu.barrier");
  std::string inner = k.fresh("in");
  k.line("$0:4 = scf.for %kk = $1 to $2 step $3 iter_args(%d0 = %c0a, %d1 = %c1a, %d2 = %c2a, %d3 = %c3a) -> ($4) {",
         {inner, k.index(0), k.index(tileK), k.index(1), vectors});
  k.open();
  std::string av = k.fresh("av"), bv = k.fresh("bv");
  k.line("$0 = vector.load %as[%kk, $1] : $2, vector<4xf32>", {av, tr4, smem});
  k.line("$0 = vector.load %bs[%kk, $1] : $2, vector<4xf32>", {bv, tc4, smem});
  std::string yields;
  for (int r = 0; r < micro; ++r) {
    std::string a = k.fresh("a"), splat = k.fresh("splat"), next = k.fresh("fma");
    k.line("$0 = vector.extract $1[$2] : f32 from vector<4xf32>", {a, av, str(r)});
    k.line("$0 = vector.splat $1 : vector<4xf32>", {splat, a});
    k.line("$0 = vector.fma $1, $2, %d$3 : vector<4xf32>", {next, splat, bv, str(r)});
    yields += (r ? ", " : "") + next;
  }
  k.line("scf.yield $0 : $1", {yields, vectors});
  k.close();
  k.line("scf.yield $0#0, $0#1, $0#2, $0#3, $1, $2 : $3, vector<4xf32>, vector<4xf32>", {inner, nextA, nextB, vectors});
  k.close();
  for (int r = 0; r < micro; ++r) {
    std::string row = k.binary("arith.addi", row0, k.binary("arith.addi", tr4, k.index(r), "index"), "index");
    std::string rowOk = k.fresh("rowok");
    k.line("$0 = arith.cmpi ult, $1, $2 : index", {rowOk, row, k.index(m.rows)});
    k.line("scf.if $0 {", {rowOk});
    k.open();
    for (int c = 0; c < micro; ++c) {
      std::string col = k.binary("arith.addi", col0, k.binary("arith.addi", tc4, k.index(c), "index"), "index");
      bool ragged = m.columns % tile != 0;
      std::string colOk;
      if (ragged) {
        colOk = k.fresh("colok");
        k.line("$0 = arith.cmpi ult, $1, $2 : index", {colOk, col, k.index(m.columns)});
        k.line("scf.if $0 {", {colOk});
        k.open();
      }
      std::string v = k.fresh("v");
      k.line("$0 = vector.extract $1#$2[$3] : f32 from vector<4xf32>", {v, accs, str(r), str(c)});
      std::string value = applyEpilogue(k, m.epilogue, v, row, col, m.columns, m.rows);
      std::string at = k.madd(row, m.columns, col);
      k.line("memref.store $0, %out[$1] : $2", {value, at, outType});
      if (ragged) k.close();
    }
    k.close();
  }
  int64_t blocksX = (m.columns + tile - 1) / tile, blocksY = (m.rows + tile - 1) / tile;
  return {k.function(signature, "%as: " + smem + ", %bs: " + smem, prologue),
          {blocksX, blocksY, 1},
          {threads, 1, 1},
          describe(m)};
}

KernelSource attention(const Attention &a) {
  KernelText k;
  // Lane l holds elements l, l + 32, ...; a head size that is no multiple of 32 leaves the last
  // chunk's high lanes idle: they read a clamped, in-bounds element and use 0 instead.
  int64_t perLane = (a.headSize + kWarp - 1) / kWarp, group = a.heads / a.kvHeads;
  bool ragged = a.headSize % kWarp != 0;
  auto viewType = [&](const std::array<int64_t, 2> &s, int64_t tokens, int64_t heads) {
    return f32Memref((tokens - 1) * s[0] + (heads - 1) * s[1] + a.headSize);
  };
  std::string qType = viewType(a.q, a.tokens, a.heads), kType = viewType(a.k, a.keys, a.kvHeads);
  std::string vType = viewType(a.v, a.keys, a.kvHeads), oType = viewType(a.out, a.tokens, a.heads);
  std::string signature = "%q: " + qType + ", %k: " + kType + ", %v: " + vType;
  if (a.offsetFromMemory) signature += ", %offset: " + i64Memref(1);
  signature += ", %out: " + oType;

  k.line("%i = gpu.block_id x");
  k.line("%h = gpu.block_id y");
  k.line("%tid = gpu.thread_id x");
  k.line("%lane = arith.remui %tid, $0 : index", {k.index(kWarp)});
  k.line("%warp = arith.divui %tid, $0 : index", {k.index(kWarp)});
  std::string hk = k.binary("arith.divui", "%h", k.index(group), "index");
  std::string offset = k.index(0);
  if (a.offsetFromMemory) {
    std::string raw = k.fresh("raw");
    offset = k.fresh("offset");
    k.line("$0 = memref.load %offset[$1] : $2", {raw, k.index(0), i64Memref(1)});
    k.line("$0 = arith.index_cast $1 : i64 to index", {offset, raw});
  }
  // Keys 0 .. offset + i inclusive, never past the cache.
  std::string end = k.binary("arith.addi", k.binary("arith.addi", offset, "%i", "index"), k.index(1), "index");
  end = k.binary("arith.minui", end, k.index(a.keys), "index");
  std::string qBase = k.madd("%i", a.q[0], k.binary("arith.muli", "%h", k.index(a.q[1]), "index"));
  std::string kHead = k.binary("arith.muli", hk, k.index(a.k[1]), "index");
  std::string vHead = k.binary("arith.muli", hk, k.index(a.v[1]), "index");
  std::vector<std::string> element(perLane), valid(perLane), q(perLane);
  for (int64_t e = 0; e < perLane; ++e) {
    std::string unclamped = k.binary("arith.addi", "%lane", k.index(e * kWarp), "index");
    element[e] = unclamped;
    if (ragged && (e + 1) * kWarp > a.headSize) {
      valid[e] = k.fresh("valid");
      k.line("$0 = arith.cmpi ult, $1, $2 : index", {valid[e], unclamped, k.index(a.headSize)});
      element[e] = k.binary("arith.minui", unclamped, k.index(a.headSize - 1), "index");
    }
  }
  // An element of `memref` at base + element[e], 0 on an idle lane.
  auto load = [&](const std::string &memref, const std::string &type, const std::string &base, int64_t e) {
    std::string v = k.loadScalar(memref, type, k.binary("arith.addi", base, element[e], "index"), ElementType::F32);
    if (valid[e].empty()) return v;
    std::string masked = k.fresh("masked");
    k.line("$0 = arith.select $1, $2, $3 : f32", {masked, valid[e], v, k.f32(0.0f)});
    return masked;
  };
  for (int64_t e = 0; e < perLane; ++e)
    q[e] = k.binary("arith.mulf", load("%q", qType, qBase, e), k.f32(a.scale), "f32");
  std::string types = "f32, f32", iterArgs = "%m = " + k.f32(-3.0e38f) + ", %l = " + k.f32(0.0f);
  for (int64_t e = 0; e < perLane; ++e) {
    types += ", f32";
    iterArgs += ", %o" + str(e) + " = " + k.f32(0.0f);
  }
  std::string state = k.fresh("state");
  k.line("$0:$1 = scf.for %j = %warp to $2 step $3 iter_args($4) -> ($5) {",
         {state, str(2 + perLane), end, k.index(a.warps), iterArgs, types});
  k.open();
  std::string kRow = k.madd("%j", a.k[0], kHead);
  std::string partial = k.f32(0.0f);
  for (int64_t e = 0; e < perLane; ++e) {
    std::string kv = load("%k", kType, kRow, e);
    partial = k.binary("arith.addf", partial, k.binary("arith.mulf", q[e], kv, "f32"), "f32");
  }
  std::string score = k.warpSum(partial);
  std::string newMax = k.binary("arith.maximumf", "%m", score, "f32");
  std::string correction = k.fresh("corr"), p = k.fresh("prob");
  k.line("$0 = math.exp $1 : f32", {correction, k.binary("arith.subf", "%m", newMax, "f32")});
  k.line("$0 = math.exp $1 : f32", {p, k.binary("arith.subf", score, newMax, "f32")});
  std::string l = k.binary("arith.addf", k.binary("arith.mulf", "%l", correction, "f32"), p, "f32");
  std::string vRow = k.madd("%j", a.v[0], vHead);
  std::string yields = newMax + ", " + l;
  for (int64_t e = 0; e < perLane; ++e) {
    std::string vv = load("%v", vType, vRow, e);
    std::string scaled = k.binary("arith.mulf", "%o" + str(e), correction, "f32");
    // mul + add: the NVPTX backend contracts them into one fma (math.fma has no NVVM lowering).
    std::string next = k.binary("arith.addf", k.binary("arith.mulf", p, vv, "f32"), scaled, "f32");
    yields += ", " + next;
  }
  k.line("scf.yield $0 : $1", {yields, types});
  k.close();
  std::string outBase = k.madd("%i", a.out[0], k.binary("arith.muli", "%h", k.index(a.out[1]), "index"));
  std::vector<std::string> numerator(perLane), denominator(perLane);
  std::string workgroup;
  if (a.warps == 1) {
    for (int64_t e = 0; e < perLane; ++e) {
      numerator[e] = state + "#" + str(2 + e);
      denominator[e] = state + "#1";
    }
  } else {
    // Each warp's (max, sum, accumulators) to shared memory; warp 0 rescales them to the common
    // max and adds them up: the online softmax's merge.
    std::string wide = str(perLane * kWarp);
    std::string stats = "memref<" + str(a.warps) + "xf32, #gpu.address_space<workgroup>>";
    std::string accumulators = "memref<" + str(a.warps) + "x" + wide + "xf32, #gpu.address_space<workgroup>>";
    workgroup = "%maxes: " + stats + ", %sums: " + stats + ", %accs: " + accumulators;
    k.line("memref.store $0#0, %maxes[%warp] : $1", {state, stats});
    k.line("memref.store $0#1, %sums[%warp] : $1", {state, stats});
    for (int64_t e = 0; e < perLane; ++e) {
      std::string column = k.binary("arith.addi", "%lane", k.index(e * kWarp), "index");
      k.line("memref.store $0#$1, %accs[%warp, $2] : $3", {state, str(2 + e), column, accumulators});
    }
    k.line("gpu.barrier");
    std::string shared = k.f32(-3.0e38f);
    std::vector<std::string> maxes(a.warps);
    for (int64_t w = 0; w < a.warps; ++w) {
      maxes[w] = k.fresh("wmax");
      k.line("$0 = memref.load %maxes[$1] : $2", {maxes[w], k.index(w), stats});
      shared = k.binary("arith.maximumf", shared, maxes[w], "f32");
    }
    std::string total = k.f32(0.0f);
    std::vector<std::string> scale(a.warps);
    for (int64_t w = 0; w < a.warps; ++w) {
      scale[w] = k.fresh("wscale");
      k.line("$0 = math.exp $1 : f32", {scale[w], k.binary("arith.subf", maxes[w], shared, "f32")});
      std::string sum = k.fresh("wsum");
      k.line("$0 = memref.load %sums[$1] : $2", {sum, k.index(w), stats});
      total = k.binary("arith.addf", total, k.binary("arith.mulf", sum, scale[w], "f32"), "f32");
    }
    for (int64_t e = 0; e < perLane; ++e) {
      std::string column = k.binary("arith.addi", "%lane", k.index(e * kWarp), "index");
      std::string sum = k.f32(0.0f);
      for (int64_t w = 0; w < a.warps; ++w) {
        std::string part = k.fresh("wacc");
        k.line("$0 = memref.load %accs[$1, $2] : $3", {part, k.index(w), column, accumulators});
        sum = k.binary("arith.addf", sum, k.binary("arith.mulf", part, scale[w], "f32"), "f32");
      }
      numerator[e] = sum;
      denominator[e] = total;
    }
    std::string first = k.fresh("first");
    k.line("$0 = arith.cmpi eq, %warp, $1 : index", {first, k.index(0)});
    k.line("scf.if $0 {", {first});
    k.open();
  }
  for (int64_t e = 0; e < perLane; ++e) {
    std::string o = k.binary("arith.divf", numerator[e], denominator[e], "f32");
    std::string at = k.binary("arith.addi", outBase, element[e], "index");
    if (!valid[e].empty()) {
      k.line("scf.if $0 {", {valid[e]});
      k.open();
    }
    k.line("memref.store $0, %out[$1] : $2", {o, at, oType});
    if (!valid[e].empty()) k.close();
  }
  if (a.warps > 1) k.close();
  auto pair = [](const std::array<int64_t, 2> &s) { return llvm::json::Array{s[0], s[1]}; };
  llvm::json::Object op{
      {"family", "attention"},   {"tokens", a.tokens}, {"heads", a.heads}, {"kv_heads", a.kvHeads},
      {"head_size", a.headSize}, {"keys", a.keys},     {"scale", a.scale}, {"offset_from_memory", a.offsetFromMemory},
      {"q", pair(a.q)},          {"k", pair(a.k)},     {"v", pair(a.v)},   {"out", pair(a.out)},
      {"warps", a.warps}};
  return {k.function(signature, workgroup, ""), {a.tokens, a.heads, 1}, {kWarp * a.warps, 1, 1}, std::move(op)};
}

KernelSource rope(const Rope &r) {
  KernelText k;
  int64_t half = r.headSize / 2;
  std::string inType = f32Memref((r.tokens - 1) * r.input[0] + (r.heads - 1) * r.input[1] + r.headSize);
  std::string outType = f32Memref(r.heads * r.tokens * r.headSize);
  std::string signature = "%in: " + inType + ", %positions: " + i64Memref(r.tokens) + ", %out: " + outType;
  std::string tableType = "memref<" + str(half) + "xf64>";
  std::string table = "  memref.global \"private\" constant @KERNEL_theta : " + tableType + " = dense<[";
  for (int64_t i = 0; i < half; ++i) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17e", r.theta[i]);
    table += (i ? ", " : "") + std::string(text);
  }
  table += "]>\n";

  k.line("%t = gpu.block_id x");
  k.line("%h = gpu.block_id y");
  k.line("%j = gpu.thread_id x");
  std::string first = k.fresh("first"), pair = k.fresh("pair"), partner = k.fresh("partner");
  if (r.interleaved) {
    std::string odd = k.binary("arith.remui", "%j", k.index(2), "index");
    k.line("$0 = arith.cmpi eq, $1, $2 : index", {first, odd, k.index(0)});
    k.line("$0 = arith.divui %j, $1 : index", {pair, k.index(2)});
    k.line("$0 = arith.xori %j, $1 : index", {partner, k.index(1)});
  } else {
    k.line("$0 = arith.cmpi ult, %j, $1 : index", {first, k.index(half)});
    k.line("$0 = arith.remui %j, $1 : index", {pair, k.index(half)});
    std::string up = k.binary("arith.addi", "%j", k.index(half), "index");
    std::string down = k.binary("arith.subi", "%j", k.index(half), "index");
    k.line("$0 = arith.select $1, $2, $3 : index", {partner, first, up, down});
  }
  std::string base = k.madd("%t", r.input[0], k.binary("arith.muli", "%h", k.index(r.input[1]), "index"));
  std::string x = k.loadScalar("%in", inType, k.binary("arith.addi", base, "%j", "index"), ElementType::F32);
  std::string other = k.loadScalar("%in", inType, k.binary("arith.addi", base, partner, "index"), ElementType::F32);
  std::string raw = k.fresh("pos"), position = k.fresh("posf"), thetas = k.fresh("thetas"), theta = k.fresh("theta");
  k.line("$0 = memref.load %positions[%t] : $1", {raw, i64Memref(r.tokens)});
  k.line("$0 = arith.sitofp $1 : i64 to f64", {position, raw});
  k.line("$0 = memref.get_global @KERNEL_theta : $1", {thetas, tableType});
  k.line("$0 = memref.load $1[$2] : $3", {theta, thetas, pair, tableType});
  std::string angle = k.binary("arith.mulf", position, theta, "f64");
  std::string cos64 = k.fresh("cos"), sin64 = k.fresh("sin"), cos = k.fresh("c"), sin = k.fresh("s");
  k.line("$0 = math.cos $1 : f64", {cos64, angle});
  k.line("$0 = math.sin $1 : f64", {sin64, angle});
  k.line("$0 = arith.truncf $1 : f64 to f32", {cos, cos64});
  k.line("$0 = arith.truncf $1 : f64 to f32", {sin, sin64});
  std::string rotated = k.binary("arith.mulf", other, sin, "f32");
  std::string negated = k.fresh("neg");
  k.line("$0 = arith.negf $1 : f32", {negated, rotated});
  std::string signedRotated = k.fresh("rot");
  k.line("$0 = arith.select $1, $2, $3 : f32", {signedRotated, first, negated, rotated});
  std::string y = k.binary("arith.addf", k.binary("arith.mulf", x, cos, "f32"), signedRotated, "f32");
  std::string at = k.madd(k.madd("%h", r.tokens, "%t"), r.headSize, "%j");
  k.line("memref.store $0, %out[$1] : $2", {y, at, outType});
  llvm::json::Array frequencies;
  for (double t : r.theta) frequencies.push_back(t);
  llvm::json::Object op{{"family", "rope"},
                        {"heads", r.heads},
                        {"tokens", r.tokens},
                        {"head_size", r.headSize},
                        {"interleaved", r.interleaved},
                        {"input", llvm::json::Array{r.input[0], r.input[1]}},
                        {"theta", std::move(frequencies)}};
  return {table + k.function(signature, "", ""), {r.tokens, r.heads, 1}, {r.headSize, 1, 1}, std::move(op)};
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

KernelSource cacheWrite(const CacheWrite &c) {
  KernelText k;
  std::string uType = f32Memref((c.tokens - 1) * c.update[0] + (c.kvHeads - 1) * c.update[1] + c.headSize);
  std::string cacheType = f32Memref(c.kvHeads * c.cacheLength * c.headSize);
  std::string signature = "%update: " + uType + ", %offset: " + i64Memref(1) + ", %cache: " + cacheType;
  k.line("%t = gpu.block_id x");
  k.line("%h = gpu.block_id y");
  k.line("%e = gpu.thread_id x");
  std::string raw = k.fresh("raw"), offset = k.fresh("offset");
  k.line("$0 = memref.load %offset[$1] : $2", {raw, k.index(0), i64Memref(1)});
  k.line("$0 = arith.index_cast $1 : i64 to index", {offset, raw});
  std::string position = k.binary("arith.addi", offset, "%t", "index");
  std::string fits = k.fresh("fits");
  k.line("$0 = arith.cmpi ult, $1, $2 : index", {fits, position, k.index(c.cacheLength)});
  k.line("scf.if $0 {", {fits});
  k.open();
  std::string from = k.madd("%t", c.update[0], k.madd("%h", c.update[1], "%e"));
  std::string v = k.loadScalar("%update", uType, from, ElementType::F32);
  std::string row = k.madd("%h", c.cacheLength, position);
  std::string to = k.madd(row, c.headSize, "%e");
  k.line("memref.store $0, %cache[$1] : $2", {v, to, cacheType});
  k.close();
  llvm::json::Object op{{"family", "cache_write"},       {"tokens", c.tokens},
                        {"kv_heads", c.kvHeads},         {"head_size", c.headSize},
                        {"cache_length", c.cacheLength}, {"update", llvm::json::Array{c.update[0], c.update[1]}}};
  return {k.function(signature, "", ""), {c.tokens, c.kvHeads, 1}, {c.headSize, 1, 1}, std::move(op)};
}

} // namespace gpt::gpu
