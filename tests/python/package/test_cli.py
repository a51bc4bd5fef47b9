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
    assert missing.returncode == 2 and "no such model directory: /nonexistent/dir" in missing.stderr
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
    assert result.returncode == 2, result.stderr
    assert "gpt: error: failed to parse the input IR" in result.stderr
    assert "nests brackets more than 1000 levels deep" in result.stderr


def test_cache_refuses_a_cache_dir_that_is_a_file_or_missing(tmp_path):
    """`cache --list --cache_dir X` once printed "0 entries" with rc 0 for a file or a typo."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    for flag in ("--list", "--clear"):
        missing = run_cli("cache", flag, "--cache_dir", str(tmp_path / "missing"))
        assert missing.returncode == 2 and f"--cache_dir {tmp_path / 'missing'} does not exist" in missing.stderr
        not_a_dir = run_cli("cache", flag, "--cache_dir", str(a_file))
        assert not_a_dir.returncode == 2 and f"--cache_dir {a_file} is not a directory" in not_a_dir.stderr
    assert a_file.exists() and not (tmp_path / "missing").exists()
    empty = run_cli("cache", "--list", "--cache_dir", str(tmp_path))
    assert empty.returncode == 0 and f"0 programs, 0.00 MiB in {tmp_path}" in empty.stdout
    assert f"0 packed weights, 0.00 MiB in {tmp_path / 'weights'}" in empty.stdout
    # Entries are keyed by this build: the listing says which one.
    assert f"this compiler: {gpt.disk_cache.compiler_identity()}" in empty.stdout
    assert gpt.disk_cache.compiler_identity().startswith("build-id:")


def assert_one_error_line(result, *words):
    """An input error: exit status 2 and one line on stderr, `gpt: error: ...`, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("gpt: error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_input_errors_are_one_line_and_exit_2(tmp_path):
    # Flag errors were absl's two lines ("FATAL Flags parsing error: ...") and a bad command printed
    # the whole usage, both with status 1; an --out that is a file or a link printed a traceback.
    assert_one_error_line(run_cli("generate", "--temprature", "1"), "temprature")
    assert_one_error_line(run_cli("generate", "--temperature", "-1"), "flag --temperature=-1")
    assert_one_error_line(run_cli("ir", "--stage", "asm"), "--stage")
    assert_one_error_line(run_cli(), "expected a command: generate, ir, stages, cache")
    assert_one_error_line(run_cli("stages"), "stages takes 1 positional argument(s)")
    assert_one_error_line(run_cli("stages", "/no/such.mlir"), "cannot read /no/such.mlir")
    a_file = tmp_path / "file"
    a_file.write_text("kept")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert_one_error_line(run_cli("export", "--out", str(a_file)), f"cannot export to {a_file}: it is a file")
    assert_one_error_line(
        run_cli("export", "--out", str(a_file / "artifact")), f"cannot export to {a_file / 'artifact'}: {a_file} is"
    )
    assert_one_error_line(run_cli("export", "--out", str(dangling)), f"cannot export to {dangling}: it is a symbolic")
    assert a_file.read_text() == "kept" and not (tmp_path / "nowhere").exists()


def test_export_checks_out_before_loading_the_model(tmp_path):
    """A bad --out is named before --model is read (or minutes spent compiling it)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(tmp_path / "victim")
    (tmp_path / "victim").write_text("kept")
    result = run_cli("export", "--model", "/no/such/dir", "--out", str(out))
    assert_one_error_line(result, f"cannot export to {out}: it is a directory whose manifest.json is a symbolic link")
    assert (tmp_path / "victim").read_text() == "kept"


def test_debug_adds_the_traceback():
    result = run_cli("generate", "--model", "/no/such/dir", "--debug")
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr and "FileNotFoundError" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "gpt: error: no such model directory: /no/such/dir"
    flag = run_cli("generate", "--temprature", "1", "--debug")
    assert flag.returncode == 2 and "Traceback" in flag.stderr
    assert flag.stderr.strip().splitlines()[-1].startswith("gpt: error: Unknown command line flag 'temprature'")


def test_a_gguf_file_without_a_vocabulary_is_refused_before_its_weights_load(tmp_path):
    """generate takes text; a benchmark file carries no vocabulary (tokenizer.ggml.model "none"). The
    error comes from the header alone: the file's first weight block has a NaN scale, which the load
    would refuse (ModelFileError) before a later tokenizer lookup could name the real problem."""
    import importlib.util

    import gguf

    spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
    make_gguf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_gguf)
    path = str(tmp_path / "no-vocab.gguf")
    make_gguf.write(path, make_gguf.Shape(2, 256, 4, 2, 512, 320, 256, 10000.0, True, None), "q8_0")
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.0.attn_q.weight")
    with open(path, "r+b") as f:
        f.seek(int(tensor.data_offset))
        f.write(b"\x00\x7e")  # the first Q8_0 block's fp16 scale: NaN
    result = run_cli("generate", "--model", path, "--prompt", "hi", "--max_new_tokens", "2")
    assert_one_error_line(result, f"no tokenizer: {path} has no tokenizer.json", "vocabulary of 320 is not bytes")
    assert "NaN" not in result.stderr
