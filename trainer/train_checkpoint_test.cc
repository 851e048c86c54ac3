#include "trainer/train_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <torch/utils.h>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/crash_points.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class TrainCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ModelConfig config = *PresetConfig("tiny");
    model_ = std::move(EncoderDecoderModel::Create(config, {})).value();
    NamedTensors params;
    for (const auto& p : model_->named_parameters()) params.emplace_back(p.key(), p.value());
    OptimizerConfig oc;
    oc.mutable_adafactor();
    optimizer_ = std::move(CreateOptimizer(oc, params)).value();
    // One real update, so the optimizer state is not all zeros.
    std::vector<torch::Tensor> grads;
    for (const auto& [name, p] : params) grads.push_back(torch::randn_like(p));
    optimizer_->Apply(grads, 0.01);
  }

  TrainSnapshot Snapshot(int64_t step) {
    return MakeSnapshot(*model_->network(), *optimizer_, step, 2, {"0 48", "0 52"}, R"({"name":"x"})", "test");
  }

  std::string dir_;
  std::unique_ptr<EncoderDecoderModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

TEST_F(TrainCheckpointTest, RoundTripRestoresEverything) {
  const std::string ckpt = dir_ + "/checkpoint_7";
  ASSERT_THAT(WriteTrainCheckpoint(ckpt, Snapshot(7), torch::kFloat), IsOk());
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(ckpt);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->version, 2);
  EXPECT_EQ(read->step, 7);
  EXPECT_EQ(read->world_size, 2);
  EXPECT_EQ(read->data_states, (std::vector<std::string>{"0 48", "0 52"}));
  EXPECT_EQ(read->config.d_model(), 64);
  for (const auto& p : model_->named_parameters()) {
    EXPECT_TRUE(torch::equal(read->params.at(p.key()), p.value())) << p.key();  // float32: bit-exact
  }
  const auto state = optimizer_->State();
  ASSERT_EQ(read->optimizer.size(), state.size());
  for (const auto& [name, t] : state) {
    if (name != "step") {
      EXPECT_TRUE(torch::equal(read->optimizer.at(name), t)) << name;
    }
  }
  // The optimizer's step is the checkpoint's step (the trainer's step is
  // the optimizer's).
  EXPECT_EQ(read->optimizer.at("step").item<int64_t>(), 7);
}

// Version 3: three ranks write their own slots at once; rank 0 commits one
// checkpoint whose manifest covers every shard, and reading it gives the
// whole state. A rank that never writes leaves nothing committed.
TEST_F(TrainCheckpointTest, ShardedOptimizerStateIsWrittenByEveryRank) {
  const std::map<std::string, torch::Tensor> whole = optimizer_->State();
  std::vector<std::map<std::string, torch::Tensor>> parts(3);
  int i = 0;
  for (const auto& [name, t] : whole) {
    if (name != "step") parts[i++ % 3][name] = t;
  }
  const std::string ckpt = dir_ + "/checkpoint_9";
  std::vector<absl::Status> written(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      TrainSnapshot s =
          r == 0 ? MakeSnapshot(*model_->network(), parts[0], 9, 3, {"0 1", "0 2", "0 3"}, R"({"name":"x"})", "test")
                 : MakeOptimizerShardSnapshot(parts[r], 9);
      s.shard = r;
      s.num_shards = 3;
      s.token = "s42";
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 waits for it
      written[r] = WriteTrainCheckpoint(ckpt, s, torch::kFloat);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_THAT(written[r], IsOk()) << r;
  absl::StatusOr<CheckpointContents> contents = VerifyCheckpoint(ckpt);
  ASSERT_THAT(contents.status(), IsOk());
  EXPECT_THAT(contents->files, ElementsAre("metadata.json", "optimizer-00000-of-00003.safetensors",
                                           "optimizer-00001-of-00003.safetensors",
                                           "optimizer-00002-of-00003.safetensors", "params.safetensors"));
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(ckpt);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->version, 3);
  EXPECT_EQ(read->optimizer_shards, 3);
  EXPECT_EQ(read->data_states, (std::vector<std::string>{"0 1", "0 2", "0 3"}));
  ASSERT_EQ(read->optimizer.size(), whole.size());
  for (const auto& [name, t] : whole) {
    if (name != "step") {
      EXPECT_TRUE(torch::equal(read->optimizer.at(name), t)) << name;
    }
  }
  EXPECT_EQ(read->optimizer.at("step").item<int64_t>(), 9);
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".tmp-s42"));

  // A reader that wants rank 1's slots (a restoring rank of a sharded
  // optimizer) gets exactly those, and the step.
  const SlotFilter rank_one = [&](const std::string& slot) { return parts[1].count(slot) > 0; };
  absl::StatusOr<TrainCheckpoint> mine = ReadTrainCheckpoint(ckpt, rank_one);
  ASSERT_THAT(mine.status(), IsOk());
  ASSERT_EQ(mine->optimizer.size(), parts[1].size() + 1);
  for (const auto& [name, t] : parts[1]) EXPECT_TRUE(torch::equal(mine->optimizer.at(name), t)) << name;
  EXPECT_EQ(mine->optimizer.at("step").item<int64_t>(), 9);
  EXPECT_EQ(mine->params.size(), read->params.size());

  // Rank 1 never writes: rank 0 gives up, nothing is committed.
  const std::string lost = dir_ + "/checkpoint_10";
  TrainSnapshot alone = MakeSnapshot(*model_->network(), parts[0], 10, 2, {"0 1", "0 2"}, "", "test");
  alone.shard = 0;
  alone.num_shards = 2;
  alone.token = "s43";
  alone.shard_wait_seconds = 0.2;
  EXPECT_THAT(WriteTrainCheckpoint(lost, alone, torch::kFloat),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("shards of rank(s) 1 were not written in time")));
  EXPECT_FALSE(std::filesystem::exists(lost));
  EXPECT_FALSE(std::filesystem::exists(lost + ".tmp-s43"));
}

