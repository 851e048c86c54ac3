#include "coordinator/job_store.h"

#include <cstdio>
#include <fstream>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
}

TEST(JobStoreTest, RecordsSurviveReopeningInSubmissionOrder) {
  const std::string path = TempPath("jobs.db");
  std::remove(path.c_str());
  {
    auto store = JobStore::Open(path);
    ASSERT_THAT(store.status(), IsOk());
    JobInfo a;
    a.set_job_id("a-2");
    a.set_state(RUNNING);
    a.mutable_spec()->set_total_steps(300);
    (*a.mutable_metrics())["loss"] = 1.25;
    JobInfo b;
    b.set_job_id("b-1");
    b.set_state(PENDING);
    ASSERT_THAT((*store)->Put(a, 2), IsOk());
    ASSERT_THAT((*store)->Put(b, 1), IsOk());
    a.set_state(SUCCEEDED);  // replaces
    ASSERT_THAT((*store)->Put(a, 2), IsOk());
  }
  auto store = JobStore::Open(path);
  ASSERT_THAT(store.status(), IsOk());
  auto records = (*store)->LoadAll();
  ASSERT_THAT(records.status(), IsOk());
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].job.job_id(), "b-1");
  EXPECT_EQ((*records)[1].job.job_id(), "a-2");
  EXPECT_EQ((*records)[1].job.state(), SUCCEEDED);
  EXPECT_EQ((*records)[1].job.spec().total_steps(), 300);
  EXPECT_EQ((*records)[1].job.metrics().at("loss"), 1.25);
}

TEST(JobStoreTest, ANonDatabaseFileIsRefusedByName) {
  const std::string path = TempPath("not-a-db");
  std::ofstream(path) << "this is a text file, not SQLite, and it is long enough to have a header\n";
  EXPECT_THAT(JobStore::Open(path).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, testing::HasSubstr("not-a-db")));
}

}  // namespace
}  // namespace trainyard
