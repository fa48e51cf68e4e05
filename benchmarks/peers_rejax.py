"""rejax 0.1.3's PPO, DQN, SAC, TD3 and PQN timed on this machine: run by the rejax virtualenv's python
(rejax needs gymnax 0.0.9's five-value `step`, so it cannot share our environment), driven by
`benchmarks/peers.py`. Extends `../shared/peers/bench_rejax.py` (same timing, same PPO presets)
to the off-policy learners; this file imports nothing of ours.

usage: python benchmarks/peers_rejax.py ALGO PRESET NSEEDS REPEATS [TOTAL_TIMESTEPS]
       python benchmarks/peers_rejax.py ALGO PRESET hlo FILE
  ALGO: ppo | dqn | sac | td3 | pqn;   PRESET: a key of PRESETS[ALGO]
  NSEEDS=0 -> jit(algo.train)(rng); k -> jit(vmap(algo.train))(k rngs)
  hlo: write the optimised HLO of one compiled `train_iteration` to FILE (for its op count)

startup_s is the time from the trainer's call (`create`) to its compiled program, the way our
`compile_s` runs from `train()`'s call to the first iteration (benchmarks/peers.py compares the two).

eval_freq is the whole run and skip_initial_evaluation=True, so a timed run is training plus
exactly ONE final evaluation (rejax's: 128 episodes, run to done or the episode limit), whose
mean return is reported. One JSON line per repeat, then a SUMMARY line.

rejax's off-policy iteration is one step of num_envs envs, then num_epochs gradient steps
(once global_step > fill_buffer); its target network moves every target_update_freq env steps
by target <- polyak*target + (1-polyak)*online. Its TD3 iteration is policy_delay rounds of (one
step of num_envs envs, then num_epochs critic steps), then num_epochs actor steps and one move of
both targets.
"""
import json
import statistics
import sys
import time

import jax
import numpy as np
from rejax import DQN, PPO, PQN, SAC, TD3

PPO_PRESETS = {
    # PureJaxRL ppo.py's CartPole config: our CartPole-v1 preset (the package defaults)
    "cartpole_pjrl": dict(env="CartPole-v1", agent_kwargs=dict(activation="tanh"),
                          num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4,
                          learning_rate=2.5e-4, max_grad_norm=0.5, total_timesteps=500_000,
                          gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5),
}

DQN_PRESETS = {
    # our DQN CartPole-v1 config (experiments/dqn_cartpole.py: 8 envs x 32 steps, then 128 gradient
    # steps of batch 64, target copied every 128 gradient steps = 256 env steps) in rejax's layout:
    # 8 envs x 1 step, then 4 gradient steps (the same 0.5 per env step), the target copied
    # (polyak 0) every 256 env steps; epsilon 1 -> 0.04 over 16% of the run, relu 64x64, Double DQN
    "cartpole_ours": dict(env="CartPole-v1", agent="QNetwork", agent_kwargs=dict(activation="relu"),
                          num_envs=8, num_epochs=4, batch_size=64, buffer_size=100_000, fill_buffer=1_000,
                          learning_rate=2.3e-3, max_grad_norm=10.0, gamma=0.99, ddqn=True,
                          target_update_freq=256, polyak=0.0, eps_start=1.0, eps_end=0.04,
                          exploration_fraction=0.16, total_timesteps=500_000),
    # benchmarks/peers.py's DQN_BREAKOUT: 8 envs x 1 step, 2 gradient steps of batch 64, the target copied every
    # 1,000 env steps, epsilon 1 -> 0.01 over 10%, relu 64x64 on the flattened image, Double DQN, Adam 2.5e-4
    "breakout_ours": dict(env="Breakout-MinAtar", agent="QNetwork", agent_kwargs=dict(activation="relu"),
                          num_envs=8, num_epochs=2, batch_size=64, buffer_size=100_000, fill_buffer=10_000,
                          learning_rate=2.5e-4, max_grad_norm=10.0, gamma=0.99, ddqn=True,
                          target_update_freq=1_000, polyak=0.0, eps_start=1.0, eps_end=0.01,
                          exploration_fraction=0.1, total_timesteps=1_000_000),
}

SAC_PRESETS = {
    # our SAC preset (presets.ALGO_PRESETS["sac"]): 1 env x 1 step, 1 gradient step of batch 256,
    # Adam 3e-4 for actor, critics and temperature, tau 0.005 every step (polyak 0.995), gamma
    # 0.99, relu 64x64, buffer 100k, learning from 1,000 transitions, target entropy -|A|
    "pendulum_ours": dict(env="Pendulum-v1", agent_kwargs=dict(activation="relu"), hidden_layer_sizes=(64, 64),
                          num_envs=1, num_epochs=1, batch_size=256, buffer_size=100_000, fill_buffer=1_000,
                          learning_rate=3e-4, gamma=0.99, target_update_freq=1, polyak=0.995,
                          total_timesteps=50_000),
}

