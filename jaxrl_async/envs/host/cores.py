"""Where a host actor's thread runs beside its envs' own threads.

EnvPool steps its envs on threads of its own, so each vector step is a hand-over to them and
back. Where a step is shorter than waking another core (EnvPool's classic control), the hand-over
is quickest with the actor's thread and the pool's on one core (docs/host_envs.md, "One core for
the actor and its pool"): `actor_core` says which core, `on_core` runs a block there.
"""

from __future__ import annotations

import contextlib
import os

from jaxrl_async.envs.host.vec import HostEnvSpec


def actor_core(spec: HostEnvSpec, env_groups: int, index: int) -> int | None:
    """The core actor `index` runs on with its envs' threads, or None (anywhere): where the envs
    step on threads of their own faster than another core wakes for them
    (`HostEnvSpec.shares_actor_core`) and the actor steps them as one group (two groups step one
    while acting for the other, which needs two cores). Actors take this thread's cores from the
    last, round."""
    if not (spec.shares_actor_core and env_groups == 1 and hasattr(os, "sched_setaffinity")):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores[-1 - index % len(cores)]


@contextlib.contextmanager
def on_core(core: int | None):
    """Run the calling thread (alone: Linux's affinity is a thread's) on `core` inside the block,
    then where it ran before; threads it starts inside keep that core. A vector step of EnvPool's
    CartPole x 4 is a hand-over to the pool's thread and back, which on one core costs a switch
    and across two a wake-up of the other (docs/host_envs.md, "One core for the actor and its
    pool"). None, or a system that refuses: the block runs where it is."""
    before = None
    if core is not None:
        try:
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {core})
        except OSError:  # a core this thread may not use (a container's limits): stay where it is
            before = None
    try:
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
