"""A numpy emulator of an artifact's programs: each launch's `op` (the kernel family and its
parameters, docs/GPU.md) computed on host buffers, independently of the PTX.

Two uses: tests on machines with no GPU run a whole program here and compare its logits with the
CPU compiler's (that checks the dispatch formation: bindings, offsets, strides, fusion), and the
device check compares each GPU launch's output with the emulated one, which names the first
kernel that goes wrong."""

import numpy as np


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) widened exactly to float32."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


class Memory:
    """The artifact's buffers as host byte arrays, indexed like the manifest's `buffers`."""

    def __init__(self, manifest: dict, weights: dict[str, np.ndarray]):
        self.buffers = []
        for buffer in manifest["buffers"]:
            data = np.zeros(buffer["bytes"], dtype=np.uint8)
            if buffer["role"] == "weight":
                raw = np.ascontiguousarray(weights[buffer["name"]]).view(np.uint8).reshape(-1)
                data[: raw.size] = raw
            self.buffers.append(data)

    def floats(self, arg: dict, count: int, bf16: bool = False) -> np.ndarray:
        """`count` elements at the pointer `arg`, as float32 (a view for f32, a copy for bf16)."""
        data = self.buffers[arg["buffer"]]
        if bf16:
            return bf16_to_f32(data[arg["offset"] : arg["offset"] + 2 * count].view(np.uint16))
        return data[arg["offset"] : arg["offset"] + 4 * count].view(np.float32)

    def ints(self, arg: dict, count: int) -> np.ndarray:
        data = self.buffers[arg["buffer"]]
        return data[arg["offset"] : arg["offset"] + 8 * count].view(np.int64)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def _gather(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    tokens, width = op["tokens"], op["width"]
    table = memory.floats(args[0], op["rows"] * op["row_stride"], op["bf16"]).reshape(op["rows"], op["row_stride"])
    out = table[memory.ints(args[1], tokens), :width].astype(np.float32)
    if op["second"]:
        table2 = memory.floats(args[2], op["rows2"] * op["row_stride2"]).reshape(op["rows2"], op["row_stride2"])
        out = out + table2[memory.ints(args[3], tokens), :width]
    memory.floats(args[-1], tokens * width)[:] = out.reshape(-1)
    return args[-1], tokens * width


def _norm(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    rows, width, stride = op["rows"], op["width"], op["input_stride"]
    x = memory.floats(args[0], (rows - 1) * stride + width)
    x = np.stack([x[r * stride : r * stride + width] for r in range(rows)]).astype(np.float64)
    weight = memory.floats(args[1], width)
    if op["rms"]:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + op["epsilon"]) * weight
    else:
        centered = x - x.mean(-1, keepdims=True)
        y = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + op["epsilon"]) * weight
        y = y + memory.floats(args[2], width)
    memory.floats(args[-1], rows * width)[:] = y.astype(np.float32).reshape(-1)
    return args[-1], rows * width


