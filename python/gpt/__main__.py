"""gpt: an MLIR compiler for GPT inference on the CPU.

Usage:
  python -m gpt stages FILE.mlir   print a transformer-dialect program after each compiler stage
"""

from gpt.cli import run

if __name__ == "__main__":
    run()
