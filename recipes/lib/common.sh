# Shared steps of every recipe: sourced by recipes/*/{prepare,train,evaluate}.sh.
#
# A recipe sets SRC, TGT, RECIPE_DIR and its corpus/hyper-parameter defaults,
# defines fetch_corpora (writes $WORK/raw/{train,valid,test}.{$SRC,$TGT}), then
# calls prepare_main / train_main / evaluate_main. Every variable below can be
# overridden from the environment; see docs/recipes.md.
#
# Conventions: every step writes to a temporary name and renames when complete,
# and marks itself done in $WORK/.done/, so re-running resumes where it stopped.

set -euo pipefail

LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON=${PYTHON:-python3}
STEPS="$PYTHON $LIB_DIR/mt_steps.py"

log() { echo "[$(basename "${RECIPE_DIR:-recipe}") $(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 2; }

# stage NAME CMD...: run CMD unless $WORK/.done/NAME exists; mark it done afterwards.
stage() {
  local name=$1; shift
  if [[ -e "$WORK/.done/$name" ]]; then log "$name: done before, skipped"; return 0; fi
  log "$name"
  "$@" || die "step '$name' failed (re-run the script to resume from it)"
  mkdir -p "$WORK/.done" && touch "$WORK/.done/$name"
}

recipe_defaults() {
  WORK=${WORK:-$RECIPE_DIR/work}
  BPE_TOOL=${BPE_TOOL:-subword-nmt}          # or sentencepiece
  BPE_MERGES=${BPE_MERGES:-32000}            # merges (subword-nmt) / vocabulary (sentencepiece)
  JOINT=${JOINT:-1}                          # joint BPE + joined dictionary + shared embeddings
  CLEAN_MIN=${CLEAN_MIN:-1}; CLEAN_MAX=${CLEAN_MAX:-250}; CLEAN_RATIO=${CLEAN_RATIO:-1.5}
  WORKERS=${WORKERS:-$(nproc 2>/dev/null || echo 1)}
  DATA=${DATA:-$WORK/data-bin}
  USER_DIR=$($PYTHON -c 'import importlib.util as u; print(u.find_spec("fairseq_attn_plugins").submodule_search_locations[0])' 2>/dev/null) \
    || die "fairseq_attn_plugins is not importable by $PYTHON; run 'bash scripts/setup_env.sh' and '. .venv/bin/activate'"
}

tokenizer_tool() {  # the tokeniser of a language: TOKENIZER_<lang> overrides
  local var="TOKENIZER_${1^^}"
  if [[ -n "${!var:-}" ]]; then echo "${!var}"; return; fi
  case $1 in zh) echo jieba;; ja) echo mecab;; *) echo moses;; esac
}

# download URL DEST [SHA256]: resumable (curl -C -), verified, atomic. Without a
# known checksum the first complete download's sha256 is recorded in
# $WORK/downloads.sha256 and later downloads are checked against it.
download() {
  local url=$1 dest=$2 sum=${3:-}
  local sums="$WORK/downloads.sha256" name; name=$(basename "$dest")
  if [[ -z "$sum" && -f "$sums" ]]; then sum=$(awk -v n="$name" '$2==n {print $1}' "$sums"); fi
  if [[ ! -f "$dest" ]]; then
    command -v curl >/dev/null || die "curl is needed to download $url (or give the corpus as local files)"
    log "downloading $url"
    curl -fL --retry 5 -C - -o "$dest.part" "$url" || die "download of $url failed; re-run to resume, or give local files"
    mv "$dest.part" "$dest"
  fi
  local got; got=$(sha256sum "$dest" | cut -d' ' -f1)
  if [[ -n "$sum" && "$got" != "$sum" ]]; then
    mv "$dest" "$dest.bad"; die "$dest: sha256 $got, expected $sum (moved to $dest.bad; re-run to download again)"
  fi
  [[ -n "$sum" ]] || echo "$got  $name" >> "$sums"
}

# sacrebleu_testset TEST LANGPAIR SPLIT: an official dev/test set through sacreBLEU (checksummed by sacreBLEU)
sacrebleu_testset() {
  local test=$1 pair=$2 split=$3
  $PYTHON -m sacrebleu -t "$test" -l "$pair" --echo src > "$WORK/raw/$split.$SRC.tmp" || die "sacrebleu could not fetch $test"
  $PYTHON -m sacrebleu -t "$test" -l "$pair" --echo ref > "$WORK/raw/$split.$TGT.tmp" || die "sacrebleu could not fetch $test"
  mv "$WORK/raw/$split.$SRC.tmp" "$WORK/raw/$split.$SRC"; mv "$WORK/raw/$split.$TGT.tmp" "$WORK/raw/$split.$TGT"
}

