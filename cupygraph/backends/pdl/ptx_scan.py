"""Which kernels of a PTX module wait for their predecessors before touching memory.

A kernel may start early behind a programmatic edge only if every one of its threads executes
``griddepcontrol.wait`` before it reads or writes memory another kernel could touch. This scan
proves that the simple way: walking the entry's instructions in order, an unpredicated
``griddepcontrol.wait`` must come before any instruction that is not known to be harmless —
arithmetic, moves, conversions, predicates, parameter/shared/local loads and stores, warp
intrinsics, barriers and ``griddepcontrol.launch_dependents``. A global or generic load or store,
an atomic, a texture or bulk copy, a branch, a call or a return before the wait (or no wait at
all) gives a kernel that does not wait; its edges stay plain. Straight-line code before the
first branch runs in every thread, so the proof needs no control-flow graph; a wait placed after
an early ``return`` is refused, though it might be safe.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["WaitVerdict", "entry_verdicts", "may_wait"]

_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\(")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LABEL = re.compile(r"^[A-Za-z_$%][\w$]*:\s*")
_PREDICATE = re.compile(r"^@!?%?[\w$]+\s+")

# Root opcodes (text before the first '.') that touch no memory and do not branch.
_HARMLESS = frozenset("""
    mov add sub mul mad mul24 mad24 sad fma div rem abs neg min max and or xor not cnot shl shr shf
    lop3 cvt cvta setp selp set slct bfe bfi bfind brev popc clz prmt rcp sqrt rsqrt ex2 lg2 sin cos
    tanh copysign testp dp4a dp2a fns bar barrier membar fence nanosleep activemask vote shfl match
    redux elect griddepcontrol isspacep getctarank mapa
""".split())
_SAFE_SPACES = (".param", ".shared", ".local", ".const")
# Text without which a source cannot reach griddepcontrol.wait: the instruction (inline PTX, even
# split over string literals), an NVVM builtin, CUDA's cudaGridDependencySynchronize, or a header.
_WAIT_SPELLINGS = re.compile(r"griddep|depcontrol|dependency|\basm\b|__asm|nvvm|#\s*include", re.I)
_INCLUDE_OPTION = re.compile(r"^--?(pre-)?include", re.I)


@dataclasses.dataclass(frozen=True)
class WaitVerdict:
    """Whether a kernel waits for its predecessors before touching memory; if not, why."""

    waits: bool
    reason: str = ""
    scanned: bool = True
    """False when the kernel's code could not be read (not compiled, no such entry): its edges stay
    plain, and the statistics say ``consumer_not_scanned``, not that it does not wait."""


_NO_WAIT = WaitVerdict(False, "no griddepcontrol.wait (CUPYGRAPH_PDL_WAIT) in the kernel")


def may_wait(source: str, options: tuple[str, ...] = ()) -> bool:
    """Whether ``source`` compiled with ``options`` could contain ``griddepcontrol.wait`` at all.

    False only when neither has inline assembly, an NVVM builtin, CUDA's function for the wait or an
    include (a header, a ``-include`` option or a ``-D`` macro could bring one): such a kernel does
    not wait, and needs no compile to say so. Only ever a reason to keep an edge plain.
    """
    return bool(_WAIT_SPELLINGS.search(source)) or any(
        _WAIT_SPELLINGS.search(option) or _INCLUDE_OPTION.match(option) for option in options)


def entry_verdicts(ptx: str) -> dict[str, WaitVerdict]:
    """Verdict of every ``.entry`` (kernel) in ``ptx``, by its (mangled) name."""
    text = _COMMENTS.sub("", ptx)
    verdicts: dict[str, WaitVerdict] = {}
    for match in _ENTRY.finditer(text):
        body = _body(text, match.end())
        verdicts[match.group(1)] = (_verdict(body) if body is not None
                                    else WaitVerdict(False, "unreadable PTX body", scanned=False))
    return verdicts


def _body(text: str, start: int) -> str | None:
    """The text between the entry's outer braces (after its parameter list)."""
    close = text.find(")", start)
    opening = text.find("{", close)
    if close < 0 or opening < 0:
        return None
    depth = 0
    for i in range(opening, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[opening + 1:i]
    return None


def _verdict(body: str) -> WaitVerdict:
    if "griddepcontrol.wait" not in body:
        return _NO_WAIT
    for raw in body.split(";"):
        statement = raw.replace("{", " ").replace("}", " ").strip()
        while True:  # a label may share a statement with the next instruction
            label = _LABEL.match(statement)
            if label is None:
                break
            statement = statement[label.end():].strip()
        if not statement or statement.startswith("."):
            continue  # a declaration or directive
        predicate = _PREDICATE.match(statement)
        if predicate is not None:
            statement = statement[predicate.end():]
        opcode = statement.split(None, 1)[0]
        if opcode == "griddepcontrol.wait":
            if predicate is not None:
                return WaitVerdict(False, "griddepcontrol.wait runs only under a predicate")
            return WaitVerdict(True)
        why = _hazard(opcode)
        if why:
            return WaitVerdict(False, f"{why} ({opcode}) comes before griddepcontrol.wait")
    return _NO_WAIT


def _hazard(opcode: str) -> str:
    """Why ``opcode`` may not come before the wait ('' when harmless)."""
    root, _, suffix = opcode.partition(".")
    if root in ("ld", "st", "ldu"):
        spaces = "." + suffix
        if any(spaces.startswith(space) for space in _SAFE_SPACES):
            return ""
        return "a global or generic memory access"
    if root in ("bra", "brx", "call", "ret", "exit", "trap"):
        return "a branch, call or return"
    if root in _HARMLESS:
        return ""
    return "an instruction that may touch memory"
