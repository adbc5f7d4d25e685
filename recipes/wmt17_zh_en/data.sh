#!/usr/bin/env bash
# wmt17_zh_en: list or prune the prepared data in WORK/data (steps in ../lib/common.sh; see docs/howto/runs.md)
. "$(dirname "$0")/env.sh"
data_main "$@"