copy_local() {  # copy_local FILE DEST: atomic copy of a user-given corpus file
  cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
}

# ---------------------------------------------------------------- prepare
prepare_main() {
  recipe_defaults
  mkdir -p "$WORK"/{raw,tok,bpe}
  # 1. everything checked before any long work
  local tools=(fairseq sacrebleu "$BPE_TOOL") l
  for l in "$SRC" "$TGT"; do tools+=("$(tokenizer_tool "$l" | sed 's/moses-plain/moses/')"); done
  $STEPS check-tools "${tools[@]}" || exit 2
  local split side var have_local=0
  for split in TRAIN VALID TEST; do for side in SRC TGT; do
    var="${split}_${side}"
    if [[ -n "${!var:-}" ]]; then
      have_local=1
      [[ -f "${!var}" ]] || die "$var=${!var}: no such file. Give an existing file, or unset $var to download the official corpus."
    fi
  done; done
  # 2. raw corpora: local files where given, the official ones otherwise
  if [[ $have_local == 1 ]]; then
    for split in train valid test; do
      local s="${split^^}_SRC" t="${split^^}_TGT"
      [[ -n "${!s:-}" && -n "${!t:-}" ]] || die "local corpus: set both ${s} and ${t} (or none of the six *_SRC/*_TGT variables)"
    done
    stage raw prepare_local_raw
  else
    stage raw fetch_corpora
  fi
  for split in train valid test; do
    [[ -s "$WORK/raw/$split.$SRC" && -s "$WORK/raw/$split.$TGT" ]] || die "missing $WORK/raw/$split.{$SRC,$TGT}"
  done
  # 3. tokenise, 4. (joint) BPE, 5. clean by length and ratio, 6. binarise
  for l in "$SRC" "$TGT"; do
    stage "tok.$l" $STEPS tokenize --lang "$l" --tool "$(tokenizer_tool "$l")" --workers "$WORKERS" \
      "$WORK/raw/train.$l" "$WORK/tok/train.$l" "$WORK/raw/valid.$l" "$WORK/tok/valid.$l" \
      "$WORK/raw/test.$l" "$WORK/tok/test.$l"
  done
  if [[ $JOINT == 1 ]]; then
    stage bpe.learn $STEPS bpe-learn --tool "$BPE_TOOL" --merges "$BPE_MERGES" \
      "$WORK/tok/train.$SRC" "$WORK/tok/train.$TGT" --output "$WORK/bpe/codes"
  else
    for l in "$SRC" "$TGT"; do
      stage "bpe.learn.$l" $STEPS bpe-learn --tool "$BPE_TOOL" --merges "$BPE_MERGES" "$WORK/tok/train.$l" \
        --output "$WORK/bpe/codes.$l"
    done
  fi
  for l in "$SRC" "$TGT"; do
    local codes="$WORK/bpe/codes"; [[ $JOINT == 1 ]] || codes="$WORK/bpe/codes.$l"
    stage "bpe.$l" $STEPS bpe-apply --tool "$BPE_TOOL" --codes "$codes" "$WORK/tok/train.$l" "$WORK/bpe/train.$l" \
      "$WORK/tok/valid.$l" "$WORK/bpe/valid.$l" "$WORK/tok/test.$l" "$WORK/bpe/test.$l"
  done
  stage clean $STEPS clean --min "$CLEAN_MIN" --max "$CLEAN_MAX" --ratio "$CLEAN_RATIO" \
    --src-in "$WORK/bpe/train.$SRC" --tgt-in "$WORK/bpe/train.$TGT" \
    --src-out "$WORK/bpe/train.clean.$SRC" --tgt-out "$WORK/bpe/train.clean.$TGT"
  stage binarise binarise
  log "prepared: $DATA"
}

prepare_local_raw() {
  local split l
  for split in train valid test; do
    local s="${split^^}_SRC" t="${split^^}_TGT"
    local ns nt; ns=$(wc -l < "${!s}"); nt=$(wc -l < "${!t}")
    [[ $ns == "$nt" ]] || die "${!s} has $ns lines but ${!t} has $nt"
    copy_local "${!s}" "$WORK/raw/$split.$SRC"; copy_local "${!t}" "$WORK/raw/$split.$TGT"
  done
}

