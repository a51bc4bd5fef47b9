"""Running the compiler's pass pipelines on textual IR."""

from collections.abc import Sequence

from gpt import _gpt

CompilerError = _gpt.CompilerError


def run_pipeline(ir: str, pipeline: str | Sequence[str], verify_each: bool = True) -> str:
    """Parses MLIR text, runs a pass pipeline and returns the printed IR.

    `pipeline` is MLIR's textual pipeline syntax ("canonicalize,transformer-shape-inference") or a
    list of pass names; function passes nest under the module implicitly. Raises CompilerError with
    MLIR's diagnostics (location and message) when the IR does not parse, the pipeline is unknown,
    or a pass fails.
    """
    if not isinstance(ir, str):
        raise TypeError(f"ir must be a str of MLIR text, got {type(ir).__name__}")
    if not isinstance(pipeline, str):
        pipeline = ",".join(pipeline)
    return _gpt.run_pipeline(ir, pipeline, verify_each)
