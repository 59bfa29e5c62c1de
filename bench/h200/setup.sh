# Sourced by the run-*.sh scripts on the lent H200 (from the repository root): unpacks the
# carry's slimmed mlx/mlx-cuda/mlx-lm site into /tmp/site and its mlxgo into $W, sets the
# library and Python paths, and defines el (seconds since the start) and pack (copy the
# results in $R to $OUT). Sets T0, W, R, C and PY.
T0=$(date +%s); el(){ echo $(( $(date +%s)-T0 )); }
W=/tmp/w; R=/tmp/res; mkdir -p $W $R /tmp/site
C=.whl/carry
xz -dc $C/mlxcuda-slim.tar.xz | tar -x -C /tmp/site || exit 1
xz -dc $C/mlxgo.xz > $W/mlxgo && chmod +x $W/mlxgo || exit 1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=/tmp/site/mlx/lib:$(ls -d $NV/*/lib | tr '\n' ':')
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
PY=$(command -v python3)
pack(){ cp $R/*.log $R/*.json $R/*.md $OUT/ 2>/dev/null; cp -r $W/bench/*.log $OUT/ 2>/dev/null; }
# envinfo prints the host, the GPU and MLX's versions and device (a first small MLX computation).
envinfo(){ echo "unpacked at $(el)s"; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
  $PY -c "import mlx.core as mx, mlx_lm; a=mx.random.normal((256,256)); print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), (a@a).sum().item())"; }
