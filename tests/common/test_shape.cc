// hvd::Shape (include/hvd/tensor.h): a TensorRef's dimensions, inline up to Shape::kInline. A
// TensorRef is passed by value to every collective, so copying or moving one must not allocate
// (this binary counts the allocations of operator new), while a shape with more dimensions still
// works, on the heap; and a Shape reads like the std::vector it replaced.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "hvd/tensor.h"
#include "tests/support/allocation_counter.h"

namespace hvd {
namespace {

using hvdtest::allocations;

TEST(Shape, ReadsLikeAVector) {
  const Shape s{3, 4, 5};
  EXPECT_EQ(s.size(), 3u);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s[0], 3);
  EXPECT_EQ(s.front(), 3);
  EXPECT_EQ(s.back(), 5);
  int64_t product = 1;
  for (int64_t d : s) product *= d;
  EXPECT_EQ(product, 60);
  EXPECT_EQ(s, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ((std::vector<int64_t>{3, 4, 5}), s);
  EXPECT_FALSE(s == (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(s == (Shape{3, 4, 6}));
  const std::vector<int64_t> v = s;
  EXPECT_EQ(v, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(shape_string(s), "[3,4,5]");
  EXPECT_TRUE(Shape{}.empty());
  EXPECT_EQ(shape_string(Shape{}), "[]");
  EXPECT_EQ(Shape{}, std::vector<int64_t>{});
  const int64_t dims[] = {7, 8};
  EXPECT_EQ(Shape(dims, 2), (Shape{7, 8}));
}

TEST(Shape, ATensorRefIsCopiedAndMovedWithoutAllocating) {
  float x[120] = {};
  const TensorRef t(x, DataType::kFloat32, {2, 3, 4, 5});
  ASSERT_EQ(Shape::kInline, 6u);
  const TensorRef six(x, DataType::kFloat32, {1, 2, 3, 4, 5, 1});
  std::vector<TensorRef> v;
  v.reserve(4);
  const long before = allocations();
  TensorRef copy = t;
  TensorRef moved = std::move(copy);
  TensorRef copy6 = six;
  TensorRef assigned;
  assigned = moved;
  v.push_back(t);
  v.push_back(std::move(moved));
  EXPECT_EQ(allocations(), before) << "a TensorRef of at most 6 dimensions allocated";
  EXPECT_EQ(assigned.shape(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(v[1].shape(), t.shape());
  EXPECT_EQ(copy6.shape(), six.shape());
  EXPECT_EQ(assigned.num_elements(), 120);
  EXPECT_EQ(copy6.num_elements(), 120);
}

TEST(Shape, MoreDimensionsThanInlineLiveOnTheHeap) {
  const std::vector<int64_t> dims = {1, 2, 1, 3, 1, 2, 2, 1};  // 8 > kInline
  Shape a(dims);
  EXPECT_EQ(a.size(), 8u);
  EXPECT_EQ(a, dims);
  Shape b = a;  // a deep copy
  b[3] = 9;
  EXPECT_EQ(a[3], 3);
  EXPECT_EQ(b[3], 9);
  Shape c = std::move(b);
  EXPECT_EQ(c.size(), 8u);
  EXPECT_EQ(c[3], 9);
  b = a;  // a moved-from shape can be assigned again
  EXPECT_EQ(b, a);
  a = Shape{4};  // back to inline
  EXPECT_EQ(a, (std::vector<int64_t>{4}));
  EXPECT_EQ(shape_string(c), "[1,2,1,9,1,2,2,1]");
  float x[24] = {};
  TensorRef t(x, DataType::kFloat32, dims);
  TensorRef u = t;
  EXPECT_EQ(u.shape(), dims);
  EXPECT_EQ(u.num_elements(), 24);
}

// The inline array and the heap pointer share their storage, so every assignment between the two
// kinds must free, copy or steal the right one (ASan's run of this test shows a leak, a double
// free or a read of freed memory; valgrind too).
TEST(Shape, AssignmentsBetweenInlineAndHeapShapes) {
  const Shape small{2, 3};
  const Shape big{1, 2, 3, 4, 5, 6, 7};  // 7 > kInline
  Shape x = big;
  x = small;  // heap -> inline: frees
  EXPECT_EQ(x, small);
  x = big;  // inline -> heap: allocates its own copy
  EXPECT_EQ(x, big);
  EXPECT_NE(x.data(), big.data());
  Shape y = small;
  y = std::move(x);  // steals the heap dimensions; x is left empty
  EXPECT_EQ(y, big);
  EXPECT_TRUE(x.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  x = std::move(y);
  y = std::move(x);
  EXPECT_EQ(y, big);
  Shape& alias = y;
  y = alias;  // self-assignment keeps the dimensions
  EXPECT_EQ(y, big);
  y = std::move(alias);
  EXPECT_EQ(y, big);
  Shape z = small;
  z = Shape{};  // to empty
  EXPECT_TRUE(z.empty());
  EXPECT_EQ(z, std::vector<int64_t>{});
  std::vector<Shape> many(100, big);  // copies, then moves as the vector grows
  for (int i = 0; i < 100; ++i) many.push_back(i % 2 ? big : small);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(many[i], i < 100 || i % 2 ? big : small) << i;
}

}  // namespace
}  // namespace hvd
