// Writes the binary seed corpora of the fuzz targets: corpus/safetensors (checkpoint files made by
// the real writer) and corpus/requests, corpus/responses (negotiation messages made by the real
// serialisers). The text corpora are written by hand. Run by hand after a format change:
//   tests/fuzz/run_fuzz.sh --make-seeds
// Usage: make_seeds CORPUS_DIR

#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "runtime/message.h"
#include "training/safetensors.h"

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::cerr << "cannot write " << path << "\n";
    std::exit(1);
  }
}

void safetensors_seeds(const std::string& dir) {
  using hvd::DataType;
  using hvd::training::TensorBytes;
  std::vector<float> f32 = {1.5f, -2.0f, 0.0f, 3.25f, 4.0f, -0.5f};
  std::vector<double> f64 = {1.0, 2.0, 3.0};
  std::vector<int64_t> i64 = {-1, 0, 1ll << 40};
  std::vector<int32_t> i32 = {7, -7};
  std::vector<uint8_t> u8 = {0, 1, 255};
  std::vector<uint16_t> half = {0x3c00, 0xc000, 0x3f80, 0x4000};

  write(dir + "/empty.safetensors", hvd::training::serialize_safetensors({}, {}));
  write(dir + "/one_f32.safetensors",
        hvd::training::serialize_safetensors({{"w", DataType::kFloat32, {2, 3}, f32.data()}},
                                             {{"step", "7"}}));
  write(dir + "/all_dtypes.safetensors",
        hvd::training::serialize_safetensors(
            {{"a.f64", DataType::kFloat64, {3}, f64.data()},
             {"b.i64", DataType::kInt64, {3, 1}, i64.data()},
             {"c.i32", DataType::kInt32, {2}, i32.data()},
             {"d.u8", DataType::kUInt8, {3}, u8.data()},
             {"e.i8", DataType::kInt8, {1, 3}, u8.data()},
             {"f.f16", DataType::kFloat16, {2}, half.data()},
             {"g.bf16", DataType::kBFloat16, {2}, half.data() + 2},
             {"h.scalar", DataType::kFloat32, {}, f32.data()},
             {"i.empty", DataType::kFloat32, {0, 4}, nullptr}},
            {{"step", "12"}, {"note", "quote \" backslash \\ tab \t unicode \xc3\xa9"}}));
  // A header without our checksum, as another writer would produce it.
  auto entries = hvd::training::plan_layout({{"x", DataType::kFloat32, {2}, f32.data()}});
  write(dir + "/no_checksum.safetensors",
        hvd::training::encode_header(entries, {}) +
            std::string(reinterpret_cast<const char*>(f32.data()), 8));
}

void message_seeds(const std::string& dir) {
  using namespace hvd;
  Request a;
  a.rank = 1;
  a.name = "fc1.weight";
  a.shape = {128, 64};
  Request b = a;
  b.type = RequestType::kAllgather;
  b.dtype = DataType::kInt64;
  b.name = "ids";
  b.shape = {3};
  Request c = a;
  c.type = RequestType::kAllreduce;
  c.name = "grad.0";
  c.group = "grads";
  c.group_size = 2;
  c.prescale = 0.5;
  c.device.kind = Device::kCUDA;
  Request d;
  d.type = RequestType::kBroadcast;
  d.root = 2;
  d.name = "bn.mean";
  Request e;
  e.type = RequestType::kAlltoall;
  e.error = "splits do not add up";
  write(dir + "/requests/empty", serialize_requests({}));
  write(dir + "/requests/one", serialize_requests({a}));
  write(dir + "/requests/mixed", serialize_requests({a, b, c, d, e}));

  Response r;
  r.names = {"fc1.weight", "fc1.bias"};
  r.shapes = {{128, 64}, {64}};
  r.contributors = 3;
  Response g;
  g.type = ResponseType::kAllgather;
  g.names = {"ids"};
  g.shapes = {{3}};
  g.first_dims = {3, 1, 0};
  g.dtype = DataType::kInt64;
  Response err;
  err.type = ResponseType::kError;
  err.names = {"x"};
  err.error = "allreduce of 'x' failed: rank 2 sent shape [4], rank 0 sent [3].";
  Response j;
  j.type = ResponseType::kJoin;
  j.last_joined_rank = 1;
  write(dir + "/responses/empty", serialize_responses({}));
  write(dir + "/responses/one", serialize_responses({r}));
  write(dir + "/responses/mixed", serialize_responses({r, g, err, j}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds CORPUS_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  safetensors_seeds(dir + "/safetensors");
  message_seeds(dir);
  return 0;
}
