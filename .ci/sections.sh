# Sourced by the .ci scripts: the time each section takes.
#
#   section "title"    closes the section before (prints "== title (N s)")
#                      and starts this one (prints "== title")
#   sections_table     closes the last section and prints every section's
#                      time and the total; also runs on exit (a failure
#                      shows how far the run got)
_ci_title=
_ci_start=$SECONDS
_ci_rows=()
_ci_closed=
_ci_close() {
    if [ -n "$_ci_title" ]; then
        local s=$((SECONDS - _ci_start))
        echo "== $_ci_title ($s s)"
        _ci_rows+=("$(printf '%6d s  %s' "$s" "$_ci_title")")
        _ci_title=
    fi
}
section() {
    _ci_close
    _ci_title=$1
    _ci_start=$SECONDS
    echo "== $1"
}
sections_table() {
    [ -n "$_ci_closed" ] && return 0
    _ci_closed=1
    _ci_close
    echo "== time per section, ${0##*/} ($SECONDS s in all)"
    [ ${#_ci_rows[@]} -eq 0 ] || printf '%s\n' "${_ci_rows[@]}"
}
