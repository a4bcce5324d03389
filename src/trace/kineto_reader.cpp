// Reading a Kineto trace: the splitter (json_stream.hpp) cuts the stream into events, which are
// gathered into batches ("[e1,e2,...]" in one reused padded buffer) and parsed with simdjson's
// on-demand API, one document a batch (its structural index is built by the SIMD kernel the CPU
// has, chosen at run time). A batch with a malformed event is parsed again event by
// event, so only the bad event is skipped (and counted).
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "trace/json_stream.hpp"
#include "trace/trace_data.hpp"
#include "trainfit/error.hpp"

namespace trainfit::trace {

std::string_view to_string(KernelCategory c) {
  switch (c) {
    case KernelCategory::matmul:
      return "matmul";
    case KernelCategory::attention:
      return "attention";
    case KernelCategory::elementwise:
      return "elementwise";
    case KernelCategory::optimizer:
      return "optimizer";
    case KernelCategory::communication:
      return "communication";
    case KernelCategory::copy_h2d:
      return "copy_h2d";
    case KernelCategory::copy_d2h:
      return "copy_d2h";
    case KernelCategory::copy_d2d:
      return "copy_d2d";
  }
  return "elementwise";
}

namespace {

// Case-insensitive search for lower-case needles: the text is folded once (std::tolower, byte by
// byte), then searched. Kernel names run to hundreds of bytes and are tried against twenty needles.
class FoldedText {
 public:
  explicit FoldedText(std::string_view text) : text_(text.size(), '\0') {
    std::transform(text.begin(), text.end(), text_.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  }
  bool contains(std::string_view lower_needle) const { return text_.find(lower_needle) != std::string::npos; }
  std::string_view text() const { return text_; }
  bool contains_any(std::initializer_list<std::string_view> needles) const {
    return std::any_of(needles.begin(), needles.end(), [&](std::string_view n) { return contains(n); });
  }
  // Every occurrence of `lower_needle` made spaces, so that the rules no longer see it.
  void blank(std::string_view lower_needle) {
    for (std::size_t at = text_.find(lower_needle); at != std::string::npos; at = text_.find(lower_needle, at))
      text_.replace(at, lower_needle.size(), lower_needle.size(), ' ');
  }

 private:
  std::string text_;
};

}  // namespace

KernelCategory classify_activity(std::string_view name, std::string_view cat) {
  const FoldedText folded_cat(cat);
  if (folded_cat.contains("memcpy") || name.starts_with("Memcpy")) {
    const FoldedText folded(name);
    if (folded.contains("htod")) return KernelCategory::copy_h2d;
    if (folded.contains("dtoh")) return KernelCategory::copy_d2h;
    return KernelCategory::copy_d2d;
  }
  if (folded_cat.contains("memset") || name.starts_with("Memset")) return KernelCategory::copy_d2d;
  FoldedText folded(name);
  // FBGEMM's name (its namespace fbgemm_gpu::, in a kernel's or its template arguments') says
  // nothing of the kernel: its embedding lookups and permutes are no matrix multiplies.
  folded.blank("fbgemm");
  // Order matters: NCCL's kernels carry "reduce" and flash attention's carry "gemm"-like names.
  if (folded.contains("nccl")) return KernelCategory::communication;
  if (folded.contains_any({"flash", "fmha", "attention", "attn", "sdpa"})) return KernelCategory::attention;
  // Not "lamb" alone: every kernel of a C++ lambda ("{lambda(float)#1}", PyTorch's copies and casts) has it.
  if (folded.contains_any({"multi_tensor_apply", "adam", "optimizer", "sgd_", "lamb_", "lambstage", "adagrad"}))
    return KernelCategory::optimizer;
  // cijk_: the GEMMs of ROCm's Tensile (rocBLAS, hipBLASLt), named by their index order (Cijk_Alik_Bljk).
  if (folded.contains_any({"gemm", "xmma", "cutlass", "cublas", "nvjet", "matmul", "gemv", "wgmma", "splitk"}) ||
      folded.text().starts_with("cijk_"))
    return KernelCategory::matmul;
  // cuDNN's convolutions are matrix multiplies (implicit GEMM, Winograd) under names of their own:
  // scudnn and s884cudnn/h1688cudnn/s16816cudnn (its FP32 and tensor-core kernels), its data and
  // weight gradients' engines. Not "conv" alone (every cast is a "convert"), nor its layout
  // transforms and batch norms, which are cudnn:: kernels too.
  if (folded.contains_any(
          {"convolve", "dgrad", "wgrad", "winograd", "scudnn", "884cudnn", "1688cudnn", "16816cudnn", "8816cudnn"}))
    return KernelCategory::matmul;
  return KernelCategory::elementwise;
}

namespace detail {

namespace {

// How many of eight bytes (in memory order, little-endian) are digits before the first that is
// not. The first byte that is not a digit is found exactly (a carry out of a byte of 0xfa and up
// can only spoil the byte after it).
int leading_digits(std::uint64_t v) {
  const std::uint64_t not_digit = ((v & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL) |
                                  (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL);
  return not_digit == 0 ? 8 : __builtin_ctzll(not_digit) / 8;
}

// The value of eight digits, by multiplying pairs, then pairs of pairs (the way simdjson and
// fast_float read them).
std::uint32_t parse_eight_digits(std::uint64_t v) {
  v -= 0x3030303030303030ULL;
  v = (v * 10) + (v >> 8);
  v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
       (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
      32;
  return static_cast<std::uint32_t>(v);
}

// The value of the first n (1 to 8) digits of eight bytes: the others shifted out, zeros in front.
std::uint32_t leading_value(std::uint64_t v, int n) {
  if (n < 8) v = (v << (8 * (8 - n))) | (0x3030303030303030ULL >> (8 * n));
  return parse_eight_digits(v);
}

constexpr std::array<std::int64_t, 9> kPowersOf10 = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

std::uint64_t load8(const char* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

// microseconds_to_ns on [p, end), where the bytes up to readable_end may be read: eight digits at a
// time, however many there are (a loop of one digit at a time stops at a different digit each
// field, and its mispredicted ends were most of this function's time).
bool micros_to_ns(const char* p, const char* const end, const char* const readable_end, std::int64_t& ns) {
  const char* const token = p;
  const bool negative = *p == '-';
  if (negative) ++p;
  const auto digit = [](char c) { return static_cast<unsigned>(c - '0') < 10; };
  constexpr bool kSwar = std::endian::native == std::endian::little;
  const char* const whole = p;
  std::int64_t us = 0;
  for (int round = 0; kSwar && round < 2 && readable_end - p >= 8; ++round) {
    const int n = std::min<int>(leading_digits(load8(p)), static_cast<int>(end - p));
    if (n == 0) break;
    us = us * kPowersOf10[static_cast<std::size_t>(n)] + leading_value(load8(p), n);
    p += n;
    if (n < 8) break;
  }
  while (p < end && digit(*p) && p - whole < 16) us = us * 10 + (*p++ - '0');
  const bool whole_ok = p > whole && (p == end || !digit(*p));
  std::int64_t frac_ns = 0;
  int frac_digits = 0;
  if (whole_ok && p < end && *p == '.') {
    ++p;
    if (kSwar && readable_end - p >= 8) {
      const int n = std::min<int>(leading_digits(load8(p)), static_cast<int>(end - p));
      frac_digits = std::min(n, 3);
      if (frac_digits > 0) frac_ns = leading_value(load8(p), frac_digits);
      p += n;
    }
    for (; p < end && digit(*p); ++p)
      if (frac_digits < 3) {
        frac_ns = frac_ns * 10 + (*p - '0');
        ++frac_digits;
      }
  }
  if (whole_ok && p == end) {
    if (us > INT64_MAX / 1000 - 1) return false;  // past the year 2262 in nanoseconds
    ns = us * 1000 + frac_ns * kPowersOf10[static_cast<std::size_t>(3 - frac_digits)];
    if (negative) ns = -ns;
    return true;
  }
  // Anything else JSON allows (exponents, longer numbers): through a double.
  double value = 0;
  const auto [stop, ec] = std::from_chars(token, end, value);
  if (ec != std::errc() || stop != end || !std::isfinite(value) || std::fabs(value) > 9.2e15) return false;
  ns = static_cast<std::int64_t>(std::llround(value * 1000.0));
  return true;
}

}  // namespace

bool microseconds_to_ns(std::string_view token, std::int64_t& ns, std::size_t readable_after) {
  const char* const readable_end = token.data() + token.size() + readable_after;
  while (!token.empty() &&
         (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' || token.back() == '\t'))
    token.remove_suffix(1);
  if (token.empty()) return false;
  // Plain decimals exactly, digits beyond the nanosecond dropped: epoch timestamps with three
  // decimals have 19 digits, too many for a double to hold exactly.
  return micros_to_ns(token.data(), token.data() + token.size(), readable_end, ns);
}

namespace {

namespace dom = simdjson::dom;
namespace od = simdjson::ondemand;

constexpr std::size_t kBatchBytes = 256 << 10;

// One event's fields, as views into the parser's buffers (valid until the next parse).
struct EventFields {
  std::string_view ph, cat, name;
  std::int64_t ts = 0, dur = -1;
  bool has_ts = false;
  std::int64_t pid = -1;
  std::int64_t device = -1;
};

bool is_gpu_category(std::string_view cat) {
  return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Kernel" || cat == "Memcpy" ||
         cat == "Memset";
}

bool is_launch(std::string_view name) {
  return name.starts_with("cudaLaunchKernel") || name.starts_with("cuLaunchKernel") ||
         name == "cudaLaunchCooperativeKernel" || name == "cudaGraphLaunch";
}

// Host calls that return only when the GPU (or one stream of it) has finished: an explicit
// synchronise, a blocking copy, or reading a GPU scalar on the host (`.item()`).
// cudaMemcpyAsync too: from pageable host memory CUDA makes it wait for the stream (a batch not
// pinned: 40 ms of a V100 ResNet-50 step in Kineto's tb_plugin sample); from pinned memory it
// returns at once, and overlaps no idle time worth the name.
bool is_synchronisation(std::string_view name) {
  return name.find("Synchronize") != std::string_view::npos || name == "cudaMemcpy" || name == "cudaMemcpyAsync" ||
         name == "aten::item" || name == "aten::_local_scalar_dense";
}

// PyTorch's profiler names the data loader's fetch "enumerate(DataLoader)#_...Iter.__next__".
bool is_data_loader_wait(std::string_view name) {
  return name.starts_with("enumerate(DataLoader)") ||
         (name.find("DataLoader") != std::string_view::npos && name.find("__next__") != std::string_view::npos);
}

bool is_json_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// An integer as simdjson's get_int64 takes it (no leading zero, no fraction); false otherwise.
bool plain_int64(std::string_view token, std::int64_t& value) {
  const std::size_t digits_at = !token.empty() && token.front() == '-' ? 1 : 0;
  if (token.size() <= digits_at || (token[digits_at] == '0' && token.size() > digits_at + 1)) return false;
  const auto [stop, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc() && stop == token.data() + token.size();
}

// Byte classes for the fast path's scans. Spaces: JSON's four. Stops: where a scalar's text ends.
constexpr std::uint8_t kSpaceByte = 1, kStopByte = 2;
constexpr std::array<std::uint8_t, 256> byte_classes() {
  std::array<std::uint8_t, 256> t{};
  for (const char c : {' ', '\n', '\r', '\t'}) t[static_cast<unsigned char>(c)] = kSpaceByte | kStopByte;
  for (const char c : {',', '}', ']'}) t[static_cast<unsigned char>(c)] = kStopByte;
  return t;
}
constexpr std::array<std::uint8_t, 256> kByteClass = byte_classes();

// The fields the fast path reads (and "other": stepped over).
enum class EventField { ph, cat, name, ts, dur, pid, args, other };

// The keys of an "X" event as Kineto writes them, in its order, each with its colon: when the text
// holds the one expected next, it is matched by one compare of eight bytes (no scan for its closing
// quote, no lookup of the name).
struct KnownKey {
  std::uint64_t bytes = 0, mask = 0;
  std::size_t length = 0;
  EventField field = EventField::other;
};

constexpr KnownKey known_key_of(std::string_view text, EventField field) {
  KnownKey k{0, 0, text.size(), field};
  for (std::size_t i = 0; i < text.size(); ++i) {
    k.bytes |= std::uint64_t{static_cast<unsigned char>(text[i])} << (8 * i);
    k.mask |= std::uint64_t{0xFF} << (8 * i);
  }
  return k;
}

// Two orders: a complete event's ("X": ph, cat, name, pid, tid, ts, dur, args), then a flow
// event's ("s", "f": ph, id, pid, tid, ts, cat, name, bp), a third of a real trace's events. When
// the text does not hold the key expected next, the table is searched for the one it holds, and
// the order goes on from there.
constexpr std::array<KnownKey, 16> kKinetoKeys = {
    known_key_of("\"ph\":", EventField::ph),     known_key_of("\"cat\":", EventField::cat),
    known_key_of("\"name\":", EventField::name), known_key_of("\"pid\":", EventField::pid),
    known_key_of("\"tid\":", EventField::other), known_key_of("\"ts\":", EventField::ts),
    known_key_of("\"dur\":", EventField::dur),   known_key_of("\"args\":", EventField::args),
    known_key_of("\"ph\":", EventField::ph),     known_key_of("\"id\":", EventField::other),
    known_key_of("\"pid\":", EventField::pid),   known_key_of("\"tid\":", EventField::other),
    known_key_of("\"ts\":", EventField::ts),     known_key_of("\"cat\":", EventField::cat),
    known_key_of("\"name\":", EventField::name), known_key_of("\"bp\":", EventField::other)};

// A run of bytes of Kineto's layout (a key with the separator and spaces around it), up to 16,
// compared eight bytes at a time.
struct Literal {
  std::array<std::uint64_t, 2> bytes{}, mask{};
  std::size_t size = 0;
};

constexpr Literal literal(std::string_view text) {
  Literal l;
  l.size = text.size();
  for (std::size_t i = 0; i < text.size() && i < 16; ++i) {
    l.bytes[i / 8] |= std::uint64_t{static_cast<unsigned char>(text[i])} << (8 * (i % 8));
    l.mask[i / 8] |= std::uint64_t{0xFF} << (8 * (i % 8));
  }
  return l;
}

// What libkineto's ChromeTraceLogger writes between the values of its events.
// Kineto breaks its events' lines before "ph", "ts", "args" (an "X") and "cat" (a flow event); the
// same keys on one line (what the tests' synthetic traces write) are read the same way.
constexpr Literal kPhLine = literal("\n    \"ph\": "), kPh = literal("\"ph\": "), kCat = literal(", \"cat\": "),
                  kName = literal(", \"name\": "), kPid = literal(", \"pid\": "), kTid = literal(", \"tid\": "),
                  kTsLine = literal(",\n    \"ts\": "), kDur = literal(", \"dur\": "),
                  kArgsLine = literal(",\n    \"args\": "), kId = literal(", \"id\": "), kTs = literal(", \"ts\": "),
                  kCatLine = literal(",\n    \"cat\": "), kBp = literal(", \"bp\": "), kArgs = literal(", \"args\": ");

// One bit for each of the 64 bytes from p that a number's text can hold: digits, '.', '-'
// (exponents and the rest go to the slower steps); `digits` and `dots` get those bytes' bits.
// SSE2 on x86-64, AVX-512 where the CPU has it (the splitter's width says: see EventReader), and
// eight bytes a word elsewhere.
using NumberBytes = std::uint64_t (*)(const char* p, std::uint64_t& digits, std::uint64_t& dots);

std::uint64_t number_bytes_portable(const char* p, std::uint64_t& digits, std::uint64_t& dots) {
#if defined(__SSE2__)
  const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9), dot = _mm_set1_epi8('.'),
                minus = _mm_set1_epi8('-');
  std::uint64_t number = 0;
  digits = dots = 0;
  const auto bits = [](__m128i m, int k) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm_movemask_epi8(m))) << (16 * k);
  };
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + std::ptrdiff_t{16} * k));
    const __m128i d = _mm_sub_epi8(v, zero);
    const __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d);  // v - '0' from 0 to 9, unsigned
    const __m128i is_dot = _mm_cmpeq_epi8(v, dot);
    digits |= bits(is_digit, k);
    dots |= bits(is_dot, k);
    number |= bits(_mm_or_si128(_mm_or_si128(is_digit, is_dot), _mm_cmpeq_epi8(v, minus)), k);
  }
  return number;
#else
  // Byte k of a word has its top bit set where the byte is zero (exactly: no carry crosses bytes).
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL, kLow7 = 0x7F7F7F7F7F7F7F7FULL, kTop = 0x8080808080808080ULL;
  const auto zero_bytes = [](std::uint64_t w) { return ~(((w & kLow7) + kLow7) | w) & kTop; };
  const auto gather = [](std::uint64_t tops) { return ((tops >> 7) * 0x0102040810204080ULL) >> 56; };
  digits = dots = 0;
  std::uint64_t minus = 0;
  for (int k = 0; k < 8; ++k) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + 8 * k, 8);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);  // byte 0 lowest
    // A digit: its high nibble is 3, and adding 6 to its low nibble keeps it under 16.
    const std::uint64_t not_digit = ((w & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL) |
                                    (((w & 0x0F0F0F0F0F0F0F0FULL) + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL);
    digits |= gather(zero_bytes(not_digit)) << (8 * k);
    dots |= gather(zero_bytes(w ^ ('.' * kOnes))) << (8 * k);
    minus |= gather(zero_bytes(w ^ ('-' * kOnes))) << (8 * k);
  }
  return digits | dots | minus;
#endif
}

#if defined(__x86_64__)
__attribute__((target("avx512bw"))) std::uint64_t number_bytes_avx512(const char* p, std::uint64_t& digits,
                                                                      std::uint64_t& dots) {
  const __m512i v = _mm512_loadu_si512(p);
  digits = _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, _mm512_set1_epi8('0')), _mm512_set1_epi8(9));
  dots = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('.'));
  return digits | dots | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('-'));
}
#endif

