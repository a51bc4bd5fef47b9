"""gpt_runtime: runs an artifact that `python -m gpt export --target cuda:sm_XX` wrote (docs/GPU.md)
on an NVIDIA GPU, with numpy and the driver's libcuda.so.1 only: no gpt compiler, no MLIR or LLVM,
no CUDA toolkit. It does not import the gpt package.

Example:

    import gpt_runtime
    model = gpt_runtime.load("gpt2.sm_90")      # manifest.json, kernels.sm_90.ptx, weights.safetensors
    logits = model.forward([1, 2, 3])            # np.ndarray [3, vocab_size]
    cache = model.new_cache()
    last = model.prefill([1, 2, 3], cache)       # logits [vocab_size] of the last prompt token
    nxt = model.decode(int(last.argmax()), cache)
    ids = model.generate([1, 2, 3], max_new_tokens=20, temperature=0.8, top_k=40, seed=7)
    print(model.last_generation)                 # token counts and seconds

    # An artifact exported with `--gpu_weights none` (no weights file) takes them from the model file:
    model = gpt_runtime.load("smollm2.sm_90", model="SmolLM2-135M-Instruct-Q8_0.gguf")  # or a HF directory
"""

from .cache import Cache
from .errors import ArtifactError, CudaError, IncompatibleDeviceError, ModelFileError, NoDeviceError
from .manifest import Manifest, load_manifest
from .model import GenerationStats, Model, load

__all__ = [
    "ArtifactError",
    "Cache",
    "CudaError",
    "GenerationStats",
    "IncompatibleDeviceError",
    "Manifest",
    "Model",
    "ModelFileError",
    "NoDeviceError",
    "load",
    "load_manifest",
]
