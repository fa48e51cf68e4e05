"""Target networks: the slowly moving copies that a replay learner bootstraps from, so that its
regression target does not chase the network being fitted (Mnih et al. 2015; Lillicrap et al.
2016 for the soft update).

    target <- tau online + (1 - tau) target       `polyak`: tau in (0, 1] (1: the hard copy)
"""

from __future__ import annotations

from typing import Any

import jax


def polyak(online: Any, target: Any, tau: float) -> Any:
    """target <- tau online + (1 - tau) target, leaf by leaf (`tau` 1 copies the online params)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
