// The membership protocol against a fake coordinator link: registration,
// heartbeats with the held job and step, the reregister after which a held
// job is kept only if the coordinator adopts it, and the orphan timeout.
#include "worker/membership.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace trainyard {
namespace {

class FakeLink : public CoordinatorLink {
 public:
  absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request) override {
    registered.push_back(request);
    return Next(&register_answers);
  }
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request) override {
    heartbeats.push_back(request);
    return Next(&heartbeat_answers);
  }
  std::vector<RegisterWorkerRequest> registered;
  std::vector<HeartbeatRequest> heartbeats;
  std::deque<absl::StatusOr<RegisterWorkerResponse>> register_answers;
  std::deque<absl::StatusOr<HeartbeatResponse>> heartbeat_answers;

 private:
  template <typename T>
  static absl::StatusOr<T> Next(std::deque<absl::StatusOr<T>>* answers) {
    if (answers->empty()) return T();
    absl::StatusOr<T> next = answers->front();
    answers->pop_front();
    return next;
  }
};

RegisterWorkerResponse Registered(const std::string& id, int64_t interval_ms) {
  RegisterWorkerResponse r;
  r.set_worker_id(id);
  r.set_heartbeat_interval_ms(interval_ms);
  return r;
}

class MembershipTest : public ::testing::Test {
 protected:
  MembershipOptions Options() {
    MembershipOptions o;
    o.coordinator = "coordinator:1";
    o.host = "host-a";
    o.address = "10.0.0.2:5000";
    o.device = "cpu";
    o.pid = 42;
    o.held_job = [this] { return job; };
    o.step = [this] { return step; };
    o.abort = [this](const std::string& j, const std::string& reason) { aborted.push_back(j + ": " + reason); };
    o.clock = &clock;
    return o;
  }
  FakeLink link;
  SimulatedClock clock;
  std::string job;
  int64_t step = 0;
  std::vector<std::string> aborted;
};

TEST_F(MembershipTest, RegistersThenHeartbeatsWithTheHeldJobAndStep) {
  link.register_answers.push_back(Registered("w1", 200));
  Membership m(&link, Options());
  job = "still-tearing-down";
  EXPECT_EQ(m.Beat(), absl::Milliseconds(200));
  ASSERT_EQ(link.registered.size(), 1u);
  const RegisterWorkerRequest& r = link.registered[0];
  EXPECT_EQ(r.host(), "host-a");
  EXPECT_EQ(r.address(), "10.0.0.2:5000");
  EXPECT_EQ(r.device(), "cpu");
  EXPECT_EQ(r.pid(), 42);
  EXPECT_EQ(r.held_job_id(), "still-tearing-down");
  EXPECT_EQ(m.worker_id(), "w1");
  job = "job-7";
  step = 130;
  EXPECT_EQ(m.Beat(), absl::Milliseconds(200));
  ASSERT_EQ(link.heartbeats.size(), 1u);
  EXPECT_EQ(link.heartbeats[0].worker_id(), "w1");
  EXPECT_EQ(link.heartbeats[0].job_id(), "job-7");
  EXPECT_EQ(link.heartbeats[0].step(), 130);
  EXPECT_TRUE(aborted.empty());
}

TEST_F(MembershipTest, AReregisterRegistersAgainAtOnceAndEndsAHeldJobNotAdopted) {
  link.register_answers.push_back(Registered("w1", 100));
  link.register_answers.push_back(Registered("w2", 100));
  HeartbeatResponse forgot;
  forgot.set_reregister(true);
  link.heartbeat_answers.push_back(forgot);
  MembershipOptions o = Options();
  o.held_attempt = [] { return 2; };
  Membership m(&link, o);
  m.Beat();
  job = "job-7";
  EXPECT_EQ(m.Beat(), absl::ZeroDuration());
  EXPECT_EQ(m.worker_id(), "");
  EXPECT_TRUE(aborted.empty());  // the registration's answer decides
  m.Beat();
  EXPECT_EQ(m.worker_id(), "w2");
  ASSERT_EQ(link.registered.size(), 2u);
  EXPECT_EQ(link.registered[1].held_job_id(), "job-7");
  EXPECT_EQ(link.registered[1].previous_worker_id(), "w1");
  EXPECT_EQ(link.registered[1].held_attempt(), 2);
  EXPECT_EQ(aborted, (std::vector<std::string>{"job-7: the coordinator dropped this worker"}));
}

TEST_F(MembershipTest, ARestartedCoordinatorThatAdoptsTheHeldJobKeepsIt) {
  link.register_answers.push_back(Registered("w1", 100));
  RegisterWorkerResponse adopted = Registered("w1.b", 100);
  adopted.set_keep_held_job(true);
  link.register_answers.push_back(adopted);
  HeartbeatResponse forgot;
  forgot.set_reregister(true);
  link.heartbeat_answers.push_back(absl::UnavailableError("the coordinator is down"));
  link.heartbeat_answers.push_back(forgot);
  Membership m(&link, Options());
  m.Beat();
  job = "job-7";
  m.Beat();
  EXPECT_EQ(m.worker_id(), "w1");  // kept while the coordinator is away
  EXPECT_EQ(m.Beat(), absl::ZeroDuration());
  m.Beat();
  EXPECT_EQ(m.worker_id(), "w1.b");
  EXPECT_EQ(link.registered.back().previous_worker_id(), "w1");
  EXPECT_TRUE(aborted.empty());
  // Heartbeats go on with the job.
  m.Beat();
  EXPECT_EQ(link.heartbeats.back().job_id(), "job-7");
  EXPECT_EQ(link.heartbeats.back().worker_id(), "w1.b");
}

