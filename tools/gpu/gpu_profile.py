"""Where a GPU program's time goes: each launch of an artifact's programs timed on the device
alone, summed by kernel family, beside the whole program replayed as one CUDA graph (as
gpt_runtime runs it). Weights are random (timing does not depend on their values), written into a
copy of the artifact.

    PYTHONPATH=python python3 tools/gpu/gpu_profile.py ARTIFACT [--repeat 20] [--depth 128]   (on the GPU machine)

Each launch is captured `repeat` times back to back into a graph of its own and the graph
replayed, so a figure is the kernel's device time plus a graph node's gap (about a microsecond),
not the host's cost of a launch through ctypes (about 10 microseconds, which every kernel of a
step would otherwise show). "graph" is the program's own graph: what the per-launch sum leaves
out of it is the gaps between dependent launches. Prints a table per program."""

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


def graph_seconds(driver, stream: int, launches: list, replays: int = 20) -> float:
    """Device seconds of one replay of a graph made of `launches` ((launch arguments, kernel)
    pairs, in order), after a warm-up replay."""
    driver.begin_capture(stream)
    for args, kernel in launches:
        driver.launch(*args, kernel)
    graph = driver.end_capture(stream)
    try:
        executable = driver.instantiate(graph)
    finally:
        driver.destroy_graph(graph)
    try:
        driver.launch_graph(executable, stream)
        driver.synchronize(stream)
        start = time.perf_counter()
        for _ in range(replays):
            driver.launch_graph(executable, stream)
        driver.synchronize(stream)
        return (time.perf_counter() - start) / replays
    finally:
        driver.destroy_graph_exec(executable)


def profile(directory: str, repeat: int, depth: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        model = gpt_runtime.load(with_random_weights(directory, work), graphs=False)
        manifest = model._manifest
        driver, stream = model._device.driver, model._device.stream
        cache = model.new_cache()
        with model._running():
            for program in manifest.programs:
                if program.entry == "step":
                    bound = cache._program(program, False)
                    # One run at `depth` leaves its inputs in place: the launches below attend
                    # over depth + tokens keys, as a decode step deep in a text does.
                    at = min(depth, cache.max_len - program.tokens)
                    positions = at + np.arange(program.tokens, dtype=np.int64)
                    ids = np.zeros(program.tokens, np.int64)
                    bound.run(model._inputs(program, ids, positions, at), 1, model.vocab_size)
                else:
                    bound = BoundProgram(model._device, program, model._pointers, False)
                by_family = collections.defaultdict(float)
                total = 0.0
                launches = [
                    (
                        (launch.function, launch.grid, launch.block, launch.shared_bytes, stream, launch.params),
                        launch.kernel,
                    )
                    for launch in bound._launches
                ]
                for launch, spec in zip(launches, program.launches, strict=True):
                    seconds = graph_seconds(driver, stream, [launch] * repeat) / repeat
                    family = spec.kernel.rsplit("_", 1)[0]
                    by_family[family] += seconds
                    total += seconds
                program_seconds = graph_seconds(driver, stream, launches)
                name = f"{os.path.basename(directory)} {program.entry}/{program.tokens}"
                if program.entry == "step":
                    name += f"@{at}"
                print(
                    f"{name}: {len(program.launches)} launches, {total * 1e3:.3f} ms of kernels timed alone, "
                    f"{program_seconds * 1e3:.3f} ms as one graph"
                )
                for family, seconds in sorted(by_family.items(), key=lambda item: -item[1]):
                    print(f"  {family:<12} {seconds * 1e3:8.3f} ms  {100 * seconds / total:5.1f}%")
        model.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--depth", type=int, default=128, help="the cache position step programs run at")
    args = parser.parse_args()
    for directory in args.artifacts:
        profile(directory, args.repeat, args.depth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
