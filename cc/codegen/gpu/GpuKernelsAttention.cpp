// The attention kernel families: causal attention with an online softmax, the rotary position
// embedding of its queries and keys, and the KV-cache write (see GpuKernels.h; the text helpers
// are GpuKernelText.h's).
#include "cc/codegen/gpu/GpuKernelText.h"

namespace gpt::gpu {
using namespace text;

namespace {

/// The attention kernel, written in parts that share its names: where this warp works and its
/// query (placeWarp), the online softmax over the keys (walkKeys), the merge of the warps' states
/// when several share a row (mergeWarps), and the stores.
struct AttentionText {
  explicit AttentionText(const Attention &a)
      : a(a), perLane((a.headSize + kWarp - 1) / kWarp), group(a.heads / a.kvHeads), ragged(a.headSize % kWarp != 0),
        qType(viewType(a.q, a.tokens, a.heads)), kType(viewType(a.k, a.keys, a.kvHeads)),
        vType(viewType(a.v, a.keys, a.kvHeads)), oType(viewType(a.out, a.tokens, a.heads)), element(perLane),
        valid(perLane), q(perLane) {}

  std::string viewType(const std::array<int64_t, 2> &s, int64_t tokens, int64_t heads) const {
    return f32Memref((tokens - 1) * s[0] + (heads - 1) * s[1] + a.headSize);
  }

  void placeWarp() {
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
    end = k.binary("arith.addi", k.binary("arith.addi", offset, "%i", "index"), k.index(1), "index");
    end = k.binary("arith.minui", end, k.index(a.keys), "index");
    qBase = k.madd("%i", a.q[0], k.binary("arith.muli", "%h", k.index(a.q[1]), "index"));
    kHead = k.binary("arith.muli", hk, k.index(a.k[1]), "index");
    vHead = k.binary("arith.muli", hk, k.index(a.v[1]), "index");
    for (int64_t e = 0; e < perLane; ++e) {
      std::string unclamped = k.binary("arith.addi", "%lane", k.index(e * kWarp), "index");
      element[e] = unclamped;
      if (ragged && (e + 1) * kWarp > a.headSize) {
        valid[e] = k.fresh("valid");
        k.line("$0 = arith.cmpi ult, $1, $2 : index", {valid[e], unclamped, k.index(a.headSize)});
        element[e] = k.binary("arith.minui", unclamped, k.index(a.headSize - 1), "index");
      }
    }
    for (int64_t e = 0; e < perLane; ++e)
      q[e] = k.binary("arith.mulf", load("%q", qType, qBase, e), k.f32(a.scale), "f32");
  }

  /// An element of `memref` at base + element[e], 0 on an idle lane.
  std::string load(const std::string &memref, const std::string &type, const std::string &base, int64_t e) {
    std::string v = k.loadScalar(memref, type, k.binary("arith.addi", base, element[e], "index"), ElementType::F32);
    if (valid[e].empty()) return v;
    std::string masked = k.fresh("masked");
    k.line("$0 = arith.select $1, $2, $3 : f32", {masked, valid[e], v, k.f32(0.0f)});
    return masked;
  }

  /// The online softmax over this warp's keys: the loop's results are (max, sum, accumulators).
  std::string walkKeys() {
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
    return state;
  }

  /// Each warp's (max, sum, accumulators) to shared memory; warp 0 rescales them to the common
  /// max and adds them up: the online softmax's merge. Opens the `scf.if` of warp 0, and returns
  /// the kernel's workgroup memory.
  std::string mergeWarps(const std::string &state, std::vector<std::string> &numerator,
                         std::vector<std::string> &denominator) {
    std::string wide = str(perLane * kWarp);
    std::string stats = "memref<" + str(a.warps) + "xf32, #gpu.address_space<workgroup>>";
    std::string accumulators = "memref<" + str(a.warps) + "x" + wide + "xf32, #gpu.address_space<workgroup>>";
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
    return "%maxes: " + stats + ", %sums: " + stats + ", %accs: " + accumulators;
  }

  /// out = numerator / denominator, on the lanes that hold an element.
  void store(const std::string &outBase, const std::vector<std::string> &numerator,
             const std::vector<std::string> &denominator) {
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
  }

  llvm::json::Object describe() const {
    auto pair = [](const std::array<int64_t, 2> &s) { return llvm::json::Array{s[0], s[1]}; };
    return llvm::json::Object{
        {"family", "attention"},   {"tokens", a.tokens}, {"heads", a.heads}, {"kv_heads", a.kvHeads},
        {"head_size", a.headSize}, {"keys", a.keys},     {"scale", a.scale}, {"offset_from_memory", a.offsetFromMemory},
        {"q", pair(a.q)},          {"k", pair(a.k)},     {"v", pair(a.v)},   {"out", pair(a.out)},
        {"warps", a.warps}};
  }

  const Attention &a;
  KernelText k;
  // Lane l holds elements l, l + 32, ...; a head size that is no multiple of 32 leaves the last
  // chunk's high lanes idle: they read a clamped, in-bounds element and use 0 instead.
  int64_t perLane, group;
  bool ragged;
  std::string qType, kType, vType, oType;
  std::vector<std::string> element, valid, q; ///< per lane chunk: its element, whether it exists, its query
  std::string end, qBase, kHead, vHead;       ///< the key walk's end, where the query and the head's keys start
};

} // namespace

KernelSource attention(const Attention &a) {
  AttentionText t(a);
  std::string signature = "%q: " + t.qType + ", %k: " + t.kType + ", %v: " + t.vType;
  if (a.offsetFromMemory) signature += ", %offset: " + i64Memref(1);
  signature += ", %out: " + t.oType;
  t.placeWarp();
  std::string state = t.walkKeys();
  KernelText &k = t.k;
  std::string outBase = k.madd("%i", a.out[0], k.binary("arith.muli", "%h", k.index(a.out[1]), "index"));
  std::vector<std::string> numerator(t.perLane), denominator(t.perLane);
  std::string workgroup;
  if (a.warps == 1) {
    for (int64_t e = 0; e < t.perLane; ++e) {
      numerator[e] = state + "#" + str(2 + e);
      denominator[e] = state + "#1";
    }
  } else {
    workgroup = t.mergeWarps(state, numerator, denominator);
  }
  t.store(outBase, numerator, denominator);
  if (a.warps > 1) k.close();
  return {k.function(signature, workgroup, ""), {a.tokens, a.heads, 1}, {kWarp * a.warps, 1, 1}, t.describe()};
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
