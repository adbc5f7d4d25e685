#!/usr/bin/env bash
# wmt14_en_de: the CSAN paper's Figure 2 (steps in ../lib/paper.sh; see docs/howto/table1.md)
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/../lib/paper.sh"
figure2_main "$@"
