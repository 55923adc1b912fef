"""Layer 1, configuration: ``CUDAGraphConfig`` and ``CUDAGraphMode``, capture sizes, typed values,
validation rules and messages, and config files (``load_config``/``save_config``).

May import the foundation modules only (errors, reasons, pytree, frames).
"""
