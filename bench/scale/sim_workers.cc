// Simulated workers for the control-plane load test (bench/scale/run.py):
// one process registers N workers with a real coordinator, heartbeats for
// each at the period the coordinator asks for, and answers each worker's
// WorkerService calls with a stand-in that takes a fixed time per step.
//
// Every simulated worker listens on a port of its own (one gRPC server with
// N listening ports; the callback API, so a call in progress holds no
// thread): a call's :authority names the port, hence the worker. Nothing
// trains: StartJob answers after --start-ms, RunSteps after num_steps x
// --step-ms with last_step = first_step + num_steps, rank 0 names a
// checkpoint when asked to save one; a restart resumes from the step in the
// checkpoint's name.
//
// Control on stdin, one command per line; each answer is one JSON line:
//   kill I    worker I dies: its calls in progress and later ones fail with
//             UNAVAILABLE (as a dead process's connection does) and its
//             heartbeats stop. Answers {"killed": I, "t": seconds}.
//   report    {"workers": [{"index", "port", "worker_id"}...], "events":
//             [{"kind", "job", "key", "count", "first", "last"}...]}: per
//             kind of call and key (RunSteps: the chunk's first step;
//             StartJob: the attempt; AbortJob: the job), how many arrived
//             and when the first and last did, in seconds on the clock of
//             "killed".
//   quit      exits.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "nlohmann/json.hpp"
#include "proto/worker.grpc.pb.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

