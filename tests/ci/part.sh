#!/usr/bin/env bash
# tests/ci/part.sh NAME CMD...: runs CMD and appends "NAME<TAB>seconds<TAB>exit status" to
# target/test-parts.tsv, so `make test` leaves the time of each part and .ci/run prints them.
name=$1; shift
mkdir -p target
start=$(date +%s)
"$@"; rc=$?
printf '%s\t%s\t%s\n' "$name" $(( $(date +%s) - start )) "$rc" >> target/test-parts.tsv
exit $rc
