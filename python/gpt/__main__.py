"""gpt: an MLIR compiler for GPT inference on the CPU.

Usage:
  python -m gpt generate [--prompt TEXT] [--max_new_tokens N] [--model DIR] [--temperature T]
                         [--top_k K] [--top_p P] [--seed S] [--nocache] [--pipeline LEVEL]
  python -m gpt chat [--model FILE|DIR|smollm2] [--system TEXT]
  python -m gpt serve [--model FILE|DIR] [--host 127.0.0.1] [--port 8000]
  python -m gpt export --model FILE|DIR --out DIR [--target cuda:sm_90] [--gpu_weights f32|bf16]
  python -m gpt ir [--stage STAGE] [--entry forward|step] [--seq_len N] [--model DIR | --n_layer N ...]
  python -m gpt stages FILE.mlir
  python -m gpt cache --list | --clear [--cache_dir DIR]
Errors: one line `gpt: error: ...` on stderr, exit status 2 (--debug adds the traceback).
Flags: python -m gpt --helpfull
"""

from gpt.cli import run

if __name__ == "__main__":
    run()
