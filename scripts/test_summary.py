#!/usr/bin/env python3
"""Counts test cases across Bazel test logs and extra checks; prints one line
'N passed, N failed' (and the failing names above it).

usage: test_summary.py [--testlogs LABEL=DIR]... [--check NAME=pass|fail]...

Each DIR is a bazel-testlogs tree: every test.xml in it is read, and each
<testcase> counts once (a gtest binary contributes its cases; a shell test one
case). A test target that produced no test.xml (it crashed before writing one,
or did not build) counts as one failure.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def count_tree(label, root, failures):
    passed = failed = 0
    for dirpath, _, files in os.walk(root):
        if "test.log" not in files and "test.xml" not in files:
            continue
        name = label + ":" + os.path.relpath(dirpath, root)
        xml_path = os.path.join(dirpath, "test.xml")
        try:
            tree = ET.parse(xml_path)
        except (OSError, ET.ParseError):
            failed += 1
            failures.append(name + " (no readable test.xml)")
            continue
        cases = tree.getroot().iter("testcase")
        any_case = False
        for case in cases:
            any_case = True
            bad = case.find("failure") is not None or case.find("error") is not None
            if case.get("status") == "notrun" or case.get("result") == "skipped":
                continue
            if bad:
                failed += 1
                failures.append(name + "." + case.get("name", "?"))
            else:
                passed += 1
        if not any_case:
            failed += 1
            failures.append(name + " (no test cases)")
    return passed, failed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--testlogs", action="append", default=[])
    parser.add_argument("--check", action="append", default=[])
    args = parser.parse_args()
    passed = failed = 0
    failures = []
    for item in args.testlogs:
        label, _, root = item.partition("=")
        p, f = count_tree(label, root, failures)
        passed += p
        failed += f
    for item in args.check:
        name, _, result = item.partition("=")
        if result == "pass":
            passed += 1
        else:
            failed += 1
            failures.append(name)
    for name in failures:
        print("FAILED: " + name)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
