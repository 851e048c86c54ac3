"""scripts/test_summary.py on build event files written here: Bazel's verdict
decides, cases come only from the XML the events name, skips are counted
with their reasons, and anything unexplained is a failure."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testing"))
import junit  # noqa: E402
import test_summary  # noqa: E402

CONFIG = {"id": "c0ffee"}


class Bep:
    """Writes a BEP JSON file and the test.xml files it names."""

    def __init__(self, root):
        self.root = root
        self.events = []
        self.exit_code = (3, "TESTS_FAILED")

    def _xml(self, target, attempt, cases, shard=1):
        if cases is None:
            return None
        path = os.path.join(self.root, target.strip("/").replace(":", "/"), "shard%d-attempt%d" % (shard, attempt),
                            "test.xml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        junit.write_xml(path, target, [junit.Case(n, st, 0.1, m) for n, st, m in cases])
        return path

    def configured(self, target, tags=()):
        self.events.append({"id": {"targetConfigured": {"label": target}},
                            "configured": {"targetKind": "cc_test rule", "testSize": "SMALL", "tag": list(tags)}})

    def built(self, target, success=True):
        completed = {"success": True} if success else {}
        self.events.append({"id": {"targetCompleted": {"label": target, "configuration": CONFIG}},
                            "completed": completed})

    def result(self, target, cases, attempt=1, shard=1, status="PASSED", cached=None):
        outputs = [{"name": "test.log", "uri": "file://" + os.path.join(self.root, "test.log")}]
        xml = self._xml(target, attempt, cases, shard)
        if xml:
            outputs.append({"name": "test.xml", "uri": "file://" + xml})
        result = {"testActionOutput": outputs, "status": status}
        if cached == "locally":  # the output base's action cache
            result["cachedLocally"] = True
        elif cached == "disk":  # --disk_cache, which Bazel reports as a remote cache
            result["executionInfo"] = {"cachedRemotely": True, "strategy": "remote-cache"}
        self.events.append({"id": {"testResult": {"label": target, "run": 1, "shard": shard, "attempt": attempt,
                                                  "configuration": CONFIG}},
                            "testResult": result})

    def summary(self, target, status):
        self.events.append({"id": {"testSummary": {"label": target, "configuration": CONFIG}},
                            "testSummary": {"overallStatus": status, "totalRunCount": 1}})

    def test(self, target, status, cases, tags=()):
        """A test target configured, built, run once, judged `status`."""
        self.configured(target, tags)
        self.built(target)
        self.result(target, cases, status=status)
        self.summary(target, status)

    def write(self, name="bep.json", finished=True):
        path = os.path.join(self.root, name)
        with open(path, "w") as f:
            for ev in self.events:
                f.write(json.dumps(ev) + "\n")
            if finished:
                code, name_ = self.exit_code
                f.write(json.dumps({"id": {"buildFinished": {}},
                                    "finished": {"exitCode": {"name": name_, "code": code}}}) + "\n")
        return path


P, F, S = junit.PASSED, junit.FAILED, junit.SKIPPED


class TestSummaryTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.bep = Bep(self.root)

    def run_summary(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = test_summary.main(list(args))
        lines = out.getvalue().splitlines()
        return rc, lines[-1], lines[:-1]

    def summarize(self, *extra):
        return self.run_summary("--bep", "default=" + self.bep.write(), *extra)

    def test_a_target_that_fails_after_an_all_pass_xml_is_one_failure(self):
        self.bep.test("//t:lying_test", "FAILED", [("Suite.Passes", P, "")])
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "0 passed, 1 failed, 0 skipped"))
        self.assertIn("bazel says FAILED: its 1 case(s) passed, so the failure came after them", lines[-1])

    def test_passes_and_skips_are_counted_and_skips_say_why(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.test("//t:a_test", "PASSED", [("A.x", P, ""), ("A.y", P, ""), ("A.gpu", S, "no CUDA device")])
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (0, "2 passed, 0 failed, 1 skipped"))
        self.assertEqual(lines, ["SKIPPED: default //t:a_test A.gpu: no CUDA device",
                                 "bazel test targets: 1 run, 0 results from the cache"])

    def test_only_the_xml_the_events_name_is_read(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.test("//t:a_test", "PASSED", [("A.x", P, "")])
        # A stale result of a target that is not part of this run.
        stale = os.path.join(self.root, "t", "renamed_test", "test.xml")
        os.makedirs(os.path.dirname(stale))
        junit.write_xml(stale, "//t:renamed_test", [junit.Case("Old.fails", F, 0, "boom")])
        self.assertEqual(self.summarize()[:2], (0, "1 passed, 0 failed, 0 skipped"))

    def test_every_verdict_but_passed_is_a_failure(self):
        for status in ("FAILED", "TIMEOUT", "FLAKY", "NO_STATUS", "INCOMPLETE", "REMOTE_FAILURE"):
            with self.subTest(status=status):
                self.bep = Bep(tempfile.mkdtemp(dir=self.root))
                self.bep.test("//t:x_test", status, [("X.ok", P, "")])
                rc, last, lines = self.summarize()
                self.assertEqual((rc, last), (1, "0 passed, 1 failed, 0 skipped"))
                self.assertIn("bazel says " + status, lines[-1])

    def test_a_timeout_without_xml_is_one_failure(self):
        self.bep.test("//t:slow_test", "TIMEOUT", None)
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "0 passed, 1 failed, 0 skipped"))
        self.assertIn("//t:slow_test: bazel says TIMEOUT", lines[-1])

    def test_failed_cases_count_and_a_failed_targets_passes_do_not(self):
        self.bep.test("//t:mixed_test", "FAILED", [("M.a", P, ""), ("M.b", F, "expected 1, got 2"), ("M.c", F, "x")])
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "0 passed, 2 failed, 0 skipped"))
        self.assertIn("//t:mixed_test M.b: expected 1, got 2", lines[1])

    def test_a_failed_case_in_a_passed_target_is_still_red(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.test("//t:odd_test", "PASSED", [("O.a", P, ""), ("O.b", F, "bad")])
        self.assertEqual(self.summarize()[:2], (1, "1 passed, 1 failed, 0 skipped"))

    def test_a_target_that_does_not_build_is_a_failure(self):
        self.bep.exit_code = (1, "BUILD_FAILURE")
        self.bep.configured("//t:broken_test")
        self.bep.built("//t:broken_test", success=False)
        self.bep.test("//t:fine_test", "PASSED", [("F.a", P, "")])
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "1 passed, 1 failed, 0 skipped"))
        self.assertIn("//t:broken_test: did not build", lines[-1])

    def test_an_aborted_target_is_a_failure(self):
        self.bep.exit_code = (1, "BUILD_FAILURE")
        self.bep.events.append({"id": {"targetCompleted": {"label": "//t:gone_test", "configuration": CONFIG}},
                                "aborted": {"reason": "ANALYSIS_FAILURE", "description": "no such target"}})
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "0 passed, 1 failed, 0 skipped"))
        self.assertIn("did not build (ANALYSIS_FAILURE no such target)", lines[-1])

    def test_a_test_left_out_by_tag_filters_is_a_skip_with_its_tags(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.configured("//t:memory_test", tags=["no_asan"])
        self.bep.built("//t:memory_test")
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (0, "0 passed, 0 failed, 1 skipped"))
        self.assertEqual(lines, ["SKIPPED: default //t:memory_test: not run in this configuration (its tags: no_asan)"])

    def test_the_last_attempt_and_every_shard_count(self):
        self.bep.exit_code = (0, "SUCCESS")
        target = "//t:sharded_test"
        self.bep.configured(target)
        self.bep.built(target)
        self.bep.result(target, [("S.a", F, "first try")], attempt=1, shard=1, status="FAILED")
        self.bep.result(target, [("S.a", P, "")], attempt=2, shard=1)
        self.bep.result(target, [("S.b", P, ""), ("S.c", P, "")], attempt=1, shard=2)
        self.bep.summary(target, "PASSED")
        self.assertEqual(self.summarize()[:2], (0, "3 passed, 0 failed, 0 skipped"))

    def test_an_unexplained_bazel_failure_is_a_failure(self):
        self.bep.exit_code = (1, "BUILD_FAILURE")
        self.bep.test("//t:a_test", "PASSED", [("A.x", P, "")])
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (1, "1 passed, 1 failed, 0 skipped"))
        self.assertIn("bazel exited 1 (BUILD_FAILURE)", lines[-1])
        self.bep = Bep(tempfile.mkdtemp(dir=self.root))
        self.bep.exit_code = (3, "TESTS_FAILED")
        self.assertEqual(self.summarize()[:2], (1, "0 passed, 1 failed, 0 skipped"))

    def test_a_missing_or_unfinished_event_file_is_a_failure(self):
        rc, last, lines = self.run_summary("--bep", "asan=" + os.path.join(self.root, "none.json"))
        self.assertEqual((rc, last), (1, "0 passed, 1 failed, 0 skipped"))
        self.assertIn("asan: no build event file from bazel", lines[-1])
        self.bep.test("//t:a_test", "PASSED", [("A.x", P, "")])
        rc, last, lines = self.run_summary("--bep", "tsan=" + self.bep.write(finished=False))
        self.assertEqual((rc, last), (1, "1 passed, 1 failed, 0 skipped"))
        self.assertIn("tsan: bazel did not finish", lines[-1])

    def test_checks_and_skips_from_the_script(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.test("//t:a_test", "PASSED", [("A.x", P, "")])
        rc, last, lines = self.summarize("--check", "fuzz=pass", "--check", "cuda build=fail",
                                         "--skip", "gpu=no GPU here")
        self.assertEqual((rc, last), (1, "2 passed, 1 failed, 1 skipped"))
        self.assertIn("SKIPPED: gpu: no GPU here", lines)
        self.assertIn("FAILED: cuda build", lines)


    def test_results_from_a_cache_are_counted_apart_from_runs(self):
        self.bep.exit_code = (0, "SUCCESS")
        self.bep.test("//t:ran_test", "PASSED", [("R.x", P, "")])
        for target, how in (("//t:local_test", "locally"), ("//t:disk_test", "disk")):
            self.bep.configured(target)
            self.bep.built(target)
            self.bep.result(target, [("C.x", P, "")], cached=how)
            self.bep.summary(target, "PASSED")
        # Two shards, one of them cached: the target ran.
        self.bep.configured("//t:sharded_test")
        self.bep.built("//t:sharded_test")
        self.bep.result("//t:sharded_test", [("S.a", P, "")], shard=1, cached="disk")
        self.bep.result("//t:sharded_test", [("S.b", P, "")], shard=2)
        self.bep.summary("//t:sharded_test", "PASSED")
        rc, last, lines = self.summarize()
        self.assertEqual((rc, last), (0, "5 passed, 0 failed, 0 skipped"))
        self.assertEqual(lines, ["bazel test targets: 2 run, 2 results from the cache"])

    def test_the_steps_table_comes_before_the_failures_and_the_closing_line(self):
        self.bep.test("//t:x_test", "FAILED", [("X.a", F, "boom")])
        rc, last, lines = self.summarize("--step", "total=4241", "--step", "setup=12", "--step", "bazel test asan=1830",
                                         "--skip", "gpu=no GPU here")
        self.assertEqual((rc, last), (1, "0 passed, 1 failed, 1 skipped"))
        self.assertEqual(lines, [
            "SKIPPED: gpu: no GPU here",
            "step             seconds    m:ss",
            "setup                 12    0:12",
            "bazel test asan     1830   30:30",
            "total               4241   70:41",
            "bazel test targets: 1 run, 0 results from the cache",
            "FAILED: default //t:x_test X.a: boom (log: %s)" % os.path.join(self.root, "test.log"),
        ])


if __name__ == "__main__":
    junit.main()