const Clock::time_point kStart = Clock::now();
double Now() { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

struct SimWorker {
  int port = 0;
  std::string worker_id;  // empty: not registered (yet, or again)
  std::string job_id;     // the job it holds
  int rank = -1;
  bool dead = false;
};

struct Event {
  int64_t count = 0;
  double first = 0;
  double last = 0;
};

// Calls waiting for their simulated time to pass.
class Timers {
 public:
  Timers() : thread_([this] { Loop(); }) {}
  ~Timers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `finish(ok)` at `when` (ok = true), or at once with ok = false when
  // worker `worker` is killed first.
  void Add(Clock::time_point when, int worker, std::function<void(bool)> finish) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.emplace(when, Pending{worker, std::move(finish)});
    }
    cv_.notify_all();
  }
  void Kill(int worker) {
    std::vector<std::function<void(bool)>> fail;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.worker == worker) {
          fail.push_back(std::move(it->second.finish));
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& f : fail) f(false);
  }

 private:
  struct Pending {
    int worker;
    std::function<void(bool)> finish;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (pending_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point next = pending_.begin()->first;
      if (Clock::now() < next) {
        cv_.wait_until(lock, next);
        continue;
      }
      std::vector<std::function<void(bool)>> due;
      while (!pending_.empty() && pending_.begin()->first <= Clock::now()) {
        due.push_back(std::move(pending_.begin()->second.finish));
        pending_.erase(pending_.begin());
      }
      lock.unlock();
      for (auto& f : due) f(true);
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<Clock::time_point, Pending> pending_;
  bool stop_ = false;
  std::thread thread_;
};

class Simulation final : public WorkerService::CallbackService {
 public:
  Simulation(int workers, double step_ms, double start_ms)
      : workers_(workers), step_ms_(step_ms), start_ms_(start_ms) {}

  std::vector<SimWorker>& workers() { return workers_; }
  std::mutex& mu() { return mu_; }
  void MapPort(int index, int port) {
    workers_[index].port = port;
    by_port_[port] = index;
  }

  grpc::ServerUnaryReactor* StartJob(grpc::CallbackServerContext* ctx, const StartJobRequest* request,
                                     StartJobResponse* response) override {
    int64_t start_step = 0;
    const std::string& restore = request->restore_checkpoint();
    if (size_t at = restore.rfind("checkpoint_"); at != std::string::npos) {
      if (!absl::SimpleAtoi(restore.substr(at + 11), &start_step)) start_step = 0;
    }
    response->set_start_step(start_step);
    response->set_restored_checkpoint(start_step > 0 ? restore : "");
    return Answer(ctx, "StartJob", request->job_id(), request->attempt(), start_ms_, [&](SimWorker& w) {
      w.job_id = request->job_id();
      w.rank = request->rank();
    });
  }
  grpc::ServerUnaryReactor* RunSteps(grpc::CallbackServerContext* ctx, const RunStepsRequest* request,
                                     RunStepsResponse* response) override {
    const int64_t last = request->first_step() + request->num_steps();
    response->set_last_step(last);
    response->set_seconds_per_step(step_ms_ / 1000);
    response->set_compute_seconds_per_step(step_ms_ / 1000);
    return Answer(ctx, "RunSteps", request->job_id(), request->first_step(),
                  step_ms_ * static_cast<double>(request->num_steps()), [&](SimWorker& w) {
                    if (w.rank == 0) {
                      (*response->mutable_metrics())["loss"] = 1.0 / static_cast<double>(last);
                      if (request->save_checkpoint()) response->set_checkpoint(absl::StrCat("sim/checkpoint_", last));
                    }
                  });
  }
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* ctx, const SaveCheckpointRequest* request,
                                           SaveCheckpointResponse* response) override {
    return Answer(ctx, "SaveCheckpoint", request->job_id(), request->step(), 0, [&](SimWorker& w) {
      if (w.rank == 0) response->set_path(absl::StrCat("sim/checkpoint_", request->step()));
    });
  }
  grpc::ServerUnaryReactor* Evaluate(grpc::CallbackServerContext* ctx, const EvaluateRequest* request,
                                     EvaluateResponse*) override {
    return Answer(ctx, "Evaluate", request->job_id(), request->step(), step_ms_, [](SimWorker&) {});
  }
  grpc::ServerUnaryReactor* AbortJob(grpc::CallbackServerContext* ctx, const AbortJobRequest* request,
                                     AbortJobResponse*) override {
    return Answer(ctx, "AbortJob", request->job_id(), 0, 0, [&](SimWorker& w) {
      if (w.job_id == request->job_id()) {
        w.job_id.clear();
        w.rank = -1;
      }
    });
  }

  // Worker `index` dies.
  void Kill(int index) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers_[index].dead = true;
    }
    timers_.Kill(index);
  }

  nlohmann::json Report() {
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::json workers = nlohmann::json::array();
    for (size_t i = 0; i < workers_.size(); ++i) {
      workers.push_back({{"index", i}, {"port", workers_[i].port}, {"worker_id", workers_[i].worker_id}});
    }
    nlohmann::json events = nlohmann::json::array();
    for (const auto& [key, e] : events_) {
      events.push_back({{"kind", std::get<0>(key)},
                        {"job", std::get<1>(key)},
                        {"key", std::get<2>(key)},
                        {"count", e.count},
                        {"first", e.first},
                        {"last", e.last}});
    }
    return {{"workers", workers}, {"events", events}};
  }

 private:
  // Records the call, applies `edit` to its worker and finishes the call
  // after `ms` (UNAVAILABLE at once for a dead worker).
  template <typename Edit>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const char* kind, const std::string& job,
                                   int64_t key, double ms, Edit edit) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    int index = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = WorkerOf(ctx);
      if (index < 0 || workers_[index].dead) {
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     index < 0 ? "no simulated worker on this port" : "the worker is dead"));
        return reactor;
      }
      Event& e = events_[{kind, job, key}];
      const double now = Now();
      if (e.count++ == 0) e.first = now;
      e.last = now;
      edit(workers_[index]);
    }
    auto finish = [reactor](bool ok) {
      reactor->Finish(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker died"));
    };
    if (ms <= 0) {
      finish(true);
    } else {
      timers_.Add(Clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000)), index, std::move(finish));
    }
    return reactor;
  }
  int WorkerOf(grpc::CallbackServerContext* ctx) const {
    const grpc::string_ref authority = ctx->ExperimentalGetAuthority();
    const std::string a(authority.data(), authority.size());
    int port = 0;
    if (size_t colon = a.rfind(':'); colon == std::string::npos || !absl::SimpleAtoi(a.substr(colon + 1), &port)) {
      return -1;
    }
    auto it = by_port_.find(port);
    return it == by_port_.end() ? -1 : it->second;
  }

  std::mutex mu_;
  std::vector<SimWorker> workers_;
  std::map<int, int> by_port_;
  std::map<std::tuple<std::string, std::string, int64_t>, Event> events_;
  const double step_ms_;
  const double start_ms_;
  Timers timers_;
};

