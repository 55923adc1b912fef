"""The ``cupygraph`` command: validate and inspect config files, print the schema, run the demo.

With its plan-sizes command (``cli_plan_sizes.py``), the only module of cupygraph that prints. Every
expected failure (a bad config, a backend that cannot run here) is one message on stderr and a
nonzero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Optional

import yaml

from .cli_files import check_output_file
from .cli_plan_sizes import add_plan_sizes_command, plan_sizes_usage_problem
from .config.defaults import graphs_disabled_by_env
from .config.files import load_config
from .config.model import CUDAGraphConfig, CUDAGraphMode
from .errors import ConfigError, CupyGraphError
from .script import ScriptError, run_script

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by Ctrl-C (128 + SIGINT)
DEMO_CALLS = 200
"""Calls of the demo workload that inspect, dot and bench-config make unless told otherwise."""

# Commands that run a user script; after their `--`, every argument is the script's own.
SCRIPT_COMMANDS = ("inspect", "dot", "plan-sizes")


def _mode_properties(mode: CUDAGraphMode) -> dict[str, Any]:
    """What a mode does at run time, with vLLM's helper names as keys."""
    return {
        "name": mode.name,
        "decode_mode": mode.decode_mode().name,
        "mixed_mode": mode.mixed_mode().name,
        "separate_routine": mode.separate_routine(),
        "max_cudagraph_mode": mode.max_cudagraph_mode().name,
        "has_graphs": mode.has_graphs(),
        "has_full_cudagraphs": mode.has_full_cudagraphs(),
        "has_piecewise_cudagraphs": mode.has_piecewise_cudagraphs(),
        "valid_runtime_mode": mode.valid_runtime_modes(),
    }


def resolved_view(config: CUDAGraphConfig, source: Optional[str] = None) -> dict[str, Any]:
    """The config as written plus what cupygraph derives from it (what ``show`` prints)."""
    from .dispatch.decision import capture_ladders

    sizes = list(config.cudagraph_capture_sizes)
    return {
        "source": source or "<defaults>",
        "config": config.to_dict(),
        "resolved": {
            "cudagraph_capture_sizes": sizes,
            "num_capture_sizes": len(sizes),
            "largest_capture_size": config.largest_capture_size,
            # Each runtime mode's graphs on their own sizes (uniform-decode FULL graphs: rounded up).
            "capture_sizes_by_mode": {mode.name: list(ladder) for mode, ladder in capture_ladders(config).items()},
            "mode": _mode_properties(config.mode),
            "disabled_by_env": graphs_disabled_by_env(),
        },
    }


class _ShowDumper(yaml.SafeDumper):
    """Block mappings, flow lists: the 51 default sizes fit on a few lines, fields one per line."""


_ShowDumper.add_representer(
    list, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)


def _cmd_validate(args: argparse.Namespace) -> int:
    invalid = 0
    for name in args.files:
        try:
            load_config(name)
        except ConfigError as err:
            invalid += 1
            print(str(err), file=sys.stderr)
        else:
            print(f"ok {name}")
    if invalid:
        print(f"{invalid} of {len(args.files)} config files invalid", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    config = load_config(args.file) if args.file is not None else CUDAGraphConfig()
    view = resolved_view(config, args.file)
    if args.json:
        print(json.dumps(view, indent=2))
    else:
        sys.stdout.write(yaml.dump(view, Dumper=_ShowDumper, sort_keys=False, width=100))
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(CUDAGraphConfig.model_json_schema(), indent=2))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    # Imported here so validate/show/schema work in an install without the demo (or its deps).
    try:
        from .demo import main as demo_main
    except ModuleNotFoundError as err:
        if err.name not in ("cupygraph.demo", __package__ + ".demo"):
            raise
        print("cupygraph: the demo is not available in this install (no cupygraph.demo)", file=sys.stderr)
        return EXIT_INVALID
    result = demo_main(args)
    return EXIT_OK if result is None else int(result)


