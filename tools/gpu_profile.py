"""Where a GPU program's time goes: each launch of an artifact's programs timed on its own (the
launch repeated back to back, then one synchronize), summed by kernel family. Weights are random
(timing does not depend on their values), written into a copy of the artifact.

    PYTHONPATH=python python3 tools/gpu_profile.py ARTIFACT [--repeat 20]   (on the GPU machine)

Per-launch figures include the driver's launch cost (a few microseconds); the graph replay that
gpt_runtime uses pays less of it. Prints a table per program."""

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import gpt_runtime
from gpt_runtime.program import BoundProgram

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check import write_safetensors  # noqa: E402 -- the device check's writer, one copy


def with_random_weights(directory: str, work: str) -> str:
    copy = os.path.join(work, "artifact")
    shutil.copytree(directory, copy)
    manifest = json.load(open(os.path.join(copy, "manifest.json")))
    rng = np.random.default_rng(0)
    tensors = []
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        values = rng.normal(0.0, 0.02, buffer["shape"]).astype(np.float32)
        if buffer["dtype"] == "bf16":
            data, dtype = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes(), "BF16"
        else:
            data, dtype = values.tobytes(), "F32"
        tensors.append((buffer["name"], dtype, buffer["shape"], data))
    write_safetensors(os.path.join(copy, manifest["weights"]["file"]), tensors)
    return copy


def profile(directory: str, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        model = gpt_runtime.load(with_random_weights(directory, work), graphs=False)
        manifest = model._manifest
        driver, stream = model._device.driver, model._device.stream
        cache = model.new_cache()
        with model._running():
            for program in manifest.programs:
                if program.entry == "step":
                    bound = cache._program(program, False)
                else:
                    bound = BoundProgram(model._device, program, model._pointers, False)
                by_family = collections.defaultdict(float)
                total = 0.0
                for launch, spec in zip(bound._launches, program.launches, strict=True):
                    args = (launch.function, launch.grid, launch.block, launch.shared_bytes, stream, launch.params)
                    driver.launch(*args, launch.kernel)
                    driver.synchronize(stream)
                    start = time.perf_counter()
                    for _ in range(repeat):
                        driver.launch(*args, launch.kernel)
                    driver.synchronize(stream)
                    seconds = (time.perf_counter() - start) / repeat
                    family = spec.kernel.rsplit("_", 1)[0]
                    by_family[family] += seconds
                    total += seconds
                name = f"{os.path.basename(directory)} {program.entry}/{program.tokens}"
                print(f"{name}: {len(program.launches)} launches, {total * 1e3:.3f} ms launched one by one")
                for family, seconds in sorted(by_family.items(), key=lambda item: -item[1]):
                    print(f"  {family:<12} {seconds * 1e3:8.3f} ms  {100 * seconds / total:5.1f}%")
        model.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    for directory in args.artifacts:
        profile(directory, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
