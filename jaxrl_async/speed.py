"""Speed settings per backend: how the loops of a run are laid out, never what they compute.

On a GPU an iteration is thousands of tiny kernels, bound by their launches, and every trip of a
`lax.scan` / `while_loop` costs launches of its own, so unrolling the rollout's scan and computing
GAE's recursion as one matrix product pay; on the CPU the same changes only add compile time. A
field left at 'auto' takes its backend's value below; results agree to float rounding whatever is
chosen (tested). The measurements behind the values: docs/benchmarks.md, "Speed defaults".
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SpeedSettings:
    """The resolved speed settings of a run (recorded in its summary)."""

    scan_unroll: int  # the rollout's scan over time
    gae_scan: str  # "sequential" | "matrix": GAE's and the learners' return recursions
    update_unroll: int  # the learner's loop over minibatches
    eval_unroll: int  # env steps per trip of the evaluation loop

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


BACKEND_DEFAULTS = {
    "cpu": SpeedSettings(scan_unroll=1, gae_scan="sequential", update_unroll=1, eval_unroll=1),
    "gpu": SpeedSettings(scan_unroll=4, gae_scan="matrix", update_unroll=4, eval_unroll=1),
}
# a backend not measured (TPU, ...) is launch-bound like the GPU rather than like the CPU
_OTHER = BACKEND_DEFAULTS["gpu"]
# the matrix GAE holds a [T, T] matrix per env and seed: past this many floats (32 MiB; larger ones
# compiled for minutes on a GPU: docs/benchmarks.md, "The 512-seed compile was the matrix GAE"), the scan
MATRIX_GAE_MAX_FLOATS = 1 << 23


def resolve_speed(cfg, backend: str | None = None) -> SpeedSettings:
    """`cfg`'s speed settings with every 'auto' replaced by `backend`'s default
    (default: `jax.default_backend()`)."""
    import jax  # only here: the CLI reads configs without starting JAX

    defaults = BACKEND_DEFAULTS.get(backend or jax.default_backend(), _OTHER)
    if cfg.num_seeds * cfg.num_envs * cfg.num_steps ** 2 > MATRIX_GAE_MAX_FLOATS:
        defaults = dataclasses.replace(defaults, gae_scan="sequential")
    chosen = {field.name: getattr(cfg, field.name) for field in dataclasses.fields(SpeedSettings)}
    return SpeedSettings(**{name: getattr(defaults, name) if value == "auto" else value
                            for name, value in chosen.items()})
