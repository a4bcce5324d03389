# One device call: the environment, the modeling sources read, inspect (meta device, in the
# background) and the runner cases given as arguments, one after another; all in $OUT/fam.tar.gz.
set -x
R=/tmp/fam; mkdir -p $R
{ nvidia-smi; python3 -c "import torch,transformers,peft,sys;print(sys.version);print(torch.__version__,torch.version.cuda,transformers.__version__,peft.__version__)"; date -u; } > $R/env.txt 2>&1
python3 python/family_jobs/measure_families.py $R sources > $R/sources.log 2>&1
(timeout ${INSPECT_TIMEOUT:-240} python3 python/family_jobs/measure_families.py $R inspect > $R/inspect.log 2>&1) & ip=$!
CASE_TIMEOUT=120 timeout ${JOB_TIMEOUT:-470} python3 python/family_jobs/measure_families.py $R run "$@" 2>&1 | tee $R/run.log
wait $ip
cd $R && tar czf $OUT/fam.tar.gz . ; ls -la $OUT
