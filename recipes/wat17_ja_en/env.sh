# WAT17 ASPEC Japanese-English (CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-ja}; TGT=${TGT:-en}
JOINT=${JOINT:-0}              # separate BPE and dictionaries; tied decoder embeddings
LENPEN=${LENPEN:-1.0}
PAPER_METRIC=${PAPER_METRIC:-tokenized_bleu}  # not stated by the paper; see README.md
ASPEC_TRAIN_LINES=${ASPEC_TRAIN_LINES:-2000000}   # the first 2M pairs of train-1/2 (as WAT baselines)

# ASPEC needs a licence (https://jipsti.jst.go.jp/aspec/): give its folder as ASPEC_DIR
# (ASPEC-JE with train/train-{1,2}.txt, dev/dev.txt, test/test.txt; fields ' ||| ').
ASPEC_FILES="train/train-1.txt train/train-2.txt dev/dev.txt test/test.txt"

check_corpus_inputs() {
  [[ -n "${ASPEC_DIR:-}" ]] || die "ASPEC is licensed and cannot be downloaded: set ASPEC_DIR=/path/to/ASPEC-JE (or give TRAIN_SRC=... local files)"
  local f
  for f in $ASPEC_FILES; do
    [[ -f "$ASPEC_DIR/$f" ]] || die "ASPEC_DIR=$ASPEC_DIR: missing $f"
  done
}

corpus_settings() {
  local f
  echo --set; echo "ASPEC_TRAIN_LINES=$ASPEC_TRAIN_LINES"
  for f in $ASPEC_FILES; do echo --in; echo "$ASPEC_DIR/$f"; done
}

fetch_train() {
  "${STEPS[@]}" extract "$ASPEC_DIR/train/train-1.txt" "$ASPEC_DIR/train/train-2.txt" --max-lines "$ASPEC_TRAIN_LINES" \
    --src-out "$WORK/raw/train.$SRC" --tgt-out "$WORK/raw/train.$TGT"
  "${STEPS[@]}" parts-record --part "aspec-train-1+2=$WORK/raw/train.$SRC" --record "$WORK/raw/train.parts.json"
}

fetch_split() {
  case $1 in
    valid) "${STEPS[@]}" extract "$ASPEC_DIR/dev/dev.txt" --src-out "$WORK/raw/valid.$SRC" --tgt-out "$WORK/raw/valid.$TGT";;
    # test.txt: field-document ID ||| sentence ID ||| ja ||| en: the paper is the document (CONCAT of lengths.sh)
    test) "${STEPS[@]}" extract "$ASPEC_DIR/test/test.txt" --src-out "$WORK/raw/test.$SRC" --tgt-out "$WORK/raw/test.$TGT" \
            --docs-field 0 --docs-out "$WORK/raw/test.docs";;
  esac
}
