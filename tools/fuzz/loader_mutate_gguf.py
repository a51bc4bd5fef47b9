"""The loader fuzzer's mutations of GGUF files (tools/fuzz/fuzz_loaders.py): metadata keys, values and
types, counts, tensor dimensions, types, offsets, bytes and block scales, tokenizer data, and for
the "model" kind the K-quant blocks' fields (d, dmin, sub-block scales, a type swapped for
another with its blocks regrown) that the C++ repacking reads."""

import copy
import functools
import random
import struct

from loader_formats import (
    ARRAY,
    INTEGER_TYPES,
    INTERESTING_FLOATS,
    INTERESTING_HALVES,
    INTERESTING_INTS,
    KNOWN_KEYS,
    SCALAR_FORMATS,
    STRING,
    GGUFDoc,
    Input,
    _float32_bits,
    kept_formats,
)
from loader_templates import CHATML, template_statement


def interesting_int(rng: random.Random, current: int | None = None) -> int:
    if current is not None and rng.random() < 0.4:
        return rng.choice(
            (current + 1, current - 1, current * 2, current // 2, current + rng.randint(-64, 64), -current)
        )
    return rng.choice(INTERESTING_INTS) if rng.random() < 0.8 else rng.getrandbits(rng.choice((8, 16, 32, 64)))


def random_text(rng: random.Random) -> bytes:
    choice = rng.randrange(8)
    if choice == 0:
        return b""
    if choice == 1:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))  # often not UTF-8
    if choice == 2:
        return rng.choice((b"gpt2", b"llama", b"none", b"no_vocab", b"gpt-2", b"llama3", b"\x00", "Ġ".encode()))
    if choice == 3:
        return b"x" * rng.choice((63, 64, 65, 1000, 70000))
    if choice == 4:
        return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 8))).encode()
    if choice == 5:
        return b"\xed\xa0\x80"  # an encoded surrogate: not UTF-8
    if choice == 6:
        return b" ".join(rng.choice((b"a", b"b", "Ġ".encode(), b"t", b"he", b"")) for _ in range(rng.randint(1, 3)))
    return rng.choice((b"\xff", b"\xc3", b"a\x00b", b"<|endoftext|>"))


def random_value(rng: random.Random, value_type: int, depth: int = 0):
    if value_type in INTEGER_TYPES or value_type == 7:
        return interesting_int(rng)
    if value_type in (6, 12):
        return rng.choice(INTERESTING_FLOATS)
    if value_type == STRING:
        return random_text(rng)
    if value_type == ARRAY:
        element_type = rng.choice((4, 5, 6, STRING, ARRAY, 0)) if depth < 5 else 4
        return (element_type, [random_value(rng, element_type, depth + 1) for _ in range(rng.choice((0, 1, 2, 5)))])
    return 0


def mutate_value(rng: random.Random, value_type: int, value):
    """A mutated value of the same type (an array's elements mutated, dropped or repeated)."""
    if value_type == ARRAY and isinstance(value, tuple):
        element_type, items = value[0], list(value[1])
        choice = rng.randrange(6)
        if choice == 0 and items:
            i = rng.randrange(len(items))
            items[i] = mutate_value(rng, element_type, items[i])
        elif choice == 1 and items:
            del items[rng.randrange(len(items)) :]
        elif choice == 2 and items:
            items.append(items[rng.randrange(len(items))])
        elif choice == 3:
            items = []
        elif choice == 4 and items:
            i, j = rng.randrange(len(items)), rng.randrange(len(items))
            items[i] = items[j]  # a repeated token, a repeated merge
        else:
            element_type = rng.choice((0, 1, 4, 5, 6, 10, STRING, ARRAY, 13, 2**32 - 1))
            items = [random_value(rng, element_type, 1) for _ in range(rng.choice((0, 1, 3)))]
        return (element_type, items)
    if value_type == STRING:
        if isinstance(value, bytes) and value and rng.random() < 0.5:
            out = bytearray(value)
            out[rng.randrange(len(out))] = rng.getrandbits(8)
            return bytes(out)
        return random_text(rng)
    if value_type in (6, 12):
        return rng.choice(INTERESTING_FLOATS)
    return interesting_int(rng, value if isinstance(value, int) else None)


