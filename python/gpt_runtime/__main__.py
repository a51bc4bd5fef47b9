"""python -m gpt_runtime: generate text with an artifact on this machine's GPU, or describe the
artifact and the GPU.

  python -m gpt_runtime generate ARTIFACT --prompt TEXT | --ids 1,2,3 [--max-new-tokens N]
                                 [--temperature T] [--top-k K] [--top-p P] [--seed S] [--device D]
                                 [--no-eos] [--no-graphs] [--model FILE.gguf|HF_DIR]
  python -m gpt_runtime info ARTIFACT [--device D] [--model FILE.gguf|HF_DIR]

--model: the weights of an artifact exported without them (`python -m gpt export --gpu_weights none`),
read from the GGUF file or HF directory and checked against the artifact.

An error (a bad artifact, no GPU, a bad argument) is one line on stderr, `gpt_runtime: error: ...`,
and exit status 2; --debug shows its traceback as well.
"""

import argparse
import sys
import time
import traceback

from . import load, load_manifest
from .errors import ArtifactError, CudaError, IncompatibleDeviceError, ModelFileError, NoDeviceError

# What a user can cause and fix (the artifact, the machine, the arguments): one line. Anything else
# is a bug of gpt_runtime's, still one line, saying so, with the traceback behind --debug.
USER_ERRORS = (
    ArtifactError,
    ModelFileError,
    NoDeviceError,
    IncompatibleDeviceError,
    CudaError,
    ValueError,
    TypeError,
    OSError,
)
MODEL_HELP = "the GGUF file or HF directory of an artifact exported without weights (--gpu_weights none)"
ERROR_STATUS = 2


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ids must be comma-separated token ids, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpt_runtime", description=__doc__.split("\n\n")[0])
    # --debug before or after the command; SUPPRESS, so that the command's copy does not reset it.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show an error's traceback")
    parser.add_argument("--debug", action="store_true", help="show an error's traceback")
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser("generate", help="continue a prompt", parents=[debug])
    generate.add_argument("artifact", help="the artifact directory (manifest.json, PTX, weights)")
    prompt = generate.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="text to continue (needs the artifact's tokenizer.json)")
    prompt.add_argument("--ids", type=_ids, help="token ids to continue, comma-separated")
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    generate.add_argument("--top-k", type=int, default=40, help="sample among the k most likely (0 = no limit)")
    generate.add_argument("--top-p", type=float, default=None, help="nucleus sampling probability mass")
    generate.add_argument("--seed", type=int, default=None, help="same seed, same tokens")
    generate.add_argument("--device", type=int, default=0, help="GPU ordinal")
    generate.add_argument("--no-eos", action="store_true", help="do not stop at the end-of-sequence token")
    generate.add_argument("--no-graphs", action="store_true", help="launch each kernel instead of CUDA graphs")
    generate.add_argument("--model", default=None, help=MODEL_HELP)
    info = commands.add_parser("info", help="the artifact's programs, and the GPU and driver", parents=[debug])
    info.add_argument("artifact")
    info.add_argument("--device", type=int, default=0)
    info.add_argument("--model", default=None, help=MODEL_HELP)
    return parser


def _generate(args) -> None:
    start = time.perf_counter()
    model = load(args.artifact, device=args.device, graphs=not args.no_graphs, model=args.model)
    load_seconds = time.perf_counter() - start
    tokenizer = model.tokenizer
    if args.prompt is not None:
        if tokenizer is None:
            raise ValueError(f"{args.artifact} has no tokenizer.json (nor has --model): give the prompt as --ids")
        prompt = tokenizer.encode(args.prompt).ids
        if not prompt:
            raise ValueError("--prompt must not be empty")
    else:
        prompt = args.ids
    room = model.max_len - len(prompt)
    if room < 0:
        raise ValueError(f"the prompt is {len(prompt)} tokens, more than the model's cache ({model.max_len})")
    tokens = model.generate(
        prompt,
        max_new_tokens=min(args.max_new_tokens, room),
        temperature=args.temperature,
        top_k=args.top_k or None,
        top_p=args.top_p,
        seed=args.seed,
        eos=not args.no_eos,
    )
    if tokenizer is not None:
        print(tokenizer.decode(prompt + tokens))
    print("new token ids:", ",".join(map(str, tokens)))
    stats = model.last_generation
    print(
        f"[gpt_runtime] prompt: {stats.prompt_tokens} tokens, {stats.prompt_tokens_per_second:.1f} tok/s | "
        f"generated: {stats.generated_tokens} tokens, {1e3 * stats.decode_seconds_per_token:.3f} ms/token | "
        f"graph capture {stats.capture_seconds:.3f} s | load {load_seconds:.2f} s (PTX JIT {model.jit_seconds:.2f} s) "
        f"| {model.device_name}, sm_{''.join(map(str, model.compute_capability))}, driver {model.driver_version}"
    )


def _info(args) -> None:
    manifest = load_manifest(args.artifact)
    print(f"target {manifest.chip}, PTX {manifest.ptx_version}; vocab_size {manifest.vocab_size}")
    print("config:", manifest.config)
    total = {}
    for buffer in manifest.buffers:
        total[buffer.role] = total.get(buffer.role, 0) + buffer.bytes
    print("buffers:", ", ".join(f"{role} {size / 2**20:.1f} MiB" for role, size in total.items()))
    for program in manifest.programs:
        print(f"program {program.entry}[{program.tokens}]: {len(program.launches)} launches")
    model = load(args.artifact, device=args.device, model=args.model)
    print(
        f"GPU {args.device}: {model.device_name}, compute capability {model.compute_capability}, "
        f"driver {model.driver_version}, PTX JIT {model.jit_seconds:.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # a usage error exits 2 with argparse's own line
    try:
        (_generate if args.command == "generate" else _info)(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if args.debug:
            traceback.print_exc()
        print(error_line(error), file=sys.stderr)
        return ERROR_STATUS
    return 0


def error_line(error: Exception) -> str:
    """`gpt_runtime: error: <message>`, the message's further lines (a CudaError's ptxas log)
    indented under it."""
    message = str(error) or type(error).__name__
    if not isinstance(error, USER_ERRORS):
        message = f"internal error: {type(error).__name__}: {message} (--debug shows the traceback)"
    first, *rest = message.splitlines() or [""]
    return "\n".join([f"gpt_runtime: error: {first}"] + [f"  {line}" for line in rest])


if __name__ == "__main__":
    sys.exit(main())
