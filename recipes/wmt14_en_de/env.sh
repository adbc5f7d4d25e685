# WMT14 English-German (Vaswani et al., 2017; CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-en}; TGT=${TGT:-de}
JOINT=${JOINT:-1}              # joint 32K BPE, joined dictionary, shared embeddings
LENPEN=${LENPEN:-0.6}          # beam 4, length penalty 0.6 (Vaswani et al.)
TOK_BLEU=${TOK_BLEU:-1}        # also tokenised BLEU with compound splitting, as the papers report

# The official data, as fairseq's examples/translation/prepare-wmt14en2de.sh:
# Europarl v7 + Common Crawl + News Commentary v9 (4.5M pairs); dev newstest2013,
# test newstest2014 (the "full" version), both through sacreBLEU.
fetch_corpora() {
  local dl="$WORK/downloads"; mkdir -p "$dl"
  download http://statmt.org/wmt13/training-parallel-europarl-v7.tgz "$dl/training-parallel-europarl-v7.tgz"
  download http://statmt.org/wmt13/training-parallel-commoncrawl.tgz "$dl/training-parallel-commoncrawl.tgz"
  download http://statmt.org/wmt14/training-parallel-nc-v9.tgz "$dl/training-parallel-nc-v9.tgz"
  concat_tgz_corpora "$dl" training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v9.de-en
  sacrebleu_testset wmt13 "$SRC-$TGT" valid
  sacrebleu_testset wmt14/full "$SRC-$TGT" test
}
