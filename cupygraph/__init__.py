"""cupygraph: launch-cheap CuPy pipelines with CUDA graphs.

``import cupygraph`` needs only NumPy and pydantic; CuPy is imported when a GPU backend is used.
"""

from . import linalg, random
from .api.adaptive import AdaptiveCUDAGraphWrapper
from .api.jit import GraphedFunction, jit
from .api.manager import CUDAGraphManager
from .api.streams import StreamDispatcher
from .api.wrapper import CUDAGraphOptions, CUDAGraphWrapper
from .backends import Backend, HostBackend, gpu_available, select_backend
from .backends.graph_breaks import graph_break
from .backends.guards.baked_numbers import BakedNumberWarning
from .backends.guards.foreign import ForeignMemoryError, ForeignMemoryWarning
from .backends.pdl.modules import pdl_header, pdl_kernel, pdl_module, with_pdl
from .cache import CUDAGraphEntry, CUDAGraphRegistry, CUDAGraphStats, GraphKey, check_fresh
from .compat.aliases import DispatchKey, DispatchMode, GraphEntry
from .compat.dispatcher import CudagraphDispatcher
from .compat.mock import MockCUDAGraph
from .config.defaults import graphs_disabled_by_env
from .config.files import load_config
from .config.model import CUDAGraphConfig, CUDAGraphMode
from .config.sizes import default_capture_sizes
from .control_flow.loops import cond, switch, while_loop
from .diagnostics.explain import configure_logging as _configure_logging
from .diagnostics.plan_sizes import plan_capture_sizes
from .dispatch.context import cudagraph_context, get_forward_context
from .dispatch.decision import Decision, decide
from .dispatch.descriptor import BatchDescriptor, create_dispatch_key, get_cudagraph_sizes, get_padded_key
from .dispatch.dispatcher import CompositeDispatcher, Dispatcher
from .dispatch.policy import AdaptiveDispatchPolicy, DefaultDispatchPolicy, DispatchPolicy
from .dispatch.stats import DispatchStats
from .errors import (
    BackendUnavailableError,
    CaptureError,
    ConfigError,
    CupyGraphError,
    InputMismatchError,
    StaleOutputError,
)
from .linalg import matmul
from .reasons import EvictionReason, FallbackReason, RecaptureReason

_configure_logging()  # honours CUPYGRAPH_LOG

__version__ = "0.1.0"

__all__ = [
    "AdaptiveCUDAGraphWrapper",
    "AdaptiveDispatchPolicy",
    "Backend",
    "BackendUnavailableError",
    "BakedNumberWarning",
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
    "Decision",
    "DefaultDispatchPolicy",
    "DispatchKey",
    "DispatchMode",
    "DispatchPolicy",
    "DispatchStats",
    "Dispatcher",
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
    "decide",
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
    "pdl_header",
    "pdl_kernel",
    "pdl_module",
    "plan_capture_sizes",
    "random",
    "select_backend",
    "switch",
    "while_loop",
    "with_pdl",
]
