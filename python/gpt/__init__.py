"""gpt: an MLIR compiler that makes GPT inference fast on a CPU.

    import gpt
    model = gpt.GPT.random(gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128))
    logits = model.forward([1, 2, 3])        # np.ndarray [3, 256]
    print(model.ir("linalg"))                # the IR after any stage
"""

from gpt.compiler import CompilerError, run_pipeline
from gpt.config import CompileOptions, GPTConfig
from gpt.model import GPT, STAGES

__all__ = ["CompileOptions", "CompilerError", "GPT", "GPTConfig", "STAGES", "run_pipeline"]
