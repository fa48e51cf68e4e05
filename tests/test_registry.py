"""The learner registry: every name `--algo` takes has a learner, built by its module alone."""

import dataclasses

import pytest

from jaxrl_async import algorithms
from jaxrl_async.config import require
from jaxrl_async.speed import BACKEND_DEFAULTS
from jaxrl_async.train_config import LearnerSpec, train_config_class
from jaxrl_async import TrainConfig
from gymnax.environments.spaces import Box, Discrete
from jaxrl_async.types import Algorithm, HostHooks, Learner


def test_the_registry_and_the_configs_names_agree():
    algo = next(f for f in dataclasses.fields(TrainConfig) if f.name == "algo")
    assert algo.type.__args__ == tuple(algorithms.LEARNERS) and algo.default == "ppo"
    assert all(isinstance(algorithms.learner(name), Learner) for name in algorithms.LEARNERS)
    for name, spec in algorithms.LEARNERS.items():  # each learner's own flags are the config's section of its name
        assert (name in {f.name for f in dataclasses.fields(TrainConfig)}) == (spec.section is not None)


@dataclasses.dataclass(frozen=True)
class _ToyConfig:
    trace_decay: float = 0.9

    def __post_init__(self):
        require(0 <= self.trace_decay <= 1, "trace_decay", self.trace_decay, "must be in [0, 1]")


def test_a_learner_with_flags_of_its_own_is_one_registry_line():
    """What `TrainConfig` knows of a learner comes from its `LearnerSpec` alone: its section, its
    checks, resume and config.json round trips, the replay learners' rules."""
    specs = (*algorithms.LEARNERS.values(), LearnerSpec("toy", _ToyConfig, ("Discrete",), replay=True,
                                                         own_networks="its tabular values",
                                                         resume_fixed=("trace_decay",)))
    Config = train_config_class(specs, module=__name__)
    cfg = Config(algo="toy", toy=_ToyConfig(trace_decay=0.5))
    assert Config.from_dict(cfg.to_dict()) == cfg and cfg.td3 == TrainConfig().td3
    with pytest.raises(ValueError, match="trace_decay=2 is invalid"):
        Config.from_dict({**cfg.to_dict(), "toy": {"trace_decay": 2}})
    with pytest.raises(ValueError, match="cannot resume with toy.trace_decay=0.25"):
        cfg.check_resumable_as(cfg.with_fields(trace_decay=0.25))
    with pytest.raises(ValueError, match="algo='toy' builds its tabular values from hidden_sizes"):
        cfg.with_fields(value_hidden_sizes=(8,))
    assert cfg.with_fields(normalize_obs=True).normalize_obs  # its buffer stores raw observations (docs/learners.md)
    with pytest.raises(ValueError, match="algo='sarsa' is invalid: choose one of ppo, a2c, .*, pqn, toy"):
        Config(algo="sarsa")


def test_an_action_space_mismatch_names_every_learner_that_fits():
    with pytest.raises(ValueError, match="algo='dqn' needs a Discrete action space, got .*: use --algo ppo or a2c "
                                         "or reinforce or impala or sac or td3$"):
        algorithms.check_action_space("dqn", Box(-1.0, 1.0, (1,)))
    with pytest.raises(ValueError, match="use --algo ppo or a2c or reinforce or impala or dqn or pqn$"):
        algorithms.check_action_space("td3", Discrete(3))
    algorithms.check_action_space("ppo", Discrete(3))


def test_an_unknown_learner_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="algo='sarsa' is not known: choose one of ppo, a2c"):
        algorithms.learner("sarsa")


@pytest.mark.parametrize("algo, env", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
                                       ("td3", "Pendulum-v1"), ("pqn", "CartPole-v1")])
