# The CSAN paper's Table 1 and Figures 2-3 (Yang et al., 2019) on a prepared
# data-bin: sourced after a recipe's env.sh by recipes/*/{table1,figure2,figure3}.sh.
#
# Each run is an ordinary train.sh + evaluate.sh run (same settings, same
# variables, see docs/reference/variables.md) in its own SAVE_DIR; a run whose SUBSET/scores.json
# exists is reused, an interrupted one resumes from its checkpoint_last.pt.
# The rows come from fairseq_attn_reports/table1.py (ROWS=all or a list of
# row keys); rendering and plotting is fairseq-attn-paper.
#
# QUICK=1: tiny CPU sizes (the profile paper-quick of fairseq_attn_recipes/profiles.py: a 3+1-layer,
# 32-dim model, a few updates) for smoke runs and CI; every variable below still overrides it.

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
    "FP16=${FP16:-}" "N_AVG=${N_AVG:-}" "BEAM=${BEAM:-}" "LENPEN=${LENPEN:-}")
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

# paper_run NAME ARCH SAVE_DIR [EXTRA_ARGS...]: train + evaluate one run unless finished
paper_run() {
  local name=$1 arch=$2 dir=$3; shift 3
  if [[ -f "$dir/$EVAL_SUBSET/scores.json" ]]; then log "$name: done before, reused ($dir)"; return 0; fi
  log "$name: ARCH=$arch $*"
  # subshells: train_main/evaluate_main set globals (SAVE_DIR, UPDATE_FREQ, ...) per run
  ( ARCH=$arch SAVE_DIR=$dir EXTRA_ARGS="${EXTRA_ARGS:-} $*"; train_main )
  ( ARCH=$arch SAVE_DIR=$dir; evaluate_main )
}

# ---------------------------------------------------------------- Table 1
table1_main() {
  USAGE_EXAMPLE="ROWS=baseline,csan2d" no_args "$@"
  check_variables table1 train evaluate
  recipe_defaults
  paper_quick_defaults
  ROWS=${ROWS:-all}
  TABLE1_DIR=${TABLE1_DIR:-$WORK/table1}
  local rows line
  rows=$("${PAPER[@]}" rows --rows "$ROWS") || exit 1   # names any row whose architecture is missing
  paper_check_data
  comet_checked
  paper_settings "$TABLE1_DIR"
  mapfile -t rows <<< "$rows"
  ARCHS_CHECKED=$(for line in "${rows[@]}"; do echo "${line#* }"; done)  # "rows" checked them all
  ARCHS_CHECKED=${ARCHS_CHECKED//$'\n'/ }
  for line in "${rows[@]}"; do  # "KEY ARCH"
    EVAL_SUBSET=test paper_run "table1 ${line% *}" "${line#* }" "$TABLE1_DIR/runs/${line% *}"
  done
  "${PAPER[@]}" table1 --ref "$(data_refs)/test.$TGT" --runs-dir "$TABLE1_DIR/runs" --rows "$ROWS" \
    --tokenize "${SACREBLEU_TOK:-13a}" --ar-trials "${AR_TRIALS:-10000}" \
    --md "$TABLE1_DIR/table1.md" --json "$TABLE1_DIR/table1.json" || exit 1
  log "Table 1: $TABLE1_DIR/table1.md (and table1.json)"
}

# ---------------------------------------------------------------- Figure 2
figure2_main() {
  USAGE_EXAMPLE="WINDOWS=3,5,7" no_args "$@"
  check_variables figure2 train evaluate
  recipe_defaults
  paper_quick_defaults
  WINDOWS=${WINDOWS:-3,5,7,9,11,13,15}     # 1D-CSAN --csan-window values
  HEADS=${HEADS:-1,3,5,7}                  # 2D-CSAN --csan-heads values (odd, <= heads)
  FIG2_WINDOW=${FIG2_WINDOW:-11}           # the 2D-CSAN window, fixed as in the paper
  FIGURE2_DIR=${FIGURE2_DIR:-$WORK/figure2}
  "${STEPS[@]}" check-arch transformer_csan1d_wmt_en_de transformer_csan2d_wmt_en_de || exit 1
  ARCHS_CHECKED="transformer_csan1d_wmt_en_de transformer_csan2d_wmt_en_de"
  [[ -n "$WINDOWS$HEADS" ]] || die "WINDOWS and HEADS are both empty"
  paper_check_data
  comet_checked
  paper_settings "$FIGURE2_DIR"
  local v wargs=() hargs=()
  for v in ${WINDOWS//,/ }; do
    EVAL_SUBSET=valid paper_run "figure2 window $v" transformer_csan1d_wmt_en_de "$FIGURE2_DIR/runs/csan1d_w$v" \
      --csan-window "$v"
    wargs+=("$v=$FIGURE2_DIR/runs/csan1d_w$v")
  done
  for v in ${HEADS//,/ }; do
    EVAL_SUBSET=valid paper_run "figure2 heads $v" transformer_csan2d_wmt_en_de "$FIGURE2_DIR/runs/csan2d_h$v" \
      --csan-window "$FIG2_WINDOW" --csan-heads "$v"
    hargs+=("$v=$FIGURE2_DIR/runs/csan2d_h$v")
  done
  local args=(--ref "$(data_refs)/valid.$TGT" --window-2d "$FIG2_WINDOW" --tokenize "${SACREBLEU_TOK:-13a}"
              --png "$FIGURE2_DIR/figure2.png" --json "$FIGURE2_DIR/figure2.json")
  (( ${#wargs[@]} )) && args+=(--window "${wargs[@]}")
  (( ${#hargs[@]} )) && args+=(--heads "${hargs[@]}")
  "${PAPER[@]}" figure2 "${args[@]}" || exit 1
  log "Figure 2: $FIGURE2_DIR/figure2.png (and figure2.json)"
}

# ---------------------------------------------------------------- Figure 3
figure3_main() {
  USAGE_EXAMPLE="FIG3_ROWS=csan1d,csan2d" no_args "$@"
  check_variables figure3
  recipe_defaults
  TABLE1_DIR=${TABLE1_DIR:-$WORK/table1}
  FIG3_ROWS=${FIG3_ROWS:-csan1d,csan2d}
  local runs="$TABLE1_DIR/runs" key sys=()
  for key in baseline ${FIG3_ROWS//,/ }; do
    [[ -f "$runs/$key/test/hyp.txt" ]] || die "$runs/$key/test/hyp.txt is missing: run table1.sh first (with row $key in ROWS)"
    [[ $key == baseline ]] || sys+=("$key=$runs/$key")
  done
  "${PAPER[@]}" figure3 --ref "$(data_refs)/test.$TGT" --baseline "baseline=$runs/baseline" --system "${sys[@]}" \
    --tokenize "${SACREBLEU_TOK:-13a}" --png "$TABLE1_DIR/figure3.png" --json "$TABLE1_DIR/figure3.json" || exit 1
  log "Figure 3: $TABLE1_DIR/figure3.png (and figure3.json)"
}
