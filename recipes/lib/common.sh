# Shared steps of every recipe: sourced by recipes/*/{prepare,train,evaluate}.sh.
#
# A recipe (env.sh) sets SRC, TGT, RECIPE_DIR and its corpus/hyper-parameter defaults and
# defines fetch_train (writes $WORK/raw/train.{$SRC,$TGT} and train.parts.json) and
# fetch_split valid|test (the official dev/test sets), optionally check_corpus_inputs
# (checks before any download) and corpus_settings (what the official data is made from:
# --set/--in lines for the raw step's fingerprint); the scripts then call prepare_main /
# train_main / evaluate_main. Every variable below can be overridden from the environment;
# see docs/howto/train.md.
#
# Conventions: every step writes to a temporary name and renames when complete, and records
# in $WORK/.done/ what it was made from, so re-running resumes where it stopped and redoes
# what changed.

set -euo pipefail

LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# PYTHON: the interpreter of every step; by default the active environment's python3, else the
# project's .venv (what scripts/test.sh and scripts/demo.sh install), else python3
if [[ -z ${PYTHON:-} ]]; then
  if [[ -z ${VIRTUAL_ENV:-} && -x $LIB_DIR/../../.venv/bin/python ]]; then PYTHON=$(cd "$LIB_DIR/../.." && pwd)/.venv/bin/python
  else PYTHON=python3; fi
fi
STEPS=("$PYTHON" -m fairseq_attn_recipes)  # the Python steps, by module (any folder, any install)
# fairseq's preprocess and generate: `python -m fairseq_cli.X` with fairseq imported without
# scikit-learn and scipy.stats, which translation never calls (fairseq_command.py)
FAIRSEQ=("$PYTHON" -m fairseq_attn_recipes.fairseq_command)

