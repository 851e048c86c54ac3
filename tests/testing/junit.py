"""Test cases as Bazel reads them: JUnit XML at $XML_OUTPUT_FILE.

Bazel writes one test case per test target unless the test writes its own
XML; our tests that make several checks write their own, so that every check
is a case in scripts/test.sh's count and a skip is counted with its reason.

Two uses:
  * Python tests: `junit.main()` in place of `unittest.main()` runs the
    calling module's tests verbosely, writes every test method as a case
    (with its time, failure text, or skip reason), and exits 1 if any failed
    or errored (a failure in setUpClass counts as a case of its own).
  * Shell tests (tests/testing/cases.sh): `python3 junit.py write OUT
    CASES.tsv [PREFIX=GTEST.xml ...]` turns the cases a script recorded, and
    the cases of gtest binaries it ran, into one XML file.

A case is (name, status, seconds, message) with status passed, failed or
skipped.
"""
import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class Case:
    def __init__(self, name, status, seconds=0.0, message="", classname=None):
        assert status in (PASSED, FAILED, SKIPPED), status
        self.name = name
        self.status = status
        self.seconds = seconds
        self.message = message
        self.classname = classname  # a Python test's class; None for a shell check


def _clean(text):
    # XML 1.0 forbids most control characters; test output may hold them.
    return "".join(c if c in "\t\n\r" or ord(c) >= 0x20 else "?" for c in str(text))


def write_xml(path, suite, cases):
    """Writes `cases` as one <testsuite> named `suite` to `path` (atomically:
    a reader never sees half a file)."""
    failures = sum(c.status == FAILED for c in cases)
    skipped = sum(c.status == SKIPPED for c in cases)
    total = sum(c.seconds for c in cases)
    root = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), errors="0",
                      skipped=str(skipped), time="%.3f" % total)
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures),
                       errors="0", skipped=str(skipped), time="%.3f" % total)
    for c in cases:
        tc = ET.SubElement(ts, "testcase", name=_clean(c.name), time="%.3f" % c.seconds)
        if c.classname:
            tc.set("classname", c.classname)
        if c.status == FAILED:
            first = c.message.strip().splitlines()[0] if c.message.strip() else "failed"
            f = ET.SubElement(tc, "failure", message=_clean(first[:500]))
            f.text = _clean(c.message)
        elif c.status == SKIPPED:
            ET.SubElement(tc, "skipped", message=_clean(c.message or "skipped (no reason given)"))
    tmp = path + ".tmp"
    ET.ElementTree(root).write(tmp, encoding="UTF-8", xml_declaration=True)
    os.replace(tmp, path)


def read_cases(path, prefix=""):
    """The cases of a JUnit XML file (gtest's or ours), names prefixed
    `prefix` + "Suite.case". A file that does not parse is one failed case."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return [Case(prefix.rstrip("/") or path, FAILED, 0.0, "no readable XML at %s: %s" % (path, e))]
    cases = []
    for tc in root.iter("testcase"):
        name = tc.get("name", "?")
        cls = tc.get("classname")
        full = prefix + (cls + "." + name if cls else name)
        seconds = float(tc.get("time") or 0.0)
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        skip = tc.find("skipped")
        if bad is not None:
            cases.append(Case(full, FAILED, seconds, bad.get("message") or bad.text or "failed"))
        elif skip is not None or tc.get("status") == "notrun" or tc.get("result") in ("skipped", "suppressed"):
            why = skip.get("message") if skip is not None else None
            if not why:
                why = "disabled" if tc.get("status") == "notrun" else "skipped (no reason given)"
            cases.append(Case(full, SKIPPED, seconds, why))
        else:
            cases.append(Case(full, PASSED, seconds))
    return cases


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _add(self, test, status, message=""):
        began = self._started.pop(test.id(), None)
        seconds = time.monotonic() - began if began is not None else 0.0
        # "__main__.SystemTest.test_x" -> class SystemTest, case test_x (a
        # failure in setUpClass has an id without a method).
        parts = test.id().split(".")
        if len(parts) >= 3 and parts[0] == "__main__":
            parts = parts[1:]
        classname, name = (".".join(parts[:-1]), parts[-1]) if len(parts) >= 2 else (None, test.id())
        self.cases.append(Case(name, status, seconds, message, classname))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, PASSED)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, FAILED, self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, FAILED, self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, SKIPPED, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._add(test, PASSED)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._add(test, FAILED, "unexpected success of a test marked expectedFailure")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            # A failing subtest fails its test; unittest reports it here only.
            self._add(subtest, FAILED, self._exc_info_to_string(err, test))


def main(argv=None, module="__main__"):
    """Runs the tests of `module` (unittest's argv: test names to select),
    writes $XML_OUTPUT_FILE, exits 0 only if every test passed or skipped
    with a reason."""
    argv = list(sys.argv if argv is None else argv)
    program = unittest.TestProgram(module=module, argv=argv, exit=False,
                                   testRunner=unittest.TextTestRunner(verbosity=2, resultclass=_Result))
    result = program.result
    ran = len(result.cases)
    out = os.environ.get("XML_OUTPUT_FILE")
    if out:
        suite = os.path.splitext(os.path.basename(sys.modules[module].__file__ or "tests"))[0]
        write_xml(out, suite, result.cases)
    for c in result.cases:
        if c.status == SKIPPED:
            print("SKIPPED: %s: %s" % (c.name, c.message))
    if ran == 0:
        print("FAIL: no test ran")
        sys.exit(1)
    sys.exit(0 if all(c.status != FAILED for c in result.cases) and result.wasSuccessful() else 1)


def _cli(args):
    if len(args) < 3 or args[0] != "write":
        sys.stderr.write("usage: junit.py write OUT.xml CASES.tsv [PREFIX=GTEST.xml ...]\n")
        return 2
    out, tsv = args[1], args[2]
    cases = []
    with open(tsv, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            kind, rest = line.split("\t", 1)
            if kind == "gtest":
                prefix, path = rest.split("\t", 1)
                cases.extend(read_cases(path, prefix))
                continue
            name, seconds, message = rest.split("\t", 2)
            message = message.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
            cases.append(Case(name, kind, float(seconds), message))
    suite = os.environ.get("TEST_TARGET", os.path.basename(tsv))
    write_xml(out, suite, cases)
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