// The fast path: an event's fields read straight from its text, without simdjson, when it is of
// the plain shape Kineto writes. The splitter has found the event's end, where its last nested
// value (args) opens and closes, and that it holds no non-ASCII byte and no control character in a
// string (EventShape). This reads the top level's keys, the values of the fields trace uses, and a
// GPU activity's args up to "device"; other values are stepped over, args by the splitter's offsets
// (so most of an event's bytes are never looked at again). Anything it does not expect (an
// escape, a value of another type, text that is not JSON) sends the event to simdjson, which judges
// it: what the fast path reads, it reads as simdjson would.
//
// Spaces, keys and numbers are scanned byte by byte: their lengths repeat from event to event, so
// the branch predictor runs ahead of the loop (a scan by bit masks was twice as slow here: it makes
// each step wait for the one before). Names, of any length, are scanned 16 bytes at a time. The
// scans of spaces and scalars need no bound: the event's closing brace stops them.
class PlainEvent {
 public:
  PlainEvent(std::string_view text, const EventShape& shape, NumberBytes number_bytes = number_bytes_portable)
      : begin_(text.data()),
        p_(text.data() + 1),
        end_(text.data() + text.size() - 1),
        shape_(shape),
        number_bytes_(number_bytes) {}

  bool read(EventFields& f) {
    if (!shape_.plain || *end_ != '}') return false;
    bool cat_seen = false;
    skip_spaces();
    if (p_ == end_) return true;  // {}
    std::size_t next = 0;         // the key Kineto writes next, in kKinetoKeys
    for (;;) {
      Field field = Field::other;
      if (!known_key(next, field)) {
        std::string_view name;
        if (!key(name) || !colon()) return false;
        field = field_of(name);
      }
      bool ok = true;
      switch (field) {
        case Field::ph:
          ok = string(f.ph);
          break;
        case Field::cat:
          ok = string(f.cat);
          cat_seen = true;
          break;
        case Field::name:
          ok = string(f.name);
          break;
        case Field::ts:
          ok = time(f.ts);
          f.has_ts = true;
          break;
        case Field::dur:
          ok = time(f.dur);
          break;
        case Field::pid:
          if (*p_ == '"') {
            std::string_view host;
            ok = string(host);  // a string pid names a host process: not a device
          } else {
            ok = integer(f.pid);
          }
          break;
        case Field::args:
          // Only a GPU activity's args are read, for its device.
          ok = *p_ == '{' && (!cat_seen || is_gpu_category(f.cat)) ? read_args(f) : skip_value();
          break;
        case Field::other:
          ok = skip_value();
          break;
      }
      if (!ok) return false;
      if (separator()) continue;
      skip_spaces();
      if (p_ == end_) return true;
      if (*p_ != ',') return false;
      ++p_;
      skip_spaces();
    }
  }

