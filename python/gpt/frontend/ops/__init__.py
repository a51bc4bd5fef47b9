"""The importer's op handlers, one module per ATen op family; importing this package registers them all.

Adding an ATen op is one `@handles` function in its family's module (a pattern only the importer
can see: one `@recognizes` function); docs/FRONTEND.md's coverage table lists what each becomes.
"""

from gpt.frontend.ops import attention, elementwise, embedding, linear, normalization, rope, shape

__all__ = ["attention", "elementwise", "embedding", "linear", "normalization", "rope", "shape"]
