// Negotiation messages: round trips, and truncated input is an error, never a crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "hvd/error.h"
#include "runtime/message.h"

namespace hvd {
namespace {

TEST(Message, RequestsRoundTrip) {
  Request a;
  a.rank = 3;
  a.type = RequestType::kBroadcast;
  a.dtype = DataType::kBFloat16;
  a.root = 2;
  a.peer = 5;
  a.prescale = 0.25;
  a.name = "layer.weight";
  a.shape = {4, 0, 7};
  a.group = "g";
  a.group_size = 5;
  a.error = "bad";
  a.waited_seconds = 2.5;
  a.device = Device::cuda(1);
  Request b;
  b.name = "";
  auto out = parse_requests(serialize_requests({a, b}).data(), serialize_requests({a, b}).size());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 3);
  EXPECT_EQ(out[0].type, RequestType::kBroadcast);
  EXPECT_EQ(out[0].dtype, DataType::kBFloat16);
  EXPECT_EQ(out[0].root, 2);
  EXPECT_EQ(out[0].prescale, 0.25);
  EXPECT_EQ(out[0].name, "layer.weight");
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{4, 0, 7}));
  EXPECT_EQ(out[0].group, "g");
  EXPECT_EQ(out[0].group_size, 5);
  EXPECT_EQ(out[0].error, "bad");
  EXPECT_EQ(out[0].waited_seconds, 2.5);
  EXPECT_EQ(out[0].device, Device::cuda(1));
}

TEST(Message, ResponsesRoundTrip) {
  Response r;
  r.type = ResponseType::kAllgather;
  r.names = {"x", "y"};
  r.shapes = {{1}, {2, 2}};
  r.first_dims = {1, 2, 3, 4};
  r.contributors = 3;
  r.last_joined_rank = 1;
  r.error = "e";
  std::string s = serialize_responses({r});
  auto out = parse_responses(s.data(), s.size());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names, r.names);
  EXPECT_EQ(out[0].shapes, r.shapes);
  EXPECT_EQ(out[0].first_dims, r.first_dims);
  EXPECT_EQ(out[0].contributors, 3);
  EXPECT_EQ(out[0].last_joined_rank, 1);
}

// Response::reset(): every field back to a default Response's (compared through the wire form,
// which carries every field), the containers' buffers kept for the next use.
TEST(Message, ResetResponseIsADefaultOneWithItsBuffers) {
  Response r;
  r.type = ResponseType::kBroadcast;
  r.names = {"a.long.tensor.name.beyond.sso", "y"};
  r.shapes = {{1}, {2, 2}};
  r.first_dims = {1, 2, 3, 4};
  r.dtype = DataType::kFloat64;
  r.reduce_op = ReduceOp::kMax;
  r.device_kind = Device::kCUDA;
  r.root = 2;
  r.peer = 1;
  r.prescale = 0.5;
  r.postscale = 2.0;
  r.deterministic = true;
  r.contributors = 3;
  r.last_joined_rank = 1;
  r.group = "g";
  r.error = "e";
  const size_t names_capacity = r.names.capacity();
  r.reset();
  EXPECT_EQ(serialize_responses({r}), serialize_responses({Response{}}));
  EXPECT_EQ(r.names.capacity(), names_capacity);
  EXPECT_GE(r.shapes.capacity(), 2u);
  EXPECT_GE(r.first_dims.capacity(), 4u);
}