binarise() {
  local joined=(); [[ $JOINT == 1 ]] && joined=(--joined-dictionary)
  rm -rf "$DATA.tmp"
  $PYTHON -m fairseq_cli.preprocess --source-lang "$SRC" --target-lang "$TGT" \
    --trainpref "$WORK/bpe/train.clean" --validpref "$WORK/bpe/valid" --testpref "$WORK/bpe/test" \
    --destdir "$DATA.tmp" "${joined[@]}" --workers "$WORKERS" ${PREPROCESS_ARGS:-} > "$WORK/preprocess.log" 2>&1 \
    || { tail -5 "$WORK/preprocess.log" >&2; rm -rf "$DATA.tmp"; return 1; }
  rm -rf "$DATA"; mv "$DATA.tmp" "$DATA"
}

# ---------------------------------------------------------------- train
detect_gpus() {
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; else echo 0; fi
}

train_main() {
  recipe_defaults
  ARCH=${ARCH:-transformer_attn_wmt_en_de}
  $STEPS check-arch "$ARCH" || exit 2
  [[ -e "$WORK/.done/binarise" && -f "$DATA/dict.$SRC.txt" ]] || die "no binarised data in $DATA: run prepare.sh first"
  SAVE_DIR=${SAVE_DIR:-$WORK/runs/$ARCH}
  NGPUS=${NGPUS:-$(detect_gpus)}
  NNODES=${NNODES:-1}
  PAPER_GPUS=${PAPER_GPUS:-8}               # the papers' 8 GPUs: keep their effective batch
  local workers
  if (( NGPUS == 0 )); then workers=${CPU_WORKERS:-1}; else workers=$(( NGPUS * NNODES )); fi
  if [[ -z "${UPDATE_FREQ:-}" ]]; then
    UPDATE_FREQ=$(( (PAPER_GPUS + workers - 1) / workers ))
    (( PAPER_GPUS % workers == 0 )) || log "warning: $workers workers do not divide $PAPER_GPUS; --update-freq $UPDATE_FREQ"
  fi
  local big=0; [[ $ARCH == *_big ]] && big=1
  MAX_TOKENS=${MAX_TOKENS:-4096}
  LR=${LR:-$( ((big)) && echo 5e-4 || echo 7e-4 )}
  DROPOUT=${DROPOUT:-$( ((big)) && echo 0.3 || echo 0.1 )}
  MAX_UPDATE=${MAX_UPDATE:-$( ((big)) && echo 300000 || echo 100000 )}
  WARMUP=${WARMUP:-4000}
  SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-1000}
  FP16=${FP16:-$( ((NGPUS > 0)) && echo 1 || echo 0 )}
  SEED=${SEED:-1}
  mkdir -p "$SAVE_DIR"
  local args=("$DATA" --user-dir "$USER_DIR" --arch "$ARCH"
    --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --dropout "$DROPOUT" --weight-decay 0.0
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --save-dir "$SAVE_DIR" --save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates 20
    --log-format json --log-interval "${LOG_INTERVAL:-100}" --seed "$SEED")
  [[ $JOINT == 1 ]] && args+=(--share-all-embeddings)
  [[ $FP16 == 1 ]] && args+=(--fp16)
  # shellcheck disable=SC2206
  args+=(${MODEL_ARGS:-} ${EXTRA_ARGS:-})
  local port=${MASTER_PORT:-$(( 20000 + RANDOM % 20000 ))}
  local launch
  if (( NGPUS == 0 )); then
    args+=(--cpu)
    if (( workers > 1 )); then
      # CPU data parallel (gloo): one process per rank through fairseq's own
      # --distributed-init-method/--distributed-rank (torchrun's env:// path in fairseq
      # 0.12 divides by torch.cuda.device_count(), which is 0 on CPU)
      # and fairseq's legacy_ddp (its pytorch_ddp wrapper passes CUDA device_ids even on CPU)
      args+=(--distributed-backend gloo --ddp-backend legacy_ddp --distributed-world-size "$workers" --distributed-no-spawn
             --distributed-init-method "tcp://127.0.0.1:$port")
      CPU_RANKS=$workers
    fi
    launch=("$PYTHON" -m fairseq_cli.train)
  elif (( NNODES > 1 )) && [[ -n "${SLURM_JOB_ID:-}" ]]; then
    # one task per node under srun: fairseq infers the rendezvous from SLURM's variables
    args+=(--distributed-port "$port" --distributed-world-size "$workers")
    launch=("$PYTHON" -m fairseq_cli.train)
  elif (( NNODES > 1 )); then
    : "${NODE_RANK:?set NODE_RANK (0..NNODES-1) on every node}" "${MASTER_ADDR:?set MASTER_ADDR to node 0}"
    launch=(torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR"
            --master_port "$port" --nproc_per_node "$NGPUS" -m fairseq_cli.train)
  else  # one node: fairseq spawns one process per GPU itself
    args+=(--distributed-world-size "$NGPUS")
    launch=("$PYTHON" -m fairseq_cli.train)
  fi
  [[ -f "$SAVE_DIR/checkpoint_last.pt" ]] && log "resuming from $SAVE_DIR/checkpoint_last.pt"
  log "ARCH=$ARCH workers=$workers (NGPUS=$NGPUS NNODES=$NNODES) max_tokens=$MAX_TOKENS update_freq=$UPDATE_FREQ fp16=$FP16"
  echo "\$ ${launch[*]} ${args[*]}" >> "$SAVE_DIR/train.log"
  local rc=0 r pids=()
  if [[ -n "${CPU_RANKS:-}" ]]; then  # ranks 1.. in the background, each with its own log
    for (( r = 1; r < CPU_RANKS; r++ )); do
      "${launch[@]}" "${args[@]}" --distributed-rank "$r" >> "$SAVE_DIR/train.rank$r.log" 2>&1 &
      pids+=($!)
    done
    trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
    args+=(--distributed-rank 0)
  fi
  set +e
  "${launch[@]}" "${args[@]}" 2>&1 | tee -a "$SAVE_DIR/train.log"
  rc=${PIPESTATUS[0]}
  set -e
  (( rc == 0 )) || kill "${pids[@]}" 2>/dev/null || true  # a rank without rank 0 would wait forever
  for r in "${pids[@]}"; do wait "$r" || rc=$(( rc ? rc : $? )); done
  trap - EXIT
  (( rc == 0 )) || die "training failed (exit $rc); see $SAVE_DIR/train.log. Re-running resumes from checkpoint_last.pt"
  log "trained: $SAVE_DIR"
}

