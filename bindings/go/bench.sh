#!/usr/bin/env bash
# The Go face measured next to C and the kernel, in one run:
#
#   * round trips between two processes, SIZE bytes: the C pingpong
#     (examples/c/pingpong.c), the Go pingpong (examples/go/pingpong) and a
#     Go net.UnixConn stream (bench/unixpingpong), alternating, REPS times
#     each, for each waiting policy; the median of the p50s and of the p99s;
#   * the cost of the boundary: a bare cgo call, a trivial ty_ call, and a
#     loan + publish + receive + release in one process from Go (go test
#     -bench) against the same from C (crates/tachyon-ffi/tests/c/cost.c).
#
#   bash bindings/go/bench.sh [SIZE [COUNT [REPS [POLICIES]]]]
#        (defaults 256 20000 5 "hybrid spin"; docs/go.md reports a run)
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE=${1:-256}
COUNT=${2:-20000}
REPS=${3:-5}
POLICIES=${4:-hybrid spin}
export GOPROXY=off GOFLAGS=-buildvcs=false

OUT=$(mktemp -d /tmp/tachyon-go-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
echo "== build (release libtachyon, cc -O2, go build)"
cargo build -q --release -p tachyon-ffi
LIB=$PWD/target/release
cc -std=c11 -O2 -I include -o "$OUT/pingpong-c" examples/c/pingpong.c -L "$LIB" -ltachyon -Wl,-rpath,"$LIB"
cc -std=c11 -O2 -I include -o "$OUT/cost-c" crates/tachyon-ffi/tests/c/cost.c -L "$LIB" -ltachyon -Wl,-rpath,"$LIB"
(cd examples/go && go build -o "$OUT/pingpong-go" ./pingpong)
(cd bindings/go && go build -o "$OUT/pingpong-unix" ./bench/unixpingpong)

echo "== machine"
lscpu | grep 'Model name' || true
echo "CPUs: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg), $(go version)"

# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2)}'; }
field() { grep -o "$1 [0-9]*" | awk '{print $2}'; }

echo "== round trips, $SIZE bytes, $COUNT rounds (+1000 warm-up), $REPS runs each, alternating"
for policy in $POLICIES; do
    : >"$OUT/c.$policy"; : >"$OUT/go.$policy"; : >"$OUT/unix"
    for _ in $(seq "$REPS"); do
        "$OUT/pingpong-c" "$SIZE" "$COUNT" "$policy" | grep 'p50' >>"$OUT/c.$policy"
        "$OUT/pingpong-go" "$SIZE" "$COUNT" "$policy" | grep 'p50' >>"$OUT/go.$policy"
        "$OUT/pingpong-unix" "$SIZE" "$COUNT" | grep 'p50' >>"$OUT/unix"
    done
    for who in c go; do
        f="$OUT/$who.$policy"
        printf '%-24s p50s: %s\n' "$who ($policy)" "$(field p50 <"$f" | tr '\n' ' ')"
        printf '%-24s median p50 %s ns, median p99 %s ns\n' "" "$(field p50 <"$f" | median)" "$(field p99 <"$f" | median)"
    done
    printf '%-24s p50s: %s\n' "go net.UnixConn" "$(field p50 <"$OUT/unix" | tr '\n' ' ')"
    printf '%-24s median p50 %s ns, median p99 %s ns\n' "" "$(field p50 <"$OUT/unix" | median)" "$(field p99 <"$OUT/unix" | median)"
done

echo "== the boundary: one process, no waiting; C and Go alternating, $REPS times"
(cd bindings/go && go test -c -o "$OUT/tachyon.test" .)
for _ in $(seq "$REPS"); do
    "$OUT/cost-c" 1000000 | tee -a "$OUT/cost" | sed 's/^/  /'
    (cd bindings/go && "$OUT/tachyon.test" -test.run '^$' -test.bench . -test.benchmem \
        -test.benchtime 1000000x) | grep '^Benchmark' | tee -a "$OUT/gobench" | sed 's/^/  /'
done
echo "C median: $(grep -o '[0-9.]* ns' "$OUT/cost" | awk '{print $1}' | median) ns per message (loan, publish, subscribe, release)"
for b in CgoNop PartitionOf Message SendReceive; do
    echo "Go $b median: $(grep "^Benchmark$b-" "$OUT/gobench" | awk '{print int($3)}' | median) ns/op"
done
