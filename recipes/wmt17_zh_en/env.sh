# WMT17 Chinese-English (CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-zh}; TGT=${TGT:-en}
JOINT=${JOINT:-0}              # separate 32K BPE per language, separate dictionaries and embeddings
LENPEN=${LENPEN:-1.0}

# WMT17 Zh-En training data (~20M pairs): News Commentary v12 is downloaded; the UN
# Parallel Corpus v1.0 and CWMT need a (free) registration, so they are given as local
# files: EXTRA_TRAIN_PAIRS="un.zh:un.en cwmt.zh:cwmt.en ...". dev newsdev2017, test newstest2017.
fetch_corpora() {
  local dl="$WORK/downloads"; mkdir -p "$dl"
  [[ -n "${EXTRA_TRAIN_PAIRS:-}" ]] || log "warning: EXTRA_TRAIN_PAIRS unset: News Commentary only (~0.2M pairs, not the paper's 20M)"
  download http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz "$dl/training-parallel-nc-v12.tgz"
  concat_tgz_corpora "$dl" training/news-commentary-v12.zh-en
  for l in "$SRC" "$TGT"; do cp "$WORK/raw/train.$l" "$WORK/raw/train.$l.tmp"; done
  append_local_pairs "${EXTRA_TRAIN_PAIRS:-}"
  for l in "$SRC" "$TGT"; do mv "$WORK/raw/train.$l.tmp" "$WORK/raw/train.$l"; done
  sacrebleu_testset wmt17/dev "$SRC-$TGT" valid
  sacrebleu_testset wmt17 "$SRC-$TGT" test
}
