// The matmul kernel families: a warp per output column for a few rows (matvec), 64x64 tiles
// through shared memory for more (tiledMatmul), both with the bias, GELU and residual epilogue
// (see GpuKernels.h; the text helpers are GpuKernelText.h's).
#include "cc/codegen/gpu/GpuKernelText.h"

#include <stdexcept>

namespace gpt::gpu {
using namespace text;
namespace {

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

/// The tiled matmul's kernel, written in parts that share its names: where this thread works
/// (placeThread), the loop over k (tiles staged through shared memory, the next one fetched
/// ahead), and the epilogue's stores.
struct TiledMatmulText {
  static constexpr int64_t tile = 64, tileK = 16, threads = 256, micro = 4;
  static constexpr const char *vectors = "vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>";

  explicit TiledMatmulText(const Matmul &m)
      : m(m), aType(f32Memref(m.rows * m.aStride)), bType(memrefType(m.validColumns * m.depth, m.element)),
        outType(f32Memref(m.rows * m.columns)),
        smem("memref<" + str(tileK) + "x" + str(tile) + "xf32, #gpu.address_space<workgroup>>") {}

  void placeThread() {
    k.line("%bx = gpu.block_id x");
    k.line("%by = gpu.block_id y");
    k.line("%tid = gpu.thread_id x");
    col0 = k.binary("arith.muli", "%bx", k.index(tile), "index");
    row0 = k.binary("arith.muli", "%by", k.index(tile), "index");
    // This thread's 4x4 outputs: rows row0 + 4 tr .. +3, columns col0 + 4 tc .. +3.
    std::string tr = k.binary("arith.divui", "%tid", k.index(tile / micro), "index");
    std::string tc = k.binary("arith.remui", "%tid", k.index(tile / micro), "index");
    tr4 = k.binary("arith.muli", tr, k.index(micro), "index");
    tc4 = k.binary("arith.muli", tc, k.index(micro), "index");
    // What it loads: row `lr` of each tile, 4 consecutive k at `lk`.
    lr = k.binary("arith.divui", "%tid", k.index(tileK / 4), "index");
    lk = k.binary("arith.muli", k.binary("arith.remui", "%tid", k.index(tileK / 4), "index"), k.index(4), "index");
    std::string aRow = k.binary("arith.addi", row0, lr, "index");
    std::string bRow = k.binary("arith.addi", col0, lr, "index");
    aOk = k.fresh("aok"), bOk = k.fresh("bok");
    k.line("$0 = arith.cmpi ult, $1, $2 : index", {aOk, aRow, k.index(m.rows)});
    k.line("$0 = arith.cmpi ult, $1, $2 : index", {bOk, bRow, k.index(m.validColumns)});
    aBase = k.binary("arith.muli", aRow, k.index(m.aStride), "index");
    bBase = k.binary("arith.muli", bRow, k.index(m.depth), "index");
    zeroVector = k.fresh("zv");
    k.line("$0 = vector.splat $1 : vector<4xf32>", {zeroVector, k.f32(0.0f)});
  }

  /// The tiles of k0 .. k0 + 15: 4 consecutive k at `lk` of row `lr`, read from global memory one
  /// iteration ahead (register prefetch), so their latency overlaps the previous tile's FMAs.
  std::string fetch(const std::string &ok, const std::string &memref, const std::string &type, const std::string &base,
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
  }

  /// Stages the tiles transposed (k-major) so the inner loop reads 4 rows or 4 columns at once.
  void stage(const std::string &v, const std::string &shared) {
    for (int i = 0; i < 4; ++i) {
      std::string e = k.fresh("e");
      k.line("$0 = vector.extract $1[$2] : f32 from vector<4xf32>", {e, v, str(i)});
      std::string kk = k.binary("arith.addi", lk, k.index(i), "index");
      k.line("memref.store $0, $1[$2, $3] : $4", {e, shared, kk, lr, smem});
    }
  }