def _matmul(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    rows, columns, valid, depth, stride = op["rows"], op["columns"], op["valid_columns"], op["depth"], op["a_stride"]
    a = memory.floats(args[0], (rows - 1) * stride + depth)
    a = np.stack([a[r * stride : r * stride + depth] for r in range(rows)]).astype(np.float64)
    b = memory.floats(args[1], valid * depth, op["bf16"]).reshape(valid, depth).astype(np.float64)
    out = np.zeros((rows, columns))
    out[:, :valid] = a @ b.T
    rest = iter(args[2:-1])
    if op["bias"]:
        out += memory.floats(next(rest), columns)
    if op["gelu"]:
        out = _gelu(out)
    if op["residual"]:
        r_stride = op["residual_stride"]
        residual = memory.floats(next(rest), (rows - 1) * r_stride + columns)
        out += np.stack([residual[r * r_stride : r * r_stride + columns] for r in range(rows)])
    memory.floats(args[-1], rows * columns)[:] = out.astype(np.float32).reshape(-1)
    return args[-1], rows * columns


def _strided(memory: Memory, arg: dict, strides, tokens: int, heads: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(index array [tokens, heads, size], the floats it indexes) of a (token, head) strided view."""
    index = (
        np.arange(tokens)[:, None, None] * strides[0]
        + np.arange(heads)[None, :, None] * strides[1]
        + np.arange(size)[None, None, :]
    )
    return index, memory.floats(arg, int(index.max()) + 1)


def _attention(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    tokens, heads, kv_heads, size, keys = op["tokens"], op["heads"], op["kv_heads"], op["head_size"], op["keys"]
    qi, qd = _strided(memory, args[0], op["q"], tokens, heads, size)
    ki, kd = _strided(memory, args[1], op["k"], keys, kv_heads, size)
    vi, vd = _strided(memory, args[2], op["v"], keys, kv_heads, size)
    q, k, v = qd[qi].astype(np.float64), kd[ki].astype(np.float64), vd[vi].astype(np.float64)
    offset = int(memory.ints(args[3], 1)[0]) if op["offset_from_memory"] else 0
    oi, od = _strided(memory, args[-1], op["out"], tokens, heads, size)
    group = heads // kv_heads
    out = np.zeros((tokens, heads, size))
    for h in range(heads):
        scores = (q[:, h] * op["scale"]) @ k[:, h // group].T  # [tokens, keys]
        visible = np.arange(keys)[None, :] <= offset + np.arange(tokens)[:, None]
        scores = np.where(visible, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, h] = (weights / weights.sum(-1, keepdims=True)) @ v[:, h // group]
    od[oi] = out.astype(np.float32)
    return args[-1], int(oi.max()) + 1


def _cache_write(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    tokens, kv_heads, size, length = op["tokens"], op["kv_heads"], op["head_size"], op["cache_length"]
    ui, ud = _strided(memory, args[0], op["update"], tokens, kv_heads, size)
    offset = int(memory.ints(args[1], 1)[0])
    cache = memory.floats(args[2], kv_heads * length * size).reshape(kv_heads, length, size)
    for t in range(tokens):
        if offset + t < length:
            cache[:, offset + t] = ud[ui[t]]
    return args[2], kv_heads * length * size


def _rope(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    heads, tokens, size = op["heads"], op["tokens"], op["head_size"]
    index, data = _strided(memory, args[0], op["input"], tokens, heads, size)  # [T, H, d]
    x = data[index].transpose(1, 0, 2)  # [H, T, d]
    angle = memory.ints(args[1], tokens).astype(np.float64)[:, None] * np.asarray(op["theta"])[None, :]
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)  # [T, d/2]
    half = size // 2
    if op["interleaved"]:
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        first, second = x[..., :half], x[..., half:]
    rotated_first = first * cos - second * sin
    rotated_second = second * cos + first * sin
    out = np.empty_like(x)
    if op["interleaved"]:
        out[..., 0::2], out[..., 1::2] = rotated_first, rotated_second
    else:
        out[..., :half], out[..., half:] = rotated_first, rotated_second
    memory.floats(args[-1], heads * tokens * size)[:] = out.reshape(-1)
    return args[-1], heads * tokens * size


def _swiglu(memory: Memory, op: dict, args: list) -> tuple[dict, int]:
    tokens, width = op["tokens"], op["width"]

    def rows(arg, stride):
        data = memory.floats(arg, (tokens - 1) * stride + width)
        return np.stack([data[t * stride : t * stride + width] for t in range(tokens)]).astype(np.float64)

    gate, up = rows(args[0], op["gate_stride"]), rows(args[1], op["up_stride"])
    memory.floats(args[-1], tokens * width)[:] = (gate * up / (1.0 + np.exp(-gate))).astype(np.float32).reshape(-1)
    return args[-1], tokens * width


_FAMILIES = {
    "gather": _gather,
    "norm": _norm,
    "matmul": _matmul,
    "attention": _attention,
    "cache_write": _cache_write,
    "rope": _rope,
    "swiglu": _swiglu,
}


def emulate_launch(memory: Memory, launch: dict) -> tuple[dict, int]:
    """Runs one launch on `memory`; returns (pointer, float count) of the region it wrote."""
    return _FAMILIES[launch["op"]["family"]](memory, launch["op"], launch["args"])


def write_inputs(memory: Memory, program: dict, ids, positions, last_row: int = 0, cache_offset: int = 0) -> None:
    """The host's part of a launch: the program's i64 inputs, padded to its token count."""
    tokens = program["tokens"]
    padded_ids = np.zeros(tokens, dtype=np.int64)
    padded_ids[: len(ids)] = ids
    padded_positions = np.zeros(tokens, dtype=np.int64)
    padded_positions[: len(positions)] = positions
    inputs = program["inputs"]
    memory.ints(inputs["token_ids"], tokens)[:] = padded_ids
    memory.ints(inputs["positions"], tokens)[:] = padded_positions
    if "last_row" in inputs:
        memory.ints(inputs["last_row"], 1)[:] = last_row
        memory.ints(inputs["cache_offset"], 1)[:] = cache_offset


def read_logits(memory: Memory, program: dict, rows: int, vocab_size: int) -> np.ndarray:
    logits = program["logits"]
    data = memory.floats(logits, logits["rows"] * logits["row_stride"]).reshape(logits["rows"], logits["row_stride"])
    return data[:rows, :vocab_size].copy()


def run_program(memory: Memory, program: dict) -> None:
    for launch in program["launches"]:
        emulate_launch(memory, launch)
