#!/usr/bin/env bash
# bible_grc_en: a sweep of training settings on the valid set (SWEEP=FILE; steps in ../lib/sweep.sh)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/sweep.sh"
sweep_main "$@"