# (bash's own basename and clock: a recipe logs hundreds of lines, each a fork of date and basename otherwise)
log() { local name=${RECIPE_DIR:-recipe}; name=${name%/}; printf '[%s %(%H:%M:%S)T] %s\n' "${name##*/}" -1 "$*" >&2; }
# progress bars (tqdm: subword-nmt's learn_bpe, sacremoses) only where a person watches: a log file gets
# none (tqdm reads TQDM_DISABLE)
[[ -t 2 ]] || export TQDM_DISABLE=1
# the exit status of every recipe script (docs/howto/train.md, "Exit status"): 2 for a usage error (an
# argument or action the script does not take, or one missing: usage_error), 1 for a refused input
# (a setting, file, data folder or run that is not what is allowed, flags that do not go together)
# or a failed step (die)
usage_error() { echo "error: $*" >&2; exit 2; }
die() { echo "error: $*" >&2; exit 1; }
# every recipe needs torch, fairseq and this package importable by PYTHON: said in one line
# before any step (found, not imported: milliseconds), in the process of the script's first step
# (check_variables, which every *_main runs first; a profile read while a recipe's env.sh is sourced),
# which then runs the step (MODULE ARG...). The same process says where the plugin lies (PLUGIN_DIR:
# fairseq's --user-dir, recipe_defaults), found once per script
PYTHON_FOUND='import importlib.util as u, runpy, sys
missing = [m for m in ("torch", "fairseq", "fairseq_attn_plugins", "fairseq_attn_recipes") if u.find_spec(m) is None]
print(" ".join(missing))
print("" if missing else u.find_spec("fairseq_attn_plugins").submodule_search_locations[0], flush=True)
if not missing and len(sys.argv) > 1:
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)'
PLUGIN_DIR=  # found by python_found, never taken from the environment
python_found() {  # python_found [MODULE ARG...]: the step's output in STEP_OUT
  local found="" rc=0
  if command -v -- "$PYTHON" >/dev/null; then found=$("$PYTHON" -c "$PYTHON_FOUND" "$@") || rc=$?; fi
  [[ -n $found ]] || die "PYTHON=$PYTHON does not run: give an interpreter (e.g. PYTHON=.venv/bin/python after 'bash scripts/test.sh')"
  { read -r PYTHON_MISSING; read -r PLUGIN_DIR || true; } <<< "$found"
  STEP_OUT=${found#*$'\n'}; [[ $STEP_OUT == *$'\n'* ]] && STEP_OUT=${STEP_OUT#*$'\n'} || STEP_OUT=""
  [[ -z $PYTHON_MISSING ]] || die "PYTHON=$PYTHON cannot import $PYTHON_MISSING: run 'bash scripts/test.sh' once (it installs .venv, which the recipes then use), or activate an environment that has them"
  (( rc == 0 )) || exit 1
}
# step_out MODULE ARG...: the step's stdout in STEP_OUT (a failed step ends the script); the
# script's first step also runs the interpreter check, in the same process (python_found)
step_out() {
  if [[ -n $PLUGIN_DIR ]]; then STEP_OUT=$("$PYTHON" -m "$@") || exit 1; else python_found "$@"; fi
}
# no_args "$@": a script that takes no argument refuses one, in one line, before doing anything
# (its settings are environment variables; USAGE_EXAMPLE: one the script reads, default ARCH=...),
# after the interpreter check, as every refusal
no_args() {
  (( $# == 0 )) || [[ -n $PLUGIN_DIR ]] || python_found
  (( $# == 0 )) || usage_error "$(basename "$0"): unknown argument '$1': it takes none (settings are environment variables, e.g. ${USAGE_EXAMPLE:-ARCH=...} $(basename "$0"); see docs/reference/variables.md)"
}

# check_variables SCRIPT...: the recipe variables these scripts read (fairseq_attn_recipes/variables.py,
# one table) checked before any step: a value that is not allowed is one line naming the variable and
# what is allowed. Once per process and script: a study that checked train's and evaluate's variables
# (table1.sh, lengths.sh) does not check them again per run.
check_variables() {
  local s todo=()
  for s in "$@"; do [[ " ${VARIABLES_CHECKED:-} " == *" $s "* ]] || todo+=("$s"); done
  (( ${#todo[@]} )) || return 0
  step_out fairseq_attn_recipes.variables "${todo[@]}"
  [[ -z $STEP_OUT ]] || printf '%s\n' "$STEP_OUT"
  VARIABLES_CHECKED="${VARIABLES_CHECKED:-} ${todo[*]}"
}

# stage NAME [--set KEY=VALUE | --in FILE]... -- CMD...: run CMD unless $WORK/.done/NAME
# records that it was done from these very settings and input files (sizes, line counts,
# sha256; a file or setting inside WORK named relative to WORK, so a copied or moved WORK keeps
# its steps). Changed settings or inputs: the step is redone (and so, through their inputs,
# every later step). CMD runs in a subshell with `set -e` in force (a function called as
# `f || die` would run with `set -e` off), so it stops at its first failing command; a
# failed step is never marked done. --per-setting: the record keeps one entry per setting, each
# naming its output (binarise's data folders, fingerprints.py): another setting's is kept.
stage() {
  local name=$1; shift
  local fp=() per=0
  while [[ $1 != -- ]]; do [[ $1 != --per-setting ]] || per=1; fp+=("$1"); shift; done; shift
  mkdir -p "$WORK/.done"
  local marker="$WORK/.done/$name" rc=0 changes
  # fingerprint's answer: 0 same, 3 changed, 4 never done (1 and 2: it could not answer)
  # files and settings inside WORK are recorded relative to it: a WORK copied or moved reuses its steps
  changes=$("${STEPS[@]}" fingerprint "${fp[@]}" --work "$WORK" --against "$marker" --out "$marker.want") || rc=$?
  case $rc in
    0) log "$name: done before, skipped (same settings and inputs)"; rm -f "$marker.want"; return 0;;
    4) log "$name";;
    3) log "$name: redone, its settings or inputs changed since it was done: $changes"; (( per )) || rm -f "$marker";;
    *) die "step '$name': cannot read its inputs";;
  esac
  rc=0
  set +e
  ( set -euo pipefail; "$@" )
  rc=$?
  set -e
  (( rc == 0 )) || die "step '$name' failed (exit $rc); it is not marked done: fix the cause and re-run"
  mv "$marker.want" "$marker"
}

# Leftovers of a killed run (*.tmp files and folders) are deleted, never used.
remove_leftovers() {
  local d
  for d in "$WORK/raw" "$WORK/tok" "$WORK/bpe" "$WORK/.done" "$WORK/downloads"; do
    [[ -d $d ]] && find "$d" -maxdepth 1 -name '*.tmp' -exec rm -rf {} +
  done
  rm -rf "$DATA.tmp" "$DATA.tmp.dict" "$WORK/data/binarise.tmp" "$WORK/data/binarise.tmp.dict"
}

recipe_defaults() {
  WORK=${WORK:-$RECIPE_DIR/work}
  BPE_TOOL=${BPE_TOOL:-subword-nmt}          # or sentencepiece
  BPE_MERGES=${BPE_MERGES:-32000}            # merges (subword-nmt) / vocabulary (sentencepiece)
  JOINT=${JOINT:-1}                          # joint BPE + joined dictionary + shared embeddings
  CLEAN_MIN=${CLEAN_MIN:-1}; CLEAN_MAX=${CLEAN_MAX:-250}; CLEAN_RATIO=${CLEAN_RATIO:-1.5}
  # each value is checked by the variables table; their order only here, where both are known
  if [[ $CLEAN_MIN =~ ^[0-9]+$ && $CLEAN_MAX =~ ^[0-9]+$ ]] && (( CLEAN_MIN > CLEAN_MAX )); then
    die "CLEAN_MIN=$CLEAN_MIN is above CLEAN_MAX=$CLEAN_MAX: give CLEAN_MIN at most CLEAN_MAX (the subwords a training sentence may have; defaults 1 and 250)"
  fi
  WORKERS=${WORKERS:-$(nproc 2>/dev/null || echo 1)}
  DATA=${DATA:-$WORK/data-bin}
  # the default layout: each prepared data in WORK/data/<id>, WORK/data-bin a symlink naming the
  # latest, each run evaluated on its own (DATA_KEYED=1); an explicit DATA is written/read as given
  if [[ $DATA == "$WORK/data-bin" ]]; then DATA_KEYED=1; else DATA_KEYED=0; fi
  [[ -n $PLUGIN_DIR ]] || python_found
  USER_DIR=$PLUGIN_DIR
  language_facts
}

# the recipes' facts live in Python: STEP prints bash (profiles.py's VAR=${VAR:-value} lines, a value
# the environment gives wins; languages.py's arrays), read here
step_defaults() { step_out fairseq_attn_recipes "$@"; eval "$STEP_OUT"; }
profile() { step_defaults profile "$@"; }  # profile NAME | --arch ARCH [--only VAR...]

# the tokeniser of SRC and TGT and what their words are counted on (LANG_TOKENIZER, LANG_WORDS_OF)
language_facts() {
  [[ ${LANG_FACTS_OF:-} == "$SRC $TGT" ]] || { step_defaults language-facts "$SRC" "$TGT"; LANG_FACTS_OF="$SRC $TGT"; }
}

tokenizer_tool() {  # the tokeniser of a language: TOKENIZER_<lang> overrides
  local var="TOKENIZER_${1^^}"
  if [[ -n "${!var:-}" ]]; then echo "${!var}"; else language_facts; echo "${LANG_TOKENIZER[$1]}"; fi
}

# words_counted_on LANG: raw (words separated by spaces) or tokenised (zh, ja: the tokeniser's words)
words_counted_on() { language_facts; echo "${LANG_WORDS_OF[$1]}"; }

# fairseq_args ARRAY train|preprocess|generate [--data D --user-dir U --arch A --destdir D] --set key=value...:
# the tool's arguments (fairseq_args.py, one place for the recipes and the demo) into ARRAY
fairseq_args() {
  local -n into_=$1; shift
  local listed; listed=$("${STEPS[@]}" fairseq-args "$@") || exit 1
  mapfile -t into_ <<< "$listed"
}

# moved_aside FILE: FILE renamed to FILE.bad (or FILE.bad.2, .3...: an earlier one is never
# overwritten); prints the new name
moved_aside() {
  local to="$1.bad" n=1
  while [[ -e $to || -L $to ]]; do n=$((n + 1)); to="$1.bad.$n"; done
  mv "$1" "$to" && echo "$to"
}

# download URL DEST [SHA256]: resumable (curl -C -), verified, atomic. Without a
# known checksum, the sha256 of the first download that unpacks completely is recorded in
# $WORK/downloads.sha256 (record_download_sum) and later downloads are checked against it.
download() {
  local url=$1 dest=$2 sum=${3:-}
  local sums="$WORK/downloads.sha256" name; name=$(basename "$dest")
  if [[ -z "$sum" && -f "$sums" ]]; then sum=$(awk -v n="$name" '$2==n {print $1}' "$sums"); fi
  if [[ ! -f "$dest" ]]; then
    command -v curl >/dev/null || die "curl is needed to download $url (or give the corpus as local files)"
    log "downloading $url"
    curl -fsSL --retry 5 -C - -o "$dest.part" "$url" || die "download of $url failed; re-run to resume, or give local files"
    mv "$dest.part" "$dest"
  fi
  local got; got=$(sha256sum "$dest" | cut -d' ' -f1)
  if [[ -n "$sum" && "$got" != "$sum" ]]; then
    local bad; bad=$(moved_aside "$dest"); die "$dest: sha256 $got, expected $sum (moved to $bad; re-run to download again)"
  fi
}

record_download_sum() {
  local sums="$WORK/downloads.sha256" name; name=$(basename "$1")
  if [[ ! -f "$sums" ]] || ! awk -v n="$name" '$2==n {f=1} END {exit !f}' "$sums"; then
    echo "$(sha256sum "$1" | cut -d' ' -f1)  $name" >> "$sums"
  fi
}

# fetch_archive URL: download and unpack into $WORK/downloads/NAME.d (always unpacked afresh);
# a truncated or corrupt archive is moved aside (moved_aside: NAME.bad; it may be one the user staged by hand;
# re-run to download it again) and stops the step
fetch_archive() {
  local url=$1 dl="$WORK/downloads" name; name=$(basename "$url")
  mkdir -p "$dl"
  download "$url" "$dl/$name"
  log "unpacking $name"
  if ! "${STEPS[@]}" unpack "$dl/$name" "$dl/$name.d"; then
    local bad; bad=$(moved_aside "$dl/$name"); die "$name could not be unpacked: moved to $bad; re-run to download it again"
  fi
  record_download_sum "$dl/$name"
}

# sacrebleu_testset TEST LANGPAIR SPLIT: an official dev/test set through sacreBLEU (checksummed by sacreBLEU)
sacrebleu_testset() {
  local test=$1 pair=$2 split=$3
  "$PYTHON" -m sacrebleu -t "$test" -l "$pair" --echo src > "$WORK/raw/$split.$SRC.tmp" || die "sacrebleu could not fetch $test"
  "$PYTHON" -m sacrebleu -t "$test" -l "$pair" --echo ref > "$WORK/raw/$split.$TGT.tmp" || die "sacrebleu could not fetch $test"
  mv "$WORK/raw/$split.$SRC.tmp" "$WORK/raw/$split.$SRC"; mv "$WORK/raw/$split.$TGT.tmp" "$WORK/raw/$split.$TGT"
  # the document of each line, where sacreBLEU has them (CONCAT of lengths.sh joins segments of one document)
  if "$PYTHON" -m sacrebleu -t "$test" -l "$pair" --echo docid > "$WORK/raw/$split.docs.tmp" 2>/dev/null \
     && [[ $(wc -l < "$WORK/raw/$split.docs.tmp") == $(wc -l < "$WORK/raw/$split.$SRC") ]]; then
    mv "$WORK/raw/$split.docs.tmp" "$WORK/raw/$split.docs"
  else
    rm -f "$WORK/raw/$split.docs.tmp"
  fi
}

copy_local() {  # copy_local FILE DEST: atomic copy of a user-given corpus file
  cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
}

# ---------------------------------------------------------------- prepare
# The settings a data-bin is made with: recorded by prepare.sh in $DATA/prepare.json and
# checked by train.sh and evaluate.sh (PREP_SET: --set KEY=VALUE arguments).
prepare_settings() {
  PREP_SET=(--set "SRC=$SRC" --set "TGT=$TGT" --set "JOINT=$JOINT" --set "BPE_TOOL=$BPE_TOOL"
            --set "BPE_MERGES=$BPE_MERGES" --set "CLEAN=$CLEAN_MIN-$CLEAN_MAX-$CLEAN_RATIO"
            --set "TOKENIZER_${SRC^^}=$(tokenizer_tool "$SRC")" --set "TOKENIZER_${TGT^^}=$(tokenizer_tool "$TGT")"
            --set "PREPROCESS_ARGS=${PREPROCESS_ARGS:-}")
  # the training-length cap (set only when given: data prepared without it keeps its record)
  if [[ -n ${TRAIN_MAX_LEN:-} ]]; then PREP_SET+=(--set "TRAIN_MAX_LEN=$TRAIN_MAX_LEN"); fi
  # concatenation training (set only when given, as the cap): the joined pairs and their draw
  if [[ -n ${TRAIN_CONCAT:-} ]]; then
    PREP_SET+=(--set "TRAIN_CONCAT=$TRAIN_CONCAT" --set "TRAIN_CONCAT_SEED=${TRAIN_CONCAT_SEED:-1}")
  fi
}

# TRAIN_CONCAT=2 or 2,4 (integers >= 2, none twice) and TRAIN_CONCAT_SEED, checked before any work
check_train_concat() {
  check_train_docs
  [[ -n ${TRAIN_CONCAT:-} ]] || return 0
  local ks=() k seen=" "
  IFS=, read -r -a ks <<< "$TRAIN_CONCAT"
  [[ $TRAIN_CONCAT =~ ^[0-9]+(,[0-9]+)*$ ]] || ks=(x)
  for k in "${ks[@]}"; do
    [[ $k =~ ^[0-9]+$ ]] && (( 10#$k >= 2 )) || die "TRAIN_CONCAT=$TRAIN_CONCAT: give how many training pairs are joined into one, integers of at least 2 separated by commas (e.g. 2 or 2,4; empty: no joined pairs)"
    [[ $seen != *" $((10#$k)) "* ]] || die "TRAIN_CONCAT=$TRAIN_CONCAT: $((10#$k)) is given twice"
    seen+="$((10#$k)) "
  done
  [[ ${TRAIN_CONCAT_SEED:-1} =~ ^[0-9]+$ ]] || die "TRAIN_CONCAT_SEED=$TRAIN_CONCAT_SEED: give a non-negative integer (the draw of random pairs)"
}

# TRAIN_DOCS (one document id per raw training line): an existing file, with as many lines as a
# local TRAIN_SRC, checked before any step (the official training data: right after the raw step,
# train_docs_lines)
check_train_docs() {
  [[ -n ${TRAIN_DOCS:-} ]] || return 0
  [[ -f $TRAIN_DOCS ]] || die "TRAIN_DOCS=$TRAIN_DOCS: no such file (one document id per training line)"
  if [[ -n ${TRAIN_SRC:-} && -f $TRAIN_SRC ]]; then train_docs_lines "$TRAIN_DOCS" "$TRAIN_SRC" "TRAIN_SRC=$TRAIN_SRC"; fi
}

train_docs_lines() {  # train_docs_lines DOCS SOURCE NAMED: one document id per line of SOURCE (NAMED: how it is named)
  local nd ns; nd=$(wc -l < "$1"); ns=$(wc -l < "$2")
  [[ $nd == "$ns" ]] || die "TRAIN_DOCS=$1: $nd lines, but the training source ($3) has $ns: give one document id per training line"
}

# the document id of each raw training line (TRAIN_CONCAT joins pairs of one document): TRAIN_DOCS,
# else the recipe's raw/train.docs, else none (random pairs)
train_docs_file() {
  if [[ -n ${TRAIN_DOCS:-} ]]; then echo "$TRAIN_DOCS"; elif [[ -f $WORK/raw/train.docs ]]; then echo "$WORK/raw/train.docs"; fi
}

# TRAIN_MAX_LEN counts the words of the raw training source, or of the tokenised source for a
# language written without spaces between words (words_counted_on)
cap_counted_file() {
  if [[ $(words_counted_on "$SRC") == tokenised ]]; then echo "$WORK/tok/train.$SRC"; else echo "$WORK/raw/train.$SRC"; fi
}

cap_check() {  # cap_check FILE: the cap keeps some but not every training pair (one-line error)
  [[ -z ${TRAIN_MAX_LEN:-} ]] || "${STEPS[@]}" cap-check --max-src-words "$TRAIN_MAX_LEN" --src-raw "$1" >&2 || exit 1
}

# local_split SPLIT (train/valid/test): true when the user gives that split as local files
local_split() { local s="${1^^}_SRC" t="${1^^}_TGT"; [[ -n "${!s:-}" || -n "${!t:-}" ]]; }

# check_pair SRC_FILE TGT_FILE WHAT: same line count, not empty, each side in its language's script
check_pair() {
  local ns nt; ns=$(wc -l < "$1"); nt=$(wc -l < "$2")
  [[ $ns == "$nt" ]] || die "$3: $1 has $ns lines but $2 has $nt"
  (( ns > 0 )) || die "$3: $1 is empty"
  "${STEPS[@]}" check-script "$SRC" "$1" "$TGT" "$2" --what "$3" || exit 1
}

prepare_main() {
  no_args "$@"
  check_variables prepare
  recipe_defaults
  prepare_settings
  # an explicit DATA is replaced whole: only a new folder or this recipe's earlier output, never WORK,
  # a run or a folder holding either (prepare_dest.py); refused before anything is made
  if [[ $DATA_KEYED == 0 ]]; then
    "${STEPS[@]}" check-data-dest --data "$DATA" --work "$WORK" --recipe "$(basename "$RECIPE_DIR")" --pair "$SRC-$TGT" || exit 1
  fi
  # a local corpus file inside WORK's raw/ (or another folder prepare.sh empties and fills) would be
  # deleted before it is read: refused before anything is made (prepare_dest.py)
  local inputs=() v
  for v in TRAIN_SRC TRAIN_TGT VALID_SRC VALID_TGT TEST_SRC TEST_TGT; do [[ -z ${!v:-} ]] || inputs+=("$v=${!v}"); done
  (( ${#inputs[@]} == 0 )) || "${STEPS[@]}" check-local-inputs --work "$WORK" "${inputs[@]}" || exit 1
  check_train_concat  # TRAIN_CONCAT, TRAIN_CONCAT_SEED, TRAIN_DOCS
  mkdir -p "$WORK"/{raw,tok,bpe}
  # one preparation at a time per WORK (raw/, tok/ and bpe/ serve every data it prepares; a
  # second one would remove the first's files in progress as leftovers); held until the
  # preparation ends, and gone with the process, so a killed prepare blocks nothing
  exec {PREPARE_LOCK}>"$WORK/.prepare.lock"
  flock -n "$PREPARE_LOCK" || die "WORK=$WORK: another prepare.sh is running there (it holds $WORK/.prepare.lock); wait for it to end, or give this one another WORK"
  remove_leftovers
  # 1. everything checked before any long work: tools, the local corpora (line counts and
  #    the script of each side), the recipe's own inputs (check_corpus_inputs in env.sh)
  local tools=(fairseq sacrebleu "$BPE_TOOL") l split
  for l in "$SRC" "$TGT"; do tools+=("$(tokenizer_tool "$l" | sed 's/moses-plain/moses/')"); done
  "${STEPS[@]}" check-tools "${tools[@]}" || exit 1
  local raw_fp=(--set "SRC=$SRC" --set "TGT=$TGT")
  for split in train valid test; do
    local s="${split^^}_SRC" t="${split^^}_TGT"
    if local_split "$split"; then
      [[ -n "${!s:-}" && -n "${!t:-}" ]] || die "local corpus: set both ${s} and ${t} (or neither, for the official $split data)"
      [[ -f "${!s}" ]] || die "$s=${!s}: no such file. Give an existing file, or unset $s and $t for the official $split data."
      [[ -f "${!t}" ]] || die "$t=${!t}: no such file. Give an existing file, or unset $s and $t for the official $split data."
      check_pair "${!s}" "${!t}" "$s/$t"
      [[ $split != train || $(words_counted_on "$SRC") == tokenised ]] || cap_check "${!s}"
      raw_fp+=(--set "$split=local" --in "${!s}" --in "${!t}")
    else
      raw_fp+=(--set "$split=official")
    fi
  done
  if local_split train && [[ -n ${EXTRA_TRAIN_PAIRS:-} ]]; then
    die "EXTRA_TRAIN_PAIRS adds to the official training data; with TRAIN_SRC/TRAIN_TGT, concatenate the files into those"
  fi
  if ! local_split train || ! local_split valid || ! local_split test; then
    if declare -F check_corpus_inputs >/dev/null; then check_corpus_inputs; fi
    local extra=()
    if declare -F corpus_settings >/dev/null; then mapfile -t extra < <(corpus_settings); fi
    raw_fp+=("${extra[@]}")
  fi
  # 2. raw corpora: local files where given, the official ones otherwise; checked aligned
  # (a recipe whose raw step writes the training documents, made before it did: made again)
  if [[ -n ${TRAIN_CONCAT:-} && ${RECIPE_TRAIN_DOCS:-0} == 1 && ! -f $WORK/raw/train.docs ]]; then rm -f "$WORK/.done/raw"; fi
  stage raw "${raw_fp[@]}" -- make_raw
  local train_docs; train_docs=$(train_docs_file)
  [[ -z $train_docs ]] || train_docs_lines "$train_docs" "$WORK/raw/train.$SRC" "$WORK/raw/train.$SRC"
  [[ $(words_counted_on "$SRC") == tokenised ]] || cap_check "$WORK/raw/train.$SRC"
  # 3. tokenise, 4. (joint) BPE, 5. clean by length and ratio, 6. binarise
  for l in "$SRC" "$TGT"; do
    stage "tok.$l" --set "lang=$l" --set "tool=$(tokenizer_tool "$l")" \
      --in "$WORK/raw/train.$l" --in "$WORK/raw/valid.$l" --in "$WORK/raw/test.$l" -- \
      "${STEPS[@]}" tokenize --lang "$l" --tool "$(tokenizer_tool "$l")" --workers "$WORKERS" \
      "$WORK/raw/train.$l" "$WORK/tok/train.$l" "$WORK/raw/valid.$l" "$WORK/tok/valid.$l" \
      "$WORK/raw/test.$l" "$WORK/tok/test.$l"
  done
  [[ $(words_counted_on "$SRC") == raw ]] || cap_check "$WORK/tok/train.$SRC"
  # BPE is learned on the whole training set, capped or not, and a capped data-bin's dictionary
  # is made from the uncapped cleaned pairs: it shares its codes and dictionary with the full
  # data-bin of the same settings; only its training pairs differ
  if [[ $JOINT == 1 ]]; then
    stage bpe.learn --set "tool=$BPE_TOOL" --set "merges=$BPE_MERGES" \
      --in "$WORK/tok/train.$SRC" --in "$WORK/tok/train.$TGT" -- \
      "${STEPS[@]}" bpe-learn --tool "$BPE_TOOL" --merges "$BPE_MERGES" \
      "$WORK/tok/train.$SRC" "$WORK/tok/train.$TGT" --output "$WORK/bpe/codes"
  else
    for l in "$SRC" "$TGT"; do
      stage "bpe.learn.$l" --set "tool=$BPE_TOOL" --set "merges=$BPE_MERGES" --in "$WORK/tok/train.$l" -- \
        "${STEPS[@]}" bpe-learn --tool "$BPE_TOOL" --merges "$BPE_MERGES" "$WORK/tok/train.$l" \
        --output "$WORK/bpe/codes.$l"
    done
  fi
  for l in "$SRC" "$TGT"; do
    local codes="$WORK/bpe/codes"; [[ $JOINT == 1 ]] || codes="$WORK/bpe/codes.$l"
    stage "bpe.$l" --set "tool=$BPE_TOOL" --in "$codes" \
      --in "$WORK/tok/train.$l" --in "$WORK/tok/valid.$l" --in "$WORK/tok/test.$l" -- \
      "${STEPS[@]}" bpe-apply --tool "$BPE_TOOL" --codes "$codes" "$WORK/tok/train.$l" "$WORK/bpe/train.$l" \
      "$WORK/tok/valid.$l" "$WORK/bpe/valid.$l" "$WORK/tok/test.$l" "$WORK/bpe/test.$l"
  done
  # TRAIN_MAX_LEN: the pairs whose source has more words are dropped here (valid/test stay whole)
  local cap_fp=() cap_args=()
  if [[ -n ${TRAIN_MAX_LEN:-} ]]; then
    local counted words_of; counted=$(cap_counted_file); words_of=$(words_counted_on "$SRC")
    cap_fp=(--set "train_max_len=$TRAIN_MAX_LEN" --set "dictionary_input=uncapped" --in "$counted")
    cap_args=(--max-src-words "$TRAIN_MAX_LEN" --src-raw "$counted" --words-of "$words_of"
              --full-src-out "$WORK/bpe/train.full.$SRC" --full-tgt-out "$WORK/bpe/train.full.$TGT")
  fi
  # the training documents, where known, follow the kept pairs (TRAIN_CONCAT joins pairs of one document)
  if [[ -n $train_docs ]]; then
    cap_fp+=(--in "$train_docs"); cap_args+=(--docs-in "$train_docs" --docs-out "$WORK/bpe/train.clean.docs")
  fi
  stage clean --set "min=$CLEAN_MIN" --set "max=$CLEAN_MAX" --set "ratio=$CLEAN_RATIO" "${cap_fp[@]}" \
    --in "$WORK/bpe/train.$SRC" --in "$WORK/bpe/train.$TGT" -- \
    "${STEPS[@]}" clean --min "$CLEAN_MIN" --max "$CLEAN_MAX" --ratio "$CLEAN_RATIO" "${cap_args[@]}" \
    --src-in "$WORK/bpe/train.$SRC" --tgt-in "$WORK/bpe/train.$TGT" --record "$WORK/bpe/train.clean.json" \
    --src-out "$WORK/bpe/train.clean.$SRC" --tgt-out "$WORK/bpe/train.clean.$TGT"
  # TRAIN_CONCAT: each kept pair also joined with its next pairs of one document (or random ones),
  # the joined pairs after the original ones (concat-train, fairseq_attn_recipes/concat.py)
  local train_pref="$WORK/bpe/train.clean"
  if [[ -n ${TRAIN_CONCAT:-} ]]; then
    train_pref="$WORK/bpe/train.concat"
    local docs_arg=()
    [[ -z $train_docs ]] || docs_arg=(--docs "$WORK/bpe/train.clean.docs")
    [[ -n $train_docs ]] || log "TRAIN_CONCAT=$TRAIN_CONCAT: no training document ids (TRAIN_DOCS): random pairs, seed ${TRAIN_CONCAT_SEED:-1}"
    stage concat-train --set "ks=$TRAIN_CONCAT" --set "seed=${TRAIN_CONCAT_SEED:-1}" --set "documents=${train_docs:+yes}" \
      --in "$WORK/bpe/train.clean.$SRC" --in "$WORK/bpe/train.clean.$TGT" ${train_docs:+--in "$WORK/bpe/train.clean.docs"} -- \
      "${STEPS[@]}" concat-train --src "$WORK/bpe/train.clean.$SRC" --tgt "$WORK/bpe/train.clean.$TGT" "${docs_arg[@]}" \
      --ks "$TRAIN_CONCAT" --seed "${TRAIN_CONCAT_SEED:-1}" --src-out "$train_pref.$SRC" --tgt-out "$train_pref.$TGT" \
      --groups-out "$train_pref.groups" --record "$train_pref.json"
  fi
  local bin_in=() f
  for f in train.clean valid test; do bin_in+=(--in "$WORK/bpe/$f.$SRC" --in "$WORK/bpe/$f.$TGT"); done
  [[ -z ${TRAIN_CONCAT:-} ]] || bin_in+=(--in "$train_pref.$SRC" --in "$train_pref.$TGT" --in "$train_pref.groups")
  for f in valid test; do bin_in+=(--in "$WORK/raw/$f.$SRC" --in "$WORK/raw/$f.$TGT"); done
  for f in valid.docs valid.ids test.docs test.ids; do [[ ! -f $WORK/raw/$f ]] || bin_in+=(--in "$WORK/raw/$f"); done
  [[ -z ${TRAIN_MAX_LEN:-} ]] || bin_in+=(--in "$WORK/bpe/train.full.$SRC" --in "$WORK/bpe/train.full.$TGT")
  # TRAIN_DOCS shapes the joined pairs: recorded in prepare.json (inputs), so binarised again when it is another file
  [[ -z ${TRAIN_CONCAT:-} || -z ${TRAIN_DOCS:-} ]] || bin_in+=(--in "$TRAIN_DOCS")
  if [[ $DATA_KEYED == 1 ]]; then
    # one data folder per setting (WORK/data/<id>), each binarised once: a setting binarised before, its
    # folder there, is skipped and WORK/data-bin pointed at it (a folder removed by hand or pruned: made again)
    stage binarise --per-setting "${PREP_SET[@]}" --set "DATA=$DATA" "${bin_in[@]}" -- binarise "$train_pref"
    "${STEPS[@]}" data-point --work "$WORK" --record "$WORK/.done/binarise" "${PREP_SET[@]}" --set "DATA=$DATA" >&2
  else
    stage binarise "${PREP_SET[@]}" --set "DATA=$DATA" "${bin_in[@]}" -- binarise "$train_pref"
  fi
  local where=$DATA; [[ $DATA_KEYED == 0 ]] || where="$DATA -> $(readlink "$DATA")"
  log "prepared: $where ($(wc -l < "$WORK/bpe/train.clean.$SRC") training pairs after cleaning${TRAIN_CONCAT:+, $(wc -l < "$train_pref.$SRC") with the joined pairs of TRAIN_CONCAT=$TRAIN_CONCAT})"
  PREPARED_DATA=$(readlink -f "$DATA")  # read under the lock: another prepare may repoint data-bin after it
  exec {PREPARE_LOCK}>&-  # released: a study that trains after preparing holds no lock
}

# make_raw: $WORK/raw/{train,valid,test}.{SRC,TGT} (+ train.parts.json), all checked aligned
make_raw() {
  rm -f "$WORK"/raw/*
  local split
  for split in train valid test; do
    local s="${split^^}_SRC" t="${split^^}_TGT"
    if local_split "$split"; then
      copy_local "${!s}" "$WORK/raw/$split.$SRC"; copy_local "${!t}" "$WORK/raw/$split.$TGT"
    elif [[ $split == train ]]; then
      fetch_train
    else
      fetch_split "$split"
    fi
  done
  if local_split train; then
    "${STEPS[@]}" parts-record --part "local=$WORK/raw/train.$SRC" --record "$WORK/raw/train.parts.json"
  fi
  [[ -f "$WORK/raw/train.parts.json" ]] || die "fetch_train wrote no $WORK/raw/train.parts.json"
  for split in train valid test; do
    [[ -f "$WORK/raw/$split.$SRC" && -f "$WORK/raw/$split.$TGT" ]] || die "missing $WORK/raw/$split.{$SRC,$TGT}"
    check_pair "$WORK/raw/$split.$SRC" "$WORK/raw/$split.$TGT" "raw $split corpus"
  done
}

# binarise: the data-bin written aside, with copies of the raw valid/test source and reference
# (raw/, what evaluate.sh scores against) and its record (prepare.json, data_id); then moved to
# WORK/data/<first 12 hex of data_id> (kept if that folder holds the same data) with WORK/data-bin
# repointed at it, or to an explicit DATA
binarise() {  # binarise TRAIN_PREF: the training pairs (WORK/bpe/train.clean, or train.concat with TRAIN_CONCAT)
  local train_pref=${1:-$WORK/bpe/train.clean}
  local tmp="$DATA.tmp" split l; [[ $DATA_KEYED == 0 ]] || tmp="$WORK/data/binarise.tmp"
  rm -rf "$tmp" "$tmp.dict"; mkdir -p "$tmp" "$tmp.dict"
  # an explicit DATA's DATA.tmp is marked as binarise's own before anything else: only a marked one
  # is ever removed (prepare_dest.py; the mark's name ends in .tmp, which no data digest reads)
  [[ $DATA_KEYED == 1 ]] || : > "$tmp/made-by-prepare.tmp"
  [[ $DATA_KEYED == 1 ]] || : > "$tmp.dict/made-by-prepare.tmp"
  local dicts=() pargs=() first=() pre=(--set "src=$SRC" --set "tgt=$TGT" --set "workers=$WORKERS" --set "preprocess_args=${PREPROCESS_ARGS:-}")
  : > "$WORK/preprocess.log"
  if [[ -n ${TRAIN_MAX_LEN:-} || -n ${TRAIN_CONCAT:-} ]]; then
    # capped: first the dictionary of the uncapped training pairs (the same as the full data-bin's); with
    # TRAIN_CONCAT that of the pairs without the joined ones (the same as the data-bin without them); the
    # two runs of fairseq-preprocess in one process (fairseq_command.py: preprocess --first N)
    local dict_pref="$WORK/bpe/train.clean"; [[ -z ${TRAIN_MAX_LEN:-} ]] || dict_pref="$WORK/bpe/train.full"
    fairseq_args first preprocess --destdir "$tmp.dict" "${pre[@]}" --set "trainpref=$dict_pref" \
      --set dict_only=1 --set "joint=$JOINT"
    dicts=(--set "srcdict=$tmp.dict/dict.$SRC.txt"); [[ $JOINT == 1 ]] || dicts+=(--set "tgtdict=$tmp.dict/dict.$TGT.txt")
  fi
  fairseq_args pargs preprocess --destdir "$tmp" "${pre[@]}" --set "trainpref=$train_pref" \
    --set "validpref=$WORK/bpe/valid" --set "testpref=$WORK/bpe/test" --set "joint=$JOINT" "${dicts[@]}"
  (( ${#first[@]} == 0 )) || pargs=(--first "${#first[@]}" "${first[@]}" "${pargs[@]}")
  RECIPE_FLAG_VARIABLES="PREPROCESS_ARGS=${PREPROCESS_ARGS:-}" "${FAIRSEQ[@]}" preprocess "${pargs[@]}" >> "$WORK/preprocess.log" 2>&1 \
    || { tail -5 "$WORK/preprocess.log" >&2; rm -rf "$tmp" "$tmp.dict"; return 1; }
  rm -rf "$tmp.dict"
  rm -f "$tmp/preprocess.log"  # fairseq's log (timestamped; in $WORK/preprocess.log) is not data
  mkdir -p "$tmp/raw"
  for split in valid test; do for l in "$SRC" "$TGT"; do cp "$WORK/raw/$split.$l" "$tmp/raw/$split.$l"; done; done
  # a recipe's document ids (SPLIT.docs), segment ids (SPLIT.ids) and gold word alignments
  # (SPLIT.align, bible: docs/howto/alignment.md), where it writes them
  for split in valid test; do for l in docs ids align; do
    [[ ! -f "$WORK/raw/$split.$l" ]] || cp "$WORK/raw/$split.$l" "$tmp/raw/$split.$l"
  done; done
  # TRAIN_CONCAT: the groups of training lines joined (1-based lines of the kept pairs), the draw recorded
  [[ -z ${TRAIN_CONCAT:-} ]] || cp "$train_pref.groups" "$tmp/raw/train.concat.groups"
  local given=()  # the files the user gave (the official data: the archives downloaded into WORK)
  for split in train valid test; do
    if local_split "$split"; then local s="${split^^}_SRC" t="${split^^}_TGT"; given+=(--input "$s=${!s}" --input "$t=${!t}"); fi
  done
  [[ -z ${TRAIN_CONCAT:-} || -z ${TRAIN_DOCS:-} ]] || given+=(--input "TRAIN_DOCS=$TRAIN_DOCS")
  "${STEPS[@]}" prepare-record --data "$tmp" --recipe "$(basename "$RECIPE_DIR")" "${PREP_SET[@]}" --raw-train "$WORK/raw/train.$SRC" \
    "${given[@]}" --raw-record "$WORK/.done/raw" --downloads "$WORK/downloads.sha256" \
    --clean-train "$WORK/bpe/train.clean.$SRC" --test-ref "$tmp/raw/test.$TGT" --parts "$WORK/raw/train.parts.json" \
    --clean-record "$WORK/bpe/train.clean.json" ${TRAIN_CONCAT:+--concat-record "$train_pref.json"}
  if [[ $DATA_KEYED == 1 ]]; then
    "${STEPS[@]}" data-place --tmp "$tmp" --work "$WORK" --record "$WORK/.done/binarise.want" >&2
  else
    "${STEPS[@]}" data-replace --tmp "$tmp" --data "$DATA" --work "$WORK" >&2 || exit 1
  fi
}

# data_refs: the raw valid/test source and reference of the data-bin $DATA (its raw/; data prepared
# before data folders held them: $WORK/raw)
data_refs() { if [[ -d $DATA/raw ]]; then echo "$DATA/raw"; else echo "$WORK/raw"; fi; }

# data_main list | prune [--dry-run | --yes] [--forget-gone] | register DIR | forget DIR: the prepared
# data folders of WORK/data (id, settings, inputs, training pairs, size, the runs naming them: those
# under WORK and those registered in WORK/runs.index wherever they lie), or those no run record (nor
# WORK/data-bin, nor a registered run that is gone) names: shown with their sizes and why, removed
# only with --yes. A moved run: 'register NEW_PLACE'; a removed one: 'forget OLD_PLACE'.
data_main() {
  check_variables data  # none of the table's, but a typo of WORK (WROK=...) is refused: prune would act on another
  local usage="give 'list' (the prepared data of WORK=${WORK:-<recipe>/work} and the runs naming them), 'prune' (show the unreferenced ones; 'prune --yes' removes them), 'register DIR' (a moved run's new place) or 'forget DIR' (a registered run that was removed)"
  case ${1:-} in
    list) shift; (( $# == 0 )) || usage_error "data.sh list: unknown argument '$1': 'list' takes none (data.sh list)"
      recipe_defaults; "${STEPS[@]}" data-list "$WORK";;
    prune)
      shift
      local yes=() forget=() a
      for a in "$@"; do
        case $a in
          --yes) yes=(--yes);;
          --dry-run) ;;
          --forget-gone) forget=(--forget-gone);;
          *) usage_error "data.sh prune: unknown argument '$a': give --dry-run (the default: show what would be removed), --yes (remove it) and/or --forget-gone (forget the registered runs that are gone)";;
        esac
      done
      [[ " $* " != *" --yes "* || " $* " != *" --dry-run "* ]] || die "data.sh prune: --dry-run and --yes contradict each other: give one"
      recipe_defaults
      "${STEPS[@]}" data-prune "$WORK" "${yes[@]}" "${forget[@]}";;
    register|forget)
      local action=$1; shift
      (( $# == 1 )) && [[ $1 != -* ]] || usage_error "data.sh $action: give one run folder (data.sh $action DIR)${1:+, not '$*'}"
      recipe_defaults
      "${STEPS[@]}" "data-$action" "$WORK" "$1" || exit 1;;
    *) usage_error "data.sh${1:+ $1}: unknown action; $usage";;
  esac
}

# comet_checked: a study (lengths.sh, table1.sh, figure2.sh) checks COMET_MODEL once before its first run,
# and says once that COMET is left out when it is unset; its evaluations then say nothing of it
comet_checked() { "${STEPS[@]}" check-comet >&2 || exit 1; COMET_CHECKED=1; }

# ---------------------------------------------------------------- CPU threads
# cpu_threads PROCESSES: the threads each CPU process of a step computes with. CPU_THREADS (default:
# OMP_NUM_THREADS when set, else the cores this shell may use divided among PROCESSES, at least 1)
# is exported as OMP_NUM_THREADS and MKL_NUM_THREADS, which torch reads at start. More threads than
# free cores make every operation wait for the slowest thread: on cores shared with other jobs,
# CPU_THREADS=1 (see docs/howto/train.md, "CPU threads").
cpu_threads() {
  local cores; cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
  CPU_THREADS=${CPU_THREADS:-${OMP_NUM_THREADS:-$(( cores / $1 > 1 ? cores / $1 : 1 ))}}
  [[ $CPU_THREADS =~ ^[1-9][0-9]*$ ]] || die "CPU_THREADS=$CPU_THREADS: give the threads per CPU process, a positive integer (default: cores / processes)"
  export OMP_NUM_THREADS=$CPU_THREADS MKL_NUM_THREADS=$CPU_THREADS
}

# ---------------------------------------------------------------- train
detect_gpus() {
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; else echo 0; fi
}

train_main() {
  no_args "$@"
  check_variables train
  recipe_defaults
  ARCH=${ARCH:-transformer_attn_wmt_en_de}
  # ARCHS_CHECKED: the architectures a calling step (lengths.sh, table1.sh, figure2.sh) checked
  # together before any work; each check imports torch and fairseq (seconds)
  [[ " ${ARCHS_CHECKED:-} " == *" $ARCH "* ]] || "${STEPS[@]}" check-arch "$ARCH" || exit 1
  [[ -f "$DATA/prepare.json" ]] || die "no binarised data in $DATA: run prepare.sh first"
  SAVE_DIR=${SAVE_DIR:-$WORK/runs/$ARCH${RUN_SUFFIX:-}}  # RUN_SUFFIX: _seed<N> (lib/seeds.sh)
  # the processes, threads and nodes: checked before anything is written (SAVE_DIR/data.json below)
  NGPUS=${NGPUS:-$(detect_gpus)}
  NNODES=${NNODES:-1}
  # the base or big setup of ARCH (profiles.py): PAPER_GPUS (the papers' 8 GPUs: their effective batch
  # is kept), MAX_TOKENS, LR, DROPOUT, MAX_UPDATE, WARMUP, ADAM_EPS, SAVE_INTERVAL_UPDATES, LABEL_SMOOTHING
  profile --arch "$ARCH" --only PAPER_GPUS MAX_TOKENS LR DROPOUT MAX_UPDATE WARMUP ADAM_EPS SAVE_INTERVAL_UPDATES LABEL_SMOOTHING
  local workers
  local per_node=$NGPUS; (( NGPUS > 0 )) || per_node=${CPU_WORKERS:-1}  # processes per node
  workers=$(( per_node * NNODES ))
  local threads=""
  if (( NGPUS == 0 )); then cpu_threads "$per_node"; threads=" cpu_threads=$CPU_THREADS"; fi
  if [[ -z "${UPDATE_FREQ:-}" ]]; then
    UPDATE_FREQ=$(( (PAPER_GPUS + workers - 1) / workers ))
    (( PAPER_GPUS % workers == 0 )) || log "warning: $workers workers do not divide $PAPER_GPUS; --update-freq $UPDATE_FREQ"
  fi
  FP16=${FP16:-$( ((NGPUS > 0)) && echo 1 || echo 0 )}
  SEED=${SEED:-1}
  if (( NNODES > 1 )) && [[ -z "${SLURM_JOB_ID:-}" ]]; then  # torchrun on every node
    : "${NODE_RANK:?set NODE_RANK (0..NNODES-1) on every node}" "${MASTER_ADDR:?set MASTER_ADDR to node 0}"
    [[ $NODE_RANK =~ ^[0-9]+$ ]] && (( NODE_RANK < NNODES )) \
      || die "NODE_RANK=$NODE_RANK: give this node's rank, 0 to NNODES-1 ($(( NNODES - 1 )) with NNODES=$NNODES)"
  fi
  # the data-bin must be the one prepared with these settings (another language pair: named);
  # a run directory stays on its data
  # this node's rank: node 0 records the run's data (data.json) and holds the run's lock (below)
  local rank=0 record=()
  if (( NNODES > 1 )); then rank=${NODE_RANK:-${SLURM_NODEID:-0}}; fi
  [[ $rank == 0 ]] || record=(--no-record)
  prepare_settings
  "${STEPS[@]}" check-data --data "$DATA" "${PREP_SET[@]}" --run-dir "$SAVE_DIR" "${record[@]}" || exit 1
  # the resolved folder, not the data-bin symlink: what the run records and fairseq reads every epoch
  DATA=$(cd "$DATA" && pwd -P)
  # a data folder carries its own record (checked above): one prepared in another WORK is taken as
  # it is, and the run registered in that WORK too (its data.sh prune then keeps the data)
  [[ -f "$DATA/dict.$SRC.txt" ]] || die "no binarised data in $DATA (no dict.$SRC.txt beside its prepare.json): run prepare.sh first"
  log "data: $DATA"
  mkdir -p "$SAVE_DIR"
  # one training of a run at a time: a second would write the same checkpoints. Held by this shell
  # and the training it starts; gone with them, so a killed training blocks nothing. The nodes of one
  # multi-node training share SAVE_DIR (a shared file system): each node rank holds its own lock, node 0
  # the run's
  local lock="$SAVE_DIR/.train.lock"
  [[ $rank == 0 ]] || lock="$SAVE_DIR/.train.node$rank.lock"
  [[ -z ${TRAIN_LOCK+set} ]] || exec {TRAIN_LOCK}>&-  # this shell's lock of a run it trained before
  exec {TRAIN_LOCK}>"$lock"
  flock -n "$TRAIN_LOCK" || die "SAVE_DIR=$SAVE_DIR: another train.sh trains this run (it holds $lock); wait for it to end, or give another SAVE_DIR"
  # fairseq-train's arguments from these variables (fairseq_args.py): tied embeddings as Vaswani et al.,
  # all three with a joint vocabulary, else the decoder's input and output (SHARE_DECODER_EMBED=0 unties
  # them); training logs to watch: TensorBoard by default (TENSORBOARD=0 off), Weights & Biases with WANDB_PROJECT
  local args=() sets=(--set "save_dir=$SAVE_DIR" --set "tensorboard=${TENSORBOARD:-1}"
                      --set "tensorboard_logdir=${TENSORBOARD_DIR:-$SAVE_DIR/tensorboard}") v
  # PATIENCE, VALIDATE_INTERVAL(_UPDATES): fairseq's early stopping (lengths.sh's CONVERGE);
  # KEEP_INTERVAL_UPDATES_PATTERN: interval checkpoints never pruned (lengths.sh's CURVE)
  for v in ADAM_EPS LR WARMUP LABEL_SMOOTHING DROPOUT MAX_TOKENS UPDATE_FREQ MAX_UPDATE SAVE_INTERVAL_UPDATES \
           KEEP_INTERVAL_UPDATES_PATTERN PATIENCE VALIDATE_INTERVAL VALIDATE_INTERVAL_UPDATES LOG_INTERVAL SEED JOINT SHARE_DECODER_EMBED FP16 WANDB_PROJECT MODEL_ARGS EXTRA_ARGS; do
    sets+=(--set "${v,,}=${!v:-}")
  done
  fairseq_args args train --data "$DATA" --user-dir "$USER_DIR" --arch "$ARCH" "${sets[@]}"
  # every node must use the same rendezvous port: torchrun's default 29500 unless MASTER_PORT
  local port=${MASTER_PORT:-$( ((NNODES > 1)) && echo 29500 || echo $(( 20000 + RANDOM % 20000 )) )}
  local launch
  if (( NNODES > 1 )) && [[ -z "${SLURM_JOB_ID:-}" ]]; then
    # torchrun on every node (GPUs: nccl; CPU: gloo, one process per CPU_WORKERS)
    launch=("$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR"
            --master_port "$port" --nproc_per_node "$per_node" -m fairseq_attn_recipes.train)
    args+=(--distributed-world-size "$workers")
    (( NGPUS > 0 )) || args+=(--cpu --distributed-backend gloo --ddp-backend legacy_ddp)
  elif (( NGPUS == 0 )); then
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
    launch=("$PYTHON" -m fairseq_attn_recipes.train)
  elif (( NNODES > 1 )) && [[ -n "${SLURM_JOB_ID:-}" ]]; then
    # one task per node under srun: fairseq infers the rendezvous from SLURM's variables
    args+=(--distributed-port "$port" --distributed-world-size "$workers")
    launch=("$PYTHON" -m fairseq_attn_recipes.train)
  else  # one node: fairseq spawns one process per GPU itself
    args+=(--distributed-world-size "$NGPUS")
    launch=("$PYTHON" -m fairseq_attn_recipes.train)
  fi
  # registered in the WORK whose data it trains on: data.sh list/prune see it wherever SAVE_DIR lies
  # (a run moved to SAVE_DIR is registered there by re-running train.sh, even when nothing is left to train)
  "${STEPS[@]}" register-run --work "$WORK" --run-dir "$SAVE_DIR" --data "$DATA"
  # finished before with these very arguments (run record): nothing is started, nothing else written
  if "${STEPS[@]}" finished-before --save-dir "$SAVE_DIR" -- "${args[@]}"; then
    log "$SAVE_DIR: trained before to MAX_UPDATE=$MAX_UPDATE${PATIENCE:+ (or until --patience $PATIENCE stopped it)} with the same settings: skipped"
    train_checkpoints_pruned "$rank"; return 0
  fi
  # "resuming from checkpoint_last.pt" is said by the training step once the run record accepts the run
  log "ARCH=$ARCH workers=$workers (NGPUS=$NGPUS NNODES=$NNODES) max_tokens=$MAX_TOKENS update_freq=$UPDATE_FREQ fp16=$FP16$threads"
  echo "\$ ${launch[*]} ${args[*]}" >> "$SAVE_DIR/train.log"
  local logged; logged=$(stat -c %s "$SAVE_DIR/train.log")  # where this training's log starts
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
  # the variables whose flags fairseq-train parses: its argument errors name them (flag_origins.py)
  RECIPE_FLAG_VARIABLES="MODEL_ARGS=${MODEL_ARGS:-}"$'\n'"EXTRA_ARGS=${EXTRA_ARGS:-}" \
    "${launch[@]}" "${args[@]}" 2>&1 | tee -a "$SAVE_DIR/train.log"
  rc=${PIPESTATUS[0]}
  set -e
  (( rc == 0 )) || kill "${pids[@]}" 2>/dev/null || true  # a rank without rank 0 would wait forever
  for r in "${pids[@]}"; do wait "$r" || rc=$(( rc ? rc : $? )); done
  trap - EXIT
  # fairseq_attn_recipes.train: 10 = trained to MAX_UPDATE before (same run); refused (the folder holds
  # another run, a flag or checkpoint the plugin refuses: one line "error: ...", exit 1) or a usage
  # error of fairseq-train's arguments (MODEL_ARGS, EXTRA_ARGS: exit 2) = nothing to resume
  (( rc != 10 )) || { log "$SAVE_DIR: trained before to MAX_UPDATE=$MAX_UPDATE${PATIENCE:+ (or until --patience $PATIENCE stopped it)} with the same settings: skipped"
                      train_checkpoints_pruned "$rank"; return 0; }
  local refused; refused=$(tail -c "+$((logged + 1))" "$SAVE_DIR/train.log" | grep -c '^error: ' || true)
  if (( rc == 2 || (rc == 1 && refused > 0) )); then
    die "$SAVE_DIR: not trained (the reason is printed above and in $SAVE_DIR/train.log)"
  fi
  if (( rc != 0 )); then
    # resuming is offered only where there is something to resume from
    [[ -f $SAVE_DIR/checkpoint_last.pt ]] || die "training failed (exit $rc) before saving a checkpoint; see $SAVE_DIR/train.log"
    die "training failed (exit $rc); see $SAVE_DIR/train.log. Re-running resumes from $SAVE_DIR/checkpoint_last.pt"
  fi
  train_checkpoints_pruned "$rank"
  log "trained: $SAVE_DIR (run record: $SAVE_DIR/run.json)"
}

# train_checkpoints_pruned RANK: a run validated by updates (PATIENCE: lengths.sh's CONVERGE) saves a
# checkpoint at every epoch end, which fairseq never prunes. Node 0 shows, in one line, those fairseq's
# rule for the interval ones would prune (an average of N_AVG <= --keep-interval-updates and the learning
# curve keep theirs: checkpoints.py) and the command that removes them; PRUNE_CHECKPOINTS=1 removes them,
# whether the run was trained now or before
train_checkpoints_pruned() {
  [[ -n ${PATIENCE:-} && $1 == 0 ]] || return 0
  local yes=(); [[ ${PRUNE_CHECKPOINTS:-0} != 1 ]] || yes=(--yes)
  "${STEPS[@]}" prune-epoch-checkpoints --run-dir "$SAVE_DIR" --summary "${yes[@]}" || exit 1
}

# ---------------------------------------------------------------- evaluate
evaluate_main() {
  no_args "$@"
  check_variables evaluate
  recipe_defaults
  local arch_given=${ARCH:-}
  ARCH=${ARCH:-transformer_attn_wmt_en_de}
  SAVE_DIR=${SAVE_DIR:-$WORK/runs/$ARCH${RUN_SUFFIX:-}}  # RUN_SUFFIX: _seed<N> (lib/seeds.sh)
  [[ -f "$SAVE_DIR/checkpoint_last.pt" ]] || die "no checkpoints in $SAVE_DIR: run train.sh (ARCH=$ARCH) first"
  [[ -f "$SAVE_DIR/run.json" ]] || die "no run record $SAVE_DIR/run.json: run train.sh (ARCH=$ARCH) first (it records a run it finds without one)"
  # the run's architecture is its record's: an ARCH given that is another is refused, naming both
  ARCH=$("${STEPS[@]}" run-arch --run-dir "$SAVE_DIR" --given "$arch_given" --default "$ARCH") || exit 1
  profile --arch "$ARCH" --only N_AVG   # Vaswani et al.: last 5 (base) / 20 (big) checkpoints
  BEAM=${BEAM:-4}; LENPEN=${LENPEN:-1.0}
  SACREBLEU_TOK=${SACREBLEU_TOK:-13a}; TOK_BLEU=${TOK_BLEU:-1}
  EVAL_SUBSET=${EVAL_SUBSET:-test}           # or valid (the CSAN paper's Figure 2)
  # EVAL_AT_UPDATE=U (lengths.sh's CURVE): the one checkpoint of update U (no average), its outputs and
  # record under the name curve/u<U>/<subset>; a run without that checkpoint is said and skipped
  local key=$EVAL_SUBSET n_avg=$N_AVG at=() ckpt="$SAVE_DIR/averaged_last$N_AVG.pt"
  if [[ -n ${EVAL_AT_UPDATE:-} ]]; then
    [[ $EVAL_AT_UPDATE =~ ^[1-9][0-9]*$ ]] || die "EVAL_AT_UPDATE=$EVAL_AT_UPDATE: give the update of a saved checkpoint, a positive integer"
    key="curve/u$EVAL_AT_UPDATE/$EVAL_SUBSET"; n_avg=1; at=(--at-update "$EVAL_AT_UPDATE")
    ckpt="$SAVE_DIR/curve/u$EVAL_AT_UPDATE.pt"
  fi
  NGPUS=${NGPUS:-$(detect_gpus)}
  (( NGPUS > 0 )) || cpu_threads 1  # generation on CPU: one process
  # the run's own data (its record), with the raw source and reference kept in it; an explicit
  # DATA must be that data
  local given=(); [[ $DATA_KEYED == 1 ]] || given=(--data "$DATA")
  DATA=$("${STEPS[@]}" run-data --run-dir "$SAVE_DIR" --work "$WORK" "${given[@]}") || exit 1
  local refs; refs=$(data_refs)
  [[ -f "$refs/$EVAL_SUBSET.$TGT" ]] || die "no $EVAL_SUBSET reference $refs/$EVAL_SUBSET.$TGT: run prepare.sh first"
  log "data: $DATA (the run's own, recorded in $SAVE_DIR/run.json); source and reference: $refs/$EVAL_SUBSET.{$SRC,$TGT}"
  # registered in WORK (and in the WORK holding its data) as train.sh registers it: a run only
  # evaluated here (a copy, a moved run) keeps its data from data.sh prune too
  "${STEPS[@]}" register-run --work "$WORK" --run-dir "$SAVE_DIR" --data "$DATA"
  # per subset: test and valid never share a file. Every output is written aside (SUBSET.tmp) and
  # moved to SUBSET in one rename once scored, then recorded in run.json with the hypotheses'
  # sha256: a stopped evaluation leaves the previous one whole, or outputs the consumers refuse
  local final="$SAVE_DIR/$key" out="$SAVE_DIR/$key.tmp"
  rm -rf "$out" "$final.old"
  mkdir -p "$out"
  prepare_settings
  "${STEPS[@]}" check-data --data "$DATA" "${PREP_SET[@]}" --test-ref "$refs/test.$TGT" --run-dir "$SAVE_DIR" \
    --require --print-pairs > "$out/data.check.json.tmp" || exit 1
  mv "$out/data.check.json.tmp" "$out/data.check.json"
  # the same evaluation (settings, files, checkpoints averaged: evaluations.py) done before: skipped
  # evaluated-before's answer: 0 same, 3 another, 4 none, 5 no checkpoint of EVAL_AT_UPDATE, 6 the same
  # evaluation published in another folder of the run (1 and 2: it could not answer)
  local rc=0 why
  why=$("${STEPS[@]}" evaluated-before --run-dir "$SAVE_DIR" --n-avg "$n_avg" "${at[@]}" --subset "$key" --final "$final" \
    --set "subset=$EVAL_SUBSET" --set "ARCH=$ARCH" --set "BEAM=$BEAM" --set "LENPEN=$LENPEN" --set "GEN_ARGS=${GEN_ARGS:-}" \
    --set "GEN_MAX_TOKENS=${GEN_MAX_TOKENS:-8000}" --set "N_AVG=$n_avg" --set "BPE_TOOL=$BPE_TOOL" \
    --set "SACREBLEU_TOK=$SACREBLEU_TOK" --set "TOK_BLEU=$TOK_BLEU" --set "PAPER_METRIC=${PAPER_METRIC:-}" \
    --set "COMET_MODEL=${COMET_MODEL:-}" --in "$DATA/prepare.json" --in "$refs/$EVAL_SUBSET.$SRC" \
    --in "$refs/$EVAL_SUBSET.$TGT" --data "$DATA" --out "$out/evaluated_with.json") || rc=$?
  case $rc in
    0) rm -rf "$out"; log "$final: evaluated before with the same settings, files and checkpoints: skipped"; return 0;;
    4) ;;
    3) log "$final: evaluated again: $why";;
    5) rm -rf "$out"; log "curve point skipped: $why"; return 0;;
    6) log "$final: the same evaluation (settings, files, checkpoints) is published in $why: its outputs taken over, not decoded again";;
    *) exit 1;;
  esac
  # COMET (COMET_MODEL=/path/to/model.ckpt, local only): a checkpoint that does not load stops here
  # (a study checked it once, before its first run: comet_checked)
  [[ -n ${COMET_CHECKED:-} ]] || "${STEPS[@]}" check-comet || exit 1
  # the text steps (eval-text: one process): the hypotheses of generate.out detokenised, and the tokenised BLEU's files
  local text=()
  if (( rc == 6 )); then
    local f; for f in averaged.json generate.out hyp.tok.txt hyp.txt; do cp "$why/$f" "$out/$f"; done
  else
    local cpu=0 gargs=(); (( NGPUS > 0 )) || cpu=1
    fairseq_args gargs generate --data "$DATA" --user-dir "$USER_DIR" --set "path=$ckpt" --set "subset=$EVAL_SUBSET" \
      --set "beam=$BEAM" --set "lenpen=$LENPEN" --set "bpe_tool=$BPE_TOOL" --set "gen_max_tokens=${GEN_MAX_TOKENS:-}" \
      --set "cpu=$cpu" --set "gen_args=${GEN_ARGS:-}"
    log "generating (beam $BEAM, lenpen $LENPEN$( ((NGPUS > 0)) || echo ", $CPU_THREADS CPU threads"))"
    # the checkpoints averaged first, in the same process (fairseq_command.py: its messages and refusals
    # here, then fairseq-generate's output in the two files); a refused average leaves no generate.err
    RECIPE_FLAG_VARIABLES="GEN_ARGS=${GEN_ARGS:-}" "${FAIRSEQ[@]}" generate \
      --average "$SAVE_DIR" --n "$n_avg" "${at[@]}" --output "$ckpt" --record "$out/averaged.json" \
      --stdout "$out/generate.out.tmp" --stderr "$out/generate.err" -- "${gargs[@]}" \
      || { local gen_rc=$? last; [[ -f "$out/generate.err" ]] || exit 1; last=$(tail -n 1 "$out/generate.err")
           # a flag of GEN_ARGS refused: fairseq_command's one line names the variable (exit 2, argparse's)
           if (( gen_rc == 2 )) && [[ $last == "error: "* ]]; then echo "$last" >&2; exit 1; fi
           tail -5 "$out/generate.err" >&2; die "fairseq-generate failed; see $out/generate.err"; }
    mv "$out/generate.out.tmp" "$out/generate.out"
    local n; n=$(wc -l < "$refs/$EVAL_SUBSET.$TGT")
    text=(--generate-out "$out/generate.out" --n "$n" --hyp-tok "$out/hyp.tok.txt")
  fi
  local tokargs=()
  if [[ $TOK_BLEU == 1 && $(tokenizer_tool "$TGT") == moses ]]; then
    # tokenised BLEU as the papers report it: tokenizer.perl WITHOUT -a on the detokenised output
    # and reference (+ compound splitting for German), multi-bleu.perl
    local method="moses tokenizer.perl (no -a) on detokenised text, multi-bleu.perl"
    text+=(--tok-tool moses-plain --ref "$refs/$EVAL_SUBSET.$TGT" --tok-hyp "$out/hyp.tokbleu.txt" --tok-ref "$out/ref.tokbleu.txt")
    if [[ $TGT == de ]]; then
      text+=(--split-compounds)
      method="moses tokenizer.perl (no -a) on detokenised text, compound splitting (##AT##-##AT##), multi-bleu.perl"
    fi
    tokargs=(--tok-hyp "$out/hyp.tokbleu.txt" --tok-ref "$out/ref.tokbleu.txt" --tok-method "$method")
  fi
  (( ${#text[@]} == 0 )) || "${STEPS[@]}" eval-text --lang "$TGT" --hyp "$out/hyp.txt" "${text[@]}"
  "${STEPS[@]}" score --hyp "$out/hyp.txt" --ref "$refs/$EVAL_SUBSET.$TGT" --tokenize "$SACREBLEU_TOK" "${tokargs[@]}" \
    --record "$out/averaged.json" --record "$out/data.check.json" --record "$out/evaluated_with.json" \
    --text "arch_requested=$ARCH" --text "checkpoint=$ckpt" --number "beam=$BEAM" --number "lenpen=$LENPEN" \
    --text "paper_table_metric=${PAPER_METRIC:-}" \
    --subset "$key" --run-dir "$SAVE_DIR" --src "$refs/$EVAL_SUBSET.$SRC" --output "$out/scores.json" \
    --publish "$final"
  log "run record: $SAVE_DIR/run.json; compare runs: fairseq-attn-results --ref $refs/$EVAL_SUBSET.$TGT RUN_DIRS..."
}

# concat_parts NAME:SRC_GLOB:TGT_GLOB...: the training corpus from aligned parts (each checked:
# line counts, script of each side), with the pair count of each part in train.parts.json.
# MISSING_PARTS (array): parts left out, recorded as such.
concat_parts() {
  local args=() p
  for p in "$@"; do args+=(--part "$p"); done
  "${STEPS[@]}" concat-parts "${args[@]}" --src-lang "$SRC" --tgt-lang "$TGT" \
    --src-out "$WORK/raw/train.$SRC" --tgt-out "$WORK/raw/train.$TGT" \
    --record "$WORK/raw/train.parts.json" --missing ${MISSING_PARTS[@]+"${MISSING_PARTS[@]}"}
}

# extra_pairs_parts "a.src:a.tgt b.src:b.tgt": EXTRA_TRAIN_PAIRS as concat_parts arguments
extra_pairs_parts() {
  local pair i=0
  for pair in $1; do
    i=$((i + 1))
    [[ -f ${pair%%:*} && -f ${pair#*:} ]] || die "EXTRA_TRAIN_PAIRS: ${pair%%:*} or ${pair#*:} does not exist"
    echo "extra$i:${pair%%:*}:${pair#*:}"
  done
}
