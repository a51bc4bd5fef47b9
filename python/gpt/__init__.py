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

from gpt import disk_cache
from gpt.block_pool import KVBlockPool
from gpt.cache import KVCache
from gpt.compiler import CompilerError, run_pipeline
from gpt.config import CompileOptions, GPTConfig
from gpt.engine import Engine
from gpt.model import GPT, STAGES, GenerationStats
from gpt.tokenizer import ByteTokenizer, HFTokenizer

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
    "STAGES",
    "disk_cache",
    "run_pipeline",
]
