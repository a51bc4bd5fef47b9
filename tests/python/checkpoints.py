"""Checkpoint files for tests: the config.json of a HF GPT-2 directory, and GGUF files copied
with changes."""

import gguf
import numpy as np


def hf_config(cfg):
    return dict(
        model_type="gpt2",
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
    )


def rewrite(src, dst, arch="gpt2", drop=(), replace=None, add=None, drop_keys=(), set_keys=None):
    """Copies a GGUF file with changes: tensors dropped, replaced or added ({name: (array,
    type)}), metadata keys dropped or set ({key: (value, GGUFValueType)})."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(str(dst), arch=arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys or key in (set_keys or {}):
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub_type)
    for key, (value, vtype) in (set_keys or {}).items():
        writer.add_key_value(key, value, vtype)
    tensors = {t.name: (np.array(t.data), t.tensor_type) for t in reader.tensors if t.name not in drop}
    tensors.update(replace or {})
    tensors.update(add or {})
    for name, (data, kind) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
