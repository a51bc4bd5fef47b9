"""The command line: generate with the embedded model, ir, and clear errors for bad flags."""

import os
import subprocess
import sys

import gpt

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    return subprocess.run([sys.executable, "-m", "gpt", *args], capture_output=True, text=True, env=env, timeout=600)


def test_generate_with_the_embedded_model_prints_text_and_timing():
    result = run_cli("generate", "--prompt", "def ", "--max_new_tokens", "40", "--seed", "1")
    assert result.returncode == 0, result.stderr
    text, timing = result.stdout.rstrip("\n").rsplit("\n", 1)
    assert text.startswith("def ") and len(text) > len("def ")
    assert timing.startswith("[gpt] prompt: 4 tokens,") and "generated: 40 tokens" in timing and "compile:" in timing


def test_generate_is_reproducible_with_a_seed_and_greedy_matches_the_api():
    a = run_cli("generate", "--prompt", "import ", "--max_new_tokens", "30", "--seed", "5", "--nostream")
    b = run_cli("generate", "--prompt", "import ", "--max_new_tokens", "30", "--seed", "5")
    assert a.returncode == b.returncode == 0
    assert a.stdout.split("\n[gpt]")[0] == b.stdout.split("\n[gpt]")[0]
    # Near-uniform bytes: characters split across tokens and invalid sequences, which the streamed
    # text must print exactly as the whole decode does (nothing dropped, nothing printed twice).
    hot = (
        "generate",
        "--prompt",
        "import ",
        "--max_new_tokens",
        "60",
        "--seed",
        "3",
        "--temperature",
        "10",
        "--top_k",
        "0",
    )
    c, d = run_cli(*hot, "--nostream"), run_cli(*hot)
    assert c.returncode == d.returncode == 0
    assert "\ufffd" in c.stdout or any(ord(ch) > 127 for ch in c.stdout)
    assert c.stdout.split("\n[gpt]")[0] == d.stdout.split("\n[gpt]")[0]
    greedy = run_cli("generate", "--prompt", "class ", "--max_new_tokens", "25", "--temperature", "0")
    model = gpt.GPT.from_pretrained(os.path.join(os.path.dirname(gpt.__file__), "data", "byte-gpt"))
    tok = gpt.ByteTokenizer()
    expected = "class " + tok.decode(model.generate(tok.encode("class "), max_new_tokens=25))
    assert greedy.stdout.split("\n[gpt]")[0] == expected


def test_embedded_model_is_a_small_byte_level_gpt():
    model = gpt.GPT.from_pretrained(os.path.join(os.path.dirname(gpt.__file__), "data", "byte-gpt"))
    assert model.config.vocab_size == 256
    params = sum(v.size for v in model.state_dict().values())
    assert 100_000 < params < 2_000_000


def test_ir_command_prints_a_stage():
    result = run_cli("ir", "--stage", "linalg", "--n_layer", "1", "--n_head", "2", "--n_embd", "32")
    assert result.returncode == 0, result.stderr
    assert "linalg.matmul" in result.stdout and "transformer." not in result.stdout
    step = run_cli("ir", "--stage", "transformer", "--entry", "step")
    assert step.returncode == 0 and "transformer.cache_update" in step.stdout


def test_bad_flags_are_reported():
    bad_value = run_cli("generate", "--max_new_tokens", "-3")
    assert bad_value.returncode != 0 and "max_new_tokens" in bad_value.stderr
    unknown = run_cli("generate", "--temprature", "1")
    assert unknown.returncode != 0 and "temprature" in unknown.stderr
    no_command = run_cli()
    assert no_command.returncode != 0 and "expected a command" in no_command.stderr
    missing = run_cli("generate", "--model", "/nonexistent/dir")
    assert missing.returncode == 1 and "no such model directory: /nonexistent/dir" in missing.stderr
    bad_stage = run_cli("ir", "--stage", "asm")
    assert bad_stage.returncode != 0 and "stage" in bad_stage.stderr


def test_model_directory_with_tokenizer_json(tmp_path):
    """--model DIR uses DIR/tokenizer.json through the tokenizers package."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel

    words = ["[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    torch.manual_seed(0)
    GPT2LMHeadModel(
        GPT2Config(
            n_layer=1, n_head=2, n_embd=32, vocab_size=len(words), n_positions=64, bos_token_id=0, eos_token_id=0
        )
    ).save_pretrained(tmp_path)

    loaded = gpt.tokenizer.tokenizer_for(str(tmp_path), len(words))
    assert isinstance(loaded, gpt.HFTokenizer)
    assert loaded.encode("the cat sat") == [1, 2, 3]
    result = run_cli(
        "generate", "--model", str(tmp_path), "--prompt", "the cat", "--max_new_tokens", "5", "--temperature", "0"
    )
    assert result.returncode == 0, result.stderr
    model = gpt.GPT.from_pretrained(str(tmp_path))
    expected = loaded.decode(model.generate([1, 2], max_new_tokens=5))
    assert result.stdout.startswith("the cat") and expected in result.stdout
    assert "prompt: 2 tokens" in result.stdout


def test_byte_tokenizer_round_trips_and_never_fails():
    tok = gpt.ByteTokenizer()
    assert tok.decode(tok.encode("héllo ∑")) == "héllo ∑"
    assert tok.decode([0xE2, 0x88]) == "\ufffd"  # a cut multi-byte character decodes, not raises


def test_stages_of_deeply_nested_input_is_an_error_not_a_crash(tmp_path):
    # 8,000 nested modules once overflowed the parser's stack (a segfault, no message).
    deep = tmp_path / "deep.mlir"
    deep.write_text("module {\n" * 8000 + "}\n" * 8000)
    result = run_cli("stages", str(deep))
    assert result.returncode == 1, result.stderr
    assert "gpt: error: failed to parse the input IR" in result.stderr
    assert "nests brackets more than 1000 levels deep" in result.stderr


def test_cache_refuses_a_cache_dir_that_is_a_file_or_missing(tmp_path):
    """`cache --list --cache_dir X` once printed "0 entries" with rc 0 for a file or a typo."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    for flag in ("--list", "--clear"):
        missing = run_cli("cache", flag, "--cache_dir", str(tmp_path / "missing"))
        assert missing.returncode == 1 and f"--cache_dir {tmp_path / 'missing'} does not exist" in missing.stderr
        not_a_dir = run_cli("cache", flag, "--cache_dir", str(a_file))
        assert not_a_dir.returncode == 1 and f"--cache_dir {a_file} is not a directory" in not_a_dir.stderr
    assert a_file.exists() and not (tmp_path / "missing").exists()
    empty = run_cli("cache", "--list", "--cache_dir", str(tmp_path))
    assert empty.returncode == 0 and f"0 entries, 0.00 MiB in {tmp_path}" in empty.stdout
    # Entries are keyed by this build: the listing says which one.
    assert f"this compiler: {gpt.disk_cache.compiler_identity()}" in empty.stdout
    assert gpt.disk_cache.compiler_identity().startswith("build-id:")
