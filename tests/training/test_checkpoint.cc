// Checkpointer across 1..4 ranks: save on rank 0, restore everywhere; pruning; corrupted newest
// file -> the previous one; no checkpoint -> nullopt everywhere; rank-0 failures -> the same
// hvd::Error on every rank; save_async: the values of the call, one write at a time, a failed
// write thrown by the next call on every rank. Every rank computes the values it expects itself.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hvd/checkpoint.h"
#include "hvd/hvd.h"

namespace {

namespace fs = std::filesystem;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A fresh directory created by rank 0 and known to every rank; removed at the end.
class SharedTempDir {
 public:
  SharedTempDir() {
    // hvd's collectives, not raw MPI, while hvd runs (docs/reliability.md: raw MPI from another
    // thread shows as a false race under TSan).
    std::vector<uint8_t> buf(256, 0);
    if (world_rank() == 0) {
      char tmpl[] = "/tmp/hvd_ckpt_mpi_XXXXXX";
      if (!::mkdtemp(tmpl)) std::abort();
      std::memcpy(buf.data(), tmpl, sizeof tmpl);
    }
    hvd::broadcast(buf, 0, "test.tmpdir");
    path_ = reinterpret_cast<const char*>(buf.data());
  }
  ~SharedTempDir() {
    hvd::barrier();
    if (world_rank() == 0) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Runs f on rank 0 only, then waits for it on every rank.
template <class F>
void on_rank0(F&& f) {
  if (world_rank() == 0) f();
  hvd::barrier();
}

// The model state at a step: every tensor's values are a function of (step, index). Ranks other
// than 0 can be given different (wrong) values with `skew` to prove that rank 0's are saved.
struct State {
  std::vector<float> weight;     // F32 [3, 7]
  std::vector<double> bias;      // F64 [5]
  std::vector<int64_t> counter;  // I64 [] (scalar)
  std::vector<uint16_t> half;    // BF16 [4]
  std::vector<uint8_t> mask;     // U8 [0, 4] (no elements)
  std::vector<int32_t> big;      // I32 [300001] (odd, larger than a typical fusion chunk)

  explicit State(int64_t step, int64_t skew = 0)
      : weight(21), bias(5), counter(1), half(4), mask(0), big(300001) {
    for (std::size_t i = 0; i < weight.size(); ++i)
      weight[i] = static_cast<float>(step * 100 + static_cast<int64_t>(i) + skew) * 0.5f;
    for (std::size_t i = 0; i < bias.size(); ++i)
      bias[i] = static_cast<double>(step) / 3.0 - static_cast<double>(i) + skew;
    counter[0] = step * 1000000007LL + skew;
    for (std::size_t i = 0; i < half.size(); ++i)
      half[i] = static_cast<uint16_t>((step * 31 + static_cast<int64_t>(i) + skew) & 0x7F7F);
    for (std::size_t i = 0; i < big.size(); ++i)
      big[i] = static_cast<int32_t>((step * 7 + static_cast<int64_t>(i) + skew) % 1000003);
  }

  std::vector<hvd::NamedTensor> tensors() {
    using hvd::DataType;
    return {{"layer1.weight", hvd::TensorRef(weight.data(), DataType::kFloat32, {3, 7})},
            {"layer1.bias", hvd::TensorRef(bias.data(), DataType::kFloat64, {5})},
            {"step_counter", hvd::TensorRef(counter.data(), DataType::kInt64, {})},
            {"half", hvd::TensorRef(half.data(), DataType::kBFloat16, {4})},
            {"mask", hvd::TensorRef(mask.data(), DataType::kUInt8, {0, 4})},
            {"big", hvd::TensorRef(big.data(), DataType::kInt32, {300001})}};
  }

  // Overwrites every element in place with `o`'s (the tensors() views stay valid).
  void overwrite_with(const State& o) {
    std::copy(o.weight.begin(), o.weight.end(), weight.begin());
    std::copy(o.bias.begin(), o.bias.end(), bias.begin());
    std::copy(o.counter.begin(), o.counter.end(), counter.begin());
    std::copy(o.half.begin(), o.half.end(), half.begin());
    std::copy(o.big.begin(), o.big.end(), big.begin());
  }

  bool operator==(const State& o) const {
    return weight == o.weight && bias == o.bias && counter == o.counter && half == o.half &&
           mask == o.mask && big == o.big;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> checkpoint_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Calls f, which must throw E; returns the message ("" when it did not throw).
template <class E, class F>
std::string expect_throw(F&& f) {
  try {
    f();
    ADD_FAILURE() << "expected an exception on rank " << world_rank();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type on rank " << world_rank() << ": " << e.what();
  }
  return "";
}

// True when every rank holds the same string.
bool same_on_every_rank(const std::string& s) {
  unsigned long long h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  std::vector<int64_t> lo{static_cast<int64_t>(h)}, hi{static_cast<int64_t>(h)};
  hvd::allreduce(lo, "test.same.lo", hvd::ReduceOp::kMin);
  hvd::allreduce(hi, "test.same.hi", hvd::ReduceOp::kMax);
  return lo[0] == hi[0];
}

class CheckpointTest : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

TEST_F(CheckpointTest, SaveThenRestoreGivesRank0sStateOnEveryRank) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 3);
  // Other ranks hold different values: the checkpoint must hold rank 0's.
  State mine(7, hvd::rank() == 0 ? 0 : 1000 + hvd::rank());
  ck.save(7, mine.tensors(), {{"epoch", "2"}, {"note", "unicode \xc3\xa9 and \"quotes\""}});
  // save returned, so the file is durable and visible to every rank.
  EXPECT_TRUE(fs::exists(ck.path_for(7))) << ck.path_for(7);

  State restored(-1, hvd::rank());  // garbage, different per rank
  const auto step = ck.restore_latest(restored.tensors());
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 7);
  EXPECT_TRUE(restored == State(7))
      << "rank " << hvd::rank() << " did not get rank 0's state of step 7";
  EXPECT_EQ(ck.last_metadata().at("epoch"), "2");
  EXPECT_EQ(ck.last_metadata().at("note"), "unicode \xc3\xa9 and \"quotes\"");
  EXPECT_EQ(ck.last_metadata().at("step"), "7");
  EXPECT_EQ(ck.last_metadata().at("format"), "hvd");
  EXPECT_EQ(ck.last_metadata().at("checksum").size(), 16u);
  std::string all_metadata;
  for (const auto& [k, v] : ck.last_metadata()) all_metadata += k + "=" + v + ";";
  EXPECT_TRUE(same_on_every_rank(all_metadata));
}

TEST_F(CheckpointTest, RestoreTakesTheNewestOfSeveral) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 0);
  for (int64_t s : {3, 10, 5}) {
    State st(s);
    ck.save(s, st.tensors());
  }
  State restored(0);
  EXPECT_EQ(ck.restore_latest(restored.tensors()), 10);
  EXPECT_TRUE(restored == State(10));
}