// Version 4 (PARAMETERS): each of two ranks writes its own parameters and
// slots, nothing gathered; the manifest covers both ranks' files, reading
// gives every parameter (through ReadModelCheckpoint too), and a parameter
// in both ranks' files is refused.
TEST_F(TrainCheckpointTest, ShardedParametersAreWrittenByEveryRank) {
  std::map<std::string, torch::Tensor> whole = optimizer_->State();
  whole.erase("step");
  std::vector<std::map<std::string, torch::Tensor>> slots(2);
  int i = 0;
  for (const auto& [name, t] : whole) slots[i++ % 2][name] = t;
  std::vector<std::string> names;
  for (const auto& p : model_->named_parameters()) names.push_back(p.key());
  const size_t half = names.size() / 2;
  auto write = [&](const std::string& ckpt, const std::string& token, bool overlap) {
    std::vector<absl::Status> written(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        // Rank 0 the first half of the parameters, rank 1 the rest (and,
        // with `overlap`, rank 0's first one as well).
        auto keep = [&](const std::string& name) {
          const size_t at = std::find(names.begin(), names.end(), name) - names.begin();
          return r == 0 ? at < half : at >= half || (overlap && at == 0);
        };
        TrainSnapshot s = MakeSnapshot(*model_->network(), slots[r], 4, 2, {"0 1", "0 2"}, R"({"name":"x"})", "test",
                                       {}, /*borrow=*/false, keep);
        s.shard = r;
        s.num_shards = 2;
        s.param_shards = 2;
        s.token = token;
        written[r] = WriteTrainCheckpoint(ckpt, s, torch::kFloat);
      });
    }
    for (auto& t : ranks) t.join();
    return written;
  };
  const std::string ckpt = dir_ + "/checkpoint_4";
  for (const absl::Status& s : write(ckpt, "s11", false)) ASSERT_THAT(s, IsOk());
  absl::StatusOr<CheckpointContents> contents = VerifyCheckpoint(ckpt);
  ASSERT_THAT(contents.status(), IsOk());
  EXPECT_THAT(contents->files, ElementsAre("metadata.json", "optimizer-00000-of-00002.safetensors",
                                           "optimizer-00001-of-00002.safetensors", "params-00000-of-00002.safetensors",
                                           "params-00001-of-00002.safetensors"));
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(ckpt);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->version, 4);
  EXPECT_EQ(read->param_shards, 2);
  ASSERT_EQ(read->params.size(), names.size());
  for (const auto& p : model_->named_parameters()) {
    EXPECT_TRUE(torch::equal(read->params.at(p.key()), p.value())) << p.key();
  }
  for (const auto& [name, t] : whole) EXPECT_TRUE(torch::equal(read->optimizer.at(name), t)) << name;
  absl::StatusOr<ModelCheckpoint> model_only = ReadModelCheckpoint(ckpt);
  ASSERT_THAT(model_only.status(), IsOk());
  EXPECT_EQ(model_only->tensors.size(), names.size());
  // A reader of some parameters (a rank of PARAMETERS sharding) gets those
  // only, from whichever file holds them.
  const std::set<std::string> wanted = {names[0], names[half], names.back()};
  absl::StatusOr<TrainCheckpoint> some =
      ReadTrainCheckpoint(ckpt, nullptr, [&](const std::string& name) { return wanted.count(name) > 0; });
  ASSERT_THAT(some.status(), IsOk());
  ASSERT_EQ(some->params.size(), wanted.size());
  for (const std::string& name : wanted) {
    EXPECT_TRUE(torch::equal(some->params.at(name), model_->named_parameters()[name])) << name;
  }

  const std::string twice = dir_ + "/checkpoint_5";
  for (const absl::Status& s : write(twice, "s12", true)) ASSERT_THAT(s, IsOk());
  EXPECT_THAT(ReadTrainCheckpoint(twice).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("params-00001-of-00002.safetensors: " + names[0] + " is in another shard too")));
  // The duplicate is found by a reader that reads neither copy.
  EXPECT_THAT(
      ReadTrainCheckpoint(twice, nullptr, [&](const std::string& name) { return name == names.back(); }).status(),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr(names[0] + " is in another shard too")));
}

