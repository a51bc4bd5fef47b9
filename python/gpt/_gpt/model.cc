// Bindings of CompiledModel: numpy arrays in and out, no copies of weights.
#include "python/gpt/_gpt/bindings.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/WeightFormats.h"
#include "cc/runtime/CompiledModel.h"
#include "cc/runtime/ReleaseMemory.h"

#include "llvm/ADT/STLExtras.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <stdexcept>

namespace py = pybind11;

namespace gpt::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style>;

/// Checks the weights against the parameters a user supplies and returns their data pointers.
std::vector<const float *> weightPointers(const CompiledModel &model, const py::list &weights,
                                          const std::map<std::string, CompiledModel::QuantizedWeight> &quantized) {
  const std::vector<ParameterSpec> &specs = model.suppliedParameters();
  if (weights.size() != specs.size())
    throw std::invalid_argument("expected " + std::to_string(specs.size()) + " weights, got " +
                                std::to_string(weights.size()));
  std::vector<const float *> pointers;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (weights[i].is_none() && quantized.count(specs[i].name)) { // given quantized only
      pointers.push_back(nullptr);
      continue;
    }
    // No implicit conversion: a wrong dtype or a strided view would silently cost a copy per call.
    py::array array = weights[i].cast<py::array>();
    if (!py::isinstance<FloatArray>(array) || !(array.flags() & py::array::c_style))
      throw std::invalid_argument(specs[i].name + " must be a C-contiguous float32 array");
    std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
    if (shape != specs[i].shape) throw std::invalid_argument(specs[i].name + " has the wrong shape");
    pointers.push_back(static_cast<const float *>(array.data()));
  }
  return pointers;
}

py::array wrapLogits(const Logits &logits);

/// How set_weights is given a weight's blocks: the format it is stored in, and each part's GGUF type
/// where that is not the format (converted as it is repacked; empty otherwise).
struct GivenFormat {
  const WeightFormatTraits *stored;
  std::vector<std::string> types;
};