  /// The loop over k; its result holds the thread's 4 rows of 4 sums.
  std::string loopOverK() {
    std::string firstA = fetch(aOk, "%a", aType, aBase, ElementType::F32, k.index(0));
    std::string firstB = fetch(bOk, "%b", bType, bBase, m.element, k.index(0));
    std::string accs = k.fresh("acc");
    k.line("$0:6 = scf.for %k0 = $1 to $2 step $3 iter_args(%c0a = $4, %c1a = $4, %c2a = $4, %c3a = $4, %pa = $5, "
           "%pb = $6) -> ($7, vector<4xf32>, vector<4xf32>) {",
           {accs, k.index(0), k.index(m.depth), k.index(tileK), zeroVector, firstA, firstB, vectors});
    k.open();
    k.line("gpu.barrier");
    stage("%pa", "%as");
    stage("%pb", "%bs");
    std::string next = k.binary("arith.addi", "%k0", k.index(tileK), "index");
    std::string more = k.fresh("more");
    k.line("$0 = arith.cmpi ult, $1, $2 : index", {more, next, k.index(m.depth)});
    std::string nextA = fetch(k.binary("arith.andi", more, aOk, "i1"), "%a", aType, aBase, ElementType::F32, next);
    std::string nextB = fetch(k.binary("arith.andi", more, bOk, "i1"), "%b", bType, bBase, m.element, next);
    k.line("gpu.barrier");
    std::string inner = multiplyStagedTiles();
    k.line("scf.yield $0#0, $0#1, $0#2, $0#3, $1, $2 : $3, vector<4xf32>, vector<4xf32>",
           {inner, nextA, nextB, vectors});
    k.close();
    return accs;
  }

  /// The 4x4 outer products over the staged tiles' 16 k.
  std::string multiplyStagedTiles() {
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
    return inner;
  }

  /// The thread's 4x4 outputs through the epilogue, those inside the output stored.
  void store(const std::string &accs) {
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
  }

