# The CSAN paper's Table 1 and Figures 2-3 (Yang et al., 2019) on a prepared
# data-bin: sourced after a recipe's env.sh by recipes/*/{table1,figure2,figure3}.sh.
#
# Each run is an ordinary train.sh + evaluate.sh run (same settings, same
# variables, see docs/reference/variables.md) in its own SAVE_DIR; a run whose SUBSET/scores.json
# exists is reused, an interrupted one resumes from its checkpoint_last.pt.
# The rows come from fairseq_attn_reports/table1.py (ROWS=all or a list of
# row keys); rendering and plotting is fairseq-attn-paper.
#
# SEEDS="1 2 3": every run trained per seed (<run>_seed<N>, seeds outermost: a study stopped part-way
# has every row at its first seeds); the table shows mean ± sample std over seeds and marks a row only
# when every seed pair against the baseline is significant (fairseq_attn_reports/seeds.py).
# CONVERGE=P, CURVE=U1,U2,...: as the length study (recipes/lib/converge.sh): every run trains until its
# validation loss has not improved for P validations (at most MAX_UPDATE updates), its own folder
# (TABLE1_DIR=WORK/table1_converge<P>, FIGURE2_DIR=WORK/figure2_converge<P>); the checkpoints of the
# updates of CURVE kept and evaluated (curve.md, curve.json, curve_<run>.png). Either way the table's
# "Training length" says every run's updates and what stopped it (patience or the cap).
# Several processes may share a study (each run's .study.lock; the tables wait for the runs).
#
# QUICK=1: tiny CPU sizes (the profile paper-quick of fairseq_attn_recipes/profiles.py: a 3+1-layer,
# 32-dim model, a few updates) for smoke runs and CI; every variable below still overrides it.
. "$(dirname "${BASH_SOURCE[0]}")/seeds.sh"
. "$(dirname "${BASH_SOURCE[0]}")/converge.sh"

PAPER=("$PYTHON" -m fairseq_attn_reports.cli.paper)

paper_quick_defaults() {
  [[ ${QUICK:-0} == 1 ]] || return 0
  profile paper-quick --export  # tiny CPU sizes (profiles.py), each still overridable
}

# paper_settings DIR: refuse to mix runs made with other settings in DIR
paper_settings() {
  local dir=$1 now
  now=$(printf '%s\n' "DATA=$DATA" "MODEL_ARGS=${MODEL_ARGS:-}" "EXTRA_ARGS=${EXTRA_ARGS:-}" \
    "MAX_UPDATE=${MAX_UPDATE:-}" "MAX_TOKENS=${MAX_TOKENS:-}" "LR=${LR:-}" "DROPOUT=${DROPOUT:-}" \
    "WARMUP=${WARMUP:-}" "SEED=${SEED:-}" "UPDATE_FREQ=${UPDATE_FREQ:-}" "PAPER_GPUS=${PAPER_GPUS:-}" \
    "FP16=${FP16:-}" "N_AVG=${N_AVG:-}" "BEAM=${BEAM:-}" "LENPEN=${LENPEN:-}" ${CONVERGE:+"CONVERGE=$CONVERGE"})
  mkdir -p "$dir"
  if [[ -f "$dir/settings.txt" ]]; then
    [[ "$(cat "$dir/settings.txt")" == "$now" ]] || die "$dir holds runs made with other settings \
($dir/settings.txt; now: $(echo "$now" | tr '\n' ' ')). Use another directory or delete it."
  else
    echo "$now" > "$dir/settings.txt.tmp" && mv "$dir/settings.txt.tmp" "$dir/settings.txt"
  fi
}

paper_check_data() {
  [[ -e "$WORK/.done/binarise" && -f "$DATA/dict.$SRC.txt" ]] || die "no binarised data in $DATA: run prepare.sh first"
}

# paper_study_start ARCH: SEEDS, CONVERGE and CURVE checked (against ARCH's profile) before any work
paper_study_start() {
  check_seeds
  check_converge_curve "$1"
  [[ -z ${CONVERGE:-} ]] || log "CONVERGE=$CONVERGE: each run trains until its validation loss has not improved for $CONVERGE validations (one every $VALIDATE_INTERVAL_UPDATES updates), at most MAX_UPDATE=$CURVE_CAP updates (the cap)"
  [[ -z ${CURVE:-} ]] || log "CURVE=$CURVE: the checkpoints of these updates are kept and evaluated"
}

