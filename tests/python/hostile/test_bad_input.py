"""Runs every row of the bad-input table (docs/BAD_INPUT.md): each input must raise the exception
(or exit with the status) the table shows, with a message that contains the table's text. The
table is the documentation; this test keeps it true."""

import builtins
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest
from safetensors.numpy import save_file

import gpt
import gpt.chat
from checkpoints import hf_config, rewrite
from gpt import GPT, CompileOptions, CompilerError, GPTConfig, ModelFileError, run_pipeline  # noqa: F401 (the table)
from gpt.gguf_file import save_gguf

TABLE_PAGE = os.path.join("docs", "BAD_INPUT.md")  # in the runfiles, beside tools/gpt-opt
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
BEGIN, END = "<!-- bad-input-table: begin", "<!-- bad-input-table: end"


def table_rows():
    with open(TABLE_PAGE, encoding="utf-8") as f:
        text = f.read()
    body = text[text.index(BEGIN) : text.index(END)].splitlines()[3:]  # after the marker and the header
    rows = []
    for line in body:
        # Cells are split on | that is not escaped (\|, inside a message); inputs are `code`.
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


ROWS = table_rows()


class InputMakers:
    """The table's makers of files, directories and states (each in a fresh path under `scratch`)."""

    def __init__(self, cfg, model, weights, scratch):
        self.cfg, self.model, self.weights, self.scratch = cfg, model, weights, scratch
        self.made = iter(range(10**6))

    def weights_with(self, name, value):
        return {**self.weights, name: value}

    def world_writable_directory(self):
        path = self.scratch / f"shared{next(self.made)}"
        path.mkdir()
        path.chmod(0o777)
        return str(path)

    def cache_in_use_by_another_thread(self):
        cache = self.model.new_cache()
        claimer = threading.Thread(target=cache._claim._lock.acquire)  # a call on another thread holds it
        claimer.start()
        claimer.join()
        return cache

    def checkpoint(self, config=None, without=None, dtype=None, truncated=False, linked_out=None, fifo=None):
        """A nano GPT-2 directory; `linked_out`: that file a link to a copy outside the directory;
        `fifo`: that file a FIFO (which nothing ever writes)."""
        directory = self.scratch / f"checkpoint{next(self.made)}"
        directory.mkdir()
        hf = hf_config(self.cfg)
        for key, value in (config or {}).items():
            if value is None:
                hf.pop(key, None)
            else:
                hf[key] = value
        (directory / "config.json").write_text(json.dumps(hf))
        tensors = {name: np.ascontiguousarray(value) for name, value in self.weights.items()}
        if dtype is not None:
            tensors["transformer.wte.weight"] = tensors["transformer.wte.weight"].astype(dtype)
        save_file(tensors, str(directory / "model.safetensors"))
        if truncated:
            data = (directory / "model.safetensors").read_bytes()
            (directory / "model.safetensors").write_bytes(data[: len(data) // 2])
        if without:
            (directory / without).unlink()
        if linked_out:
            outside = self.scratch / f"outside{next(self.made)}"
            (directory / linked_out).rename(outside)
            (directory / linked_out).symlink_to(outside)
        if fifo:
            (directory / fifo).unlink()
            os.mkfifo(directory / fifo)
        return str(directory)

    def llama_checkpoint(self, config=None, nan=None):
        """A nano Llama directory (config.json's keys changed as `config` says; None drops one),
        with NaN in the tensor `nan`."""
        llama = GPTConfig(
            n_layer=1, n_head=4, n_kv_head=2, n_embd=32, n_ff=48, vocab_size=64, block_size=16, architecture="llama"
        )
        hf = dict(
            model_type="llama",
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=48,
            vocab_size=64,
            max_position_embeddings=16,
        )
        return self._hf_directory("llama", llama, hf, config, nan)

    def gemma_checkpoint(self, config=None, nan=None):
        """A nano Gemma 3 directory (test_gemma3.py's model: 3 layers, the middle one global, wide
        heads), changed as llama_checkpoint's."""
        gemma = GPTConfig(
            n_layer=3,
            n_head=4,
            n_kv_head=2,
            n_embd=64,
            head_dim=32,
            n_ff=96,
            vocab_size=64,
            block_size=16,
            architecture="gemma3",
            layer_windows=(4, 0, 4),
        )
        hf = dict(
            model_type="gemma3_text",
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=64,
            head_dim=32,
            intermediate_size=96,
            vocab_size=64,
            max_position_embeddings=16,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            tie_word_embeddings=True,
        )
        return self._hf_directory("gemma", gemma, hf, config, nan)

    def _hf_directory(self, kind, model_config, hf, changes, nan):
        """A directory of config.json (`hf` with `changes`; None drops a key) and weights of 0.01
        for `model_config`, NaN in the tensor `nan`."""
        directory = self.scratch / f"{kind}{next(self.made)}"
        directory.mkdir()
        for key, value in (changes or {}).items():
            if value is None:
                hf.pop(key, None)
            else:
                hf[key] = value
        (directory / "config.json").write_text(json.dumps(hf))
        tensors = {
            name: np.full(shape, 0.01, np.float32) for name, shape in gpt.architectures.hf_shapes(model_config).items()
        }
        if nan:
            tensors[nan].flat[0] = np.nan
        save_file(tensors, str(directory / "model.safetensors"))
        return str(directory)

    def gguf(self, architecture="gpt2", truncated=False, context_length=None):
        path = self.scratch / f"model{next(self.made)}.gguf"
        save_gguf(self.weights, self.cfg, path, "f32")
        if architecture != "gpt2" or context_length:
            import gguf as gguf_package

            changed = self.scratch / f"changed{next(self.made)}.gguf"
            keys = (
                {"gpt2.context_length": (context_length, gguf_package.GGUFValueType.UINT32)} if context_length else {}
            )
            rewrite(path, changed, arch=architecture, set_keys=keys)
            path = changed
        if truncated:
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 3])
        return str(path)

    def regression(self, name):
        """A file of the model-file fuzzer's regression corpus; a HF directory (.hf.tar.gz) unpacked."""
        path = os.path.join("tests", "fuzz", "loader_regressions", name)
        if not name.endswith(".hf.tar.gz"):
            return path
        directory = self.scratch / f"regression{next(self.made)}"
        with tarfile.open(path) as archive:
            archive.extractall(directory, filter="data")
        return str(directory)


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    """The names the table's inputs use (the paragraph above the table in docs/BAD_INPUT.md explains them)."""
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)
    options = CompileOptions(disk_cache=False)
    model, other = GPT.random(cfg, options=options), GPT.random(cfg, seed=1, options=options)
    full_cache = model.new_cache(4)
    model.prefill([1, 2, 3, 4], full_cache)
    weights = model.state_dict()
    scratch = tmp_path_factory.mktemp("bad-input")
    makers = InputMakers(cfg, model, weights, scratch)
    return dict(
        globals(),
        np=np,
        replace=dataclasses.replace,
        cfg=cfg,
        model=model,
        other=other,
        full_cache=full_cache,
        GPT3=GPTConfig(n_layer=96, n_head=96, n_embd=12288, vocab_size=50257, block_size=2048),
        weights_with=makers.weights_with,
        world_writable_directory=makers.world_writable_directory,
        cache_in_use_by_another_thread=makers.cache_in_use_by_another_thread,
        checkpoint=makers.checkpoint,
        llama_checkpoint=makers.llama_checkpoint,
        gemma_checkpoint=makers.gemma_checkpoint,
        gguf=makers.gguf,
        regression=makers.regression,
        ChatTemplateError=gpt.chat.ChatTemplateError,
    )


