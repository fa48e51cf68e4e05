"""Count what a compiled program launches: the ops of its optimised HLO, loops multiplied out.

On a GPU an iteration of the trainer is thousands of tiny kernels, so its speed follows the
number of kernels (fusions, library calls, copies) it launches more than its FLOPs. The count
comes from the optimised HLO that XLA actually runs, so it shows a change's effect on any
machine: a fusion, a custom call (a library matmul), a copy or any other unfused instruction is
one op; a `while` is its trip count times its body and condition; a `conditional` is its
largest branch; a `call` is its callee. Instructions that launch nothing (parameters,
constants, tuples and their elements, bitcasts) count zero.

    text = jax.jit(f).lower(*args).compile().as_text()
    count_ops(text)                  # the whole program
    count_ops(text, per="loop")      # one trip of the entry's loop of unknown length
"""

from __future__ import annotations

import collections
import json
import re
from typing import NamedTuple

FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
                  "partition-id", "replica-id", "opt-barrier"})
_COMPUTATION = re.compile(r"^(ENTRY )?%(\S+) .*\{\s*$")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALLEE = {name: re.compile(rf"\b{name}=%([\w.\-]+)") for name in ("condition", "body", "to_apply")}
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}|(?:true|false)_computation=%([\w.\-]+)")


class Instruction(NamedTuple):
    opcode: str
    text: str  # operands and attributes


class OpCount(NamedTuple):
    total: int
    by_kind: dict  # "fusion", "copy", "custom-call", "while", "other" -> count

    def as_dict(self) -> dict:
        return {"ops": self.total, **{f"{kind}_ops": n for kind, n in sorted(self.by_kind.items())}}


def _opcode(rhs: str) -> tuple[str, str]:
    """Split `TYPE opcode(operands), attrs` after the `=`; TYPE may be a (nested) tuple."""
    i = 0
    if rhs.startswith("("):
        depth = 0
        for i, ch in enumerate(rhs):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                break
    start = rhs.index(" ", i) + 1
    paren = rhs.index("(", start)
    return rhs[start:paren], rhs[paren:]


def parse(text: str) -> tuple[dict[str, list[Instruction]], str]:
    """The module's computations (name -> instructions) and the entry computation's name."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            current = computations.setdefault(head.group(2), [])
            entry = head.group(2) if head.group(1) else entry
            continue
        if current is None or " = " not in line or line.strip() == "}":
            continue
        opcode, rest = _opcode(line.split(" = ", 1)[1].strip())
        current.append(Instruction(opcode, rest))
    if entry is None:
        raise ValueError("no ENTRY computation: pass the text of a compiled program "
                         "(jax.jit(f).lower(...).compile().as_text())")
    return computations, entry


def _kind(opcode: str) -> str:
    return opcode if opcode in ("fusion", "copy", "custom-call", "while") else "other"


class _Counter:
    def __init__(self, computations: dict[str, list[Instruction]]):
        self.computations = computations
        self.memo: dict[str, collections.Counter] = {}

    def ops(self, name: str) -> collections.Counter:
        if name not in self.memo:
            self.memo[name] = collections.Counter()  # a recursive call (none in HLO) would count 0
            self.memo[name] = sum((self.instruction(i) for i in self.computations[name]), collections.Counter())
        return self.memo[name]

    def loop_trip(self, instruction: Instruction) -> collections.Counter:
        """One trip of a `while`: its condition and its body."""
        return self.ops(_CALLEE["condition"].search(instruction.text).group(1)) + \
            self.ops(_CALLEE["body"].search(instruction.text).group(1))

    def instruction(self, instruction: Instruction) -> collections.Counter:
        op = instruction.opcode
        if op in FREE:
            return collections.Counter()
        own = collections.Counter({_kind(op): 1})
        if op == "while":
            trips = _TRIP_COUNT.search(instruction.text)
            return own + _times(self.loop_trip(instruction), int(trips.group(1)) if trips else 1)
        if op == "conditional":
            branches = [b.strip().lstrip("%") for m in _BRANCHES.finditer(instruction.text)
                        for b in (m.group(1).split(",") if m.group(1) else [m.group(2)])]
            return own + max((self.ops(b) for b in branches), key=lambda c: sum(c.values()),
                             default=collections.Counter())
        if op == "call":
            return self.ops(_CALLEE["to_apply"].search(instruction.text).group(1))
        return own


def _times(counter: collections.Counter, n: int) -> collections.Counter:
    return collections.Counter({k: v * n for k, v in counter.items()})


def _loops_of_unknown_length(counter: _Counter, name: str) -> list[Instruction]:
    """The `while` loops without a known trip count reachable from `name` outside any loop."""
    found = []
    for instruction in counter.computations[name]:
        if instruction.opcode == "while" and not _TRIP_COUNT.search(instruction.text):
            found.append(instruction)
        elif instruction.opcode == "call":
            found += _loops_of_unknown_length(counter, _CALLEE["to_apply"].search(instruction.text).group(1))
    return found


def count_ops(text: str, per: str = "program") -> OpCount:
    """Ops launched by a compiled program (`per="program"`), or by one trip of its one loop of
    unknown length (`per="loop"`: the fused trainer's loop over a traced number of iterations)."""
    computations, entry = parse(text)
    counter = _Counter(computations)
    if per == "program":
        counts = counter.ops(entry)
    elif per == "loop":
        loops = _loops_of_unknown_length(counter, entry)
        if len(loops) != 1:
            raise ValueError(f"per='loop' needs exactly one loop of unknown length outside any other loop; "
                             f"this program has {len(loops)}")
        counts = counter.loop_trip(loops[0])
    else:
        raise ValueError(f"per={per!r}: choose 'program' or 'loop'")
    return OpCount(sum(counts.values()), dict(counts))


def main(argv: list[str] | None = None) -> int:
    """`python -m jaxrl_async.cli.bench.hlo_ops FILE.hlo [program|loop]`: print the count as JSON."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    with open(args[0]) as f:
        print(json.dumps(count_ops(f.read(), *(args[1:2] or ["program"])).as_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
