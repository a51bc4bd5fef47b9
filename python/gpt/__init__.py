"""gpt: an MLIR compiler that makes GPT inference fast on a CPU.

Example:

    import gpt
    model = gpt.GPT.random(gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128))
    logits = model.forward([1, 2, 3])        # np.ndarray [3, 256]
    print(model.ir("linalg"))                # the IR after any stage
    cache = model.new_cache()
    last = model.prefill([1, 2, 3], cache)   # logits [256] of the last prompt token
    nxt = model.decode(int(last.argmax()), cache)
    ids = model.generate([1, 2, 3], max_new_tokens=20, temperature=0.8, top_k=40, seed=7)
    print(model.last_generation)             # gpt.GenerationStats: token counts and seconds
"""

import sys

from gpt import disk_cache, masks
from gpt.block_pool import KVBlockPool
from gpt.cache import KVCache
from gpt.compiler import CompilerError, run_pipeline
from gpt.config import CompileOptions, GPTConfig
from gpt.engine import Engine
from gpt.errors import ModelFileError
from gpt.model import GPT, GPU_STAGES, STAGES, GenerationStats
from gpt.tokenizer import ByteTokenizer, HFTokenizer


def compile_module(module, example_inputs, options=None, *, dynamic_shapes=None):
    """gpt.frontend.compile_module: a torch.nn.Module exported with torch.export, imported into
    the transformer dialect and compiled (torch is imported on the first call, not with gpt)."""
    from gpt.frontend import compile_module as compile_with_frontend

    return compile_with_frontend(module, example_inputs, options, dynamic_shapes=dynamic_shapes)


# torch.compile(module, backend="gpt"): registered with Dynamo when gpt is imported in a process
# that uses torch already (importing torch only for this would slow down every `import gpt`);
# importing gpt.frontend registers it in any case.
if "torch" in sys.modules:
    import gpt.frontend  # noqa: F401

__all__ = [
    "ByteTokenizer",
    "CompileOptions",
    "CompilerError",
    "Engine",
    "GPT",
    "GPTConfig",
    "GenerationStats",
    "HFTokenizer",
    "KVBlockPool",
    "KVCache",
    "ModelFileError",
    "compile_module",
    "GPU_STAGES",
    "STAGES",
    "disk_cache",
    "masks",
    "run_pipeline",
]
