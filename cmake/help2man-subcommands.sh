#!/bin/sh
# Writes a help2man include file with a SUBCOMMANDS section: the --help of
# every subcommand that `BINARY --help` lists, as preformatted text.
#   help2man-subcommands.sh BINARY OUTPUT
set -eu
bin=$1
out=$2
subs=$("$bin" --help | awk '/^[A-Za-z][A-Za-z ]*:$/ { s = $0; next } s == "Subcommands:" && /^  [a-z]/ { print $1 }')
name=$(basename "$bin")
{
  echo "[SUBCOMMANDS]"
  for s in $subs; do
    echo ".SS \"$name $s\""
    echo ".nf"
    # roff: backslashes escaped; a leading '.' or quote must not start a request.
    "$bin" "$s" --help | awk '/^Exit codes:$/ { exit } { print }' |
      sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
    echo ".fi"
  done
} >"$out.tmp"
mv "$out.tmp" "$out"
