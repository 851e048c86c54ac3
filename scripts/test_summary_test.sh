#!/usr/bin/env bash
exec python3 -u scripts/test_summary_test.py
