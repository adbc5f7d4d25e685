# Converged runs and learning curves of a study (CONVERGE=P, CURVE=U1,U2,...): sourced by
# recipes/lib/lengths.sh and recipes/lib/paper.sh, the one check of both variables.
#
# CONVERGE=P: every run trains until its validation loss has not improved for P validations, one every
# SAVE_INTERVAL_UPDATES updates (fairseq's --patience, its counter read back from train.log on a resume:
# fairseq_attn_recipes/patience.py), at most MAX_UPDATE updates (the cap); the run record says what
# stopped it (trainings[-1].stopped: patience or the cap). CURVE=U1,U2,...: the checkpoints of those
# updates are kept (never pruned), for the study to evaluate each.

# check_converge_curve ARCH: CURVE and CONVERGE, before any work, against the cap of updates and the save
# interval of the study's training (MAX_UPDATE, SAVE_INTERVAL_UPDATES: ARCH's profile, as train.sh reads
# it); sets fairseq's flags for them (train.sh passes them on)
check_converge_curve() {
  [[ -n ${CURVE:-}${CONVERGE:-} ]] || return 0
  local both cap interval u prev=0 g=0 a b
  if [[ -n ${MAX_UPDATE:-} && -n ${SAVE_INTERVAL_UPDATES:-} ]]; then both="$MAX_UPDATE $SAVE_INTERVAL_UPDATES"  # given
  else both=$(profile --arch "$1" --only MAX_UPDATE SAVE_INTERVAL_UPDATES; echo "${MAX_UPDATE:-0} ${SAVE_INTERVAL_UPDATES:-0}") || exit 1; fi
  read -r cap interval <<< "$both"
  [[ $cap =~ ^[0-9]+$ && $interval =~ ^[0-9]+$ ]] \
    || die "MAX_UPDATE=$cap and SAVE_INTERVAL_UPDATES=$interval: give whole numbers (CURVE and CONVERGE are checked against them)"
  CURVE_CAP=$cap
  if [[ -n ${CONVERGE:-} ]]; then
    [[ $CONVERGE =~ ^[1-9][0-9]*$ ]] || die "CONVERGE=$CONVERGE: give the patience, how many validations without improvement of the validation loss stop a run (a positive integer; the cap: MAX_UPDATE=$cap updates)"
    (( interval > 0 )) || die "CONVERGE=$CONVERGE: it validates every SAVE_INTERVAL_UPDATES updates; give SAVE_INTERVAL_UPDATES (a positive integer)"
    PATIENCE=$CONVERGE; VALIDATE_INTERVAL_UPDATES=$interval
    VALIDATE_INTERVAL=1000000  # no validation at epoch ends: both conditions validate at the same updates
  fi
  [[ -n ${CURVE:-} ]] || return 0
  [[ $CURVE =~ ^[0-9]+(,[0-9]+)*$ ]] || die "CURVE=$CURVE: give the updates of the learning curve, positive integers in increasing order separated by commas (e.g. 1000,2000,4000)"
  (( interval > 0 )) || die "CURVE=$CURVE: checkpoints are kept every SAVE_INTERVAL_UPDATES updates; give SAVE_INTERVAL_UPDATES (a positive integer)"
  for u in ${CURVE//,/ }; do
    u=$((10#$u))
    (( u >= 1 )) || die "CURVE=$CURVE: $u is not a positive number of updates"
    (( u > prev )) || die "CURVE=$CURVE: give the updates in increasing order, each once ($u after $prev)"
    (( u <= cap )) || die "CURVE=$CURVE: $u is beyond the cap of MAX_UPDATE=$cap updates"
    (( u % interval == 0 )) || die "CURVE=$CURVE: $u is not a multiple of SAVE_INTERVAL_UPDATES=$interval (checkpoints are saved every $interval updates)"
    prev=$u
    a=$g; b=$u; while (( b )); do local t=$((a % b)); a=$b; b=$t; done; g=$a
  done
  KEEP_INTERVAL_UPDATES_PATTERN=$g  # fairseq never prunes a checkpoint whose update is a multiple of it
}