// A waited save may take the live tensors (no copy); they are never kept
// as the next snapshot's buffers, which a background save writes over.
TEST_F(TrainCheckpointTest, BorrowedSnapshotsAreNotReused) {
  TrainSnapshot borrowed =
      MakeSnapshot(*model_->network(), *optimizer_, 5, 1, {"0 1"}, "", "test", {}, /*borrow=*/true);
  EXPECT_TRUE(borrowed.borrowed);
  const auto first = model_->named_parameters()[0].value();
  EXPECT_EQ(borrowed.params[0].second.data_ptr(), first.data_ptr());  // the live tensor
  AsyncCheckpointer checkpointer;
  ASSERT_THAT(checkpointer.Save(dir_ + "/checkpoint_5", std::move(borrowed), torch::kFloat).status(), IsOk());
  ASSERT_THAT(checkpointer.Wait(), IsOk());
  const TrainSnapshot buffers = checkpointer.TakeBuffers();
  EXPECT_TRUE(buffers.params.empty());
  EXPECT_TRUE(buffers.optimizer.empty());
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(dir_ + "/checkpoint_5");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_TRUE(torch::equal(read->params.at(model_->named_parameters()[0].key()), first));
  // A copy is kept for reuse.
  ASSERT_THAT(checkpointer.Save(dir_ + "/checkpoint_6", Snapshot(6), torch::kFloat).status(), IsOk());
  ASSERT_THAT(checkpointer.Wait(), IsOk());
  const TrainSnapshot kept = checkpointer.TakeBuffers();
  ASSERT_FALSE(kept.params.empty());
  EXPECT_NE(kept.params[0].second.data_ptr(), first.data_ptr());
}