TEST_F(CheckpointTest, NoCheckpointIsNulloptOnEveryRankAndTensorsStayUntouched) {
  SharedTempDir dir;
  for (const std::string& d : {dir.path(), dir / "never-created"}) {
    hvd::Checkpointer ck(d);
    State restored(42, hvd::rank());
    EXPECT_FALSE(ck.restore_latest(restored.tensors()).has_value());
    EXPECT_TRUE(restored == State(42, hvd::rank()));
    EXPECT_TRUE(ck.last_metadata().empty());
  }
  EXPECT_FALSE(fs::exists(dir / "never-created"));
}

TEST_F(CheckpointTest, KeepLastPrunesOlderCheckpoints) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 2);
  for (int64_t s = 1; s <= 5; ++s) {
    State st(s);
    ck.save(s, st.tensors());
  }
  on_rank0([&] {
    EXPECT_EQ(checkpoint_names(dir.path()),
              (std::vector<std::string>{"ckpt-000000000004.safetensors",
                                        "ckpt-000000000005.safetensors"}));
  });
  State restored(0);
  EXPECT_EQ(ck.restore_latest(restored.tensors()), 5);
  EXPECT_TRUE(restored == State(5));
}

TEST_F(CheckpointTest, CorruptedNewestFallsBackToThePreviousWithAWarning) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 5);
  for (int64_t s = 1; s <= 3; ++s) {
    State st(s);
    ck.save(s, st.tensors());
  }
  // One flipped bit in step 3's data; step 2 truncated by one byte after that.
  on_rank0([&] {
    std::string bytes = read_file(ck.path_for(3));
    bytes[bytes.size() / 2] ^= 0x10;
    write_file(ck.path_for(3), bytes);
  });
  if (hvd::rank() == 0) testing::internal::CaptureStderr();
  State restored(0, hvd::rank());
  EXPECT_EQ(ck.restore_latest(restored.tensors()), 2);
  EXPECT_TRUE(restored == State(2));
  if (hvd::rank() == 0) {
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("skipping '" + ck.path_for(3) + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  }

  on_rank0([&] {
    std::string bytes = read_file(ck.path_for(2));
    write_file(ck.path_for(2), bytes.substr(0, bytes.size() - 1));
  });
  State again(0, hvd::rank());
  EXPECT_EQ(ck.restore_latest(again.tensors()), 1);
  EXPECT_TRUE(again == State(1));

  // Every file bad (a huge header length in step 1): no good checkpoint, nullopt everywhere.
  on_rank0([&] {
    std::string bytes = read_file(ck.path_for(1));
    const uint64_t huge = uint64_t{1} << 60;
    std::memcpy(bytes.data(), &huge, 8);
    write_file(ck.path_for(1), bytes);
  });
  State none(9, hvd::rank());
  EXPECT_FALSE(ck.restore_latest(none.tensors()).has_value());
  EXPECT_TRUE(none == State(9, hvd::rank()));
}

