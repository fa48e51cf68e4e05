"""Evaluation videos (`--video-interval`, `eval --video`): the recording is the evaluation's first
episode, the MP4s decode to that many frames, each suite's renderer draws its states, and an env
that cannot render says so in one line while the run goes on."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import jax
import numpy as np
import pytest

imageio = pytest.importorskip("imageio.v2", reason="needs imageio: pip install -e '.[video]'")
# ffmpeg starts by fork-and-exec: `videos.py` silences JAX's fork warning for it, a filter pytest
# drops after collecting this module
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from jaxrl_async.algorithms import TrainConfig  # noqa: E402
from jaxrl_async.cli.main import main  # noqa: E402
from jaxrl_async.envs import SquashAction, make_env  # noqa: E402
from jaxrl_async.envs.render import CannotRender, renderer_for  # noqa: E402
from jaxrl_async.trainer import videos  # noqa: E402
from jaxrl_async.trainer.build import build, initial_states  # noqa: E402
from jaxrl_async.trainer.schedule import Schedule  # noqa: E402
from jaxrl_async.trainer.sinks import METRICS_FILE  # noqa: E402
from jaxrl_async.trainer.training import train  # noqa: E402


def decoded(path: str) -> list[np.ndarray]:
    """The frames of an MP4, decoded with the library that wrote it (imageio's ffmpeg reader)."""
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        return [np.asarray(frame) for frame in reader]
    finally:
        reader.close()


# ------------------------------------------------------------------ config and schedule


@pytest.mark.parametrize("field, value", [("video_interval", -1), ("video_max_frames", 0)])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}={value}"):
        TrainConfig(**{field: value})


def test_every_nth_evaluation_and_the_final_one_record():
    schedule = Schedule(num_updates=10, sync_points=tuple(range(1, 11)), eval_every=2, checkpoint_every=2)
    assert [u for u in range(1, 11) if schedule.is_video_point(u, 2)] == [4, 8, 10]
    assert [u for u in range(1, 11) if schedule.is_video_point(u, 1)] == [2, 4, 6, 8, 10]
    assert not any(schedule.is_video_point(u, 0) for u in range(1, 11))


def test_a_missing_encoder_fails_at_once_with_the_pip_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "imageio_ffmpeg" else real(name, *args))
    with pytest.raises(ValueError, match=r"imageio_ffmpeg.*pip install 'jaxrl_async\[video\]'"):
        videos.prepare(TrainConfig(video_interval=1))
    videos.prepare(TrainConfig())  # videos off: nothing asked of the encoder


# ------------------------------------------------------------------ the recording


def test_the_recording_is_the_evaluations_first_episode(tiny_config):
    c = build(tiny_config(eval_episodes=3))
    state = initial_states(c)
    params, stats = jax.tree.map(lambda x: x[0], (state.learner.params, state.rollout.obs_stats))
    key = jax.random.PRNGKey(7)
    result = jax.jit(lambda p, s, k: c.evaluate(p, s, k))(params, stats, key)
    select = lambda env_state: env_state.env_state  # the gymnax state under the episode statistics  # noqa: E731
    record = jax.jit(c.rollout.recorder(3, 1000), static_argnums=3)
    recording = record(params, stats, key, select)
    length = int(result.lengths[0])
    assert int(recording.length) == length and bool(recording.complete)
    assert float(recording.episode_return) == pytest.approx(float(result.returns[0]))
    assert np.asarray(recording.live).tolist() == [True] * length + [False] * (500 - length)  # CartPole's limit
    x = np.asarray(recording.states.x)[:length]
    assert x[0] != x[-1]  # the cart moved: each step's state, not one state repeated

    capped = jax.jit(c.rollout.recorder(3, 4), static_argnums=3)(params, stats, key, select)
    assert int(capped.length) == 4 and not bool(capped.complete)
    np.testing.assert_array_equal(np.asarray(capped.states.x), x[:4])


# ------------------------------------------------------------------ through train and eval


@pytest.fixture(scope="module")
def video_run(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("video") / "run")
    cfg = TrainConfig(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 32, eval_episodes=2,
                      eval_interval=2, video_interval=1, run_dir=run_dir,
                      tensorboard=importlib.util.find_spec("tensorboardX") is not None)
    cfg = dataclasses.replace(cfg, network=dataclasses.replace(cfg.network, hidden_sizes=(16,)),
                              learner=dataclasses.replace(cfg.learner, update_epochs=1, num_minibatches=2))
    result = train(cfg, console=False)
    return cfg, result


