"""The exceptions of gpt_runtime: one per thing that can be wrong (the artifact, the machine, a
driver call), so that a caller can tell "fix the files" from "run it elsewhere"."""


class ArtifactError(ValueError):
    """The artifact directory is malformed: a missing or unreadable file, a manifest that breaks
    manifest.schema.json or refers to what is not there, weights that do not match their buffers.
    The message names the file and the field. A ValueError, like gpt.ModelFileError."""


class NoDeviceError(RuntimeError):
    """This machine cannot run CUDA: no libcuda.so.1 (no NVIDIA driver), cuInit refused, or no
    device (or not the one asked for)."""


class IncompatibleDeviceError(RuntimeError):
    """The driver or the GPU is too old for the artifact: the PTX version needs a newer driver, or
    the device's compute capability is below the artifact's chip."""


class CudaError(RuntimeError):
    """A CUDA driver call returned an error. `call` is the function's name, `code` the CUresult,
    `name` its enum name (CUDA_ERROR_...)."""

    def __init__(self, call: str, code: int, name: str, description: str, detail: str = ""):
        self.call = call
        self.code = code
        self.name = name
        message = f"{call} failed: {name} ({code}): {description}"
        super().__init__(message + (f"\n{detail}" if detail else ""))


class ModelFileError(ValueError):
    """The model file given for an artifact's weights (load(..., model=PATH), --model) cannot be
    read, or does not match the artifact: a tensor missing or of another shape, a config or metadata
    value unlike the one the artifact was compiled for. The message names the file and the tensor
    or key, with what the artifact expects and what the file has. A ValueError, like ArtifactError."""