TEST_F(CheckpointTest, WriteErrorOnRank0IsTheSameErrorOnEveryRank) {
  SharedTempDir dir;
  // Tests run as root, so permissions cannot stop rank 0; a regular file as parent does.
  on_rank0([&] { write_file(dir / "not-a-dir", "x"); });
  hvd::Checkpointer ck(dir / "not-a-dir/ckpt");
  State st(1);
  const std::string msg = expect_throw<hvd::Error>([&] { ck.save(1, st.tensors()); });
  EXPECT_NE(msg.find("Checkpointer::save(step 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("failed on rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir / "not-a-dir/ckpt"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));

  // The runtime is still usable: a good save and restore follow.
  hvd::Checkpointer good(dir / "good");
  State st2(2);
  good.save(2, st2.tensors());
  State restored(0);
  EXPECT_EQ(good.restore_latest(restored.tensors()), 2);
  EXPECT_TRUE(restored == State(2));
}

TEST_F(CheckpointTest, BadArgumentsOnRank0AreInvalidArgumentErrorsOnEveryRank) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path());
  std::vector<float> x(3, 1.f);
  const std::vector<hvd::NamedTensor> dup = {
      {"x", hvd::TensorRef(x.data(), hvd::DataType::kFloat32, {3})},
      {"x", hvd::TensorRef(x.data(), hvd::DataType::kFloat32, {3})}};
  std::string msg = expect_throw<hvd::InvalidArgumentError>([&] { ck.save(1, dup); });
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));

  const std::vector<hvd::NamedTensor> one = {dup[0]};
  msg = expect_throw<hvd::InvalidArgumentError>([&] { ck.save(1, one, {{"step", "9"}}); });
  EXPECT_NE(msg.find("metadata key 'step' is reserved"), std::string::npos) << msg;
  msg = expect_throw<hvd::InvalidArgumentError>([&] { ck.save(-1, one); });
  EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
  EXPECT_THROW(hvd::Checkpointer(dir.path(), -1), hvd::InvalidArgumentError);
  EXPECT_THROW(hvd::Checkpointer(""), hvd::InvalidArgumentError);
  on_rank0([&] { EXPECT_TRUE(checkpoint_names(dir.path()).empty()); });
}

