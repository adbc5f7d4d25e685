#!/usr/bin/env bash
# bible_grc_en: train (settings in env.sh, steps in ../lib/common.sh; see README.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/seeds.sh"
for_each_seed train_main "$@"