  // Kineto's own layout of an event, read in a straight line: a complete event ("X", args or not)
  // or a flow event ("s", "f"), its keys in Kineto's order with the bytes between the values
  // compared to what Kineto writes, eight at a time, and the values read as read() reads them. All
  // but a few events of a real trace have this layout, and read() spends four times the
  // instructions on one (a lookup of each key, a dispatch on it, scans of the spaces around it).
  // False, with `f` part written, for anything else: read() then reads the event from its start.
  [[gnu::always_inline]] bool read_kineto(EventFields& f) {
    if (std::endian::native != std::endian::little || !shape_.plain || *end_ != '}') return false;
    const bool lines = take(kPhLine);
    if (!(lines || take(kPh)) || !short_string(f.ph) || f.ph.size() != 1) return false;
    std::array<NumberToken, 4> number;
    if (f.ph[0] == 'X') {
      const Literal& ts = lines ? kTsLine : kTs;
      if (!(take(kCat) && string(f.cat) && take(kName) && string(f.name) && take(kPid))) return false;
      if (numbers({&kTid, &ts, &kDur}, number)) {
        if (!(int_token(number[0], f.pid) && time_token(number[2], f.ts) && time_token(number[3], f.dur))) return false;
      } else if (!(integer(f.pid) && take(kTid) && skip_value() && take(ts) && time(f.ts) && take(kDur) &&
                   time(f.dur))) {
        return false;
      }
      f.has_ts = true;
      // Only a GPU activity's args are read, for its device.
      if (take(lines ? kArgsLine : kArgs) && !(*p_ == '{' && is_gpu_category(f.cat) ? read_args(f) : skip_value()))
        return false;
    } else if (f.ph[0] == 's' || f.ph[0] == 'f') {
      if (!take(kId)) return false;
      if (numbers({&kPid, &kTid, &kTs}, number)) {
        if (!(int_token(number[1], f.pid) && time_token(number[3], f.ts))) return false;
      } else if (!(skip_value() && take(kPid) && integer(f.pid) && take(kTid) && skip_value() && take(kTs) &&
                   time(f.ts))) {
        return false;
      }
      f.has_ts = true;
      if (!(take(lines ? kCatLine : kCat) && string(f.cat) && take(kName) && string(f.name))) return false;
      if (take(kBp) && !skip_value()) return false;
    } else {
      return false;
    }
    skip_spaces();
    return p_ == end_;
  }

 private:
  using Field = EventField;
  const char* begin_;
  const char* p_;
  const char* end_;  // the event's closing brace
  const EventShape& shape_;
  NumberBytes number_bytes_;

  // A string of one byte without a scan for its end (a phase: "X"), else string().
  bool short_string(std::string_view& out) {
    if (p_[0] == '"' && p_[2] == '"' && p_[1] != '"' && p_[1] != '\\') {  // p_[2] is at most the brace
      out = std::string_view(p_ + 1, 1);
      p_ += 3;
      return true;
    }
    return string(out);
  }

  // A number's token as numbers() cut it, and whether it is a plain decimal (digits, then at
  // most one '.' and digits), which decimal_ns and digits_int read without more checks.
  struct NumberToken {
    std::string_view text;
    std::size_t dot = std::string_view::npos;  // where its '.' is, if it has one
    bool plain = false;
  };

