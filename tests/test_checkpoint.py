"""Tests for jaxrl_async.trainer.checkpoint: bit-exact round trips, atomic writes, clear errors.

A checkpoint must give back every bit of the training state it was given (floats
with NaN payloads and -0.0, bools, ints, PRNG keys), must never run code on load,
must leave the previous file intact when the writer dies before its rename, and
must turn any damage into a `CheckpointError` that names the file.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re

import jax
import msgpack
import numpy as np
import pytest

from crash_checks import kill_at_the_rename  # tests/crash_checks.py
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.metrics import to_jsonable

# one discrete env, one with bool image observations and int env states, one continuous
ENV_IDS = ("CartPole-v1", "Breakout-MinAtar", "Pendulum-v1")


def small_config(env: str = "CartPole-v1", hidden_sizes=(16,), **overrides) -> TrainConfig:
    fields = dict(env=env, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 10, eval_episodes=4)
    fields.update(overrides)
    return TrainConfig(**fields, network=NetworkConfig(hidden_sizes=hidden_sizes),
                       learner=LearnerConfig(update_epochs=2, num_minibatches=2))


_templates: dict = {}


def template_state(env: str = "CartPole-v1", hidden_sizes=(16,), **overrides):
    """A real `TrainState` `[S=1, ...]` (built once per env, network and config overrides)."""
    key = (env, hidden_sizes, tuple(sorted(overrides.items())))
    if key not in _templates:
        _templates[key] = jax.device_get(initial_states(build(small_config(env, hidden_sizes, **overrides))))
    return _templates[key]


def scramble(tree, seed: int = 0):
    """The same tree, every leaf refilled with random bits of its own dtype.

    Random bit patterns put NaNs with payloads, infinities, -0.0 and subnormals in the
    float leaves: only a byte-exact round trip keeps them all.
    """
    rng = np.random.default_rng(seed)

    def refill(leaf):
        leaf = np.asarray(leaf)
        if leaf.dtype == np.bool_:
            return rng.integers(0, 2, leaf.shape).astype(np.bool_)
        raw = rng.integers(0, 256, leaf.size * leaf.dtype.itemsize, dtype=np.uint8)
        return raw.view(leaf.dtype).reshape(leaf.shape)

    return jax.tree.map(refill, tree)


def leaf_bytes(tree) -> list[tuple[str, tuple, np.dtype, bytes]]:
    """(path, shape, dtype, bytes) of every leaf, in tree order."""
    return [(jax.tree_util.keystr(path), np.shape(leaf), np.asarray(leaf).dtype,
             np.ascontiguousarray(np.asarray(leaf)).tobytes())
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def save_state(path, state, cfg=None, counters=None, extra=None):
    cfg = cfg or small_config()
    return ckpt.save(str(path), state=state, config=to_jsonable(cfg.to_dict()),
                     counters=counters or {"updates": 7, "env_steps": 7 * cfg.batch_size}, extra=extra)


@pytest.fixture(scope="module")
def saved_file(tmp_path_factory):
    """(path, bytes) of a real CartPole checkpoint, written once; tests copy the bytes."""
    path = tmp_path_factory.mktemp("ckpt") / "update_000000007.ckpt"
    save_state(path, scramble(template_state()))
    return path, path.read_bytes()


# ------------------------------------------------------------------ round trip


@pytest.mark.parametrize("env", ENV_IDS)
def test_round_trip_is_bit_exact_and_keeps_dtypes(env, tmp_path):
    template = template_state(env)
    state = scramble(template, seed=1)
    path = save_state(tmp_path / "update_000000007.ckpt", state, small_config(env))
    saved = ckpt.load(path)
    restored = ckpt.restore_state(template, saved["state"], path)
    assert jax.tree.structure(restored) == jax.tree.structure(template)
    expected, got = leaf_bytes(state), leaf_bytes(restored)
    assert [leaf[:3] for leaf in got] == [leaf[:3] for leaf in expected]  # paths, shapes, dtypes
    for (name, _, _, want), (_, _, _, have) in zip(expected, got):
        assert have == want, f"leaf {name} changed in the round trip"


def test_round_trip_covers_bool_int_float_and_key_leaves():
    # the parametrized round trip only says something if the states hold these dtypes
    dtypes = {env: {np.asarray(leaf).dtype for leaf in jax.tree.leaves(template_state(env))}
              for env in ENV_IDS}
    assert np.dtype(np.bool_) in dtypes["Breakout-MinAtar"]
    assert np.dtype(np.int32) in dtypes["Breakout-MinAtar"]
    assert all(np.dtype(np.uint32) in found for found in dtypes.values())  # PRNG keys
    assert all(np.dtype(np.float32) in found for found in dtypes.values())
    pendulum = build(small_config("Pendulum-v1"))
    assert pendulum.env.action_space(pendulum.env_params).shape == (1,)  # continuous actions


def test_counters_config_and_extra_round_trip(tmp_path):
    cfg = small_config(iterations_per_call=5, eval_interval=10, lag="1", mode="async")
    behaviour = scramble(template_state().learner.params, seed=2)
    counters = {"updates": 20, "env_steps": 20 * cfg.batch_size, "params_version": 20}
    extra = {"best_eval_return": 123.5, "missing": None,
             "behaviour_params": ckpt.serialization.to_state_dict(behaviour)}
    path = save_state(tmp_path / "c.ckpt", template_state(), cfg, counters, extra)
    saved = ckpt.load(path)
    assert set(saved) == {"config", "counters", "state", "extra"}
    assert TrainConfig.from_dict(saved["config"]) == cfg
    assert saved["counters"] == counters
    assert saved["extra"]["best_eval_return"] == 123.5 and saved["extra"]["missing"] is None
    restored = ckpt.serialization.from_state_dict(behaviour, saved["extra"]["behaviour_params"])
    assert leaf_bytes(restored) == leaf_bytes(behaviour)


def test_file_is_a_checksummed_msgpack_map_of_plain_data(saved_file):
    _, data = saved_file
    outer = msgpack.unpackb(data, raw=False)
    assert set(outer) == {"format", "version", "sha256", "payload"}
    assert outer["format"] == "jaxrl_async-checkpoint" and outer["version"] == 1
    assert outer["sha256"] == hashlib.sha256(outer["payload"]).hexdigest()
    # inside the payload: plain msgpack, whose only extension type is flax's ndarray,
    # itself a msgpack (shape, dtype name, raw bytes) triple, never a pickle
    ext_codes = []

    def ext_hook(code, body):
        ext_codes.append(code)
        shape, dtype_name, raw = msgpack.unpackb(body, raw=False)
        assert len(raw) == int(np.prod(shape)) * np.dtype(dtype_name).itemsize
        return None

    content = msgpack.unpackb(outer["payload"], raw=False, ext_hook=ext_hook, strict_map_key=False)
    assert set(content) == {"config", "counters", "state", "extra"}
    assert ext_codes and set(ext_codes) == {1}  # flax's _MsgpackExtType.ndarray


def test_loading_never_unpickles(saved_file, monkeypatch):
    path, _ = saved_file

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load reached pickle")

    for name in ("loads", "load", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(np, "load", refuse)
    saved = ckpt.load(str(path))
    restored = ckpt.restore_state(template_state(), saved["state"], str(path))
    assert jax.tree.structure(restored) == jax.tree.structure(template_state())


def test_a_pickle_payload_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps({"state": Exploit()})
    data = msgpack.packb({"format": ckpt.FORMAT, "version": ckpt.VERSION,
                          "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload})
    with pytest.raises(Exception):
        ckpt.decode(data)
    assert not marker.exists()


@pytest.mark.parametrize("payload", [b"not msgpack at all", msgpack.packb([1, 2])], ids=["garbage", "a-list"])
def test_a_well_checksummed_but_malformed_payload_is_a_checkpoint_error(payload):
    data = msgpack.packb({"format": ckpt.FORMAT, "version": ckpt.VERSION,
                          "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload})
    with pytest.raises(ckpt.CheckpointError, match="x.ckpt"):
        ckpt.decode(data, "x.ckpt")


# ------------------------------------------------------------------ atomic writes


def test_failed_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    run_dir = str(tmp_path)
    path = ckpt.numbered_path(run_dir, 5)
    save_state(path, template_state())
    before = open(path, "rb").read()

    def die(src, dst):
        raise OSError("simulated crash between write and rename")

    monkeypatch.setattr(os, "replace", die)
    with pytest.raises(OSError, match="simulated crash"):
        save_state(path, scramble(template_state()), counters={"updates": 5, "env_steps": 320})
    monkeypatch.undo()
    # the new content got no further than the temporary file, which the failed write removed
    assert not os.path.exists(path + ".tmp")
    assert open(path, "rb").read() == before
    assert leaf_bytes(ckpt.restore_state(template_state(), ckpt.load(path)["state"])) == \
        leaf_bytes(template_state())
    assert ckpt.list_checkpoints(run_dir) == [path]
    assert ckpt.latest_checkpoint(run_dir) == path


def test_writer_killed_before_rename_leaves_the_old_file(tmp_path):
    """A real process dies (SIGKILL) after writing the temporary file, before the rename."""
    run_dir = str(tmp_path)
    old = ckpt.numbered_path(run_dir, 5)
    save_state(old, template_state())
    old_bytes = open(old, "rb").read()
    newer = ckpt.numbered_path(run_dir, 10)
    kill_at_the_rename(f"""
        state = {{"w": np.arange(1_000_000, dtype=np.float32)}}
        for path in ({old!r}, {newer!r}):
            ckpt.save(path, state=state, config={{}}, counters={{"updates": 99}})
    """)
    assert os.path.getsize(old + ".tmp") > 4_000_000  # the new content was written in full ...
    assert open(old, "rb").read() == old_bytes  # ... but never replaced the old file
    assert ckpt.load(old)["counters"]["updates"] == 7
    # a partial temporary file for a newer update, as a kill mid-write leaves it
    with open(newer + ".tmp", "wb") as f:
        f.write(old_bytes[: len(old_bytes) // 2])
    assert ckpt.list_checkpoints(run_dir) == [old]
    assert ckpt.latest_checkpoint(run_dir) == old


# ------------------------------------------------------------------ damaged files


def _damaged(tmp_path, data: bytes):
    path = tmp_path / "update_000000007.ckpt"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("keep", ["0", "1", "10", "half", "all-but-1"])
def test_truncated_file_is_a_checkpoint_error(keep, saved_file, tmp_path):
    _, data = saved_file
    length = {"half": len(data) // 2, "all-but-1": len(data) - 1}.get(keep) or int(keep)
    path = _damaged(tmp_path, data[:length])
    with pytest.raises(ckpt.CheckpointError, match=r"is (truncated or corrupted|corrupted \(checksum)") as info:
        ckpt.load(path)
    assert path in str(info.value) and "start a new run" in str(info.value)


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75, 1.0])
def test_flipped_payload_byte_is_a_checksum_mismatch(where, saved_file, tmp_path):
    _, data = saved_file
    payload = msgpack.unpackb(data)["payload"]
    start = data.index(payload)
    offset = start + min(int(where * len(payload)), len(payload) - 1)
    damaged = bytearray(data)
    damaged[offset] ^= 0x01
    with pytest.raises(ckpt.CheckpointError, match=r"corrupted \(checksum mismatch\)"):
        ckpt.load(_damaged(tmp_path, bytes(damaged)))


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_single_byte_corruption_is_a_checkpoint_error(mask):
    """Exhaustively, over a small checkpoint: headers, keys, checksum, payload."""
    data = ckpt.encode({"config": {"env": "CartPole-v1"}, "counters": {"updates": 3},
                        "state": {"w": np.arange(4, dtype=np.float32)}, "extra": {}})
    assert ckpt.decode(data)["counters"] == {"updates": 3}
    escaped = []
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= mask
        try:
            ckpt.decode(bytes(damaged), "x.ckpt")
        except ckpt.CheckpointError as error:
            assert "x.ckpt" in str(error)
        except Exception as error:  # noqa: BLE001 - what the test looks for
            escaped.append((offset, type(error).__name__))
        else:
            escaped.append((offset, "loaded"))
    assert escaped == []


@pytest.mark.parametrize("outer, message", [
    ({"format": "orbax", "version": 1}, "is not a jaxrl_async checkpoint"),
    ({"version": 1}, "is not a jaxrl_async checkpoint"),
    ({"format": ckpt.FORMAT, "version": 2}, "has format version 2, this jaxrl_async reads version 1"),
    ({"format": ckpt.FORMAT}, "has format version None"),
], ids=["wrong-format", "no-format", "wrong-version", "no-version"])
def test_wrong_marker_or_version_is_a_checkpoint_error(outer, message, saved_file, tmp_path):
    _, data = saved_file
    fields = msgpack.unpackb(data)
    fields = {"sha256": fields["sha256"], "payload": fields["payload"], **outer}
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.load(_damaged(tmp_path, msgpack.packb(fields)))


@pytest.mark.parametrize("content", [msgpack.packb([1, 2, 3]), b'{"config": {}}', pickle.dumps({"a": 1})],
                         ids=["msgpack-list", "json", "pickle"])
def test_other_files_are_checkpoint_errors(content, tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="not a jaxrl_async checkpoint|truncated or corrupted"):
        ckpt.load(_damaged(tmp_path, content))


def test_missing_file_is_a_checkpoint_error(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint at"):
        ckpt.load(str(tmp_path / "update_000000001.ckpt"))
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint at"):
        ckpt.load(str(tmp_path))  # a directory


@pytest.mark.parametrize("saved_hidden, template_hidden, message", [
    ((16,), (32,), r"leaf .*\['actor_head'\]\['kernel'\] has shape \(1, 16, 2\).*shape \(1, 32, 2\)"),
    # the layer the template has and the checkpoint lacks, or the other way round, is named
    ((16,), (16, 16), r"it lacks /learner/\S*actor_torso/Dense_1/bias, which this config's state needs"),
    ((16, 16), (16,), r"it holds /learner/opt_state/\S*/actor_torso/Dense_1/bias, which this config's state has not"),
], ids=["wider", "deeper", "shallower"])
def test_restore_into_another_network_names_the_leaf(saved_hidden, template_hidden, message, tmp_path):
    path = save_state(tmp_path / "c.ckpt", template_state(hidden_sizes=saved_hidden))
    with pytest.raises(ckpt.CheckpointError, match="does not fit this config") as info:
        ckpt.restore_state(template_state(hidden_sizes=template_hidden), ckpt.load(path)["state"], path)
    assert path in str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_restore_into_another_env_is_a_checkpoint_error(tmp_path):
    path = save_state(tmp_path / "c.ckpt", template_state("CartPole-v1"))
    with pytest.raises(ckpt.CheckpointError, match="does not fit this config"):
        ckpt.restore_state(template_state("Pendulum-v1"), ckpt.load(path)["state"], path)


def test_a_checkpoint_written_before_an_empty_field_existed_still_restores(tmp_path):
    # RolloutState.noise came after checkpoints were written; where unused it holds no arrays
    template = template_state()
    path = save_state(tmp_path / "c.ckpt", scramble(template, seed=2))
    saved = ckpt.load(path)["state"]
    assert saved["rollout"].pop("noise") == {}
    restored = ckpt.restore_state(template, saved, path)
    assert leaf_bytes(restored) == leaf_bytes(scramble(template, seed=2))


def test_correlated_noise_needs_its_saved_state(tmp_path):
    # a run with white noise cannot continue with correlated noise: the noise state is missing
    path = save_state(tmp_path / "c.ckpt", template_state("Pendulum-v1"))
    correlated = template_state("Pendulum-v1", action_noise_correlation=0.9)
    with pytest.raises(ckpt.CheckpointError, match=r"missing leaf .rollout.noise; resume with the config"):
        ckpt.restore_state(correlated, ckpt.load(path)["state"], path)


# ------------------------------------------------------------------ pruning


def _touch_numbered(run_dir, updates):
    for update in updates:
        ckpt.write_atomic(ckpt.numbered_path(run_dir, update), b"x")


def test_prune_keeps_the_newest_numbered_files_and_best(tmp_path):
    run_dir = str(tmp_path)
    # 100 sorts before 20 as text without the zero padding: the order must be numeric
    _touch_numbered(run_dir, [5, 20, 100, 7, 1000])
    best = os.path.join(ckpt.checkpoint_dir(run_dir), ckpt.BEST)
    ckpt.write_atomic(best, b"best")
    leftover = ckpt.numbered_path(run_dir, 2000) + ".tmp"
    with open(leftover, "wb") as f:
        f.write(b"partial")
    ckpt.prune(run_dir, keep=2)
    assert ckpt.list_checkpoints(run_dir) == [ckpt.numbered_path(run_dir, u) for u in (100, 1000)]
    assert os.path.exists(best) and os.path.exists(leftover)
    ckpt.prune(run_dir, keep=1)
    assert ckpt.list_checkpoints(run_dir) == [ckpt.numbered_path(run_dir, 1000)]
    assert ckpt.latest_checkpoint(run_dir) == ckpt.numbered_path(run_dir, 1000)
    assert os.path.exists(best)


def test_prune_with_fewer_files_than_kept_removes_nothing(tmp_path):
    run_dir = str(tmp_path)
    _touch_numbered(run_dir, [1, 2])
    ckpt.prune(run_dir, keep=3)
    assert ckpt.list_checkpoints(run_dir) == [ckpt.numbered_path(run_dir, u) for u in (1, 2)]


def test_no_checkpoint_dir_means_no_checkpoints(tmp_path):
    assert ckpt.list_checkpoints(str(tmp_path)) == []
    assert ckpt.latest_checkpoint(str(tmp_path)) is None
    ckpt.prune(str(tmp_path), keep=1)  # nothing to do, no error
