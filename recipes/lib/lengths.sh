# Train short, test long: sourced by recipes/*/lengths.sh after env.sh (see docs/lengths.md).
#
# lengths_main: prepare a training set capped at TRAIN_MAX_LEN source words (valid and test stay
# whole; its own data folder beside any other prepared data of this WORK), train every
# architecture of ARCHS on it, evaluate each on the whole test set, and write the by-length table
# and plot (fairseq-attn-results --by-length) with the buckets beyond the training length marked.
#
# ARCHS: short names (baseline = sinusoidal positions, relpos, rope, alibi, t5bias, csan2d, or any
# <variant> of transformer_<variant>_wmt_en_de) or registered architecture names, comma-separated.
# Before any training, each architecture's position limits are checked against the longest valid
# and test sentence and the longest output beam search may write (check-positions): raised where
# positions are sinusoidal or relative, refused for learned tables or limits set in MODEL_ARGS.
# QUICK=1: the demo's embedded corpus (src-tgt, 4000/200/400 pairs), toy model sizes, minutes on CPU.

LENGTHS_ARCHS_DEFAULT=baseline,relpos,rope,alibi,t5bias,csan2d

lengths_arch() {  # short name -> registered architecture
  case $1 in
    baseline) echo transformer_attn_wmt_en_de;;
    transformer_*) echo "$1";;
    *) echo "transformer_$1_wmt_en_de";;
  esac
}

lengths_quick_settings() {  # the demo's corpus and toy sizes (each still overridable)
  SRC=src; TGT=tgt
  WORK=${WORK:-$RECIPE_DIR/work-quick}
  TRAIN_MAX_LEN=${TRAIN_MAX_LEN:-7}
  QUICK_SIZES=${QUICK_SIZES:-train=4000,valid=200,test=400}
  JOINT=1; BPE_MERGES=${QUICK_BPE_MERGES:-150}
  # the toy target reverses every word, so joint BPE splits its side more: a ratio of 1.5 would drop
  # a third of the short pairs
  CLEAN_RATIO=${CLEAN_RATIO:-3}
  MAX_UPDATE=${MAX_UPDATE:-300}; MAX_TOKENS=${MAX_TOKENS:-1500}; UPDATE_FREQ=${UPDATE_FREQ:-1}
  LR=${LR:-3e-3}; WARMUP=${WARMUP:-60}; SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-100}
  LOG_INTERVAL=${LOG_INTERVAL:-50}; TENSORBOARD=${TENSORBOARD:-0}; N_AVG=${N_AVG:-2}
  AR_TRIALS=${AR_TRIALS:-1000}
  MODEL_ARGS=${MODEL_ARGS:---encoder-layers 3 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 --encoder-attention-heads 4 --decoder-attention-heads 4}
  mkdir -p "$WORK"
  local corpus="$WORK/quick-corpus"
  stage quick-corpus --set "sizes=$QUICK_SIZES" -- \
    "${STEPS[@]}" toy-corpus --out "$corpus" --src-lang "$SRC" --tgt-lang "$TGT" --sizes "$QUICK_SIZES"
  export TRAIN_SRC="$corpus/train.$SRC" TRAIN_TGT="$corpus/train.$TGT" VALID_SRC="$corpus/valid.$SRC"
  export VALID_TGT="$corpus/valid.$TGT" TEST_SRC="$corpus/test.$SRC" TEST_TGT="$corpus/test.$TGT"
}

