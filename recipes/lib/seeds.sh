# Several seeds per run: sourced by recipes/*/{train,evaluate}.sh after env.sh.
#
# for_each_seed MAIN ARGS...: without SEEDS, run MAIN once (SEED, default 1; run folder
# $WORK/runs/$ARCH, as before). With SEEDS="1 2 3", run MAIN once per seed, each in its own
# subshell with SEED=<n> and the run folder $WORK/runs/${ARCH}_seed<n> (or ${SAVE_DIR}_seed<n>
# when SAVE_DIR is given): every seed resumes from its own checkpoint_last.pt, and a failing
# seed stops the loop (re-run to resume; the seeds done before are resumed/skipped by fairseq).

check_seeds() {  # SEEDS (and SEED beside it), refused in one line
  [[ -n "${SEEDS:-}" ]] || return 0
  [[ -z "${SEED:-}" ]] || die "SEED=$SEED and SEEDS=\"$SEEDS\": set one of them (SEEDS runs one training per seed)"
  local s seen=" "
  for s in $SEEDS; do
    [[ $s =~ ^[0-9]+$ ]] || die "SEEDS=\"$SEEDS\": '$s' is not a non-negative integer"
    [[ $seen != *" $s "* ]] || die "SEEDS=\"$SEEDS\": seed $s is given twice"
    seen+="$s "
  done
}

for_each_seed() {
  local main=$1; shift
  if [[ -z "${SEEDS:-}" ]]; then "$main" "$@"; return; fi
  check_seeds
  local s
  for s in $SEEDS; do with_seed "$s" "$main" "$@"; done
}

with_seed() {  # with_seed N MAIN ARGS...: MAIN as seed N of SEEDS (its SEED and run folder, as above)
  local s=$1 main=$2; shift 2
  log "seed $s of: $SEEDS"
  # a subshell per seed (the defaults MAIN derives stay per seed); no '|| ...' after it,
  # which would switch off 'set -e' inside MAIN: a failing seed exits through set -e
  (
    SEED=$s
    if [[ -n "${SAVE_DIR:-}" ]]; then SAVE_DIR="${SAVE_DIR%/}_seed$s"; else RUN_SUFFIX="_seed$s"; fi
    "$main" "$@"
  )
}
