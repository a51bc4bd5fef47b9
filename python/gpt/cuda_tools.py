"""Where the CUDA build tools of the pinned `nvidia-cuda-nvcc-cu12` wheel are: `libdevice.10.bc`
(linked into GPU code for math functions) and `ptxas` (the tests assemble the PTX with it).

Pure Python, no CUDA toolkit: the wheel is a namespace package `nvidia.cuda_nvcc` that ships
`nvvm/libdevice/libdevice.10.bc` and `bin/ptxas` beside each other."""

import importlib.util
import os

PIP_PACKAGE = "nvidia-cuda-nvcc-cu12"
_MODULE = "nvidia.cuda_nvcc"
_LIBDEVICE = os.path.join("nvvm", "libdevice", "libdevice.10.bc")
_PTXAS = os.path.join("bin", "ptxas")


class CudaToolsError(FileNotFoundError):
    """The CUDA build tools are not installed: the message names the pip package that ships them."""


def _package_directories() -> list[str]:
    try:
        spec = importlib.util.find_spec(_MODULE)
    except ModuleNotFoundError:  # no `nvidia` namespace at all
        spec = None
    if spec is None or spec.submodule_search_locations is None:
        return []
    return list(spec.submodule_search_locations)


def _find(relative: str, executable: bool = False) -> str:
    directories = _package_directories()
    for directory in directories:
        path = os.path.join(directory, relative)
        if os.path.isfile(path) and (not executable or os.access(path, os.X_OK)):
            return path
    where = f"not in {', '.join(directories)}" if directories else f"the Python package {_MODULE} is not installed"
    raise CudaToolsError(
        f"{os.path.basename(relative)} of the CUDA build tools was not found ({where}): "
        f"install the pinned pip package {PIP_PACKAGE} (`python3 -m pip install -r requirements.txt`, "
        f"which tools/setup.sh runs)"
    )


def libdevice_path() -> str:
    """The path of libdevice.10.bc (NVIDIA's math library as LLVM bitcode) in the installed wheel."""
    return _find(_LIBDEVICE)


def ptxas_path() -> str:
    """The path of the `ptxas` executable (PTX to SASS assembler) in the installed wheel."""
    return _find(_PTXAS, executable=True)
