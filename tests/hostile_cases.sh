#!/usr/bin/env bash
# Replays directed hostile inputs against every subcommand of the binary: each
# case must end with its expected exit code (2: bad input, named in stderr),
# never a signal, a hang (30 s), an internal error (exit 3) or exit 0 with a
# wrong result.
# Usage: hostile_cases.sh TRAINSIM SOURCE_DIR WORK_DIR
set -uo pipefail
trainsim=$1
src=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
cd "$work" || exit 1
scenario=$src/scenarios/examples/llama3-70b-64xh100.json
failures=0
cases=0

# expect CODE NEEDLE ARGS...: exit CODE and NEEDLE in stderr+stdout.
expect() {
  local code=$1 needle=$2
  shift 2
  cases=$((cases + 1))
  local out rc
  out=$(timeout "${TRAINSIM_HOSTILE_TIMEOUT:-120}" "$trainsim" "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
    failures=$((failures + 1))
    echo "FAIL (exit $rc, expected $code and \"$needle\"): trainsim $*"
    head -c 600 <<<"$out"
    echo
  fi
}

# Scenario text variants of the shipped example.
variant() {  # NAME SED-EXPRESSION
  sed "$2" "$scenario" >"$1"
}
variant big-number.json 's/"global_batch": 128/"global_batch": 1e400/'
variant wrapped-int.json 's/"tp": 8/"tp": 4294967304/'
variant uint64.json 's/"tp": 8/"tp": 18446744073709551615/'
variant duplicate.json 's/"tp": 8,/"tp": 8, "tp": 4,/'
variant stage-layers.json 's/"micro_batch": 1,/"micro_batch": 1, "stage_layers": [4294967316, 20, 20, 20],/'
variant neg-zero.json 's/"nodes": 8/"nodes": -0/'
variant commented.json 's/^  "model"/  \/\/ the model\n  "model"/'
variant bad-unit.json 's/"cluster": {"node": "dgx-h100", "nodes": 8}/"cluster": {"node": "dgx-h100", "nodes": 8, "fabric": {"link_latency": "1e308s"}}/'
printf '[%.0s' $(seq 1 5000) >deep.json
printf '{"model": "llama3-70b", "name": "\xff"}' >bad-utf8.json
: >empty.json
printf '\xef\xbb\xbf{}' >bom.json
head -c 3000 /dev/urandom >random.bin
mkfifo fifo.json
mkdir dir.json

expect 2 "/parallel/global_batch: number beyond the range of a double" check big-number.json
expect 2 "found 4294967304" check wrapped-int.json
expect 2 "found 18446744073709551615" check uint64.json
expect 2 "/parallel/tp: duplicate key" check duplicate.json
expect 2 "/parallel/stage_layers" check stage-layers.json
expect 2 "/cluster/nodes" check neg-zero.json
expect 0 "ok:" check commented.json
expect 2 "link_latency" check bad-unit.json
expect 2 "nested deeper than" check deep.json
expect 2 "malformed JSON" check bad-utf8.json
expect 2 "malformed JSON" check empty.json
expect 2 "bom.json" check bom.json
expect 2 "malformed JSON" check random.bin
expect 2 "not a regular file" check fifo.json
expect 2 "is a directory" check dir.json
expect 2 "not a regular file" run /dev/zero
expect 2 "cannot open the scenario file" run no-such-file.json
for s in "parallel.global_batch=1e400" "parallel.tp=-1e999" 'parallel={"tp":1,"tp":2}' "parallel.tp=1e30" \
         "parallel.micro_batch=1073741824" "cluster.nodes=1048576" "training.seq_len=0" "name=$(printf '\xff')"; do
  expect 2 "error:" check "$scenario" --set "$s"
done

# Sizes: bounded at load, or refused with the clock's limit, never a hang or a wrapped time.
cat >clock.json <<'JSON'
{"model": {"name": "huge", "layers": 2, "hidden": 1048576, "heads": 64, "ffn_hidden": 4194304, "vocab": 16777216,
           "max_seq_len": 16777216},
 "cluster": {"node": "dgx-a100", "nodes": 1},
 "parallel": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1073741824, "global_batch": 1073741824},
 "training": {"seq_len": 16777216}}
JSON
expect 1 "refused before simulation" run clock.json
expect 1 "clock can count" run clock.json --ignore-memory
# A job the memory model knows cannot fit is reported before simulation, at flow fidelity too.
expect 1 "refused before simulation" run "$scenario" --fidelity flow --set parallel.pp=1 --set cluster.nodes=2
expect 2 "micro-batches" run "$scenario" --set parallel.global_batch=1073741824
expect 2 "at most 1048576 are simulated" run "$scenario" --set cluster.nodes=1048576

# Outputs.
expect 2 "names the input scenario" run "$scenario" --out "$scenario"
expect 2 "name the same file" run "$scenario" --out same.json --trace same.json
expect 2 "cannot write the file" run "$scenario" --out no-dir/out.json
expect 2 "is a directory" run "$scenario" --report dir.json
[ -e /dev/full ] && expect 2 "/dev/full" run "$scenario" --out /dev/full
expect 0 "tokens/s" run "$scenario" --out ok.json
ls ./*.tmp.* >/dev/null 2>&1 && { echo "FAIL: a temporary output file was left behind"; failures=$((failures + 1)); }

# Sweeps and their merge.
printf '{"base": "%s", "axes": {"parallel.tp": {"range": [1, 1e400]}}}' "$scenario" >sweep-big.json
printf '{"base": "%s", "axes": {"parallel.tp": [0, 3]}}' "$scenario" >sweep-invalid.json
printf '{"index": 0, "sweep": "x", "points": 1, "status": "ok", "fidelity": "analytical", "error": ""}\n' >row-missing.jsonl
printf '{"index": 0, "sweep": "x", "points": 1, "status": 7}\n' >row-type.jsonl
expect 2 "number beyond the range" sweep sweep-big.json
expect 2 "none of the 2 points is a valid scenario" sweep sweep-invalid.json
expect 2 "not a regular file" sweep fifo.json
expect 2 "line 1" sweep merge row-missing.jsonl --out merged.jsonl
expect 2 "line 1" sweep merge row-type.jsonl --out merged.jsonl
expect 2 "names the input shard output" sweep merge row-type.jsonl --out row-type.jsonl
expect 2 "not a regular file" sweep merge fifo.json --out merged.jsonl

# Calibration, validation and regression inputs.
expect 2 "not a regular file" calibrate fit fifo.json -o p.json
expect 2 "malformed JSON" calibrate fit random.bin -o p.json
expect 2 "not a regular file" calibrate report fifo.json
expect 2 "not a regular file" validate fifo.json
expect 2 "is a directory" regress "$src/scenarios/regression" --golden dir.json
expect 1 "missing" regress "$src/scenarios/regression" --golden no-golden.json
# From a directory that is not the repository: the built-in regression set and validation set.
expect 0 "tolerance" regress
expect 2 "run it from the repository root" regress --update
expect 0 "MAPE" validate

echo "$cases hostile cases, $failures failed"
[ "$failures" -eq 0 ]
