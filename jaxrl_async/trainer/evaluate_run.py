"""`jaxrl-async eval RUN_DIR`: evaluate a run's saved policy (best or latest checkpoint)."""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.core.programs import over_seeds, seed_keys
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.trainer.run import restore_training_state
from jaxrl_async.trainer.run_dir import load_config
from jaxrl_async.trainer.videos import episode_video, require_encoder
from jaxrl_async.envs.render import CannotRender, headless_gl


EVAL_FIX = "evaluate another with --checkpoint best, latest or a checkpoint file's path"


def resolve_checkpoint(run_dir: str, which: str) -> str:
    """'best' (falling back to the latest), 'latest', or a path."""
    if which == "best":
        best = os.path.join(ckpt.checkpoint_dir(run_dir), ckpt.BEST)
        if os.path.isfile(best):
            return best
        which = "latest"
    if which == "latest":
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is None:
            raise ckpt.CheckpointError(f"{run_dir!r} has no checkpoint yet (looked in "
                                       f"{ckpt.checkpoint_dir(run_dir)})")
        return latest
    if not os.path.isfile(which):
        raise ckpt.CheckpointError(f"no checkpoint at {which!r}: {EVAL_FIX}")
    return which


def evaluate_run(run_dir: str, *, checkpoint: str = "best", episodes: int = 32, greedy: bool = True,
                 seed: int = 0, video: str | None = None) -> str:
    """Evaluate every seed's saved policy on fresh envs; returns a printable report. With `video`,
    also record the greedy policy's first evaluation episode of seed 0 as an MP4 at that path
    (`videos.episode_video`; a ValueError before evaluating where the env cannot render)."""
    cfg = dataclasses.replace(load_config(run_dir), eval_episodes=episodes)
    path = resolve_checkpoint(run_dir, checkpoint)
    saved = ckpt.load(path, how_to=EVAL_FIX)
    if video is not None:
        require_encoder()
        headless_gl()  # before the build: MuJoCo, which the suites import, then draws without a display
    c = build(cfg)
    try:
        write_video = episode_video(c) if video is not None else None
    except CannotRender as reason:
        raise ValueError(f"cannot record a video: {reason}") from None
    try:
        # only the params are used; the fix is for a checkpoint whose config fits (else raised below)
        state, _, _ = restore_training_state(initial_states(c), saved, path, c.algo.host, ckpt.VERSION_FIX)
    except ckpt.CheckpointError as error:  # another run's checkpoint (one that fits, another seed's, evaluates)
        difference = TrainConfig.from_dict(saved["config"]).state_shaping_difference(cfg)
        if difference is None:
            raise
        field, theirs, ours = difference
        raise ckpt.CheckpointError(f"checkpoint {path} is another run's: it was trained with {field}={theirs!r}, "
                                   f"this run ({run_dir}) with {field}={ours!r}; {EVAL_FIX}") from error
    # jitted where the evaluator is a JAX function; plain Python where it steps host envs
    evaluate = c.evaluate.stage(over_seeds(lambda p, s, k: c.evaluate(p, s, k, greedy=greedy), cfg.num_seeds))
    result = jax.device_get(evaluate(state.learner.params, state.rollout.obs_stats,
                                     seed_keys(seed, cfg.num_seeds)))
    stats = result.summary_per_seed("eval")
    counters = saved["counters"]
    lines = [f"{cfg.env} {cfg.algo}: {path} (update {counters.get('updates')}, "
             f"{counters.get('env_steps'):,} env steps per seed), "
             f"{'greedy' if greedy else 'stochastic'} policy, {episodes} episodes per seed"]
    for i in range(cfg.num_seeds):
        lines.append(f"  seed {i}: return {stats['eval_return_mean'][i]:9.2f} ± {stats['eval_return_std'][i]:.2f}"
                     f"  [min {stats['eval_return_min'][i]:.2f}, max {stats['eval_return_max'][i]:.2f}]"
                     f"  length {stats['eval_length_mean'][i]:.1f}  ({int(stats['eval_episodes'][i])} episodes)")
    lines.append(f"mean return over seeds: {float(np.nanmean(stats['eval_return_mean'])):.2f}")
    if write_video is not None:  # the greedy policy's first episode with seed 0's evaluation key
        written = write_video(state.learner.params, state.rollout.obs_stats, seed_keys(seed, cfg.num_seeds)[0], video)
        cut = "" if written["complete"] else f", cut at video_max_frames={cfg.video_max_frames}"
        lines.append(f"video: {video} ({written['frames']} frames: seed 0's first greedy episode, return "
                     f"{written['episode_return']:.2f}{cut})")
    return "\n".join(lines)
