"""The package's docstrings and comments name only what exists.

A backticked name that looks like one of ours is resolved: `pkg/file.py` (or `file.py`) against
the repository's files, `jaxrl_async.x.y` by import, and `module.symbol` / `Class.attribute`
where the first part is one of the package's modules or a name one of them defines. A rename
that leaves its old name in the text that explains the design fails here. Prose that merely
looks dotted (`cfg.algo`, `jax.lax.scan`, `state.replace`) is not ours and is let be.

Reading the sources is pure Python; resolving imports the package's modules (not the optional
suites' adapters where the suite is missing), no JAX program is compiled.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import io
import os
import pkgutil
import re
import tokenize

import pytest

import jaxrl_async

PACKAGE_DIR = os.path.dirname(jaxrl_async.__file__)
REPO_DIR = os.path.dirname(PACKAGE_DIR)
BACKTICKED = re.compile(r"`([^`\s]+)`")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
# a source or doc file, or a folder (`envs/suites/`); not a run's files (`metrics.jsonl`, `checkpoints/best.ckpt`)
PATH = re.compile(r"[A-Za-z0-9_./-]+\.(py|md|toml)|([A-Za-z0-9_.-]+/)+")


def _module_names() -> list[str]:
    return ["jaxrl_async", *(info.name for info in pkgutil.walk_packages([PACKAGE_DIR], "jaxrl_async."))]


MODULES = _module_names()


def _source_file(name: str) -> str:
    path = os.path.join(REPO_DIR, *name.split("."))
    return os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"


def texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring (any string statement: module, class, function and field
    docstrings) and every comment of a module's source."""
    found = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    found += [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type == tokenize.COMMENT]
    return found


def candidates(text: str) -> list[str]:
    """The backticked spans of `text` that may name something of ours: a path, or a dotted name
    (a call's arguments and a subscript dropped: `make_env(env_id)` -> `make_env`)."""
    names = []
    for span in BACKTICKED.findall(text):
        span = span.rstrip(".,:;")
        if PATH.fullmatch(span):
            names.append(span)
            continue
        head = re.match(r"[A-Za-z_][A-Za-z0-9_.]*", span)
        if head and DOTTED.fullmatch(head.group(0).rstrip(".")):
            names.append(head.group(0).rstrip("."))
    return names


_REPO_FILES: list[str] = []


def _repo_files() -> list[str]:
    if not _REPO_FILES:
        for root, dirs, files in os.walk(REPO_DIR):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("runs", "__pycache__")
                       and not d.endswith(".egg-info")]
            _REPO_FILES.extend(os.path.relpath(os.path.join(root, name), REPO_DIR) for name in [*files, *dirs])
    return _REPO_FILES


def path_exists(path: str) -> bool:
    """A file (or folder, ending in '/') of the repository: its path from the root, or the end of one."""
    path = path.rstrip("/").removeprefix("./")
    return any(known == path or known.endswith("/" + path) for known in _repo_files())


def _module(name: str):
    if name.endswith("__main__"):
        return None  # running it is what importing it does
    try:
        return importlib.import_module(name)
    except ImportError:  # an optional suite's adapter without its suite
        return None


def _has(obj, attributes: list[str]) -> bool:
    for attribute in attributes:
        fields = getattr(obj, "__dataclass_fields__", {}) or {}
        annotations = getattr(obj, "__annotations__", {}) or {}
        if hasattr(obj, attribute):
            obj = getattr(obj, attribute)
        elif isinstance(obj, type) and _assigned_on_self(obj, attribute):
            return True  # an instance attribute: nothing further to resolve
        elif attribute in fields or attribute in annotations:
            return True  # a field without a class attribute: nothing further to resolve
        elif (module := _module(f"{obj.__name__}.{attribute}") if hasattr(obj, "__path__") else None) is not None:
            obj = module
        else:
            return False
    return True


def _assigned_on_self(cls: type, attribute: str) -> bool:
    """Whether a method of `cls` (or of a base) sets `self.<attribute>`."""
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"self\.{attribute}\s*(:[^=]*)?=[^=]", source):
            return True
    return False


_DEFINED: dict[str, list] = {}


def _suite_adapter(name: str) -> bool:
    from jaxrl_async.envs.suites import SUITES

    return any(name == suite.adapter for suite in SUITES.values())


def _defined() -> dict[str, list]:
    """Each top-level name a module of the package defines (not imports) -> the objects; the suites'
    adapters are left out (each imports its suite, seconds), and imported only where a name asks."""
    if not _DEFINED:
        for name in MODULES:
            if _suite_adapter(name):
                continue
            module = _module(name)
            for attribute, value in vars(module or object).items():
                if getattr(value, "__module__", None) == name:
                    _DEFINED.setdefault(attribute, []).append(value)
    return _DEFINED


_NAMES: dict[str, set] = {}


