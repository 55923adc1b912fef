"""cupygraph: launch-cheap CuPy pipelines with CUDA graphs.

``import cupygraph`` needs only NumPy and pydantic; CuPy is imported when a GPU backend is used.
"""

from . import linalg, random
from .backends import Backend, HostBackend, gpu_available, select_backend
from .config import CUDAGraphConfig, CUDAGraphMode, graphs_disabled_by_env
from .config_files import load_config
from .context import cudagraph_context, get_forward_context
from .control_flow import cond, while_loop
from .descriptor import BatchDescriptor, DispatchKey, create_dispatch_key, get_cudagraph_sizes, get_padded_key
from .dispatcher import CompositeDispatcher, CudagraphDispatcher, DispatchMode
from .errors import (
    BackendUnavailableError,
    CaptureError,
    ConfigError,
    CupyGraphError,
    InputMismatchError,
    StaleOutputError,
)
from .explain import configure_logging as _configure_logging
from .foreign import ForeignMemoryError, ForeignMemoryWarning
from .freshness import check_fresh
from .jit import GraphedFunction, jit
from .linalg import matmul
from .manager import CUDAGraphManager
from .mock import MockCUDAGraph
from .piecewise import graph_break
from .policy import AdaptiveDispatchPolicy, DefaultDispatchPolicy, DispatchPolicy
from .reasons import EvictionReason, FallbackReason, RecaptureReason
from .registry import CUDAGraphEntry, CUDAGraphRegistry, GraphEntry, GraphKey
from .sizes import default_capture_sizes
from .stats import CUDAGraphStats, DispatchStats
from .streams import StreamDispatcher
from .wrapper import AdaptiveCUDAGraphWrapper, CUDAGraphOptions, CUDAGraphWrapper

_configure_logging()  # honours CUPYGRAPH_LOG

__version__ = "0.1.0"

__all__ = [
    "AdaptiveCUDAGraphWrapper",
    "AdaptiveDispatchPolicy",
    "Backend",
    "BackendUnavailableError",
    "BatchDescriptor",
    "CUDAGraphConfig",
    "CUDAGraphEntry",
    "CUDAGraphManager",
    "CUDAGraphMode",
    "CUDAGraphOptions",
    "CUDAGraphRegistry",
    "CUDAGraphStats",
    "CUDAGraphWrapper",
    "CaptureError",
    "CompositeDispatcher",
    "ConfigError",
    "CudagraphDispatcher",
    "CupyGraphError",
    "DefaultDispatchPolicy",
    "DispatchKey",
    "DispatchMode",
    "DispatchPolicy",
    "DispatchStats",
    "EvictionReason",
    "FallbackReason",
    "ForeignMemoryError",
    "ForeignMemoryWarning",
    "GraphEntry",
    "GraphKey",
    "GraphedFunction",
    "HostBackend",
    "InputMismatchError",
    "MockCUDAGraph",
    "RecaptureReason",
    "StaleOutputError",
    "StreamDispatcher",
    "check_fresh",
    "cond",
    "create_dispatch_key",
    "cudagraph_context",
    "default_capture_sizes",
    "get_cudagraph_sizes",
    "get_forward_context",
    "get_padded_key",
    "gpu_available",
    "graph_break",
    "graphs_disabled_by_env",
    "jit",
    "linalg",
    "load_config",
    "matmul",
    "random",
    "select_backend",
    "while_loop",
]
