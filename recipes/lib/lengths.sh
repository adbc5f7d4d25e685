# Train short, test long: sourced by recipes/*/lengths.sh after env.sh (see docs/howto/lengths.md).
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
# QUICK=1: the toy corpus (src-tgt, 4000/200/400 pairs) and toy model sizes of the demo (the profile
# toy-study of fairseq_attn_recipes/profiles.py), minutes on CPU.
# CONCAT=1,2,4,8 (default): every run is also evaluated on the test set made of consecutive,
# non-overlapping groups of k segments of one document (concat-test; documents: the recipe's
# DATA/raw/test.docs, or TEST_DOCS=FILE with one id per test line, else the test file in order as one
# document), each k its own binarised subset concat/k<k>.test of the data folder (DATA/concat/ and
# DATA/raw/concat/: derived test sets, outside the data's identity), evaluated by evaluate.sh's step with
# its own record (EVAL_SUBSET=concat/k<k>.test), and reported per k in lengths.json ("concat"), with the
# segment-by-segment row of every system (its k = 1 outputs joined per group).
# TRAIN_CONCAT=2 or 2,4: a second condition, every system also trained on the capped pairs plus their joins
# of k consecutive pairs of one document (random pairs without documents; the data step, its own data
# folder), in LENGTHS_DIR/trainconcat<ks>/ with its own tables, and the difference per system and k
# (train_concat.md). SEEDS="1 2 3": every system and condition trained per seed (<name>_seed<N>), the per-k
# tables as mean ± sample std with the seeds table's marks; the by-source-length table on the first seed.
# CONVERGE=P: every run trains until its validation loss (the original valid pairs, in both conditions) has
# not improved for P validations, one every SAVE_INTERVAL_UPDATES updates (fairseq's --patience), at most
# MAX_UPDATE updates (the cap); its own folder LENGTHS_DIR=WORK/lengths/max<N>/converge<P> (a folder is the study of
# its TRAIN_MAX_LEN and CONVERGE, LENGTHS_DIR/study_settings.json: others there are refused). CURVE=U1,U2,...:
# the checkpoints of those updates are kept (never pruned) and every run is evaluated at each on k = 1 and
# the largest k (curve.md, curve.json, curve_<name>.png). Each condition's lengths.md says every run's
# updates, epochs and pairs and tokens seen ("Training length").
. "$(dirname "${BASH_SOURCE[0]}")/seeds.sh"
. "$(dirname "${BASH_SOURCE[0]}")/converge.sh"

LENGTHS_ARCHS_DEFAULT=baseline,relpos,rope,alibi,t5bias,csan2d

lengths_arch() {  # short name -> registered architecture
  case $1 in
    baseline) echo transformer_attn_wmt_en_de;;
    transformer_*) echo "$1";;
    *) echo "transformer_$1_wmt_en_de";;
  esac
}

lengths_quick_settings() {  # the demo's corpus and toy sizes (the profile toy-study of profiles.py, each still overridable)
  SRC=src; TGT=tgt; JOINT=1
  WORK=${WORK:-$RECIPE_DIR/work-quick}
  # the toy corpus's sizes and merges are given as QUICK_SIZES and QUICK_BPE_MERGES
  CORPUS_SIZES=${QUICK_SIZES:-}; BPE_MERGES=${QUICK_BPE_MERGES:-}
  profile toy-study
  QUICK_SIZES=$CORPUS_SIZES
  local corpus="$WORK/quick-corpus"
  export TRAIN_SRC="$corpus/train.$SRC" TRAIN_TGT="$corpus/train.$TGT" VALID_SRC="$corpus/valid.$SRC"
  export VALID_TGT="$corpus/valid.$TGT" TEST_SRC="$corpus/test.$SRC" TEST_TGT="$corpus/test.$TGT"
}