def find_kv(doc: GGUFDoc, key: bytes):
    return next((kv for kv in doc.kvs if kv[0] == key), None)


def token_strings(doc: GGUFDoc) -> list[bytes]:
    kv = find_kv(doc, b"tokenizer.ggml.tokens")
    tokens = [t for t in kv[2][1] if isinstance(t, bytes)] if kv and isinstance(kv[2], tuple) else []
    return tokens or [b"a"]


def _metadata_value(rng: random.Random, item: Input) -> str:
    kv = rng.choice(item.doc.kvs)
    kv[2] = mutate_value(rng, kv[1], kv[2])
    return f"value of {kv[0][:40]!r}"


def _metadata_type(rng: random.Random, item: Input) -> str:
    kv = rng.choice(item.doc.kvs)
    kv[1] = rng.choice((*SCALAR_FORMATS, STRING, ARRAY, 13, 255, 2**31))
    kv[2] = random_value(rng, kv[1])
    return f"type of {kv[0][:40]!r}"


def _known_key(rng: random.Random, item: Input) -> str:
    """A key the loaders read, set to anything."""
    key = rng.choice(KNOWN_KEYS).encode()
    value_type = rng.choice((4, 4, 5, 10, 6, 12, STRING, ARRAY, 7))
    kv = find_kv(item.doc, key)
    if kv is None:
        item.doc.kvs.append(kv := [key, value_type, None])
    kv[1], kv[2] = value_type, random_value(rng, value_type)
    return f"known key {key!r}"


def _key_list(rng: random.Random, item: Input) -> str:
    """A key dropped, repeated or added."""
    kvs = item.doc.kvs
    operation = rng.randrange(3)
    if operation == 0 and kvs:
        del kvs[rng.randrange(len(kvs))]
        return "key dropped"
    if operation == 1 and kvs:
        kvs.insert(rng.randrange(len(kvs) + 1), copy.deepcopy(rng.choice(kvs)))
        return "key repeated"
    value_type = rng.choice((*SCALAR_FORMATS, STRING, ARRAY))
    kvs.insert(rng.randrange(len(kvs) + 1), [random_text(rng), value_type, random_value(rng, value_type)])
    return "key added"


def _tokenizer_data(rng: random.Random, item: Input) -> str:
    return mutate_tokenizer(rng, item.doc)


def _dimensions(rng: random.Random, item: Input) -> str:
    tensor = rng.choice(item.doc.tensors)
    operation = rng.randrange(4)
    if operation == 0 and tensor.dims:
        i = rng.randrange(len(tensor.dims))
        tensor.dims[i] = interesting_int(rng, tensor.dims[i])
    elif operation == 1:
        tensor.dims.append(rng.choice((1, 1, 2, 0, 2**32)))
    elif operation == 2 and tensor.dims:
        tensor.dims.pop()
    else:
        tensor.dims.reverse()
    return f"dims of {tensor.name!r}"


def _tensor_type_id(rng: random.Random, item: Input) -> str:
    """A tensor type id changed, the data left as it is."""
    tensor = rng.choice(item.doc.tensors)
    tensor.type = rng.choice((*range(0, 42), 42, 255, 2**31, 2**32 - 1)) if rng.random() < 0.7 else tensor.type ^ 1
    return f"type of {tensor.name!r}"


