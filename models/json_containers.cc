#include "models/json_containers.h"

namespace shardplan {

void JsonContainers::value() {
  if (depth_ > 0 && !frames_[depth_ - 1].object) ++frames_[depth_ - 1].index;
}

bool JsonContainers::open(bool object) {
  value();
  if (depth_ >= kMaxJsonDepth) return false;
  if (depth_ == frames_.size()) frames_.emplace_back();
  Frame& f = frames_[depth_++];
  f.object = object;
  f.index = -1;
  f.keys_used = 0;
  f.key_set.clear();
  f.beyond_scan = false;
  return true;
}

bool JsonContainers::add_key(const std::string& key) {
  Frame& f = frames_[depth_ - 1];
  // A scan while the object is small (most have about ten keys), a set past that.
  constexpr std::size_t kScanLimit = 32;
  if (f.keys_used < kScanLimit) {
    for (std::size_t i = 0; i < f.keys_used; ++i)
      if (f.keys[i] == key) return false;
    if (f.keys_used == f.keys.size()) f.keys.emplace_back();
    f.keys[f.keys_used++].assign(key);
    if (f.keys_used == kScanLimit) f.key_set.insert(f.keys.begin(), f.keys.end());
  } else if (!f.key_set.insert(key).second) {
    return false;
  } else {
    f.last_key = key;
    f.beyond_scan = true;
  }
  return true;
}

std::string JsonContainers::path() const {
  std::string pointer;
  for (std::size_t i = 0; i + 1 < depth_; ++i) {
    const Frame& f = frames_[i];
    pointer += "/" + (!f.object       ? std::to_string(f.index)
                      : f.beyond_scan ? f.last_key
                                      : f.keys[f.keys_used - 1]);
  }
  return pointer;
}

}  // namespace shardplan
