#!/usr/bin/env bash
# bible_grc_en: train short, test long (settings in env.sh, steps in ../lib/lengths.sh; see docs/howto/lengths.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/lengths.sh"
lengths_main "$@"