std::string hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// The wire format, byte for byte: these are the bytes the first implementation (each field written
// and read by hand) produced for these messages on x86-64. A change here changes what ranks of
// different builds exchange; it must be deliberate.
TEST(Message, WireFormatIsUnchanged) {
  Request a;
  a.rank = 3;
  a.type = RequestType::kBroadcast;
  a.dtype = DataType::kBFloat16;
  a.reduce_op = ReduceOp::kMax;
  a.root = 2;
  a.peer = 5;
  a.prescale = 0.25;
  a.postscale = -1.5;
  a.deterministic = true;
  a.name = "w";
  a.shape = {4, 0};
  a.group = "g";
  a.group_size = 5;
  a.error = "e!";
  a.waited_seconds = 2.5;
  a.device = Device::cuda(1);
  const std::string requests = serialize_requests({a, Request{}});
  EXPECT_EQ(
      hex(requests),
      "02000000000000000300000002050000000300000001000000010000000200000005000000000000000000d0"
      "3f000000000000f8bf0101000000000000007702000000000000000400000000000000000000000000000001"
      "0000000000000067050000000200000000000000652100000000000004400000000000060000000100000000"
      "00000000000000ffffffffffffffff000000000000f03f000000000000f03f00000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000");
  const auto back = parse_requests(requests.data(), requests.size());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(serialize_requests(back), requests);

  Response r;
  r.type = ResponseType::kAllgather;
  r.names = {"x", "yz"};
  r.shapes = {{1}, {2, 3}};
  r.first_dims = {7, 8};
  r.dtype = DataType::kInt64;
  r.reduce_op = ReduceOp::kProduct;
  r.device_kind = Device::kCUDA;
  r.root = 1;
  r.peer = 6;
  r.prescale = 0.5;
  r.postscale = 4.0;
  r.deterministic = true;
  r.contributors = 3;
  r.last_joined_rank = 2;
  r.group = "gr";
  r.error = "oops";
  const std::string responses = serialize_responses({r, Response{}});
  EXPECT_EQ(
      hex(responses),
      "02000000000000000102000000000000000100000000000000780200000000000000797a0200000000000000"
      "0100000000000000010000000000000002000000000000000200000000000000030000000000000002000000"
      "0000000007000000000000000800000000000000030000000400000001000000010000000600000000000000"
      "0000e03f00000000000010400103000000020000000200000000000000677204000000000000006f6f707300"
      "000000000000000000000000000000000000000000000000060000000100000000000000ffffffffffffffff"
      "000000000000f03f000000000000f03f0000000000ffffffff00000000000000000000000000000000");
  const auto back_r = parse_responses(responses.data(), responses.size());
  ASSERT_EQ(back_r.size(), 2u);
  EXPECT_EQ(serialize_responses(back_r), responses);
}

TEST(Message, EveryTruncationIsAnErrorNotACrash) {
  Request a;
  a.name = "abc";
  a.shape = {1, 2};
  std::string s = serialize_requests({a, a});
  for (size_t n = 0; n < s.size(); ++n)
    EXPECT_THROW(parse_requests(s.data(), n), InternalError) << n;
  Response r;
  r.names = {"abc"};
  r.shapes = {{1}};
  std::string t = serialize_responses({r});
  for (size_t n = 0; n < t.size(); ++n)
    EXPECT_THROW(parse_responses(t.data(), n), InternalError) << n;
}

// A count larger than what follows could hold (every item takes 8 bytes or more) is refused as
// corrupt, naming the count, before anything is allocated for it; a count that fits but whose
// items are missing is a truncation. (The bound used to be the whole message's size.)
TEST(Message, ACountThatCannotFitIsRefusedBeforeItsItems) {
  Request a;
  a.name = "abc";
  std::string s = serialize_requests({a, a});
  const uint64_t fits = (s.size() - 8) / 8;
  for (uint64_t count : {fits + 1, uint64_t{1} << 40}) {
    std::string bad = s;
    std::memcpy(bad.data(), &count, 8);  // the request count leads the message
    try {
      parse_requests(bad.data(), bad.size());
      ADD_FAILURE() << "count " << count << " accepted";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("request count"), std::string::npos) << e.what();
    }
  }
  std::string truncated = s;
  std::memcpy(truncated.data(), &fits, 8);
  EXPECT_THROW(parse_requests(truncated.data(), truncated.size()), InternalError);
}

}  // namespace
}  // namespace hvd
