"""A numpy implementation of the paged-KV contract (model.new_block_pool / model.step_batch), written
from the math and the contract's text, independently of the compiler.

`ReferencePagedModel(model)` wraps a `gpt.GPT`: the engine can run on it before (or instead of)
the compiled batched step, and it checks the compiled step afterwards. Each step is computed in
float64 from `model.state_dict()`, one sequence at a time, reading and writing a float32 pool
through the block tables exactly as the contract lays it out.
"""

import numpy as np

from reference import gelu_tanh, layer_norm, rotate_half_rope


class ReferenceBlockPool:
    """Keys and values [n_layer, num_blocks, n_head, block_size, head_size] float32, as KVBlockPool."""

    def __init__(self, model, num_blocks: int, block_size: int):
        cfg = model.config
        self.model = model
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (cfg.n_layer, num_blocks, cfg.n_head, block_size, cfg.head_size)
        self.keys = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)

    def copy_block(self, src: int, dst: int) -> None:
        for index in (src, dst):
            if not 0 <= index < self.num_blocks:
                raise ValueError(f"block id {index} is outside [0, num_blocks={self.num_blocks})")
        self.keys[:, dst] = self.keys[:, src]
        self.values[:, dst] = self.values[:, src]


class ReferencePagedModel:
    """A gpt.GPT with the paged contract computed in numpy; everything else is the wrapped model's."""

    def __init__(self, model):
        if model.config.attention_window is not None:
            raise ValueError("the paged reference does not support attention_window")
        self._model = model
        self._weights = {name: np.asarray(value, np.float64) for name, value in model.state_dict().items()}
        self.steps = 0  # step_batch calls, so tests can see how work was batched
        self.step_tokens = 0  # new tokens over all step_batch calls

    def __getattr__(self, name):
        return getattr(self._model, name)

    def new_block_pool(self, num_blocks: int, block_size: int = 16) -> ReferenceBlockPool:
        return ReferenceBlockPool(self, num_blocks, block_size)

    def step_batch(self, pool, ids, counts, starts, block_tables) -> np.ndarray:
        cfg = self._model.config
        ids, counts, starts = (np.asarray(a, np.int64) for a in (ids, counts, starts))
        block_tables = np.asarray(block_tables, np.int64)
        if pool.model is not self:
            raise ValueError("this pool belongs to another model")
        if counts.sum() != len(ids) or (counts < 1).any():
            raise ValueError("counts must be >= 1 and sum to len(ids)")
        self.steps += 1
        self.step_tokens += len(ids)
        out = np.empty((len(counts), cfg.vocab_size), np.float32)
        offset = 0
        for b, (count, start) in enumerate(zip(counts, starts, strict=True)):
            tokens = ids[offset : offset + count]
            offset += count
            out[b] = self._sequence_step(pool, tokens, int(start), block_tables[b])
        return out

    def _sequence_step(self, pool, tokens, start, table) -> np.ndarray:
        cfg, w = self._model.config, self._weights
        d, nh, hs, bs = cfg.n_embd, cfg.n_head, cfg.head_size, pool.block_size
        positions = np.arange(start, start + len(tokens))
        if positions[-1] >= cfg.block_size:
            raise ValueError(f"position {positions[-1]} is past block_size={cfg.block_size}")
        everything = np.arange(positions[-1] + 1)
        blocks, slots = table[everything // bs], everything % bs
        x = w["transformer.wte.weight"][tokens]
        if cfg.pos_embedding == "learned":
            x = x + w["transformer.wpe.weight"][positions]
        for layer in range(cfg.n_layer):
            p = f"transformer.h.{layer}."
            h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], cfg.layer_norm_eps)
            qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = (qkv[:, j * d : (j + 1) * d].reshape(-1, nh, hs).transpose(1, 0, 2) for j in range(3))
            if cfg.pos_embedding == "rope":
                q, k = rotate_half_rope(q, positions), rotate_half_rope(k, positions)
            new_blocks, new_slots = blocks[positions], slots[positions]
            pool.keys[layer, new_blocks, :, new_slots] = k.transpose(1, 0, 2)
            pool.values[layer, new_blocks, :, new_slots] = v.transpose(1, 0, 2)
            keys = pool.keys[layer, blocks, :, slots].transpose(1, 0, 2).astype(np.float64)
            values = pool.values[layer, blocks, :, slots].transpose(1, 0, 2).astype(np.float64)
            scores = q @ keys.transpose(0, 2, 1) / np.sqrt(hs)
            scores = np.where(everything[None, None, :] <= positions[None, :, None], scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            a = (scores / scores.sum(axis=-1, keepdims=True)) @ values
            a = a.transpose(1, 0, 2).reshape(-1, d)
            x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], cfg.layer_norm_eps)
            h = gelu_tanh(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = layer_norm(x[-1], w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], cfg.layer_norm_eps)
        return x @ w["transformer.wte.weight"].T
