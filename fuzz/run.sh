#!/bin/sh
# Run one libFuzzer driver for a time budget over its checked-in seed corpus
# and print one line: executions, executions per second, inputs added. The
# driver's output goes to fuzz/build/NAME.log. New inputs are kept in
# fuzz/build/NAME.corpus (seeds are only read). A crash, a sanitizer report
# or an input slower than 5 s fails the run: the end of the log is printed,
# and the input is left in fuzz/build/artifacts/ to be added to the seed
# corpus and to a regression test.
#
# usage: fuzz/run.sh BINARY SECONDS SEED_DIR [libFuzzer flags...]
set -u
bin=$1
secs=$2
seeds=$3
shift 3
name=$(basename "$bin")
work=fuzz/build/$name.corpus
log=fuzz/build/$name.log
mkdir -p "$work" fuzz/build/artifacts

"$bin" -max_total_time="$secs" -timeout=5 -print_final_stats=1 -artifact_prefix=fuzz/build/artifacts/ "$@" \
    "$work" "$seeds" >"$log" 2>&1
rc=$?

stat() {
    sed -n "s/^stat::$1: *//p" "$log" | tail -1
}
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
added=$(stat new_units_added)
echo "$name: ${execs:-?} executions in ${secs} s (${rate:-?}/s), ${added:-?} inputs added," \
    "$(ls "$seeds" | wc -l) seeds, exit status $rc"
if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "$name: FAILED; the input is in fuzz/build/artifacts/:"
    ls -l fuzz/build/artifacts/
fi
exit "$rc"
