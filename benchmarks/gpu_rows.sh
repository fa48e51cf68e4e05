#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md ("Speed on a GPU") in one device call: ours beside rejax 0.1.3,
# most wanted first, every step skipped once fewer than its seconds are left before DEADLINE.
#
# Here, once: bash benchmarks/gpu_kit.sh (the kit, its wheels and the suites' into .gpu/), and for the
# bisect phase the trees to time, e.g.
#   for c in 4ba1587 f8a3142^ f8a3142; do mkdir -p .gpu/trees/$c && git archive $c jaxrl_async | tar -x -C .gpu/trees/$c; done
# There (the device tool, carry [".gpu"]):  DEADLINE=540 bash benchmarks/gpu_rows.sh [PHASE ...]
# Phases (default: peers rows breakout): peers (reference and PQN via benchmarks.peers: alternated,
# both startups timed alike; pqn: PQN alone), rows (big: 2048x64, then seeds: 64 and 512 seeds
# (seeds64: 64 alone), then async: the reference and 2048x64 at --lag 1, the reference with the
# actor on the CPU), breakout (--preset none: rejax's config), suites (rollout / raw at 1024 envs for Brax, Playground and Craftax, with the suites'
# wheels in .gpu/whl/suites; Craftax's four programs took over 130 s to compile on an H100),
# bisect (the 2048x64 row under each tree in .gpu/trees, then this one and rejax's), asyncab (the
# async rows likewise, and with the actor on the CPU), abrows (2048x64 and Breakout 1024x64, this tree
# first, then each in .gpu/trees), xlaflags (cuBLAS in place of Triton gemms), levers (speed settings
# by flag on the rows short of 1.3x), compile (the 2048x64 row's compile time under rolled loops and
# without XLA's autotuning), seeds512seq (512 seeds with the sequential GAE), profile (kernels
# per iteration, ours and rejax's: benchmarks/gpu_kernels.py), tests (the core paths' fast tests; rlax,
# which test_pqn.py imports, is not on the machine: add its wheel to whl/ours). Results: one JSON
# line per run in $OUT/results.jsonl, peers' tables in $OUT/peers-*.json, logs in $OUT/logs.txt.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
R=$(pwd); H=$R/.gpu; T0=$(date +%s); DEADLINE=${DEADLINE:-540}; W=/tmp/gpurows; mkdir -p $W
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
LOG=$OUT/logs.txt; res() { echo "$1" >> $OUT/results.jsonl; }
pip_in() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@" >/dev/null 2>&1; }
[ -d /tmp/site-ours/gymnax ] || { pip_in /tmp/site-ours $H/whl/ours/*.whl; pip_in /tmp/site-rejax $H/whl/rejax/*.whl; }
# the suites phase: brax, mujoco, mujoco-core, mujoco-mjx, playground, craftax and what they import that the
# machine lacks (jaxopt, ml-collections, trimesh); not warp-lang (150 MB: MJX then runs its JAX implementation)
[ -d $H/whl/suites ] && [ ! -d /tmp/site-suites/brax ] && pip_in /tmp/site-suites $H/whl/suites/*.whl
printf '#!/bin/sh\nPYTHONPATH=/tmp/site-rejax exec python3 "$@"\n' > /tmp/rejax-python; chmod +x /tmp/rejax-python
export PYTHONPATH=/tmp/site-ours:$R
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a $LOG

ours() {  # ours TAG FLAGS...   (PYTHONPATH picks the tree)
  local tag=$1; shift; [ $(left) -lt 45 ] && { echo "skip $tag"; return; }
  rm -rf $W/$tag
  if timeout $(( $(left) - 5 )) python3 -m jaxrl_async.cli train "$@" --eval-episodes 1 --eval-interval 0 \
      --checkpoint-interval 0 --compilation-cache off --run-dir $W/$tag >>$LOG 2>&1; then
    res "$(python3 -c "import json; s=json.load(open('$W/$tag/summary.json')); print(json.dumps({'tag': '$tag', 'who': 'ours', 'sps': s['steps_per_second'], 'compile_s': s['compile_s'], 'train_s': s['train_s'], **{k: s.get(k) for k in ('compile_trace_s', 'compile_lower_s', 'compile_xla_s', 'eval_compile_s')}, 'ret': s.get('final_eval_return_mean'), 'speed': s.get('speed')}))")"
  else res "{\"tag\": \"$tag\", \"who\": \"ours\", \"error\": true}"; tail -5 $LOG; fi
  echo "$tag: $(tail -1 $OUT/results.jsonl | cut -c1-160); $(left)s left"
}
peer() {  # peer TAG ARGS...   (the kit's rejax_run.py)
  local tag=$1; shift; [ $(left) -lt 45 ] && { echo "skip $tag"; return; }
  if timeout $(( $(left) - 5 )) /tmp/rejax-python $H/rejax_run.py "$@" >$W/p.log 2>&1; then
    res "$(grep SUMMARY $W/p.log | sed "s/^SUMMARY {/{\"tag\": \"$tag\", \"who\": \"rejax\", /")"
  else cat $W/p.log >>$LOG; res "{\"tag\": \"$tag\", \"who\": \"rejax\", \"error\": true}"; tail -5 $W/p.log; fi
  echo "$tag: $(tail -1 $OUT/results.jsonl | cut -c1-160); $(left)s left"
}
peers() {  # peers CASE ROUNDS
  [ $(left) -lt $(( 60 * $2 )) ] && { echo "skip peers $1"; return; }
  timeout $(( $(left) - 5 )) python3 -m benchmarks.peers --rejax-python /tmp/rejax-python --cases $1 \
    --rounds $2 --rejax-repeats 2 --out $OUT/peers-$1.json 2>&1 | tail -4
}
BIG="--env CartPole-v1 --num-envs 2048 --num-steps 64 --num-minibatches 8 --total-timesteps 30000000"
BO_BIG="--env Breakout-MinAtar --preset none --num-envs 1024 --num-steps 64 --num-minibatches 8 --torso mlp --total-timesteps 20000000"
big_rejax() { peer big-rejax CartPole-v1 2048 64 4 8 3e7 0 1; }
seeds() {
  ours seeds64 --env CartPole-v1 --total-timesteps 500000 --num-seeds 64
  peer seeds64-rejax CartPole-v1 4 128 4 4 5e5 64 1
  ours seeds512 --env CartPole-v1 --total-timesteps 500000 --num-seeds 512
  peer seeds512-rejax CartPole-v1 4 128 4 4 5e5 512 1
}
async_rows() {
  ours async-ref --env CartPole-v1 --total-timesteps 500000 --mode async --lag 1
  ours async-big $BIG --mode async --lag 1
  # the CPU acts while the GPU learns (../shared/peers/gpu/actor_split.py: max(3.7, 2.5) ms against 9.1)
  ours async-ref-cpu-actor --env CartPole-v1 --total-timesteps 500000 --mode async --lag 1 --actor-device cpu
}
for phase in ${@:-peers rows breakout}; do
  echo "== $phase, $(left)s left"
  case $phase in
    peers) peers ppo 2; peers pqn 1 ;;
    pqn) peers pqn 1 ;;
    rows) ours big $BIG; big_rejax; seeds; async_rows ;;
    big) ours big $BIG; big_rejax ;;
    seeds) seeds ;;
    seeds64) ours seeds64 --env CartPole-v1 --total-timesteps 500000 --num-seeds 64
      peer seeds64-rejax CartPole-v1 4 128 4 4 5e5 64 1 ;;
    async) async_rows ;;
    levers)  # the speed settings by flag on the rows short of 1.3x: which loop layout pays there
      ours big-uu8 $BIG --update-unroll 8; ours big-su8 $BIG --scan-unroll 8
      ours bo-big-uu8 $BO_BIG --update-unroll 8
      ours pqn --env CartPole-v1 --algo pqn; ours pqn-uu16 --env CartPole-v1 --algo pqn --update-unroll 16 ;;
    compile)  # what our GPU compile time (1.6-2.0x rejax's, 90% XLA) buys: layouts and autotuning, 2048x64
      ours big-rolled $BIG --scan-unroll 1 --update-unroll 1 --gae-scan sequential
      ours big-uu1 $BIG --update-unroll 1
      XLA_FLAGS=--xla_gpu_autotune_level=0 ours big-noautotune $BIG ;;
    seeds512seq)  # is the 512-seed program's slow compile the matrix GAE's?
      ours seeds512-seq --env CartPole-v1 --total-timesteps 500000 --num-seeds 512 --gae-scan sequential ;;
    profile)  # kernels per iteration, ours and rejax's, 2048x64 (benchmarks/gpu_kernels.py)
      for who in ours rejax; do [ $(left) -lt 90 ] && { echo "skip profile $who"; continue; }
        [ $who = ours ] && pp=/tmp/site-ours:$R || pp=/tmp/site-rejax
        PYTHONPATH=$pp timeout $(( $(left) - 5 )) python3 $R/benchmarks/gpu_kernels.py $who big $OUT/profile-big-$who.json 2>&1 | tail -13
      done ;;
    tests)  # the fast tests of the core paths on the GPU, for what time is left
      timeout $(( $(left) - 5 )) python3 -m pytest -o addopts="" -q -n 8 -m "not slow" -p no:cacheprovider \
        tests/test_advantages.py tests/test_rollout.py tests/test_train.py tests/test_pqn.py tests/test_ppo.py \
        tests/test_async_train.py tests/test_checkpoint.py 2>&1 | tail -25 | tee $OUT/tests.txt ;;
    breakout)
      ours bo-big $BO_BIG
      peer bo-big-rejax Breakout-MinAtar 1024 64 4 8 2e7 0 1
      ours bo --env Breakout-MinAtar --preset none --num-envs 32 --num-steps 32 --learning-rate 0.00025674 --gamma 0.995 --max-grad-norm 1 --torso mlp --total-timesteps 1000000
      peer bo-rejax Breakout-MinAtar 32 32 4 4 1e6 0 1 0.00025674 tanh 0.995 1 ;;
    suites)  # each suite's flagship env: our rollout against its raw step at 1024 envs (bench `suites`)
      for env in brax:inverted_pendulum playground:CartpoleBalance craftax:Craftax-Classic-Symbolic-v1; do
        [ $(left) -lt 150 ] && { echo "skip $env"; continue; }
        PYTHONPATH=/tmp/site-ours:$R:/tmp/site-suites timeout $(( $(left) - 5 )) python3 -c "
import json, sys
from jaxrl_async.cli.bench import suites as S
S.SUITE_ENVS, S.ENV_COUNTS = (sys.argv[1],), (1024,)
for key, row in S.suites(False, 5).items():
    print('SUITE', json.dumps({'key': key, 'steps_per_second': row['steps_per_second']['median'],
          'ratio_to_raw_env': row.get('ratio_to_raw_env'), 'ms_per_step': row.get('ms_per_step')}))" $env \
          > $W/s.log 2>&1; echo "rc=$?"; grep SUITE $W/s.log | tee -a $OUT/suites.txt; grep -i error $W/s.log | tail -2
      done ;;
    asyncab)  # the async rows (--lag 1) under each tree in .gpu/trees, then this one's, the CPU actor's,
      # rejax's and our fused rows beside them
      shopt -s nullglob
      for row in ref big; do
        [ $row = ref ] && a="--env CartPole-v1 --total-timesteps 500000" || a=$BIG
        for tree in $H/trees/*/; do
          (cd $tree && PYTHONPATH=/tmp/site-ours:$tree ours "async-$row@$(basename $tree)" $a --mode async --lag 1)
        done
        ours async-$row $a --mode async --lag 1
      done
      ours async-ref-cpu-actor --env CartPole-v1 --total-timesteps 500000 --mode async --lag 1 --actor-device cpu
      peer ref-rejax CartPole-v1 4 128 4 4 5e5 0 1; big_rejax
      ours ref --env CartPole-v1 --total-timesteps 500000; ours big $BIG ;;
    abrows)  # the fused 2048x64 and Breakout 1024x64 rows under this tree, then each tree in .gpu/trees
      shopt -s nullglob
      for row in big bo-big; do
        [ $row = big ] && a=$BIG || a=$BO_BIG
        ours $row $a
        for tree in $H/trees/*/; do (cd $tree && PYTHONPATH=/tmp/site-ours:$tree ours "$row@$(basename $tree)" $a); done
      done
      peer bo-big-rejax Breakout-MinAtar 1024 64 4 8 2e7 0 1 ;;
    xlaflags)  # cuBLAS for the matmuls, where XLA:GPU's Triton gemm fusions are the rows' top kernels
      XLA_FLAGS=--xla_gpu_enable_triton_gemm=false ours big-cublas $BIG
      XLA_FLAGS=--xla_gpu_enable_triton_gemm=false ours bo-big-cublas $BO_BIG ;;
    bisect)
      # `python -m` puts the working directory first on the path: run each tree from its own folder
      shopt -s nullglob
      for tree in $H/trees/*/; do (cd $tree && PYTHONPATH=/tmp/site-ours:$tree ours "big@$(basename $tree)" $BIG); done
      ours big@main $BIG; big_rejax ;;
  esac
done
echo "== end, $(left)s left"