def _run_script_or_demo(args: argparse.Namespace) -> list[Any]:
    """Jitted functions to look at: those a user script made, or the demo's after its calls."""
    if args.script is not None:
        return run_script(args.script, args.script_args)
    from .demo import build_workload

    work = build_workload(args.backend, args.config, args.calls or DEMO_CALLS)
    print(work.banner)
    for x in work.inputs:
        work.graphed(x)
    return [work.graphed]


def _cmd_inspect(args: argparse.Namespace) -> int:
    for graphed in _run_script_or_demo(args):
        print(graphed.describe())
        print()
    return EXIT_OK


def _cmd_dot(args: argparse.Namespace) -> int:
    from .diagnostics.inspect import DOT_SUFFIXES, render_dot, to_dot

    if args.output is not None:
        check_output_file(args.output, DOT_SUFFIXES)  # before the workload runs, not after
    graphed = _run_script_or_demo(args)[0]
    dot = to_dot(graphed, args.size)
    if args.output is None:
        print(dot)
        return EXIT_OK
    try:
        path = render_dot(dot, args.output)
    except (RuntimeError, ValueError) as err:
        print(f"cupygraph dot: {err}", file=sys.stderr)
        return EXIT_INVALID
    print(f"wrote {path}")
    return EXIT_OK


