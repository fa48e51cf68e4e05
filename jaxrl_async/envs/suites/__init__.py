"""The JAX environment suites, each behind `--env SUITE:ID`: `brax:ant`, `craftax:Craftax-Classic-Symbolic-v1`, ...

One adapter module per suite (this package) turns the suite's own env into the functional
protocol the rollout consumes (gymnax 1.x: `reset(key, params)`, `step(key, state, action,
params)` returning `obs, state, reward, terminated, truncated, info` with auto-reset and
`info["final_observation"]`; `functional.SuiteEnv` does the auto-reset and the time limit).
An adapter module has two functions:

    make(env_id, **env_kwargs) -> env        the suite's env `env_id`, adapted
    env_ids() -> list[str]                   the ids the suite's own registry has

The suites are optional extras: importing this package imports none of them, and a missing one
fails at once with the pip command that installs it.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import importlib
import importlib.util
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str  # the prefix of its ids: `name:ID`
    adapter: str  # our adapter module
    package: str  # the module the suite installs (what a missing extra lacks)
    extra: str  # our pip extra for it
    refused: str = ""  # why it cannot be used here ('' where it can)
    install_command: str = ""  # how to install it where our extra cannot ('' where it can)

    @property
    def install(self) -> str:
        return self.install_command or f"pip install 'jaxrl_async[{self.extra}]'"


def _suite(name: str, package: str, extra: str | None = None, refused: str = "", install_command: str = "") -> Suite:
    return Suite(name, f"jaxrl_async.envs.suites.{name}", package, extra or name, refused, install_command)


SUITES: dict[str, Suite] = {suite.name: suite for suite in (
    _suite("brax", "brax"),
    _suite("playground", "mujoco_playground"),
    _suite("craftax", "craftax"),
    _suite("jumanji", "jumanji"),
    _suite("navix", "navix"),
    _suite("xminigrid", "xminigrid"),
    # popgym-arcade depends on stable-gymnax, whose `gymnax` module (the 0.x API) would replace gymnax
    # 1.0.1's and break every gymnax env: no extra can install it, pip's --no-deps can
    _suite("popgym_arcade", "popgym_arcade", install_command=(
        "pip install --no-deps popgym-arcade==0.0.7 dm-pix jaxtyping (--no-deps: its stable-gymnax dependency "
        "would replace gymnax 1.0.1; docs/suites.md)")),
    _suite("kinetix", "kinetix", refused=(
        "Kinetix cannot be installed beside this project: every kinetix-env release pins jax<=0.9.0, "
        "and gymnax 1.0.1 with this project's code needs jax>=0.10")),
)}


def split_suite_id(env_id: str) -> tuple[Suite, str] | None:
    """(suite, the suite's own id) for `SUITE:ID`, None for any other id."""
    prefix, sep, inner = str(env_id).partition(":")
    if not sep or prefix not in SUITES:
        return None
    return SUITES[prefix], inner


def usable(suite: Suite) -> None:
    """A ValueError where `suite` cannot be used here: refused, or not installed (with the pip command
    that installs it). Asks only whether its package is there: importing a suite takes seconds."""
    if suite.refused:
        raise ValueError(f"the {suite.name} suite is not supported: {suite.refused}")
    if importlib.util.find_spec(suite.package) is None:
        raise ValueError(f"the {suite.name} suite is not installed (no module {suite.package!r}): {suite.install}")


def unknown_env_message(env_id: str, known: list[str]) -> str:
    """The error for an env id `make_env` does not know (`known`: the ids it knows but the suites'
    and the host envs'): the close ones, the suites and how to list every id. It lives here, beside
    the suites' names and without an import of gymnax, so that the CLI checks --env before JAX starts."""
    by_lower = {known_id.lower(): known_id for known_id in known}
    typed = str(env_id).lower()
    prefix, sep, inner = str(env_id).partition(":")
    if sep and inner.lower() in by_lower:  # a known id under a prefix it does not take (gymnax:CartPole-v1)
        close = [by_lower[inner.lower()]]
    elif sep:  # SUITE:ID with a suite we do not have: the suites' names are what it is close to
        close = [f"{name}:{inner}" for name in difflib.get_close_matches(prefix.lower(), list(SUITES), n=3, cutoff=0.6)]
    else:
        close = [by_lower[c] for c in difflib.get_close_matches(typed, list(by_lower), n=3, cutoff=0.6)]
        # a part of a name ('bandit') is too short for difflib's ratio: the ids that contain it
        close = close or [by_lower[known_lower] for known_lower in by_lower if typed and typed in known_lower][:3]
    hint = ("did you mean " + ", ".join(repr(c) for c in close) + "?") if close else "no close matches."
    suites = ", ".join(name for name, suite in SUITES.items() if not suite.refused)
    return (f"unknown env_id {env_id!r}; {hint} `jaxrl-async envs` lists all {len(known)} ids "
            "(from Python: jaxrl_async.registered_env_ids(); jaxrl_async.register_env adds your own); "
            f"a JAX suite's are SUITE:ID, SUITE one of {suites} (`jaxrl-async envs --suite NAME` lists its ids); "
            "a host env's gymnasium:<id> or envpool:<id>.")


def adapter(suite: Suite) -> Any:
    """The suite's adapter module; a ValueError with the pip command where the suite is missing."""
    usable(suite)
    return importlib.import_module(suite.adapter)


def suite_env_ids(name: str) -> list[str]:
    """`SUITE:ID` for every id the suite's own registry lists (sorted)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    suite = SUITES[name]
    return sorted(f"{suite.name}:{inner}" for inner in adapter(suite).env_ids())


# The adapted envs built so far in this process, the latest last. An adapted env is a pure function
# of its id and kwargs (its methods are JAX functions of their arguments), so one object serves every
# run that asks for the same env: a second run (a resume, a seed, a sweep) skips the construction (a
# MuJoCo model's upload, say) and reuses the traces of the suite's reset and step that JAX keeps per
# function (`SuiteEnv`): seconds a run for a physics engine.
_KEPT_ENVS = 8
_built_envs: collections.OrderedDict = collections.OrderedDict()
_built_envs_lock = threading.Lock()


def _plain(value: Any) -> bool:
    """Whether `value` is made of what `--env-kwargs` gives (JSON values, tuples): its repr is its identity."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (str, int, float, bool))


def make_suite_env(env_id: str, **env_kwargs: Any) -> Any:
    """The adapted env for `SUITE:ID` (unwrapped: `make_env` adds the wrappers); the same object
    for the same id and kwargs, where the kwargs are plain values."""
    if not _plain(env_kwargs):
        return _make_suite_env(env_id, env_kwargs)
    key = (str(env_id), repr(sorted(env_kwargs.items())))
    with _built_envs_lock:
        env = _built_envs.get(key)
        if env is not None:
            _built_envs.move_to_end(key)
            return env
    env = _make_suite_env(env_id, env_kwargs)
    with _built_envs_lock:
        env = _built_envs.setdefault(key, env)  # a thread that built it meanwhile: its env
        _built_envs.move_to_end(key)
        while len(_built_envs) > _KEPT_ENVS:
            _built_envs.popitem(last=False)
    return env


def _make_suite_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    suite, inner = split_suite_id(env_id)
    module = adapter(suite)
    known = module.env_ids()
    if inner not in known:
        close = difflib.get_close_matches(inner, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(f'{suite.name}:{c}') for c in close)}?" if close else "no close matches."
        raise ValueError(f"unknown env_id {env_id!r}: {suite.name} has no env {inner!r}; {hint} "
                         f"`jaxrl-async envs --suite {suite.name}` lists its {len(known)} ids.")
    return module.make(inner, **env_kwargs)