lengths_main() {
  no_args "$@"
  [[ ${QUICK:-0} =~ ^[01]$ ]] || die "QUICK=$QUICK: give 1 (the demo's corpus, toy sizes) or 0"
  if [[ ${QUICK:-0} == 1 ]]; then lengths_quick_settings; fi
  TRAIN_MAX_LEN=${TRAIN_MAX_LEN:-${STUDY_TRAIN_MAX_LEN:-30}}
  [[ $TRAIN_MAX_LEN =~ ^[0-9]+$ ]] && (( TRAIN_MAX_LEN >= 1 )) \
    || die "TRAIN_MAX_LEN=$TRAIN_MAX_LEN: give the longest training source in words, a positive integer"
  export TRAIN_MAX_LEN
  ARCHS=${ARCHS:-$LENGTHS_ARCHS_DEFAULT}
  local names=() archs=() name seen=" "
  IFS=, read -r -a names <<< "$ARCHS"
  for name in "${names[@]}"; do
    [[ $name =~ ^[a-z0-9_]+$ ]] || die "ARCHS=$ARCHS: '$name' is not an architecture name (comma-separated, no spaces)"
    [[ $seen != *" $name "* ]] || die "ARCHS=$ARCHS: '$name' is given twice"
    seen+="$name "
    archs+=("$(lengths_arch "$name")")
  done
  (( ${#names[@]} >= 2 )) || die "ARCHS=$ARCHS: the study compares systems with the first one: give at least two"
  "${STEPS[@]}" check-arch "${archs[@]}" || exit 2
  ARCHS_CHECKED="${archs[*]}"  # train.sh then checks none of them again
  # GEN_ARGS: outputs may grow with the source, so long test sentences are never cut at
  # fairseq's fixed 200-token default (max_len_b)
  GEN_ARGS=${GEN_ARGS:---max-len-a 2 --max-len-b 10}
  local len_a len_b
  len_a=$(sed -nE 's/.*--max-len-a[ =]([0-9.]+).*/\1/p' <<< "$GEN_ARGS"); len_b=$(sed -nE 's/.*--max-len-b[ =]([0-9]+).*/\1/p' <<< "$GEN_ARGS")

  # 1. the capped training set (its own data folder; the test set stays whole)
  prepare_main
  recipe_defaults
  local data; data=$(readlink -f "$DATA")
  export DATA="$data"
  LENGTHS_DIR=${LENGTHS_DIR:-$WORK/lengths/max$TRAIN_MAX_LEN}
  mkdir -p "$LENGTHS_DIR"
  log "study: $LENGTHS_DIR (training pairs up to $TRAIN_MAX_LEN source words, data $data)"

  # 2. position limits of every architecture, before any training
  local lines
  lines=$("${STEPS[@]}" check-positions --data "$data" --src "$SRC" --tgt "$TGT" --arch "${archs[@]}" \
          --max-len-a "${len_a:-0}" --max-len-b "${len_b:-200}" --model-args "${MODEL_ARGS:-}") || exit 2

  # 3. train and evaluate each (a re-run skips what is done; a killed one resumes)
  local i runs=()
  for i in "${!names[@]}"; do
    name=${names[$i]}
    local extra; extra=$(awk -F'\t' -v a="${archs[$i]}" '$1 == a {print $2}' <<< "$lines")
    (
      ARCH=${archs[$i]}; SAVE_DIR="$LENGTHS_DIR/$name"
      if [[ -n $extra ]]; then
        log "$name: $extra (the longest valid/test sentence and output need them)"
        MODEL_ARGS="${MODEL_ARGS:-} $extra"
      fi
      train_main
      EVAL_SUBSET=test evaluate_main
    )
    runs+=("$LENGTHS_DIR/$name")
  done

  # 4. the by-length table and plot, buckets beyond the training length marked
  local src_words="$data/raw/test.$SRC"
  if [[ $SRC == zh || $SRC == ja ]]; then  # no spaces between words: count the tokeniser's words
    src_words="$LENGTHS_DIR/test.words.$SRC"
    "${STEPS[@]}" tokenize --lang "$SRC" --tool "$(tokenizer_tool "$SRC")" "$data/raw/test.$SRC" "$src_words"
  fi
  "$PYTHON" -m fairseq_attn_plugins.cli.results --ref "$data/raw/test.$TGT" --src "$src_words" \
    --by-length "${LENGTH_EDGES:-auto}" --train-max-len "$TRAIN_MAX_LEN" --names "${names[@]}" \
    --bs-samples "${BS_SAMPLES:-1000}" --ar-trials "${AR_TRIALS:-10000}" \
    --md "$LENGTHS_DIR/lengths.md" --json "$LENGTHS_DIR/lengths.json" --plot "$LENGTHS_DIR/lengths.png" \
    "${runs[@]}" > "$LENGTHS_DIR/results.out" || { cat "$LENGTHS_DIR/results.out" >&2; die "fairseq-attn-results failed"; }
  cat "$LENGTHS_DIR/results.out"
  log "by-length table: $LENGTHS_DIR/lengths.md, plot: $LENGTHS_DIR/lengths.png"
}
