#include "trace/json_stream.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "trainfit/error.hpp"

namespace trainfit::trace::detail {

namespace {

constexpr std::size_t kMaxPieceBytes = std::size_t{256} << 20;  // one event or member: far past any real one

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// The bytes the structural scan stops at outside strings; everything else is skipped in a tight loop.
constexpr std::array<bool, 256> structural_table() {
  std::array<bool, 256> t{};
  for (const char c : {'"', '{', '}', '[', ']'}) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> kStructural = structural_table();

}  // namespace

// zlib's inflate over the raw bytes; windowBits 15 + 32 reads gzip and zlib headers alike.
struct ChunkReader::Inflater {
  z_stream stream{};
  bool ended = false;  // the last gzip member ended
  Inflater() {
    if (inflateInit2(&stream, 15 + 32) != Z_OK) throw SystemError("cannot start zlib's inflate");
  }
  ~Inflater() { inflateEnd(&stream); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

ChunkReader::ChunkReader(const std::string& path, std::size_t chunk_bytes) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(fmt::format("cannot read trace '{}': {}", path, std::strerror(errno)));
  in_.resize(chunk_bytes);
  out_.resize(chunk_bytes);
  const std::size_t got = read_raw(in_.data(), 2);
  gzip_ = got == 2 && static_cast<unsigned char>(in_[0]) == 0x1f && static_cast<unsigned char>(in_[1]) == 0x8b;
  if (gzip_) {
    inflater_ = std::make_unique<Inflater>();
    inflater_->stream.next_in = reinterpret_cast<Bytef*>(in_.data());
    inflater_->stream.avail_in = static_cast<uInt>(got);
  } else {
    // The two bytes read are the first of the text: the first chunk starts with them.
    out_.replace(0, got, in_.data(), got);
    pending_head_ = got;
  }
}

ChunkReader::~ChunkReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t ChunkReader::read_raw(char* into, std::size_t capacity) {
  std::size_t total = 0;
  while (total < capacity) {
    const ssize_t n = ::read(fd_, into + total, capacity - total);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError(fmt::format("cannot read trace '{}': {}", path_, std::strerror(errno)));
    }
    if (n == 0) {
      eof_ = true;
      break;
    }
    total += static_cast<std::size_t>(n);
  }
  return total;
}

std::string_view ChunkReader::next() {
  if (!gzip_) {
    const std::size_t head = pending_head_;
    pending_head_ = 0;
    if (eof_ && head == 0) return {};
    const std::size_t got = eof_ ? 0 : read_raw(out_.data() + head, out_.size() - head);
    return {out_.data(), head + got};
  }
  z_stream& z = inflater_->stream;
  z.next_out = reinterpret_cast<Bytef*>(out_.data());
  z.avail_out = static_cast<uInt>(out_.size());
  while (z.avail_out > 0) {
    if (z.avail_in == 0) {
      if (eof_) break;
      const std::size_t got = read_raw(in_.data(), in_.size());
      if (got == 0) break;
      z.next_in = reinterpret_cast<Bytef*>(in_.data());
      z.avail_in = static_cast<uInt>(got);
    }
    inflater_->ended = false;
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      inflater_->ended = true;
      // gzip allows members one after another (cat a.gz b.gz); go on with the next.
      if (z.avail_in == 0 && eof_) break;
      if (inflateReset(&z) != Z_OK) throw SystemError("zlib's inflateReset failed");
      continue;
    }
    if (rc == Z_BUF_ERROR) continue;  // more input needed: the loop reads it
    if (rc != Z_OK) throw InputError(fmt::format("corrupt gzip stream ({})", z.msg ? z.msg : "inflate failed"));
  }
  const std::size_t produced = out_.size() - z.avail_out;
  if (produced == 0 && eof_ && z.avail_in == 0 && !inflater_->ended) truncated_ = true;
  return {out_.data(), produced};
}

TraceSplitter::TraceSplitter(EventSink on_event, MemberSink on_member, std::size_t max_member_bytes)
    : on_event_(std::move(on_event)), on_member_(std::move(on_member)), max_member_bytes_(max_member_bytes) {}

void TraceSplitter::fail(std::string_view what, std::uint64_t at) const {
  throw InputError(fmt::format("not a trace: {} at byte {}", what, at));
}

std::size_t TraceSplitter::scan_value(std::string_view text, std::size_t i) {
  const std::size_t n = text.size();
  const char* data = text.data();
  while (i < n) {
    if (in_string_) {
      if (escape_) {
        escape_ = false;
        ++i;
        continue;
      }
      while (i < n && data[i] != '"' && data[i] != '\\') ++i;
      if (i == n) break;
      if (data[i] == '\\') {
        escape_ = true;
        ++i;
        continue;
      }
      in_string_ = false;
      ++i;
      if (depth_ == 0) return i;  // a string value ended
      continue;
    }
    while (i < n && !kStructural[static_cast<unsigned char>(data[i])]) ++i;
    if (i == n) break;
    switch (data[i]) {
      case '"':
        in_string_ = true;
        break;
      case '{':
      case '[':
        ++depth_;
        break;
      default:  // '}' or ']'
        if (--depth_ == 0) return i + 1;
        if (depth_ < 0) fail("unbalanced brackets", offset_ + i);
        break;
    }
    ++i;
  }
  return std::string_view::npos;
}

void TraceSplitter::feed(std::string_view text) {
  const std::size_t n = text.size();
  std::size_t i = 0;
  // Where the piece in progress starts in this chunk (0 when it began in an earlier one).
  std::size_t piece_start = 0;
  while (i < n) {
    const char c = text[i];
    switch (state_) {
      case State::start:
        if (is_space(c)) {
          ++i;
        } else if (c == '{') {
          state_ = State::object_key;
          ++i;
        } else if (c == '[') {
          bare_array_ = saw_events_ = true;
          state_ = State::events_next;
          ++i;
        } else {
          fail("expected a JSON object or array", offset_ + i);
        }
        break;
      case State::object_key:
        if (is_space(c) || c == ',') {
          ++i;
        } else if (c == '"') {
          key_.clear();
          escape_ = false;
          state_ = State::key;
          ++i;
        } else if (c == '}') {
          state_ = State::done;
          ++i;
        } else {
          fail("expected a key of the top-level object", offset_ + i);
        }
        break;
      case State::key:
        if (escape_) {
          key_ += c;
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          state_ = State::colon;
        } else {
          key_ += c;
        }
        if (key_.size() > 4096) fail("a key longer than 4096 bytes", offset_ + i);
        ++i;
        break;
      case State::colon:
        if (is_space(c)) {
          ++i;
        } else if (c == ':') {
          state_ = State::value_start;
          ++i;
        } else {
          fail("expected ':' after a key", offset_ + i);
        }
        break;
      case State::value_start:
        if (is_space(c)) {
          ++i;
        } else if (key_ == "traceEvents" && c == '[') {
          saw_events_ = true;
          state_ = State::events_next;
          ++i;
        } else {
          state_ = State::member_value;
          pending_.clear();
          pending_overflow_ = false;
          depth_ = 0;
          in_string_ = escape_ = false;
          piece_start = i;
          member_scalar_ = c != '{' && c != '[' && c != '"';
        }
        break;
      case State::member_value: {
        std::size_t end = std::string_view::npos;
        if (member_scalar_) {
          std::size_t j = i;
          while (j < n && text[j] != ',' && text[j] != '}' && !is_space(text[j])) ++j;
          if (j < n) end = j;
        } else {
          end = scan_value(text, i);
        }
        const std::size_t stop = end == std::string_view::npos ? n : end;
        if (!pending_overflow_) {
          if (pending_.size() + (stop - piece_start) > max_member_bytes_) {
            pending_overflow_ = true;
            pending_.clear();
            pending_.shrink_to_fit();
          } else {
            pending_.append(text.substr(piece_start, stop - piece_start));
          }
        }
        if (end == std::string_view::npos) {
          i = n;
          break;
        }
        if (pending_overflow_)
          ++skipped_members_;
        else
          on_member_(key_, pending_);
        pending_.clear();
        state_ = State::object_key;
        i = end;
        break;
      }
      case State::events_next:
        if (is_space(c) || c == ',') {
          ++i;
        } else if (c == '{') {
          // The scan starts at the brace itself, so that an event always begins in the chunk that
          // holds its first byte (and is carried over whole when it goes on past the chunk).
          state_ = State::event;
          depth_ = 0;
          in_string_ = escape_ = false;
          pending_.clear();
          piece_start = i;
        } else if (c == ']') {
          state_ = bare_array_ ? State::done : State::object_key;
          ++i;
        } else {
          fail("expected an event object in traceEvents", offset_ + i);
        }
        break;
      case State::event: {
        const std::size_t end = scan_value(text, i);
        if (end == std::string_view::npos) {
          pending_.append(text.substr(piece_start));
          if (pending_.size() > kMaxPieceBytes) fail("an event larger than 256 MiB", offset_ + n);
          i = n;
          break;
        }
        std::string_view event = text.substr(piece_start, end - piece_start);
        if (!pending_.empty()) {
          pending_.append(event);
          event = pending_;
        }
        max_event_bytes_ = std::max(max_event_bytes_, event.size());
        on_event_(event);
        pending_.clear();
        state_ = State::events_next;
        i = end;
        break;
      }
      case State::done:
        i = n;  // what follows the top-level value is ignored
        break;
    }
  }
  offset_ += n;
}

}  // namespace trainfit::trace::detail
