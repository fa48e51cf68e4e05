#!/usr/bin/env bash
# The suites' flagship presets at their published budgets on a GPU, ours beside the suite's own
# trainer (benchmarks/peers_brax.py: Brax's PPO, with Playground's params for Playground's tasks),
# one seed a process, the two sides alternated seed by seed: issue #57's GPU half.
#
# Here, once: bash benchmarks/gpu_kit.sh (the wheels, and Go1's robot, into .gpu/).
# There (the device tool, carry [".gpu"]):  DEADLINE=560 bash benchmarks/gpu_flagship.sh ant
# Phases: pendulum (brax:inverted_pendulum, 1.31M), ant, humanoid, halfcheetah (Brax's notebook PPO,
# 50M), cheetahrun (Playground's DM Control PPO, 60M), go1 (Playground's locomotion PPO, 200M).
# Playground's tasks run MJX's JAX implementation on both sides (warp-lang is not carried).
# SEEDS (default "0 1 2"), STEPS (each side's budget; default the published one) and OURS_FLAGS
# (more flags of ours, e.g. "--max-grad-norm 1.0", with OURS_TAG naming the variant) change a run,
# SIDES (default "brax ours") which sides run; EPOCHS is Brax's training epochs (default 9: 10 evaluations,
# and ours evaluates as often). A run is skipped once fewer than its phase's seconds are left
# before DEADLINE (measure one run first: those seconds are guesses until then).
# Results: one JSON line a run in $OUT/flagship.jsonl (benchmarks/flagship_table.py: who, env,
# seed, process seconds, steps/s, final return, each evaluation's env steps, seconds and return);
# `python -m benchmarks.flagship_table $OUT/flagship.jsonl` tables them. Logs in $OUT/logs/.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
R=$(pwd); H=$R/.gpu; T0=$(date +%s); DEADLINE=${DEADLINE:-540}; W=/tmp/flagship; mkdir -p $W $OUT/logs
SEEDS=${SEEDS:-0 1 2}; EPOCHS=${EPOCHS:-9}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
pip_in() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@" >/dev/null 2>&1; }
if [ -d $H/whl/ours ] && [ ! -d /tmp/site-ours/gymnax ]; then pip_in /tmp/site-ours $H/whl/ours/*.whl; fi
if [ -d $H/whl/suites ] && [ ! -d /tmp/site-suites/brax ]; then pip_in /tmp/site-suites $H/whl/suites/*.whl; fi
if [ -d $H/menagerie ] && [ -d /tmp/site-suites/mujoco_playground ]; then  # where Playground looks first
  mkdir -p /tmp/site-suites/mujoco_playground/external_deps/mujoco_menagerie
  cp -r $H/menagerie/* /tmp/site-suites/mujoco_playground/external_deps/mujoco_menagerie/
fi
export PYTHONPATH=/tmp/site-ours:$R:/tmp/site-suites
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

run() {  # run WHO ENV SEED NEED: one run of one side, skipped when fewer than NEED seconds are left
  local who=$1 env=$2 seed=$3 need=$4 started rc
  [ $who = ours ] && [ -n "${OURS_TAG:-}" ] && who=ours-$OURS_TAG
  local tag=$who-$env-$seed
  [ $(left) -lt $need ] && { echo "skip $tag ($(left)s left, $need wanted)"; return; }
  # the budget (STEPS, else our preset's, the published one) and our updates in it, from the preset
  local budget updates
  read budget updates < <(python3 -c "from jaxrl_async.trainer.presets import config_for
c = config_for('${OURS_ENV[$env]%% *}'); total = ${STEPS:-c.total_timesteps}; print(total, total // c.batch_size)")
  started=$(date +%s.%N)
  if [ $1 = ours ]; then
    rm -rf $W/$tag
    timeout $(( $(left) - 5 )) python3 -m jaxrl_async.cli train --env ${OURS_ENV[$env]} --seed $seed \
      --total-timesteps $budget --eval-interval $(( (updates + EPOCHS - 1) / EPOCHS )) --eval-episodes 16 \
      --checkpoint-interval 0 --compilation-cache off --run-dir $W/$tag ${OURS_FLAGS:-} > $OUT/logs/$tag.log 2>&1
    rc=$?; [ $rc = 0 ] && cp $W/$tag/metrics.jsonl $OUT/logs/$tag.metrics.jsonl
  else
    timeout $(( $(left) - 5 )) python3 benchmarks/peers_brax.py ${PEER[$env]} $budget $seed $EPOCHS \
      > $OUT/logs/$tag.log 2>&1
    rc=$?
  fi
  local seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
  if [ $rc = 0 ]; then
    python3 -m benchmarks.flagship_table row $who $env $seed $seconds $W/$tag $OUT/logs/$tag.log >> $OUT/flagship.jsonl
  else
    echo "{\"who\": \"$who\", \"env\": \"$env\", \"seed\": $seed, \"error\": $rc, \"process_s\": $seconds}" >> $OUT/flagship.jsonl
    tail -5 $OUT/logs/$tag.log
  fi
  echo "$tag: $(tail -1 $OUT/flagship.jsonl | cut -c1-200); $(left)s left"
}

# each phase: our env id (its preset holds the published budget), the peer's preset, and a guess of
# one run's seconds on an H200
declare -A OURS_ENV=([pendulum]=brax:inverted_pendulum [ant]=brax:ant [humanoid]=brax:humanoid
  [halfcheetah]=brax:halfcheetah [cheetahrun]="playground:CheetahRun --env-kwargs impl=jax"
  [go1]="playground:Go1JoystickFlatTerrain --env-kwargs impl=jax")
declare -A PEER=([pendulum]=inverted_pendulum [ant]=ant [humanoid]=humanoid [halfcheetah]=halfcheetah
  [cheetahrun]=cheetahrun [go1]=go1)
declare -A NEED=([pendulum]=120 [ant]=150 [humanoid]=240 [halfcheetah]=200 [cheetahrun]=400 [go1]=500)

for phase in ${@:-ant}; do
  [ -n "${PEER[$phase]:-}" ] || { echo "unknown phase $phase (${!PEER[*]})"; continue; }
  echo "== $phase, $(left)s left"
  for seed in $SEEDS; do
    for side in ${SIDES:-brax ours}; do run $side $phase $seed ${NEED[$phase]}; done
  done
done
[ -f $OUT/flagship.jsonl ] && python3 -m benchmarks.flagship_table $OUT/flagship.jsonl
echo "== end, $(left)s left"
