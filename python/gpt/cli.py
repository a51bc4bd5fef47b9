"""The `gpt` command line (python -m gpt): absl-py flags, one subcommand per job.

  python -m gpt stages FILE.mlir   print a transformer-dialect program after each compiler stage
"""

import sys

from absl import app, flags

from gpt import compiler

FLAGS = flags.FLAGS

# The stages a transformer-dialect program goes through, each a pass pipeline applied to the
# output of the stage before it.
STAGES = (
    ("input (as parsed)", ""),
    ("canonicalize (DRR patterns, constant folding)", "canonicalize"),
    ("transformer-shape-inference", "transformer-shape-inference,canonicalize"),
    ("transformer-to-linalg", "transformer-to-linalg,canonicalize,cse"),
)


def stages(path: str) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            ir = f.read()
    except OSError as e:
        raise app.UsageError(f"cannot read {path}: {e.strerror}")
    for title, pipeline in STAGES:
        ir = compiler.run_pipeline(ir, pipeline)
        print(f"// ===== {title} " + "=" * max(0, 70 - len(title)))
        print(ir)


COMMANDS = {"stages": (stages, "FILE.mlir")}


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        usage = "\n".join(f"  python -m gpt {name} {args}" for name, (_, args) in COMMANDS.items())
        raise app.UsageError("expected a command:\n" + usage)
    command, arg_spec = COMMANDS[argv[1]]
    args = argv[2:]
    if len(args) != len(arg_spec.split()):
        raise app.UsageError(f"usage: python -m gpt {argv[1]} {arg_spec}")
    try:
        command(*args)
    except compiler.CompilerError as e:
        print(f"gpt: error: {e}", file=sys.stderr)
        return 1
    return 0


def run():
    app.run(main)
