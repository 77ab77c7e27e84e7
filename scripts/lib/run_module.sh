# Sourced by the shell launchers (scripts/lib/agent_{sft,grpo}.sh, llm_training/{train,eval}.sh): run one of
# textwm's launcher modules with this checkout's Python.
#
#   run_module ROOT MODULE [FLAG ...] -- [ARG ...]
#
# TEXTWM_ROOT (where default paths resolve) defaults to ROOT; PYTHON overrides the interpreter (default: ROOT's
# .venv/bin/python when there, else python3). A first ARG --print-command becomes a flag (the line, not run); the
# other ARGs follow `--` (extra arguments of the swift line).
run_module() {
  local root=$1 module=$2 python=python3
  shift 2
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  if [ "${1:-}" = "--print-command" ]; then flags+=(--print-command); shift; fi
  export TEXTWM_ROOT="${TEXTWM_ROOT:-$root}"
  [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
  exec "${PYTHON:-$python}" -m "$module" "${flags[@]}" -- "$@"
}