def _tensor_converted(rng: random.Random, item: Input) -> str:
    """A tensor converted to another type the loader reads, consistently."""
    import gguf
    import numpy as np

    tensor = rng.choice(item.doc.tensors)
    # The float types, every block type the compiler keeps or transcodes, and two it refuses.
    target = rng.choice(("F32", "F16", "BF16", *half_fields(), "Q2_K", "I32"))
    kind = gguf.GGMLQuantizationType[target]
    try:
        with np.errstate(all="ignore"):
            values = gguf.quants.dequantize(
                np.frombuffer(tensor.data, np.uint8).reshape(list(tensor.dims[::-1][:-1]) + [-1]),
                gguf.GGMLQuantizationType(tensor.type),
            ).astype(np.float32)
            tensor.data = (
                gguf.quants.quantize(values, kind).tobytes() if target != "I32" else values.astype(np.int32).tobytes()
            )
            tensor.type = int(kind)
    except Exception:
        return "conversion skipped"
    return f"{tensor.name!r} as {target}"


def _tensor_offset(rng: random.Random, item: Input) -> str:
    tensor = rng.choice(item.doc.tensors)
    tensor.offset = interesting_int(rng, 0) if rng.random() < 0.5 else rng.choice((1, 16, 31, 32, 33, 2**63))
    return f"offset of {tensor.name!r}"


def _tensor_list(rng: random.Random, item: Input) -> str:
    """A tensor dropped, repeated, renamed or moved."""
    tensors = item.doc.tensors
    i = rng.randrange(len(tensors))
    operation = rng.randrange(4)
    if operation == 0:
        del tensors[i]
    elif operation == 1:
        tensors.insert(rng.randrange(len(tensors) + 1), copy.copy(tensors[i]))
    elif operation == 2:
        tensors[i].name = rng.choice(tensors).name if rng.random() < 0.5 else random_text(rng)
    else:
        tensors.insert(i, tensors.pop(rng.randrange(len(tensors))))
    return "tensor list"


def _tensor_bytes(rng: random.Random, item: Input) -> str:
    tensor = rng.choice(item.doc.tensors)
    data = bytearray(tensor.data)
    if data:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
    tensor.data = bytes(data)
    return f"bytes of {tensor.name!r}"


