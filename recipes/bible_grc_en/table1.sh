#!/usr/bin/env bash
# bible_grc_en: the CSAN paper's Table 1 on the Greek-English bible, with the CPU preset of env.sh
# (steps in ../lib/paper.sh; SEEDS, CONVERGE, CURVE as there; see docs/howto/table1.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/paper.sh"
table1_main "$@"
