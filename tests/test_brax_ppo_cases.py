"""The pairings of benchmarks/brax_ppo.py train both sides at the same settings.

Each case's two sides are written in two places: ours as a preset with its CPU sizes over it
(`brax_ppo.CASES`), Brax's as a key of `peers_brax.PRESETS` (for Playground's tasks, Playground's
published params with the preset's changes over them). A pairing whose sides drifted apart (a
batch, a discount, a network width) would still run and print a ratio, of two different
trainings: this reads each side's effective settings, Brax's trainer's own defaults included, and
compares them field by field.
"""

from __future__ import annotations

import importlib
import json
import inspect

import jax
import pytest

from benchmarks import brax_ppo

# What a case differs in on purpose, as brax_ppo's docstring says: the pendulum's rows clip
# gradients at norm 1 (Brax's trainer clips none).
DIFFERENT_ON_PURPOSE = {"inverted_pendulum": {"max_grad_norm"}}


@pytest.fixture(scope="module")
def peers():
    # the runner shims `jax.device_put_replicated` where this jax lacks it: keep this process's jax as it is
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jax, "device_put_replicated", None, raising=False)
        return importlib.import_module("benchmarks.peers_brax")


def _defaults(fn) -> dict:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty}


def brax_side(peers, preset: str) -> tuple[dict, dict, dict]:
    """(train kwargs, network kwargs, env kwargs) that Brax's trainer runs `preset` with, its defaults included."""
    from brax.training.agents.ppo import networks

    cfg = peers.PRESETS[preset]
    train, network = peers.playground_params(cfg) if cfg.get("suite") == "playground" else (cfg["train"], {})
    return ({**_defaults(peers.TRAINERS[cfg["trainer"]]), **train}, {**_defaults(networks.make_ppo_networks), **network},
            cfg["env"])


def _grad_norm(value):
    return None if value is None or value >= 1e9 else value  # ours spells "no clipping" as a norm no step reaches


@pytest.mark.parametrize("name", sorted(brax_ppo.CASES))
def test_both_sides_of_a_case_train_alike(peers, name):
    case = brax_ppo.CASES[name]
    ours = case.settings()
    learner, network = ours.learner, ours.network
    train, net, env = brax_side(peers, case.peer_preset)
    pairs = {
        "num_envs": (ours.num_envs, train["num_envs"]),
        "env steps an update": (case.batch, train["batch_size"] * train["unroll_length"] * train["num_minibatches"]),
        "num_minibatches": (learner.num_minibatches, train["num_minibatches"]),
        "update_epochs": (learner.update_epochs, train["num_updates_per_batch"]),
        "gamma": (learner.gamma, train["discounting"]),
        "gae_lambda": (learner.gae_lambda, train["gae_lambda"]),
        "learning_rate": (learner.learning_rate, train["learning_rate"]),
        "ent_coef": (learner.ent_coef, train["entropy_cost"]),
        "vf_coef": (learner.vf_coef, train["vf_loss_coefficient"]),
        "clip_eps": (learner.clip_eps, train["clipping_epsilon"]),
        "reward_scale": (learner.reward_scale, train["reward_scaling"]),
        "max_grad_norm": (_grad_norm(learner.max_grad_norm), train["max_grad_norm"]),
        "normalize_obs": (ours.normalize_obs, train["normalize_observations"]),
        "normalize_advantages": (learner.normalize_advantages, train["normalize_advantage"]),
        "constant learning rate": (learner.anneal_lr, train["learning_rate_schedule"] is not None),
        "eval_episodes": (case.eval_episodes, train["num_eval_envs"]),
        "peer_updates_per_epoch": (case.peer_updates_per_epoch, max(1, train["num_resets_per_eval"])),
        "policy_hidden_sizes": (tuple(network.policy_hidden_sizes), tuple(net["policy_hidden_layer_sizes"])),
        "value_hidden_sizes": (tuple(network.value_hidden_sizes), tuple(net["value_hidden_layer_sizes"])),
        "policy_obs_key": (network.policy_obs_key or "state", net["policy_obs_key"]),
        "value_obs_key": (network.value_obs_key or "state", net["value_obs_key"]),
        "action_dist": (network.action_dist, {"tanh_normal": "tanh_gaussian"}.get(net["distribution_type"])),
        "activation": (network.activation, "swish" if net["activation"] is jax.nn.swish else net["activation"]),
        "backend": (dict(kv.split("=") for kv in ours.env_kwargs).get("backend"), env.get("backend")),
    }
    differ = {field: sides for field, sides in pairs.items()
              if sides[0] != sides[1] and field not in DIFFERENT_ON_PURPOSE.get(name, ())}
    assert differ == {}, f"{name}: (ours, Brax's) differ in {differ}"


def test_the_steady_state_counts_only_the_lines_after_the_evaluation_compiled(tmp_path):
    # the iterations beside the evaluation's compile ran on fewer cores: the steady state leaves them
    # out, as Brax's figure leaves out its first epoch; the line that reports the compile is one of them
    lines = [{"iteration": 1, "steps_per_second": 900.0, "compiled": [{"program": "the training loop", "seconds": 9.0}]},
             {"iteration": 2, "steps_per_second": 500.0},
             {"iteration": 3, "steps_per_second": 600.0, "compiled": [{"program": "the evaluation", "seconds": 7.0}]},
             {"iteration": 4, "steps_per_second": 1000.0},
             {"iteration": 5, "steps_per_second": 1200.0},
             {"iteration": 6, "steps_per_second": 1100.0}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert brax_ppo.median_later_sps(str(path)) == 1100.0
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:3]))  # nothing after the compile
    assert brax_ppo.median_later_sps(str(path)) is None