def _names() -> dict[str, set]:
    """The names the package's sources bind: "imported" (an import's alias: `lax`, `jnp`, a suite's
    class) and "variables" (parameters and assigned names: `cfg`, `state`, `params`)."""
    if not _NAMES:
        imported, variables = set(), set()
        for name in MODULES:
            with open(_source_file(name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
                elif isinstance(node, ast.arg):
                    variables.add(node.arg)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    variables.add(node.id)
        _NAMES.update(imported=imported, variables=variables)
    return _NAMES


# Names of other packages' classes and modules that the text names without their package
FOREIGN = {"Environment": "gymnax's and navix's env base class", "mjx": "MuJoCo's mujoco.mjx"}


def ours(dotted: str) -> bool:
    """Whether a dotted name claims to be one of ours. Not ours: a name that starts with a variable
    and goes on in lowercase (`cfg.algo`, `state.replace`, `run.start_update`: a value's attributes,
    as prose names them), with another package (`jax.lax.scan`, a suite's `brax.envs`), with what an import binds
    (`lax.scan`, `jnp.where`) or with one of `FOREIGN`. Every other name is ours, a module's or a
    class's that the package has or had (`common.make_learner`, `env_ids.BUILTIN_ENV_IDS`): it must
    resolve."""
    from jaxrl_async.envs.suites import SUITES

    parts = dotted.split(".")
    first, names = parts[0], _names()
    if first == "jaxrl_async":
        return True
    if first in {suite.package for suite in SUITES.values()}:
        return False  # a suite's own names (`brax.envs`): the suite's, and seconds to import
    if first in names["variables"] and all(part.islower() or part.startswith("_") for part in parts[1:]):
        return False
    if any(module.rsplit(".", 1)[-1] == first for module in MODULES) or first in _defined():
        return True
    return not (first in FOREIGN or first in names["imported"] or importlib.util.find_spec(first) is not None)


def resolves(dotted: str, module_name: str) -> bool:
    parts = dotted.split(".")
    if parts[0] == "jaxrl_async":
        for cut in range(len(parts), 0, -1):
            module = _module(".".join(parts[:cut])) if ".".join(parts[:cut]) in MODULES else None
            if module is not None:
                return _has(module, parts[cut:])
        return False
    holders = [_module(name) for name in MODULES if name.rsplit(".", 1)[-1] == parts[0]]
    holders = [module for module in holders if module is not None]
    if any(_has(module, parts[1:]) for module in holders):
        return True
    if any(_has(obj, parts[1:]) for obj in _defined().get(parts[0], [])):
        return True
    from jaxrl_async.envs.suites import SUITES

    if importlib.util.find_spec(parts[0]) is not None:  # also another package's name (gymnasium, brax)
        if _has(_module(parts[0]), parts[1:]):
            return True
    elif parts[0] in {suite.package for suite in SUITES.values()}:
        return True  # a suite not installed here: nothing to resolve its names against
    here = _module(module_name)  # a name the module itself holds (its imports too)
    return here is not None and _has(here, parts)


def stale_names(module_name: str, source: str) -> list[str]:
    """'line: name' for each backticked name in the module's docstrings and comments that claims to
    be ours and names nothing that exists."""
    found = []
    for line, text in texts(source):
        for name in candidates(text):
            if PATH.fullmatch(name):
                ok = path_exists(name)
            else:
                ok = not ours(name) or resolves(name, module_name)
            if not ok:
                found.append(f"{line}: {name}")
    return found


@pytest.mark.parametrize("module_name", MODULES)
def test_docstrings_and_comments_name_what_exists(module_name):
    if _suite_adapter(module_name):
        from jaxrl_async.envs.suites import SUITES

        suite = next(suite for suite in SUITES.values() if suite.adapter == module_name)
        if importlib.util.find_spec(suite.package) is None:
            pytest.skip(f"needs {suite.package}, whose names it resolves against: {suite.install}")
    with open(_source_file(module_name), encoding="utf-8") as f:
        source = f.read()
    stale = stale_names(module_name, source)
    assert not stale, f"{_source_file(module_name)} names what does not exist: {stale}"


# A measured figure: a throughput, a duration, a ratio of speeds (STYLE.md 18: docstrings say what and
# why, not one machine's timings; the figures live in docs/)
TIMING = re.compile(r"\d[\d,.]*\s?[kM]?\s?steps/s|\b\d+(\.\d+)?\s?(ms|us|µs)\b|\b\d+(\.\d+)?\s(s|seconds|minutes)\b"
                    r"|\b\d+(\.\d+)?x\b")
# Figures that are no measurement of ours: the order of a GPU kernel's time (DESIGN.md says it too), a target
NOT_TIMINGS = re.compile(r"~1 us kernels|asks for \d+x")


def timings(source: str) -> list[str]:
    """'line: text' for each docstring or comment line of a module's source with a measured figure."""
    return [f"{line + i}: {text_line.strip()}" for line, text in texts(source)
            for i, text_line in enumerate(text.splitlines())
            if TIMING.search(NOT_TIMINGS.sub("", text_line))]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstrings_and_comments_carry_no_timings(module_name):
    with open(_source_file(module_name), encoding="utf-8") as f:
        found = timings(f.read())
    assert not found, (f"{_source_file(module_name)} quotes a machine's timings (move the figure to docs/ and "
                       f"point there): {found}")


def test_a_timing_is_caught():
    planted = ('"""Steps at 9.5k against 110k steps/s; compiles in 33 s; a put costs 0.16 ms."""\n'
               "# ran at 0.49x the env; 64x64 networks, 4x128 configs, 0s and 1s, thousands of ~1 us kernels\n")
    assert [entry.split(": ")[0] for entry in timings(planted)] == ["1", "2"]
    assert timings("# 64x64 networks, 4x128 configs, its 0s and 1s, thousands of ~1 us kernels\n") == []


def test_a_stale_name_is_caught():
    planted = ('"""Built by `components.run_iterations`, run by `training.async_train`; see `envs/nowhere.py`."""\n'
               "# the collector (`device.DeviceCollector`) and `rollout.collector.make_collector`\n"
               "# fine: `jaxrl_async.envs.registry.make_env`, `trainer/run_dir.py`, `cfg.algo`, `jax.lax.scan`\n")
    stale = stale_names("jaxrl_async.trainer.fused", planted)
    assert [entry.split(": ")[1] for entry in stale] == [
        "components.run_iterations", "training.async_train", "envs/nowhere.py", "device.DeviceCollector"], stale
