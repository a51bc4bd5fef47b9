"""gpt: an MLIR compiler that makes GPT inference fast on a CPU."""

from gpt.compiler import CompilerError, run_pipeline

__all__ = ["CompilerError", "run_pipeline"]