  // Four numbers with the three literals between them (an "X"'s pid, tid, ts and dur; a flow
  // event's id, pid, tid and ts), from p_: their tokens, cut as token() cuts them, and p_ after
  // the last; false (nothing moved) for anything else. Where each number ends is found in masks
  // of the 64 bytes from p_ (the bytes a number can hold, the digits, the dots): finding the next
  // waits for a bit scan, not for the digits of the one before to be read, as read() and time()
  // do, and the values are read after, from the tokens, while the reading of the event goes on.
  [[gnu::always_inline]] bool numbers(const std::array<const Literal*, 3>& between, std::array<NumberToken, 4>& out) {
    if (end_ - p_ < 80) return false;  // the masks' 64 bytes, and a literal's 16 past a number in them
    std::uint64_t digits = 0, dots = 0;
    const std::uint64_t number = number_bytes_(p_, digits, dots);
    std::size_t at = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const auto length = static_cast<std::size_t>(std::countr_zero(~(number >> at)));
      const std::size_t stop = at + length;
      if (length == 0 || stop >= 64) return false;
      NumberToken& t = out[k];
      t.text = std::string_view(p_ + at, length);
      const std::uint64_t token = ((std::uint64_t{1} << length) - 1) << at;
      const std::uint64_t dot = dots & token;
      // Digits but for one dot, not the first byte (a '-' or a second '.': the exact, slower reading).
      t.plain = (digits & token) == (token & ~dot) && (dot & (dot - 1)) == 0 && (dot & (std::uint64_t{1} << at)) == 0;
      if (dot != 0) t.dot = static_cast<std::size_t>(std::countr_zero(dot)) - at;
      if (k == 3) {
        if (!(kByteClass[static_cast<unsigned char>(p_[stop])] & kStopByte)) return false;
        p_ += stop;
        return true;
      }
      const Literal& l = *between[k];
      if (!literal_at(p_ + stop, l)) return false;
      at = stop + l.size;
      if (at >= 64) return false;
    }
    return false;
  }

  // A time token in microseconds to nanoseconds, as time() reads it: a plain decimal of up to 16
  // digits before its dot here, eight at a time; anything else through micros_to_ns.
  bool time_token(const NumberToken& t, std::int64_t& ns) const {
    const char* const s = t.text.data();
    const std::size_t whole = t.dot == std::string_view::npos ? t.text.size() : t.dot;
    if (!t.plain || whole > 16)
      return !t.text.empty() && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) &&
             micros_to_ns(s, s + t.text.size(), end_ + 1, ns);
    // The token lies in numbers()' 64 bytes, which have 16 more before the event's end: every
    // eight-byte load below is inside the event.
    const auto n = static_cast<int>(whole);
    const std::int64_t us = n <= 8 ? leading_value(load8(s), n)
                                   : static_cast<std::int64_t>(parse_eight_digits(load8(s))) *
                                             kPowersOf10[static_cast<std::size_t>(n - 8)] +
                                         leading_value(load8(s + 8), n - 8);
    std::int64_t frac_ns = 0;
    if (t.dot != std::string_view::npos) {
      const int frac_digits = static_cast<int>(std::min<std::size_t>(t.text.size() - t.dot - 1, 3));
      if (frac_digits > 0)
        frac_ns =
            leading_value(load8(s + t.dot + 1), frac_digits) * kPowersOf10[static_cast<std::size_t>(3 - frac_digits)];
    }
    if (us > INT64_MAX / 1000 - 1) return false;
    ns = us * 1000 + frac_ns;
    return true;
  }

  // An integer token as plain_int64 takes it: up to eight digits without a leading zero here.
  static bool int_token(const NumberToken& t, std::int64_t& value) {
    const std::size_t n = t.text.size();
    if (t.plain && t.dot == std::string_view::npos && n <= 8 && (n == 1 || t.text[0] != '0')) {
      value = leading_value(load8(t.text.data()), static_cast<int>(n));
      return true;
    }
    return plain_int64(t.text, value);
  }

  // take()'s compare at p, which the caller knows has 16 bytes before the event's end.
  static bool literal_at(const char* p, const Literal& l) {
    return (((load8(p) & l.mask[0]) ^ l.bytes[0]) | ((load8(p + 8) & l.mask[1]) ^ l.bytes[1])) == 0;
  }

  // The bytes of `l` at p_, which then moves past them; false (nothing moved) for other bytes, or
  // when the event ends too near for the eight-byte loads.
  [[gnu::always_inline]] bool take(const Literal& l) {
    if (l.size > 8) {
      if (end_ - p_ < 16 || ((load8(p_) & l.mask[0]) ^ l.bytes[0]) | ((load8(p_ + 8) & l.mask[1]) ^ l.bytes[1]))
        return false;
    } else if (end_ - p_ < 8 || ((load8(p_) & l.mask[0]) ^ l.bytes[0])) {
      return false;
    }
    p_ += l.size;
    return true;
  }

  // The key expected next, or else any other of kKinetoKeys, with its colon and the spaces after;
  // false (and nothing read) when the text holds none of them, or the event's end is too near for
  // eight bytes.
  bool known_key(std::size_t& next, Field& field) {
    if (std::endian::native != std::endian::little || end_ - p_ < 8) return false;
    const std::uint64_t text = load8(p_);
    std::size_t k = next;
    if (k >= kKinetoKeys.size() || (text & kKinetoKeys[k].mask) != kKinetoKeys[k].bytes) {
      k = 0;
      while (k < kKinetoKeys.size() && (text & kKinetoKeys[k].mask) != kKinetoKeys[k].bytes) ++k;
      if (k == kKinetoKeys.size()) return false;
    }
    next = k + 1;
    field = kKinetoKeys[k].field;
    p_ += kKinetoKeys[k].length;
    // Kineto writes one space after the colon (p_[1] is at most the brace: the key was in the
    // eight bytes before it).
    if (*p_ == ' ' && !(kByteClass[static_cast<unsigned char>(p_[1])] & kSpaceByte))
      ++p_;
    else
      skip_spaces();
    return p_ < end_;
  }

  // The comma between two fields with the spaces Kineto writes around it (", " on a line, ",\n"
  // and an indent of four between lines), when the next key's quote follows: p_ moves to the quote.
  // False, and nothing moved, for anything else (the scans of spaces take it).
  bool separator() {
    if (std::endian::native != std::endian::little || end_ - p_ < 8) return false;
    constexpr std::uint64_t kSameLine = 0x22202C;             // , "
    constexpr std::uint64_t kNextLine = 0x22202020200A2CULL;  // ,\n    "
    const std::uint64_t text = load8(p_);
    if ((text & 0xFFFFFF) == kSameLine) {
      p_ += 2;
      return true;
    }
    if ((text & 0xFFFFFFFFFFFFFFULL) == kNextLine) {
      p_ += 6;
      return true;
    }
    return false;
  }

  static Field field_of(std::string_view k) {
    switch (k.size()) {
      case 2:
        return k == "ph" ? Field::ph : k == "ts" ? Field::ts : Field::other;
      case 3:
        return k == "cat" ? Field::cat : k == "dur" ? Field::dur : k == "pid" ? Field::pid : Field::other;
      case 4:
        return k == "name" ? Field::name : k == "args" ? Field::args : Field::other;
      default:
        return Field::other;
    }
  }

  // (Each scan works on a local copy of p_: stores through a string_view could alias the member.)
  void skip_spaces() {
    const char* p = p_;
    while (kByteClass[static_cast<unsigned char>(*p)] & kSpaceByte) ++p;
    p_ = p;
  }

  // The ':' after a key, and the spaces around it; p_ then at the value.
  bool colon() {
    skip_spaces();
    if (*p_ != ':') return false;
    ++p_;
    skip_spaces();
    return p_ < end_;
  }

  // A key: short, and without escapes in the fields trace reads.
  bool key(std::string_view& out) {
    const char* p = p_;
    if (*p != '"') return false;
    const char* const start = ++p;
    while (p < end_ && *p != '"' && *p != '\\') ++p;
    if (*p != '"') return false;  // an escape (or the end): simdjson's to read
    out = std::string_view(start, static_cast<std::size_t>(p - start));
    p_ = p + 1;
    return true;
  }

  // A string without escapes at p_ (its opening quote); p_ moves past its closing quote.
  [[gnu::always_inline]] bool string(std::string_view& out) {
    const char* p = p_;
    if (*p != '"') return false;
    const char* const start = ++p;
#if defined(__SSE2__)
    // Kernel names run to hundreds of bytes: 16 at a time while the event's brace is further on.
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    while (end_ - p >= 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const int hits = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
      if (hits != 0) {
        p += __builtin_ctz(static_cast<unsigned>(hits));
        break;
      }
      p += 16;
    }
#endif
    while (p < end_ && *p != '"' && *p != '\\') ++p;
    if (*p != '"') return false;  // an escape: simdjson's to read
    out = std::string_view(start, static_cast<std::size_t>(p - start));
    p_ = p + 1;
    return true;
  }

  // A scalar's text (a number, true, false, null): up to the next comma, bracket or space.
  std::string_view token() {
    const char* const start = p_;
    const char* p = start;
    while (!(kByteClass[static_cast<unsigned char>(*p)] & kStopByte)) ++p;
    p_ = p;
    return {start, static_cast<std::size_t>(p - start)};
  }

  // A time in microseconds (a JSON number) to nanoseconds, exactly.
  bool time(std::int64_t& ns) {
    if (plain_time(ns)) return true;
    const std::string_view t = token();
    return !t.empty() && (t.front() == '-' || (t.front() >= '0' && t.front() <= '9')) &&
           micros_to_ns(t.data(), t.data() + t.size(), end_ + 1, ns);  // a token has no spaces to trim
  }

  // The common case of time(), read where it stands: digits, and a fraction, eight at a time, then
  // the byte that ends a token. Anything else (more digits than that, an exponent, the event's end
  // too near to read eight bytes) returns false with nothing moved, for token() and micros_to_ns,
  // which give the same value for what this reads: scanning the token first and reading its
  // digits again was a fifth of the reader's time.
  bool plain_time(std::int64_t& ns) {
    if constexpr (std::endian::native != std::endian::little) return false;
    const char* p = p_;
    const char* const readable_end = end_ + 1;
    const bool negative = *p == '-';
    p += negative ? 1 : 0;
    if (readable_end - p < 8) return false;
    std::uint64_t v = load8(p);
    int n = leading_digits(v);
    if (n == 0) return false;
    std::int64_t us = leading_value(v, n);
    p += n;
    if (n == 8) {  // 9 to 16 digits (epoch microseconds have 16)
      if (readable_end - p < 8) return false;
      v = load8(p);
      n = leading_digits(v);
      if (n == 8 && static_cast<unsigned>(p[8] - '0') < 10) return false;  // 17 and more: micros_to_ns's
      if (n > 0) us = us * kPowersOf10[static_cast<std::size_t>(n)] + leading_value(v, n);
      p += n;
    }
    std::int64_t frac_ns = 0;
    int frac_digits = 0;
    if (*p == '.') {
      ++p;
      if (readable_end - p < 8) return false;
      v = load8(p);
      n = leading_digits(v);
      frac_digits = std::min(n, 3);
      if (frac_digits > 0) frac_ns = leading_value(v, frac_digits);
      p += n;
      if (n == 8)  // digits past the nanosecond are dropped; the event's brace stops the scan
        while (static_cast<unsigned>(*p - '0') < 10) ++p;
    }
    if (!(kByteClass[static_cast<unsigned char>(*p)] & kStopByte)) return false;
    if (us > INT64_MAX / 1000 - 1) return false;
    ns = us * 1000 + frac_ns * kPowersOf10[static_cast<std::size_t>(3 - frac_digits)];
    if (negative) ns = -ns;
    p_ = p;
    return true;
  }

  // An integer as plain_int64 takes it (pid, device): up to seven digits where they stand, then
  // the byte that ends a token; else token() and plain_int64, which give the same.
  bool integer(std::int64_t& value) {
    if constexpr (std::endian::native == std::endian::little) {
      const char* p = p_;
      const bool negative = *p == '-';
      p += negative ? 1 : 0;
      if (end_ + 1 - p >= 8) {
        const std::uint64_t v = load8(p);
        const int n = leading_digits(v);
        if (n > 0 && n < 8 && !(n > 1 && *p == '0') && (kByteClass[static_cast<unsigned char>(p[n])] & kStopByte)) {
          const auto digits = static_cast<std::int64_t>(leading_value(v, n));
          value = negative ? -digits : digits;
          p_ = p + n;
          return true;
        }
      }
    }
    return plain_int64(token(), value);
  }

  // Steps over a value: the last nested one by the splitter's offsets, other nested ones byte by
  // byte (their strings as strings), scalars as tokens (not checked, as simdjson's on-demand API
  // does not check what it skips).
  bool skip_value() {
    if (p_ >= end_) return false;
    std::string_view ignored;
    if (*p_ == '"') return string(ignored);
    if (*p_ != '{' && *p_ != '[') {
      // A number of up to seven digits (tid, ids) without a scan for its end; else the token's.
      if (std::endian::native == std::endian::little && end_ + 1 - p_ >= 8) {
        const int n = leading_digits(load8(p_));
        if (n > 0 && n < 8 && (kByteClass[static_cast<unsigned char>(p_[n])] & kStopByte)) {
          p_ += n;
          return true;
        }
      }
      return !token().empty();
    }
    if (static_cast<std::size_t>(p_ - begin_) == shape_.last_nested_open) {
      p_ = begin_ + shape_.last_nested_close + 1;
      return true;
    }
    int depth = 0;
    while (p_ < end_) {
      const char c = *p_;
      if (c == '"') {
        if (!string(ignored)) return false;
        continue;
      }
      if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        ++p_;
        return true;
      }
      ++p_;
    }
    return false;
  }

  // A GPU activity's args, up to its first "device"; the rest is stepped over.
  bool read_args(EventFields& f) {
    const char* const open = p_++;
    skip_spaces();
    if (*p_ == '}' && p_ < end_) {
      ++p_;
      return true;
    }
    for (;;) {
      std::string_view name;
      if (!key(name) || !colon()) return false;
      if (name == "device") {
        if (!integer(f.device)) return false;
        if (static_cast<std::size_t>(open - begin_) == shape_.last_nested_open) {
          p_ = begin_ + shape_.last_nested_close + 1;
          return true;
        }
        p_ = open;  // not the last nested value (args before other fields): step over it whole
        return skip_value();
      }
      if (!skip_value()) return false;
      skip_spaces();
      if (*p_ == '}' && p_ < end_) {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
      skip_spaces();
    }
  }
};

