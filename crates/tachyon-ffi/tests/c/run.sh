#!/usr/bin/env bash
# The C tests of libtachyon: build the library (debug) and the Rust peer,
# compile every C test and example with -std=c11 -Wall -Wextra -Werror,
# run them (each bounded by a timeout), then again the C tests built with
# -fsanitize=address,undefined. Prints one line per test and a closing
# "N passed, M failed"; exits non-zero if anything failed. Nothing is
# skipped: a missing compiler is a failure.
#
#   bash crates/tachyon-ffi/tests/c/run.sh        (from anywhere; .ci/test runs it)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
lib="$target/debug"
out="$target/c-tests"
mkdir -p "$out/plain" "$out/asan"
export RUST_BACKTRACE=0
# Unique names per run, so that runs (and other users of /dev/shm) never meet.
tag="ct$$"

passed=0
failed=0
failures=()
ok() { passed=$((passed + 1)); echo "ok    $1"; }
bad() {
    failed=$((failed + 1)); failures+=("$1"); echo "FAIL  $1"
    [ -f "$2" ] && sed 's/^/      | /' "$2" | tail -40
}

echo "-- building libtachyon and the Rust peer (cargo build -p tachyon-ffi, debug)"
if ! cargo build -q -p tachyon-ffi --lib --example rust_peer; then
    bad "cargo build -p tachyon-ffi" /dev/null
    echo "$passed passed, $failed failed"; exit 1
fi
peer="$lib/examples/rust_peer"

# compile VARIANT NAME SOURCE [extra cc flags...]
compile() {
    local variant=$1 name=$2 src=$3; shift 3
    local log="$out/$variant/$name.build.log"
    if ${CC:-cc} -std=c11 -Wall -Wextra -Werror -O1 -g -I "$root/include" -I "$here" "$@" \
        -o "$out/$variant/$name" "$src" -L "$lib" -ltachyon -lpthread -lm -Wl,-rpath,"$lib" >"$log" 2>&1; then
        return 0
    fi
    bad "compile $variant/$name" "$log"; return 1
}

# run LABEL CMD... : one process, bounded.
run() {
    local label=$1; shift
    local log="$out/${label//[^a-zA-Z0-9_.-]/_}.log"
    if timeout 120 "$@" >"$log" 2>&1; then ok "$label"; else bad "$label (exit $?)" "$log"; fi
}

# pair LABEL "CMD1" "CMD2" : two processes at once, both must succeed.
pair() {
    local label=$1 log="$out/${1//[^a-zA-Z0-9_.-]/_}.log"
    ( timeout 120 $2 & a=$!; timeout 120 $3; b=$?; wait $a; a=$?; [ $a -eq 0 ] && [ $b -eq 0 ] ) >"$log" 2>&1 \
        && ok "$label" || bad "$label" "$log"
}

# suite VARIANT: the C tests of one build.
suite() {
    local v=$1 d="$out/$1"
    [ -x "$d/api" ] && run "$v: api (NULL is TY_EINVAL, panics caught, every form)" "$d/api"
    [ -x "$d/prim" ] && run "$v: prim (ring, buffer, rpc with a C handler)" "$d/prim"
    [ -x "$d/threads" ] && run "$v: threads (8 threads on one topic handle, 8 on one ring handle)" "$d/threads"
    [ -x "$d/interrupt" ] && run "$v: interrupt (a signal handler's ty_interrupt stops blocked calls)" "$d/interrupt"
    [ -x "$d/fork" ] && run "$v: fork (producer child, SIGKILLed loan holder and consumers, recovery)" "$d/fork"
    [ -x "$d/groups" ] && run "$v: groups (two consumer groups of a producer child's topic, each gets all; errors)" "$d/groups"
    if [ -x "$d/readme" ]; then
        local n="$tag-$v-seq"
        run "$v: README snippet, producer exits first (2000 orders)" \
            sh -c "'$d/readme' produce $n 2000 && '$d/readme' consume $n 2000 && '$d/readme' remove $n"
        n="$tag-$v-conc"
        pair "$v: README snippet, producer and consumer at once (100000 orders, rings hold 8192)" \
            "$d/readme consume $n 100000" "$d/readme produce $n 100000"
        run "$v: ty_region_remove leaves nothing in /dev/shm" "$d/readme" remove "$n"
    fi
    if [ -x "$d/snippet" ]; then
        # The snippet verbatim names its region "demo": give it a directory
        # of its own.
        local dir
        dir="$(mktemp -d /dev/shm/tachyon-c-tests.XXXXXX)"
        export TACHYON_SHM_DIR="$dir"
        # The snippet, like the README, never closes its handles: those are
        # leaks by design, not the library's.
        local asan_was="${ASAN_OPTIONS-}"
        [ -n "$asan_was" ] && export ASAN_OPTIONS="${asan_was/detect_leaks=1/detect_leaks=0}"
        run "$v: README snippet verbatim, producer exits first (2000 orders, a consumer process per partition)" \
            sh -c "'$d/snippet' produce 2000 && '$d/snippet' consume 2000"
        run "$v: README snippet verbatim, at once (100000 orders)" \
            sh -c "'$d/snippet' produce 0 && { '$d/snippet' consume 100000 & c=\$!; '$d/snippet' produce 100000 && wait \$c; }"
        run "$v: README snippet verbatim, ty_region_remove(\"demo\") leaves nothing" \
            sh -c "'$d/snippet' remove && [ -z \"\$(ls -A '$dir')\" ]"
        unset TACHYON_SHM_DIR
        [ -n "$asan_was" ] && export ASAN_OPTIONS="$asan_was"
        rm -rf "$dir"
    fi
}

