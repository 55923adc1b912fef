"""The seed's second names for concepts that have one owner elsewhere; for users' code only.

Nothing inside the package uses these names: each concept is spelled by its owner's name
(``CUDAGraphMode``, ``BatchDescriptor``, ``CUDAGraphEntry``).
"""

from __future__ import annotations

from ..cache import CUDAGraphEntry
from ..config.model import CUDAGraphMode
from ..dispatch.descriptor import BatchDescriptor

__all__ = ["DispatchKey", "DispatchMode", "GraphEntry"]

DispatchMode = CUDAGraphMode
DispatchKey = BatchDescriptor
GraphEntry = CUDAGraphEntry