class EventReader {
 public:
  explicit EventReader(TraceData& data) : data_(data) {
    batch_.reserve(kBatchBytes + std::size_t{64} * 1024);
#if defined(__x86_64__)
    if (block_scan() == BlockScan::avx512) number_bytes_ = number_bytes_avx512;  // the CPU has it
#endif
  }

  // Called from one place (EventSink, below), and the fast path's steps marked always_inline:
  // when the reading on several threads came, GCC stopped inlining them here, which cost a tenth
  // of the whole run (perf: 50 -> 58 ms for lora's trace on one thread).
  void add(std::string_view event, const EventShape& shape) {
    ++data_.counts.events;
    EventFields f;
    bool read = PlainEvent(event, shape, number_bytes_).read_kineto(f);
    if (!read) {
      f = EventFields{};
      read = PlainEvent(event, shape).read(f);
    }
    if (read) {
      if (!record(f)) ++data_.counts.malformed;
      return;
    }
    add_slow(event);
  }

  // Out of line: a few events of a real trace come here.
  [[gnu::noinline]] void add_slow(std::string_view event) {
    if (defer_) {  // a thread of several: kept for the reader that merges (read_parallel)
      deferred_.append(event);
      deferred_ends_.push_back(deferred_.size());
      return;
    }
    append_slow(event);
  }

  // An event for simdjson, gathered with the others like it (a few in a real trace: those with
  // non-ASCII names), counted already.
  void append_slow(std::string_view event) {
    batch_ += batch_.empty() ? '[' : ',';
    offsets_.push_back(batch_.size());
    batch_.append(event);
    if (batch_.size() >= kBatchBytes) flush();
  }

  void flush() {
    if (batch_.empty()) return;
    batch_ += ']';
    if (!parse_batch()) parse_one_by_one();
    batch_.clear();
    offsets_.clear();
  }

  // Reading on several threads: the events the fast path does not read are kept, in their order,
  // instead of being parsed (the merge parses them after all the others, as one thread would).
  void defer_slow_events() {
    defer_ = true;
  }
  const std::string& deferred() const {
    return deferred_;
  }
  const std::vector<std::size_t>& deferred_ends() const {
    return deferred_ends_;
  }
  // Whether a kernel name past kMaxKernelNames was summed under "(other kernels)".
  bool kernel_names_capped() const {
    return kernel_names_capped_;
  }

  static bool member_read(std::string_view key) {
    return key == "distributedInfo" || key == "deviceProperties";
  }

  void member(std::string_view key, std::string_view value) {
    if (!member_read(key)) return;
    std::string text(value);
    text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
    dom::element doc;
    if (parser_.parse(text.data(), text.size(), false).get(doc)) return;
    if (key == "distributedInfo") {
      std::int64_t rank = -1;
      if (!doc["rank"].get_int64().get(rank) && rank >= 0 && rank < 1 << 20) data_.rank = static_cast<int>(rank);
      return;
    }
    dom::array devices;
    if (doc.get_array().get(devices)) return;
    for (dom::element device : devices) {
      std::int64_t id = -1;
      std::string_view name;
      if (device["id"].get_int64().get(id) || device["name"].get_string().get(name)) continue;
      if (id >= 0 && id < 1 << 16) data_.device_names[static_cast<int>(id)] = std::string(name);
    }
  }

 private:
  TraceData& data_;
  NumberBytes number_bytes_ = number_bytes_portable;
  dom::parser parser_;        // the top-level members (small)
  od::parser events_parser_;  // the batches of events
  std::string batch_;
  std::vector<std::size_t> offsets_;  // where each event of the batch starts in batch_
  std::vector<EventFields> parsed_;
  std::string single_;
  bool defer_ = false, kernel_names_capped_ = false;
  std::string deferred_;
  std::vector<std::size_t> deferred_ends_;  // where each deferred event ends in deferred_

  // Kernel names met lately, in slots by a cheap hash of their length and three 8-byte pieces:
  // most activities repeat a name of the last few hundred, and hashing all of a 100-byte name for
  // the map costs more than reading the rest of the event. A view of the map's own key (a node's
  // string does not move) and its total.
  struct CachedName {
    std::string_view name;
    KernelTotal* total = nullptr;
  };
  std::array<CachedName, 1024> name_cache_{};

  // What a host event is to the analysis, by its name; names met lately are remembered, as kernel
  // names are (a host trace repeats a few hundred names, and the tests below search each name).
  enum class HostCall : std::uint8_t { other, step, launch, synchronisation, data_loader };
  struct CachedHostName {
    std::string name;
    HostCall call = HostCall::other;
    bool used = false;
  };
  std::array<CachedHostName, 1024> host_cache_{};

  static HostCall host_call_of(std::string_view name) {
    if (name.starts_with("ProfilerStep#")) return HostCall::step;
    if (is_launch(name)) return HostCall::launch;
    if (is_synchronisation(name)) return HostCall::synchronisation;
    if (is_data_loader_wait(name)) return HostCall::data_loader;
    return HostCall::other;
  }

  HostCall host_kind(std::string_view name) {
    CachedHostName& cached = host_cache_[name_slot(name)];
    if (cached.used && same_text(cached.name, name)) return cached.call;
    const HostCall call = host_call_of(name);
    // Step annotations are named once each (ProfilerStep#N): not worth a slot, which keeps the name
    // it holds and that name's kind.
    if (call != HostCall::step) {
      cached.name.assign(name);
      cached.call = call;
      cached.used = true;
    }
    return call;
  }

  // a == b, for the caches' names: the first and last eight bytes compared where they stand, and
  // memcmp only for the middle of a longer name (most host names are 8 to 16 bytes, and a call of
  // memcmp for each cost as much as the rest of the lookup).
  static bool same_text(std::string_view a, std::string_view b) {
    const std::size_t n = a.size();
    if (n != b.size()) return false;
    if (n < 8) return n == 0 || std::memcmp(a.data(), b.data(), n) == 0;
    return load8(a.data()) == load8(b.data()) && load8(a.data() + n - 8) == load8(b.data() + n - 8) &&
           (n <= 16 || std::memcmp(a.data() + 8, b.data() + 8, n - 16) == 0);
  }

