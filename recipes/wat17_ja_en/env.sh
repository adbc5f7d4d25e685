# WAT17 ASPEC Japanese-English (CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-ja}; TGT=${TGT:-en}
JOINT=${JOINT:-0}              # separate BPE, dictionaries and embeddings
LENPEN=${LENPEN:-1.0}
ASPEC_TRAIN_LINES=${ASPEC_TRAIN_LINES:-2000000}   # the first 2M pairs of train-1/2 (as WAT baselines)

# ASPEC needs a licence (https://jipsti.jst.go.jp/aspec/): give its folder as ASPEC_DIR
# (ASPEC-JE with train/train-{1,2}.txt, dev/dev.txt, test/test.txt; fields ' ||| ').
fetch_corpora() {
  [[ -n "${ASPEC_DIR:-}" ]] || die "ASPEC is licensed and cannot be downloaded: set ASPEC_DIR=/path/to/ASPEC-JE (or give TRAIN_SRC=... local files)"
  local f
  for f in train/train-1.txt train/train-2.txt dev/dev.txt test/test.txt; do
    [[ -f "$ASPEC_DIR/$f" ]] || die "ASPEC_DIR=$ASPEC_DIR: missing $f"
  done
  $STEPS extract "$ASPEC_DIR/train/train-1.txt" "$ASPEC_DIR/train/train-2.txt" --max-lines "$ASPEC_TRAIN_LINES" \
    --src-out "$WORK/raw/train.$SRC" --tgt-out "$WORK/raw/train.$TGT"
  $STEPS extract "$ASPEC_DIR/dev/dev.txt" --src-out "$WORK/raw/valid.$SRC" --tgt-out "$WORK/raw/valid.$TGT"
  $STEPS extract "$ASPEC_DIR/test/test.txt" --src-out "$WORK/raw/test.$SRC" --tgt-out "$WORK/raw/test.$TGT"
}