tests=(api prim threads interrupt fork groups readme snippet)
examples=(hello_ipc pingpong multi_partition key_ordering crash_recovery ring rpc rpc_large)

echo "-- C tests and examples (cc -std=c11 -Wall -Wextra -Werror)"
for t in "${tests[@]}"; do compile plain "$t" "$here/$t.c"; done
for e in "${examples[@]}"; do
    [ -f "$root/examples/c/$e.c" ] && compile plain "$e" "$root/examples/c/$e.c"
done
suite plain

echo "-- C <-> Rust on one region"
d="$out/plain"
if [ -x "$d/readme" ]; then
    n="$tag-c2r"
    pair "C producer -> Rust consumer (50000 orders, at once)" "$peer consume $n 50000" "$d/readme produce $n 50000"
    run "  region removed" "$d/readme" remove "$n"
    n="$tag-r2c"
    run "Rust producer -> C consumer (5000 orders, producer exits first)" \
        sh -c "'$peer' produce $n 5000 && '$d/readme' consume $n 5000"
    run "  region removed" "$d/readme" remove "$n"
fi

# examples VARIANT: run the C examples of one build.
examples_run() {
    local v=$1 d="$out/$1"
    for e in "${examples[@]}"; do
        if [ ! -f "$root/examples/c/$e.c" ]; then bad "example $e.c is missing" /dev/null; continue; fi
        [ -x "$d/$e" ] || continue
        case $e in
            pingpong) run "$v: example pingpong 256 2000" "$d/pingpong" 256 2000 ;;
            rpc_large) run "$v: example rpc_large 70000 50" "$d/rpc_large" 70000 50 ;;
            *) run "$v: example $e" "$d/$e" ;;
        esac
    done
}

echo "-- C examples"
examples_run plain

echo "-- built and installed like a C library (cmake, pkg-config, find_package)"
if ! command -v cmake >/dev/null 2>&1; then
    bad "cmake is not installed (.ci/test installs it: apt-get install cmake)" /dev/null
else
    prefix="$out/prefix"
    rm -rf "$out/cmake" "$out/consumer" "$prefix"
    run "cmake -B build && cmake --build build (libtachyon + the C examples) && cmake --install build" sh -c "
        cmake -S '$root' -B '$out/cmake' -DCMAKE_BUILD_TYPE=Debug -DCMAKE_INSTALL_PREFIX='$prefix' &&
        cmake --build '$out/cmake' -j 2 && cmake --install '$out/cmake' &&
        '$out/cmake/hello_ipc' &&
        for f in include/tachyon/tachyon.h lib/libtachyon.so lib/libtachyon.a lib/pkgconfig/tachyon.pc \
                 lib/cmake/tachyon/tachyonConfig.cmake lib/cmake/tachyon/tachyonConfigVersion.cmake; do
            test -f '$prefix'/\$f || { echo \"not installed: \$f\"; exit 1; }
        done"
    pc="env PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config"
    run "pkg-config tachyon: a program built against the installed libtachyon.so and libtachyon.a" sh -c "
        cc -std=c11 -Wall -Wextra -Werror -o '$out/consumer-pc' '$here/consumer/main.c' \$($pc --cflags --libs tachyon) \
            -Wl,-rpath,'$prefix/lib' && '$out/consumer-pc' &&
        cc -std=c11 -Wall -Wextra -Werror -o '$out/consumer-pc-static' '$here/consumer/main.c' \$($pc --cflags tachyon) \
            '$prefix/lib/libtachyon.a' \$($pc --static --libs-only-l tachyon | sed 's/-ltachyon//') &&
        '$out/consumer-pc-static'"
    run "find_package(tachyon): tachyon::tachyon and tachyon::tachyon_static" sh -c "
        cmake -S '$here/consumer' -B '$out/consumer' -DCMAKE_PREFIX_PATH='$prefix' &&
        cmake --build '$out/consumer' && '$out/consumer/consumer_shared' && '$out/consumer/consumer_static'"
fi

echo "-- the C tests and examples again, with -fsanitize=address,undefined"
san=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
for t in "${tests[@]}"; do compile asan "$t" "$here/$t.c" "${san[@]}"; done
for e in "${examples[@]}"; do
    [ -f "$root/examples/c/$e.c" ] && compile asan "$e" "$root/examples/c/$e.c" "${san[@]}"
done
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=86:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
suite asan
examples_run asan
unset ASAN_OPTIONS UBSAN_OPTIONS

# A test that failed half-way leaves its segments behind: remove those of
# the C tests' own names whose process is gone.
for f in /dev/shm/tachyon.u"$(id -u)".*; do
    if [[ ${f##*/} =~ ^tachyon\.u[0-9]+\.(c-[a-z-]+|hello-ipc)-([0-9]+) ]] &&
        ! kill -0 "${BASH_REMATCH[2]}" 2>/dev/null; then
        rm -f "$f"
    fi
done

echo
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
