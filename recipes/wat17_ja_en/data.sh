#!/usr/bin/env bash
# wat17_ja_en: list or prune the prepared data in WORK/data (steps in ../lib/common.sh; see docs/howto/runs.md)
. "$(dirname "$0")/env.sh"
data_main "$@"
