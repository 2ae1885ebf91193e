#include "traces/kineto_reader.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <streambuf>

#include "models/error.h"

namespace shardplan {
namespace {

using nlohmann::json;

// A std::streambuf over zlib's gzread, which passes plain files through unchanged.
class GzStreamBuf : public std::streambuf {
 public:
  explicit GzStreamBuf(const std::string& path) : file_(gzopen(path.c_str(), "rb")) {
    if (file_ != nullptr) gzbuffer(file_, 1 << 20);
  }
  ~GzStreamBuf() override {
    if (file_ != nullptr) gzclose(file_);
  }
  GzStreamBuf(const GzStreamBuf&) = delete;
  GzStreamBuf& operator=(const GzStreamBuf&) = delete;

  bool is_open() const { return file_ != nullptr; }
  // Set when zlib failed, including a gzip stream that ends before its trailer.
  const std::string& error() const { return error_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (file_ == nullptr || !error_.empty()) return traits_type::eof();
    const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n <= 0) {
      int code = Z_OK;
      const char* message = gzerror(file_, &code);
      // Z_BUF_ERROR at the end: the gzip stream was cut off (zlib's gzread contract).
      if (n < 0 || code != Z_OK) error_ = message != nullptr ? message : "read failed";
      return traits_type::eof();
    }
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  gzFile file_ = nullptr;
  std::vector<char> buffer_ = std::vector<char>(1 << 20);  // on the heap: we live on the stack
  std::string error_;
};

// Builds one JSON value from SAX callbacks (one trace event, or one metadata value).
class ValueBuilder {
 public:
  void reset() {
    root_ = nullptr;
    stack_.clear();
  }
  bool open() const { return !stack_.empty(); }
  json& root() { return root_; }

  void value(json v) { place(std::move(v)); }
  void start(json container) { stack_.push_back(place(std::move(container))); }
  void end() { stack_.pop_back(); }
  void key(std::string k) { key_ = std::move(k); }

 private:
  // Pointers into the tree stay valid: only the innermost open container grows.
  json* place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }

  json root_;
  std::vector<json*> stack_;
  std::string key_;
};

int64_t integer(const json& j) {
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(u) : -1;
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    // A float beyond int64 (the fuzzer wrote 1e66) has no integer value: converting it is
    // undefined behaviour. Such a field is as unknown as a missing one.
    const double d = j.get<double>();
    if (!(d >= -0x1p63 && d < 0x1p63)) return -1;
    return static_cast<int64_t>(d);
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() && *end == '\0') return v;
  }
  return -1;
}

double number(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return std::strtod(j.get_ref<const std::string&>().c_str(), nullptr);
  return 0;
}

int64_t int_arg(const json& args, const char* key) {
  const auto it = args.find(key);
  return it == args.end() ? -1 : integer(*it);
}

// A string member of an event or of its args; empty when absent or not a string.
std::string_view string_member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>())
                                               : std::string_view();
}

// Whether the importer reads an event of this phase, category and name: module ranges
// among the Python events (a with_stack trace has tens of thousands of other frames),
// the autograd fwd-bwd flows among the flows, no metadata.
bool wanted_event(std::string_view ph, std::string_view cat, std::string_view name) {
  if (ph == "M") return false;
  if (cat == "python_function") return name.rfind("nn.Module: ", 0) == 0;
  if (ph == "s" || ph == "f") return cat == "fwdbwd";
  return true;
}

// The args the importer reads; the rest (input shapes, concrete inputs, strides) are
// skipped unbuilt, which is most of a cpu_op's bytes.
bool wanted_arg(std::string_view key) {
  static constexpr std::string_view kArgs[] = {
      "correlation",   "Sequence number", "stream",          "Collective name",
      "In msg nelems", "Out msg nelems",  "Group size",      "dtype",
      "Device Type",   "Bytes",           "Total Allocated", "Total Reserved"};
  return std::find(std::begin(kArgs), std::end(kArgs), key) != std::end(kArgs);
}

// Receives the SAX stream: top-level scalars and small values go to the metadata; each
// element of "traceEvents" is built (only the keys the importer reads), turned into a
// KinetoEvent, and dropped.
class TraceSax : public nlohmann::json_sax<json> {
 public:
  explicit TraceSax(KinetoTrace& trace) : trace_(trace) {}

  const std::string& error() const { return error_; }

