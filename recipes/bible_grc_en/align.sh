#!/usr/bin/env bash
# bible_grc_en: attention as alignment, AER against the gold word alignments (settings in env.sh, steps in ../lib/align.sh; see docs/howto/alignment.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/align.sh"
align_main "$@"
