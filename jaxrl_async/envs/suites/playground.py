"""MuJoCo Playground's envs as `--env playground:ID`: its DM Control Suite and locomotion envs (MJX).

    make("CartpoleBalance", impl="jax", episode_length=1000)

- `episode_length`: the time limit in env steps (default: the env config's own, 1000 for the
  DM Control Suite), a truncation bootstrapped from the final observation;
- `impl`: MJX's implementation, `jax` or `warp`, or `auto` (the default): `jax` on the CPU,
  where Playground's default `warp` kernels compile for the CPU but step many times slower
  (docs/suites.md, playground), the env config's own elsewhere;
- `auto_reset`: `full` (the default: a fresh reset for every episode, run only for the envs whose
  episode ended, `autoreset.reset_where`) or `cached` (each env restarts from the state its first
  reset drew, as Playground's `wrap_for_brax_training` does); a Playground reset (`mjx.forward` on
  fresh data) costs more than its step, which `full` paid at every step before `reset_where`
  (the rollout's speed against the env's, each way: docs/suites.md, playground);
- any other keyword overrides a top-level field of the env's config (`registry.get_default_config`).

Actions are a Box in [-1, 1]; `state.done` is termination (`brax_api.BraxApiEnv`). The
locomotion envs' observations are dicts ({"state", "privileged_state"}): mapped as pytrees, so
the policy sees both (Playground's own PPO gives the privileged part to the critic alone). They
load robot models from MuJoCo Menagerie, which Playground would clone from GitHub at the first use:
the adapter refuses such an env while the Menagerie is not on disk, naming where it goes.
The manipulation envs are not listed: outside the issue's scope, and untested here.
"""

from __future__ import annotations

from typing import Any

import jax
from mujoco_playground import dm_control_suite, locomotion, registry

from jaxrl_async.envs.suites.brax_api import BraxApiEnv, MujocoFrames

IMPLS = ("auto", "jax", "warp")
# what Playground's `render` (`mjx_env.render_array`) copies from a state's MJX data into MuJoCo's
FRAMES = MujocoFrames(
    select=lambda state: {name: getattr(state.data, name)
                          for name in ("qpos", "qvel", "mocap_pos", "mocap_quat", "xfrc_applied")},
    model=lambda env: env.mj_model)


def env_ids() -> list[str]:
    """Playground's DM Control Suite and locomotion ids, from its own registries."""
    return sorted({*dm_control_suite.ALL_ENVS, *locomotion.ALL_ENVS})


def _check_menagerie(env_id: str) -> None:
    """Refuse a locomotion env whose robot model is not on disk: Playground would clone MuJoCo
    Menagerie from GitHub at run time, and nothing may download while a run starts."""
    from mujoco_playground._src import mjx_env  # where Playground keeps the Menagerie's path and commit

    if env_id in locomotion.ALL_ENVS and not mjx_env.MENAGERIE_PATH.exists():
        raise ValueError(f"playground:{env_id} loads its robot from MuJoCo Menagerie, which is not at "
                         f"{mjx_env.MENAGERIE_PATH}: Playground would clone it from GitHub now, and a run downloads "
                         "nothing; clone google-deepmind/mujoco_menagerie there (commit "
                         f"{mjx_env.MENAGERIE_COMMIT_SHA}) once, then run again")


def make(env_id: str, episode_length: int | None = None, impl: str = "auto", auto_reset: str = "full",
         **config_overrides: Any) -> BraxApiEnv:
    """Playground's env `env_id`, adapted: see the module docstring."""
    config = registry.get_default_config(env_id)
    unknown = sorted(set(config_overrides) - set(config.keys()))
    if unknown:
        raise ValueError(f"playground:{env_id} has no config field {', '.join(map(repr, unknown))}: its config's "
                         f"fields are {', '.join(sorted(config.keys()))} (this adapter's own keywords: "
                         "episode_length, impl, auto_reset)")
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} must be one of {', '.join(IMPLS)} (auto: jax on the CPU, the config's own "
                         "elsewhere)")
    if impl == "auto":
        impl = "jax" if jax.default_backend() == "cpu" else config.get("impl", "jax")
    if "impl" in config:
        config_overrides["impl"] = impl
    if episode_length is not None:
        config_overrides["episode_length"] = episode_length
    if int(config_overrides.get("action_repeat", config.get("action_repeat", 1))) != 1:
        raise ValueError(f"playground:{env_id} with action_repeat != 1 is not supported: this adapter steps the env "
                         "once per action (set action_repeat=1)")
    _check_menagerie(env_id)
    env = registry.load(env_id, config_overrides=config_overrides)
    # the env may set its own length (the vision configs do), so read it back from the env's config
    return BraxApiEnv(env, f"playground:{env_id}", env._config.episode_length, auto_reset, FRAMES)
