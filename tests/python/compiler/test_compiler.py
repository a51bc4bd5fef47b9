"""Tests of gpt.run_pipeline: text IR in, pass pipeline run by the C++ core, text IR out; and of the
JIT's pass timing report (GPT_PASS_TIMING)."""

import os
import subprocess
import sys

import pytest

import gpt

CHAIN = """
func.func @chain(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<*xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  %1 = transformer.gelu %0 : tensor<*xf32> -> tensor<*xf32>
  %2 = transformer.transpose %1 : tensor<*xf32> -> tensor<*xf32>
  %3 = transformer.transpose %2 : tensor<*xf32> -> tensor<*xf32>
  return %3 : tensor<*xf32>
}
"""


def test_shape_inference_then_canonicalize_removes_double_transpose():
    out = gpt.run_pipeline(CHAIN, "transformer-shape-inference,canonicalize")
    assert "-> tensor<4x16xf32>" in out
    assert "transformer.transpose" not in out
    assert "tensor<*xf32>" not in out


def test_pipeline_as_list_and_lowering_leaves_no_transformer_ops():
    out = gpt.run_pipeline(CHAIN, ["transformer-shape-inference", "canonicalize", "transformer-to-linalg"])
    assert "linalg.matmul" in out
    assert "math.tanh" in out
    assert "transformer." not in out


def test_empty_pipeline_round_trips():
    out = gpt.run_pipeline(CHAIN, "")
    assert out.count("transformer.transpose") == 2


def test_verifier_error_names_both_shapes():
    bad = CHAIN.replace("tensor<8x16xf32>", "tensor<9x16xf32>")
    with pytest.raises(gpt.CompilerError) as info:
        gpt.run_pipeline(bad, "canonicalize")
    message = str(info.value)
    assert "contraction dimensions do not match" in message
    assert "tensor<4x8xf32>" in message and "tensor<9x16xf32>" in message
    assert 'loc("input":3:' in message  # the diagnostic carries the source location


def test_unknown_pass_is_reported():
    with pytest.raises(gpt.CompilerError, match="'no-such-pass' does not refer to a registered pass"):
        gpt.run_pipeline(CHAIN, "canonicalize,no-such-pass")


def test_parse_error_is_reported():
    with pytest.raises(gpt.CompilerError, match="failed to parse the input IR"):
        gpt.run_pipeline("func.func @f( {", "canonicalize")


def test_pass_failure_is_reported_with_diagnostic():
    with pytest.raises(gpt.CompilerError, match="needs static shapes"):
        gpt.run_pipeline(CHAIN, "transformer-to-linalg")


def test_compiler_error_is_a_runtime_error():
    assert issubclass(gpt.CompilerError, RuntimeError)


def test_non_string_ir_is_a_type_error():
    with pytest.raises(TypeError, match="ir must be a str"):
        gpt.run_pipeline(b"module {}", "canonicalize")


# Inputs the verifiers accept, or must reject cleanly, that once crashed the process somewhere in
# the pipeline (a null affine map, a division by zero heads, a tile of an empty dimension).
CRASHERS = {
    "softmax_rank_1": """
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = transformer.softmax %x : tensor<8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}""",
    "layer_norm_rank_1": """
func.func @f(%x: tensor<8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}""",
    "returned_twice": """
func.func @f(%x: tensor<8x16xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %0 = transformer.gelu %x : tensor<8x16xf32> -> tensor<*xf32>
  return %0, %0 : tensor<*xf32>, tensor<*xf32>
}""",
    "softmax_empty_rows": """
func.func @f(%x: tensor<4x0xf32>) -> tensor<4x0xf32> {
  %0 = transformer.softmax %x : tensor<4x0xf32> -> tensor<4x0xf32>
  return %0 : tensor<4x0xf32>
}""",
}


@pytest.mark.parametrize("name", sorted(CRASHERS))
@pytest.mark.parametrize("level", ["baseline", "default"])
def test_edge_shapes_compile_to_llvm(name, level):
    out = gpt.run_pipeline(CRASHERS[name], f"gpt-compile{{level={level}}}")
    assert "llvm.func @f" in out


def test_attention_without_heads_is_a_compiler_error():
    ir = """
func.func @f(%q: tensor<0x8x4xf32>) -> tensor<*xf32> {
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32}
      : (tensor<0x8x4xf32>, tensor<0x8x4xf32>, tensor<0x8x4xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}"""
    with pytest.raises(gpt.CompilerError, match="zero-sized dimension; attention needs at least one head"):
        gpt.run_pipeline(ir, "gpt-compile")


def test_deeply_nested_input_is_a_compiler_error_not_a_stack_overflow():
    # 8,000 nested modules once overflowed the parser's stack and killed the interpreter.
    deep = "module {\n" * 8000 + "}\n" * 8000
    with pytest.raises(gpt.CompilerError, match=r'loc\("input":1001:8\).*nests brackets more than 1000 levels deep'):
        gpt.run_pipeline(deep, "canonicalize")
    arrays = "func.func @f() attributes {a = " + "[" * 8000 + "]" * 8000 + "} { return }"
    with pytest.raises(gpt.CompilerError, match="nests brackets more than 1000 levels deep"):
        gpt.run_pipeline(arrays, "canonicalize")
    # Up to the limit, input parses and runs.
    assert gpt.run_pipeline("module {\n" * 999 + "}\n" * 999, "canonicalize").count("module {") == 999


@pytest.mark.parametrize("setting, timed", [("1", True), ("0", False)])
def test_pass_timing_is_printed_when_asked_for(setting, timed):
    # The JIT's pass managers (not gpt.run_pipeline's) print MLIR's timing report, pass by pass, to
    # stderr under GPT_PASS_TIMING=1: a model's compile, in a process of its own (the setting is
    # read once).
    script = (
        "import gpt\n"
        "cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=16)\n"
        "gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(disk_cache=False)).forward([1, 2])\n"
    )
    env = dict(os.environ, GPT_PASS_TIMING=setting)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    for pass_name in ("ApplySchedule", "OneShotBufferize", "ConvertVectorToLLVMPass"):
        assert (pass_name in done.stderr) == timed, done.stderr[-2000:]
    assert done.stderr.count("Total Execution Time") == (2 if timed else 0), done.stderr[-2000:]
