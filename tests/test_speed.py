"""Speed settings change how programs are laid out, never what they compute.

- `speed.resolve_speed`: 'auto' takes the backend's default, an explicit value stays, the matrix
  GAE gives way to the scan past its size bound (XLA:GPU compiles bigger ones for minutes).
- The matrix form of the reverse recursion equals the scan (also from a non-zero initial
  value, across zero decays, on long fragments).
- A short training run gives the same params (to float rounding) under the CPU's and the
  GPU's defaults, and the evaluation loop's unrolling changes no result at all.
- The matmul-precision setting reaches the traced matmuls.
- `hlo_ops` multiplies loops out.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.core import advantages as adv
from jaxrl_async import speed
from jaxrl_async.cli.bench.hlo_ops import count_ops
from jaxrl_async.algorithms import learner, make_algorithm
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.trainer.build import build, initial_states, run_iterations
from jaxrl_async.config import LearnerConfig
from jaxrl_async import TrainConfig
from jaxrl_async.rollout.evaluate import make_evaluator
from jaxrl_async.nets.actor_critic import with_matmul_precision

pytestmark = pytest.mark.float32_matmuls

GPU = speed.BACKEND_DEFAULTS["gpu"].as_dict()
CPU = speed.BACKEND_DEFAULTS["cpu"].as_dict()


def test_auto_takes_the_backends_defaults():
    cfg = TrainConfig()
    assert speed.resolve_speed(cfg, "cpu") == speed.BACKEND_DEFAULTS["cpu"]
    assert speed.resolve_speed(cfg, "gpu") == speed.BACKEND_DEFAULTS["gpu"]
    assert speed.resolve_speed(cfg, "tpu") == speed.BACKEND_DEFAULTS["gpu"]  # launch-bound like the GPU
    assert speed.BACKEND_DEFAULTS["cpu"] != speed.BACKEND_DEFAULTS["gpu"]


def test_explicit_settings_stay():
    cfg = TrainConfig(scan_unroll=2, gae_scan="sequential", update_unroll=3, eval_unroll=5)
    for backend in ("cpu", "gpu"):
        assert speed.resolve_speed(cfg, backend).as_dict() == dict(scan_unroll=2, gae_scan="sequential",
                                                            update_unroll=3, eval_unroll=5)


def test_matrix_gae_gives_way_to_the_scan_past_its_size_bound():
    small = TrainConfig(num_envs=4, num_steps=128)
    assert speed.resolve_speed(small, "gpu").gae_scan == "matrix"
    # 2048 x 64^2 floats (32 MiB) is the largest the GPU was measured to compile in seconds: matrix
    at_bound = TrainConfig(num_envs=2048, num_steps=64, total_timesteps=2048 * 64)
    assert at_bound.num_envs * at_bound.num_steps ** 2 == speed.MATRIX_GAE_MAX_FLOATS
    assert speed.resolve_speed(at_bound, "gpu").gae_scan == "matrix"
    # 512 seeds x 4 x 128^2 (128 MiB) took XLA:GPU 2.5 minutes to compile as a matrix: the scan
    large = TrainConfig(num_envs=4, num_steps=128, num_seeds=512)
    assert speed.resolve_speed(large, "gpu").gae_scan == "sequential"
    assert speed.resolve_speed(dataclasses.replace(large, gae_scan="matrix"), "gpu").gae_scan == "matrix"


@pytest.mark.parametrize("field,value", [("scan_unroll", 0), ("update_unroll", -1), ("eval_unroll", "fast"),
                                         ("gae_scan", "parallel"), ("matmul_precision", "float64")])
def test_bad_speed_values_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("seed", range(3))
def test_matrix_recursion_equals_the_scan(seed):
    rng = np.random.default_rng(seed)
    length = 200
    delta = rng.normal(size=length).astype(np.float32)
    # decays in [0, 1] with exact zeros (terminations) and ones (gamma = lambda = 1)
    decay = rng.choice([0.0, 1.0, 0.97, 0.5, 0.9405], size=length, p=[0.05, 0.1, 0.45, 0.1, 0.3]).astype(np.float32)
    initial = np.float32(rng.normal())
    expected = adv._reverse_discounted_sum(jnp.asarray(delta), jnp.asarray(decay), jnp.float32(initial))
    matrix = jax.jit(adv._reverse_discounted_sum, static_argnames="scan")(
        jnp.asarray(delta), jnp.asarray(decay), jnp.float32(initial), scan="matrix")
    np.testing.assert_allclose(matrix, expected, rtol=2e-5, atol=2e-5)


def test_matrix_gae_on_a_long_fragment_without_boundaries():
    # the products reach 0.9405**1023 ~ 1e-27 through sums of logs: still the scan's values
    length = 1024
    rng = np.random.default_rng(7)
    reward, v_tm1, v_t = (jnp.asarray(rng.normal(size=(length, 2)), jnp.float32) for _ in range(3))
    discount = jnp.full((length, 2), 0.99, jnp.float32)
    args = (reward, discount, v_tm1, v_t, jnp.float32(0.95))
    np.testing.assert_allclose(adv.batched_gae(*args, scan="matrix"), adv.batched_gae(*args),
                               rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def short_runs():
    """Three fused iterations of a small config under each backend's defaults (on this backend)."""
    out = {}
    for name, settings in (("cpu", CPU), ("gpu", GPU)):
        cfg = TrainConfig(num_envs=4, num_steps=32, total_timesteps=3 * 128,
                          learner=LearnerConfig(update_epochs=2, num_minibatches=2), **settings)
        c = build(cfg)
        state = initial_states(c)
        state, _, _ = jax.jit(lambda s: jax.vmap(lambda x: run_iterations(c, x, 3))(s))(state)
        out[name] = (c, state)
    return out


