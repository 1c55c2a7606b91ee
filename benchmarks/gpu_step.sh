# Sourced by the GPU scripts (gpu_session.sh, gpu_models.sh): one step of a device call.
# step NAME SECONDS COMMAND...: run COMMAND with a time limit, log to $OUT/NAME.txt, print its
# last lines, and keep going, so one slow step cannot eat the call's other steps.
step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s${STEP_TIMEOUT_HINT:-}" >>"$OUT/$name.txt"
    echo "   rc=$rc in $((SECONDS - start))s; last lines:"
    tail -n 4 "$OUT/$name.txt" | sed 's/^/   /'
}