// Registers (and re-registers) every live worker and heartbeats for each,
// asynchronously, every `interval` until `stop`.
void Heartbeats(Simulation* sim, CoordinatorService::Stub* coordinator, const std::atomic<bool>* stop) {
  int64_t interval_ms = 1000;
  while (!stop->load()) {
    const auto round = Clock::now();
    std::vector<std::pair<int, std::string>> todo;  // (index, worker id or "" to register)
    {
      std::lock_guard<std::mutex> lock(sim->mu());
      for (size_t i = 0; i < sim->workers().size(); ++i) {
        if (!sim->workers()[i].dead) todo.emplace_back(static_cast<int>(i), sim->workers()[i].worker_id);
      }
    }
    std::mutex mu;
    std::condition_variable cv;
    size_t left = todo.size();
    auto done = [&] {
      std::lock_guard<std::mutex> lock(mu);
      if (--left == 0) cv.notify_all();
    };
    struct Call {
      grpc::ClientContext ctx;
      RegisterWorkerRequest register_request;
      RegisterWorkerResponse register_response;
      HeartbeatRequest heartbeat_request;
      HeartbeatResponse heartbeat_response;
    };
    std::vector<std::unique_ptr<Call>> calls;
    for (const auto& [index, id] : todo) {
      calls.push_back(std::make_unique<Call>());
      Call* c = calls.back().get();
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      const int i = index;
      if (id.empty()) {
        {
          std::lock_guard<std::mutex> lock(sim->mu());
          c->register_request.set_host(absl::StrCat("sim-", i));
          c->register_request.set_address(absl::StrCat("127.0.0.1:", sim->workers()[i].port));
          c->register_request.set_device("cpu");
          c->register_request.set_pid(static_cast<int32_t>(getpid()));
          c->register_request.set_held_job_id(sim->workers()[i].job_id);
        }
        coordinator->async()->RegisterWorker(
            &c->ctx, &c->register_request, &c->register_response, [sim, c, i, &done, &interval_ms](grpc::Status s) {
              if (s.ok()) {
                std::lock_guard<std::mutex> lock(sim->mu());
                sim->workers()[i].worker_id = c->register_response.worker_id();
                interval_ms = std::max<int64_t>(c->register_response.heartbeat_interval_ms(), 50);
              }
              done();
            });
      } else {
        {
          std::lock_guard<std::mutex> lock(sim->mu());
          c->heartbeat_request.set_worker_id(id);
          c->heartbeat_request.set_job_id(sim->workers()[i].job_id);
        }
        coordinator->async()->Heartbeat(&c->ctx, &c->heartbeat_request, &c->heartbeat_response,
                                        [sim, c, i, &done](grpc::Status s) {
                                          if (s.ok() && c->heartbeat_response.reregister()) {
                                            std::lock_guard<std::mutex> lock(sim->mu());
                                            sim->workers()[i].worker_id.clear();
                                            sim->workers()[i].job_id.clear();
                                          }
                                          done();
                                        });
      }
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return left == 0; });
    }
    std::this_thread::sleep_until(round + std::chrono::milliseconds(interval_ms));
  }
}

int Main(int argc, char** argv) {
  std::string coordinator;
  int workers = 16;
  std::string step_ms = "10", start_ms = "0";
  FlagSet flags("sim_workers --coordinator HOST:PORT [--workers N] [--step-ms MS] [--start-ms MS]",
                "Simulated workers for the control-plane load test (bench/scale/run.py).");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator");
  flags.AddInt("workers", &workers, "N", "simulated workers (default 16)");
  flags.AddString("step-ms", &step_ms, "MS", "the stand-in's time per step (default 10)");
  flags.AddString("start-ms", &start_ms, "MS", "the stand-in's time per StartJob (default 0)");
  std::vector<std::string> args(argv + 1, argv + argc), positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, std::cout, std::cerr)) return *code;
  double step = 0, start = 0;
  if (coordinator.empty() || workers < 1 || workers > 65536 || !absl::SimpleAtod(step_ms, &step) || step < 0 ||
      !absl::SimpleAtod(start_ms, &start) || start < 0) {
    std::cerr << "error: want --coordinator HOST:PORT, --workers in 1..65536, --step-ms and --start-ms >= 0\n";
    return 2;
  }
  Simulation sim(workers, step, start);
  grpc::ServerBuilder builder;
  std::vector<int> ports(workers, 0);
  for (int i = 0; i < workers; ++i)
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ports[i]);
  builder.RegisterService(&sim);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::cerr << "error: cannot listen on " << workers << " ports (raise the open-file limit?)\n";
    return 1;
  }
  for (int i = 0; i < workers; ++i) {
    if (ports[i] == 0) {
      std::cerr << "error: listening port " << i << " failed (raise the open-file limit?)\n";
      return 1;
    }
    sim.MapPort(i, ports[i]);
  }
  grpc::ChannelArguments channel_args;
  auto stub = CoordinatorService::NewStub(
      grpc::CreateCustomChannel(coordinator, grpc::InsecureChannelCredentials(), channel_args));
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] { Heartbeats(&sim, stub.get(), &stop); });
  std::cout << "simulating " << workers << " workers" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.rfind("kill ", 0) == 0) {
      int index = -1;
      if (!absl::SimpleAtoi(line.substr(5), &index) || index < 0 || index >= workers) {
        std::cout << nlohmann::json({{"error", "kill: want a worker index"}}).dump() << std::endl;
        continue;
      }
      sim.Kill(index);
      std::cout << nlohmann::json({{"killed", index}, {"t", Now()}}).dump() << std::endl;
    } else if (line == "report") {
      std::cout << sim.Report().dump() << std::endl;
    } else if (line == "quit") {
      break;
    }
  }
  stop = true;
  heartbeats.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) { return trainyard::Main(argc, argv); }