def test_the_table_covers_each_surface():
    inputs = [row[0] for row in ROWS]
    assert len(ROWS) >= 50
    for surface in ("GPTConfig(", "CompileOptions(", "model.forward", "model.decode", "model.generate", "run_pipeline"):
        assert any(surface in entry for entry in inputs), surface
    for surface in ("from_pretrained(checkpoint", "from_gguf(gguf", "$ python -m gpt", "$ gpt-opt"):
        assert any(entry.startswith(surface) or surface in entry for entry in inputs), surface


@pytest.mark.parametrize("entry, outcome, message", ROWS, ids=[row[0][:80] for row in ROWS])
def test_bad_input(entry, outcome, message, namespace):
    if entry.startswith("$ "):
        command = shlex.split(entry[2:])
        env = dict(os.environ, PYTHONPATH=PACKAGE)
        if command[0] == "python":
            command[0] = sys.executable
        elif command[0] == "gpt-opt":
            command[0] = os.path.join("tools", "gpt-opt")
            # Under --config=asan gpt-opt carries its own sanitizer runtime: not the preloaded one.
            env.pop("LD_PRELOAD", None)
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
        assert outcome == f"exit {result.returncode}", result.stderr
        assert message in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        if command[1:3] == ["-m", "gpt"]:  # its input errors are one line (python/gpt/cli.py)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("gpt: error: "), result.stderr
        return
    expected = namespace[outcome] if outcome in namespace else getattr(builtins, outcome)
    with pytest.raises(BaseException) as raised:
        eval(entry, namespace)  # the table's input, as written
    assert type(raised.value) is expected, f"{entry} raised {type(raised.value).__name__}: {raised.value}"
    assert message in str(raised.value)
