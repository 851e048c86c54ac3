#!/usr/bin/env bash
# Passes one check, skips one with its reason, then dies with exit 5.
source tests/testing/cases.sh
case_check "true succeeds" true
case_skip "not here" "skipped on purpose: the counting fixture's skip"
exit 5
