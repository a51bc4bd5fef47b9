"""The device check (docs/GPU.md, issue 28): runs GPU artifacts prepared on the build machine with
gpt_runtime on a lent NVIDIA GPU, checks their logits and tokens, and times them against HF
transformers on the same GPU. tools/device_check.sh runs it; tools/gpu/gpu_prepare.py makes its input.
tools/gpu/gpu_artifacts.py reads the artifacts and writes HF's weights into them.

    PYTHONPATH=python python3 tools/gpu/gpu_check.py --artifacts build/gpu_check --out "$OUT"

It imports gpt_runtime and never `gpt` (whose extension needs libMLIR/libLLVM, absent there). For
each artifact directory under --artifacts (one with a manifest.json):
- with a reference.npz (small random models, weights included): forward logits, prefill + decode
  logits and greedy tokens against the CPU gpt model's, which gpu_prepare.py recorded;
- without weights, config GPT-2 small: HF GPT2LMHeadModel(GPT2Config()) from torch.manual_seed(0)
  on the GPU, its weights written into the artifact's buffers (a copy of the directory), forward
  and prefill + greedy decode logits and tokens against HF's, then prefill/decode timings of
  gpt_runtime and HF eager in the same process.
Every check prints one PASS or FAIL line; an exception fails its check only (the traceback goes
to the log) and the others still run. Writes OUT/device_check.log and OUT/device_check.md (the
timing table). Exit status: 0 all passed, 1 a check failed, 3 no CUDA device (2: bad arguments).
"""

import argparse
import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
from gpu_artifacts import (
    hf_checked,
    hf_model_for,
    hf_weights_file,
    model_label,
    read_artifacts,
    validate_manifest,
    weights_dtype,
    write_safetensors,  # noqa: F401 -- tools/gpu/gpu_profile.py imports it from here
)

F32_TOLERANCE = 1e-3
BF16_TOLERANCE = 1e-2
# The exit status with no CUDA device (argparse exits 2 on bad arguments).
NO_DEVICE = 3


class Log:
    """Lines to stdout and to the log file at once (flushed per line, so a killed run keeps them)."""

    def __init__(self, path):
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 -- open for the whole run
        self.results = []  # (name, passed, detail)

    def __call__(self, line=""):
        print(line, flush=True)
        self._file.write(line + "\n")
        self._file.flush()

    def result(self, name, passed, detail=""):
        self.results.append((name, passed, detail))
        self(f"{'PASS' if passed else 'FAIL'} {name}" + (f": {detail}" if detail else ""))

    def close(self):
        self._file.close()


def relative_error(got, want):
    """max|got - want| / max|want|, in float64."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise ValueError(f"shape {got.shape} != reference shape {want.shape}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def greedy_verdict(got, want, want_logits, tolerance, strict):
    """Compares greedy tokens `got` with the reference's `want`. At the first difference the
    reference's own logits at that step (same prefix, so comparable) say how close a tie it was:
    margin = logit[want] - logit[got] over max|logit|. A margin within the logits tolerance is a
    near tie that any rounding may flip; it passes unless `strict`."""
    got = [int(t) for t in got]
    want = [int(t) for t in want]
    if got == want:
        return True, f"{len(want)} tokens equal"
    position = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    shown = slice(position, position + 4)
    detail = f"first difference at step {position}: got {got[shown]} want {want[shown]}"
    if position >= len(got) or position >= len(want) or want_logits is None or position >= len(want_logits):
        return False, detail + f" (got {len(got)} tokens, want {len(want)})"
    row = np.asarray(want_logits[position], np.float64)
    margin = (row[want[position]] - row[got[position]]) / max(np.max(np.abs(row)), 1e-30)
    detail += f"; reference margin there {margin:.2e} of max|logit| (tolerance {tolerance:g})"
    if not strict and 0 <= margin <= 2 * tolerance:
        return True, "near tie: " + detail
    return False, detail


def tolerance_for(manifest):
    return BF16_TOLERANCE if weights_dtype(manifest) == "bf16" else F32_TOLERANCE


# -- environment --------------------------------------------------------------------------------


def driver_version():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:  # the CUDA version the driver supports, when nvidia-smi is missing
        cuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        cuda.cuDriverGetVersion(ctypes.byref(version))
        return f"CUDA {version.value // 1000}.{version.value % 1000 // 10} (nvidia-smi unavailable)"
    except OSError:
        return "unknown"


def cuda_device_problem():
    """None when a CUDA device is usable; otherwise why not (checked before importing torch)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return f"libcuda.so.1 cannot be loaded ({error})"
    status = cuda.cuInit(0)
    if status != 0:
        return f"cuInit failed with CUresult {status}"
    count = ctypes.c_int()
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value < 1:
        return f"cuDeviceGetCount: CUresult {status}, {count.value} devices"
    return None


