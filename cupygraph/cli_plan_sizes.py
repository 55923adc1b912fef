"""``cupygraph plan-sizes``: capture sizes proposed from measured traffic (``diagnostics.plan_sizes``).

Registered by ``cli.py``; expected failures raise ``CupyGraphError``, which ``cli.main`` turns
into one message and exit status 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from .cli_files import check_output_file
from .config.files import SUFFIXES, load_config, read_text_file
from .config.model import CUDAGraphConfig
from .errors import ConfigError, CupyGraphError
from .script import run_script

MAX_HISTOGRAM_BYTES = 64 << 20
"""A histogram holds a count per batch size: even every size up to 2**20 fits well below this."""


def plan_sizes_usage_problem(args: argparse.Namespace) -> Optional[str]:
    if (args.histogram is None) == (args.script is None):
        return "give the traffic with --histogram FILE or --script FILE (one of them)"
    if args.script is None and args.script_args:
        return f"arguments after '--' ({' '.join(args.script_args)}) are for a --script, and none was given"
    return None


def _traffic_of(args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """The histogram of batch sizes, what the graphs cost and the jitted functions measured: a JSON file's
    (a histogram, or statistics with ``batch_sizes`` and ``graph_costs``; no function), or the jitted
    functions' of a script run."""
    from .cache import SizeHistogram
    from .diagnostics.memory_model import memory_model
    from .diagnostics.plan_sizes import histogram_of

    if args.histogram is not None:
        text = read_text_file(Path(args.histogram), "histogram file", limit=MAX_HISTOGRAM_BYTES)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise CupyGraphError(f"{args.histogram}:{err.lineno}: not JSON: {err.msg}; the histogram is a JSON "
                                 "mapping of batch size to calls") from None
        try:  # the API's checks of traffic and costs, naming the file
            traffic = histogram_of(data, where=str(args.histogram))
            return traffic, memory_model([data] if isinstance(data, dict) else [], args.bytes_per_graph,
                                         str(args.histogram)), []
        except (TypeError, ValueError) as err:
            raise CupyGraphError(str(err)) from None
    total = SizeHistogram()
    functions = run_script(args.script, args.script_args)
    for graphed in functions:
        total = total + graphed.stats().batch_sizes
    return total, memory_model(functions, args.bytes_per_graph, str(args.script)), functions


def _check_sizes(config: CUDAGraphConfig, source: str) -> tuple[int, ...]:
    if not config.cudagraph_capture_sizes:
        raise CupyGraphError(f"{source} captures nothing (mode NONE): there are no sizes to plan; give --config a "
                             "config with a graph mode")
    return config.cudagraph_capture_sizes


def _config_of(functions: list[Any], script: str, writing: bool) -> tuple[CUDAGraphConfig, str]:
    """The config the script's jitted functions use (the defaults without a script): their capture sizes are
    the current ones, so they must share them; ``-o`` writes the config, so it needs them to share all of it."""
    if not functions:
        return CUDAGraphConfig(), "the default config"
    config, first = functions[0].config, functions[0].__name__
    for other in functions[1:]:
        mine, theirs = list(config.cudagraph_capture_sizes), list(other.config.cudagraph_capture_sizes)
        if mine != theirs:
            differ = f"{first} captures sizes {mine}, {other.__name__} {theirs}"
        elif writing and other.config != config:
            differ = f"{first} and {other.__name__} share the capture sizes {mine}, not the other fields, for -o"
        else:
            continue
        raise CupyGraphError(f"--script {script}: its jitted functions use different configs ({differ}); give "
                             "--config FILE, the config to compare with and to write with the proposed sizes")
    return config, f"--script {script}'s {first}"


def _cmd_plan_sizes(args: argparse.Namespace) -> int:
    from .config.files import save_config
    from .diagnostics.plan_sizes import plan_capture_sizes

    if args.output is not None:
        check_output_file(args.output, SUFFIXES)  # before the traffic is read or the script runs
    given = load_config(args.config) if args.config is not None else None
    if given is not None:
        _check_sizes(given, args.config)  # before the script runs
    traffic, measured, functions = _traffic_of(args)
    if given is not None:
        config, source = given, args.config
    else:
        config, source = _config_of(functions, args.script, writing=args.output is not None)
    current = _check_sizes(config, source)
    try:
        plan = plan_capture_sizes(traffic, current=current, max_graphs=args.max_graphs,
                                  memory_limit=args.memory_limit, bytes_per_graph=args.bytes_per_graph,
                                  largest=args.largest, measured=measured)
    except (TypeError, ValueError) as err:
        raise CupyGraphError(str(err)) from err
    print(plan.report())
    if args.output is not None:
        save_config(config.replace(capture_sizes=list(plan.sizes), max_capture_size=max(plan.sizes)), args.output)
        print(f"wrote {args.output}")
    return 0


def _byte_size(text: str) -> int:
    from .config.values import parse_byte_size

    try:
        value = parse_byte_size(text)
    except (ValueError, ConfigError) as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size in bytes (e.g. 2GiB), got {text!r}")
    return value


def add_plan_sizes_command(commands: Any, positive_int: Callable[[str], int]) -> None:
    plan = commands.add_parser(
        "plan-sizes", help="propose capture sizes that minimise padding on measured traffic",
        description="Read a histogram of real batch sizes (a JSON mapping size -> calls, or the stats of the "
        "jitted functions a --script makes) and propose the capture sizes that waste the fewest padding rows "
        "under a limit on graphs or memory; print the expected waste of the current and proposed lists.",
    )
    plan.add_argument("--histogram", metavar="FILE", default=None,
                      help="JSON: {size: calls} or {\"batch_sizes\": {size: calls}} (stats().batch_sizes.to_dict()), "
                      "with \"graph_costs\": stats().to_dict()['graph_costs'] for --memory-limit")
    plan.add_argument("--script", metavar="FILE", default=None,
                      help="run this script and plan from its jitted functions' traffic (its arguments after '--')")
    plan.add_argument("--config", metavar="FILE", default=None,
                      help="the config in use: its capture sizes are the current ones, and -o writes it with the "
                      "proposed sizes (default: the config of the --script's jitted functions, which must share "
                      "its capture sizes, and all of it for -o; with --histogram, the defaults)")
    plan.add_argument("--max-graphs", type=positive_int, default=None, metavar="N", help="at most N capture sizes")
    plan.add_argument("--memory-limit", "--memory-budget", dest="memory_limit", type=_byte_size, default=None,
                      metavar="BYTES", help="at most this memory for the graphs: each size costs what its capture "
                      "took (measured in the --script run, or the --histogram file's graph_costs), fitted for "
                      "sizes not captured (the largest size, whose blocks the others reuse, no less than what "
                      "the measured keys say it needs); else --bytes-per-graph per graph")
    plan.add_argument("--bytes-per-graph", type=_byte_size, default=None, metavar="BYTES",
                      help="what one graph holds, where nothing was measured (describe() shows it per graph)")
    plan.add_argument("--largest", type=positive_int, default=None, metavar="N",
                      help="largest capture size (default: the config's)")
    plan.add_argument("-o", "--output", metavar="FILE", default=None,
                      help="write the config with the proposed sizes (.yaml/.json/.toml)")
    plan.set_defaults(handler=_cmd_plan_sizes, subparser=plan, script_args=[])
