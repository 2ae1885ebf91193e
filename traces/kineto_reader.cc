#include "traces/kineto_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <streambuf>

#include "models/error.h"
#include "models/json_containers.h"
#include "models/limits.h"

namespace shardplan {
namespace {

using nlohmann::json;

// Opens `path` for reading, refusing what is not a file's contents: a directory reads as
// nothing (or EISDIR) through zlib.
int open_trace(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(path, "", fmt::format("cannot open the file: {}", std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw InputError(path, "", fmt::format("cannot read the file: {}", std::strerror(error)));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw InputError(path, "", "is a directory, not a trace file");
  }
  return fd;
}

// zlib's message without the "<fd:3>: " it puts in front.
std::string zlib_message(gzFile file) {
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  std::string text = message != nullptr && *message != '\0' ? message : "read failed";
  if (const std::size_t colon = text.find(": "); colon != std::string::npos && text[0] == '<')
    text = text.substr(colon + 2);
  return text;
}

// A std::streambuf over zlib's gzread, which passes plain files through unchanged. Stops
// (as at the end of the input) at a zlib error or past `max_bytes` decompressed, and says
// which it was.
class GzStreamBuf : public std::streambuf {
 public:
  GzStreamBuf(const std::string& path, int64_t max_bytes) : max_bytes_(max_bytes) {
    const int fd = open_trace(path);
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      ::close(fd);
      throw InputError(path, "", "cannot open the file: out of memory in zlib");
    }
    gzbuffer(file_, 1 << 20);
  }
  ~GzStreamBuf() override { gzclose(file_); }
  GzStreamBuf(const GzStreamBuf&) = delete;
  GzStreamBuf& operator=(const GzStreamBuf&) = delete;

  // zlib's message when it failed, including a gzip stream that ends before its trailer.
  const std::string& zlib_error() const { return zlib_error_; }
  bool over_limit() const { return over_limit_; }
  // The input ended where it should (no error, no limit).
  bool at_end() const { return at_end_; }
  // Decompressed bytes handed out so far.
  int64_t bytes_read() const { return before_ + (gptr() - eback()); }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (at_end_ || over_limit_ || !zlib_error_.empty()) return traits_type::eof();
    before_ += egptr() - eback();
    const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n <= 0) {
      int code = Z_OK;
      gzerror(file_, &code);
      // Z_BUF_ERROR at the end: the gzip stream was cut off (zlib's gzread contract).
      if (n < 0 || code != Z_OK) {
        zlib_error_ = zlib_message(file_);
      } else {
        at_end_ = true;
      }
      setg(buffer_.data(), buffer_.data(), buffer_.data());
      return traits_type::eof();
    }
    if (before_ + n > max_bytes_) {
      over_limit_ = true;
      setg(buffer_.data(), buffer_.data(), buffer_.data());
      return traits_type::eof();
    }
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  gzFile file_ = nullptr;
  int64_t max_bytes_;
  int64_t before_ = 0;  // bytes of the blocks before the current one
  bool at_end_ = false;
  bool over_limit_ = false;
  std::string zlib_error_;
  std::vector<char> buffer_ = std::vector<char>(1 << 20);  // on the heap: we live on the stack
};

// Builds one JSON value from SAX callbacks (a metadata object the importer reads).
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

// One scalar as the parser hands it over.
struct Scalar {
  enum class Kind { null, boolean, integer, unsigned_integer, floating, string } kind;
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double floating = 0;
  const std::string* string = nullptr;
};

// A whole number in int64, or nullopt: a fraction, a float past int64 (the fuzzer wrote
// 1e66; converting it is undefined behaviour), text that is not an integer.
std::optional<int64_t> whole_number(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::integer:
      return v.integer;
    case Scalar::Kind::unsigned_integer:
      if (v.unsigned_integer <= static_cast<uint64_t>(INT64_MAX))
        return static_cast<int64_t>(v.unsigned_integer);
      return std::nullopt;
    case Scalar::Kind::floating:
      if (v.floating >= -0x1p63 && v.floating < 0x1p63 && std::trunc(v.floating) == v.floating)
        return static_cast<int64_t>(v.floating);
      return std::nullopt;
    case Scalar::Kind::string: {
      const std::string& s = *v.string;
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(s.c_str(), &end, 10);
      if (end != s.c_str() && *end == '\0' && errno != ERANGE) return n;
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// A number (or numeric text, which some exporters write), or nullopt.
std::optional<double> real_number(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::integer:
      return static_cast<double>(v.integer);
    case Scalar::Kind::unsigned_integer:
      return static_cast<double>(v.unsigned_integer);
    case Scalar::Kind::floating:
      return v.floating;
    case Scalar::Kind::string: {
      const std::string& s = *v.string;
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end != s.c_str() && *end == '\0') return d;
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// The value as it reads in a message: numbers as written, text quoted and cut short.
std::string shown(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::null:
      return "null";
    case Scalar::Kind::boolean:
      return v.integer != 0 ? "true" : "false";
    case Scalar::Kind::integer:
      return std::to_string(v.integer);
    case Scalar::Kind::unsigned_integer:
      return std::to_string(v.unsigned_integer);
    case Scalar::Kind::floating:
      return fmt::format("{:g}", v.floating);
    default:
      return quote_input(*v.string, 24);
  }
}

// The event keys and args the importer reads; the rest are skipped unbuilt.
enum class Key {
  other,
  name,
  cat,
  ph,
  pid,
  tid,
  ts,
  dur,
  id,
  args,
  // args
  correlation,
  sequence,
  stream,
  collective,
  in_elements,
  out_elements,
  group_size,
  dtype,
  device_type,
  bytes,
  total_allocated,
  total_reserved,
};

Key event_key(std::string_view k) {
  if (k == "name") return Key::name;
  if (k == "cat") return Key::cat;
  if (k == "ph") return Key::ph;
  if (k == "pid") return Key::pid;
  if (k == "tid") return Key::tid;
  if (k == "ts") return Key::ts;
  if (k == "dur") return Key::dur;
  if (k == "id") return Key::id;
  if (k == "args") return Key::args;
  return Key::other;
}

Key arg_key(std::string_view k) {
  static constexpr std::pair<std::string_view, Key> kArgs[] = {
      {"correlation", Key::correlation},
      {"Sequence number", Key::sequence},
      {"stream", Key::stream},
      {"Collective name", Key::collective},
      {"In msg nelems", Key::in_elements},
      {"Out msg nelems", Key::out_elements},
      {"Group size", Key::group_size},
      {"dtype", Key::dtype},
      {"Device Type", Key::device_type},
      {"Bytes", Key::bytes},
      {"Total Allocated", Key::total_allocated},
      {"Total Reserved", Key::total_reserved}};
  for (const auto& [text, key] : kArgs)
    if (k == text) return key;
  return Key::other;
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

// Some Kineto versions name GPU tracks ("stream 7"): each name gets a stable negative id
// (below -1, which is "absent"), hashed rather than numbered so that two reads of the
// file agree and no table grows with the names.
int64_t named_track_id(std::string_view name) {
  return -static_cast<int64_t>(std::hash<std::string_view>{}(name) & ((uint64_t{1} << 62) - 1)) - 2;
}

// One event as it is read: its fields, its strings (owned until the trace keeps it), and
// what was wrong with its time or its args.
struct EventInProgress {
  KinetoEvent event;
  std::string name, cat, ph, collective, dtype;
  bool has_ts = false;
  std::string time_problem;   // first problem with ts or dur
  std::string value_problem;  // first arg set aside
  int64_t values_set_aside = 0;

  void reset() {
    event = KinetoEvent{};
    name.clear();
    cat.clear();
    ph.clear();
    collective.clear();
    dtype.clear();
    has_ts = false;
    time_problem.clear();
    value_problem.clear();
    values_set_aside = 0;
  }
  void reset_args() {
    const KinetoEvent fresh;
    event.correlation = fresh.correlation;
    event.sequence = fresh.sequence;
    event.stream = fresh.stream;
    event.in_elements = fresh.in_elements;
    event.out_elements = fresh.out_elements;
    event.group_size = fresh.group_size;
    event.device_type = fresh.device_type;
    event.bytes = fresh.bytes;
    event.total_allocated = fresh.total_allocated;
    event.total_reserved = fresh.total_reserved;
    collective.clear();
    dtype.clear();
  }
  void set_aside_value(std::string_view arg, const std::string& why) {
    if (values_set_aside++ == 0) value_problem = fmt::format("'{}' {}", arg, why);
  }
  void time_is_unusable(std::string why) {
    if (time_problem.empty()) time_problem = std::move(why);
  }
};

// What went wrong while parsing, for the message read_kineto_trace builds.
struct ParseFailure {
  std::string field;            // a JSON pointer, for a handler's own reason
  std::string reason;           // a plain reason (set by the handler itself), or empty
  std::size_t byte = 0;         // where nlohmann stopped
  std::string parser_message;   // nlohmann's message, input echoes removed
  std::string line_and_column;  // "line 3, column 7", from nlohmann
  std::string where;            // what was open: "event /traceEvents/12", ...
};

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error while parsing value - invalid literal; last read: 'thi'" -> the line and column,
// and "syntax error while parsing value - invalid literal": the token it last read is
// the input's own bytes (possibly a multi-MB string) and is left out.
void describe_parser_message(const std::string& what, ParseFailure& failure) {
  // "[json.exception.out_of_range.406] number overflow parsing '1e999'": the number is
  // the input's own text, and has no line.
  if (what.find("number overflow parsing") != std::string::npos) {
    failure.parser_message = "a number beyond the range of a double (about ±1.8e308)";
    return;
  }
  const std::size_t at = what.find(" at line ");
  const std::size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  if (at != std::string::npos && colon != std::string::npos)
    failure.line_and_column = what.substr(at + 4, colon - at - 4);
  std::string message = colon == std::string::npos ? what : what.substr(colon + 2);
  if (const std::size_t last = message.find("; last read: '"); last != std::string::npos)
    message.resize(last);
  // "syntax error while parsing object key - unexpected ']'; expected string literal" ->
  // "unexpected ']'; expected string literal (in a JSON object key)".
  constexpr std::string_view kSyntax = "syntax error while parsing ";
  if (message.rfind(kSyntax, 0) == 0) {
    const std::size_t dash = message.find(" - ");
    if (dash != std::string::npos) {
      message = fmt::format("{} (in a JSON {})", message.substr(dash + 3),
                            message.substr(kSyntax.size(), dash - kSyntax.size()));
    }
  }
  failure.parser_message = message;
}

// Receives the parser's callbacks. Top-level scalars and the metadata objects the
// importer reads go to the metadata; each element of the events array fills a
// KinetoEvent directly (no JSON value is built for it), which `keep` then takes or not.
//
//   depth 1: {  "traceEvents": [          <- events_depth_ (1 for a bare array)
//   depth 3:      { "name": ..., "ts": ..., "args": {   <- event_depth_, args_depth_
//                    "correlation": 7, "Input Dims": [[...]]  <- skipped unbuilt
class TraceSax : public nlohmann::json_sax<json> {
 public:
  TraceSax(KinetoTrace& trace, const KeepEvent& keep) : trace_(trace), keep_(keep) {}

  ParseFailure& failure() { return failure_; }
  // Between two events of a bare array: where the Trace Event Format lets a file end
  // without its closing ']' (a tracer that was killed never writes it).
  bool between_array_events() const {
    return array_form_ && events_depth_ == 1 && depth_ == 1 && builder_.open() == false;
  }

  bool null() override { return scalar({.kind = Scalar::Kind::null}); }
  bool boolean(bool v) override {
    return scalar({.kind = Scalar::Kind::boolean, .integer = v ? 1 : 0});
  }
  bool number_integer(number_integer_t v) override {
    return scalar({.kind = Scalar::Kind::integer, .integer = v});
  }
  bool number_unsigned(number_unsigned_t v) override {
    return scalar({.kind = Scalar::Kind::unsigned_integer, .unsigned_integer = v});
  }
  bool number_float(number_float_t v, const string_t&) override {
    return scalar({.kind = Scalar::Kind::floating, .floating = v});
  }
  bool string(string_t& v) override { return scalar({.kind = Scalar::Kind::string, .string = &v}); }
  bool binary(binary_t&) override { return true; }

  bool key(string_t& k) override {
    if (!open_.add_key(k)) {
      failure_.field = open_.path();
      return fail("the key " + quote_input(k) +
                  " appears twice in this object; give each key once");
    }
    if (skip_depth_ > 0) return true;
    if (metadata_open_) {
      builder_.key(k);
    } else if (event_depth_ > 0 && depth_ == event_depth_) {
      key_ = event_key(k);
    } else if (args_depth_ > 0 && depth_ == args_depth_) {
      key_ = arg_key(k);
    } else if (depth_ == 1) {
      top_key_ = k;
    }
    return true;
  }

  bool start_object(std::size_t) override {
    if (!open_.open(/*object=*/true)) return too_deep();
    return start(/*object=*/true);
  }
  bool start_array(std::size_t) override {
    if (!open_.open(/*object=*/false)) return too_deep();
    return start(/*object=*/false);
  }
  // Each open level costs a frame: a trace nested millions deep would fill the memory.
  bool too_deep() {
    failure_.field = open_.path();
    return fail(
        fmt::format("values nested more than {} levels deep; a profiler trace nests a "
                    "few",
                    kMaxJsonDepth));
  }
  bool end_object() override {
    open_.close();
    return end();
  }
  bool end_array() override {
    open_.close();
    return end();
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    failure_.byte = position;
    describe_parser_message(e.what(), failure_);
    failure_.where = where();
    return false;
  }

 private:
  bool in_event() const { return event_depth_ > 0; }

  std::string event_path() const {
    return fmt::format("{}/{}", array_form_ ? "" : "/traceEvents", event_index_);
  }

  // What is open, for a message about where the input stopped.
  std::string where() const {
    if (in_event()) return fmt::format("the event {}", event_path());
    if (events_depth_ > 0 && depth_ >= events_depth_) {
      return fmt::format("the {} after {} events", array_form_ ? "array" : "traceEvents array",
                         event_index_);
    }
    if (depth_ >= 1 && !array_form_) return "the top-level object";
    return "";
  }

  bool fail(std::string reason) {
    failure_.reason = std::move(reason);
    return false;
  }

  bool scalar(const Scalar& v) {
    open_.value();
    if (skip_depth_ > 0) return true;
    if (metadata_open_) {
      builder_.value(to_json(v));
      return true;
    }
    if (in_event()) {
      if (depth_ == event_depth_) {
        event_field(v);
      } else if (depth_ == args_depth_) {
        arg_field(v);
      }
      return true;
    }
    if (events_depth_ > 0 && depth_ == events_depth_) {
      ++event_index_;  // a scalar among the events: nothing to read
      return true;
    }
    if (depth_ == 0) {
      return fail(
          "the top level is neither a JSON object ({\"traceEvents\": [...]}) nor an array of "
          "events");
    }
    if (depth_ == 1) {
      if (top_key_ == "traceEvents") return fail("\"traceEvents\" is not an array");
      trace_.metadata[top_key_] = to_json(v);
    }
    return true;
  }

  static json to_json(const Scalar& v) {
    switch (v.kind) {
      case Scalar::Kind::boolean:
        return v.integer != 0;
      case Scalar::Kind::integer:
        return v.integer;
      case Scalar::Kind::unsigned_integer:
        return v.unsigned_integer;
      case Scalar::Kind::floating:
        return v.floating;
      case Scalar::Kind::string:
        return *v.string;
      default:
        return nullptr;
    }
  }

  bool start(bool object) {
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    if (metadata_open_) {
      builder_.start(object ? json::object() : json::array());
      return true;
    }
    if (depth_ == 0) {
      ++depth_;
      if (!object) {  // the Trace Event Format's JSON Array Format
        array_form_ = true;
        begin_events();
      }
      return true;
    }
    if (in_event()) {
      // The args object is read; any other container inside an event is skipped, as is
      // everything nested in args (input shapes, concrete inputs).
      if (depth_ == event_depth_ && key_ == Key::args && object) {
        ++depth_;
        args_depth_ = depth_;
        current_.reset_args();
        return true;
      }
      if (depth_ == event_depth_) container_field();
      skip_depth_ = 1;
      return true;
    }
    if (events_depth_ > 0 && depth_ == events_depth_) {
      if (!object) {
        ++event_index_;
        skip_depth_ = 1;  // an array among the events: nothing to read
        return true;
      }
      ++depth_;
      event_depth_ = depth_;
      current_.reset();
      dropped_ = false;
      identity_ = 0;
      return true;
    }
    if (depth_ == 1 && !array_form_) {
      if (top_key_ == "traceEvents") {
        if (object) return fail("\"traceEvents\" is not an array");
        ++depth_;
        begin_events();
        return true;
      }
      if (top_key_ == "distributedInfo" || top_key_ == "deviceProperties") {
        metadata_open_ = true;
        builder_.reset();
        builder_.start(object ? json::object() : json::array());
        return true;
      }
    }
    skip_depth_ = 1;  // metadata the importer does not read
    return true;
  }

  bool end() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    if (metadata_open_) {
      builder_.end();
      if (!builder_.open()) {
        metadata_open_ = false;
        trace_.metadata[top_key_] = std::move(builder_.root());
      }
      return true;
    }
    if (args_depth_ > 0 && depth_ == args_depth_) {
      args_depth_ = 0;
    } else if (in_event() && depth_ == event_depth_) {
      finish_event();
      event_depth_ = 0;
      ++event_index_;
    } else if (events_depth_ > 0 && depth_ == events_depth_) {
      events_depth_ = 0;
    }
    --depth_;
    return true;
  }

  void begin_events() {
    events_depth_ = depth_;
    trace_.has_trace_events = true;
  }

  // A scalar directly in the event object. A key given twice counts as its last value,
  // as a JSON object would hold it.
  void event_field(const Scalar& v) {
    if (dropped_) return;
    EventInProgress& c = current_;
    KinetoEvent& e = c.event;
    switch (key_) {
      case Key::name:
        assign_text(c.name, v);
        break;
      case Key::cat:
        assign_text(c.cat, v);
        break;
      case Key::ph:
        assign_text(c.ph, v);
        break;
      case Key::pid:
        e.pid = v.kind == Scalar::Kind::string ? named_track_id(*v.string)
                                               : whole_number(v).value_or(-1);
        break;
      case Key::tid:
        e.tid = v.kind == Scalar::Kind::string ? named_track_id(*v.string)
                                               : whole_number(v).value_or(-1);
        break;
      case Key::ts:
        read_ts(v);
        break;
      case Key::dur:
        read_dur(v);
        break;
      case Key::id:
        e.flow_id = whole_number(v).value_or(-1);
        break;
      case Key::args:
        c.reset_args();  // args that are not an object hold nothing
        break;
      default:
        break;
    }
    // Once phase, category and name are known, an event the importer never reads is
    // skipped for the rest of its keys.
    if (key_ == Key::name || key_ == Key::cat || key_ == Key::ph) {
      identity_ |= 1u << static_cast<unsigned>(key_);
      constexpr unsigned kAll = (1u << static_cast<unsigned>(Key::name)) |
                                (1u << static_cast<unsigned>(Key::cat)) |
                                (1u << static_cast<unsigned>(Key::ph));
      if (identity_ == kAll && !wanted_event(c.ph, c.cat, c.name)) dropped_ = true;
    }
  }

  // Text fields hold only text: another value there reads as absent.
  static void assign_text(std::string& to, const Scalar& v) {
    if (v.kind == Scalar::Kind::string) {
      to.assign(*v.string);
    } else {
      to.clear();
    }
  }

  // A container where the event has a scalar field: that field is as good as absent.
  void container_field() {
    EventInProgress& c = current_;
    switch (key_) {
      case Key::name:
        c.name.clear();
        break;
      case Key::cat:
        c.cat.clear();
        break;
      case Key::ph:
        c.ph.clear();
        break;
      case Key::pid:
        c.event.pid = -1;
        break;
      case Key::tid:
        c.event.tid = -1;
        break;
      case Key::ts:
        c.has_ts = false;
        break;
      case Key::dur:
        c.time_is_unusable("dur is not a number");
        break;
      case Key::id:
        c.event.flow_id = -1;
        break;
      case Key::args:
        c.reset_args();
        break;
      default:
        break;
    }
  }

  void read_ts(const Scalar& v) {
    EventInProgress& c = current_;
    if (v.kind == Scalar::Kind::null || v.kind == Scalar::Kind::boolean) {
      c.has_ts = false;  // as good as absent
      return;
    }
    c.has_ts = true;
    const std::optional<double> ts = real_number(v);
    if (!ts) {
      c.time_is_unusable(fmt::format("ts {} is not a number", shown(v)));
    } else if (!(std::abs(*ts) <= kMaxTraceMicroseconds)) {
      c.time_is_unusable(fmt::format("ts {} µs is not a finite time within ±2^53 µs", shown(v)));
    } else {
      c.event.ts = *ts;
    }
  }

  void read_dur(const Scalar& v) {
    EventInProgress& c = current_;
    const std::optional<double> dur = real_number(v);
    if (!dur || std::isnan(*dur)) {
      c.time_is_unusable(fmt::format("dur {} is not a number", shown(v)));
    } else if (*dur < 0) {
      c.time_is_unusable(fmt::format("dur {} µs is negative", shown(v)));
    } else if (!(*dur <= kMaxEventMicroseconds)) {
      c.time_is_unusable(fmt::format("dur {} µs is longer than a day", shown(v)));
    } else {
      c.event.dur = *dur;
    }
  }

  // A whole number in [lo, hi] for `field`, or `absent` with the value set aside.
  int64_t bounded(const Scalar& v, std::string_view arg, int64_t lo, int64_t hi, int64_t absent,
                  std::string_view bound) {
    const std::optional<int64_t> n = whole_number(v);
    if (!n) {
      current_.set_aside_value(arg, fmt::format("{} is not a whole number", shown(v)));
      return absent;
    }
    if (*n < lo || *n > hi) {
      current_.set_aside_value(arg, fmt::format("{} is outside {}", *n, bound));
      return absent;
    }
    return *n;
  }

  // An id: any whole number (a negative one means none).
  int64_t id(const Scalar& v, std::string_view arg) {
    const std::optional<int64_t> n = whole_number(v);
    if (!n) current_.set_aside_value(arg, fmt::format("{} is not a whole number", shown(v)));
    return n.value_or(-1);
  }

  void arg_field(const Scalar& v) {
    if (dropped_) return;
    EventInProgress& c = current_;
    KinetoEvent& e = c.event;
    constexpr std::string_view kDeviceBytes = "[0, 2^44] (16 TiB, the largest GPU memory)";
    switch (key_) {
      case Key::correlation:
        e.correlation = id(v, "correlation");
        break;
      case Key::sequence:
        e.sequence = id(v, "Sequence number");
        break;
      case Key::stream:
        e.stream = id(v, "stream");
        break;
      case Key::device_type:
        e.device_type = id(v, "Device Type");
        break;
      case Key::collective:
        assign_text(c.collective, v);
        break;
      case Key::dtype:
        assign_text(c.dtype, v);
        break;
      case Key::in_elements:
        e.in_elements = bounded(v, "In msg nelems", 0, kMaxDeviceBytes, -1, kDeviceBytes);
        break;
      case Key::out_elements:
        e.out_elements = bounded(v, "Out msg nelems", 0, kMaxDeviceBytes, -1, kDeviceBytes);
        break;
      case Key::group_size:
        e.group_size = bounded(v, "Group size", 1, limits::kMaxGpus, -1,
                               "[1, 2^20] (GPUs in one job, models/limits.h)");
        break;
      case Key::bytes:
        // Negative for a free.
        e.bytes = bounded(v, "Bytes", -kMaxDeviceBytes, kMaxDeviceBytes, 0,
                          "[-2^44, 2^44] (16 TiB, the largest GPU memory)");
        break;
      case Key::total_allocated:
        e.total_allocated = bounded(v, "Total Allocated", 0, kMaxDeviceBytes, -1, kDeviceBytes);
        break;
      case Key::total_reserved:
        e.total_reserved = bounded(v, "Total Reserved", 0, kMaxDeviceBytes, -1, kDeviceBytes);
        break;
      default:
        break;
    }
  }

  // Counts `n` cases; the first of the trace is described.
  void note(SetAside& tally, const std::string& problem, int64_t n = 1) {
    if (tally.count == 0)
      tally.first = fmt::format("{} {}: {}", event_path(), quote_input(current_.name, 40), problem);
    tally.count += n;
  }

  void finish_event() {
    EventInProgress& c = current_;
    KinetoEvent& e = c.event;
    if (dropped_ || !wanted_event(c.ph, c.cat, c.name)) return;  // keys in an unusual order
    e.ph = c.ph.empty() ? '?' : c.ph[0];
    if (!c.time_problem.empty()) {
      note(trace_.events_without_time, c.time_problem);
      return;
    }
    if (!c.has_ts && (e.ph == 'X' || e.ph == 'i')) {
      note(trace_.events_without_time, "no ts");
      return;
    }
    // Sizes in range one by one may still describe more bytes than a GPU holds.
    const int64_t elements = std::max(e.in_elements, e.out_elements);
    if (const int64_t size = dtype_size(c.dtype);
        size > 0 && elements > 0 && elements > kMaxDeviceBytes / size) {
      c.set_aside_value("In/Out msg nelems",
                        fmt::format("{} × {} bytes ({}) is more than 16 TiB (2^44 bytes)", elements,
                                    size, quote_input(c.dtype, 16)));
      e.in_elements = e.out_elements = -1;
    }
    if (c.values_set_aside > 0)
      note(trace_.values_out_of_range, c.value_problem, c.values_set_aside);
    e.name = c.name;
    e.cat = c.cat;
    e.collective = c.collective;
    e.dtype = c.dtype;
    if (keep_ && !keep_(e)) return;
    e.name = trace_.intern(e.name);
    e.cat = trace_.intern(e.cat);
    e.collective = trace_.intern(e.collective);
    e.dtype = trace_.intern(e.dtype);
    trace_.events.push_back(e);
  }

  KinetoTrace& trace_;
  const KeepEvent& keep_;
  ParseFailure failure_;
  JsonContainers open_;
  int depth_ = 0;         // containers open, skipped ones and metadata values aside
  int events_depth_ = 0;  // the events array's depth while it is open
  int event_depth_ = 0;   // the open event's depth
  int args_depth_ = 0;    // its args object's depth while open
  int skip_depth_ = 0;    // containers open inside one being skipped unbuilt
  bool array_form_ = false;
  bool metadata_open_ = false;
  ValueBuilder builder_;
  std::string top_key_;
  Key key_ = Key::other;
  int64_t event_index_ = 0;
  EventInProgress current_;
  unsigned identity_ = 0;  // which of ph, cat and name the event has given (bits by Key)
  bool dropped_ = false;
};

}  // namespace

int64_t dtype_size(std::string_view dtype) {
  std::string d(dtype);
  std::transform(d.begin(), d.end(), d.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (d == "double" || d == "long" || d == "int64" || d == "float64") return 8;
  if (d == "float" || d == "int" || d == "float32" || d == "int32") return 4;
  if (d == "bfloat16" || d == "half" || d == "float16" || d == "short" || d == "bf16") return 2;
  if (d == "byte" || d == "char" || d == "bool" || d.rfind("float8", 0) == 0 || d == "uint8")
    return 1;
  return 0;
}

std::string_view KinetoTrace::intern(std::string_view text) {
  if (text.empty()) return {};
  auto it = strings.find(text);
  if (it == strings.end()) it = strings.emplace(text).first;
  return *it;
}

KinetoTrace read_kineto_trace(const std::string& path, const KinetoReadOptions& options) {
  GzStreamBuf buf(path, options.max_bytes);
  std::istream in(&buf);
  KinetoTrace trace;
  TraceSax sax(trace, options.keep);
  bool ok = json::sax_parse(in, &sax, nlohmann::detail::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/true);
  if (buf.over_limit()) {
    const std::string limit = options.max_bytes % (int64_t{1} << 30) == 0
                                  ? fmt::format("{} GiB", options.max_bytes >> 30)
                                  : fmt::format("{} bytes", options.max_bytes);
    throw InputError(path, "",
                     fmt::format("more than {} of JSON (decompressed), the limit on one trace "
                                 "(docs/formats.md, Limits): far larger than any profile a "
                                 "viewer opens, or an endless stream",
                                 limit));
  }
  if (!buf.zlib_error().empty()) {
    throw InputError(path, "",
                     fmt::format("not a valid gzip stream (zlib: {}) after {} decompressed "
                                 "bytes: the file is truncated or corrupt",
                                 buf.zlib_error(), buf.bytes_read()));
  }
  const ParseFailure& failure = sax.failure();
  const bool at_end = buf.at_end() && failure.byte >= static_cast<std::size_t>(buf.bytes_read());
  // The Trace Event Format lets a bare array of events end without its ']'.
  if (!ok && failure.reason.empty() && at_end && sax.between_array_events()) ok = true;
  if (!ok) {
    if (!failure.reason.empty()) throw InputError(path, failure.field, failure.reason);
    if (at_end) {
      const std::string line = failure.line_and_column.substr(0, failure.line_and_column.find(','));
      throw InputError(path, "",
                       failure.where.empty()
                           ? std::string("the file ends before any JSON value: it is empty")
                           : fmt::format("the file ends inside {} ({}, after {} bytes): "
                                         "truncated?",
                                         failure.where, line, buf.bytes_read()));
    }
    // nlohmann takes a NUL byte for the end of its input: binary data (/dev/zero, a
    // sparse file), not the end of the file.
    if (failure.parser_message.find("unexpected end of input") != std::string::npos) {
      throw InputError(path, "",
                       fmt::format("a NUL byte at {} (byte {}): binary data, not JSON text",
                                   failure.line_and_column, failure.byte));
    }
    throw InputError(
        path, "",
        fmt::format("not valid JSON {}(byte {}{}): {}",
                    failure.line_and_column.empty() ? "" : "at " + failure.line_and_column + " ",
                    failure.byte, failure.where.empty() ? "" : ", in " + failure.where,
                    failure.parser_message));
  }
  if (!trace.has_trace_events) {
    throw InputError(path, "traceEvents",
                     "missing: not a Chrome trace (PyTorch profiler export_chrome_trace)");
  }
  return trace;
}

bool can_read_twice(const std::string& path) {
  // stat, not open: opening a FIFO would wait for a writer.
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string read_file_prefix(const std::string& path, std::size_t max_bytes) {
  GzStreamBuf buf(path, kMaxTraceBytes);
  std::string text;
  text.reserve(max_bytes);
  for (auto c = buf.sbumpc(); c != std::char_traits<char>::eof() && text.size() < max_bytes;
       c = buf.sbumpc()) {
    text.push_back(static_cast<char>(c));
  }
  if (!buf.zlib_error().empty()) {
    throw InputError(path, "",
                     fmt::format("not a valid gzip stream (zlib: {}): the file is truncated or "
                                 "corrupt",
                                 buf.zlib_error()));
  }
  return text;
}

}  // namespace shardplan
