"""gpt: an MLIR compiler for GPT inference on the CPU.

Usage:
  python -m gpt generate [--prompt TEXT] [--max_new_tokens N] [--model DIR] [--temperature T]
                         [--top_k K] [--top_p P] [--seed S] [--nocache] [--pipeline LEVEL]
  python -m gpt ir [--stage STAGE] [--entry forward|step] [--seq_len N] [--model DIR | --n_layer N ...]
  python -m gpt stages FILE.mlir
  python -m gpt cache --list | --clear [--cache_dir DIR]
Flags: python -m gpt --helpfull
"""

from gpt.cli import run

if __name__ == "__main__":
    run()
