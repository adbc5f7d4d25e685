#!/usr/bin/env bash
# bible_grc_en: prepare (settings in env.sh, steps in ../lib/common.sh; see README.md)
. "$(dirname "$0")/env.sh"
prepare_main "$@"
