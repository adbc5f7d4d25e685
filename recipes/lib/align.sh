# align_main: attention as alignment for the runs of a WORK (see docs/howto/alignment.md). For each evaluated
# run of WORK (or RUNS="dir dir ..."; the first is the baseline): fairseq-attn-align RUN (AER of every
# decoder layer's cross-attention, naive and Shift-Att, against the gold of the run's data folder;
# RUN/align/aer.json), eflomal once on the baseline's data (WORK/align_eflomal), then the results table
# with an AER column (WORK/align.md). A run aligned before is kept (ALIGN_REDO=1 redoes it); PER_HEAD=1:
# every head too. Needs a corpus whose data folders hold gold alignments (raw/{valid,test}.align).
align_main() {
  USAGE_EXAMPLE="RUNS=..." no_args "$@"  # settings: RUNS, ALIGN_REDO, PER_HEAD, BS_SAMPLES, AR_TRIALS
  check_variables align
  recipe_defaults
  local d run data yes extra runs
  if [[ -z ${RUNS:-} ]]; then
    RUNS=""
    for d in "$WORK"/runs/*/; do [[ -f $d/test/scores.json ]] && RUNS+=" ${d%/}"; done
  fi
  read -r -a runs <<< "$RUNS"
  (( ${#runs[@]} >= 1 )) || die "no evaluated run in $WORK/runs (train.sh and evaluate.sh first, or RUNS=...)"
  extra=(); [[ ${PER_HEAD:-0} == 1 ]] && extra+=(--per-head)
  for run in "${runs[@]}"; do
    if [[ -f $run/align/aer.json && ${ALIGN_REDO:-0} != 1 ]]; then log "aligned before: $run/align (ALIGN_REDO=1 redoes it)"; continue; fi
    yes=(); [[ -e $run/align ]] && yes=(--yes)
    log "aligning $run"
    "$PYTHON" -m fairseq_attn_reports.cli.align "$run" "${yes[@]}" "${extra[@]}" || exit 1
  done
  data=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1] + "/align/aer.json"))["data"])' "${runs[0]}")
  if [[ ! -f $WORK/align_eflomal/aer.json || ${ALIGN_REDO:-0} == 1 ]]; then
    yes=(); [[ -e $WORK/align_eflomal ]] && yes=(--yes)
    log "eflomal on $data"
    "$PYTHON" -m fairseq_attn_reports.cli.align --eflomal --data "$data" --out "$WORK/align_eflomal" "${yes[@]}" || exit 1
  fi
  if (( ${#runs[@]} >= 2 )); then
    "$PYTHON" -m fairseq_attn_reports.cli.results --ref "$data/raw/test.$TGT" "${runs[@]}" --align \
      --bs-samples "${BS_SAMPLES:-1000}" --ar-trials "${AR_TRIALS:-10000}" --md "$WORK/align.md" || exit 1
    log "table: $WORK/align.md; per run: RUN/align/aer.json; eflomal: $WORK/align_eflomal/aer.json"
  fi
}