def test_train_writes_an_mp4_per_due_evaluation_that_decodes_to_its_episode(video_run):
    cfg, result = video_run
    with open(os.path.join(cfg.run_dir, METRICS_FILE), encoding="utf-8") as f:
        written = [video for line in f for video in json.loads(line).get("videos", [])]
    assert [video["path"] for video in written] == [os.path.join("videos", "update-000002.mp4"),
                                                     os.path.join("videos", "update-000004.mp4")]
    for video in written:
        frames = decoded(os.path.join(cfg.run_dir, video["path"]))
        # the evaluation episode's length (below the cap), one frame per step it acted in
        assert len(frames) == video["frames"] == video["length"] <= cfg.video_max_frames and video["complete"]
        assert frames[0].shape == (400, 600, 3)  # gymnasium's CartPole renderer
        assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).max() > 0
    summary = result.summary
    assert summary["video_s"] > 0 and summary["video_draw_s"] > 0 and summary["video_compile_s"] > 0
    if cfg.tensorboard:  # TensorBoard holds each video's path, as text
        events = os.listdir(os.path.join(cfg.run_dir, "tensorboard"))
        data = b"".join(open(os.path.join(cfg.run_dir, "tensorboard", name), "rb").read() for name in events)
        assert b"update-000004.mp4" in data


def test_eval_video_writes_a_playable_file(video_run, tmp_path, capsys):
    cfg, _ = video_run
    path = str(tmp_path / "best.mp4")
    assert main(["eval", cfg.run_dir, "--episodes", "2", "--video", path]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("video:"))
    frames = decoded(path)
    assert f"video: {path} ({len(frames)} frames" in line and len(frames) >= 1


def test_an_env_that_cannot_render_says_so_in_one_line_and_the_run_goes_on(tiny_config, capsys, tmp_path):
    cfg = tiny_config(env="Probe-ConstantReward", video_interval=1)
    result = train(cfg)
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "cannot render" in line]
    assert said == ["video: cannot render: Probe-ConstantReward has no renderer in this project (gymnax's "
                    "classic-control envs and its envs with grid observations, MinAtar and Catch among them, draw); "
                    "the run goes on without videos"]
    assert result.completed and not os.path.exists(os.path.join(cfg.run_dir, videos.VIDEO_DIR))
    assert main(["eval", cfg.run_dir, "--episodes", "1", "--video", str(tmp_path / "v.mp4")]) == 2
    assert "cannot record a video: Probe-ConstantReward has no renderer" in capsys.readouterr().err
    # a host env's states never reach a program: its collector says so
    with pytest.raises(CannotRender, match="host env"):
        build(TrainConfig(env="gymnasium:CartPole-v1", mode="async")).rollout.recorder(2, 10)


@pytest.mark.parametrize("env_id", ["Probe-DictObs", "Probe-TupleObs"])
def test_an_env_with_a_nested_observation_cannot_render_in_one_line(env_id):
    # a Dict or Tuple observation space has no `.shape`: before, an AttributeError's traceback
    with pytest.raises(CannotRender, match=f"{env_id} has no renderer in this project"):
        renderer_for(*make_env(env_id))


# ------------------------------------------------------------------ each suite's renderer

SUITES = {  # env id: (the suite's module, env_kwargs, whether to step: a physics step compiles for seconds)
    "CartPole-v1": ("pygame", {}, True),
    "Breakout-MinAtar": ("gymnax", {}, True),
    "brax:inverted_pendulum": ("brax", {"backend": "spring"}, False),
    "craftax:Craftax-Classic-Symbolic-v1": ("craftax", {}, False),
    "jumanji:Snake-v1": ("jumanji", {}, True),
    "navix:Navix-Empty-5x5-v0": ("navix", {}, True),
    "xminigrid:MiniGrid-Empty-8x8": ("xminigrid", {}, True),
}


@pytest.mark.parametrize("env_id", list(SUITES))
def test_each_suites_renderer_draws_its_states(env_id):
    module, env_kwargs, step = SUITES[env_id]
    if importlib.util.find_spec(module) is None:
        extra = {"pygame": "video", "gymnax": "dev"}.get(module, module)
        pytest.skip(f"needs {module}: pip install -e '.[{extra}]'")
    env, params = make_env(env_id, **env_kwargs)
    if env_id.startswith("brax:"):  # as `--action-dist tanh_gaussian` wraps it: a wrapper over the statistics'
        env = SquashAction(env)
    renderer = renderer_for(env, params)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    states = [jax.jit(env.reset)(key, params)[1] for key in keys[:2]]  # two resets: a second world, a second start
    if step:
        action = env.action_space(params).sample(keys[2])
        if env_id.startswith(("xminigrid:", "navix:")):
            action = 1  # turn right: the agent's arrow turns (an empty room starts it in one place)
        states.append(jax.jit(env.step)(keys[2], states[0], action, params)[1])
    picked = jax.tree.map(lambda *leaves: np.stack(leaves), *[jax.device_get(renderer.select(s)) for s in states])
    frames = list(renderer.draw(picked))
    assert len(frames) == len(states) and renderer.fps >= 1
    assert all(frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3 for frame in frames)
    assert all(frame.shape == frames[0].shape for frame in frames)
    # each state its own frame: a later one differs from the first
    assert any(np.abs(frame.astype(int) - frames[0].astype(int)).max() > 0 for frame in frames[1:])
