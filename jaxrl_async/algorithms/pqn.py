"""PQN (Gallici et al., ICLR 2025, "Simplifying Deep Temporal Difference Learning") as an
`Algorithm(init, update)`: Q-learning over many parallel envs with no replay buffer and no
target network, kept stable by LayerNorm in the Q-network (`--layer-norm`, on by default).

Each iteration acts `num_steps` x `num_envs` epsilon-greedy steps with the Q policy (`nets/q.py`,
DQN's: its params are the network and the exploration rate, so every reader acts with the rate
that belongs to them), then:

1. once per rollout, the Q(lambda) returns of the fragment under the learner's network
   (`core.advantages.q_lambda_returns`, Peng's: the lambda-returns of max_a Q):

       G_t = r_t + discount_t * ((1 - lambda_t) * max_a Q(s'_t, a) + lambda_t * G_{t+1})

   with discount_t = gamma * (1 - terminated_t) and lambda_t = lambda * (1 - truncated_t)
   (`gae_inputs`, GAE's rule): s'_t is the pre-reset observation (`Trajectory.next_obs`), so a
   time limit bootstraps from the final observation, a termination from nothing, and no return
   runs into the next episode; the fragment's last step bootstraps from max_a Q(s'_{T-1}, a);
2. `update_epochs` passes of `num_minibatches` shuffled minibatches over its transitions, each one
   Adam step on 0.5 * (Q(s_t, a_t) - G_t)^2 (the shared SGD loop, `sgd.make_learner`, as PPO's);
3. epsilon from the schedule (`--epsilon-start` -> `--epsilon-end` over `--epsilon-decay-fraction`
   of the run, DQN's flags) at the env steps done.

The returns use the learner's network at the update's start, which in the fused mode is the one
that acted (purejaxql's targets); an async actor a version behind changes the actions, not the
targets. `--gae-lambda` is the returns' lambda.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxrl_async.algorithms.dqn import epsilon_schedule
from jaxrl_async.algorithms.sgd import LearnerHyperparams, env_steps_of, make_learner, replay_batch
from jaxrl_async.config import check_minibatches
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.core.advantages import batched_q_lambda_returns, gae_inputs
from jaxrl_async.core.distributions import mask_scores, pick
from jaxrl_async.nets.actor_critic import Policy, at_matmul_precision, observed_legal_actions
from jaxrl_async.nets.q import QParams, make_q_policy
from jaxrl_async.types import Algorithm, Learner, LearnerState, Trajectory

_FIELDS = ("obs", "action", "target")


def td_loss(q_values: Callable, network, batch: dict) -> tuple[jax.Array, dict]:
    """0.5 * mean (Q(s, a) - G)^2 over a minibatch of transitions, G = `batch["target"]` (fixed:
    the returns are computed before the epochs, so no gradient reaches them)."""
    q = q_values(network, batch["obs"])  # [N, A]
    q_taken = pick(q, batch["action"])
    td = batch["target"] - q_taken
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}


def make_pqn(cfg, exploration_cfg, policy: Policy, q_values: Callable, *, num_updates: int, num_envs: int,
             num_steps: int, total_timesteps: int, unroll: int = 1, scan: str = "sequential") -> Algorithm:
    """PQN over rollouts of `num_steps` x `num_envs`; its `LearnerState.params` are `QParams`, its
    optimiser state the network's alone.

    Args:
      cfg: the learner config (update_epochs, num_minibatches, learning_rate, anneal_lr, gamma,
        gae_lambda: the Q(lambda) returns' lambda, max_grad_norm).
      exploration_cfg: the epsilon schedule's fields (`dqn_config.DQNConfig`'s epsilon_start,
        epsilon_end, epsilon_decay_fraction).
      policy, q_values: the Q policy and its network (`nets.q.make_q_policy`).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T (env steps per update, for the epsilon schedule).
      total_timesteps: the run's budget per seed (for the epsilon schedule).
      unroll: unroll factor of the loop over minibatches (speed only).
      scan: the Q(lambda) recursion's form, "sequential" or "matrix" (speed only).
    """
    check_minibatches(cfg.num_minibatches, num_envs * num_steps)
    epsilon = epsilon_schedule(exploration_cfg, total_timesteps)

    def loss_fn(network, batch, hp: LearnerHyperparams):
        return td_loss(q_values, network, batch)

    def batch_fn(trajectory: Trajectory):
        batch, size = replay_batch(trajectory, _FIELDS, policy.replay_length)
        return batch, size, {}

    # the shared SGD loop trains the network; the exploration rate is the schedule's, not learned
    sgd = make_learner(cfg, policy._replace(init=lambda key: policy.init(key).network), loss_fn, batch_fn,
                       num_updates=num_updates, unroll=unroll)

    def returns(network, trajectory: Trajectory) -> jax.Array:
        """[T, B] Q(lambda) returns of the fragment under `network`."""
        # the greedy value of the next state is over its legal actions only, as DQN's target: an
        # illegal action is never taken, so its Q-value is never trained and would inflate the max
        q_next = mask_scores(q_values(network, trajectory.next_obs), observed_legal_actions(trajectory.next_obs))
        q_next = jax.lax.stop_gradient(q_next)  # [T, B, A]
        discount_t, lambda_t = gae_inputs(trajectory.reward, trajectory.terminated, trajectory.truncated,
                                          cfg.gamma, cfg.gae_lambda)
        return batched_q_lambda_returns(trajectory.reward, discount_t, q_next, lambda_t, scan)

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> LearnerState:
        learner = sgd.init(key, hparams)
        return learner.replace(params=QParams(network=learner.params, epsilon=epsilon(jnp.zeros((), jnp.int32))))

    def update(state: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        target = returns(state.params.network, trajectory)
        # the fragment's returns take the place of the rollout's GAE targets, the batch's `target`
        learner, metrics = sgd.update(state.replace(params=state.params.network), trajectory.replace(target=target))
        steps = env_steps_of(learner.update_count, num_envs * num_steps)
        params = QParams(network=learner.params, epsilon=epsilon(steps))
        metrics = {**metrics, "epsilon": state.params.epsilon,  # the rate this fragment was collected with
                   "q_lambda_return_mean": jnp.mean(target)}
        return learner.replace(params=params), metrics

    def behaviour(params, env_steps):
        # the epsilon of the env steps taken, whatever update the params come from (async lag >= 1)
        return params.replace(epsilon=jnp.broadcast_to(epsilon(env_steps), params.epsilon.shape))

    return Algorithm(init, update, behaviour)


def _networks(cfg, obs_shape, action_space):
    policy, q_values = make_q_policy(cfg.network, obs_shape, action_space, algo="pqn",
                                     layer_norm=cfg.pqn.layer_norm)
    return policy, at_matmul_precision(q_values, cfg.matmul_precision)


def _make(cfg, policy, q_values, speed: SpeedSettings) -> Algorithm:
    return make_pqn(cfg.learner, cfg.dqn, policy, q_values, num_updates=cfg.num_updates, num_envs=cfg.num_envs,
                    num_steps=cfg.num_steps, total_timesteps=cfg.total_timesteps, unroll=speed.update_unroll,
                    scan=speed.gae_scan)


LEARNER = Learner(networks=_networks, make=_make)