def test_the_backends_defaults_train_the_same_params(short_runs):
    (_, cpu_state), (_, gpu_state) = short_runs["cpu"], short_runs["gpu"]
    chex_leaves = zip(jax.tree.leaves(cpu_state.learner.params), jax.tree.leaves(gpu_state.learner.params))
    for a, b in chex_leaves:
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # and the runs did train: the params moved from their initial values
    c, _ = short_runs["cpu"]
    initial = initial_states(c).learner.params
    moved = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(initial),
                                                             jax.tree.leaves(cpu_state.learner.params)))
    assert moved > 1e-3


def _learner_update(algo: str, scan: str):
    """`algo`'s update for a small CartPole config with its return recursion in the form `scan`, and a
    trajectory for it collected by the rollout (whose own GAE stays sequential)."""
    cfg = TrainConfig(algo=algo, num_envs=4, num_steps=16, total_timesteps=4 * 16, gae_scan="sequential",
                      learner=LearnerConfig(update_epochs=1, num_minibatches=2))
    c = build(cfg)
    _, nets = learner(algo).networks(cfg, observation_shapes(c.env.observation_space(c.env_params)),
                                     c.env.action_space(c.env_params))
    algorithm = make_algorithm(cfg, c.policy, nets, dataclasses.replace(c.speed, gae_scan=scan))
    state = jax.tree.map(lambda x: x[0], initial_states(c))
    _, trajectory = jax.jit(c.rollout.collect)(state.learner.params, state.rollout)
    return algorithm.update, state.learner, trajectory


@pytest.mark.parametrize("algo", ["pqn", "reinforce", "impala"])
def test_a_learners_returns_take_their_form_from_the_speed_settings(algo):
    """PQN's Q(lambda), REINFORCE's lambda-returns and IMPALA's V-trace run as the speed settings
    say: the matrix form drops the recursion's loop from the update, and trains the same params."""
    loops, params = {}, {}
    for scan in adv.SCANS:
        update, learner, trajectory = _learner_update(algo, scan)
        loops[scan] = jax.jit(update).lower(learner, trajectory).as_text().count("stablehlo.while")
        if algo == "pqn":  # the one whose time on a GPU this is for: its params too
            params[scan] = jax.jit(update)(learner, trajectory)[0].params
    assert loops["matrix"] < loops["sequential"], loops
    if params:
        for a, b in zip(jax.tree.leaves(params["sequential"]), jax.tree.leaves(params["matrix"])):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("unroll", [3, 7])
def test_evaluation_unrolling_changes_nothing(short_runs, unroll):
    c, state = short_runs["cpu"]
    params = jax.tree.map(lambda x: x[0], state.learner.params)
    stats = jax.tree.map(lambda x: x[0], state.rollout.obs_stats)
    key = jax.random.PRNGKey(3)
    # sampled actions (episodes of many lengths); max_steps 13 is not a multiple of the unroll:
    # the steps past it must count for nothing
    results = {}
    for u in (1, unroll):
        evaluate = make_evaluator(c.env, c.env_params, c.policy, num_episodes=16, max_steps=13, unroll=u)
        results[u] = jax.jit(evaluate, static_argnames="greedy")(params, stats, key, greedy=False)
    for field in ("returns", "lengths", "complete"):
        np.testing.assert_array_equal(getattr(results[1], field), getattr(results[unroll], field))
    complete = np.asarray(results[1].complete)
    assert complete.any() and not complete.all(), "some episodes should end within the limit, some not"


@pytest.mark.parametrize("precision,hlo", [("float32", "HIGHEST"), ("bfloat16", "DEFAULT")])
def test_matmul_precision_reaches_the_traced_matmuls(short_runs, precision, hlo):
    c, state = short_runs["cpu"]
    policy = with_matmul_precision(c.policy, precision)
    params = jax.tree.map(lambda x: x[0], state.learner.params)
    obs = jnp.zeros((2, *policy.obs_shape))
    with jax.default_matmul_precision("tensorfloat32"):  # what the setting must override
        text = jax.jit(lambda p, o: policy.value_step(p, o, ())).lower(params, obs).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert dots and all(f"precision = [{hlo}, {hlo}]" in line for line in dots)


def _loop_program(trips: int, body_ops: int = 2) -> str:
    def f(x):
        def body(i, x):
            for _ in range(body_ops):  # a sort cannot fuse with its neighbours: one op each
                x = jnp.sort(x * 1.5 + i)
            return x
        return jax.lax.fori_loop(0, trips, body, x)
    return jax.jit(f).lower(jnp.arange(8.0)).compile().as_text()


def test_hlo_ops_multiplies_loops_out():
    short, long = count_ops(_loop_program(5)).total, count_ops(_loop_program(12)).total
    per_trip = (long - short) / 7
    assert per_trip == int(per_trip) and per_trip >= 2  # two sorts at least, every trip
    assert short >= 5 * per_trip


def test_hlo_ops_counts_one_trip_of_a_loop_of_unknown_length():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, x: jnp.sort(x * 1.5 + i), x)
    text = jax.jit(f).lower(jnp.arange(8.0), 3).compile().as_text()
    trip = count_ops(text, per="loop")
    assert trip.total >= 1 and trip.by_kind.get("while", 0) == 0
    assert count_ops(text).total > trip.total  # the program adds the loop itself
    with pytest.raises(ValueError, match="exactly one loop"):
        count_ops(_loop_program(3), per="loop")  # its loop has a known length
