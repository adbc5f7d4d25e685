# WMT17 Chinese-English (CSAN, Yang et al., 2019): settings shared by the three scripts.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$RECIPE_DIR/../lib/common.sh"
SRC=${SRC:-zh}; TGT=${TGT:-en}
JOINT=${JOINT:-0}              # separate 32K BPE per language, separate dictionaries; tied decoder embeddings
LENPEN=${LENPEN:-1.0}
PAPER_METRIC=${PAPER_METRIC:-tokenized_bleu}  # not stated by the paper; see README.md

# WMT17 Zh-En training data, the parts the public loaders (tensorflow_datasets and Hugging Face
# `wmt17`, config zh-en) assemble: News Commentary v12 (statmt.org), the UN Parallel Corpus
# v1.0 and the six CWMT corpora (the mirrors those loaders download from). Dev newsdev2017,
# test newstest2017 through sacreBLEU.
#   ZHEN_PARTS      the parts to use (default: all); leaving one out needs ALLOW_PARTIAL_DATA=1
#   URL_<part>      another address for a part; set it empty for a part you may only get under a
#                   licence, then give the files as LOCAL_<part>=a.zh:a.en (or ALLOW_PARTIAL_DATA=1)
#   LOCAL_<part>    aligned local files for a part instead of the download (globs allowed)
#   EXTRA_TRAIN_PAIRS="a.zh:a.en ..."  further parallel data, appended
STATMT_DATA_URL=${STATMT_DATA_URL:-http://data.statmt.org}
HF_WMT_URL=${HF_WMT_URL:-https://huggingface.co/datasets/wmt}
ZHEN_PARTS_ALL="nc12 un casia2015 casict2011 casict2015 datum2015 datum2017 neu2017"
ZHEN_PARTS=${ZHEN_PARTS:-$ZHEN_PARTS_ALL}

part_url() {
  local var="URL_$1"
  if [[ -n ${!var+set} ]]; then echo "${!var}"; return; fi
  case $1 in
    nc12) echo "$STATMT_DATA_URL/wmt17/translation-task/training-parallel-nc-v12.tgz";;
    un) echo "$HF_WMT_URL/uncorpus/resolve/main-zip/UNv1.0.en-zh.zip";;
    *) echo "$HF_WMT_URL/wmt18/resolve/main/cwmt-wmt/$1.zip";;
  esac
}

part_members() {  # PART DIR: the part's zh and en files inside its unpacked archive (globs)
  case $1 in
    nc12) echo "$2/training/news-commentary-v12.zh-en.zh" "$2/training/news-commentary-v12.zh-en.en";;
    un) echo "$2/en-zh/UNv1.0.en-zh.zh" "$2/en-zh/UNv1.0.en-zh.en";;
    *) echo "$2/$1/*_c[hn].txt" "$2/$1/*_en.txt";;
  esac
}

part_local() { local var="LOCAL_$1"; echo "${!var:-}"; }

# the parts that will be missing, each with the reason (one a line)
zhen_missing_parts() {
  local p
  [[ $SRC == zh && $TGT == en || $SRC == en && $TGT == zh ]] || die "wmt17_zh_en: SRC/TGT must be zh/en, not $SRC/$TGT"
  for p in $ZHEN_PARTS; do [[ " $ZHEN_PARTS_ALL " == *" $p "* ]] || die "ZHEN_PARTS: unknown part '$p' (parts: $ZHEN_PARTS_ALL)"; done
  for p in $ZHEN_PARTS_ALL; do
    if [[ " $ZHEN_PARTS " != *" $p "* ]]; then echo "$p (left out by ZHEN_PARTS)"
    elif [[ -z $(part_local "$p") && -z $(part_url "$p") ]]; then echo "$p (needs a licence: no URL_$p, give LOCAL_$p=a.zh:a.en)"
    fi
  done
}

check_corpus_inputs() {  # before any download or long work
  local missing p s t f
  missing=$(zhen_missing_parts)
  if [[ -n $missing && ${ALLOW_PARTIAL_DATA:-0} != 1 ]]; then
    die "the WMT17 Zh-En training data would be incomplete (the paper used all of it, 20.62M pairs); missing:
$missing
Give these parts, or set ALLOW_PARTIAL_DATA=1 to train on less (the pair count goes into scores.json and the results table)."
  fi
  [[ -z $missing ]] || log "warning: ALLOW_PARTIAL_DATA=1: training without $(echo "$missing" | cut -d' ' -f1 | tr '\n' ' ')"
  for p in $ZHEN_PARTS; do
    f=$(part_local "$p"); [[ -n $f ]] || continue
    s=${f%%:*}; t=${f#*:}
    compgen -G "$s" >/dev/null && compgen -G "$t" >/dev/null || die "LOCAL_$p=$f: no such files"
  done
  local extra; extra=$(extra_pairs_parts "${EXTRA_TRAIN_PAIRS:-}")  # (not in a for list: its failure stops here)
  for f in $extra; do
    s=${f#*:}; t=${s#*:}; s=${s%%:*}
    check_pair "$s" "$t" "EXTRA_TRAIN_PAIRS"
  done
}

corpus_settings() {  # what the training data is made from (stage fingerprint)
  local p f
  echo --set; echo "ZHEN_PARTS=$ZHEN_PARTS"; echo --set; echo "ALLOW_PARTIAL_DATA=${ALLOW_PARTIAL_DATA:-0}"
  for p in $ZHEN_PARTS; do
    f=$(part_local "$p")
    if [[ -n $f ]]; then for f in ${f%%:*} ${f#*:}; do echo --in; echo "$f"; done
    else echo --set; echo "URL_$p=$(part_url "$p")"; fi
  done
  for f in ${EXTRA_TRAIN_PAIRS:-}; do echo --in; echo "${f%%:*}"; echo --in; echo "${f#*:}"; done
}

fetch_train() {
  local parts=() p f url dl="$WORK/downloads" src tgt
  mapfile -t MISSING_PARTS < <(zhen_missing_parts)
  for p in $ZHEN_PARTS; do
    f=$(part_local "$p")
    if [[ -n $f ]]; then
      src=${f%%:*}; tgt=${f#*:}
    else
      url=$(part_url "$p"); [[ -n $url ]] || continue
      fetch_archive "$url"
      read -r src tgt <<< "$(part_members "$p" "$dl/$(basename "$url").d")"
    fi
    [[ $SRC == zh ]] || { f=$src; src=$tgt; tgt=$f; }  # parts are given zh first
    parts+=("$p:$src:$tgt")
  done
  local extra; extra=$(extra_pairs_parts "${EXTRA_TRAIN_PAIRS:-}")
  for f in $extra; do parts+=("$f"); done
  (( ${#parts[@]} )) || die "no training data: every part is missing"
  concat_parts "${parts[@]}"
  rm -rf "$dl"/*.d
}

fetch_split() {  # valid / test through sacreBLEU
  case $1 in valid) sacrebleu_testset wmt17/dev "$SRC-$TGT" valid;; test) sacrebleu_testset wmt17 "$SRC-$TGT" test;; esac
}