def _block_scale(rng: random.Random, item: Input) -> str:
    """A block scale (or a float) made NaN, inf, huge, subnormal."""
    import gguf

    tensor = rng.choice(item.doc.tensors)
    kind = block_type(tensor.type)
    data = bytearray(tensor.data)
    if not data or kind is None:
        return "no scale"
    block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    if kind == gguf.GGMLQuantizationType.F32:
        position = rng.randrange(len(data) // 4) * 4
        data[position : position + 4] = struct.pack("<I", _float32_bits(rng.choice(INTERESTING_FLOATS)))
    else:
        # Block-quantized types open with an fp16 scale (those with a min hold it at byte 2); F16
        # and BF16 are 2-byte values.
        position = rng.randrange(max(1, len(data) // block_bytes)) * block_bytes
        position += rng.choice((0, 2)) if block > 1 else 0
        data[position : position + 2] = struct.pack("<H", rng.choice(INTERESTING_HALVES))
    tensor.data = bytes(data)
    return f"scale of {tensor.name!r}"


def _tensor_size(rng: random.Random, item: Input) -> str:
    """Tensor data cut or grown."""
    tensor = rng.choice(item.doc.tensors)
    tensor.data = tensor.data[: rng.randrange(len(tensor.data) + 1)] if rng.random() < 0.5 else tensor.data * 2
    return f"size of {tensor.name!r}"


def _header_counts(rng: random.Random, item: Input) -> str:
    """The key count, the tensor count or the version."""
    doc = item.doc
    operation = rng.randrange(3)
    if operation == 0:
        doc.n_kv = interesting_int(rng, len(doc.kvs))
        return "key count"
    if operation == 1:
        doc.n_tensors = interesting_int(rng, len(doc.tensors))
        return "tensor count"
    doc.version = rng.choice((0, 1, 2, 3, 4, 0x03000000, 2**32 - 1))
    return "version"


def _alignment(rng: random.Random, item: Input) -> str:
    kv = find_kv(item.doc, b"general.alignment")
    if kv is None:
        item.doc.kvs.append(kv := [b"general.alignment", 4, 32])
    kv[1], kv[2] = rng.choice((4, 4, 4, 5, 10)), rng.choice((0, 1, 2, 3, 8, 16, 24, 64, 2**31, 2**32 - 1))
    return "alignment"


def _nested_arrays(rng: random.Random, item: Input) -> str:
    items = (ARRAY, [(4, list(range(rng.choice((0, 1, 3))))) for _ in range(rng.choice((1, 2, 4)))])
    for _ in range(rng.randrange(6)):
        items = (ARRAY, [items])
    item.doc.kvs.insert(rng.randrange(len(item.doc.kvs) + 1), [random_text(rng) or b"k", ARRAY, items])
    return "nested arrays"


def _kept_format(rng: random.Random, item: Input) -> str:
    item.keep = rng.choice((None, *kept_formats()))
    return f"kept {item.keep}"


# (mutation, weight, needs keys, needs tensors): the weights are the shares each had of old.
GGUF_MUTATIONS = (
    (_metadata_value, 1, True, False),
    (_metadata_type, 1, True, False),
    (_known_key, 1, False, False),
    (_key_list, 3, False, False),
    (_tokenizer_data, 5, False, False),
    (_dimensions, 1, False, True),
    (_tensor_type_id, 1, False, True),
    (_tensor_converted, 1, False, True),
    (_tensor_offset, 1, False, True),
    (_tensor_list, 1, False, True),
    (_tensor_bytes, 1, False, True),
    (_block_scale, 2, False, True),
    (_tensor_size, 1, False, True),
    (_header_counts, 3, False, False),
    (_alignment, 1, False, False),
    (_nested_arrays, 1, False, False),
    (_kept_format, 1, False, False),
)


def mutate_gguf(rng: random.Random, item: Input) -> str:
    """One structural mutation of a GGUF input; returns what it did (a mutation that needs keys
    or tensors the file has none of changes the kept format instead)."""
    mutations = [entry[0] for entry in GGUF_MUTATIONS]
    mutation = rng.choices(mutations, weights=[entry[1] for entry in GGUF_MUTATIONS])[0]
    _, _, needs_keys, needs_tensors = GGUF_MUTATIONS[mutations.index(mutation)]
    if (needs_keys and not item.doc.kvs) or (needs_tensors and not item.doc.tensors):
        mutation = _kept_format
    return mutation(rng, item)


def block_type(type_id: int):
    """The gguf.GGMLQuantizationType of a tensor type id, or None for an id gguf does not know."""
    import gguf

    known = {int(t) for t in gguf.GGMLQuantizationType}
    return gguf.GGMLQuantizationType(type_id) if type_id in known else None


# -- the "model" kind: K-quant blocks, as the C++ repacking reads them ---------------------------

# The K-quants' sub-block scales' bytes (6-bit scales and mins packed in 12 bytes; Q6_K: 16 int8 scales).
SUB_SCALES = {"Q4_K": range(4, 16), "Q5_K": range(4, 16), "Q6_K": range(192, 208)}


@functools.cache
def half_fields() -> dict[str, tuple[int, ...]]:
    """Byte offsets of each block type's fp16 fields (scales, and mins or a K-quant's dmin), by type,
    for every type GPT.from_gguf keeps or transcodes (the others are dequantized at load): the
    compiler's block-type table (_gpt.gguf_block_types)."""
    from gpt import _gpt

    return {name.upper(): tuple(fields.values()) for name, _values, _bytes, fields in _gpt.gguf_block_types()}


def _block_tensors(item: Input) -> list:
    return [t for t in item.doc.tensors if (kind := block_type(t.type)) is not None and kind.name in half_fields()]


def _block_field(rng: random.Random, item: Input) -> str:
    """An fp16 field of some blocks (d, dmin, m) made NaN, inf, the largest, subnormal, -0."""
    import gguf

    tensor = rng.choice(_block_tensors(item))
    kind = block_type(tensor.type)
    block_bytes = gguf.GGML_QUANT_SIZES[kind][1]
    data = bytearray(tensor.data)
    blocks = len(data) // block_bytes
    for _ in range(rng.choice((1, 1, 4, blocks))):
        position = rng.randrange(max(blocks, 1)) * block_bytes + rng.choice(half_fields()[kind.name])
        data[position : position + 2] = struct.pack("<H", rng.choice(INTERESTING_HALVES))
    tensor.data = bytes(data[: len(tensor.data)])
    return f"{kind.name} field of {tensor.name!r}"


def _sub_block_scales(rng: random.Random, item: Input) -> str:
    """A K-quant block's sub-block scales and mins (or Q6_K's int8 scales) set to extremes."""
    import gguf

    tensors = [t for t in _block_tensors(item) if block_type(t.type).name in SUB_SCALES]
    if not tensors:
        return _block_field(rng, item)
    tensor = rng.choice(tensors)
    kind = block_type(tensor.type)
    block_bytes = gguf.GGML_QUANT_SIZES[kind][1]
    data = bytearray(tensor.data)
    position = rng.randrange(max(len(data) // block_bytes, 1)) * block_bytes
    for offset in SUB_SCALES[kind.name]:
        if position + offset < len(data) and rng.random() < 0.5:
            data[position + offset] = rng.choice((0x00, 0xFF, 0x3F, 0x80, 0x7F, rng.getrandbits(8)))
    tensor.data = bytes(data)
    return f"{kind.name} sub-block scales of {tensor.name!r}"


def _retyped_blocks(rng: random.Random, item: Input) -> str:
    """A matrix given another block type with random blocks of that type's size (or its old bytes
    kept, a size that does not match), its fp16 fields finite."""
    import gguf
    import numpy as np

    tensor = rng.choice([t for t in item.doc.tensors if len(t.dims) == 2] or item.doc.tensors)
    kind = gguf.GGMLQuantizationType[rng.choice(tuple(half_fields()))]
    values, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    elements = 1
    for n in tensor.dims:
        elements *= n
    tensor.type = int(kind)
    if rng.random() < 0.2 or elements > 1 << 22:
        return f"{tensor.name!r} called {kind.name}"
    blocks = -(-elements // values)
    data = np.frombuffer(rng.randbytes(blocks * block_bytes), np.uint8).reshape(blocks, block_bytes).copy()
    for offset in half_fields()[kind.name]:
        data[:, offset : offset + 2] = np.full(blocks, 0.001, np.float16).view(np.uint8).reshape(blocks, 2)
    tensor.data = data.tobytes()
    return f"{tensor.name!r} as {kind.name} blocks"


def _row_length(rng: random.Random, item: Input) -> str:
    """A matrix's row length (ne[0]) made one that 256 (or 32) does not divide, or another
    multiple, its blocks resized to match or not."""
    import gguf

    tensor = rng.choice([t for t in item.doc.tensors if len(t.dims) == 2] or item.doc.tensors)
    if not tensor.dims:
        return "no dimensions"
    old = tensor.dims[0]
    tensor.dims[0] = rng.choice((32, 64, 128, 192, 255, 257, 288, 384, 512, 768, old * 2, old // 2, old + 32))
    kind = block_type(tensor.type)
    if kind is not None and rng.random() < 0.7:
        values, block_bytes = gguf.GGML_QUANT_SIZES[kind]
        rows = 1
        for n in tensor.dims[1:]:
            rows *= n
        size = rows * -(-tensor.dims[0] // values) * block_bytes
        tensor.data = (tensor.data * (size // max(len(tensor.data), 1) + 1))[:size] if size < 1 << 24 else b""
    return f"row length of {tensor.name!r}"


def _weights_choice(rng: random.Random, item: Input) -> str:
    """CompileOptions.weights: "auto" (None) or a format every matrix is converted to."""
    item.keep = rng.choice((None, None, *kept_formats()))
    return f"weights {item.keep or 'auto'}"


MODEL_MUTATIONS = (_block_field, _block_field, _sub_block_scales, _retyped_blocks, _row_length, _weights_choice)


def mutate_model(rng: random.Random, item: Input) -> str:
    """One mutation of a "model" input: half of them on the K-quant blocks and the options the
    repacking reads, half any GGUF mutation (hyperparameters, dimensions, tokenizer data...)."""
    if rng.random() < 0.5 and _block_tensors(item):
        return rng.choice(MODEL_MUTATIONS)(rng, item)
    return mutate_gguf(rng, item)


def mutate_tokenizer(rng: random.Random, doc: GGUFDoc) -> str:
    tokens = token_strings(doc)
    if rng.random() < 0.2:  # SentencePiece scores, long tokens, a generated chat template
        choice = rng.randrange(3)
        if choice == 0:
            kv = find_kv(doc, b"tokenizer.ggml.scores")
            if kv is not None and isinstance(kv[2], tuple) and kv[2][1]:
                items = list(kv[2][1])
                items[rng.randrange(len(items))] = rng.choice(INTERESTING_FLOATS)
                kv[2] = (kv[2][0], items)
            return "tokenizer scores"
        if choice == 1:
            kv = find_kv(doc, b"tokenizer.ggml.tokens")
            if kv is not None and isinstance(kv[2], tuple) and kv[2][1]:
                items = list(kv[2][1])
                i = rng.randrange(len(items))
                items[i] = (items[i] if isinstance(items[i], bytes) else b"x") * rng.choice((100, 1000, 5000))
                kv[2] = (kv[2][0], items)
            return "long token"
        kv = find_kv(doc, b"tokenizer.chat_template")
        if kv is None:
            doc.kvs.append(kv := [b"tokenizer.chat_template", STRING, b""])
        kv[1], kv[2] = STRING, (CHATML + template_statement(rng)).encode()
        return "chat template"
    key = rng.choice((b"tokenizer.ggml.tokens", b"tokenizer.ggml.merges", b"tokenizer.ggml.token_type"))
    kv = find_kv(doc, key)
    if kv is None or not isinstance(kv[2], tuple):
        if key == b"tokenizer.ggml.token_type":
            doc.kvs.append([key, ARRAY, (5, [1] * len(tokens))])
        else:
            doc.kvs.append([key, ARRAY, (STRING, [])])
        return f"{key!r} added"
    element_type, items = kv[2][0], list(kv[2][1])
    operation = rng.randrange(5)
    if key == b"tokenizer.ggml.tokens" and items:
        i = rng.randrange(len(items))
        doubled = items[i] + items[i] if isinstance(items[i], bytes) else b"xx"  # an element may be anything by now
        items[i] = rng.choice((b"", b"\x00", rng.choice(tokens), random_text(rng), doubled))
    elif key == b"tokenizer.ggml.merges":
        # Pairs of real tokens whose concatenation may or may not be a token: what a BPE checks.
        a, b = rng.choice(tokens), rng.choice(tokens)
        merge = rng.choice((a + b" " + b, a + b, a + b" " + b + b" " + a, b" " + a, a + b"  " + b, random_text(rng)))
        if operation < 3 or not items:
            items.insert(rng.randrange(len(items) + 1), merge)
        else:
            items[rng.randrange(len(items))] = merge
    elif items:
        i = rng.randrange(len(items))
        items[i] = rng.choice((0, 1, 2, 3, 4, 5, 6, -1, 2**31 - 1))
    kv[2] = (element_type, items)
    return f"tokenizer {key!r}"
