"""Where compilation time goes, from JAX's own monitoring events: tracing to a jaxpr, lowering to
StableHLO, and XLA's compile (or the load of an executable from the persistent cache).

    with CompilePhases() as phases:   # records the calling thread's compilations
        ...                           # build, trace, lower, compile
        phases.stop()                 # (or at the block's end)
    phases.seconds()                  # {"trace_s": ..., "lower_s": ..., "xla_s": ...}

JAX reports each event with its start and end; a jit traced inside another's trace reports its own
nested span, so each phase's time is the union of its spans, not their sum (the phases themselves
may overlap a little: tracing can compile a constant). Only the thread that
made the recorder is counted: the evaluation compiles in a thread of its own, beside the loop.
"""

from __future__ import annotations

import threading

import jax

# JAX's event names (jax/_src/dispatch.py), each the phase it times
PHASE_OF_EVENT = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "xla_s",
}


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of `(start, end)` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class CompilePhases:
    """Records the spans of JAX's compile events in the thread that made it, until `stop`."""

    def __init__(self):
        self._thread = threading.get_ident()
        self._spans: dict[str, list[tuple[float, float]]] = {phase: [] for phase in PHASE_OF_EVENT.values()}
        self._recording = True
        jax.monitoring.register_event_time_span_listener(self._record)

    def _record(self, event: str, start: float, end: float, **_) -> None:
        phase = PHASE_OF_EVENT.get(event)
        if phase is not None and threading.get_ident() == self._thread:
            self._spans[phase].append((start, end))

    def stop(self) -> "CompilePhases":
        if self._recording:
            jax.monitoring.unregister_event_time_span_listener(self._record)
            self._recording = False
        return self

    def __enter__(self) -> "CompilePhases":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def seconds(self) -> dict[str, float]:
        return {phase: union_seconds(spans) for phase, spans in self._spans.items()}