# ---------------------------------------------------------------- evaluate
evaluate_main() {
  recipe_defaults
  ARCH=${ARCH:-transformer_attn_wmt_en_de}
  SAVE_DIR=${SAVE_DIR:-$WORK/runs/$ARCH}
  N_AVG=${N_AVG:-5}; BEAM=${BEAM:-4}; LENPEN=${LENPEN:-1.0}
  SACREBLEU_TOK=${SACREBLEU_TOK:-13a}; TOK_BLEU=${TOK_BLEU:-0}
  EVAL_SUBSET=${EVAL_SUBSET:-test}           # or valid (the CSAN paper's Figure 2)
  NGPUS=${NGPUS:-$(detect_gpus)}
  [[ -f "$SAVE_DIR/checkpoint_last.pt" ]] || die "no checkpoints in $SAVE_DIR: run train.sh (ARCH=$ARCH) first"
  [[ -f "$WORK/raw/$EVAL_SUBSET.$TGT" ]] || die "no $EVAL_SUBSET reference $WORK/raw/$EVAL_SUBSET.$TGT: run prepare.sh first"
  local ckpt="$SAVE_DIR/averaged_last$N_AVG.pt"
  $STEPS average "$SAVE_DIR" --n "$N_AVG" --output "$ckpt"
  local cpu=(); (( NGPUS > 0 )) || cpu=(--cpu)
  local rm_bpe=--remove-bpe; [[ $BPE_TOOL == sentencepiece ]] && rm_bpe=--remove-bpe=sentencepiece
  log "generating (beam $BEAM, lenpen $LENPEN)"
  # --required-batch-size-multiple 1: fairseq 0.12 silently drops a final batch smaller than the multiple
  $PYTHON -m fairseq_cli.generate "$DATA" --user-dir "$USER_DIR" --path "$ckpt" --gen-subset "$EVAL_SUBSET" \
    --beam "$BEAM" --lenpen "$LENPEN" "$rm_bpe" --max-tokens "${GEN_MAX_TOKENS:-8000}" --num-workers 0 --required-batch-size-multiple 1 "${cpu[@]}" \
    ${GEN_ARGS:-} > "$SAVE_DIR/generate.out.tmp" 2> "$SAVE_DIR/generate.err" \
    || { tail -5 "$SAVE_DIR/generate.err" >&2; die "fairseq-generate failed; see $SAVE_DIR/generate.err"; }
  mv "$SAVE_DIR/generate.out.tmp" "$SAVE_DIR/generate.out"
  local n; n=$(wc -l < "$WORK/raw/$EVAL_SUBSET.$TGT")
  $STEPS hyps "$SAVE_DIR/generate.out" --n "$n" --output "$SAVE_DIR/hyp.tok.txt"
  $STEPS detok --lang "$TGT" "$SAVE_DIR/hyp.tok.txt" "$SAVE_DIR/hyp.txt"
  local tokargs=()
  if [[ $TOK_BLEU == 1 ]]; then  # tokenised BLEU with compound splitting, as the papers report for En-De
    $STEPS tokenize --lang "$TGT" --tool moses-plain "$SAVE_DIR/hyp.txt" "$SAVE_DIR/hyp.tokbleu.txt" \
      "$WORK/raw/$EVAL_SUBSET.$TGT" "$SAVE_DIR/ref.tokbleu.txt"
    $STEPS split-compounds "$SAVE_DIR/hyp.tokbleu.txt" "$SAVE_DIR/hyp.tokbleu.txt" \
      "$SAVE_DIR/ref.tokbleu.txt" "$SAVE_DIR/ref.tokbleu.txt"
    tokargs=(--tok-hyp "$SAVE_DIR/hyp.tokbleu.txt" --tok-ref "$SAVE_DIR/ref.tokbleu.txt")
  fi
  $STEPS score --hyp "$SAVE_DIR/hyp.txt" --ref "$WORK/raw/$EVAL_SUBSET.$TGT" --tokenize "$SACREBLEU_TOK" "${tokargs[@]}" \
    --extra "{\"arch\": \"$ARCH\", \"checkpoint\": \"$ckpt\", \"beam\": $BEAM, \"lenpen\": $LENPEN}" \
    --output "$SAVE_DIR/scores.json"
  log "scores: $SAVE_DIR/scores.json; compare runs: fairseq-attn-results --ref $WORK/raw/test.$TGT RUN_DIRS..."
}