lengths_quick_corpus() {  # the toy corpus of QUICK=1 written (after every setting is checked: a refusal writes nothing)
  mkdir -p "$WORK"
  stage quick-corpus --set "sizes=$QUICK_SIZES" -- \
    "${STEPS[@]}" toy-corpus --out "$WORK/quick-corpus" --src-lang "$SRC" --tgt-lang "$TGT" --sizes "$QUICK_SIZES"
}

# text_lines FILE: its lines as text (a last line without its newline counts, as the Python steps read it)
text_lines() { awk 'END { print NR }' "$1"; }

lengths_check_concat() {  # CONCAT and TEST_DOCS, before any work (the line count again once the test set is known)
  CONCAT=${CONCAT:-1,2,4,8}
  local ks=() k seen=" "
  IFS=, read -r -a ks <<< "$CONCAT"
  [[ $CONCAT =~ ^[0-9,]+$ && $CONCAT != *,, && $CONCAT != ,* && $CONCAT != *, ]] || ks=(x)
  for k in "${ks[@]}"; do
    [[ $k =~ ^[0-9]+$ ]] && (( 10#$k >= 1 )) || die "CONCAT=$CONCAT: give the numbers of segments joined into one input, positive integers separated by commas (e.g. 1,2,4,8; 1 = the test set as it is)"
    [[ $seen != *" $((10#$k)) "* ]] || die "CONCAT=$CONCAT: $((10#$k)) is given twice"
    seen+="$((10#$k)) "
  done
  if [[ -n ${TEST_DOCS:-} ]]; then
    [[ -f $TEST_DOCS ]] || die "TEST_DOCS=$TEST_DOCS: no such file (one document id per test line)"
    # the test source's lines: its file, or the toy corpus's test size before it is written (QUICK=1)
    local lines=
    if [[ -n ${TEST_SRC:-} && -f ${TEST_SRC:-} ]]; then lines=$(text_lines "$TEST_SRC")
    elif [[ ${QUICK:-0} == 1 && $QUICK_SIZES =~ (^|,)test=([0-9]+) ]]; then lines=$((10#${BASH_REMATCH[2]})); fi
    if [[ -n $lines && $(text_lines "$TEST_DOCS") != "$lines" ]]; then
      die "TEST_DOCS=$TEST_DOCS: $(text_lines "$TEST_DOCS") lines, but the test source $TEST_SRC has $lines: give one document id per test line"
    fi
  fi
}

# lengths_concat_subset K: the joined test set of K (CONCAT_DIR/kK.*) tokenised and split into
# subwords as the data was, binarised with the data's dictionaries into DATA/concat/kK.test.*, with its
# raw source and reference in DATA/raw/concat/kK.test.* (written last: evaluate.sh reads them)
lengths_concat_subset() {
  local k=$1 dir=$CONCAT_DIR sub="concat/k$1.test" l ext
  local tmp="$dir/k$k.build.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  for l in "$SRC" "$TGT"; do
    "${STEPS[@]}" tokenize --lang "$l" --tool "$(tokenizer_tool "$l")" "$dir/k$k.$l" "$tmp/tok.$l"
  done
  # joint BPE: both sides in one step (one set of codes); else each side with its own codes
  if [[ $JOINT == 1 ]]; then
    "${STEPS[@]}" bpe-apply --tool "$BPE_TOOL" --codes "$WORK/bpe/codes" "$tmp/tok.$SRC" "$tmp/bpe.$SRC" "$tmp/tok.$TGT" "$tmp/bpe.$TGT"
  else
    for l in "$SRC" "$TGT"; do
      "${STEPS[@]}" bpe-apply --tool "$BPE_TOOL" --codes "$WORK/bpe/codes.$l" "$tmp/tok.$l" "$tmp/bpe.$l"
    done
  fi
  local pargs=()
  fairseq_args pargs preprocess --destdir "$tmp/bin" --set "src=$SRC" --set "tgt=$TGT" --set "testpref=$tmp/bpe" \
    --set "srcdict=$DATA/dict.$SRC.txt" --set "tgtdict=$DATA/dict.$TGT.txt" --set "preprocess_args=${PREPROCESS_ARGS:-}"
  "${FAIRSEQ[@]}" preprocess "${pargs[@]}" > "$tmp/preprocess.log" 2>&1 || { tail -5 "$tmp/preprocess.log" >&2; return 1; }
  mkdir -p "$DATA/concat" "$DATA/raw/concat"
  rm -f "$DATA/raw/$sub.$SRC" "$DATA/raw/$sub.$TGT"
  for l in "$SRC" "$TGT"; do for ext in bin idx; do
    mv "$tmp/bin/test.$SRC-$TGT.$l.$ext" "$DATA/$sub.$SRC-$TGT.$l.$ext"
  done; done
  for l in docs "$SRC" "$TGT"; do cp "$dir/k$k.$l" "$DATA/raw/$sub.$l.tmp"; mv "$DATA/raw/$sub.$l.tmp" "$DATA/raw/$sub.$l"; done
  rm -rf "$tmp"
}

# lengths_concat: the joined test sets of CONCAT from DATA's test set into CONCAT_DIR (the folder of
# DATA's condition, so that its tables name its own data's documents) and DATA's subsets of them (prints
# the k evaluated, one per line); a k no document has k segments for is said and skipped
lengths_concat() {
  local docs=${TEST_DOCS:-} dir=$CONCAT_DIR out k codes=("$WORK/bpe/codes")
  if [[ -z $docs && -f $DATA/raw/test.docs ]]; then docs="$DATA/raw/test.docs"; fi
  if [[ -n $docs ]]; then log "CONCAT=$CONCAT: documents of $docs"
  else log "CONCAT=$CONCAT: no document ids (TEST_DOCS): the test file in order is one document"; fi
  out=$("${STEPS[@]}" concat-test --src "$DATA/raw/test.$SRC" --ref "$DATA/raw/test.$TGT" ${docs:+--docs "$docs"} \
        --ks "$CONCAT" --out "$dir" --src-lang "$SRC" --tgt-lang "$TGT") || exit 1
  [[ $JOINT == 1 ]] || codes=("$WORK/bpe/codes.$SRC" "$WORK/bpe/codes.$TGT")
  for k in $out; do
    (( k > 1 )) || { echo "$k"; continue; }
    local marker; marker="concat.k$k.$(basename "$DATA")"
    [[ -f $DATA/raw/concat/k$k.test.$TGT ]] || rm -f "$WORK/.done/$marker"
    local fp=(--set "k=$k" --set "DATA=$DATA" --in "$dir/k$k.$SRC" --in "$dir/k$k.$TGT" --in "$dir/k$k.docs"
              --in "$DATA/dict.$SRC.txt" --in "$DATA/dict.$TGT.txt") c
    for c in "${codes[@]}"; do fp+=(--in "$c"); done
    stage "$marker" "${fp[@]}" -- lengths_concat_subset "$k" >&2
    echo "$k"
  done
}

lengths_concat_all() {  # step 1b of lengths_main (its datas, cond_dirs; sets its ks): each condition's
  # joined test sets in its own folder (cond_dir/concat), from its own data folder's test set
  local i
  for i in "${!datas[@]}"; do
    mapfile -t ks < <(DATA=${datas[$i]}; CONCAT_DIR=${cond_dirs[$i]}/concat; lengths_concat; echo "rc=$?")
    (( ${#ks[@]} > 0 )) && [[ ${ks[-1]} == rc=0 ]] || exit 1
    unset 'ks[-1]'
  done
}

lengths_main() {
  USAGE_EXAMPLE="ARCHS=baseline,relpos" no_args "$@"
  check_variables lengths prepare train evaluate
  if [[ ${QUICK:-0} == 1 ]]; then lengths_quick_settings; fi
  lengths_check_concat
  check_train_concat
  check_seeds
  TRAIN_MAX_LEN=${TRAIN_MAX_LEN:-${STUDY_TRAIN_MAX_LEN:-30}}
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
  check_converge_curve "${archs[0]}"
  # a study folder given (LENGTHS_DIR) is the study of the settings it was made with: others refused before any step
  local study_set=(--set "TRAIN_MAX_LEN=$TRAIN_MAX_LEN" --set "CONVERGE=${CONVERGE:-}")
  [[ -z ${LENGTHS_DIR:-} ]] || "${STEPS[@]}" study-folder --dir "$LENGTHS_DIR" "${study_set[@]}" || exit 1
  "${STEPS[@]}" check-arch --variable "ARCHS=$ARCHS" "${archs[@]}" || exit 1
  ARCHS_CHECKED="${archs[*]}"  # train.sh then checks none of them again
  comet_checked
  # every setting checked: the first file is written
  if [[ ${QUICK:-0} == 1 ]]; then lengths_quick_corpus; fi
  # GEN_ARGS: outputs may grow with the source, so long test sentences are never cut at
  # fairseq's fixed 200-token default (max_len_b)
  GEN_ARGS=${GEN_ARGS:---max-len-a 2 --max-len-b 10}
  local len_a len_b
  len_a=$(sed -nE 's/.*--max-len-a[ =]([0-9.]+).*/\1/p' <<< "$GEN_ARGS"); len_b=$(sed -nE 's/.*--max-len-b[ =]([0-9]+).*/\1/p' <<< "$GEN_ARGS")
  # the conditions: the capped pairs alone, and with TRAIN_CONCAT their joined pairs too
  local conds=("") cond_dirs=() datas=() c
  [[ -z ${TRAIN_CONCAT:-} ]] || conds+=("$TRAIN_CONCAT")

  # 1. the capped training set of each condition (its own data folder; the test set stays whole)
  for c in "${conds[@]}"; do
    local d
    d=$(TRAIN_CONCAT=$c; prepare_main >&2; echo "$PREPARED_DATA") || exit 1
    datas+=("$d")
  done
  recipe_defaults
  LENGTHS_DIR=${LENGTHS_DIR:-$WORK/lengths/max$TRAIN_MAX_LEN${CONVERGE:+/converge$CONVERGE}}
  mkdir -p "$LENGTHS_DIR"
  "${STEPS[@]}" study-folder --dir "$LENGTHS_DIR" "${study_set[@]}" --write || exit 1
  for c in "${conds[@]}"; do
    if [[ -z $c ]]; then cond_dirs+=("$LENGTHS_DIR"); else cond_dirs+=("$LENGTHS_DIR/trainconcat${c//,/_}"); fi
  done
  log "study: $LENGTHS_DIR (training pairs up to $TRAIN_MAX_LEN source words, data ${datas[0]})"
  [[ -z ${TRAIN_CONCAT:-} ]] || log "and trained with the joined pairs of TRAIN_CONCAT=$TRAIN_CONCAT: ${cond_dirs[1]} (data ${datas[1]})"
  [[ -z ${CONVERGE:-} ]] || log "CONVERGE=$CONVERGE: each run trains until its validation loss has not improved for $CONVERGE validations (one every $VALIDATE_INTERVAL_UPDATES updates, on the valid set of original pairs), at most MAX_UPDATE=$CURVE_CAP updates (the cap)"
  [[ -z ${CURVE:-} ]] || log "CURVE=$CURVE: the checkpoints of these updates are kept (--keep-interval-updates-pattern $KEEP_INTERVAL_UPDATES_PATTERN) and evaluated on k = 1 and the largest k"

  # 1b. the test set joined k segments at a time within each document (CONCAT), each k a subset of each data
  local ks=() k splits=(valid test)
  lengths_concat_all
  for k in "${ks[@]}"; do (( k == 1 )) || splits+=("concat/k$k.test"); done

  # 2. position limits of every architecture (the longest joined input included), before any training
  local lines
  lines=$("${STEPS[@]}" check-positions --data "${datas[0]}" --src "$SRC" --tgt "$TGT" --arch "${archs[@]}" \
          --splits "${splits[@]}" --max-len-a "${len_a:-0}" --max-len-b "${len_b:-200}" \
          --model-args "${MODEL_ARGS:-}") || exit 1

  # 3. train and evaluate every run
  lengths_train_all

  # 4-5. the tables of each condition, then their difference
  lengths_wait_runs
  lengths_tables_lock
  for ci in "${!conds[@]}"; do
    lengths_report "${cond_dirs[$ci]}" "${datas[$ci]}" "${ks[@]}"
  done
  lengths_curve_report
  if [[ -n ${TRAIN_CONCAT:-} ]]; then
    "$PYTHON" -m fairseq_attn_reports.cli.train_conditions --without "${cond_dirs[0]}/lengths.json" \
      --with "${cond_dirs[1]}/lengths.json" --train-concat "$TRAIN_CONCAT" \
      --md "$LENGTHS_DIR/train_concat.md" --json "$LENGTHS_DIR/train_concat.json" || die "the difference of the two conditions failed"
    log "concatenation training against the pairs alone: $LENGTHS_DIR/train_concat.md"
  fi
  log "to commit the study with the outputs it scores (and re-check it later with study-rescore): $PYTHON -m fairseq_attn_recipes study-export ${cond_dirs[0]}/lengths.json --to docs/results --name NAME (docs/howto/lengths.md)"
}

lengths_wait_runs() {  # step 3b of lengths_main (its names, conds, cond_dirs): the runs another study
  # process trains or evaluates (their .study.lock held) are waited for, so that the tables have them whole
  local seeds=(${SEEDS:-}) seed ci i dir fd
  (( ${#seeds[@]} )) || seeds=("")
  for seed in "${seeds[@]}"; do for ci in "${!conds[@]}"; do for i in "${!names[@]}"; do
    dir="${cond_dirs[$ci]}/${names[$i]}${seed:+_seed$seed}"
    [[ -e $dir/.study.lock ]] || continue
    exec {fd}>"$dir/.study.lock"
    if ! flock -n "$fd"; then log "waiting: another study process trains or evaluates $dir"; flock "$fd"; fi
    exec {fd}>&-
  done; done; done
}

lengths_tables_lock() {  # two studies of one LENGTHS_DIR (e.g. its SEEDS split over two processes) write
  # the same tables and read each other's: one at a time, the other waits (the last to end leaves the tables
  # of its SEEDS). The lock is held until the process ends, so a killed study blocks nothing
  exec {TABLES_LOCK}>"$LENGTHS_DIR/.tables.lock"
  flock -n "$TABLES_LOCK" && return 0
  log "waiting: another study writes its tables in $LENGTHS_DIR (it holds $LENGTHS_DIR/.tables.lock)"
  flock "$TABLES_LOCK"
}

lengths_train_all() {  # step 3 of lengths_main (its names, archs, conds, cond_dirs, datas, lines, ks):
  # train and evaluate each seed, condition and architecture (a re-run skips what is done; a killed one
  # resumes). Seeds outermost: a study stopped part-way has every system and condition at its first seeds
  local seeds=(${SEEDS:-}) seed ci i
  (( ${#seeds[@]} )) || seeds=("")
  for seed in "${seeds[@]}"; do
    for ci in "${!conds[@]}"; do
      for i in "${!names[@]}"; do
        (
          ARCH=${archs[$i]}; SAVE_DIR="${cond_dirs[$ci]}/${names[$i]}${seed:+_seed$seed}"; DATA=${datas[$ci]}; TRAIN_CONCAT=${conds[$ci]}
          # several study processes of one WORK share its runs: a run another one trains or evaluates
          # (it holds the run's .study.lock) is left to it; the tables wait for it (lengths_wait_runs)
          mkdir -p "$SAVE_DIR"
          exec {RUN_LOCK}>"$SAVE_DIR/.study.lock"
          if ! flock -n "$RUN_LOCK"; then log "$SAVE_DIR: another study process trains or evaluates this run: left to it"; exit 0; fi
          SAVE_DIR="${cond_dirs[$ci]}/${names[$i]}"  # with_seed adds the seed's suffix
          local extra; extra=$(awk -F'\t' -v a="$ARCH" '$1 == a {print $2}' <<< "$lines")
          if [[ -n $extra ]]; then
            log "${names[$i]}: $extra (the longest valid/test sentence and output need them)"
            MODEL_ARGS="${MODEL_ARGS:-} $extra"
          fi
          if [[ -z $seed ]]; then lengths_train_evaluate "${ks[@]}"; else with_seed "$seed" lengths_train_evaluate "${ks[@]}"; fi
        )
      done
    done
  done
}

lengths_train_evaluate() {  # lengths_train_evaluate K...: train SAVE_DIR, evaluate it on the test set and each joined
  # test set, and with CURVE its checkpoint of each update of CURVE on the test set and the largest k's
  train_main
  EVAL_SUBSET=test evaluate_main
  local k u kmax
  for k in "$@"; do (( k == 1 )) || EVAL_SUBSET="concat/k$k.test" evaluate_main; done
  [[ -n ${CURVE:-} ]] || return 0
  kmax=$(lengths_kmax "$@")
  for u in ${CURVE//,/ }; do
    EVAL_AT_UPDATE=$u EVAL_SUBSET=test evaluate_main
    (( kmax == 1 )) || EVAL_AT_UPDATE=$u EVAL_SUBSET="concat/k$kmax.test" evaluate_main
  done
}

lengths_kmax() { local k m=1; for k in "$@"; do (( k <= m )) || m=$k; done; echo "$m"; }

lengths_curve_report() {  # step 5b of lengths_main (its conds, cond_dirs, names, ks): each condition's
  # "Training length" table (lengths.md, lengths.json), and with CURVE the learning curves of all conditions
  local ci cargs=() label kmax subs=()
  for ci in "${!conds[@]}"; do
    if [[ -z ${conds[$ci]} ]]; then label="pairs alone"; else label="with joined pairs (TRAIN_CONCAT=${conds[$ci]})"; fi
    cargs+=(--condition "$label" "${cond_dirs[$ci]}")
  done
  if [[ -n ${CURVE:-} ]]; then
    kmax=$(lengths_kmax "${ks[@]}")
    subs=(--subset "1=test")
    (( kmax == 1 )) || subs+=(--subset "$kmax=concat/k$kmax.test")
    cargs+=(--points "$CURVE" "${subs[@]}" --md "$LENGTHS_DIR/curve.md" --json "$LENGTHS_DIR/curve.json" --plot-dir "$LENGTHS_DIR")
  fi
  "$PYTHON" -m fairseq_attn_reports.cli.learning_curve "${cargs[@]}" --names "${names[@]}" --seeds "${SEEDS:-}" \
    > "$LENGTHS_DIR/curve.out" || { cat "$LENGTHS_DIR/curve.out" >&2; die "the training lengths or learning curves failed"; }
  [[ -z ${CURVE:-} ]] || log "learning curves: $LENGTHS_DIR/curve.md, $LENGTHS_DIR/curve_<name>.png"
}

# lengths_report DIR DATA K...: the tables of one condition, its runs in DIR (<name>, or <name>_seed<N> for
# each of SEEDS): 4. by source length (the first seed), 5. per k (every seed; the segment-by-segment rows)
lengths_report() {
  local dir=$1 data=$2; shift 2
  local ks=("$@") runs=() first=() run_names=() name s k first_seed=
  read -r first_seed _ <<< "${SEEDS:-}"
  for name in "${names[@]}"; do
    if [[ -z $first_seed ]]; then runs+=("$dir/$name"); first+=("$dir/$name"); run_names+=("$name"); continue; fi
    for s in $SEEDS; do runs+=("$dir/${name}_seed$s"); run_names+=("$name"); done
    first+=("$dir/${name}_seed$first_seed")
  done
  mkdir -p "$dir/concat"
  # 4. the by-length table and plot, buckets beyond the training length marked
  local src_words="$data/raw/test.$SRC"
  if [[ $(words_counted_on "$SRC") == tokenised ]]; then  # no spaces between words: count the tokeniser's words
    src_words="$dir/test.words.$SRC"
    "${STEPS[@]}" tokenize --lang "$SRC" --tool "$(tokenizer_tool "$SRC")" "$data/raw/test.$SRC" "$src_words"
  fi
  "$PYTHON" -m fairseq_attn_reports.cli.results --ref "$data/raw/test.$TGT" --src "$src_words" \
    --by-length "${LENGTH_EDGES:-auto}" --train-max-len "$TRAIN_MAX_LEN" --names "${names[@]}" \
    --bs-samples "${BS_SAMPLES:-1000}" --ar-trials "${AR_TRIALS:-10000}" --no-comet-hint \
    --md "$dir/lengths.md" --json "$dir/lengths.json" --plot "$dir/lengths.png" \
    "${first[@]}" > "$dir/results.out" || { cat "$dir/results.out" >&2; die "fairseq-attn-results failed"; }
  [[ -z $first_seed ]] || echo "(by source length: seed $first_seed of each system; per k below: seeds $SEEDS)" >> "$dir/results.out"
  # 5. per k: the runs' evaluations of the joined test set, the same table and tests, and lengths.json's "concat"
  local per_k=()
  for k in "${ks[@]}"; do
    local sub="concat/k$k.test" ref="$data/raw/concat/k$k.test.$TGT"
    src_words="$data/raw/$sub.$SRC"
    if (( k == 1 )); then
      if [[ -z $first_seed ]]; then per_k+=(--k "1=$dir/lengths.json"); continue; fi  # the table above
      sub=test; ref="$data/raw/test.$TGT"; src_words="$data/raw/test.$SRC"
    fi
    if [[ $(words_counted_on "$SRC") == tokenised ]]; then
      src_words="$dir/concat/k$k.words.$SRC"
      "${STEPS[@]}" tokenize --lang "$SRC" --tool "$(tokenizer_tool "$SRC")" "$data/raw/$sub.$SRC" "$src_words"
    fi
    "$PYTHON" -m fairseq_attn_reports.cli.results --ref "$ref" --src "$src_words" --names "${run_names[@]}" \
      --bs-samples "${BS_SAMPLES:-1000}" --ar-trials "${AR_TRIALS:-10000}" --no-comet-hint --json "$dir/concat/k$k.json" \
      "${runs[@]}" > "$dir/concat/k$k.out" || { cat "$dir/concat/k$k.out" >&2; die "fairseq-attn-results failed on k = $k"; }
    per_k+=(--k "$k=$dir/concat/k$k.json")
  done
  "$PYTHON" -m fairseq_attn_reports.cli.by_concat --study-json "$dir/lengths.json" \
    --study-md "$dir/lengths.md" --info "$dir/concat/concat.json" "${per_k[@]}" \
    --segmentwise "$dir/concat/segmentwise" --prepare "$data/prepare.json" --plot "$dir/lengths_concat.png" \
    >> "$dir/results.out" || die "the per-k table failed"
  cat "$dir/results.out"
  log "tables: $dir/lengths.md, plots: $dir/lengths.png (by source length), $dir/lengths_concat.png (by k)"
}