/// `format` as set_weights takes it for a weight of `partCount` parts: a block-quantized weight
/// format ("q4_k"); a GGUF block type that only one of them converts (none now: every type set_weights
/// takes is a stored format of its own), for every part;
/// or "FORMAT:TYPE,TYPE,..." naming each part's type, in order. std::invalid_argument naming the
/// weight and the choices (from the format tables) otherwise.
GivenFormat parseGivenFormat(const std::string &name, const std::string &format, size_t partCount) {
  std::string stored = format;
  std::vector<std::string> types;
  if (auto colon = format.find(':'); colon != std::string::npos) {
    stored = format.substr(0, colon);
    for (size_t at = colon + 1;;) {
      const size_t comma = format.find(',', at);
      types.push_back(format.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (types.size() != partCount)
      throw std::invalid_argument(name + ": format '" + format + "' names " + std::to_string(types.size()) +
                                  " part types for " + std::to_string(partCount) + " parts");
  }
  std::vector<std::string> formats, otherTypes;
  for (const WeightFormatTraits &row : weightFormats())
    if (row.blockQuantized()) formats.push_back(row.name);
  for (const kernels::GgufBlockType &type : kernels::ggufBlockTypes()) {
    if (llvm::is_contained(formats, type.name)) continue;
    std::vector<std::string> into;
    for (const std::string &target : formats)
      if (llvm::is_contained(kernels::convertedTypes(target), type.name)) into.push_back(target);
    if (into.size() == 1) {
      otherTypes.push_back(type.name);
      if (format == type.name) stored = into.front();
    }
  }
  const WeightFormatTraits *row = findWeightFormat(stored);
  if (!row || !row->blockQuantized())
    throw std::invalid_argument(name + ": quantized weights are " + blockFormatNames() +
                                (otherTypes.empty() ? "" : ", a GGUF block type (" + alternatives(otherTypes) + ")") +
                                " or FORMAT:TYPE,..., got '" + format + "'");
  if (types.empty()) types.assign(partCount, format);
  for (std::string &type : types)
    if (type == stored) type.clear();
  return {row, types};
}

py::list namesAndShapes(const std::vector<ParameterSpec> &specs) {
  py::list list;
  for (const ParameterSpec &spec : specs) list.append(py::make_tuple(spec.name, py::tuple(py::cast(spec.shape))));
  return list;
}

py::array forward(CompiledModel &model, py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids) {
  if (ids.ndim() != 1) throw std::invalid_argument("ids must be a 1-D sequence of token ids");
  Logits logits;
  {
    py::gil_scoped_release release;
    logits = model.forward(ids.data(), ids.shape(0));
  }
  return wrapLogits(logits);
}

py::array wrapLogits(const Logits &logits) {
  // The runtime allocated the buffer for this call: numpy frees it when the array dies.
  py::capsule owner(logits.data, [](void *p) { std::free(p); });
  return py::array_t<float>({logits.rows, logits.cols}, {logits.cols * sizeof(float), sizeof(float)}, logits.data,
                            owner);
}

/// The numpy dtype of a KV cache of `format`'s elements: bf16 is held as its 16 bits, q8_0 as the
/// bytes of its rows' codes and scales (int8: a row's first head_size bytes are its codes).
py::dtype kvCacheDtype(KvCacheFormat format) {
  switch (format) {
  case KvCacheFormat::Q8_0:
    return py::dtype::of<int8_t>();
  case KvCacheFormat::BF16:
    return py::dtype::of<uint16_t>();
  case KvCacheFormat::F16:
    return py::dtype("float16");
  case KvCacheFormat::F32:
    break;
  }
  return py::dtype::of<float>();
}

/// The data of a model's per-layer cache (or pool) buffers, each of `shape` and of the dtype of
/// its KV cache format (kvCacheDtype): compiled code reads and writes them as that type.
std::vector<void *> bufferPointers(const CompiledModel &model, const py::list &caches,
                                   const std::vector<int64_t> &shape) {
  const KvCacheFormat format = model.options().kvCache;
  const py::dtype dtype = kvCacheDtype(format);
  std::vector<void *> pointers;
  for (const py::handle &item : caches) {
    py::array array = item.cast<py::array>();
    if (!array.dtype().is(dtype) || !(array.flags() & py::array::c_style) || !array.writeable())
      throw std::invalid_argument(std::string("KV cache buffers of a kv_cache='") + kvCacheFormatName(format) +
                                  "' model must be writable C-contiguous " + py::str(dtype).cast<std::string>() +
                                  " arrays, got " + py::str(array.dtype()).cast<std::string>());
    if (std::vector<int64_t>(array.shape(), array.shape() + array.ndim()) != shape) {
      std::string expected;
      for (int64_t dim : shape) expected += (expected.empty() ? "" : ", ") + std::to_string(dim);
      throw std::invalid_argument("KV cache buffer has the wrong shape: a kv_cache='" +
                                  std::string(kvCacheFormatName(format)) + "' model takes [" + expected + "]");
    }
    pointers.push_back(array.mutable_data());
  }
  return pointers;
}

std::vector<void *> cachePointers(const CompiledModel &model, const py::list &caches, int64_t cacheLen) {
  const GPTConfig &c = model.config();
  return bufferPointers(model, caches, {c.kvHeads(), cacheLen, kvCacheRowWidth(model.options().kvCache, c.headSize())});
}

py::array step(CompiledModel &model, py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids,
               int64_t offset, int64_t cacheLen, const py::list &keys, const py::list &values, bool everyRow) {
  if (ids.ndim() != 1) throw std::invalid_argument("ids must be a 1-D sequence of token ids");
  std::vector<void *> keyPtrs = cachePointers(model, keys, cacheLen),
                      valuePtrs = cachePointers(model, values, cacheLen);
  Logits logits;
  {
    py::gil_scoped_release release;
    logits = model.step(ids.data(), ids.shape(0), offset, cacheLen, keyPtrs, valuePtrs, everyRow);
  }
  return wrapLogits(logits);
}

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

/// The batched step: every array already padded to its bucket and checked by the Python layer
/// (gpt.GPT.step_batch); here only the shapes are checked against each other.
py::array batchStep(CompiledModel &model, IdArray ids, IdArray positions, IdArray sequences, IdArray slots,
                    IdArray tables, IdArray last, int64_t blockSize, const py::list &keys, const py::list &values) {
  if (ids.ndim() != 1 || positions.ndim() != 1 || sequences.ndim() != 1 || slots.ndim() != 1 || tables.ndim() != 2 ||
      last.ndim() != 1)
    throw std::invalid_argument("batch_step: ids, positions, sequences, slots and last are 1-D, tables 2-D");
  const int64_t tokens = ids.shape(0);
  if (positions.shape(0) != tokens || sequences.shape(0) != tokens || slots.shape(0) != tokens)
    throw std::invalid_argument("batch_step: ids, positions, sequences and slots must have the same length");
  if (tables.shape(0) != last.shape(0))
    throw std::invalid_argument("batch_step: tables must have one row per entry of last");
  if (keys.empty()) throw std::invalid_argument("batch_step: no key pools");
  const GPTConfig &c = model.config();
  const int64_t poolBlocks = keys[0].cast<py::array>().shape(0);
  std::vector<int64_t> poolShape = {poolBlocks, c.kvHeads(), blockSize,
                                    kvCacheRowWidth(model.options().kvCache, c.headSize())};
  std::vector<void *> keyPtrs = bufferPointers(model, keys, poolShape),
                      valuePtrs = bufferPointers(model, values, poolShape);
  BatchShape shape{tokens, tables.shape(0), tables.shape(1), poolBlocks, blockSize};
  CompiledModel::BatchStepCall call{shape,         ids.data(),  positions.data(), sequences.data(), slots.data(),
                                    tables.data(), last.data(), keyPtrs,          valuePtrs};
  Logits logits;
  {
    py::gil_scoped_release release;
    logits = model.batchStep(call);
  }
  return wrapLogits(logits);
}

} // namespace

CompileOptions compileOptions(const std::string &pipeline, int threads, const std::string &cacheDir,
                              uint64_t cacheMaxBytes, const std::string &targetCpu) {
  CompileOptions options;
  std::optional<PipelineLevel> level = parsePipelineLevel(pipeline);
  if (!level) throw std::invalid_argument("unknown pipeline '" + pipeline + "'");
  options.level = *level;
  options.threads = threads;
  options.cacheDir = cacheDir;
  options.cacheMaxBytes = cacheMaxBytes;
  options.targetCpu = targetCpu;
  return options;
}

/// A gpt.GPTConfig (python/gpt/config.py) read into the compiler's config: the one way a model's
/// configuration crosses into C++.
GPTConfig gptConfig(const py::handle &config) {
  // gpt.GPTConfig validated itself (and resolved its defaults) in __post_init__; GPTConfig::
  // validate() below checks the same rules again for callers that build a config in C++.
  auto get = [&](const char *name) { return config.attr(name); };
  GPTConfig c;
  c.nLayer = get("n_layer").cast<int64_t>();
  c.nHead = get("n_head").cast<int64_t>();
  c.nEmbd = get("n_embd").cast<int64_t>();
  c.vocabSize = get("vocab_size").cast<int64_t>();
  c.blockSize = get("block_size").cast<int64_t>();
  c.rope = get("pos_embedding").cast<std::string>() == "rope";
  c.layerNormEps = get("layer_norm_eps").cast<float>();
  py::object window = get("attention_window");
  c.attentionWindow = window.is_none() ? 0 : window.cast<int64_t>();
  auto mask = get("compiler_mask")().cast<py::tuple>();
  std::string maskBytes = mask[0].cast<py::bytes>();
  c.attentionMask.assign(maskBytes.begin(), maskBytes.end());
  c.attentionMaskExpression = mask[1].cast<std::string>();
  c.attentionLooksAhead = mask[2].cast<bool>();
  // The compiler's parameter names, as the architecture's spec gives them (architectures.CompilerNames).
  py::object names = get("spec").attr("compiler");
  auto name = [&](const char *part) { return names.attr(part).cast<std::string>(); };
  c.names = {name("layer"),
             name("attn_norm"),
             name("qkv"),
             name("attn_out"),
             name("mlp_norm"),
             name("mlp_up"),
             name("mlp_down"),
             name("token_embedding"),
             name("position_embedding"),
             name("final_norm"),
             name("head"),
             name("q_norm"),
             name("k_norm"),
             name("post_attn_norm"),
             name("post_mlp_norm")};
  // v's own matmul, where the config asks for one (GPTConfig.separate_v_proj).
  if (get("separate_v_proj").cast<bool>()) c.names.vProj = name("v_proj");
  c.norm = get("norm").cast<std::string>() == "rms" ? NormKind::Rms : NormKind::Layer;
  const std::string mlp = get("mlp").cast<std::string>();
  c.mlp = mlp == "swiglu" ? MlpKind::SwiGlu : mlp == "geglu" ? MlpKind::GeGlu : MlpKind::Gelu;
  c.nKvHead = get("n_kv_head").cast<int64_t>();
  c.nFf = get("n_ff").cast<int64_t>();
  c.bias = get("bias").cast<bool>();
  c.qkvBias = get("qkv_bias").cast<bool>();
  c.tiedHead = get("tied_head").cast<bool>();
  c.ropeBase = get("rope_base").cast<float>();
  c.ropeLayout = get("rope_layout").cast<std::string>() == "interleaved" ? RopeLayout::Interleaved : RopeLayout::Half;
  if (py::object scaling = get("rope_scaling"); !scaling.is_none())
    c.ropeScaling = {scaling.attr("factor").cast<float>(), scaling.attr("low_freq_factor").cast<float>(),
                     scaling.attr("high_freq_factor").cast<float>(),
                     scaling.attr("original_max_position_embeddings").cast<int64_t>()};
  if (py::object headDim = get("head_dim"); !headDim.is_none()) c.headDim = headDim.cast<int64_t>();
  c.embeddingScale = get("spec").attr("embedding_scale").cast<bool>();
  if (py::object scale = get("attention_scale"); !scale.is_none()) c.attentionScale = scale.cast<float>();
  if (py::object windows = get("layer_windows"); !windows.is_none())
    c.layerWindows = windows.cast<std::vector<int64_t>>();
  if (py::object base = get("rope_local_base"); !base.is_none()) c.localRopeBase = base.cast<float>();
  if (std::string problem = c.validate(); !problem.empty()) throw std::invalid_argument(problem);
  return c;
}

void initModel(py::module_ &m) {
  m.def("release_freed_memory", &releaseFreedMemory,
        "Returns the C heap's free pages to the system (glibc's malloc_trim), after a load's temporaries die.");
  py::class_<CompiledModel>(m, "CompiledModel", py::dynamic_attr())
      .def(py::init([](const py::object &configObject, const std::string &pipeline, int threads,
                       const std::string &cacheDir, const std::string &weights, uint64_t cacheMaxBytes,
                       const std::string &targetCpu, const std::string &kvCache,
                       const std::map<std::string, std::string> &weightFormats) {
             GPTConfig config = gptConfig(configObject);
             CompileOptions options = compileOptions(pipeline, threads, cacheDir, cacheMaxBytes, targetCpu);
             auto parseFormat = [](const std::string &name) { return parseWeightFormat(name).format; };
             options.weights = parseFormat(weights);
             for (const auto &[parameter, format] : weightFormats)
               options.weightFormats[parameter] = parseFormat(format);
             bool known = false;
             for (KvCacheFormat format :
                  {KvCacheFormat::F32, KvCacheFormat::BF16, KvCacheFormat::F16, KvCacheFormat::Q8_0})
               if (kvCache == kvCacheFormatName(format)) {
                 options.kvCache = format;
                 known = true;
               }
             if (!known)
               throw std::invalid_argument("unknown KV cache format '" + kvCache + "' (known: f32, bf16, f16, q8_0)");
             if (options.kvCache == KvCacheFormat::Q8_0 && config.headSize() % 32 != 0)
               throw std::invalid_argument("CompileOptions.kv_cache='q8_0' stores keys and values in blocks of 32: "
                                           "head_dim must be a multiple of 32, got " +
                                           std::to_string(config.headSize()));
             return std::make_unique<CompiledModel>(config, options);
           }),
           py::arg("config"), py::arg("pipeline"), py::arg("threads"), py::arg("cache_dir") = "",
           py::arg("weights") = "f32", py::arg("cache_max_bytes") = kDefaultCacheMaxBytes,
           py::arg("target_cpu") = "host", py::arg("kv_cache") = "f32",
           py::arg("weight_formats") = std::map<std::string, std::string>(),
           "A gpt.GPTConfig's model compiled with these options (weights bound later, by set_weights); "
           "`weight_formats` stores the named layer matmul weights in other formats than `weights`.")
      .def(
          "supplied_parameters", [](const CompiledModel &model) { return namesAndShapes(model.suppliedParameters()); },
          "(name, shape) of every weight set_weights() takes, in its order.")
      .def("bucket_for", &CompiledModel::bucketFor, py::arg("seq_len"),
           "The padded sequence length that seq_len tokens are compiled for.")
      .def(
          "set_weights",
          [](py::object self, const py::list &weights, const py::dict &quantized) {
            CompiledModel &model = self.cast<CompiledModel &>();
            // name -> (format, uint8 array of llama.cpp blocks); kept alive only for this call.
            std::map<std::string, CompiledModel::QuantizedWeight> given;
            std::vector<py::array> blockArrays; // alive until setWeights() has repacked them
            for (auto [key, value] : quantized) {
              auto entry = value.cast<py::tuple>();
              std::string name = key.cast<std::string>(), format = entry[0].cast<std::string>();
              // One array of blocks, or a list of them: a fused weight's parts, rows in order. A
              // part with `file_rows` and `heads` (gguf_llama.UnpermutedRows) is a q or k weight's
              // rows as llama.cpp permuted them, read in the model's order as they are repacked.
              std::vector<py::array_t<uint8_t, py::array::c_style>> parts;
              std::vector<int64_t> permutedHeads;
              auto addPart = [&](py::handle part) {
                const bool permuted = py::hasattr(part, "file_rows") && py::hasattr(part, "heads");
                parts.push_back(
                    (permuted ? part.attr("file_rows") : part).cast<py::array_t<uint8_t, py::array::c_style>>());
                permutedHeads.push_back(permuted ? part.attr("heads").cast<int64_t>() : 0);
              };
              if (py::isinstance<py::list>(entry[1]) || py::isinstance<py::tuple>(entry[1]))
                for (py::handle part : entry[1]) addPart(part);
              else
                addPart(entry[1]);
              const GivenFormat parsed = parseGivenFormat(name, format, parts.size());
              CompiledModel::QuantizedWeight &weight = given[name];
              weight.format = parsed.stored->format;
              for (size_t i = 0; i < parts.size(); ++i) {
                weight.parts.push_back(
                    {parts[i].data(), static_cast<int64_t>(parts[i].size()), parsed.types[i], permutedHeads[i]});
                blockArrays.push_back(parts[i]);
              }
            }
            model.setWeights(weightPointers(model, weights, given), given);
            // Compiled code reads the borrowed arrays in place: the model keeps them (and only
            // them) alive; the others were copied into its own storage.
            std::vector<std::string> borrowed = model.borrowedParameters();
            py::list kept;
            for (size_t i = 0; i < model.suppliedParameters().size(); ++i)
              if (llvm::is_contained(borrowed, model.suppliedParameters()[i].name)) kept.append(weights[i]);
            self.attr("_borrowed_arrays") = kept;
          },
          py::arg("weights"), py::arg("quantized") = py::dict(),
          "Binds the weights (checked here, once) for every later call; the model keeps the arrays it reads "
          "in place (borrowed_parameters()) alive. `quantized`: {name: (format, uint8 llama.cpp blocks)} for "
          "weights given as a GGUF file stores them (format: a block-quantized one of weight_formats(); a GGUF "
          "block type that only one of them takes, stored in it; or 'FORMAT:TYPE,...', each part's type, "
          "converted into FORMAT as it is repacked; "
          "their entry in `weights` may be None); the blocks may be a "
          "list of arrays, the parts of a fused weight, rows in order; a part may be an object with `file_rows` "
          "(its uint8 blocks) and `heads` (gguf_llama.UnpermutedRows): a q or k weight's rows as llama.cpp "
          "permuted them for its rope, read in the model's order as they are repacked, with no copy.")
      .def("packed_weights_key", &CompiledModel::packedWeightsKey, py::arg("source_key"),
           "What the model's laid-out weights are a function of (the source's key, this compiler build, every "
           "parameter's format, layout and shape): the header of its packed-weights file; empty when this build "
           "cannot be told apart from others.")
      .def(
          "bind_packed_weights",
          [](py::object self, const py::list &weights, const std::string &path, const std::string &sourceKey) {
            CompiledModel &model = self.cast<CompiledModel &>();
            // Only the borrowed weights are read (checked as set_weights checks them); the others
            // come from the file, and their entries may be None.
            const std::vector<std::string> borrowed = model.borrowedParameters();
            const std::vector<ParameterSpec> &specs = model.suppliedParameters();
            if (weights.size() != specs.size())
              throw std::invalid_argument("expected " + std::to_string(specs.size()) + " weights, got " +
                                          std::to_string(weights.size()));
            std::vector<const float *> pointers(specs.size(), nullptr);
            py::list kept;
            for (size_t i = 0; i < specs.size(); ++i) {
              if (!llvm::is_contained(borrowed, specs[i].name)) continue;
              py::array array = weights[i].cast<py::array>();
              if (!py::isinstance<FloatArray>(array) || !(array.flags() & py::array::c_style))
                throw std::invalid_argument(specs[i].name + " must be a C-contiguous float32 array");
              if (std::vector<int64_t>(array.shape(), array.shape() + array.ndim()) != specs[i].shape)
                throw std::invalid_argument(specs[i].name + " has the wrong shape");
              pointers[i] = static_cast<const float *>(array.data());
              kept.append(weights[i]);
            }
            bool bound;
            {
              py::gil_scoped_release release;
              bound = model.bindPackedWeights(pointers, path, sourceKey);
            }
            if (bound) self.attr("_borrowed_arrays") = kept;
            return bound;
          },
          py::arg("weights"), py::arg("path"), py::arg("source_key"),
          "Binds the weights from the packed-weights file at `path` (written by write_packed_weights for the same "
          "key) instead of laying them out: True when it did; False, binding nothing, when the file is absent, "
          "another key's, truncated or corrupt. `weights` as set_weights takes them; only the borrowed ones are "
          "read, the others may be None.")
      .def(
          "write_packed_weights",
          [](const CompiledModel &model, const std::string &path, const std::string &sourceKey) {
            py::gil_scoped_release release;
            model.writePackedWeights(path, sourceKey);
          },
          py::arg("path"), py::arg("source_key"),
          "Writes the bound weights' laid-out bytes to `path` (atomically) for a later bind_packed_weights; raises "
          "RuntimeError naming the path when it cannot be written.")
      .def(
          "kv_cache_dtype", [](const CompiledModel &model) { return kvCacheDtype(model.options().kvCache); },
          "The numpy dtype of the KV cache arrays step() and batch_step() take: float32, float16, uint16 "
          "(bf16's bits), or int8 (q8_0's bytes).")
      .def(
          "kv_cache_row_width",
          [](const CompiledModel &model) {
            return kvCacheRowWidth(model.options().kvCache, model.config().headSize());
          },
          "The elements of one cached key or value row (the KV cache arrays' last dim): head_size, or for q8_0 "
          "head_size int8 codes followed by head_size / 32 fp16 scales as bytes (head_size * 17/16).")
      .def("borrowed_parameters", &CompiledModel::borrowedParameters,
           "Names of the supplied weights compiled code reads in place; the others were copied (packed, converted).")
      .def(
          "stored_weight",
          [](const CompiledModel &model, const std::string &name) {
            std::vector<float> values = model.storedWeight(name);
            std::vector<int64_t> shape;
            for (const ParameterSpec &spec : model.suppliedParameters())
              if (spec.name == name) shape = spec.shape;
            py::array_t<float> array(shape);
            std::copy(values.begin(), values.end(), array.mutable_data());
            return array;
          },
          py::arg("name"),
          "The values the model computes with for a weight that is not borrowed: unpacked and dequantized.")
      .def(
          "stored_arguments",
          [](const CompiledModel &model) {
            py::list stored;
            for (const CompiledModel::StoredArgument &argument : model.storedArguments())
              stored.append(
                  py::make_tuple(argument.name, reinterpret_cast<uintptr_t>(argument.address), argument.bytes));
            return stored;
          },
          "(name, address, bytes) of each argument compiled code reads from the model's own storage.")
      .def(
          "weight_blocks",
          [](const CompiledModel &model) {
            py::list blocks;
            for (auto [address, bytes] : model.weightBlocks())
              blocks.append(py::make_tuple(reinterpret_cast<uintptr_t>(address), bytes));
            return blocks;
          },
          "(address, bytes) of the blocks of memory the stored arguments were laid out in.")
      .def("forward", &forward, py::arg("ids"),
           "Logits [bucket_for(len(ids)), padded vocab]: rows past len(ids) and columns past vocab_size are padding.")
      .def("step", &step, py::arg("ids"), py::arg("offset"), py::arg("cache_len"), py::arg("keys"), py::arg("values"),
           py::arg("every_row") = false,
           "Cached step: logits [1, padded vocab] of the last of `ids` (every_row: [len(ids), padded vocab], one "
           "row per token, for speculative verification), which sit at positions offset.. and "
           "whose keys/values are written into the per-layer caches in place (arrays of kv_cache_dtype()).")
      .def("is_compiled_for", &CompiledModel::isCompiledFor, py::arg("count"), py::arg("offset"), py::arg("cache_len"),
           py::arg("every_row") = false,
           "Whether forward(count tokens) (cache_len 0) or the step at offset against cache_len is compiled.")
      .def("compile_for", &CompiledModel::compileFor, py::arg("count"), py::arg("offset"), py::arg("cache_len"),
           py::arg("every_row") = false, py::call_guard<py::gil_scoped_release>(),
           "Compiles the program is_compiled_for() names, if it is not yet.")
      .def(
          "ir",
          [](CompiledModel &model, const std::string &stage, int64_t seqLen, int64_t cacheLen, bool everyRow) {
            std::optional<Stage> parsed = parseStage(stage);
            if (!parsed) throw std::invalid_argument("unknown stage '" + stage + "'");
            py::gil_scoped_release release;
            return model.ir(*parsed, seqLen, cacheLen, everyRow);
          },
          py::arg("stage"), py::arg("seq_len"), py::arg("cache_len") = 0, py::arg("every_row") = false)
      .def("batch_step", &batchStep, py::arg("ids"), py::arg("positions"), py::arg("sequences"), py::arg("slots"),
           py::arg("tables"), py::arg("last"), py::arg("block_size"), py::arg("keys"), py::arg("values"),
           "Batched step over paged KV pools (padded, checked arrays): logits [len(last), padded vocab].")
      .def(
          "batch_step_ir",
          [](CompiledModel &model, const std::string &stage, int64_t tokens, int64_t batch, int64_t tableWidth,
             int64_t poolBlocks, int64_t blockSize) {
            std::optional<Stage> parsed = parseStage(stage);
            if (!parsed) throw std::invalid_argument("unknown stage '" + stage + "'");
            py::gil_scoped_release release;
            return model.batchStepIr(*parsed, BatchShape{tokens, batch, tableWidth, poolBlocks, blockSize});
          },
          py::arg("stage"), py::arg("tokens"), py::arg("batch"), py::arg("table_width"), py::arg("pool_blocks"),
          py::arg("block_size"))
      .def(
          "compiled_batch_steps",
          [](const CompiledModel &model) {
            py::dict compiled;
            for (const auto &[shape, seconds] : model.compiledBatchSteps())
              compiled[py::tuple(py::cast(shape))] = seconds;
            return compiled;
          },
          "{(tokens, batch, table width, pool blocks, block size): seconds} for every batched step compiled.")
      .def(
          "dump_forward_object",
          [](CompiledModel &model, int64_t seqLen, const std::string &path) {
            py::gil_scoped_release release;
            model.dumpForwardObject(seqLen, path);
          },
          py::arg("seq_len"), py::arg("path"), "Writes the JIT's machine code of forward(seq_len) to an ELF object.")
      .def("compiled_buckets", &CompiledModel::compiledBuckets,
           "{bucket: seconds spent compiling it} for every forward bucket compiled so far.")
      .def("total_compile_seconds", &CompiledModel::totalCompileSeconds,
           "Seconds spent compiling (or loading) every program so far.")
      .def("disk_cache_hits", &CompiledModel::diskCacheHits,
           "Programs loaded from the on-disk cache instead of being compiled.")
      .def("compiled_steps", &CompiledModel::compiledSteps,
           "{(tokens, cache length): seconds} for every cached-step program compiled so far.");
  m.def(
      "supplied_parameters",
      [](const py::object &config) { return namesAndShapes(suppliedParameters(gptConfig(config))); }, py::arg("config"),
      "(name, shape) of every weight a model of this gpt.GPTConfig takes, in order.");
  m.attr("STAGES") = py::cast(stageNames());
}

} // namespace gpt::python
