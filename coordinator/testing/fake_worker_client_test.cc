#include "coordinator/testing/fake_worker_client.h"

#include <future>
#include <thread>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

class StepResponder : public FakeWorker::Responder {
 public:
  absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& request) override {
    RunStepsResponse response;
    response.set_last_step(request.first_step() + request.num_steps());
    return response;
  }
};

RunStepsRequest Steps(int64_t first, int64_t n) {
  RunStepsRequest request;
  request.set_first_step(first);
  request.set_num_steps(n);
  return request;
}

// Starts RunSteps on `client`; the future holds its outcome and the thread
// `done` ran on.
struct Outcome {
  absl::StatusOr<RunStepsResponse> response;
  std::thread::id thread;
};
std::future<Outcome> RunSteps(WorkerClient* client, const RunStepsRequest& request) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  std::future<Outcome> future = promise->get_future();
  client->RunStepsAsync(request, [promise](absl::StatusOr<RunStepsResponse> r) {
    promise->set_value(Outcome{std::move(r), std::this_thread::get_id()});
  });
  return future;
}

constexpr auto kBound = std::chrono::seconds(10);

TEST(FakeWorkerTest, ACallNotHeldIsAnsweredByTheResponderOnATransportThread) {
  FakeWorker worker(std::make_shared<StepResponder>());
  std::unique_ptr<WorkerClient> client = worker.Connect();
  std::future<Outcome> f = RunSteps(client.get(), Steps(20, 5));
  ASSERT_EQ(f.wait_for(kBound), std::future_status::ready);
  Outcome o = f.get();
  ASSERT_THAT(o.response.status(), IsOk());
  EXPECT_EQ(o.response->last_step(), 25);
  EXPECT_NE(o.thread, std::this_thread::get_id());
  EXPECT_EQ(worker.calls(WorkerMethod::kRunSteps), 1);
  EXPECT_EQ(worker.calls(WorkerMethod::kEvaluate), 0);
}

TEST(FakeWorkerTest, AMethodTheResponderLacksIsUnimplementedByName) {
  FakeWorker worker(std::make_shared<FakeWorker::Responder>());
  std::unique_ptr<WorkerClient> client = worker.Connect();
  std::promise<absl::StatusOr<EvaluateResponse>> p;
  client->EvaluateAsync(EvaluateRequest(), [&](absl::StatusOr<EvaluateResponse> r) { p.set_value(std::move(r)); });
  EXPECT_THAT(p.get_future().get().status(),
              StatusIs(absl::StatusCode::kUnimplemented, "this fake worker does not answer Evaluate"));
  std::promise<absl::Status> aborted;
  client->AbortJobAsync(AbortJobRequest(), [&](absl::Status s) { aborted.set_value(std::move(s)); });
  EXPECT_THAT(aborted.get_future().get(),
              StatusIs(absl::StatusCode::kUnimplemented, "this fake worker does not answer AbortJob"));
}

TEST(FakeWorkerTest, OnlyTheNumberedCallIsHeldAndTheTestAnswersIt) {
  FakeWorker worker(std::make_shared<StepResponder>());
  worker.HoldCall(WorkerMethod::kRunSteps, 2);
  std::unique_ptr<WorkerClient> a = worker.Connect();
  std::unique_ptr<WorkerClient> b = worker.Connect();  // numbers count over every client
  std::future<Outcome> first = RunSteps(a.get(), Steps(0, 10));
  ASSERT_EQ(first.wait_for(kBound), std::future_status::ready);
  std::future<Outcome> second = RunSteps(b.get(), Steps(10, 10));
  std::unique_ptr<FakeWorker::HeldCall> held = worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->number(), 2);
  EXPECT_EQ(static_cast<const RunStepsRequest&>(held->request()).first_step(), 10);
  std::future<Outcome> third = RunSteps(a.get(), Steps(20, 10));
  ASSERT_EQ(third.wait_for(kBound), std::future_status::ready);  // the third passes the held second
  EXPECT_EQ(third.get().response->last_step(), 30);
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  RunStepsResponse mine;
  mine.set_last_step(13);
  mine.set_preempted(true);
  held->Reply(mine);
  ASSERT_EQ(second.wait_for(kBound), std::future_status::ready);
  Outcome o = second.get();
  ASSERT_THAT(o.response.status(), IsOk());
  EXPECT_EQ(o.response->last_step(), 13);
  EXPECT_TRUE(o.response->preempted());
  EXPECT_NE(o.thread, std::this_thread::get_id());
  held->Fail(absl::InternalError("too late"));  // the call has completed: no effect
}