  bool null() override { return scalar(nullptr); }
  bool boolean(bool v) override { return scalar(v); }
  bool number_integer(number_integer_t v) override { return scalar(v); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(v); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
  bool string(string_t& v) override {
    if (skip_depth_ == 0 && !skip_next_ && in_event() && event_depth_ == 1) note_identity(v);
    return scalar(std::move(v));
  }
  bool binary(binary_t&) override { return true; }

  bool start_object(std::size_t) override { return start(json::object()); }
  bool start_array(std::size_t) override {
    if (!building_ && depth_ == 1 && top_key_ == "traceEvents") {
      in_events_ = true;
      trace_.has_trace_events = true;
      depth_ = 2;
      return true;
    }
    return start(json::array());
  }
  bool key(string_t& k) override {
    if (skip_depth_ > 0) return true;
    if (building_) {
      if (in_event()) {
        // Inside an event: skip what the importer never reads, unbuilt.
        if (dropped_ || (event_depth_ == 2 && args_open_ && !wanted_arg(k))) {
          skip_next_ = true;
          return true;
        }
        if (event_depth_ == 1) last_event_key_ = k;
      }
      builder_.key(k);
    } else if (depth_ == 1) {
      top_key_ = k;
    }
    return true;
  }
  bool end_object() override { return end(); }
  bool end_array() override {
    if (!building_ && in_events_ && depth_ == 2) {
      in_events_ = false;
      depth_ = 1;
      return true;
    }
    return end();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_ = fmt::format("not valid JSON at byte {}: {}", position, e.what());
    return false;
  }

 private:
  bool in_event() const { return building_ && in_events_; }

  // ph, cat and name decide whether the event is kept; once all three are known and it is
  // not, the rest of it is skipped.
  void note_identity(const std::string& v) {
    if (last_event_key_ == "ph") ph_ = v, ++identity_;
    if (last_event_key_ == "cat") cat_ = v, ++identity_;
    if (last_event_key_ == "name") name_ = v, ++identity_;
  }

  bool scalar(json v) {
    if (skip_depth_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    if (building_) {
      builder_.value(std::move(v));
      if (in_event() && identity_ == 3 && !dropped_) dropped_ = !wanted_event(ph_, cat_, name_);
    } else if (depth_ == 0) {
      error_ = "the top level is not a JSON object (a Chrome trace is {\"traceEvents\": [...]})";
      return false;
    } else if (depth_ == 1) {
      trace_.metadata[top_key_] = std::move(v);
    }
    return true;
  }

  bool start(json container) {
    if (skip_depth_ > 0 || skip_next_) {
      skip_next_ = false;
      ++skip_depth_;
      return true;
    }
    if (building_) {
      if (in_event()) {
        ++event_depth_;
        if (event_depth_ == 2) args_open_ = last_event_key_ == "args";
      }
      builder_.start(std::move(container));
      return true;
    }
    if (depth_ == 0) {
      if (!container.is_object()) {
        error_ = "the top level is not a JSON object (a Chrome trace is {\"traceEvents\": [...]})";
        return false;
      }
      depth_ = 1;
      return true;
    }
    if (depth_ == 1 && top_key_ == "traceEvents") {
      error_ = "\"traceEvents\" is not an array";
      return false;
    }
    building_ = true;
    builder_.reset();
    if (in_events_) {
      event_depth_ = 1;
      args_open_ = dropped_ = false;
      identity_ = 0;
      last_event_key_.clear();
    }
    builder_.start(std::move(container));
    return true;
  }

  bool end() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    if (!building_) {
      depth_ = 0;  // the top-level object closed
      return true;
    }
    builder_.end();
    if (in_event()) {
      --event_depth_;
      if (event_depth_ == 1) args_open_ = false;
    }
    if (!builder_.open()) {
      building_ = false;
      if (in_events_) {
        if (builder_.root().is_object() && !dropped_) add_event(builder_.root());
      } else {
        trace_.metadata[top_key_] = std::move(builder_.root());
      }
    }
    return true;
  }

  int64_t thread_id(const json& j) {
    if (j.is_string()) {
      // Some Kineto versions name GPU tracks ("stream 7"); give each a stable negative id.
      const auto [it, inserted] = string_tids_.try_emplace(
          j.get<std::string>(), -static_cast<int64_t>(string_tids_.size()) - 2);
      return it->second;
    }
    return integer(j);
  }

  void add_event(const json& e) {
    KinetoEvent ev;
    ev.name = trace_.intern(string_member(e, "name"));
    ev.cat = trace_.intern(string_member(e, "cat"));
    const std::string_view ph = string_member(e, "ph");
    ev.ph = ph.empty() ? '?' : ph[0];
    if (!wanted_event(ph, ev.cat, ev.name)) return;  // keys in an unusual order
    if (const auto it = e.find("pid"); it != e.end()) ev.pid = thread_id(*it);
    if (const auto it = e.find("tid"); it != e.end()) ev.tid = thread_id(*it);
    if (const auto it = e.find("ts"); it != e.end() && (it->is_number() || it->is_string())) {
      ev.ts = number(*it);
    } else if (ev.ph == 'X' || ev.ph == 'i') {
      ++trace_.events_without_time;
      return;
    }
    if (const auto it = e.find("dur"); it != e.end()) ev.dur = number(*it);
    if (const auto it = e.find("id"); it != e.end()) ev.flow_id = integer(*it);
    if (const auto it = e.find("args"); it != e.end() && it->is_object()) {
      const json& a = *it;
      ev.correlation = int_arg(a, "correlation");
      ev.sequence = int_arg(a, "Sequence number");
      ev.stream = int_arg(a, "stream");
      ev.collective = trace_.intern(string_member(a, "Collective name"));
      ev.in_elements = int_arg(a, "In msg nelems");
      ev.out_elements = int_arg(a, "Out msg nelems");
      ev.group_size = int_arg(a, "Group size");
      ev.dtype = trace_.intern(string_member(a, "dtype"));
      ev.device_type = int_arg(a, "Device Type");
      // Negative for a free, so not through int_arg's -1 for "absent".
      if (const auto b = a.find("Bytes"); b != a.end()) ev.bytes = static_cast<int64_t>(number(*b));
      ev.total_allocated = int_arg(a, "Total Allocated");
      ev.total_reserved = int_arg(a, "Total Reserved");
    }
    trace_.events.push_back(std::move(ev));
  }

  KinetoTrace& trace_;
  ValueBuilder builder_;
  bool building_ = false;
  bool in_events_ = false;
  int depth_ = 0;  // 0 outside, 1 in the top-level object, 2 in traceEvents
  // Within the event being built: its open containers, whether the open one is "args",
  // the last key of the event object, and what decides whether it is kept.
  int event_depth_ = 0;
  bool args_open_ = false;
  std::string last_event_key_;
  std::string ph_, cat_, name_;
  int identity_ = 0;
  bool dropped_ = false;
  // Skipping a value unbuilt: the next value, or the containers open inside one.
  bool skip_next_ = false;
  int skip_depth_ = 0;
  std::string top_key_;
  std::string error_;
  std::map<std::string, int64_t> string_tids_;
};

}  // namespace