TEST_F(TrainCheckpointTest, AShardedCheckpointWithASlotTwiceIsRefused) {
  std::map<std::string, torch::Tensor> whole = optimizer_->State();
  whole.erase("step");
  const std::string ckpt = dir_ + "/checkpoint_3";
  std::vector<std::thread> ranks;
  std::vector<absl::Status> written(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      TrainSnapshot s = r == 0 ? MakeSnapshot(*model_->network(), whole, 3, 2, {"0 1", "0 2"}, "", "test")
                               : MakeOptimizerShardSnapshot(whole, 3);
      s.shard = r;
      s.num_shards = 2;
      s.token = "s7";
      written[r] = WriteTrainCheckpoint(ckpt, s, torch::kFloat);
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_THAT(written[0], IsOk());
  EXPECT_THAT(ReadTrainCheckpoint(ckpt).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("optimizer-00001-of-00002.safetensors: ")));
  // Also for a reader that wants none of the slots.
  EXPECT_THAT(ReadTrainCheckpoint(ckpt, [](const std::string&) { return false; }).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is in another shard too")));
}

TEST_F(TrainCheckpointTest, BFloat16ParametersAndTheDtypeCheck) {
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_1", Snapshot(1), torch::kBFloat16), IsOk());
  auto read = ReadTrainCheckpoint(dir_ + "/checkpoint_1");
  ASSERT_THAT(read.status(), IsOk());
  const auto first = *model_->named_parameters().begin();
  EXPECT_TRUE(torch::equal(read->params.at(first.key()), first.value().to(torch::kBFloat16).to(torch::kFloat)));
  EXPECT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_2", Snapshot(2), torch::kHalf),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("save_dtype")));
}

TEST_F(TrainCheckpointTest, LatestGoodSkipsDamagedAndIncompleteOnes) {
  for (int step : {10, 20, 30}) {
    ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_" + std::to_string(step), Snapshot(step), torch::kFloat),
                IsOk());
  }
  // 30: a flipped byte in the optimizer state; 40: a directory without a
  // manifest (a crash mid-write by something else).
  {
    std::fstream f(dir_ + "/checkpoint_30/optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  std::filesystem::create_directories(dir_ + "/checkpoint_40");
  std::vector<SkippedCheckpoint> skipped;
  absl::StatusOr<std::string> latest = LatestGoodCheckpoint(dir_, &skipped);
  ASSERT_THAT(latest.status(), IsOk());
  EXPECT_EQ(*latest, dir_ + "/checkpoint_20");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].dir, dir_ + "/checkpoint_40");
  EXPECT_THAT(skipped[0].why, HasSubstr("checkpoint_40"));
  EXPECT_EQ(skipped[1].dir, dir_ + "/checkpoint_30");
  EXPECT_THAT(skipped[1].why, HasSubstr("optimizer.safetensors"));
  EXPECT_THAT(ReadTrainCheckpoint(dir_ + "/checkpoint_30").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("optimizer.safetensors")));
  EXPECT_THAT(LatestGoodCheckpoint(dir_ + "/empty", nullptr).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  ApplyRetention(dir_, 2, /*keep_best=*/0, false);
  EXPECT_EQ(ListCheckpoints(dir_).size(), 2u);
  EXPECT_EQ(ListCheckpoints(dir_).begin()->first, 30);
}

// The steps a sweep over every checkpoint visits from `after_step`, in order.
std::vector<int64_t> SweepSteps(const std::string& dir, int64_t after_step, std::vector<SkippedCheckpoint>* skipped) {
  std::vector<int64_t> steps;
  while (std::optional<NumberedCheckpoint> next = NextGoodCheckpoint(dir, after_step, skipped)) {
    EXPECT_EQ(next->dir, dir + "/checkpoint_" + std::to_string(next->step));
    steps.push_back(next->step);
    after_step = next->step;
  }
  return steps;
}

TEST_F(TrainCheckpointTest, NextGoodCheckpointGoesUpInStepOrderSkippingWhatIsNotWhole) {
  // Written out of order, with names that sort differently as text.
  for (int step : {1000, 100, 20, 200, 0}) {
    ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_" + std::to_string(step), Snapshot(step), torch::kFloat),
                IsOk());
  }
  // A save in progress (its temporary directory), a directory without a
  // manifest, one whose parameters were altered, one moved aside and other
  // names: none is visited.
  std::filesystem::create_directories(dir_ + "/checkpoint_150.tmp-4242");
  std::ofstream(dir_ + "/checkpoint_150.tmp-4242/params.safetensors") << "half";
  std::filesystem::create_directories(dir_ + "/checkpoint_300");
  std::ofstream(dir_ + "/checkpoint_300/params.safetensors") << "half";
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_50", Snapshot(50), torch::kFloat), IsOk());
  {
    std::fstream f(dir_ + "/checkpoint_50/params.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_400", Snapshot(400), torch::kFloat), IsOk());
  ASSERT_THAT(SetAsideDamagedCheckpoint(dir_ + "/checkpoint_400").status(), IsOk());
  std::filesystem::create_directories(dir_ + "/checkpoint_x");
  std::ofstream(dir_ + "/checkpoint_500") << "a file";

  std::vector<SkippedCheckpoint> skipped;
  EXPECT_THAT(SweepSteps(dir_, -1, &skipped), ElementsAre(0, 20, 100, 200, 1000));
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].dir, dir_ + "/checkpoint_50");
  EXPECT_THAT(skipped[0].why, HasSubstr("params.safetensors"));
  EXPECT_EQ(skipped[1].dir, dir_ + "/checkpoint_300");
  EXPECT_THAT(skipped[1].why, HasSubstr("checkpoint_300"));
  // From a step evaluated already: only those above it.
  skipped.clear();
  EXPECT_THAT(SweepSteps(dir_, 100, &skipped), ElementsAre(200, 1000));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].dir, dir_ + "/checkpoint_300");
  EXPECT_THAT(SweepSteps(dir_, 20, nullptr), ElementsAre(100, 200, 1000));
  EXPECT_THAT(SweepSteps(dir_, 1000, nullptr), IsEmpty());
  // Saves that complete later: one above the last step visited is next; one
  // below it is behind the sweep.
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_1500", Snapshot(1500), torch::kFloat), IsOk());
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_250", Snapshot(250), torch::kFloat), IsOk());
  EXPECT_THAT(SweepSteps(dir_, 1000, nullptr), ElementsAre(1500));
  EXPECT_FALSE(NextGoodCheckpoint(dir_ + "/missing", -1, nullptr).has_value());
}