TEST_F(MembershipTest, ACoordinatorGoneLongerThanTheOrphanTimeoutEndsTheHeldJobOnce) {
  link.register_answers.push_back(Registered("w1", 100));
  MembershipOptions o = Options();
  o.orphan_timeout = absl::Minutes(5);
  Membership m(&link, o);
  m.Beat();
  job = "job-7";
  for (int i = 0; i < 4; ++i) link.heartbeat_answers.push_back(absl::UnavailableError("gone"));
  clock.AdvanceTime(absl::Minutes(4));
  m.Beat();
  EXPECT_TRUE(aborted.empty());
  clock.AdvanceTime(absl::Minutes(1) + absl::Seconds(1));
  m.Beat();
  EXPECT_EQ(aborted, (std::vector<std::string>{"job-7: the coordinator was unreachable for more than 5m"}));
  m.Beat();  // still tearing down: not aborted twice
  EXPECT_EQ(aborted.size(), 1u);
  // The coordinator comes back and forgets the worker: the job is not
  // aborted again at the registration either.
  HeartbeatResponse forgot;
  forgot.set_reregister(true);
  link.heartbeat_answers.clear();
  link.heartbeat_answers.push_back(forgot);
  m.Beat();
  m.Beat();
  EXPECT_EQ(aborted.size(), 1u);
}

TEST_F(MembershipTest, AnUnreachableCoordinatorIsRetriedAtTheSameInterval) {
  link.register_answers.push_back(absl::UnavailableError("connection refused"));
  link.register_answers.push_back(Registered("w1", 10));  // below the 50 ms floor
  Membership m(&link, Options());
  EXPECT_EQ(m.Beat(), absl::Seconds(1));
  EXPECT_EQ(m.last_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.worker_id(), "");
  EXPECT_EQ(m.Beat(), absl::Milliseconds(50));
  EXPECT_TRUE(m.last_status().ok());
  // A heartbeat that fails keeps the id: the coordinator may come back.
  link.heartbeat_answers.push_back(absl::UnavailableError("gone"));
  EXPECT_EQ(m.Beat(), absl::Milliseconds(50));
  EXPECT_EQ(m.worker_id(), "w1");
  EXPECT_EQ(m.last_status().code(), absl::StatusCode::kUnavailable);
}

// A worker holding a job retries an unreachable coordinator every 200 ms
// (a restarted coordinator waits for every rank to adopt the job); without
// a job, and once the coordinator answers, at the interval.
TEST_F(MembershipTest, AWorkerHoldingAJobRetriesAnUnreachableCoordinatorSooner) {
  link.register_answers.push_back(Registered("w1", 1000));
  Membership m(&link, Options());
  EXPECT_EQ(m.Beat(), absl::Seconds(1));
  link.heartbeat_answers.push_back(absl::UnavailableError("gone"));
  EXPECT_EQ(m.Beat(), absl::Seconds(1));  // no job
  job = "job-1";
  link.heartbeat_answers.push_back(absl::UnavailableError("gone"));
  EXPECT_EQ(m.Beat(), absl::Milliseconds(200));
  link.heartbeat_answers.push_back(HeartbeatResponse());
  EXPECT_EQ(m.Beat(), absl::Seconds(1));
}

// A stopping worker asks, with a heartbeat saying it was preempted,
// whether a coordinator still drives its job.
TEST_F(MembershipTest, StillDrivenAsksWithAPreemptionHeartbeat) {
  Membership m(&link, Options());
  EXPECT_FALSE(m.StillDriven());  // unregistered: nobody to ask
  EXPECT_TRUE(link.heartbeats.empty());
  link.register_answers.push_back(Registered("w1", 1000));
  m.Beat();
  job = "j";
  step = 12;
  EXPECT_TRUE(m.StillDriven());
  ASSERT_EQ(link.heartbeats.size(), 1u);
  EXPECT_EQ(link.heartbeats[0].worker_id(), "w1");
  EXPECT_EQ(link.heartbeats[0].job_id(), "j");
  EXPECT_EQ(link.heartbeats[0].step(), 12);
  EXPECT_TRUE(link.heartbeats[0].preemption_requested());
  HeartbeatResponse forgotten;
  forgotten.set_reregister(true);
  link.heartbeat_answers.push_back(forgotten);
  EXPECT_FALSE(m.StillDriven());
  link.heartbeat_answers.push_back(absl::UnavailableError("coordinator gone"));
  EXPECT_FALSE(m.StillDriven());
  EXPECT_TRUE(aborted.empty());  // asking changes nothing
}

// A job the coordinator no longer counts this worker in (its AbortJob was
// lost to a cut link) is let go when a heartbeat's answer says so, once.
TEST_F(MembershipTest, LetsGoOfAJobTheCoordinatorNoLongerCountsItIn) {
  link.register_answers.push_back(Registered("w1", 1000));
  Membership m(&link, Options());
  m.Beat();
  job = "dropped";
  HeartbeatResponse let_go;
  let_go.set_let_go(true);
  link.heartbeat_answers.push_back(let_go);
  link.heartbeat_answers.push_back(let_go);
  m.Beat();
  m.Beat();  // still tearing it down: not aborted twice
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0], "dropped: the coordinator no longer counts this worker among the job's ranks");
  EXPECT_EQ(m.worker_id(), "w1");  // still registered
}

}  // namespace
}  // namespace trainyard
