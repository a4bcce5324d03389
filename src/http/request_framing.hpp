#pragma once
// Where an HTTP/1.1 request ends, found as its bytes arrive (bounded_server.cpp reads a connection
// without a worker until its request is whole). Header-only: the server module and its fuzz target
// (fuzz/fuzz_http_framing.cpp) both include it.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <string_view>
#include <system_error>

namespace trainfit::detail {

// A request's head past this is handed to httplib as it is, which refuses it (its own limits on a
// line and a header are 8 KiB): the framing below only has to find where a request ends.
inline constexpr std::size_t kMaxHeadBytes = 64 * 1024;
// A body's bound when the server sets none (the /metrics server takes GETs only).
inline constexpr std::size_t kDefaultMaxBodyBytes = 1024 * 1024;

// Where a request ends, found as its bytes arrive, so that a worker gets only whole requests and a
// client that trickles its bytes holds no worker (the server's I/O loop waits for it). Only HTTP/1.1's
// framing (RFC 9112, section 6.3: the head to its empty line, then Content-Length bytes or chunks
// to the last one); httplib parses the request itself once it is whole. Whatever the framing cannot
// read (a head or a body past its bound, a length that is not a number) is whole as it is: httplib
// answers it (400, 413, 414) from the bytes that came.
class RequestFraming {
 public:
  // A request whose target's path is `large_path` (a file posted whole, e.g. a memory snapshot) may
  // bring up to `large_max_body` bytes; every other request up to `max_body`.
  explicit RequestFraming(std::size_t max_body, std::string_view large_path = {}, std::size_t large_max_body = 0)
      : max_body_(max_body), large_path_(large_path), large_max_body_(large_max_body) {}

  // Whether `bytes` (everything read so far) hold the whole request.
  bool whole(std::string_view bytes) {
    if (!done_) done_ = ends_in(bytes);
    return done_;
  }
  // The head is read and asks to be told to send its body (Expect: 100-continue).
  bool expects_continue() const { return head_done_ && expects_continue_; }
  // The body is past its path's bound: whole as far as it came, to be answered 413 unread. The
  // server answers it itself: httplib's own bound is the largest path's.
  bool too_large() const { return too_large_; }

 private:
  static bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  }

  static std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
  }

  bool ends_in(std::string_view bytes) {
    if (!head_done_ && !read_head(bytes)) return false;
    if (cut_) return true;
    if (!chunked_) {
      too_large_ = content_length_ > max_body_;
      return too_large_ || bytes.size() - body_start_ >= content_length_;
    }
    return read_chunks(bytes);
  }

  bool read_head(std::string_view bytes) {
    for (;;) {
      const std::size_t eol = bytes.find('\n', scan_);
      if (eol == std::string_view::npos) {
        if (bytes.size() > kMaxHeadBytes) head_done_ = cut_ = true;
        return head_done_;
      }
      const std::string_view line = trimmed(bytes.substr(scan_, eol - scan_));
      const bool request_line = scan_ == 0;
      scan_ = eol + 1;
      if (line.empty() && !request_line) {
        head_done_ = true;
        body_start_ = scan_;
        chunk_ = scan_;
        return true;
      }
      if (request_line)
        target(line);
      else
        header(line);
      if (scan_ > kMaxHeadBytes) return head_done_ = cut_ = true;
    }
  }

  // "POST /api/snapshot?x=1 HTTP/1.1": the path picks the body's bound.
  void target(std::string_view line) {
    if (large_path_.empty()) return;
    const std::size_t start = line.find(' ');
    if (start == std::string_view::npos) return;
    std::string_view path = line.substr(start + 1);
    path = path.substr(0, std::min(path.find(' '), path.find('?')));
    if (path == large_path_) max_body_ = std::max(max_body_, large_max_body_);
  }

  void header(std::string_view line) {
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return;
    const std::string_view name = trimmed(line.substr(0, colon)), value = trimmed(line.substr(colon + 1));
    if (iequals(name, "content-length")) {
      std::size_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc{} || end != value.data() + value.size()) cut_ = true;  // httplib's 400
      content_length_ = n;
    } else if (iequals(name, "transfer-encoding")) {
      // The last coding is chunked (RFC 9112, 6.3), in any case: "gzip, Chunked".
      chunked_ = value.size() >= 7 && iequals(value.substr(value.size() - 7), "chunked");
    } else if (iequals(name, "expect")) {
      expects_continue_ = iequals(value, "100-continue");
    }
  }

  // Chunks: a hexadecimal size line, that many bytes and a line end; the last is size 0, then
  // trailer lines to an empty one.
  bool read_chunks(std::string_view bytes) {
    for (;;) {
      if (chunk_ - body_start_ > max_body_) return too_large_ = true;
      const std::size_t eol = bytes.find('\n', chunk_);
      if (eol == std::string_view::npos) return too_large_ = bytes.size() - body_start_ > max_body_;
      const std::string_view line = trimmed(bytes.substr(chunk_, eol - chunk_));
      if (in_trailer_) {
        chunk_ = eol + 1;
        if (line.empty()) return true;
        continue;
      }
      std::size_t size = 0;
      const std::string_view digits = line.substr(0, line.find(';'));
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
      if (ec != std::errc{} || digits.empty()) return true;  // httplib's 400
      if (size == 0) {
        in_trailer_ = true;
        chunk_ = eol + 1;
        continue;
      }
      if (size > max_body_) return true;
      const std::size_t next = eol + 1 + size;
      if (bytes.size() < next + 1) return false;
      // The data's line end: CRLF (or a bare LF, as httplib's reader takes).
      const std::size_t after = bytes[next] == '\r' ? next + 1 : next;
      if (bytes.size() <= after) return false;
      chunk_ = after + 1;
    }
  }

  std::size_t max_body_;
  std::string_view large_path_;  // the server's, which outlives every connection
  std::size_t large_max_body_;
  std::size_t scan_ = 0;  // the start of the head's next line
  std::size_t body_start_ = 0;
  std::size_t chunk_ = 0;  // the start of the next chunk's size line
  std::size_t content_length_ = 0;
  bool head_done_ = false, chunked_ = false, in_trailer_ = false, expects_continue_ = false;
  bool too_large_ = false;
  bool cut_ = false;   // whole as it is: past a bound, or not framed as HTTP
  bool done_ = false;  // whole: what was read is the request
};

}  // namespace trainfit::detail