# concat_tgz_corpora DL_DIR PREFIX...: extract the downloaded archives and concatenate
# PREFIX.$SRC / PREFIX.$TGT (paths inside the archives) into $WORK/raw/train.*
concat_tgz_corpora() {
  local dl=$1; shift
  local ex="$dl/extracted" a p
  rm -rf "$ex.tmp"; mkdir -p "$ex.tmp"
  for a in "$dl"/*.tgz "$dl"/*.tar.gz; do [[ -f $a ]] && tar -xzf "$a" -C "$ex.tmp"; done
  for p in "$@"; do
    [[ -f "$ex.tmp/$p.$SRC" && -f "$ex.tmp/$p.$TGT" ]] || die "archive member $p.{$SRC,$TGT} not found in $dl"
  done
  local l
  for l in "$SRC" "$TGT"; do
    for p in "$@"; do cat "$ex.tmp/$p.$l"; done > "$WORK/raw/train.$l.tmp"
  done
  for l in "$SRC" "$TGT"; do mv "$WORK/raw/train.$l.tmp" "$WORK/raw/train.$l"; done
  rm -rf "$ex.tmp"
}

# append_local_pairs "a.src:a.tgt b.src:b.tgt": add user-given parallel files to the training data
append_local_pairs() {
  local pair s t
  for pair in $1; do
    s=${pair%%:*}; t=${pair#*:}
    [[ -f $s && -f $t ]] || die "EXTRA_TRAIN_PAIRS: $s or $t does not exist"
    [[ $(wc -l < "$s") == "$(wc -l < "$t")" ]] || die "EXTRA_TRAIN_PAIRS: $s and $t differ in length"
  done
  for pair in $1; do
    s=${pair%%:*}; t=${pair#*:}
    cat "$s" >> "$WORK/raw/train.$SRC.tmp"; cat "$t" >> "$WORK/raw/train.$TGT.tmp"
  done
}
