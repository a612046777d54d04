#!/usr/bin/env zsh -f
# Completes command lines in a real interactive zsh, the way a user's TAB
# does, and prints what the completion system would offer.
#
#   zsh -f tests/ops/zsh_complete.zsh COMPLETION_DIR 'zklock ' 'zklock exec x --' ...
#
# For each LINE: an interactive `zsh -f -i` in a pseudo-terminal (zsh/zpty)
# with COMPLETION_DIR first in fpath and compinit loaded; LINE is typed and
# TAB pressed. A compadd wrapper records each match instead of adding it
# (the technique of zsh-capture-completion; a compadd called with -O, -A
# or -D is a completion function's own query and passes through). The
# markers are spelled split in the setup so that its echo cannot match.
# The output is
#   @@ N         then the N matches, one a line (a suffix given with -S is kept)
# per LINE. Exits non-zero if a LINE gave no @@ block (zsh did not complete).
emulate -L zsh
zmodload zsh/zpty || { print -u2 "zsh_complete: no zsh/zpty module"; exit 2 }
dir=${1:?usage: zsh_complete.zsh COMPLETION_DIR LINE...}
shift

setup=$(cat <<EOF
PS1='' PROMPT='' RPROMPT=''
unsetopt zle_bracketed_paste 2>/dev/null
fpath=(${(q)dir} \$fpath)
autoload -U compinit && compinit -u -D
bindkey '^I' complete-word
compadd() {
  if [[ \${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "\$@"; return; fi
  local -a __hits __sfx
  builtin compadd -A __hits "\$@"
  zparseopts -E -a __sfx S:
  local s=\${__sfx[2]-}
  local h
  for h in "\${__hits[@]}"; do print -r -- "@@"hit "\$h\$s"; done
  builtin compadd "\$@"
}
_zc_begin() { print -r -- '@@'begin }
_zc_end() { print -r -- '@@'end; exit }
compprefuncs=(_zc_begin)
comppostfuncs=(_zc_end)
EOF
)

rc=0
for line in "$@"; do
  zpty zc 'zsh -f -i'
  zpty -w zc "$setup"
  zpty -w -n zc "$line"$'\t'
  out=''
  # Up to 30 s per line (a lock-path read has a 1 s connect timeout).
  for ((i = 0; i < 3000; i++)); do
    if zpty -rt zc chunk; then out+=$chunk; else sleep 0.01; fi
    [[ $out == *@@end* ]] && break
  done
  zpty -d zc
  out=${out//$'\r'/}
  [[ -n ${ZC_DEBUG-} ]] && print -r -- "$out" >>$ZC_DEBUG  # ZC_DEBUG=FILE: what the shell said
  if [[ $out != *@@begin*@@end* ]]; then
    print -u2 -r -- "zsh_complete: no completion for '$line'; the shell said: $out"
    rc=1
    print -r -- "@@ 0"
    continue
  fi
  out=${${out##*@@begin}%%@@end*}
  hits=(${(u)${(M)${(f)out}:#@@hit *}#@@hit })
  print -r -- "@@ ${#hits}"
  (( ${#hits} )) && print -rl -- "${hits[@]}"
done
exit $rc
