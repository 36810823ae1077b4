# Sourced by the shell benchmarks: a release Quiver on loopback ports, in a temporary data
# directory removed (with the server stopped) when the script exits.
#
#   source scripts/quiver-server.sh
#   quiver_start 18386 [QUIVER_SETTING=value ...]   # HTTP on the port, Flight SQL and
#                                                   # PostgreSQL on the two below it
#   ... "http://$QUIVER" ...
#   quiver_stop
#   quiver_start_two A_DIR B_DIR 18586                # two builds side by side: $a_url, $b_url
#
# BIN is the release directory ($CARGO_TARGET_DIR/release, else ./target/release); the
# server is $quiver_binary (default $BIN/quiver) on the data directory $quiver_data (default
# $work/quiver), so a script comparing builds sets them per start; the server's log is
# $work/quiver.log (its tail is printed if it does not start).
BIN=${CARGO_TARGET_DIR:-./target}/release
work=$(mktemp -d)
quiver_pid=
_quiver_cleanup() {
    [[ -n "$quiver_pid" ]] && kill "$quiver_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap _quiver_cleanup EXIT

quiver_start() {
    local port=$1
    shift
    QUIVER=127.0.0.1:$port
    env QUIVER_LOG_FILTER=warn "$@" \
        "${quiver_binary:-$BIN/quiver}" serve --data-dir "${quiver_data:-$work/quiver}" \
        --http-addr "$QUIVER" \
        --flight-addr "127.0.0.1:$((port - 1))" --pg-addr "127.0.0.1:$((port - 2))" \
        2>>"$work/quiver.log" &
    quiver_pid=$!
    for _ in $(seq 300); do curl -sf "http://$QUIVER/health" >/dev/null && return 0; sleep 0.1; done
    echo "no answer from Quiver on $QUIVER" >&2
    tail -50 "$work/quiver.log" >&2
    exit 1
}

quiver_stop() {
    kill "$quiver_pid"
    wait "$quiver_pid" 2>/dev/null || true
    quiver_pid=
}

# Two builds side by side, each on its own data directory and its defaults: the `quiver` of
# $1 with HTTP on port $3, the `quiver` of $2 on $3 + 10; sets a_url and b_url, and stops the
# first as well when the script exits (the second is quiver_start's own).
quiver_start_two() {
    quiver_binary=$1/quiver quiver_data=$work/a quiver_start "$3"
    a_pid=$quiver_pid a_url=http://$QUIVER
    quiver_binary=$2/quiver quiver_data=$work/b quiver_start "$(($3 + 10))"
    b_url=http://$QUIVER
    trap 'kill $a_pid 2>/dev/null; _quiver_cleanup' EXIT
}
