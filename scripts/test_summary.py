#!/usr/bin/env python3
"""The closing line of scripts/test.sh: 'N passed, N failed, N skipped'.

usage: test_summary.py [--bep LABEL=FILE]... [--check NAME=pass|fail]...
                       [--skip NAME=REASON]... [--step NAME=SECONDS]...

Each FILE is the build event protocol of one `bazel test` invocation
(--build_event_json_file). Bazel's own verdicts decide:

  * the tests of this run are the targets that have a testSummary event in
    FILE, nothing else (no stale test.xml of an earlier run is ever read);
  * a target whose overall status is anything but PASSED (FAILED, TIMEOUT,
    FLAKY, NO_STATUS, INCOMPLETE, FAILED_TO_BUILD, ...) is a failure whatever
    its XML says: its failed cases count as failed, its passed cases do not
    count, and if its XML lists no failed case the target itself counts as
    one failure (a sanitizer report, a crash at exit, a wrapper script's
    later check, a timeout);
  * the cases of a PASSED target come from the test.xml files its
    testResult events name (the last attempt of each run and shard): passed,
    failed (a failed case is red even in a target Bazel passed) and skipped,
    each skip listed with its reason;
  * a test target built but not run (left out by the configuration's tag
    filters, e.g. no_asan under --config=asan) is one skipped case, its tags
    given as the reason;
  * a target that did not build, an invocation that exited other than 0
    (success) or 3 (tests failed) without a failed target to show for it, or
    a FILE that is missing or never finished, is a failure.

Each --check is one more case (a step that is not a Bazel test), each --skip
one more skipped case with its reason. The exit status is 1 if anything
failed, else 0.

After the skips and before the failures and the closing line come the wall
time of each --step, in the order given (a step named "total" last), and
how many test targets Bazel ran and how many of their results it took from
a cache (the local action cache or
the disk cache: a target counts as cached when every run and shard of it
was), so that a cached pass is never mistaken for a run.
"""
import argparse
import json
import os
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "testing"))
import junit  # noqa: E402

# BuildEventStream exit codes that mean the tests ran and gave a verdict.
OK_EXIT_CODES = (0, 3)


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.failures = []  # lines
        self.skips = []     # lines
        self.targets_run = 0     # test targets whose result Bazel computed in this run
        self.targets_cached = 0  # test targets whose result came from a cache

    def fail(self, line):
        self.failed += 1
        self.failures.append(line)


def _path_of(uri):
    if uri.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(uri).path)
    return uri


def read_events(path):
    """The events of a BEP JSON file; raises OSError/ValueError."""
    events = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except ValueError as e:
                raise ValueError("%s:%d: not a build event: %s" % (path, n, e))
    return events


