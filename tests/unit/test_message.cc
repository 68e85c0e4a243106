// Negotiation messages: round trips, and truncated input is an error, never a crash.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hvd
