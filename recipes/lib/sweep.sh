# A sweep of training settings, chosen on the valid set: sourced by recipes/*/sweep.sh after env.sh
# (see docs/howto/lengths.md, "Choose a CPU preset with a sweep").
#
# sweep_main: SWEEP=FILE, one setting a line: NAME<TAB>VAR=VALUE<TAB>VAR=VALUE... (a VALUE may hold
# spaces: MODEL_ARGS=--encoder-layers 2 ...; '#' lines and empty lines skipped). Every line is
# checked before any work. For each line, with its variables set over the recipe's defaults: the
# study's capped training set is prepared (TRAIN_MAX_LEN, default the recipe's STUDY_TRAIN_MAX_LEN;
# settings such as BPE_MERGES prepare their own data folder), ARCH (default the baseline) is trained
# into SWEEP_DIR/NAME and evaluated on the valid set; then one table of all of them on the valid set
# (fairseq-attn-results, the first line as the reference point) in SWEEP_DIR/sweep.{md,json}, with the
# wall time of each line's training and evaluation in SWEEP_DIR/sweep.times.tsv. Runs are resumed and
# skipped as the recipe's train.sh / evaluate.sh do.

sweep_lines() {  # the checked lines of SWEEP, tabs kept
  [[ -n ${SWEEP:-} ]] || die "SWEEP=FILE: give the settings to sweep, one a line: NAME<TAB>VAR=VALUE<TAB>..."
  [[ -f $SWEEP ]] || die "SWEEP=$SWEEP: no such file"
  local line name rest v n=0 seen=" "
  while IFS= read -r line || [[ -n $line ]]; do
    [[ -z ${line//[[:space:]]/} || $line == \#* ]] && continue
    name=${line%%$'\t'*}; rest=${line#"$name"}
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "SWEEP=$SWEEP: '$name' is not a run name (letters, digits, _ . -), then tab-separated VAR=VALUE"
    [[ $seen != *" $name "* ]] || die "SWEEP=$SWEEP: '$name' is given twice"
    seen+="$name "
    local vars=()
    IFS=$'\t' read -r -a vars <<< "${rest#$'\t'}"
    local sets=()
    for v in "${vars[@]}"; do
      [[ $v =~ ^[A-Z][A-Z0-9_]*= ]] || die "SWEEP=$SWEEP: '$v' (line of $name) is not VAR=VALUE"
      sets+=(--set "$v")
    done
    # each line's values as the recipe variables they are (one line naming the variable; SWEEP's line named first)
    local said; said=$("$PYTHON" -m fairseq_attn_recipes.variables sweep prepare train evaluate "${sets[@]}" 2>&1) \
      || die "SWEEP=$SWEEP, line $name: ${said#error: }"
    printf '%s\n' "$line"; n=$((n + 1))
  done < "$SWEEP"
  (( n >= 1 )) || die "SWEEP=$SWEEP: no settings in it"
}

sweep_main() {
  USAGE_EXAMPLE="SWEEP=FILE" no_args "$@"
  check_variables sweep prepare train evaluate
  local lines; lines=$(sweep_lines) || exit 1
  recipe_defaults
  SWEEP_DIR=${SWEEP_DIR:-$WORK/sweep}
  # generation as the study's (lengths.sh): outputs may grow with the source
  GEN_ARGS=${GEN_ARGS:---max-len-a 2 --max-len-b 10}
  mkdir -p "$SWEEP_DIR"
  local names=() runs=() line name v start
  : > "$SWEEP_DIR/sweep.times.tsv.tmp"
  while IFS= read -r line; do
    name=${line%%$'\t'*}
    start=$SECONDS
    (
      local vars=()
      IFS=$'\t' read -r -a vars <<< "${line#"$name"}"
      for v in "${vars[@]}"; do [[ -z $v ]] || export "${v?}"; done
      TRAIN_MAX_LEN=${TRAIN_MAX_LEN:-${STUDY_TRAIN_MAX_LEN:-30}}; export TRAIN_MAX_LEN
      log "sweep $name: ${line#"$name"}"
      prepare_main
      ARCH=${ARCH:-transformer_attn_wmt_en_de}; SAVE_DIR="$SWEEP_DIR/$name"
      train_main
      EVAL_SUBSET=valid evaluate_main
    ) || die "sweep $name failed"
    printf '%s\t%s\t%s\n' "$name" "$((SECONDS - start))" "${line#"$name"$'\t'}" >> "$SWEEP_DIR/sweep.times.tsv.tmp"
    names+=("$name"); runs+=("$SWEEP_DIR/$name")
  done <<< "$lines"
  mv "$SWEEP_DIR/sweep.times.tsv.tmp" "$SWEEP_DIR/sweep.times.tsv"
  if (( ${#runs[@]} >= 2 )); then
    "$PYTHON" -m fairseq_attn_reports.cli.results --ref "$WORK/raw/valid.$TGT" --names "${names[@]}" \
      --bs-samples "${BS_SAMPLES:-1000}" --ar-trials "${AR_TRIALS:-10000}" \
      --md "$SWEEP_DIR/sweep.md" --json "$SWEEP_DIR/sweep.json" "${runs[@]}"
  fi
  log "sweep: $SWEEP_DIR/sweep.md (valid set), times (seconds of training and evaluation): $SWEEP_DIR/sweep.times.tsv"
}
