// What the GPU kernel families (GpuKernels*.cpp) share: KernelText, which assembles a kernel's
// `gpu.func` text line by line with fresh SSA names and its constants declared once at its top,
// and the memref types of bare device pointers.
//
// The text is assembled from small pieces rather than built op by op: a kernel reads top to
// bottom like the CUDA it replaces, and `model.ir("gpu")` shows exactly this source.
#ifndef GPT_CC_CODEGEN_GPU_GPUKERNELTEXT_H
#define GPT_CC_CODEGEN_GPU_GPUKERNELTEXT_H

#include "cc/codegen/gpu/GpuKernels.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gpt::gpu::text {

constexpr int64_t kWarp = 32;

/// `pattern` with $0..$9 replaced by `args`.
inline std::string subst(const std::string &pattern, const std::vector<std::string> &args) {
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

inline std::string str(int64_t v) { return std::to_string(v); }

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
  /// ptr[index .. index+lanes-1] as vector<lanesxf32>, widening bf16 bits.
  std::string loadVector(const std::string &memref, const std::string &type, const std::string &index,
                         ElementType element, int64_t lanes) {
    std::string v = fresh("v"), f32s = "vector<" + str(lanes) + "xf32>";
    if (element == ElementType::F32) {
      line("$0 = vector.load $1[$2] : $3, $4", {v, memref, index, type, f32s});
      return v;
    }
    std::string i16s = "vector<" + str(lanes) + "xi16>", i32s = "vector<" + str(lanes) + "xi32>";
    std::string raw = fresh("raw"), wide = fresh("wide"), bits = fresh("bits");
    line("$0 = vector.load $1[$2] : $3, $4", {raw, memref, index, type, i16s});
    line("$0 = arith.extui $1 : $2 to $3", {wide, raw, i16s, i32s});
    line("$0 = arith.shli $1, $2 : $3", {bits, wide, vectorI32(16, lanes), i32s});
    line("$0 = arith.bitcast $1 : $2 to $3", {v, bits, i32s, f32s});
    return v;
  }
  std::string loadVector4(const std::string &memref, const std::string &type, const std::string &index,
                          ElementType element) {
    return loadVector(memref, type, index, element, 4);
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

inline std::string memrefType(int64_t elements, ElementType element) {
  return "memref<" + str(std::max<int64_t>(elements, 1)) + (element == ElementType::F32 ? "xf32>" : "xi16>");
}
inline std::string f32Memref(int64_t elements) { return memrefType(elements, ElementType::F32); }
inline std::string i64Memref(int64_t elements) { return "memref<" + str(std::max<int64_t>(elements, 1)) + "xi64>"; }

/// `memref.assume_alignment` lines for pointers read with 16-byte vector loads: the runtime
/// aligns every buffer and offset it passes to 16 bytes (GpuPrograms checks the offsets).
inline std::string assumeAligned(const std::vector<std::pair<std::string, std::string>> &args) {
  std::string text;
  for (const auto &[name, type] : args) text += "    memref.assume_alignment " + name + ", 16 : " + type + "\n";
  return text;
}

} // namespace gpt::gpu::text

#endif // GPT_CC_CODEGEN_GPU_GPUKERNELTEXT_H