// A tensor on a device this process cannot reach (cuda:64) is the same InvalidArgumentError on
// every rank, naming it, for save (rank 0 checks) and restore (every rank checks); nothing is
// written.
TEST_F(CheckpointTest, UnreachableDeviceTensorIsAnErrorOnEveryRank) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path());
  std::vector<float> x(3, 1.f);
  float fake = 0;  // never dereferenced
  const std::vector<hvd::NamedTensor> tensors = {
      {"x", hvd::TensorRef(x.data(), hvd::DataType::kFloat32, {3})},
      {"on_gpu", hvd::TensorRef(&fake, hvd::DataType::kFloat32, {1}, hvd::Device::cuda(64))}};
  std::string msg = expect_throw<hvd::InvalidArgumentError>([&] { ck.save(1, tensors); });
  EXPECT_NE(msg.find("'on_gpu' is on cuda:64"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));
  msg = expect_throw<hvd::InvalidArgumentError>([&] { ck.restore_latest(tensors); });
  EXPECT_NE(msg.find("'on_gpu' is on cuda:64"), std::string::npos) << msg;
  on_rank0([&] { EXPECT_TRUE(checkpoint_names(dir.path()).empty()); });
}

TEST_F(CheckpointTest, RestoreIntoMismatchedTensorsIsAnErrorOnEveryRank) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path());
  std::vector<float> a(4, 2.f);
  ck.save(1, {{"a", hvd::TensorRef(a.data(), hvd::DataType::kFloat32, {4})}});

  std::vector<float> wrong_shape(5);
  std::string msg = expect_throw<hvd::InvalidArgumentError>([&] {
    ck.restore_latest({{"a", hvd::TensorRef(wrong_shape.data(), hvd::DataType::kFloat32, {5})}});
  });
  EXPECT_NE(msg.find("holds tensor 'a' as F32 [4] but the caller passed F32 [5]"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(same_on_every_rank(msg));

  msg = expect_throw<hvd::InvalidArgumentError>([&] {
    ck.restore_latest({{"b", hvd::TensorRef(a.data(), hvd::DataType::kFloat32, {4})}});
  });
  EXPECT_NE(msg.find("has no tensor 'b'"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));

  // A subset of the saved tensors is fine.
  std::vector<float> ok(4, 0.f);
  EXPECT_EQ(ck.restore_latest({{"a", hvd::TensorRef(ok.data(), hvd::DataType::kFloat32, {4})}}), 1);
  EXPECT_EQ(ok, std::vector<float>(4, 2.f));
}

TEST_F(CheckpointTest, DifferentTensorListsAcrossRanksAreAnErrorNotAHang) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path());
  std::vector<float> a(4, 1.f);
  ck.save(1, {{"a", hvd::TensorRef(a.data(), hvd::DataType::kFloat32, {4})}});
  const int64_t n = hvd::rank() == 1 ? 3 : 4;
  const std::string msg = expect_throw<hvd::InvalidArgumentError>([&] {
    ck.restore_latest({{"a", hvd::TensorRef(a.data(), hvd::DataType::kFloat32, {n})}});
  });
  EXPECT_NE(msg.find("different tensor lists"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));
}

// save_async returns once rank 0 has its copy: the caller changes the tensors at once, and the
// file still holds the values of the call (rank 0's); wait() makes it durable; every rank restores
// it.
TEST_F(CheckpointTest, SaveAsyncWritesTheValuesOfTheCall) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 0);
  State st(4, hvd::rank() == 0 ? 0 : 500 + hvd::rank());
  ck.save_async(4, st.tensors(), {{"epoch", "1"}});
  st.overwrite_with(State(99));  // the next steps' values, before the write can have finished
  ck.wait();
  EXPECT_TRUE(fs::exists(ck.path_for(4))) << ck.path_for(4);
  State restored(-1, hvd::rank());
  EXPECT_EQ(ck.restore_latest(restored.tensors()), 4);
  EXPECT_TRUE(restored == State(4)) << "rank " << hvd::rank();
  EXPECT_EQ(ck.last_metadata().at("epoch"), "1");
  EXPECT_EQ(ck.last_metadata().at("step"), "4");
  ck.wait();  // nothing pending: returns on every rank
}

