"""The compiler's one weight-format table (cc/kernels/WeightFormats.h), as _gpt.weight_formats()
gives it: its rows agree with the kernels that make and read each format, and every Python table of
formats (config, resources, kept_formats, gguf_file) is read from it."""

import gpt_kernels_testing
import numpy as np
import pytest

import gpt
from gpt import _gpt, config, gguf_file, gguf_llama, kept_formats, resources
from shapes import NANO, exercising_weights

ROWS = {row[0]: kept_formats.FormatRow(*row) for row in _gpt.weight_formats()}
BLOCK_FORMATS = [name for name, row in ROWS.items() if row.block_values > 1]
K, N, WIDTH = 64, 16, 8


def test_the_table_has_one_row_per_format_in_enum_order():
    assert list(ROWS) == ["f32", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "q5_k", "q5_0", "q5_1"]
    assert BLOCK_FORMATS == ["q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "q5_k", "q5_0", "q5_1"]


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_block_bytes_are_what_quantize_writes_per_block(name):
    # A block is its codes (code_bits each, as the lanes hold them) and fp16 fields: one scale, and
    # a min beside it when the row says so (q4_k and q5_k: the model stores their 6-bit sub-block
    # scales and mins a byte each, the file packs them in 12 bytes; q6_k: its 16 int8 scales and d,
    # as the file).
    row = ROWS[name]
    k = max(K, row.block_values)
    codes, scales = gpt_kernels_testing.quantize(name, np.random.default_rng(0).standard_normal((k, N)))
    assert codes.shape == (k, N)
    blocks = k // row.block_values * N
    fp16_fields = scales.size // blocks
    assert fp16_fields == row.scale_rows == {"q4_k": 10, "q5_k": 10, "q6_k": 9}.get(name, 2 if row.has_mins else 1)
    packed_scales = 16 if name in ("q4_k", "q5_k") else 2 * fp16_fields  # d, dmin and 12 bytes of 6-bit fields
    assert (
        row.code_bits == {"q6_k": 6, "q5_k": 5, "q5_0": 5, "q5_1": 5}.get(name)
        or row.code_bits == 32 // row.rows_per_word
    )
    assert row.block_bytes == row.block_values * row.code_bits // 8 + packed_scales


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_repack_reads_rows_of_block_bytes_into_lanes_of_rows_per_word(name):
    row = ROWS[name]
    k = max(K, row.block_values)
    blocks = np.zeros((N, k // row.block_values * row.block_bytes), np.uint8)
    lanes, scales = gpt_kernels_testing.repack_rows(name, blocks, k, N, WIDTH)
    assert lanes.shape == (N // WIDTH, k * row.code_bits // 32, WIDTH)
    expected = {
        "q4_1": (2, WIDTH),
        "q5_1": (2, WIDTH),
        "q4_k": (k // 256 * row.scale_rows, WIDTH),
        "q5_k": (k // 256 * row.scale_rows, WIDTH),
        "q6_k": (k // 256 * row.scale_rows, WIDTH),
    }.get(name, (k // row.block_values, WIDTH))
    assert scales.shape[-2:] == expected
    with pytest.raises(ValueError):  # a byte short of whole blocks
        gpt_kernels_testing.repack_rows(name, blocks[:, :-1].copy(), k, N, WIDTH)


def test_bf16_lanes_hold_rows_per_word_rows():
    lanes = gpt_kernels_testing.pack_lanes("bf16", np.ones((K, N), np.float32), WIDTH)
    assert lanes.shape == (N // WIDTH, K // ROWS["bf16"].rows_per_word, WIDTH)


@pytest.mark.parametrize("name", list(ROWS))
def test_the_lm_head_is_stored_in_the_rows_head_format(name):
    # The compiled model's own copy of the LM head takes D * V' / rows_per_word words of its head
    # format (a 4-bit model's head is q8_0: 4 rows a word, not 8). A K-quant's K is whole super-blocks.
    cfg = gpt.GPTConfig(**(NANO | {"n_embd": 256} if name in ("q4_k", "q5_k", "q6_k") else NANO))
    model = gpt.GPT(cfg, exercising_weights(cfg), gpt.CompileOptions(weights=name, disk_cache=False))
    stored = {argument[0]: argument[2] for argument in model._compiled.stored_arguments()}
    head = ROWS[ROWS[name].head_format]
    multiple = _gpt.tile_parameters()["vocab_multiple"]
    padded_vocab = -(-cfg.vocab_size // multiple) * multiple
    assert stored["lm_head.weight_t"] == cfg.n_embd * padded_vocab // head.rows_per_word * 4
    assert head.name == ("q8_0" if name in ("q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "q5_0", "q5_1") else name)


def test_precision_order_is_bits_per_weight_order():
    # A more precise format never has fewer bits per weight (formats of equal bits rank by their
    # numbers: q4_0 below q4_k below q4_1, q5_0 below q5_k below q5_1).
    by_precision = sorted(ROWS, key=lambda name: ROWS[name].precision)
    bits = [ROWS[name].block_bytes / ROWS[name].block_values for name in by_precision]
    assert bits == sorted(bits)
    assert by_precision[:6] == ["q4_0", "q4_k", "q4_1", "q5_0", "q5_k", "q5_1"]


def test_the_python_tables_are_the_rows():
    assert config.WEIGHT_FORMATS == tuple(ROWS)
    assert set(gguf_file.FORMATS) == {*ROWS, "f16"} - {"q4_k", "q5_k", "q6_k"}  # gguf's Python quantizer has none
    assert kept_formats.FORMAT_ROWS == tuple(ROWS.values())
    assert kept_formats.KEPT_QUANTIZED == tuple(BLOCK_FORMATS)
    assert kept_formats.BLOCK_BYTES == {name: ROWS[name].block_bytes for name in BLOCK_FORMATS}
    assert kept_formats._PRECISION == tuple(sorted(BLOCK_FORMATS, key=lambda name: ROWS[name].precision))
    assert resources._FILE_BYTES_PER_WEIGHT == {name: row.block_bytes / row.block_values for name, row in ROWS.items()}
    # What the model stores: lane words and 16-bit scales (q4_k's 6-bit fields a byte each).
    assert resources._BYTES_PER_WEIGHT == {
        name: row.code_bits / 8 + 2 * row.scale_rows / row.block_values for name, row in ROWS.items()
    }
    assert resources._HEAD_FORMAT == {name: row.head_format for name, row in ROWS.items()}
    for name in BLOCK_FORMATS:
        for type_name in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"):
            expected = type_name in ROWS[name].converts_from
            assert kept_formats.convertible(type_name.upper(), name) == expected, (type_name, name)
    # Each GGUF type is kept in the least precise format that converts it.
    assert kept_formats.NEAREST_KEPT == {
        "Q8_0": "q8_0",
        "Q4_0": "q4_0",
        "Q4_1": "q4_1",
        "Q4_K": "q4_k",
        "Q5_0": "q5_0",
        "Q5_1": "q5_1",
        "Q5_K": "q5_k",
        "Q6_K": "q6_k",
    }
    # Every GGUF block type is a kept format of its own: none is given by its own name to be kept
    # in another.
    assert kept_formats.REPACKED_AS == {}


def test_converts_from_is_what_set_weights_repacks():
    # A type the row does not list is refused by the repacking, naming the conversions it has.
    cfg = gpt.GPTConfig(**NANO)
    model = gpt.GPT(cfg, exercising_weights(cfg), gpt.CompileOptions(weights="q4_0", disk_cache=False))
    assert "q4_1" not in ROWS["q4_0"].converts_from
    name = "transformer.h.0.mlp.c_proj.weight"
    weights = [exercising_weights(cfg)[n] for n, _ in model._compiled.supplied_parameters()]
    blocks = np.zeros((cfg.n_embd, 4 * cfg.n_embd // 32 * ROWS["q4_1"].block_bytes), np.uint8)
    with pytest.raises(ValueError, match="q4_0, q4_k, q5_0, q5_k and q6_k only themselves"):
        model._compiled.set_weights(weights, {name: ("q4_0:q4_1", [blocks])})


def test_set_weights_refuses_rows_permuted_in_heads_of_an_odd_row_count():
    # A llama file's q/k rows are read in the model's order within each head (its rows in pairs);
    # a part whose heads hold one row each has no such order and is refused, not read past.
    cfg = gpt.GPTConfig(**NANO)
    model = gpt.GPT(cfg, exercising_weights(cfg), gpt.CompileOptions(weights="q8_0", disk_cache=False))
    name = "transformer.h.0.mlp.c_proj.weight"
    weights = [exercising_weights(cfg)[n] for n, _ in model._compiled.supplied_parameters()]
    blocks = np.zeros((cfg.n_embd, 4 * cfg.n_embd // 32 * ROWS["q8_0"].block_bytes), np.uint8)
    one_row_heads = gguf_llama.UnpermutedRows(blocks, heads=cfg.n_embd)
    with pytest.raises(ValueError, match=f"{cfg.n_embd} rows is not an even row count for each of {cfg.n_embd}"):
        model._compiled.set_weights(weights, {name: ("q8_0", one_row_heads)})