def test_each_learner_builds_from_its_entry_alone(algo, env):
    from jaxrl_async.envs import make_env
    from jaxrl_async.envs.spaces import observation_shapes

    cfg = TrainConfig(env=env, algo=algo, num_envs=2, num_steps=8, total_timesteps=64,
                      learner=dataclasses.replace(TrainConfig().learner, num_minibatches=2))
    env_obj, params = make_env(env)
    entry = algorithms.learner(algo)
    policy, nets = entry.networks(cfg, observation_shapes(env_obj.observation_space(params)),
                                  env_obj.action_space(params))
    algo_fns = entry.make(cfg, policy, nets, BACKEND_DEFAULTS["cpu"])
    assert isinstance(algo_fns, Algorithm)
    # only the replay learners keep state the host side treats apart (their buffer)
    assert (algo_fns.host == HostHooks()) == (not algorithms.LEARNERS[algo].replay)


def _another_value(value):
    """A valid value unlike `value`, for the flags moved below (bools flipped, numbers doubled or
    halved: 2 minibatches become 4, which divide the 4 envs and the batch of 16)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 2 * value
    if isinstance(value, float):
        return value / 2 if value else 0.5
    return -1.0  # SAC's target_entropy 'auto'


def _iteration_jaxpr(cfg) -> str:
    import jax

    from jaxrl_async.trainer.build import build, init_state, iteration

    c = build(cfg)
    state = jax.eval_shape(lambda key: init_state(c, key), jax.random.PRNGKey(0))
    return str(jax.make_jaxpr(lambda state: iteration(c, state))(state))


def _with(cfg, moved: dict):
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **fields)
                                       for name, fields in moved.items() if fields})


@pytest.mark.parametrize("algo", list(algorithms.LEARNERS))
def test_the_flags_a_learner_is_told_to_ignore_change_nothing_it_computes(algo):
    """`unread_flags` says which flags a run ignores from the registry's lines alone (each section's
    owner, `replay`, `reads`). Each learner's iteration, rollout and update, is traced with every
    flag of the other learners' sections, the replay's and the learner section's declared ones
    moved: those it is told to ignore must leave the program as it was (a flag it reads, told as
    ignored, fails this), and those it reads change it (together: a `reads` entry it does not read
    would only keep a note back, never give a wrong one). The per-seed hyperparameters are the state's arrays, not the program's: `hparams_read`,
    which sweeps rely on, covers them."""
    spec = algorithms.LEARNERS[algo]
    cfg = TrainConfig(env="Pendulum-v1" if "Box" in spec.actions and "Discrete" not in spec.actions else "CartPole-v1",
                      algo=algo, num_envs=4, num_steps=4, total_timesteps=64,
                      learner=dataclasses.replace(TrainConfig().learner, num_minibatches=2))
    sections = [name for name, other in algorithms.LEARNERS.items() if other.section is not None and name != algo]
    moved = {name: {f.name: _another_value(getattr(getattr(cfg, name), f.name))
                    for f in dataclasses.fields(getattr(cfg, name))}
             for name in sections + ([] if spec.replay else ["replay"])}
    declared = {entry.split(".", 1)[1] for other in algorithms.LEARNERS.values() for entry in other.reads
                if entry.startswith("learner.")}
    moved["learner"] = {field: _another_value(getattr(cfg.learner, field)) for field in sorted(declared)}
    told = cfg.unread_flags(moved)
    told_fields = {flag.removeprefix("--").removeprefix("no-").replace("-", "_") for flag in told}  # --no-x: x off
    unread = {name: {field: value for field, value in fields.items() if field in told_fields}
              for name, fields in moved.items()}
    read = {name: {field: value for field, value in fields.items() if field not in unread[name]}
            for name, fields in moved.items()}
    assert sum(map(len, unread.values())) == len(told) > 0
    assert {f"{name}.{field}" for name, fields in read.items() for field in fields} <= set(spec.reads)
    base = _iteration_jaxpr(cfg)
    assert _iteration_jaxpr(_with(cfg, unread)) == base
    if spec.reads:  # PQN's DQN epsilon, PPO's value clip, the minibatch loop's flags
        assert _iteration_jaxpr(_with(cfg, read)) != base