// Several save_async calls in a row: each waits for the previous write, keep_last prunes as
// save() does, and restore_latest waits for the last write before it looks.
TEST_F(CheckpointTest, SaveAsyncInARowWritesEveryStepAndPrunes) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path(), 2);
  State st(0);
  for (int64_t s = 1; s <= 5; ++s) {
    st.overwrite_with(State(s));
    ck.save_async(s, st.tensors());
  }
  State restored(0);
  EXPECT_EQ(ck.restore_latest(restored.tensors()), 5);
  EXPECT_TRUE(restored == State(5));
  on_rank0([&] {
    EXPECT_EQ(checkpoint_names(dir.path()),
              (std::vector<std::string>{"ckpt-000000000004.safetensors",
                                        "ckpt-000000000005.safetensors"}));
  });
  // A synchronous save after an asynchronous one: both files, in order.
  st.overwrite_with(State(6));
  ck.save_async(6, st.tensors());
  st.overwrite_with(State(7));
  ck.save(7, st.tensors());
  on_rank0([&] {
    EXPECT_EQ(checkpoint_names(dir.path()),
              (std::vector<std::string>{"ckpt-000000000006.safetensors",
                                        "ckpt-000000000007.safetensors"}));
  });
}

// A write that fails on rank 0's writer thread is thrown on every rank by the next call of the
// Checkpointer (wait, or another save), naming its step; the next call does nothing else, and the
// failure is reported once.
TEST_F(CheckpointTest, AFailedAsyncWriteIsThrownByTheNextCallOnEveryRank) {
  SharedTempDir dir;
  on_rank0([&] { write_file(dir / "not-a-dir", "x"); });
  State st(1);
  {
    hvd::Checkpointer ck(dir / "not-a-dir/a");
    ck.save_async(1, st.tensors());  // the arguments are good: the call returns everywhere
    const std::string msg = expect_throw<hvd::Error>([&] { ck.wait(); });
    EXPECT_NE(msg.find("Checkpointer::save_async(step 1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed on rank 0"), std::string::npos) << msg;
    EXPECT_TRUE(same_on_every_rank(msg));
    ck.wait();  // reported once: nothing pending now
  }
  {
    hvd::Checkpointer ck(dir / "not-a-dir/b");
    ck.save_async(2, st.tensors());
    const std::string msg = expect_throw<hvd::Error>([&] { ck.save_async(3, st.tensors()); });
    EXPECT_NE(msg.find("Checkpointer::save_async(step 2)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("save_async(step 3) to '" + (dir / "not-a-dir/b") + "' did nothing"),
              std::string::npos)
        << msg;
    EXPECT_TRUE(same_on_every_rank(msg));
    ck.wait();  // step 3 was not started
  }
  // The runtime is still usable.
  hvd::Checkpointer good(dir / "good");
  good.save_async(8, st.tensors());
  State restored(0);
  EXPECT_EQ(good.restore_latest(restored.tensors()), 8);
  EXPECT_TRUE(restored == State(1));
}

// save_async checks its arguments at the call, as save() does: the error on every rank at once,
// and nothing pending afterwards.
TEST_F(CheckpointTest, SaveAsyncBadArgumentsAreThrownAtTheCallOnEveryRank) {
  SharedTempDir dir;
  hvd::Checkpointer ck(dir.path());
  std::vector<float> x(3, 1.f);
  const hvd::TensorRef t(x.data(), hvd::DataType::kFloat32, {3});
  std::string msg = expect_throw<hvd::InvalidArgumentError>([&] {
    ck.save_async(1, {{"w", t}, {"w", t}});
  });
  EXPECT_NE(msg.find("save_async(step 1)"), std::string::npos) << msg;
  EXPECT_TRUE(same_on_every_rank(msg));
  msg = expect_throw<hvd::InvalidArgumentError>([&] {
    ck.save_async(2, {{"w", t}}, {{"checksum", "x"}});
  });
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  ck.wait();
  on_rank0([&] { EXPECT_TRUE(checkpoint_names(dir.path()).empty()); });
}

// A Checkpointer destroyed while its write runs waits for it: the file is there afterwards.
TEST_F(CheckpointTest, ACheckpointerDestroyedWhileWritingFinishesTheFile) {
  SharedTempDir dir;
  State st(3);
  {
    hvd::Checkpointer ck(dir.path());
    ck.save_async(3, st.tensors());
  }
  State restored(0);
  EXPECT_EQ(hvd::Checkpointer(dir.path()).restore_latest(restored.tensors()), 3);
  EXPECT_TRUE(restored == State(3));
}

}  // namespace
