"""cupygraph: launch-cheap CuPy pipelines with CUDA graphs."""
from .config import CUDAGraphConfig, CUDAGraphMode
from .config_files import load_config
from .errors import CaptureError, ConfigError, CupyGraphError
