"""Trains the small byte-level GPT that ships inside the gpt package (python/gpt/data/byte-gpt).

    python3 tools/dev/train_byte_model.py --out python/gpt/data/byte-gpt

Reproducible: the data is every top-level .py file of the running Python's standard library
(sorted by name; Python 3.11.7 on this machine kind), the seed is fixed, and the model is
HF transformers' GPT2LMHeadModel, so the result is a plain HF GPT-2 directory
(config.json + model.safetensors) that gpt.GPT.from_pretrained reads. The vocabulary is the
256 byte values: the model writes UTF-8 bytes, decoded by gpt's byte tokenizer.
"""

import argparse
import glob
import json
import math
import os
import sys
import sysconfig
import time

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

SEED = 1337
CONFIG = dict(n_layer=4, n_head=4, n_embd=128, n_positions=256, vocab_size=256)


def corpus() -> tuple:
    """The training bytes and the files they came from."""
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    data = b"".join(open(path, "rb").read() + b"\n\n" for path in files)
    return np.frombuffer(data, dtype=np.uint8), [os.path.basename(f) for f in files]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="python/gpt/data/byte-gpt")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the shipped weights used 2)")
    args = parser.parse_args(argv)

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(SEED)
    data, files = corpus()
    split = int(len(data) * 0.95)
    train, valid = data[:split], data[split:]
    block = CONFIG["n_positions"]

    config = GPT2Config(
        **CONFIG,
        bos_token_id=10,
        eos_token_id=10,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        activation_function="gelu_new",
    )
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def batch(source):
        starts = rng.integers(0, len(source) - block - 1, size=args.batch)
        x = np.stack([source[s : s + block] for s in starts]).astype(np.int64)
        y = np.stack([source[s + 1 : s + block + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)

    def loss_of(x, y):
        logits = model(x).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    start = time.time()
    for step in range(args.steps + 1):
        lr = args.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        model.train()
        loss = loss_of(*batch(train))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                valid_loss = sum(loss_of(*batch(valid)).item() for _ in range(4)) / 4
            print(
                f"step {step:5d}  train {loss.item():.3f}  valid {valid_loss:.3f} nats/byte  "
                f"lr {lr:.2e}  {time.time() - start:.0f}s",
                flush=True,
            )

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for extra in ("generation_config.json",):
        path = os.path.join(args.out, extra)
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(args.out, "TRAINING.json"), "w") as f:
        json.dump(
            {
                "script": "tools/dev/train_byte_model.py",
                "seed": SEED,
                "steps": args.steps,
                "batch": args.batch,
                "lr": args.lr,
                "python": sys.version.split()[0],
                "files": len(files),
                "bytes": int(len(data)),
                "final_valid_loss_nats_per_byte": round(valid_loss, 4),
                "torch": torch.__version__,
            },
            f,
            indent=1,
        )
    print(f"saved {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