def _cmd_bench_config(args: argparse.Namespace) -> int:
    from .demo import build_workload, per_size_timings

    work = build_workload(args.backend, args.file, args.calls or DEMO_CALLS)
    print(work.banner)
    print(f"{'batch':>6} {'padded':>7} {'eager us':>10} {'graphed us':>11} {'speedup':>8}")
    for n, padded, eager_t, graph_t in per_size_timings(work, reps=args.reps):
        shown = "eager" if padded is None else str(padded)
        print(f"{n:>6} {shown:>7} {eager_t * 1e6:>10.1f} {graph_t * 1e6:>11.1f} {eager_t / graph_t:>7.2f}x")
    print()
    print(work.graphed.describe())
    return EXIT_OK


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cupygraph",
        description="Launch-cheap CuPy pipelines with CUDA graphs: config tools and a demo.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    validate = commands.add_parser(
        "validate", help="check config files (.yaml/.yml/.json/.toml)",
        description="Check config files. Prints 'ok FILE' per valid file and one line per problem "
        "(file:line, field, what is allowed) on stderr; exits 1 if any file is invalid.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=_cmd_validate)

    show = commands.add_parser(
        "show", help="print a config with its resolved capture sizes and mode properties",
        description="Print the config as loaded, the capture sizes it resolves to and what its mode "
        "does at run time. Without FILE, shows the defaults.",
    )
    show.add_argument("file", nargs="?", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    show.set_defaults(handler=_cmd_show)

    schema = commands.add_parser("schema", help="print the JSON Schema of CUDAGraphConfig")
    schema.set_defaults(handler=_cmd_schema)

    demo = commands.add_parser("demo", help="run a small pipeline eagerly and with graphs, and compare")
    demo.add_argument("--backend", choices=("auto", "cupy", "host"), default=None,
                      help="auto: CuPy where a GPU is usable, else the NumPy host backend (default: the "
                      "config's backend, auto unless it says otherwise)")
    demo.add_argument("--config", metavar="FILE", default=None, help="config file to run the demo with")
    demo.add_argument("--calls", type=_positive_int, default=None, metavar="N", help="calls to time")
    demo.set_defaults(handler=_cmd_demo)

    def workload_options(sub: argparse.ArgumentParser, script: bool = True) -> None:
        # Defaults are None so that a demo option given together with --script can be refused.
        sub.add_argument("--backend", choices=("auto", "cupy", "host"), default=None,
                         help="auto: CuPy where a GPU is usable, else the NumPy host backend (default: the "
                         "config's backend, auto unless it says otherwise)")
        sub.add_argument("--calls", type=_positive_int, default=None, metavar="N",
                         help=f"demo calls to make (default {DEMO_CALLS})")
        if script:
            sub.add_argument("--config", metavar="FILE", default=None, help="config file for the demo workload")
            sub.add_argument("--script", metavar="FILE", default=None,
                             help="run this Python script instead of the demo and look at its jitted functions; "
                             "arguments after '--' are the script's own (its sys.argv[1:])")
            sub.set_defaults(subparser=sub, script_args=[])

    inspect = commands.add_parser(
        "inspect", help="table of graphs held per mode and size, hit rate, fallbacks by reason",
        description="Run the demo workload (or --script) and describe every jitted function.",
    )
    workload_options(inspect)
    inspect.set_defaults(handler=_cmd_inspect)

    dot = commands.add_parser(
        "dot", help="export a captured graph as Graphviz DOT, or render it (.svg/.png) with Graphviz",
        description="Run the demo workload (or --script) and export the graph for one batch size.",
    )
    workload_options(dot)
    dot.add_argument("--size", type=_positive_int, default=None, help="batch size (default: the largest held)")
    dot.add_argument("-o", "--output", default=None, metavar="FILE",
                     help=".dot, .svg, .png or .pdf (default: print DOT)")
    dot.set_defaults(handler=_cmd_dot)

    bench = commands.add_parser(
        "bench-config", help="time the demo workload per batch size under a config",
        description="Run the demo workload under FILE and print eager vs graphed time per batch size, "
        "to tune capture sizes.",
    )
    bench.add_argument("file", metavar="FILE")
    workload_options(bench, script=False)
    bench.add_argument("--reps", type=_positive_int, default=20, help="timed calls per size")
    bench.set_defaults(handler=_cmd_bench_config)

    add_plan_sizes_command(commands, _positive_int)
    return parser


def _split_script_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """cupygraph's own arguments, and those after the first ``--`` of inspect/dot (the script's)."""
    if argv and argv[0] in SCRIPT_COMMANDS and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _script_usage_problem(args: argparse.Namespace) -> Optional[str]:
    """Why the options given do not go together (demo options with --script), or None."""
    if args.command == "plan-sizes":  # its --config is the config in use, not the demo's
        return plan_sizes_usage_problem(args)
    if args.script is None:
        if args.script_args:
            return f"arguments after '--' ({' '.join(args.script_args)}) are for a --script, and none was given"
        return None
    demo_only = [f"--{name}" for name in ("backend", "calls", "config") if getattr(args, name, None) is not None]
    if demo_only:
        verb = "applies" if len(demo_only) == 1 else "apply"
        return (f"{', '.join(demo_only)} {verb} to the demo workload, not to a --script; pass the script's "
                f"own options after '--'")
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status instead of exiting (argparse errors included).

    Every expected failure is one message on stderr and a nonzero status: usage errors 2, the rest 1.
    """
    parser = build_parser()
    own, script_args = _split_script_argv(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(own)
    except SystemExit as exit_:
        # --help exits 0, usage errors 2; returned so in-process callers need not catch SystemExit.
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if hasattr(args, "script_args"):
        args.script_args = script_args
        problem = _script_usage_problem(args)
        if problem is not None:
            args.subparser.print_usage(sys.stderr)
            print(f"cupygraph {args.command}: error: {problem}", file=sys.stderr)
            return EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ScriptError as err:
        sys.stderr.write(err.details)
        print(f"cupygraph {args.command}: {err}", file=sys.stderr)
        return err.status
    except CupyGraphError as err:
        print(f"cupygraph {args.command}: {err}" if not isinstance(err, ConfigError) else str(err),
              file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print(f"cupygraph {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, and keep the exit-time flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INVALID
    except OSError as err:
        # The file and the system's reason, without the errno ("[Errno 13] ...").
        where = f"{err.filename}: " if err.filename else ""
        print(f"cupygraph {args.command}: {where}{err.strerror or err}", file=sys.stderr)
        return EXIT_INVALID