  static std::size_t name_slot(std::string_view name) {
    if (name.empty()) return 0;  // an activity without a name: no bytes to read (data() may be null)
    const std::size_t n = std::min<std::size_t>(name.size(), 8);
    std::uint64_t head = 0, middle = 0, tail = 0;
    std::memcpy(&head, name.data(), n);
    std::memcpy(&middle, name.data() + (name.size() - n) / 2, n);
    std::memcpy(&tail, name.data() + name.size() - n, n);
    const std::uint64_t h = (head ^ (middle * 0x9E3779B97F4A7C15ULL) ^ (tail + name.size()) * 0xC2B2AE3D27D4EB4FULL) *
                            0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> 54);  // 10 bits: 1024 slots
  }

  // A string value as it stands in the text when it has no backslash (nearly always: no copy into
  // simdjson's string buffer), else unescaped by simdjson.
  static simdjson::error_code read_string(od::value& v, std::string_view& out) {
    std::string_view token = v.raw_json_token();
    // The token is the string with its quotes, then the spaces before the next token.
    while (token.size() > 1 && is_json_space(token.back())) token.remove_suffix(1);
    if (token.size() < 2 || token.front() != '"' || token.back() != '"') return v.get_string().get(out);
    const std::string_view content = token.substr(1, token.size() - 2);
    if (content.find('\\') != std::string_view::npos) return v.get_string().get(out);
    out = content;
    return simdjson::SUCCESS;
  }

  // A time in microseconds, from the number's text, exactly.
  static simdjson::error_code read_time(od::value& v, std::int64_t& ns) {
    const std::string_view token = v.raw_json_token();
    if (token.empty() || !(token.front() == '-' || (token.front() >= '0' && token.front() <= '9')))
      return simdjson::INCORRECT_TYPE;
    return microseconds_to_ns(token, ns) ? simdjson::SUCCESS : simdjson::NUMBER_ERROR;
  }

  // The on-demand API reads only the fields below and skips the rest (args of shapes, stacks)
  // without converting their numbers; times are read from the number's text, exactly. Keys are
  // compared as they stand in the text (no unescaping: the names trace reads have no escapes), by
  // their bytes up to the closing quote, which the text always has.
  static simdjson::error_code read_fields(od::object object, EventFields& f) {
    bool cat_seen = false;
    for (auto field : object) {
      od::raw_json_string key;
      if (auto e = field.key().get(key)) return e;
      od::value v;
      if (auto e = field.value().get(v)) return e;
      const char* k = key.raw();
      switch (k[0]) {
        case 'p':
          if (k[1] == 'h' && k[2] == '"') {
            if (auto e = read_string(v, f.ph)) return e;
          } else if (k[1] == 'i' && k[2] == 'd' && k[3] == '"') {
            std::int64_t pid = 0;
            if (!v.get_int64().get(pid)) f.pid = pid;  // a string pid names a host process: not a device
          }
          break;
        case 'c':
          if (k[1] == 'a' && k[2] == 't' && k[3] == '"') {
            if (auto e = read_string(v, f.cat)) return e;
            cat_seen = true;
          }
          break;
        case 'n':
          if (k[1] == 'a' && k[2] == 'm' && k[3] == 'e' && k[4] == '"')
            if (auto e = read_string(v, f.name)) return e;
          break;
        case 't':
          if (k[1] == 's' && k[2] == '"') {
            if (auto e = read_time(v, f.ts)) return e;
            f.has_ts = true;
          }
          break;
        case 'd':
          if (k[1] == 'u' && k[2] == 'r' && k[3] == '"')
            if (auto e = read_time(v, f.dur)) return e;
          break;
        case 'a': {
          if (!(k[1] == 'r' && k[2] == 'g' && k[3] == 's' && k[4] == '"')) break;
          // Only a GPU activity's args are read (for its device); Kineto writes cat before args.
          if (cat_seen && !is_gpu_category(f.cat)) break;
          od::object args;
          if (v.get_object().get(args)) break;  // args of another shape carry nothing trace reads
          for (auto arg : args) {
            od::raw_json_string arg_key;
            if (auto e = arg.key().get(arg_key)) return e;
            if (arg_key == "device") {
              // A device that is not a whole number is a field of the wrong type: the event is
              // malformed (docs/trace.md, "Bad input"), not an activity of device -1.
              std::int64_t device = -1;
              if (auto e = arg.value().get_int64().get(device)) return e;
              f.device = device;
              break;  // the rest of args is skipped by the next field
            }
          }
          break;
        }
        default:
          break;
      }
    }
    return simdjson::SUCCESS;
  }

  // Every event of the batch, or false (and nothing recorded) when any of them is malformed.
  bool parse_batch() {
    parsed_.clear();
    batch_.reserve(batch_.size() + simdjson::SIMDJSON_PADDING);
    od::document doc;
    if (events_parser_.iterate(simdjson::padded_string_view(batch_.data(), batch_.size(), batch_.capacity())).get(doc))
      return false;
    od::array events;
    if (doc.get_array().get(events)) return false;
    for (auto event : events) {
      od::object object;
      if (event.get_object().get(object)) return false;
      EventFields f;
      if (read_fields(object, f)) return false;
      parsed_.push_back(f);
    }
    for (const EventFields& f : parsed_)
      if (!record(f)) ++data_.counts.malformed;
    return true;
  }

  void parse_one_by_one() {
    for (std::size_t k = 0; k < offsets_.size(); ++k) {
      const std::size_t begin = offsets_[k];
      const std::size_t end = k + 1 < offsets_.size() ? offsets_[k + 1] - 1 : batch_.size() - 1;
      single_.assign(batch_, begin, end - begin);
      single_.reserve(single_.size() + simdjson::SIMDJSON_PADDING);
      od::document doc;
      od::object object;
      EventFields f;
      if (events_parser_.iterate(simdjson::padded_string_view(single_.data(), single_.size(), single_.capacity()))
              .get(doc) ||
          doc.get_object().get(object) || read_fields(object, f) || !record(f))
        ++data_.counts.malformed;
    }
  }

  // Keeps what the analysis needs of one event; false when its fields contradict each other.
  bool record(const EventFields& f) {
    if (f.ph != "X") {
      if (f.ph == "M" || f.ph == "i" || f.ph == "I" || f.ph == "s" || f.ph == "f" || f.ph == "t" || f.ph == "R") {
        ++data_.other_phases;
      } else {
        ++data_.counts.unsupported;
        if (data_.unsupported_example.empty())
          data_.unsupported_example = f.ph.empty() ? "(none)" : std::string(f.ph.substr(0, 16));
      }
      return true;
    }
    if (!f.has_ts || f.dur < 0 || f.ts > INT64_MAX - f.dur) return false;
    const Interval span{f.ts, f.ts + f.dur};
    data_.first_ns = std::min(data_.first_ns, span.begin);
    data_.last_ns = std::max(data_.last_ns, span.end);
    if (is_gpu_category(f.cat)) {
      ++data_.counts.gpu_activities;
      // A name is classified once, when first seen: real traces repeat a few thousand names. Past
      // the cap (a file made to have millions) each new name is classified where it stands.
      CachedName& cached = name_cache_[name_slot(f.name)];
      KernelTotal* total = cached.total;
      KernelCategory category = KernelCategory::elementwise;
      if (total != nullptr && same_text(cached.name, f.name)) {
        category = total->category;
      } else {
        auto it = data_.kernels.find(f.name);
        if (it != data_.kernels.end()) {
          category = it->second.category;
        } else {
          category = classify_activity(f.name, f.cat);
          if (data_.kernels.size() < kMaxKernelNames) {
            it = data_.kernels.try_emplace(std::string(f.name), KernelTotal{category, 0, 0}).first;
          } else {
            it = data_.kernels.try_emplace("(other kernels)", KernelTotal{KernelCategory::elementwise, 0, 0}).first;
            kernel_names_capped_ = true;
          }
        }
        total = &it->second;
        if (it->first == f.name) cached = {it->first, total};  // not the names summed as "(other kernels)"
      }
      const std::int64_t device = f.device >= 0 ? f.device : f.pid;
      data_.gpu.push_back({span.begin, span.end,
                           static_cast<std::int32_t>(std::clamp<std::int64_t>(device, -1, 1 << 16)), category,
                           f.cat == "kernel" || f.cat == "Kernel"});
      ++total->count;
      total->total_ns += f.dur;
      return true;
    }
    if (f.cat == "gpu_user_annotation") {  // the GPU's copy of host annotations: only the steps' are kept
      if (f.name.starts_with("ProfilerStep#")) data_.steps.push_back({std::string(f.name), span, f.pid, true});
      return true;
    }
    switch (host_kind(f.name)) {
      case HostCall::step:
        data_.steps.push_back({std::string(f.name), span, f.pid, false});
        break;
      case HostCall::launch:
        data_.launches.push_back(span.begin);
        break;
      case HostCall::synchronisation:
        data_.synchronise.push_back(span);
        break;
      case HostCall::data_loader:
        data_.data_loader.push_back(span);
        // Worker processes make the batches (DataLoader(num_workers > 0)): the wait is what they
        // fall short of the step by, not a fetch added to it.
        if (f.name.find("_MultiProcessingDataLoaderIter") != std::string_view::npos) data_.loader_in_workers = true;
        break;
      case HostCall::other:
        break;
    }
    return true;
  }
};

void reserve_for(TraceData& data, std::uint64_t file_bytes);

// The splitter's sink of events, one type for every reading (see EventReader::add).
struct EventSink {
  EventReader* reader;
  void operator()(std::string_view event, const EventShape& shape) const { reader->add(event, shape); }
};

void read_stream(TraceData& data, const std::string& source, const std::function<std::string_view()>& next_chunk,
                 const std::function<bool()>& gzip_truncated) {
  EventReader reader(data);
  TraceSplitter splitter(EventSink{&reader},
                         [&](std::string_view key, std::string_view value) { reader.member(key, value); });
  try {
    for (std::string_view chunk = next_chunk(); !chunk.empty(); chunk = next_chunk()) splitter.feed(chunk);
  } catch (const InputError& e) {
    // What came before the fault is kept when there was any: a partial answer that says so.
    if (data.counts.events == 0) throw InputError(fmt::format("trace '{}': {}", source, e.what()));
    data.truncated = true;
    data.warnings.push_back(fmt::format("{}; the analysis covers the events before it", e.what()));
  }
  reader.flush();
  data.counts.bytes = splitter.bytes();
  if (!splitter.saw_events()) {
    // A gzip file cut before its text reached traceEvents (inside its header, say) is cut, not
    // some other JSON.
    if (gzip_truncated())
      throw InputError(
          fmt::format("trace '{}': the gzip stream is cut short before its traceEvents ({} bytes of "
                      "JSON inflated): the file is incomplete",
                      source, splitter.bytes()));
    throw InputError(fmt::format("trace '{}' has no traceEvents array (not a PyTorch profiler trace?)", source));
  }
  if (reader.kernel_names_capped())
    data.warnings.push_back(
        fmt::format("more than {} distinct kernel names: the kernels past them are summed as "
                    "\"(other kernels)\"",
                    kMaxKernelNames));
  if (!splitter.complete() && !data.truncated) {
    data.truncated = true;
    data.warnings.push_back(
        fmt::format("the file ends inside its traceEvents{}: the analysis covers the {} events read",
                    gzip_truncated() ? " (the gzip stream is cut short)" : "", data.counts.events));
  }
  if (splitter.skipped_members() > 0)
    data.warnings.push_back(fmt::format("{} top-level members over 64 MiB skipped", splitter.skipped_members()));
}

