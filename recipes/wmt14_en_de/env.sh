# WMT14 English-German (Vaswani et al., 2017; CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-en}; TGT=${TGT:-de}
JOINT=${JOINT:-1}              # joint 32K BPE, joined dictionary, shared embeddings
LENPEN=${LENPEN:-0.6}          # beam 4, length penalty 0.6 (Vaswani et al.)
PAPER_METRIC=${PAPER_METRIC:-tokenized_bleu}  # Vaswani/CSAN: tokenised BLEU with compound splitting
STATMT_URL=${STATMT_URL:-http://statmt.org}   # a mirror with the same layout may be given

# The official data, as fairseq's examples/translation/prepare-wmt14en2de.sh:
# Europarl v7 + Common Crawl + News Commentary v9 (4.5M pairs); dev newstest2013,
# test newstest2014 (the "full" version), both through sacreBLEU.
WMT14_ARCHIVES="wmt13/training-parallel-europarl-v7.tgz wmt13/training-parallel-commoncrawl.tgz wmt14/training-parallel-nc-v9.tgz"

corpus_settings() {  # what the official training data is made from (stage fingerprint)
  echo --set; echo "STATMT_URL=$STATMT_URL"; echo --set; echo "ARCHIVES=$WMT14_ARCHIVES"
}

fetch_train() {
  local a dl="$WORK/downloads"
  for a in $WMT14_ARCHIVES; do fetch_archive "$STATMT_URL/$a"; done
  concat_parts \
    "europarl-v7:$dl/training-parallel-europarl-v7.tgz.d/training/europarl-v7.de-en.$SRC:$dl/training-parallel-europarl-v7.tgz.d/training/europarl-v7.de-en.$TGT" \
    "commoncrawl:$dl/training-parallel-commoncrawl.tgz.d/commoncrawl.de-en.$SRC:$dl/training-parallel-commoncrawl.tgz.d/commoncrawl.de-en.$TGT" \
    "news-commentary-v9:$dl/training-parallel-nc-v9.tgz.d/training/news-commentary-v9.de-en.$SRC:$dl/training-parallel-nc-v9.tgz.d/training/news-commentary-v9.de-en.$TGT"
  rm -rf "$dl"/*.d
}

fetch_split() {  # valid / test through sacreBLEU
  case $1 in valid) sacrebleu_testset wmt13 "$SRC-$TGT" valid;; test) sacrebleu_testset wmt14/full "$SRC-$TGT" test;; esac
}
