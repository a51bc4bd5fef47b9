"""Runs an artifact's programs on the GPU one launch at a time and compares each launch's output
with gpt_runtime.emulator's (numpy) on the same inputs, so a wrong kernel is named, not just a
wrong logit. Each launch starts from the GPU's own results (the emulator's copy is overwritten
with them), so every kernel is judged on identical inputs.

    PYTHONPATH=python python3 tools/gpu/gpu_localize.py ARTIFACT [ARTIFACT...]   (on the GPU machine)

Prints one line per launch (index, kernel, family, max |gpu - emulated| / max |emulated|) and
exits 1 when any exceeds --tolerance."""

import argparse
import json
import os
import sys

import numpy as np

import gpt_runtime
from gpt_runtime import emulator
from gpt_runtime.program import BoundProgram
from gpt_runtime.weights import WeightsFile, read_header


def _device_floats(driver, stream, address: int, count: int) -> np.ndarray:
    host = np.empty(count, np.float32)
    driver.copy_to_host_async(host.ctypes.data, address, host.nbytes, stream)
    driver.synchronize(stream)
    return host


def check_program(
    model,
    raw: dict,
    memory: emulator.Memory,
    program_index: int,
    bound: BoundProgram,
    inputs: dict,
    tolerance: float,
    label: str,
) -> bool:
    device = model._device
    driver, stream = device.driver, device.stream
    program = raw["programs"][program_index]
    emulator.write_inputs(memory, program, **inputs)
    input_index = program["inputs"]["token_ids"]["buffer"]
    host_inputs = memory.buffers[input_index]
    driver.copy_to_device_async(model._pointers[input_index], host_inputs.ctypes.data, host_inputs.nbytes, stream)
    driver.synchronize(stream)
    ok = True
    for i, (launch, bound_launch) in enumerate(zip(program["launches"], bound._launches, strict=True)):
        driver.launch(
            bound_launch.function,
            bound_launch.grid,
            bound_launch.block,
            bound_launch.shared_bytes,
            stream,
            bound_launch.params,
            bound_launch.kernel,
        )
        driver.synchronize(stream)
        region, count = emulator.emulate_launch(memory, launch)
        arg = launch["args"].index(region)
        gpu = _device_floats(driver, stream, bound_launch.values[arg].value, count)
        expected = memory.floats(region, count)
        scale = float(np.abs(expected).max()) or 1.0
        error = float(np.abs(gpu - expected).max()) / scale
        bad = not np.isfinite(gpu).all() or error > tolerance
        ok &= not bad
        print(
            f"{'FAIL' if bad else 'ok  '} {label} launch {i:3d} {launch['kernel']:<16} {launch['op']['family']:<12} "
            f"rel {error:.2e}"
        )
        expected[:] = gpu  # the next launch starts from what the GPU computed
    return ok


def localize(directory: str, tolerance: float) -> bool:
    raw = json.load(open(os.path.join(directory, "manifest.json")))
    weights_path = os.path.join(directory, raw["weights"]["file"])
    header = read_header(weights_path)
    with WeightsFile(weights_path, header) as file:
        weights = {name: file.raw(name).copy() for name in header}
    model = gpt_runtime.load(directory, graphs=False)
    memory = emulator.Memory(raw, weights)
    vocab = raw["vocab_size"]
    rng = np.random.default_rng(0)
    ok = True
    with model._running():
        for index, program in enumerate(raw["programs"]):
            if program["entry"] != "forward":
                continue
            count = max(1, program["tokens"] - 3)
            ids = rng.integers(0, vocab, size=count)
            bound = BoundProgram(model._device, model._manifest.programs[index], model._pointers, False)
            ok &= check_program(
                model,
                raw,
                memory,
                index,
                bound,
                dict(ids=ids, positions=np.arange(program["tokens"])),
                tolerance,
                f"{os.path.basename(directory)} forward/{program['tokens']}",
            )
    cache = model.new_cache()
    with model._running():
        offset = 0
        for index, program in sorted(enumerate(raw["programs"]), key=lambda p: -p[1]["tokens"]):
            if program["entry"] != "step":
                continue
            count = max(1, program["tokens"] - 3)
            ids = rng.integers(0, vocab, size=count)
            bound = cache._program(model._manifest.programs[index], False)
            inputs = dict(
                ids=ids, positions=offset + np.arange(program["tokens"]), last_row=count - 1, cache_offset=offset
            )
            ok &= check_program(
                model,
                raw,
                memory,
                index,
                bound,
                inputs,
                tolerance,
                f"{os.path.basename(directory)} step/{program['tokens']}@{offset}",
            )
            offset += count
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args()
    ok = True
    for directory in args.artifacts:
        try:
            ok &= localize(directory, args.tolerance)
        except Exception as error:  # one artifact's failure must not hide the next one's lines
            print(f"FAIL {directory}: {type(error).__name__}: {error}")
            ok = False
    print("PASS gpu_localize" if ok else "FAIL gpu_localize")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
