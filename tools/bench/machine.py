"""What a benchmark ran on, for the line under its command: figures from different CPUs are not
comparable (a table measured on an AVX-512 machine says nothing of an AVX2 one)."""

import platform

# The instruction-set features that decide which code the compiler emits, as /proc/cpuinfo names them.
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimddp",
    "sve",
)


def describe_cpu() -> str:
    """'<model name>, <cores> cores, ISA: <flags>' from /proc/cpuinfo (Linux), else the platform's."""
    model, flags, cores = None, set(), 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "processor":
                    cores += 1
                elif key in ("model name", "Model") and model is None:
                    model = value.strip()
                elif key in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    isa = ", ".join(flag for flag in ISA_FLAGS if flag in flags) or "none of " + "/".join(ISA_FLAGS[:4])
    return f"{model or platform.processor() or platform.machine()}, {cores or '?'} cores, ISA: {isa}"


if __name__ == "__main__":
    print(describe_cpu())
