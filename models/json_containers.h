#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace shardplan {

// Objects and arrays deeper than this are refused as a document is parsed: a model's
// modules nest at most 256 levels (two JSON levels each), and a value nested far deeper
// would overflow the stack wherever it is later copied or compared (nlohmann recurses
// there) and costs a frame of memory per level while it is read.
inline constexpr std::size_t kMaxJsonDepth = 1000;

// The objects and arrays open at a point of a JSON document, fed by a SAX parser's events:
// every reader uses it to refuse a key an object gives twice (nlohmann keeps the last
// silently; RFC 8259 leaves duplicates to the reader) and nesting past kMaxJsonDepth, and to
// name where, as a JSON pointer ("/traceEvents/12"). Frames and their key strings are
// reused, not freed, so a long array of small objects (profiler events) allocates once.
class JsonContainers {
 public:
  // A value (or a container) starts: in an array, the next element.
  void value();
  // A container starts; false when it would be nested past kMaxJsonDepth (nothing opened).
  [[nodiscard]] bool open(bool object);
  void close() { --depth_; }
  // False when the innermost object already has `key`.
  [[nodiscard]] bool add_key(const std::string& key);
  // The JSON pointer of the innermost container ("" at the top).
  std::string path() const;
  std::size_t depth() const { return depth_; }

 private:
  struct Frame {
    bool object = false;
    int64_t index = -1;  // of the current element, in an array
    // Keys given so far, the last one current; strings kept for reuse.
    std::vector<std::string> keys;
    std::size_t keys_used = 0;
    std::unordered_set<std::string> key_set;  // all the keys, past the scan limit
    bool beyond_scan = false;                 // the current key is last_key, not in keys
    std::string last_key;
  };
  std::vector<Frame> frames_;
  std::size_t depth_ = 0;
};

}  // namespace shardplan