def count_invocation(label, path, tally):
    try:
        events = read_events(path)
    except (OSError, ValueError) as e:
        tally.fail("%s: no build event file from bazel (%s)" % (label, e))
        return
    summaries = {}   # target label -> overallStatus
    results = {}     # (target, run, shard) -> (attempt, xml path, log path, cached)
    broken = {}      # target label -> why it did not build
    tests = {}       # test target label -> its tags (every test target configured)
    exit_code = None
    exit_name = ""
    for ev in events:
        eid = ev.get("id", {})
        if "testSummary" in eid:
            target = eid["testSummary"]["label"]
            summaries[target] = ev.get("testSummary", {}).get("overallStatus", "NO_STATUS")
        elif "testResult" in eid:
            rid = eid["testResult"]
            key = (rid["label"], rid.get("run", 1), rid.get("shard", 1))
            attempt = rid.get("attempt", 1)
            xml = log = None
            result = ev.get("testResult", {})
            cached = bool(result.get("cachedLocally") or result.get("executionInfo", {}).get("cachedRemotely"))
            for out in result.get("testActionOutput", []):
                if out.get("name") == "test.xml":
                    xml = _path_of(out.get("uri", ""))
                elif out.get("name") == "test.log":
                    log = _path_of(out.get("uri", ""))
            if key not in results or attempt >= results[key][0]:
                results[key] = (attempt, xml, log, cached)
        elif "targetConfigured" in eid:
            configured = ev.get("configured", {})
            if "testSize" in configured or configured.get("targetKind", "").endswith("_test rule"):
                tests[eid["targetConfigured"]["label"]] = configured.get("tag", [])
        elif "targetCompleted" in eid:
            target = eid["targetCompleted"]["label"]
            if "aborted" in ev:
                a = ev["aborted"]
                broken[target] = ("%s %s" % (a.get("reason", ""), a.get("description", ""))).strip()
            elif not ev.get("completed", {}).get("success", False):
                broken[target] = "failed to build"
        elif "buildFinished" in eid:
            finished = ev.get("finished", {})
            code = finished.get("exitCode", {})
            exit_code = code.get("code", 0)
            exit_name = code.get("name", "")
    before = tally.failed
    for target in sorted(broken):
        if target not in summaries:
            tally.fail("%s %s: did not build (%s)" % (label, target, broken[target]))
    for target in sorted(tests):
        if target not in summaries and target not in broken:
            # Built, not run: this configuration's tag filters leave it out.
            tags = ", ".join(tests[target]) or "none"
            tally.skipped += 1
            tally.skips.append("%s %s: not run in this configuration (its tags: %s)" % (label, target, tags))
    for target in sorted(summaries):
        status = summaries[target]
        shards = sorted((k, v) for k, v in results.items() if k[0] == target)
        cases = []
        logs = []
        if shards and all(cached for _, (_, _, _, cached) in shards):
            tally.targets_cached += 1
        elif shards:
            tally.targets_run += 1
        for _, (_, xml, log, _) in shards:
            if log:
                logs.append(log)
            if xml and os.path.exists(xml):
                cases.extend(junit.read_cases(xml))
            elif status == "PASSED":
                cases.append(junit.Case(target, junit.FAILED, 0.0, "no test.xml at %s" % xml))
        if status == "PASSED" and not shards:
            cases.append(junit.Case(target, junit.FAILED, 0.0, "passed, but bazel reported no test result"))
        where = (" (log: %s)" % logs[0]) if logs else ""
        bad = [c for c in cases if c.status == junit.FAILED]
        for c in bad:
            first = c.message.strip().splitlines()[0] if c.message.strip() else "failed"
            tally.fail("%s %s %s: %s%s" % (label, target, c.name, first[:300], where))
        for c in cases:
            if c.status == junit.SKIPPED:
                tally.skipped += 1
                tally.skips.append("%s %s %s: %s" % (label, target, c.name, c.message.strip().splitlines()[-1]
                                                     if c.message.strip() else "no reason given"))
        if status == "PASSED":
            tally.passed += sum(c.status == junit.PASSED for c in cases)
        elif not bad:
            n = sum(c.status == junit.PASSED for c in cases)
            after = (": its %d case(s) passed, so the failure came after them (exit status, sanitizer report, "
                     "crash at exit, a later check, timeout)" % n) if n else ""
            tally.fail("%s %s: bazel says %s%s%s" % (label, target, status, after, where))
    if exit_code is None:
        tally.fail("%s: bazel did not finish (no buildFinished event in %s)" % (label, path))
    elif exit_code not in OK_EXIT_CODES and tally.failed == before:
        tally.fail("%s: bazel exited %d (%s)" % (label, exit_code, exit_name))
    elif exit_code == 3 and tally.failed == before:
        tally.fail("%s: bazel says tests failed (exit 3), and no failed test was found in its events" % label)


def print_steps(items):
    """The table of step wall times, "total" last."""
    steps = []
    for item in items:
        name, _, seconds = item.rpartition("=")
        try:
            steps.append((name, int(float(seconds))))
        except ValueError:
            steps.append((name, None))
    total = [s for s in steps if s[0] == "total"]
    steps = [s for s in steps if s[0] != "total"]
    width = max([len(n) for n, _ in steps + total] + [4])

    def row(name, seconds):
        if seconds is None:
            return "%-*s  %7s" % (width, name, "?")
        return "%-*s  %7d  %3d:%02d" % (width, name, seconds, seconds // 60, seconds % 60)

    print("%-*s  %7s  %6s" % (width, "step", "seconds", "m:ss"))
    for name, seconds in steps:
        print(row(name, seconds))
    for name, seconds in total:
        print(row(name, seconds))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--bep", action="append", default=[], help="LABEL=FILE")
    parser.add_argument("--check", action="append", default=[], help="NAME=pass|fail")
    parser.add_argument("--skip", action="append", default=[], help="NAME=REASON")
    parser.add_argument("--step", action="append", default=[], help="NAME=SECONDS")
    args = parser.parse_args(argv)
    tally = Tally()
    for item in args.bep:
        label, _, path = item.partition("=")
        try:
            count_invocation(label, path, tally)
        except Exception as e:  # a malformed event: counted, never a crash
            tally.fail("%s: cannot read the build events in %s: %r" % (label, path, e))
    for item in args.check:
        name, _, result = item.rpartition("=")
        if result == "pass":
            tally.passed += 1
        else:
            tally.fail(name)
    for item in args.skip:
        name, _, reason = item.partition("=")
        tally.skipped += 1
        tally.skips.append("%s: %s" % (name, reason))
    for line in tally.skips:
        print("SKIPPED: " + line)
    if args.step:
        print_steps(args.step)
    if tally.targets_run or tally.targets_cached:
        print("bazel test targets: %d run, %d results from the cache" % (tally.targets_run, tally.targets_cached))
    for line in tally.failures:
        print("FAILED: " + line)
    print("%d passed, %d failed, %d skipped" % (tally.passed, tally.failed, tally.skipped))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
