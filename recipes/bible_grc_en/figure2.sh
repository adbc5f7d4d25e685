#!/usr/bin/env bash
# bible_grc_en: the CSAN paper's Figure 2 on the Greek-English bible's valid set, with the CPU preset of
# env.sh (steps in ../lib/paper.sh; SEEDS, CONVERGE, CURVE as there; see docs/howto/table1.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/paper.sh"
# the windows of the paper's text; the 2D-CSAN areas the preset's 4 encoder heads allow (odd: an area
# is centred on its head). Both overridable; one set empty runs the other half alone (docs/howto/table1.md: 2b at 8 heads)
WINDOWS=${WINDOWS-3,5,7,11,15}
HEADS=${HEADS-1,3}
figure2_main "$@"