TEST_F(TrainCheckpointTest, UnfinishedSavesAreRemovedAndNothingElse) {
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_10", Snapshot(10), torch::kFloat), IsOk());
  std::filesystem::create_directories(dir_ + "/checkpoint_20.tmp-4242");
  std::ofstream(dir_ + "/checkpoint_20.tmp-4242/params.safetensors") << "half";
  std::filesystem::create_directories(dir_ + "/checkpoint_x.tmp-1");  // not ours: kept
  std::ofstream(dir_ + "/events.tmp-1") << "";                        // a file: kept
  EXPECT_THAT(RemoveUnfinishedCheckpoints(dir_), ElementsAre("checkpoint_20.tmp-4242"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/checkpoint_20.tmp-4242"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/checkpoint_x.tmp-1"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/events.tmp-1"));
  absl::StatusOr<std::string> latest = LatestGoodCheckpoint(dir_, nullptr);
  ASSERT_THAT(latest.status(), IsOk());
  EXPECT_EQ(*latest, dir_ + "/checkpoint_10");
  EXPECT_THAT(RemoveUnfinishedCheckpoints(dir_ + "/missing"), IsEmpty());
}

TEST_F(TrainCheckpointTest, RetentionKeepsTheNewestAndTheBest) {
  const std::map<int64_t, double> losses = {{10, 0.5}, {20, 0.2}, {30, 0.9}, {40, 0.4}, {50, 0.6}};
  for (const auto& [step, loss] : losses) {
    ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_" + std::to_string(step), Snapshot(step), torch::kFloat),
                IsOk());
    ASSERT_THAT(RecordCheckpointMetric(dir_, step, loss), IsOk());
  }
  auto steps = [&] {
    std::vector<int64_t> out;
    for (const auto& [step, path] : ListCheckpoints(dir_)) out.push_back(step);
    return out;
  };
  ApplyRetention(dir_, 0, 1, false);  // keep 0: everything stays
  EXPECT_EQ(steps(), (std::vector<int64_t>{10, 20, 30, 40, 50}));
  ApplyRetention(dir_, 2, 1, /*maximize=*/true);  // the highest: 30
  EXPECT_EQ(steps(), (std::vector<int64_t>{30, 40, 50}));
  ApplyRetention(dir_, 2, 1, /*maximize=*/false);  // the lowest left: 40 (20's loss was 0.2, but 20 is gone)
  EXPECT_EQ(steps(), (std::vector<int64_t>{40, 50}));
}

TEST_F(TrainCheckpointTest, AsyncWritesOneAtATimeAndReportsFailures) {
  AsyncCheckpointer async;
  TrainSnapshot first = Snapshot(5);
  // Training goes on: changing the parameters does not change the snapshot.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) p.add_(1.0);
  }
  ASSERT_THAT(async.Save(dir_ + "/checkpoint_5", std::move(first), torch::kFloat).status(), IsOk());
  int after_calls = 0;
  ASSERT_THAT(async.Save(dir_ + "/checkpoint_6", Snapshot(6), torch::kFloat, [&] { ++after_calls; }).status(), IsOk());
  ASSERT_THAT(async.Wait(), IsOk());
  EXPECT_EQ(after_calls, 1);
  EXPECT_EQ(async.last_written(), dir_ + "/checkpoint_6");
  auto five = ReadTrainCheckpoint(dir_ + "/checkpoint_5");
  ASSERT_THAT(five.status(), IsOk());
  const auto param = *model_->named_parameters().begin();
  EXPECT_TRUE(torch::allclose(five->params.at(param.key()) + 1.0, param.value()));
  // A write that fails (its parent directory is missing) is reported, by
  // Wait once and by last_failure until a write succeeds, and leaves the
  // good checkpoint as the last written.
  EXPECT_EQ(async.last_failure(), "");
  ASSERT_THAT(async.Save(dir_ + "/missing/checkpoint_7", Snapshot(7), torch::kFloat).status(), IsOk());
  EXPECT_THAT(async.Wait(), StatusIs(absl::StatusCode::kInternal, HasSubstr("cannot create")));
  EXPECT_EQ(async.last_written(), dir_ + "/checkpoint_6");
  EXPECT_THAT(async.last_failure(), HasSubstr(dir_ + "/missing/checkpoint_7: cannot create"));
  EXPECT_THAT(ReadTrainCheckpoint(dir_ + "/checkpoint_6").status(), IsOk());
  // A checkpoint of a step written before (a restarted job computes steps
  // again) replaces that one and clears the failure.
  ASSERT_THAT(async.Save(dir_ + "/checkpoint_6", Snapshot(6), torch::kFloat).status(), IsOk());
  EXPECT_THAT(async.Wait(), IsOk());
  EXPECT_EQ(async.last_failure(), "");
  auto six = ReadTrainCheckpoint(dir_ + "/checkpoint_6");
  ASSERT_THAT(six.status(), IsOk());
  EXPECT_TRUE(torch::equal(six->params.at(param.key()), param.value()));
}