  const Matmul &m;
  KernelText k;
  std::string aType, bType, outType, smem;
  /// The block's first output row and column; this thread's rows and columns within it; the row
  /// and k it loads; whether its rows of a and b exist, and where they start.
  std::string col0, row0, tr4, tc4, lr, lk, aOk, bOk, aBase, bBase, zeroVector;
};

/// How wide and how deep each lane of a matvec reads: bf16 weights 8 values (16 bytes) a load
/// where the depth allows, f32 4; and the loads issued before the first FMA waits on them.
struct MatvecReads {
  int64_t lanes, unroll;
};

MatvecReads matvecReads(const Matmul &m) {
  int64_t lanes = m.element == ElementType::BF16 && m.depth % 8 == 0 ? 8 : 4;
  // A warp streams its column at the bandwidth its loads in flight allow (Little's law): up to
  // four loads per lane per trip for one or two rows, fewer where every row holds registers; and
  // a count that divides the lane's whole trips, so that no single loads follow (GPT-2's depth
  // 768 is 3 bf16 trips, or 6 f32 trips, per lane).
  int64_t most = m.rows <= 2 ? 4 : m.rows <= 4 ? 2 : 1, trips = m.depth / (lanes * kWarp), unroll = 1;
  for (int64_t u = most; u > 1 && unroll == 1; --u)
    if (trips % u == 0) unroll = u;
  if (unroll == 1 && trips >= most) unroll = most; // no divisor: unrolled trips, then a tail
  return {lanes, unroll};
}

/// The matvec's loop over k: trips of `unroll` loads per lane from `lower` to `upper` (step
/// `unroll` lanes-wide warp strides), every load issued before the FMAs that use them, the FMAs
/// in k order (the sums are those of a plain loop, bit for bit). Returns the accumulators.
std::string matvecLoop(KernelText &k, const Matmul &m, const MatvecReads &reads, const std::string &bBase,
                       const std::string &lower, int64_t upper, int64_t unroll, const std::string &inits,
                       const std::string &aType, const std::string &bType) {
  std::string vector = "vector<" + str(reads.lanes) + "xf32>", vectors;
  for (int64_t r = 0; r < m.rows; ++r) vectors += (r ? ", " : "") + vector;
  int64_t warpStride = reads.lanes * kWarp;
  std::string accs = k.fresh("acc");
  k.line("$0:$1 = scf.for %k = $2 to $3 step $4 iter_args($5) -> ($6) {",
         {accs, str(m.rows), lower, k.index(upper), k.index(warpStride * unroll), inits, vectors});
  k.open();
  std::vector<std::string> bs;
  std::vector<std::vector<std::string>> as(unroll);
  for (int64_t u = 0; u < unroll; ++u) {
    std::string at = u ? k.binary("arith.addi", "%k", k.index(u * warpStride), "index") : std::string("%k");
    bs.push_back(k.loadVector("%b", bType, k.binary("arith.addi", bBase, at, "index"), m.element, reads.lanes));
    for (int64_t r = 0; r < m.rows; ++r)
      as[u].push_back(k.loadVector("%a", aType, k.madd(k.index(r), m.aStride, at), ElementType::F32, reads.lanes));
  }
  std::vector<std::string> running;
  for (int64_t r = 0; r < m.rows; ++r) running.push_back("%a" + str(r));
  for (int64_t u = 0; u < unroll; ++u) {
    for (int64_t r = 0; r < m.rows; ++r) {
      std::string next = k.fresh("fma");
      k.line("$0 = vector.fma $1, $2, $3 : $4", {next, as[u][r], bs[u], running[r], vector});
      running[r] = next;
    }
  }
  std::string yields;
  for (int64_t r = 0; r < m.rows; ++r) yields += (r ? ", " : "") + running[r];
  k.line("scf.yield $0 : $1", {yields, vectors});
  k.close();
  return accs;
}

} // namespace

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
  MatvecReads reads = matvecReads(m);
  std::string vector = "vector<" + str(reads.lanes) + "xf32>";

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
  std::string f32s, zeros;
  for (int64_t r = 0; r < m.rows; ++r) {
    f32s += (r ? ", " : "") + std::string("f32");
    zeros += (r ? ", " : "") + k.f32(0.0f);
  }
  std::string zeroVector = k.fresh("zv");
  k.line("$0 = vector.splat $1 : $2", {zeroVector, k.f32(0.0f), vector});
  std::string sums = k.fresh("sums");
  k.line("$0:$1 = scf.if $2 -> ($3) {", {sums, str(m.rows), valid, f32s});
  k.open();
  std::string bBase = k.binary("arith.muli", n, k.index(m.depth), "index");
  std::string start = k.binary("arith.muli", "%lane", k.index(reads.lanes), "index");
  // The unrolled trips over the largest multiple of their stride, then single loads to the end.
  int64_t warpStride = reads.lanes * kWarp, mainEnd = m.depth / (warpStride * reads.unroll) * warpStride * reads.unroll;
  std::string inits;
  for (int64_t r = 0; r < m.rows; ++r) inits += (r ? ", " : "") + std::string("%a") + str(r) + " = " + zeroVector;
  std::string accs;
  if (mainEnd > 0) {
    accs = matvecLoop(k, m, reads, bBase, start, mainEnd, reads.unroll, inits, aType, bType);
    inits.clear();
    for (int64_t r = 0; r < m.rows; ++r)
      inits += std::string(r ? ", " : "") + "%a" + str(r) + " = " + accs + "#" + str(r);
  }
  if (mainEnd < m.depth) {
    std::string tailStart = mainEnd ? k.binary("arith.addi", start, k.index(mainEnd), "index") : start;
    accs = matvecLoop(k, m, reads, bBase, tailStart, m.depth, 1, inits, aType, bType);
  }
  std::string results;
  for (int64_t r = 0; r < m.rows; ++r) {
    std::string total = k.f32(0.0f);
    for (int64_t lane = 0; lane < reads.lanes; ++lane) {
      std::string e = k.fresh("e");
      k.line("$0 = vector.extract $1#$2[$3] : f32 from $4", {e, accs, str(r), str(lane), vector});
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
  using Text = TiledMatmulText;
  if (m.depth % Text::tileK) throw std::invalid_argument("tiledMatmul: the depth must be a multiple of 16");
  if (m.aStride % 4) throw std::invalid_argument("tiledMatmul: the row stride of a must be a multiple of 4");
  Text t(m);
  std::string signature =
      "%a: " + t.aType + ", %b: " + t.bType + epilogueSignature(m.epilogue, m.columns, m.rows) + ", %out: " + t.outType;
  std::string prologue = assumeAligned({{"%a", t.aType}, {"%b", t.bType}});
  t.placeThread();
  std::string accs = t.loopOverK();
  t.store(accs);
  int64_t blocksX = (m.columns + Text::tile - 1) / Text::tile, blocksY = (m.rows + Text::tile - 1) / Text::tile;
  return {t.k.function(signature, "%as: " + t.smem + ", %bs: " + t.smem, prologue),
          {blocksX, blocksY, 1},
          {Text::threads, 1, 1},
          describe(m)};
}

} // namespace gpt::gpu