std::string_view KinetoTrace::intern(std::string_view text) {
  if (text.empty()) return {};
  auto it = strings.find(text);
  if (it == strings.end()) it = strings.emplace(text).first;
  return *it;
}

KinetoTrace read_kineto_trace(const std::string& path) {
  GzStreamBuf buf(path);
  if (!buf.is_open()) throw InputError(path, "", "cannot open the file");
  std::istream in(&buf);
  KinetoTrace trace;
  TraceSax sax(trace);
  const bool ok = json::sax_parse(in, &sax, nlohmann::detail::input_format_t::json, true, true);
  if (!buf.error().empty()) {
    throw InputError(path, "",
                     fmt::format("truncated or corrupt gzip data (zlib: {})", buf.error()));
  }
  if (!ok) {
    throw InputError(path, "", sax.error().empty() ? "not valid JSON" : sax.error());
  }
  if (!trace.has_trace_events) {
    throw InputError(path, "traceEvents",
                     "missing: not a Chrome trace (PyTorch profiler export_chrome_trace)");
  }
  return trace;
}

std::string read_file_prefix(const std::string& path, std::size_t max_bytes) {
  GzStreamBuf buf(path);
  if (!buf.is_open()) throw InputError(path, "", "cannot open the file");
  std::string text;
  text.reserve(max_bytes);
  for (auto c = buf.sbumpc(); c != std::char_traits<char>::eof() && text.size() < max_bytes;
       c = buf.sbumpc()) {
    text.push_back(static_cast<char>(c));
  }
  return text;
}

}  // namespace shardplan