// A crash at every point of a checkpoint write (a forked child dies there)
// never leaves anything that restores wrong: the newest good checkpoint is
// either the previous one or the complete new one, and it reads back equal.
TEST_F(TrainCheckpointTest, ACrashAtEveryPointOfTheWriteNeverRestoresWrong) {
  torch::set_num_threads(1);
  const TrainSnapshot before = Snapshot(10);
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/checkpoint_10", before, torch::kFloat), IsOk());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) p.mul_(1.5);
  }
  const TrainSnapshot after = Snapshot(20);
  // How many points a full write passes.
  ArmCrashPoints(0);
  ASSERT_THAT(WriteTrainCheckpoint(dir_ + "/probe", after, torch::kFloat), IsOk());
  const int points = CrashPointsPassed();
  ASSERT_GE(points, 10);
  std::filesystem::remove_all(dir_ + "/probe");
  int crashed_before_rename = 0, crashed_after_rename = 0;
  for (int n = 1; n <= points; ++n) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ArmCrashPoints(n);
      _exit(WriteTrainCheckpoint(dir_ + "/checkpoint_20", after, torch::kFloat).ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), kCrashExitCode) << "point " << n;
    absl::StatusOr<std::string> latest = LatestGoodCheckpoint(dir_, nullptr);
    ASSERT_THAT(latest.status(), IsOk()) << "point " << n;
    absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(*latest);
    ASSERT_THAT(read.status(), IsOk()) << "point " << n;
    const TrainSnapshot& expected = read->step == 20 ? after : before;
    (read->step == 20 ? crashed_after_rename : crashed_before_rename)++;
    for (const auto& [name, t] : expected.params) {
      ASSERT_TRUE(torch::equal(read->params.at(name), t)) << "point " << n << ": " << name;
    }
    // Clean up for the next point: the new checkpoint and any leftovers.
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("checkpoint_20", 0) == 0) std::filesystem::remove_all(entry.path());
    }
  }
  // Every point but the last (after the rename) leaves the old checkpoint.
  EXPECT_EQ(crashed_after_rename, 1);
  EXPECT_EQ(crashed_before_rename, points - 1);
}

}  // namespace
}  // namespace trainyard
