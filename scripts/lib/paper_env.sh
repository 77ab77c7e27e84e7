# Sourced by the Stage-1 launchers (sdar/train_sft.sh, wedlm/train.sh, llm_training/{train,eval}.sh): what the
# paper's scripts read from their folder and environment, once.
#
#   source scripts/lib/paper_env.sh; paper_env FOLDER WHO [VAR ...]
#
# FOLDER/.env is read when present (HF_TOKEN, WANDB_API_KEY, ...; copy .env.example), as the paper's scripts
# did. Each VAR (the paper's checkout and venv knobs: SDAR_DIR, WEDLM_DIR, VENV_DIR) that is set gets a
# one-line notice on stderr: this checkout's package and .venv stand in for them.
paper_env() {
  local folder="$1" who="$2" var
  shift 2
  if [ -f "$folder/.env" ]; then
    set -a
    # shellcheck disable=SC1091
    source "$folder/.env"
    set +a
  fi
  for var in "$@"; do
    if [ -n "${!var:-}" ]; then
      echo "$who: notice: $var is not needed here (this checkout's package and .venv stand in for it)" >&2
    fi
  done
  return 0
}