// Reading on several threads (docs/trace.md, "How a trace is read"). The chunks are those one
// thread reads (SharedChunks), cut into segments of a few chunks. A thread claims the next
// segment and begins it at the first place in its first chunk where libkineto's bytes between two
// events stand (find_event_start), as if between events; it reads on, chunk after chunk, until it
// reaches the start of the next segment that has one, and stops there only when the splitter's
// state at that byte is the one the other thread assumed (TraceSplitter::stop_at). Each thread
// keeps what it reads in its own TraceData, noting where each segment's part begins, and the
// segments are merged in the file's order: the activities, steps and intervals as one thread would
// have appended them, the counts and kernel totals summed (integers), and the events only simdjson
// reads (deferred) parsed last, as one thread parses its one batch of them. Whatever the merge
// cannot make exactly what one thread makes (a guess found wrong, an error, a kernel name of two
// categories, the kernel-name cap, more deferred events than one batch) is read again on one
// thread, so that every input gives the one thread's answer.
class SegmentChunks {
 public:
  virtual ~SegmentChunks() = default;
  virtual SharedChunks::Chunk chunk(std::size_t thread, std::size_t j) = 0;
  virtual void from(std::size_t /*thread*/, std::size_t /*j*/, std::size_t /*unclaimed*/, std::size_t /*through*/) {}
  virtual void finished(std::size_t /*thread*/) {}
};

class FileSegmentChunks final : public SegmentChunks {
 public:
  explicit FileSegmentChunks(SharedChunks& chunks) : chunks_(chunks) {}
  SharedChunks::Chunk chunk(std::size_t thread, std::size_t j) override { return chunks_.chunk(thread, j); }
  void from(std::size_t thread, std::size_t j, std::size_t unclaimed, std::size_t through) override {
    chunks_.from(thread, j, unclaimed, through);
  }
  void finished(std::size_t thread) override { chunks_.finished(thread); }

 private:
  SharedChunks& chunks_;
};

// Text in memory, in the chunks read_trace_text cuts it into.
class TextSegmentChunks final : public SegmentChunks {
 public:
  TextSegmentChunks(std::string_view text, std::size_t chunk_bytes) : text_(text), chunk_bytes_(chunk_bytes) {}
  SharedChunks::Chunk chunk(std::size_t /*thread*/, std::size_t j) override {
    const std::uint64_t at = std::uint64_t{j} * chunk_bytes_;
    if (at >= text_.size()) return {{}, text_.size(), {}};
    return {text_.substr(at, chunk_bytes_), at, {}};
  }

 private:
  std::string_view text_;
  std::size_t chunk_bytes_;
};

constexpr std::size_t kNone = SIZE_MAX;

// One segment as a thread read it: where its part of the thread's collections begins and ends.
struct Segment {
  std::size_t index = 0, thread = 0;
  std::array<std::size_t, 2> gpu{}, steps{}, launches{}, loader{}, sync{}, deferred{};
  std::string unsupported_example;
  std::vector<std::pair<std::string, std::string>> members;  // those EventReader reads, in order
  std::size_t next = kNone;  // the segment at whose first event it stopped; kNone: read to the end
  bool complete = false, saw_events = false;
  std::uint64_t bytes = 0, skipped_members = 0;
  SourceMarks marks;  // of the last chunk read
};

struct SegmentWorker {
  TraceData data;
  EventReader reader{data};
  std::vector<Segment> segments;
  SegmentWorker() { reader.defer_slow_events(); }
};

struct SegmentShared {
  SegmentShared(SegmentChunks& c, std::size_t k) : chunks(c), segment_chunks(k) {}
  SegmentChunks& chunks;
  std::size_t segment_chunks = 1;
  std::mutex mutex;
  std::size_t next_segment = 0, end_segment = kNone;  // guarded by mutex
  std::atomic<bool> give_up{false};
};

// Reads segment s on thread t; false past the end of the text, or when the reading is given up.
bool read_segment(SegmentShared& shared, SegmentWorker& w, std::size_t t, std::size_t s, std::size_t unclaimed) {
  const std::size_t k = shared.segment_chunks, first = s * k;
  shared.chunks.from(t, first, unclaimed * k, first + k - 1);
  SharedChunks::Chunk c = shared.chunks.chunk(t, first);
  if (c.text.empty()) {
    const std::lock_guard lock(shared.mutex);
    shared.end_segment = std::min(shared.end_segment, s);
    return false;
  }
  std::size_t at = 0;
  if (s > 0) {
    at = find_event_start(c.text);
    if (at == std::string_view::npos) return true;  // nowhere to begin: the segment before reads it
  }
  TraceData& d = w.data;
  Segment seg;
  seg.index = s;
  seg.thread = t;
  const auto sizes = [&](std::size_t side) {
    seg.gpu[side] = d.gpu.size();
    seg.steps[side] = d.steps.size();
    seg.launches[side] = d.launches.size();
    seg.loader[side] = d.data_loader.size();
    seg.sync[side] = d.synchronise.size();
    seg.deferred[side] = w.reader.deferred_ends().size();
  };
  sizes(0);
  d.unsupported_example.clear();
  TraceSplitter splitter(EventSink{&w.reader}, [&](std::string_view key, std::string_view value) {
    if (EventReader::member_read(key)) seg.members.emplace_back(key, value);
  });
  if (s == 0)
    splitter.feed(c.text);
  else
    splitter.resume_between_events(c.text, c.offset, at);
  seg.marks = c.marks;
  std::uint64_t stop = UINT64_MAX;
  std::size_t stop_segment = kNone;
  for (std::size_t j = first + 1; !splitter.stopped(); ++j) {
    if (shared.give_up.load(std::memory_order_relaxed)) return false;
    c = shared.chunks.chunk(t, j);
    seg.marks = c.marks;
    if (c.text.empty()) break;
    if (j % k == 0) {
      if (const std::size_t q = find_event_start(c.text); q != std::string_view::npos) {
        stop = c.offset + q;
        stop_segment = j / k;
        splitter.stop_at(stop);
      }
    }
    splitter.feed(c.text);
    if (!splitter.stopped() && splitter.bytes() > stop) {  // the other thread's guess was wrong
      shared.give_up.store(true, std::memory_order_relaxed);
      return false;
    }
  }
  sizes(1);
  seg.next = splitter.stopped() ? stop_segment : kNone;
  seg.complete = splitter.complete();
  seg.saw_events = splitter.saw_events();
  seg.bytes = splitter.bytes();
  seg.skipped_members = splitter.skipped_members();
  seg.unsupported_example = std::move(d.unsupported_example);
  d.unsupported_example.clear();
  w.segments.push_back(std::move(seg));
  return true;
}

void run_segments(SegmentShared& shared, SegmentWorker& w, std::size_t t) {
  try {
    for (;;) {
      if (shared.give_up.load(std::memory_order_relaxed)) break;
      std::size_t s = 0, unclaimed = 0;
      {
        const std::lock_guard lock(shared.mutex);
        if (shared.next_segment >= shared.end_segment) break;
        s = shared.next_segment++;
        unclaimed = shared.next_segment;
      }
      if (!read_segment(shared, w, t, s, unclaimed)) break;
    }
  } catch (...) {
    // An error is reported as one thread reports it, where it stands: by reading on one thread.
    shared.give_up.store(true, std::memory_order_relaxed);
  }
  shared.chunks.finished(t);
}

template <class T>
void append_part(std::vector<T>& to, const std::vector<T>& from, const std::array<std::size_t, 2>& part) {
  to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(part[0]),
            from.begin() + static_cast<std::ptrdiff_t>(part[1]));
}

