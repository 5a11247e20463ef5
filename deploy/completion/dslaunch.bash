# bash completion for dslaunch and its tools (dsagent, dsrank, dsprep,
# dstokenize, dsgen, dsserve, dsconsolidate, dscomm_bench). Installed as
# share/bash-completion/completions/<tool>; to try it from a checkout:
#   source deploy/completion/dslaunch.bash
#
# The options come from the tool's own --help at completion time, so this file
# never lists them and cannot drift from the binaries. After an option that
# takes a value the shell completes file names (a few values are listed);
# dslaunch's first word may also be a subcommand, and everything from the
# program on is the program's.

# "--name" or "--name METAVAR" for every option `"$@" --help` lists.
_dslaunch_tool_options() {
  "$@" --help 2>&1 | sed -nE 's/^ +(-[a-zA-Z], )?(--[a-z0-9_]+)( [A-Z][^ ]*)?  .*/\2\3/p'
}

_dslaunch_complete() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  local tool=(${COMP_WORDS[0]})
  local options
  options=$(_dslaunch_tool_options "${tool[@]}")
  local first=1 i word
  # dslaunch: a subcommand, or the program after the options (its arguments are its own).
  if [[ ${COMP_WORDS[0]##*/} == dslaunch ]]; then
    for ((i = 1; i < COMP_CWORD; i++)); do
      word=${COMP_WORDS[i]}
      if [[ $word == -- ]]; then
        COMPREPLY=()  # the program and its arguments: file names (complete -o default)
        return 0
      elif [[ $word == -* ]]; then
        # An option with a value takes the next word, unless given as --name=value.
        [[ $word != *=* ]] && grep -qxE -- "${word} .*" <<<"$options" && ((i++))
      elif ((first)) && [[ $word =~ ^(status|estimate|plot|report)$ ]]; then
        tool+=("$word")
        options=$(_dslaunch_tool_options "${tool[@]}")
        first=0
      else
        COMPREPLY=()  # past the program: its own arguments
        return 0
      fi
    done
  fi
  if [[ $prev == -* && $cur != -* ]] && grep -qxE -- "${prev} .*" <<<"$options"; then
    case $prev in
      --launcher) COMPREPLY=($(compgen -W "local ssh slurm static" -- "$cur")) ;;
      *) COMPREPLY=() ;;  # a value: file names, or nothing to offer
    esac
    return 0
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(cut -d' ' -f1 <<<"$options")" -- "$cur"))
  elif [[ ${COMP_WORDS[0]##*/} == dslaunch && ${#tool[@]} -eq 1 ]]; then
    COMPREPLY=($(compgen -W "status estimate plot report" -- "$cur"))
  else
    COMPREPLY=()
  fi
}

complete -o default -F _dslaunch_complete dslaunch dsagent dsrank dsprep dstokenize dsgen dsserve dsconsolidate dscomm_bench
