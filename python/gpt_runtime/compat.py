"""Can this driver and this GPU run the artifact? Pure functions of version numbers, so that they
are tested without a GPU; model.load applies them to what the driver reports."""

import re

from .errors import ArtifactError, IncompatibleDeviceError

# PTX ISA version -> the first CUDA driver (cuDriverGetVersion: 1000 * major + 10 * minor) that
# JIT-compiles it, from the PTX ISA manual's release history. A driver refuses newer PTX with
# CUDA_ERROR_UNSUPPORTED_PTX_VERSION, a message that does not say which driver would do.
PTX_DRIVER_VERSIONS = {
    "6.0": 9000,
    "6.1": 9010,
    "6.2": 9020,
    "6.3": 10000,
    "6.4": 10010,
    "6.5": 10020,
    "7.0": 11000,
    "7.1": 11010,
    "7.2": 11020,
    "7.3": 11030,
    "7.4": 11040,
    "7.5": 11050,
    "7.6": 11060,
    "7.7": 11070,
    "7.8": 11080,
    "8.0": 12000,
    "8.1": 12010,
    "8.2": 12020,
    "8.3": 12030,
    "8.4": 12040,
    "8.5": 12050,
    "8.6": 12070,
    "8.7": 12080,
    "8.8": 12090,
    "9.0": 13000,
    "9.1": 13010,
}

_CHIP = re.compile(r"sm_([0-9]+)([0-9])([af]?)")


def format_driver_version(version: int) -> str:
    """12080 -> "12.8", as nvidia-smi prints a driver's CUDA version."""
    return f"{version // 1000}.{version % 1000 // 10}"


def required_driver_version(ptx_version: str) -> int:
    """The oldest driver that loads PTX of this ISA version."""
    try:
        return PTX_DRIVER_VERSIONS[ptx_version]
    except KeyError:
        raise ArtifactError(
            f"target.ptx_version {ptx_version!r} is not a PTX ISA version this runtime knows "
            f"({', '.join(PTX_DRIVER_VERSIONS)})"
        ) from None


def check_driver_version(ptx_version: str, driver_version: int) -> None:
    needed = required_driver_version(ptx_version)
    if driver_version < needed:
        raise IncompatibleDeviceError(
            f"the artifact's PTX {ptx_version} needs a CUDA {format_driver_version(needed)} driver or newer, "
            f"but this driver is CUDA {format_driver_version(driver_version)} ({driver_version}): update the "
            f"NVIDIA driver, or export the model for an older PTX version"
        )


def parse_chip(chip: str) -> tuple[int, int, str]:
    """ "sm_90" -> (9, 0, ""), "sm_90a" -> (9, 0, "a"), "sm_100f" -> (10, 0, "f"), "sm_86" -> (8, 6, "")."""
    match = _CHIP.fullmatch(chip)
    if match is None:
        raise ArtifactError(f"target.chip {chip!r} is not a chip name like sm_90")
    return int(match.group(1)), int(match.group(2)), match.group(3)


def check_compute_capability(chip: str, capability: tuple[int, int], device_name: str = "this GPU") -> None:
    """PTX for sm_XY runs on any GPU of compute capability >= X.Y (the driver JIT-compiles it);
    "a" (architecture-specific) features run on exactly X.Y, "f" (family) ones on X.y with y >= Y."""
    major, minor, suffix = parse_chip(chip)
    have = tuple(capability)
    fits = {
        "": have >= (major, minor),
        "a": have == (major, minor),
        "f": have[0] == major and have[1] >= minor,
    }[suffix]
    if not fits:
        needs = {
            "": f"compute capability {major}.{minor} or higher",
            "a": f"exactly compute capability {major}.{minor}",
            "f": f"compute capability {major}.x with x >= {minor}",
        }[suffix]
        raise IncompatibleDeviceError(
            f"the artifact was compiled for {chip}, which needs {needs}; {device_name} has compute capability "
            f"{have[0]}.{have[1]}: export the model for --target cuda:sm_{have[0]}{have[1]}"
        )
