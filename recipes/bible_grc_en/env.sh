# Greek-English New Testament (SBLGNT Greek, BSB English; the bible-alignments package, CC-BY):
# a small real language pair that is read offline, for the train-short / test-long study
# (lengths.sh) and quick checks. Settings shared by the scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-grc}; TGT=${TGT:-en}
JOINT=${JOINT:-0}              # Greek and English scripts share nothing: separate BPE and dictionaries
LENPEN=${LENPEN:-1.0}
PAPER_METRIC=${PAPER_METRIC:-bleu}
STUDY_TRAIN_MAX_LEN=${STUDY_TRAIN_MAX_LEN:-20}  # lengths.sh: train on verses up to 20 Greek words (70 % of them)

check_corpus_inputs() {
  [[ $SRC == grc && $TGT == en ]] || die "the bible corpus is Greek-English: SRC=grc TGT=en (got SRC=$SRC TGT=$TGT)"
  "${STEPS[@]}" bible-corpus --check >/dev/null
}

corpus_settings() {  # the package version (its data is what the corpus is made from) and the split rule
  echo --set; echo "CORPUS=$("${STEPS[@]}" bible-corpus --check)"
  echo --set; echo "SPLIT=by chapter"
}

RECIPE_TRAIN_DOCS=1  # fetch_train writes raw/train.docs
fetch_train() {
  "${STEPS[@]}" bible-corpus --out "$WORK/downloads/bible" --src-lang "$SRC" --tgt-lang "$TGT" >/dev/null
  cp "$WORK/downloads/bible/train.$SRC" "$WORK/raw/train.$SRC"; cp "$WORK/downloads/bible/train.$TGT" "$WORK/raw/train.$TGT"
  cp "$WORK/downloads/bible/train.docs" "$WORK/raw/train.docs"  # the chapter of each verse (TRAIN_CONCAT joins verses of one chapter)
  "${STEPS[@]}" parts-record --part "sblgnt-bsb=$WORK/raw/train.$SRC" --record "$WORK/raw/train.parts.json"
}

fetch_split() {  # valid / test: written with the training part (one split of the chapters), with
  # the verse id (SPLIT.ids) and the chapter (SPLIT.docs, the documents of CONCAT) of each line,
  # and the gold word alignments (SPLIT.align, Pharaoh: docs/howto/alignment.md)
  local f
  for f in "$SRC" "$TGT" ids docs align; do cp "$WORK/downloads/bible/$1.$f" "$WORK/raw/$1.$f"; done
}

# The CPU preset: a corpus of 6,667 verses trains a small model in minutes on CPU. Its defaults
# (BPE_MERGES, PAPER_GPUS, MAX_TOKENS, MAX_UPDATE, LR, WARMUP, DROPOUT, SAVE_INTERVAL_UPDATES,
# LABEL_SMOOTHING, MODEL_ARGS; each overridable from the environment) replace the papers' 8-GPU base
# setup: the profile "bible" of fairseq_attn_recipes/profiles.py
profile bible
