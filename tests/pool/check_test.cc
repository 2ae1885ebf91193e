// The placement checker names what is wrong, as a kind and a message (hand-made cases).
#include <gtest/gtest.h>

#include "pool/pool.h"

namespace shardplan {
namespace {

// Two buffers live over [0, 10) and [5, 15), 8 bytes each.
const std::vector<PoolRequest> kTwo = {{.bytes = 8, .begin = 0, .end = 10},
                                       {.bytes = 8, .begin = 5, .end = 15}};

PackingError kind_of(const std::vector<int64_t>& offsets, int64_t size, int64_t alignment = 8) {
  const auto problem = check_packing(kTwo, offsets, size, alignment);
  EXPECT_TRUE(problem.has_value()) << "the broken placement passed";
  return problem ? problem->kind : PackingError::wrong_count;
}

TEST(CheckPacking, AcceptsAStackAndNamesEachKindOfMistake) {
  EXPECT_FALSE(check_packing(kTwo, {0, 8}, 16, 8).has_value());
  EXPECT_EQ(kind_of({0}, 16), PackingError::wrong_count);
  EXPECT_EQ(kind_of({0, 4}, 16), PackingError::misaligned);
  EXPECT_EQ(kind_of({0, 8}, 15), PackingError::outside_pool);
  EXPECT_EQ(kind_of({0, 0}, 16), PackingError::overlap);
  const auto overlap = check_packing(kTwo, {0, 0}, 16, 8);
  ASSERT_TRUE(overlap.has_value());
  EXPECT_NE(overlap->message.find("buffers 0 [0, 8) and 1 [0, 8) share bytes"), std::string::npos)
      << overlap->message;
  EXPECT_EQ(packing_error_name(PackingError::outside_pool), "outside_pool");
}

// Half-open lifetimes: one buffer freed at 10 and one allocated at 10 may share bytes.
TEST(CheckPacking, BuffersThatMeetInTimeMayShareBytes) {
  const std::vector<PoolRequest> chain = {{.bytes = 8, .begin = 0, .end = 10},
                                          {.bytes = 8, .begin = 10, .end = 20}};
  EXPECT_FALSE(check_packing(chain, {0, 0}, 8, 8).has_value());
}

}  // namespace
}  // namespace shardplan
