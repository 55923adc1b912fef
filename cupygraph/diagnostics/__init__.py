"""Layer 7, diagnostics: logging set-up, explanations of new keys and fallbacks, and inspection of
captured graphs.

May import foundation, config, dispatch, backends, control_flow/linalg/random, cache and compat;
never api, testing or the CLI.
"""
