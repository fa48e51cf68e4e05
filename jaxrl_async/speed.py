"""Per-backend speed defaults: how the loops of a run are laid out, never what they compute.

On a GPU an iteration is thousands of ~1 us kernels and every trip of a `lax.scan` /
`while_loop` costs launches of its own, so unrolling the rollout's scan and computing GAE's
recursion as one matrix product (`advantages`, scan="matrix") pay; on the CPU the same
changes only add compile time or lose speed. A config field left at 'auto' takes its
backend's value below; results agree to float rounding whatever is chosen (tested).

Measured (README.md, "Speed defaults", with the commands) on one H100, CartPole-v1 4x128,
steps/s: every loop rolled 70.5k; rollout unrolled 4x 108k (8x: 151k, compile +7 s);
+ GAE as a log-depth associative scan 139k (compile +10 s at 4x128, +28 s at 2048x64: why
the matrix form replaced it); minibatch loop unrolled 4x +5%; the evaluation loop
unrolled 4x: compile +3.4 s for no measurable gain.
"""

from __future__ import annotations

import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class SpeedSettings:
    """The resolved speed settings of a run (recorded in its summary)."""

    scan_unroll: int  # the rollout's scan over time
    gae_scan: str  # "sequential" | "matrix"
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
# the matrix GAE holds a [T, T] matrix per env and seed: past this many floats (128 MiB), the scan
MATRIX_GAE_MAX_FLOATS = 1 << 25


def resolve(cfg, backend: str | None = None) -> SpeedSettings:
    """`cfg`'s speed settings with every 'auto' replaced by `backend`'s default
    (default: `jax.default_backend()`)."""
    defaults = BACKEND_DEFAULTS.get(backend or jax.default_backend(), _OTHER)
    if cfg.num_seeds * cfg.num_envs * cfg.num_steps ** 2 > MATRIX_GAE_MAX_FLOATS:
        defaults = dataclasses.replace(defaults, gae_scan="sequential")
    chosen = {field.name: getattr(cfg, field.name) for field in dataclasses.fields(SpeedSettings)}
    return SpeedSettings(**{name: getattr(defaults, name) if value == "auto" else value
                            for name, value in chosen.items()})