TEST(FakeWorkerTest, RespondAnswersAHeldCallAsTheResponderWould) {
  FakeWorker worker(std::make_shared<StepResponder>());
  worker.Hold(WorkerMethod::kRunSteps);
  std::unique_ptr<WorkerClient> client = worker.Connect();
  std::future<Outcome> f = RunSteps(client.get(), Steps(40, 20));
  std::unique_ptr<FakeWorker::HeldCall> held = worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));
  ASSERT_NE(held, nullptr);
  held->Respond();
  ASSERT_EQ(f.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(f.get().response->last_step(), 60);
}

TEST(FakeWorkerTest, FailAnswersWithTheTestsStatusAndAWrongReplyTypeIsInternal) {
  FakeWorker worker(std::make_shared<StepResponder>());
  worker.Hold(WorkerMethod::kRunSteps);
  std::unique_ptr<WorkerClient> client = worker.Connect();
  std::future<Outcome> failed = RunSteps(client.get(), Steps(0, 1));
  std::future<Outcome> wrong = RunSteps(client.get(), Steps(1, 1));
  auto first = worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));
  auto second = worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->number(), 1);  // oldest first
  first->Fail(absl::UnavailableError("connection reset"));
  second->Reply(EvaluateResponse());
  EXPECT_THAT(failed.get().response.status(), StatusIs(absl::StatusCode::kUnavailable, "connection reset"));
  EXPECT_THAT(wrong.get().response.status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("replied trainyard.EvaluateResponse to RunSteps")));
}

TEST(FakeWorkerTest, CancelInFlightEndsOnlyThatClientsHeldCalls) {
  FakeWorker worker(std::make_shared<StepResponder>());
  worker.Hold(WorkerMethod::kRunSteps);
  std::unique_ptr<WorkerClient> a = worker.Connect();
  std::unique_ptr<WorkerClient> b = worker.Connect();
  std::future<Outcome> on_a = RunSteps(a.get(), Steps(0, 1));
  std::future<Outcome> on_b = RunSteps(b.get(), Steps(0, 1));
  auto taken = worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));  // a's, taken: still a's
  ASSERT_NE(taken, nullptr);
  ASSERT_NE(worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10)), nullptr);  // b's, dropped below
  a->CancelInFlight();
  ASSERT_EQ(on_a.wait_for(kBound), std::future_status::ready);
  EXPECT_THAT(on_a.get().response.status(), StatusIs(absl::StatusCode::kCancelled, "the call was cancelled"));
  // b's call, taken by the test and dropped unanswered, failed kAborted.
  ASSERT_EQ(on_b.wait_for(kBound), std::future_status::ready);
  EXPECT_THAT(on_b.get().response.status(),
              StatusIs(absl::StatusCode::kAborted, "the test dropped RunSteps call 2 unanswered"));
  taken->Respond();  // cancelled before: no second answer
}

TEST(FakeWorkerTest, StopHoldingAnswersNewCallsAndWaitForHeldTimesOut) {
  FakeWorker worker(std::make_shared<StepResponder>());
  worker.Hold(WorkerMethod::kRunSteps);
  worker.StopHolding(WorkerMethod::kRunSteps);
  std::unique_ptr<WorkerClient> client = worker.Connect();
  std::future<Outcome> f = RunSteps(client.get(), Steps(0, 3));
  ASSERT_EQ(f.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(f.get().response->last_step(), 3);
  EXPECT_EQ(worker.WaitForHeld(WorkerMethod::kRunSteps, absl::Milliseconds(10)), nullptr);
}

TEST(FakeWorkerTest, AHeldCallEndsCancelledWhenTheWorkerGoes) {
  std::future<Outcome> f;
  {
    FakeWorker worker(std::make_shared<StepResponder>());
    worker.Hold(WorkerMethod::kRunSteps);
    std::unique_ptr<WorkerClient> client = worker.Connect();
    f = RunSteps(client.get(), Steps(0, 3));
  }
  ASSERT_EQ(f.wait_for(kBound), std::future_status::ready);
  EXPECT_THAT(f.get().response.status(), StatusIs(absl::StatusCode::kCancelled, "the fake worker is gone"));
}

}  // namespace
}  // namespace trainyard