TD3_PRESETS = {
    # our TD3 preset (presets.ALGO_PRESETS["td3"]): 4 envs x 1 step, 2 gradient steps of batch 256 per
    # iteration (num_epochs=2), the actor and the targets every 2nd (policy_delay=2), Adam 3e-4, gamma 0.99,
    # relu 64x64 (rejax's TD3 networks are 64x64), buffer 100k, learning from 1,000 transitions. Our noises
    # are fractions of half the action range; rejax's are in env units, so on Pendulum's [-2, 2] they are
    # twice ours: exploration 0.1 -> 0.2, target smoothing 0.2 -> 0.4 clipped at 0.5 -> 1.0. Our targets move
    # by tau 0.005 at each of the 2 actor steps of 8 env steps, rejax's once after both: polyak 0.99.
    "pendulum_ours": dict(env="Pendulum-v1", actor_kwargs=dict(activation="relu"),
                          critic_kwargs=dict(activation="relu"), num_envs=4, num_epochs=2, policy_delay=2,
                          batch_size=256, buffer_size=100_000, fill_buffer=1_000, learning_rate=3e-4,
                          max_grad_norm=1000.0, gamma=0.99, target_update_freq=1, polyak=0.99,
                          exploration_noise=0.2, target_noise=0.4, target_noise_clip=1.0, total_timesteps=50_000),
}

PQN_PRESETS = {
    # rejax's own PQN CartPole config (configs/gymnax/cartpole.yaml, pqn): 16 envs x 128 steps, 5 epochs of
    # 16 minibatches, Adam 3e-4 (constant), lambda 0.9, epsilon 1 -> 0.05 over half the run, its fixed
    # 64x64 ReLU Q-network with LayerNorm; our CartPole-v1:pqn preset is this config with the learning
    # rate annealed to zero, at 500k steps (rejax's: 524,288)
    "cartpole_rejax": dict(env="CartPole-v1", num_envs=16, num_steps=128, num_epochs=5, num_minibatches=16,
                           learning_rate=3e-4, max_grad_norm=10.0, gamma=0.99, td_lambda=0.9, eps_start=1.0,
                           eps_end=0.05, exploration_fraction=0.5, normalize_observations=False,
                           total_timesteps=500_000),
}

ALGOS = {"ppo": (PPO, PPO_PRESETS), "dqn": (DQN, DQN_PRESETS), "sac": (SAC, SAC_PRESETS), "td3": (TD3, TD3_PRESETS),
         "pqn": (PQN, PQN_PRESETS)}
# the on-policy learners step num_envs envs num_steps times per iteration, the others once
ROLLOUT_ALGOS = ("ppo", "pqn")


def main(argv):
    name, preset = argv[1], argv[2]
    cls, presets = ALGOS[name]
    cfg = dict(presets[preset])
    if len(argv) > 5:
        cfg["total_timesteps"] = int(float(argv[5]))
    cfg["eval_freq"] = cfg["total_timesteps"]
    cfg["skip_initial_evaluation"] = True
    start = time.perf_counter()  # the trainer's call: startup_s runs from here to the compiled program
    algo = cls.create(**cfg)
    if argv[3] == "hlo":
        ts = algo.init_state(jax.random.PRNGKey(0))
        with open(argv[4], "w") as f:
            f.write(jax.jit(algo.train_iteration).lower(ts).compile().as_text())
        return
    nseeds, repeats = int(argv[3]), int(argv[4])
    # TD3 runs policy_delay gradient steps (num_epochs) per iteration over num_envs env steps each
    per_iteration = algo.num_envs * (algo.num_steps if name in ROLLOUT_ALGOS
                                     else getattr(algo, "policy_delay", 1) if name == "td3" else 1)
    iters = int(np.ceil(algo.eval_freq / per_iteration)) * int(np.ceil(algo.total_timesteps / algo.eval_freq))
    steps_per_seed = iters * per_iteration

    seeds = max(nseeds, 1)
    if nseeds == 0:
        fn, mk = jax.jit(algo.train), (lambda s: jax.random.PRNGKey(s))
    else:
        fn, mk = jax.jit(jax.vmap(algo.train)), (lambda s: jax.random.split(jax.random.PRNGKey(s), nseeds))

    t0 = time.perf_counter()
    lowered = fn.lower(mk(0))
    t1 = time.perf_counter()
    compiled = lowered.compile()
    trace_s, compile_s = t1 - t0, time.perf_counter() - t1
    startup_s = time.perf_counter() - start  # create (envs, networks), trace, lower, XLA compile

    times, rets = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        out = compiled(mk(i + 1))
        jax.block_until_ready(out)
        dt = time.perf_counter() - t0
        _, (_, returns) = out  # returns: [..., num_evals, 128]
        per_seed = np.asarray(returns)[..., -1, :].mean(-1).reshape(-1)
        times.append(dt)
        rets.append(float(per_seed.mean()))
        print(json.dumps({"rep": i, "run_s": round(dt, 3), "agg_sps": round(seeds * steps_per_seed / dt),
                          "final_eval_ret_mean": round(float(per_seed.mean()), 2)}), flush=True)

    med = statistics.median(times)
    print("SUMMARY", json.dumps({
        "anchor": f"rejax {name}", "preset": preset, "env": cfg["env"], "nseeds": seeds,
        "steps_per_seed": steps_per_seed, "trace_s": round(trace_s, 2), "compile_s": round(compile_s, 2),
        "startup_s": round(startup_s, 2),
        "run_s": [round(t, 3) for t in times], "run_s_median": round(med, 3),
        "agg_sps_median": round(seeds * steps_per_seed / med),
        "final_ret": [round(r, 2) for r in rets], "repeats": repeats,
        "config": {k: v for k, v in cfg.items() if k != "agent_kwargs"}, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
