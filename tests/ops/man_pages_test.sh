#!/bin/sh
# Renders the generated man pages with `man -l` and checks what a reader
# looks for: the name line, the options from --help, the hand-written
# sections, every zklock subcommand; and that groff has nothing to warn about.
#   man_pages_test.sh ZKLOCK_PAGE DETECTOR_PAGE
# Exit 77 (skipped) when man is missing or the pages were not built (no help2man).
set -eu
cli_page=$1
detector_page=$2
if ! command -v man >/dev/null 2>&1; then
  echo "SKIPPED: man not found (Debian package man-db)"; exit 77
fi
for p in "$cli_page" "$detector_page"; do
  if [ ! -f "$p" ]; then
    echo "SKIPPED: $p was not built: help2man not found at configure time (Debian package help2man)"; exit 77
  fi
done

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
render() { LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$1" 2>/dev/null | col -b | tr -s "[:blank:]" " "; }
expect() {  # page text needle...
  text=$2
  shift 2
  for needle in "$@"; do
    printf '%s' "$text" | grep -qF -- "$needle" || fail "$page: no '$needle'"
  done
}

for page in "$cli_page" "$detector_page"; do
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings -l "$page" 2>&1 >/dev/null || true)
  [ -z "$warnings" ] || fail "$page: groff warnings: $warnings"
done

page=$cli_page
text=$(render "$page")
expect "$page" "$text" "ZKLOCK(1)" "zklock - inspect zklock lock queues" "SYNOPSIS" "--zk" "--root" "--auth" \
  "EXIT STATUS" "ENVIRONMENT" "ZKLOCK_ZK" "ZKLOCK_AUTH" "ZKLOCK_TOKEN" "FILES" "bash-completion" "vendor-completions/_zklock" \
  "\"complete\": false" "SEE ALSO" "zklock-detector(8)" "75"
for sub in ls queue cycles graph exec revoke revocations doctor; do
  expect "$page" "$text" "zklock $sub"
done
expect "$page" "$text" "--format" "--timeout" "--grace" "--reason" "--min-wait"

page=$detector_page
text=$(render "$page")
expect "$page" "$text" "ZKLOCK-DETECTOR(8)" "zklock-detector - find deadlock cycles" "--metrics-port" "--policy" \
  "--auth-file" "EXIT STATUS" "ENVIRONMENT" "FILES" "/etc/zklock/detector.toml" "zklock-detector.rules.yml" \
  "SEE ALSO" "zklock(1)"

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "man pages render: $cli_page $detector_page"
