# One device call: the environment, the modeling sources read, inspect (meta device, in the
# background) and the runner cases given as arguments, one after another; all in $OUT/fam.tar.gz.
set -x
R=/tmp/fam; mkdir -p $R
# flash-linear-attention and einops, pure Python (Triton kernels), when the call carries them
# (.devcarry/pysrc, built by carry_fla.sh; its COMMITS file names the commits): Qwen3-Next runs them.
if [ -d .devcarry/pysrc ]; then export PYTHONPATH=$PWD/.devcarry/pysrc${PYTHONPATH:+:$PYTHONPATH}; fi
# FLA_GUARD=lift: fla_guard/sitecustomize.py lifts fla's refusal of its Triton backward kernel on
# Hopper with Triton < 3.7.1 (wrong gradient values; the tensors kept and the work are the same).
if [ "${FLA_GUARD:-}" = lift ]; then export PYTHONPATH=$PWD/python/family_jobs/fla_guard:$PYTHONPATH; fi
{ cat .devcarry/pysrc/COMMITS 2>/dev/null; python3 -c "import fla, einops; print('fla', fla.__version__, 'einops', einops.__version__)" 2>&1 | tail -1;
  python3 -c "import transformers.models.qwen3_next.modeling_qwen3_next as q; f = q.torch_chunk_gated_delta_rule; print('gated delta rule:', getattr(f, '__module__', None), getattr(f, '__qualname__', repr(f))); c = q.causal_conv1d_fn; print('conv:', getattr(c, '__module__', None), getattr(c, '__qualname__', repr(c)))" 2>&1 | tail -2;   python3 -c "import kernels; print('kernels (hub)', kernels.__version__)" 2>&1 | tail -1;
  python3 -c "import mamba_ssm" 2>&1 | tail -1; python3 -c "import causal_conv1d" 2>&1 | tail -1;
} > $R/kernels.txt 2>&1
{ nvidia-smi; python3 -c "import torch,transformers,peft,sys;print(sys.version);print(torch.__version__,torch.version.cuda,transformers.__version__,peft.__version__)"; date -u; } > $R/env.txt 2>&1
# PARTS (default "sources probe inspect"): what runs besides the cases; a call that only needs
# rows leaves out what an earlier call already brought back.
PARTS=${PARTS:-sources probe inspect}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
has sources && python3 python/family_jobs/measure_families.py $R sources > $R/sources.log 2>&1
# This host's dispatch time per operation, as `trainfit calibrate --host` has the runner measure it
# (the packaged request): `calibrate --host --runner` replays the record here into a profile.
has probe && (cd python && timeout 120 python3 -m trainfit_runner --host-probe trainfit_runner/host_probe_request.json --out $R/host_probe.json > $R/host_probe.log 2>&1)
ip=
if has inspect; then (timeout ${INSPECT_TIMEOUT:-240} python3 python/family_jobs/measure_families.py $R inspect > $R/inspect.log 2>&1) & ip=$!; fi
CASE_TIMEOUT=${CASE_TIMEOUT:-120} timeout ${JOB_TIMEOUT:-470} python3 python/family_jobs/measure_families.py $R run "$@" 2>&1 | tee $R/run.log
[ -n "$ip" ] && wait $ip
cd $R && tar czf $OUT/fam.tar.gz . ; ls -la $OUT