def compiler_in_process():
    """What of the compiler this process has loaded: the gpt package, its extension, libMLIR or
    libLLVM (the device machine has none of them; gpt_runtime must not need them)."""
    found = sorted(m for m in sys.modules if m == "gpt" or m.startswith("gpt."))[:3]
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        paths = set()
    found += sorted(p for p in paths if any(k in os.path.basename(p) for k in ("libMLIR", "libLLVM", "_gpt.")))
    return found


# -- checks ---------------------------------------------------------------------------------------


class Checker:
    def __init__(self, log, args):
        self.log = log
        self.args = args
        self.started = time.monotonic()
        self.timings = []  # (model, backend, weights, prefill_ms, decode_ms)
        self._hf = {}
        self.device = "cuda"  # where HF runs ("cpu" only to try this script's logic without a GPU)

    def synchronize(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def out_of_time(self, name):
        if time.monotonic() - self.started > self.args.budget:
            self.log.result(name, False, f"skipped: the run's {self.args.budget:.0f} s budget is spent")
            return True
        return False

    def run(self, name, function, *args):
        """Runs one check; an exception fails it (traceback logged) and the rest go on."""
        if self.out_of_time(name):
            return None
        self.log(f"-- {name}")
        start = time.monotonic()
        try:
            return function(name, *args)
        except Exception as error:  # noqa: BLE001 -- every failure is reported, none stops the run
            self.log(traceback.format_exc().rstrip())
            self.log.result(name, False, f"{type(error).__name__}: {error}")
            return None
        finally:
            self.log(f"   ({time.monotonic() - start:.1f} s)")

    def compare(self, name, got, want, tolerance):
        try:
            error = relative_error(got, want)
        except ValueError as problem:
            self.log.result(name, False, str(problem))
            return False
        passed = error <= tolerance
        self.log.result(name, passed, f"max|gpu-ref|/max|ref| = {error:.3e} (tolerance {tolerance:g})")
        return passed

    def localize(self, name, directory, tolerance):
        """After a failed artifact: tools/gpu/gpu_localize.py runs its programs one launch at a time
        against gpt_runtime's numpy emulator and names the first kernel that goes wrong. Its
        lines go to the log; it is diagnosis, not a check."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_localize.py")
        if not os.path.exists(script) or self.out_of_time(f"{name} localize"):
            return
        self.log(f"-- {name}: tools/gpu/gpu_localize.py --tolerance {tolerance:g}")
        try:
            result = subprocess.run(
                [sys.executable, script, directory, "--tolerance", str(tolerance)],
                capture_output=True,
                text=True,
                timeout=90,
            )
            lines = (result.stdout + result.stderr).rstrip().splitlines()
        except subprocess.TimeoutExpired as error:
            lines = [f"timed out after {error.timeout} s"]
        # The first failing launches say the most; a long tail of "ok" lines does not.
        shown = [line for line in lines if not line.startswith("ok")][:40]
        for line in shown or lines[-10:]:
            self.log("   " + line)

    def manifest_check(self, name, directory, manifest):
        validate_manifest(directory, manifest)
        self.log.result(name, True, "gpt_runtime.load_manifest accepts it")

    # Small models: the CPU gpt model's reference.npz.
    def reference_checks(self, name, directory, manifest):
        import gpt_runtime

        reference = np.load(os.path.join(directory, "reference.npz"))
        tolerance = tolerance_for(manifest)
        with gpt_runtime.load(directory) as model:
            self.compare_with_reference(name, model, reference, tolerance)

    def compare_with_reference(self, name, model, reference, tolerance):
        for key in sorted(k for k in reference.files if k.startswith("forward_ids")):
            suffix = key[len("forward_ids") :]
            ids = [int(t) for t in reference[key]]
            self.compare(
                f"{name} forward T={len(ids)}", model.forward(ids), reference["forward_logits" + suffix], tolerance
            )
        cache = model.new_cache()
        prompt = [int(t) for t in reference["prompt"]]
        self.compare(
            f"{name} prefill T={len(prompt)}", model.prefill(prompt, cache), reference["prefill_logits"], tolerance
        )
        decoded = np.stack([model.decode(int(t), cache) for t in reference["decode_tokens"]])
        self.compare(f"{name} decode x{len(decoded)}", decoded, reference["decode_logits"], tolerance)
        steps = len(reference["greedy_tokens"])
        tokens = model.generate(prompt, steps, temperature=0.0)
        passed, detail = greedy_verdict(
            tokens, reference["greedy_tokens"], reference["greedy_logits"], tolerance, strict=tolerance == F32_TOLERANCE
        )
        self.log.result(f"{name} greedy {steps} tokens", passed, detail)

    # Weight-less artifacts (GPT-2 small, llama shapes): HF transformers on the same GPU.
    def hf_model(self, manifest):
        key = json.dumps(manifest["config"], sort_keys=True)
        if key not in self._hf:
            import torch
            import transformers

            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.manual_seed(0)
            start = time.monotonic()
            model = hf_model_for(manifest).eval().to(self.device)
            attention = getattr(model.config, "_attn_implementation", "?")
            self.log(
                f"   HF {type(model).__name__} of {model_label(manifest)} from torch.manual_seed(0): "
                f"{time.monotonic() - start:.1f} s, attention {attention}, transformers {transformers.__version__}"
            )
            self._hf[key] = model
        return self._hf[key]

    def hf_greedy(self, model, prompt, steps):
        """HF's prefill logits, then `steps` greedy decode steps with past_key_values: (tokens,
        logits [steps + 1, vocab]: row 0 the prefill's last row, row i the logits after token i-1)."""
        import torch

        with torch.no_grad():
            ids = torch.tensor([prompt], device=self.device)
            out = model(ids, use_cache=True)
            rows = [out.logits[0, -1].float()]
            tokens = []
            for _ in range(steps):
                token = int(rows[-1].argmax())
                tokens.append(token)
                step = torch.tensor([[token]], device=self.device)
                out = model(step, past_key_values=out.past_key_values, use_cache=True)
                rows.append(out.logits[0, -1].float())
        return tokens, torch.stack(rows).cpu().numpy()

    def hf_checks(self, name, directory, manifest):
        import gpt_runtime

        hf = self.hf_model(manifest)
        # A copy of the directory gets the weights: the prepared one stays as it came.
        work = tempfile.mkdtemp(prefix="gpu_check_")
        try:
            copy = os.path.join(work, os.path.basename(directory))
            shutil.copytree(directory, copy)
            weights_file = manifest.get("weights", {}).get("file", "weights.safetensors")
            start = time.monotonic()
            hf_weights_file(os.path.join(copy, weights_file), manifest, hf.state_dict())
            self.log(f"   wrote HF's weights as {weights_dtype(manifest)}: {time.monotonic() - start:.1f} s")
            start = time.monotonic()
            model = gpt_runtime.load(copy)
            self.log(f"   gpt_runtime.load: {time.monotonic() - start:.1f} s")
            try:
                self.compare_with_hf(name, model, manifest, hf)
            finally:
                model.close()  # its GPU memory, before the next artifact loads
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def compare_with_hf(self, name, model, manifest, hf):
        import torch

        tolerance = tolerance_for(manifest)
        generator = np.random.default_rng(1)
        ids = [int(t) for t in generator.integers(0, manifest["vocab_size"], size=128)]
        with torch.no_grad():
            want = hf(torch.tensor([ids], device=self.device)).logits[0].float().cpu().numpy()
        self.compare(f"{name} forward T=128 vs HF", model.forward(ids), want, tolerance)

        steps = 32
        hf_tokens, hf_rows = self.hf_greedy(hf, ids, steps)
        cache = model.new_cache()
        rows = [model.prefill(ids, cache)]
        rows += [model.decode(t, cache) for t in hf_tokens]  # teacher-forced: HF's tokens
        self.compare(f"{name} prefill T=128 vs HF", rows[0], hf_rows[0], tolerance)
        self.compare(f"{name} decode x{steps} (HF's tokens) vs HF", np.stack(rows[1:]), hf_rows[1:], tolerance)
        eos = manifest.get("eos_token_id")
        expected = hf_tokens[: hf_tokens.index(eos)] if eos is not None and eos in hf_tokens else hf_tokens
        tokens = model.generate(ids, steps, temperature=0.0)
        passed, detail = greedy_verdict(tokens, expected, hf_rows, tolerance, strict=tolerance == F32_TOLERANCE)
        self.log.result(f"{name} greedy {steps} tokens vs HF", passed, detail)

        if not self.args.skip_timing:
            self.time_runtime(name, model, ids, weights_dtype(manifest), model_label(manifest))

    # Timings.
    def time_runtime(self, name, model, ids, dtype, label):
        # One cache, reset between prefills: its step programs' CUDA graphs (captured on first
        # use, with the cache's addresses baked in) are replayed, as in a serving loop.
        prefill = []
        cache = model.new_cache()
        for i in range(self.args.prefill_repeats + 3):
            cache.reset()
            start = time.perf_counter()
            model.prefill(ids, cache)
            if i >= 3:
                prefill.append(time.perf_counter() - start)
        cache.reset()
        token = int(np.argmax(model.prefill(ids, cache)))
        decode = []
        for i in range(self.args.decode_steps + 8):
            start = time.perf_counter()
            logits = model.decode(token, cache)
            if i >= 8:
                decode.append(time.perf_counter() - start)
            token = int(np.argmax(logits))
        self.record(label, f"gpt_runtime ({name})", dtype, prefill, decode)

    def time_hf(self, name, dtype, manifest):
        import torch

        model = self.hf_model(manifest)
        if dtype == "bf16":
            model = model.to(torch.bfloat16)  # the last use of the HF model (see main)
        ids = torch.tensor(
            [np.random.default_rng(1).integers(0, manifest["vocab_size"], size=128).tolist()], device=self.device
        )
        prefill, decode = [], []
        with torch.no_grad():
            for i in range(self.args.prefill_repeats + 3):
                self.synchronize()
                start = time.perf_counter()
                model(ids, use_cache=True)
                self.synchronize()
                if i >= 3:
                    prefill.append(time.perf_counter() - start)
            out = model(ids, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            for i in range(self.args.decode_steps + 8):
                self.synchronize()
                start = time.perf_counter()
                out = model(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                self.synchronize()
                if i >= 8:
                    decode.append(time.perf_counter() - start)
        attention = getattr(model.config, "_attn_implementation", "?")
        self.record(model_label(manifest), f"HF transformers eager ({attention})", dtype, prefill, decode)
        self.log.result(f"{name} timed", True)

    def record(self, model, backend, dtype, prefill, decode):
        row = (model, backend, dtype, 1e3 * statistics.median(prefill), 1e3 * statistics.median(decode))
        self.timings.append(row)
        self.log(f"   {backend} {dtype}: prefill T=128 {row[3]:.3f} ms, decode {row[4]:.3f} ms/token")

    def timing_table(self):
        baselines = {r[0]: r for r in self.timings if r[1].startswith("HF") and r[2] == "f32"}
        lines = [
            "| model | backend | weights | prefill T=128 (ms) | decode (ms/token) | prefill speedup vs HF eager f32 "
            "| decode speedup vs HF eager f32 |",
            "|---|---|---|---|---|---|---|",
        ]
        for model, backend, dtype, prefill, decode in self.timings:
            baseline = baselines.get(model)
            speedups = [f"{baseline[3] / prefill:.2f}x", f"{baseline[4] / decode:.2f}x"] if baseline else ["n/a", "n/a"]
            cells = [model, backend, dtype, f"{prefill:.3f}", f"{decode:.3f}", *speedups]
            lines.append("| " + " | ".join(cells) + " |")
        return lines


def check_artifacts(checker, log, args, artifacts):
    """Each artifact's reference or HF checks (localizing a reference failure unless --no-localize), and
    HF's timings per model unless --skip-timing."""
    with_hf = []
    for name, directory, manifest in artifacts:
        if "reference.npz" in os.listdir(directory):
            failures = len([r for r in log.results if not r[1]])
            checker.run(f"{name}", checker.reference_checks, directory, manifest)
            if len([r for r in log.results if not r[1]]) > failures and not args.no_localize:
                checker.localize(name, directory, tolerance_for(manifest))
        elif hf_checked(manifest):
            with_hf.append((name, directory, manifest))
    # Per model, f32 before bf16: its HF model is timed in f32, then converted to bf16 for its
    # last use.
    with_hf.sort(key=lambda a: (model_label(a[2]), weights_dtype(a[2]) != "f32"))
    for label in dict.fromkeys(model_label(a[2]) for a in with_hf):
        group = [a for a in with_hf if model_label(a[2]) == label]
        for name, directory, manifest in group:
            checker.run(f"{name}", checker.hf_checks, directory, manifest)
        if not args.skip_timing:
            checker.run(f"HF {label} f32", checker.time_hf, "f32", group[0][2])
            checker.run(f"HF {label} bf16", checker.time_hf, "bf16", group[0][2])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", default="build/gpu_check", help="folder of prepared artifact directories")
    parser.add_argument("--out", default=os.environ.get("OUT") or "build/device_check", help="log folder ($OUT)")
    parser.add_argument("--only", default=None, help="comma-separated artifact names to check (default: all)")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--no-localize", action="store_true", help="no tools/gpu/gpu_localize.py run after a failure")
    parser.add_argument("--prefill-repeats", type=int, default=20)
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--budget", type=float, default=250.0, help="seconds after which remaining checks are skipped")
    args = parser.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "device_check.log"))
    # device_check.sh passes its own command line.
    own_command = "PYTHONPATH=python python3 tools/gpu/gpu_check.py " + " ".join(argv)
    command = os.environ.get("GPU_CHECK_COMMAND") or own_command
    log(f"command: {command}")
    log(f"host: {platform.node()}, {platform.platform()}, python {platform.python_version()}, numpy {np.__version__}")

    artifacts = read_artifacts(args, log)

    checker = Checker(log, args)
    try:
        import gpt_runtime  # noqa: F401 -- imported before any check, so that an import error is reported once
    except Exception as error:  # noqa: BLE001
        log(traceback.format_exc().rstrip())
        log.result("import gpt_runtime", False, f"{type(error).__name__}: {error}")
        return finish(log, checker, exit_status=1)
    for name, directory, manifest in artifacts:
        checker.run(f"{name} manifest", checker.manifest_check, directory, manifest)

    problem = cuda_device_problem()
    if problem is not None:
        log(f"no CUDA device: {problem}")
        return finish(log, checker, exit_status=NO_DEVICE)
    import torch

    if not torch.cuda.is_available():
        log("no CUDA device: torch.cuda.is_available() is False (torch " + torch.__version__ + ")")
        return finish(log, checker, exit_status=NO_DEVICE)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    capability = "sm_{}{}".format(*torch.cuda.get_device_capability())
    log(f"gpu: {torch.cuda.get_device_name()} ({capability}), driver {driver_version()}, torch {torch.__version__}")

    check_artifacts(checker, log, args, artifacts)
    compiler = compiler_in_process()
    detail = ", ".join(compiler) or "no gpt, _gpt, libMLIR, libLLVM"
    log.result("gpt_runtime ran without the compiler", not compiler, detail)
    return finish(log, checker, exit_status=None, gpu=torch.cuda.get_device_name(), command=command)


def finish(log, checker, exit_status, gpu=None, command=None):
    failed = [r for r in log.results if not r[1]]
    if checker.timings:
        lines = [f"GPU: {gpu}, driver {driver_version()}", f"command: `{command}`", ""] + checker.timing_table()
        log("")
        for line in lines:
            log(line)
        with open(os.path.join(checker.args.out, "device_check.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    log("")
    log(
        f"{len(log.results) - len(failed)} passed, {len(failed)} failed"
        + (" (no CUDA device)" if exit_status == NO_DEVICE else "")
    )
    for name, _, detail in failed:
        log(f"  FAILED {name}: {detail}")
    log.close()
    if exit_status is not None:
        return exit_status
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
