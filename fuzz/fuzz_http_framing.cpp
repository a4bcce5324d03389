// libFuzzer target for the server's request framing (src/http/request_framing.hpp): any bytes,
// fed in pieces whose sizes the input's first byte picks, as a connection's reads bring them. The
// framing must agree with itself: a request found whole stays whole as more bytes come, and the
// same bytes read at once are whole exactly when the pieces ended whole. It never reads past what
// it was given (ASan) and never asks for more than a head and a body's bound (it would hold a
// connection's memory unbounded).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/request_framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr std::size_t kMaxBody = 4096;  // small, so the fuzzer reaches the bound
  // One path may bring a larger body (as /api/snapshot does); the fuzzer finds it in the request line.
  constexpr std::string_view kLargePath = "/big";
  constexpr std::size_t kLargeBody = 3 * kMaxBody;
  trainfit::detail::RequestFraming pieces(kMaxBody, kLargePath, kLargeBody);
  std::string so_far;
  bool whole = false;
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    so_far.append(bytes.substr(at, piece));
    const bool now = pieces.whole(so_far);
    if (whole && !now) __builtin_trap();  // whole, then not
    whole = now;
    if (whole) break;
  }
  // Whole before a head and a body's bound and their framing's lines: a connection's memory is bounded.
  if (!whole && so_far.size() > trainfit::detail::kMaxHeadBytes + 2 * kLargeBody + 64) __builtin_trap();
  trainfit::detail::RequestFraming at_once(kMaxBody, kLargePath, kLargeBody);
  if (at_once.whole(so_far) != whole) __builtin_trap();
  return 0;
}