// The segments' readings merged into `data` as one thread reads the text; false when that cannot
// be made exactly (read_parallel's caller then reads on one thread).
bool merge_segments(TraceData& data, const std::string& source, std::vector<std::unique_ptr<SegmentWorker>>& workers,
                    bool& gzip_truncated, bool& trailing_bytes) {
  std::vector<const Segment*> order;
  for (const auto& w : workers)
    for (const Segment& seg : w->segments) order.push_back(&seg);
  std::sort(order.begin(), order.end(), [](const Segment* a, const Segment* b) { return a->index < b->index; });
  if (order.empty() || order.front()->index != 0) return false;
  for (std::size_t k = 0; k < order.size(); ++k)
    if (order[k]->next != (k + 1 < order.size() ? order[k + 1]->index : kNone)) return false;
  // One thread parses the deferred events in one batch at its end unless they pass kBatchBytes.
  std::size_t batch = 0;
  for (const Segment* seg : order) {
    const auto& ends = workers[seg->thread]->reader.deferred_ends();
    for (std::size_t e = seg->deferred[0]; e < seg->deferred[1]; ++e) {
      batch += 1 + ends[e] - (e == 0 ? 0 : ends[e - 1]);
      if (batch >= kBatchBytes) return false;
    }
  }
  std::size_t gpu = 0, steps = 0, launches = 0, loader = 0, sync = 0;
  for (const Segment* seg : order) {
    gpu += seg->gpu[1] - seg->gpu[0];
    steps += seg->steps[1] - seg->steps[0];
    launches += seg->launches[1] - seg->launches[0];
    loader += seg->loader[1] - seg->loader[0];
    sync += seg->sync[1] - seg->sync[0];
  }
  data.kernels = std::move(workers.front()->data.kernels);
  for (std::size_t t = 0; t < workers.size(); ++t) {
    SegmentWorker& w = *workers[t];
    if (w.reader.kernel_names_capped()) return false;
    if (t > 0) {
      for (const auto& [name, total] : w.data.kernels) {
        const auto [it, fresh] = data.kernels.try_emplace(name, total);
        if (fresh) continue;
        // The category of a name is that of its first activity in the file: threads that met it
        // first with different categories cannot say which.
        if (it->second.category != total.category) return false;
        it->second.count += total.count;
        it->second.total_ns += total.total_ns;
      }
    }
    add_totals(data, w.data);
  }
  if (data.kernels.size() > kMaxKernelNames) return false;
  data.gpu.reserve(gpu);
  data.steps.reserve(steps);
  data.launches.reserve(launches);
  data.data_loader.reserve(loader);
  data.synchronise.reserve(sync);
  for (const Segment* seg : order) {
    const TraceData& from = workers[seg->thread]->data;
    append_part(data.gpu, from.gpu, seg->gpu);
    append_part(data.steps, from.steps, seg->steps);
    append_part(data.launches, from.launches, seg->launches);
    append_part(data.data_loader, from.data_loader, seg->loader);
    append_part(data.synchronise, from.synchronise, seg->sync);
    if (data.unsupported_example.empty()) data.unsupported_example = seg->unsupported_example;
  }
  EventReader reader(data);
  std::uint64_t skipped_members = 0;
  for (const Segment* seg : order) {
    for (const auto& [key, value] : seg->members) reader.member(key, value);
    skipped_members += seg->skipped_members;
  }
  for (const Segment* seg : order) {
    const EventReader& r = workers[seg->thread]->reader;
    const auto& ends = r.deferred_ends();
    for (std::size_t e = seg->deferred[0]; e < seg->deferred[1]; ++e) {
      const std::size_t begin = e == 0 ? 0 : ends[e - 1];
      reader.append_slow(std::string_view(r.deferred()).substr(begin, ends[e] - begin));
    }
  }
  reader.flush();
  // As read_stream ends.
  const Segment& last = *order.back();
  data.counts.bytes = last.bytes;
  gzip_truncated = last.marks.truncated;
  trailing_bytes = last.marks.trailing_bytes;
  if (!last.saw_events && !order.front()->saw_events) {
    if (gzip_truncated)
      throw InputError(
          fmt::format("trace '{}': the gzip stream is cut short before its traceEvents ({} bytes of "
                      "JSON inflated): the file is incomplete",
                      source, last.bytes));
    throw InputError(fmt::format("trace '{}' has no traceEvents array (not a PyTorch profiler trace?)", source));
  }
  if (!last.complete) {
    data.truncated = true;
    data.warnings.push_back(
        fmt::format("the file ends inside its traceEvents{}: the analysis covers the {} events read",
                    gzip_truncated ? " (the gzip stream is cut short)" : "", data.counts.events));
  }
  if (skipped_members > 0)
    data.warnings.push_back(fmt::format("{} top-level members over 64 MiB skipped", skipped_members));
  return true;
}

// The text of `chunks` read on `threads` threads (this one and threads - 1 more), in segments of
// `segment_chunks` chunks, into `data`; false when it must be read on one thread instead.
bool read_parallel(TraceData& data, const std::string& source, SegmentChunks& chunks, std::size_t threads,
                   std::size_t segment_chunks, std::uint64_t reserve_bytes, bool& trailing_bytes) {
  SegmentShared shared(chunks, std::max<std::size_t>(segment_chunks, 1));
  std::vector<std::unique_ptr<SegmentWorker>> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.push_back(std::make_unique<SegmentWorker>());
    if (reserve_bytes > 0) reserve_for(workers.back()->data, reserve_bytes);
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back([&shared, &workers, t] { run_segments(shared, *workers[t], t); });
    } catch (const std::system_error&) {
      // No thread to be had (a process at its limit): those started, and this one, read it all.
      shared.chunks.finished(t);
    }
  }
  run_segments(shared, *workers.front(), 0);
  for (std::thread& thread : pool) thread.join();
  if (shared.give_up.load()) return false;
  bool gzip_truncated = false;
  TraceData merged;
  if (!merge_segments(merged, source, workers, gzip_truncated, trailing_bytes)) return false;
  merged.read_threads = threads;
  data = std::move(merged);
  return true;
}

}  // namespace

namespace {
// doubles as it grows copies its elements and faults their pages in twice over. The guess (one of
// each per 400 bytes, a synthetic trace's share; real traces have fewer GPU activities) reserves
// address space only, as pages never written are never resident; past it the vectors grow as usual.
void reserve_for(TraceData& data, std::uint64_t file_bytes) {
  const auto guess = static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes / 400, std::uint64_t{1} << 25));
  data.gpu.reserve(guess);
  data.launches.reserve(guess);
}

}  // namespace

TraceData read_trace_file(const std::string& path, const ReadOptions& options) {
  const std::size_t chunk_bytes = options.chunk_bytes != 0 ? options.chunk_bytes : std::size_t{256} << 10;
  const std::size_t cpus = static_cast<std::size_t>(std::max(usable_cpus(), 1));
  std::size_t threads = options.threads != 0 ? options.threads : std::min(cpus, ReadOptions::kMaxThreads);
  if (threads >= 2) {
    std::optional<SharedChunks> shared;
    try {
      const std::size_t k = options.segment_chunks;
      shared.emplace(path, chunk_bytes, threads, 0);
      const bool gzip = shared->gzip();
      const std::size_t segment = k != 0 ? k : gzip ? ReadOptions::kGzipSegmentChunks : ReadOptions::kSegmentChunks;
      // Left to itself, a gzip file is read on several threads only when one more CPU is free for
      // its inflating: on two CPUs the threads' reading of it was no faster than one thread with
      // ChunkReader's inflating ahead (docs/trace.md, "Speed").
      const bool big =
          shared->file_bytes() >= (gzip ? ChunkReader::kPrefetchFromGzipBytes : ReadOptions::kParallelFromBytes);
      const bool automatic = big && (!gzip || cpus >= 3);
      if (options.threads == 0 && gzip) threads = std::min(cpus - 1, ReadOptions::kMaxGzipThreads);
      if (shared->regular() && (automatic || options.threads >= 2)) {
        if (gzip) {
          // Its ring: the chunks of every thread's segment, the one after each, and room for the
          // inflating thread to run ahead.
          // Its chunks are smaller than a plain file's, so that the ring of all of them stays a few
          // MiB (the issue's bound on resident memory is half the JSON: 12 MiB for a 25 MB trace).
          const std::size_t ring_chunk =
              options.chunk_bytes != 0 ? options.chunk_bytes : ReadOptions::kGzipRingChunkBytes;
          shared.reset();
          shared.emplace(path, ring_chunk, threads, (threads + 1) * segment + 2 + ReadOptions::kInflateAheadChunks);
          if (options.inflate_ahead) shared->inflate_ahead();
        }
        FileSegmentChunks chunks(*shared);
        TraceData data;
        bool trailing_bytes = false;
        if (read_parallel(data, path, chunks, threads, segment, gzip ? 0 : shared->file_bytes(), trailing_bytes)) {
          if (trailing_bytes) data.warnings.push_back("the bytes after the file's gzip stream are not gzip: ignored");
          return data;
        }
      }
    } catch (const SystemError&) {
      // Read as one thread reads it, which reports what went wrong where it does.
    }
  }
  TraceData data;
  ChunkReader reader(path, chunk_bytes);
  if (!reader.gzip()) reserve_for(data, reader.file_bytes());
  read_stream(
      data, path, [&] { return reader.next(); }, [&] { return reader.truncated(); });
  if (reader.trailing_bytes()) data.warnings.push_back("the bytes after the file's gzip stream are not gzip: ignored");
  return data;
}

TraceData read_trace_text(std::string_view json, const std::string& source, const ReadOptions& options) {
  TraceData data;
  // In chunks as a file would come, so the splitter's carrying of pieces across chunks is the
  // same code in tests as on real files.
  const std::size_t kChunk = options.chunk_bytes != 0 ? options.chunk_bytes : std::size_t{1} << 16;
  if (options.threads >= 2) {
    TextSegmentChunks chunks(json, kChunk);
    bool trailing_bytes = false;
    if (read_parallel(data, source, chunks, options.threads, std::max<std::size_t>(options.segment_chunks, 1), 0,
                      trailing_bytes))
      return data;
    data = TraceData{};
  }
  std::size_t at = 0;
  read_stream(
      data, source,
      [&] {
        const std::string_view chunk = json.substr(std::min(at, json.size()), kChunk);
        at += chunk.size();
        return chunk;
      },
      [] { return false; });
  return data;
}

}  // namespace detail
}  // namespace trainfit::trace