# paper_runs SUBSET LABEL|ARCH|DIR|EXTRA_ARGS...: train and evaluate (on SUBSET) every run, each seed of
# SEEDS in DIR_seed<N>, seeds outermost
paper_runs() {
  local subset=$1; shift
  local seeds=(${SEEDS:-}) seed spec label arch dir extra
  (( ${#seeds[@]} )) || seeds=("")
  for seed in "${seeds[@]}"; do
    for spec in "$@"; do
      IFS='|' read -r label arch dir extra <<< "$spec"
      EVAL_SUBSET=$subset paper_run "$label${seed:+ seed $seed}" "$arch" "$dir${seed:+_seed$seed}" "$seed" $extra
    done
  done
}

# paper_run NAME ARCH SAVE_DIR SEED [EXTRA_ARGS...]: train + evaluate one run unless finished (with
# CURVE: its checkpoint of each update evaluated too). A run another study process holds (its
# .study.lock) is left to it
paper_run() {
  local name=$1 arch=$2 dir=$3 seed=$4; shift 4
  mkdir -p "$dir"
  (
    exec {RUN_LOCK}>"$dir/.study.lock"
    if ! flock -n "$RUN_LOCK"; then log "$name: another study process trains or evaluates $dir: left to it"; exit 0; fi
    if [[ -f "$dir/$EVAL_SUBSET/scores.json" && -z ${CURVE:-} ]]; then log "$name: done before, reused ($dir)"; exit 0; fi
    log "$name: ARCH=$arch $*"
    [[ -z $seed ]] || SEED=$seed
    # subshells: train_main/evaluate_main set globals (SAVE_DIR, UPDATE_FREQ, ...) per run
    ( ARCH=$arch SAVE_DIR=$dir EXTRA_ARGS="${EXTRA_ARGS:-} $*"; train_main )
    ( ARCH=$arch SAVE_DIR=$dir; evaluate_main )
    local u curve=${CURVE:-}
    for u in ${curve//,/ }; do ( ARCH=$arch SAVE_DIR=$dir EVAL_AT_UPDATE=$u; evaluate_main ); done
  )
}

# paper_wait DIR RUN_DIR...: the tables of DIR one study process at a time (the lock held until the
# process ends: a killed study blocks nothing), after the runs another process holds are finished
paper_wait() {
  local dir=$1 run fd; shift
  exec {TABLES_LOCK}>"$dir/.tables.lock"
  if ! flock -n "$TABLES_LOCK"; then log "waiting: another study writes the tables of $dir"; flock "$TABLES_LOCK"; fi
  for run in "$@"; do
    [[ -e $run/.study.lock ]] || continue
    exec {fd}>"$run/.study.lock"
    if ! flock -n "$fd"; then log "waiting: another study process trains or evaluates $run"; flock "$fd"; fi
    exec {fd}>&-
  done
}

# paper_study_runs DIR SUBSET LABEL|ARCH|RUN_DIR|EXTRA_ARGS...: every run trained and evaluated on SUBSET
# (paper_runs), then the tables of DIR held once the runs another study process holds are finished (paper_wait)
paper_study_runs() {
  local dir=$1 subset=$2 spec label arch run extra runs=(); shift 2
  paper_runs "$subset" "$@"
  for spec in "$@"; do
    IFS='|' read -r label arch run extra <<< "$spec"
    mapfile -t -O "${#runs[@]}" runs < <(paper_run_dirs "$(dirname "$run")" "$(basename "$run")")
  done
  paper_wait "$dir" "${runs[@]}"
}

# paper_run_dirs DIR NAME...: each run's folder (DIR/NAME, or DIR/NAME_seed<N> for each of SEEDS)
paper_run_dirs() {
  local dir=$1 name s; shift
  for name in "$@"; do
    if [[ -z ${SEEDS:-} ]]; then echo "$dir/$name"; else for s in $SEEDS; do echo "$dir/${name}_seed$s"; done; fi
  done
}

# paper_training DIR RUNS_DIR PREFIX SUBSET NAME...: the "Training length" of the runs into PREFIX.md and
# PREFIX.json, and with CURVE the learning curve of each run on SUBSET (DIR/curve.md, curve.json, PNGs)
paper_training() {
  local dir=$1 runs=$2 prefix=$3 subset=$4; shift 4
  local args=(--condition "$(basename "$prefix")" "$runs" --names "$@" --seeds "${SEEDS:-}" --into "$prefix")
  [[ -z ${CURVE:-} ]] || args+=(--points "$CURVE" --subset "1=$subset" --md "$dir/curve.md" --json "$dir/curve.json" --plot-dir "$dir")
  "$PYTHON" -m fairseq_attn_reports.cli.learning_curve "${args[@]}" > "$dir/training.out" \
    || { cat "$dir/training.out" >&2; die "the training lengths or learning curves failed"; }
  [[ -z ${CURVE:-} ]] || log "learning curves: $dir/curve.md, $dir/curve_<run>.png"
}

# ---------------------------------------------------------------- Table 1
table1_dir() { echo "${TABLE1_DIR:-$WORK/table1${CONVERGE:+_converge$CONVERGE}}"; }

table1_main() {
  USAGE_EXAMPLE="ROWS=baseline,csan2d" no_args "$@"
  check_variables table1 train evaluate
  recipe_defaults
  paper_quick_defaults
  paper_study_start transformer_attn_wmt_en_de
  ROWS=${ROWS:-all}
  TABLE1_DIR=$(table1_dir)
  local rows line keys=() specs=()
  rows=$("${PAPER[@]}" rows --rows "$ROWS") || exit 1   # names any row whose architecture is missing
  paper_check_data
  comet_checked
  paper_settings "$TABLE1_DIR"
  mapfile -t rows <<< "$rows"
  ARCHS_CHECKED=$(for line in "${rows[@]}"; do echo "${line#* }"; done)  # "rows" checked them all
  ARCHS_CHECKED=${ARCHS_CHECKED//$'\n'/ }
  for line in "${rows[@]}"; do  # "KEY ARCH"
    keys+=("${line% *}")
    specs+=("table1 ${line% *}|${line#* }|$TABLE1_DIR/runs/${line% *}|")
  done
  paper_study_runs "$TABLE1_DIR" test "${specs[@]}"
  "${PAPER[@]}" table1 --ref "$(data_refs)/test.$TGT" --runs-dir "$TABLE1_DIR/runs" --rows "$ROWS" \
    --seeds "${SEEDS:-}" --tokenize "${SACREBLEU_TOK:-13a}" --ar-trials "${AR_TRIALS:-10000}" --no-comet-hint \
    --md "$TABLE1_DIR/table1.md" --json "$TABLE1_DIR/table1.json" || exit 1
  paper_training "$TABLE1_DIR" "$TABLE1_DIR/runs" "$TABLE1_DIR/table1" test "${keys[@]}"
  log "Table 1: $TABLE1_DIR/table1.md (and table1.json)"
  log "to commit it with the outputs it scores (re-check: study-rescore): $PYTHON -m fairseq_attn_recipes study-export $TABLE1_DIR/table1.json --to docs/results --name NAME"
}

# ---------------------------------------------------------------- Figure 2
# figure2_heads_fit: every HEADS value at most the encoder's heads (MODEL_ARGS, else the architecture's
# 8), before any work (2D-CSAN's area spans at most every head)
figure2_heads_fit() {
  local heads=8 v
  [[ ${MODEL_ARGS:-} =~ --encoder-attention-heads[=\ ]+([0-9]+) ]] && heads=${BASH_REMATCH[1]}
  for v in ${HEADS//,/ }; do
    (( 10#$v <= heads )) || die "HEADS=$HEADS: $v is above the encoder's $heads attention heads (MODEL_ARGS): give areas of at most $heads heads"
  done
}

figure2_main() {
  USAGE_EXAMPLE="WINDOWS=3,5,7" no_args "$@"
  check_variables figure2 train evaluate
  recipe_defaults
  paper_quick_defaults
  WINDOWS=${WINDOWS-3,5,7,9,11,13,15}      # 1D-CSAN --csan-window values (set empty: none)
  HEADS=${HEADS-1,3,5,7}                   # 2D-CSAN --csan-heads values (odd, <= heads; set empty: none)
  FIG2_WINDOW=${FIG2_WINDOW:-11}           # the 2D-CSAN window, fixed as in the paper
  FIGURE2_DIR=${FIGURE2_DIR:-$WORK/figure2${CONVERGE:+_converge$CONVERGE}}
  [[ -n "$WINDOWS$HEADS" ]] || die "WINDOWS and HEADS are both empty"
  figure2_heads_fit
  paper_study_start transformer_csan1d_wmt_en_de
  "${STEPS[@]}" check-arch transformer_csan1d_wmt_en_de transformer_csan2d_wmt_en_de || exit 1
  ARCHS_CHECKED="transformer_csan1d_wmt_en_de transformer_csan2d_wmt_en_de"
  paper_check_data
  comet_checked
  paper_settings "$FIGURE2_DIR"
  local v names=() specs=() wargs=() hargs=() run
  for v in ${WINDOWS//,/ }; do
    names+=("csan1d_w$v")
    specs+=("figure2 window $v|transformer_csan1d_wmt_en_de|$FIGURE2_DIR/runs/csan1d_w$v|--csan-window $v")
  done
  for v in ${HEADS//,/ }; do
    names+=("csan2d_h$v")
    specs+=("figure2 heads $v|transformer_csan2d_wmt_en_de|$FIGURE2_DIR/runs/csan2d_h$v|--csan-window $FIG2_WINDOW --csan-heads $v")
  done
  paper_study_runs "$FIGURE2_DIR" valid "${specs[@]}"
  for v in ${WINDOWS//,/ }; do
    while read -r run; do wargs+=("$v=$run"); done < <(paper_run_dirs "$FIGURE2_DIR/runs" "csan1d_w$v")
  done
  for v in ${HEADS//,/ }; do
    while read -r run; do hargs+=("$v=$run"); done < <(paper_run_dirs "$FIGURE2_DIR/runs" "csan2d_h$v")
  done
  local args=(--ref "$(data_refs)/valid.$TGT" --window-2d "$FIG2_WINDOW" --tokenize "${SACREBLEU_TOK:-13a}"
              --png "$FIGURE2_DIR/figure2.png" --md "$FIGURE2_DIR/figure2.md" --json "$FIGURE2_DIR/figure2.json")
  (( ${#wargs[@]} )) && args+=(--window "${wargs[@]}")
  (( ${#hargs[@]} )) && args+=(--heads "${hargs[@]}")
  "${PAPER[@]}" figure2 "${args[@]}" || exit 1
  paper_training "$FIGURE2_DIR" "$FIGURE2_DIR/runs" "$FIGURE2_DIR/figure2" valid "${names[@]}"
  log "Figure 2: $FIGURE2_DIR/figure2.png (and figure2.md, figure2.json)"
  log "to commit it with the outputs it scores (re-check: study-rescore): $PYTHON -m fairseq_attn_recipes study-export $FIGURE2_DIR/figure2.json --to docs/results --name NAME"
}

# ---------------------------------------------------------------- Figure 3
figure3_main() {
  USAGE_EXAMPLE="FIG3_ROWS=csan1d,csan2d" no_args "$@"
  check_variables figure3
  recipe_defaults
  TABLE1_DIR=$(table1_dir)
  FIG3_ROWS=${FIG3_ROWS:-csan1d,csan2d}
  check_seeds
  # with SEEDS (Table 1's), the runs of its first seed
  local runs="$TABLE1_DIR/runs" key sys=() first suffix=""
  read -r first _ <<< "${SEEDS:-}"
  if [[ -n $first ]]; then suffix="_seed$first"; log "SEEDS=\"$SEEDS\": Figure 3 of seed $first"; fi
  for key in baseline ${FIG3_ROWS//,/ }; do
    [[ -f "$runs/$key$suffix/test/hyp.txt" ]] || die "$runs/$key$suffix/test/hyp.txt is missing: run table1.sh first (with row $key in ROWS)"
    [[ $key == baseline ]] || sys+=("$key=$runs/$key$suffix")
  done
  "${PAPER[@]}" figure3 --ref "$(data_refs)/test.$TGT" --baseline "baseline=$runs/baseline$suffix" --system "${sys[@]}" \
    --tokenize "${SACREBLEU_TOK:-13a}" --png "$TABLE1_DIR/figure3.png" --json "$TABLE1_DIR/figure3.json" || exit 1
  log "Figure 3: $TABLE1_DIR/figure3.png (and figure3.json)"
}
