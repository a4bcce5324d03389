#include "trace/json_stream.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#if defined(TRAINFIT_HAVE_ISAL)
#include <isa-l/igzip_lib.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// The bytes of a 64-byte block that the event scan looks at, one bit a byte (bit k is byte k).
struct BlockMasks {
  std::uint64_t quote = 0, backslash = 0, open = 0, close = 0;
  std::uint64_t high = 0;     // bytes 0x80-0xff (of UTF-8 sequences)
  std::uint64_t control = 0;  // bytes below 0x20 (which a string must escape), and the high ones
};

// What the walk over a block needs: the brackets outside strings, which of them open, and the
// bytes that make an event not plain (EventShape): non-ASCII, or control characters in strings.
struct BlockBits {
  std::uint64_t brackets = 0, open = 0, odd = 0;
};

// The state a block leaves to the next: inside a string, and whether its first byte is escaped.
struct BlockCarry {
  bool in_string = false, escaped = false;
};

// Bit k of the result is the parity of bits 0..k: with quotes in, the bytes inside strings (the
// opening quote included, the closing one not).
inline std::uint64_t prefix_xor(std::uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

// The bytes escaped by a backslash (the byte after an odd run of them), simdjson's stage 1 method:
// runs are told apart by whether they start on an even or odd bit, their ends found by an addition.
// `carry` says the block's first byte is escaped, and becomes whether the next block's is.
inline std::uint64_t escaped_bytes(std::uint64_t backslash, bool& carry) {
  if (backslash == 0) {  // nearly every block of a trace
    const std::uint64_t escaped = carry ? 1 : 0;
    carry = false;
    return escaped;
  }
  constexpr std::uint64_t kEven = 0x5555555555555555ULL;
  const std::uint64_t carried = carry ? 1 : 0;
  backslash &= ~carried;  // an escaped backslash escapes nothing
  const std::uint64_t follows_backslash = backslash << 1 | carried;
  const std::uint64_t odd_starts = backslash & ~kEven & ~follows_backslash;
  std::uint64_t even_runs_end = 0;
  carry = __builtin_add_overflow(odd_starts, backslash, &even_runs_end);
  return (kEven ^ (even_runs_end << 1)) & follows_backslash;
}

// The bytes [p, p + len) one by one, the way the splitter has always read them: a backslash
// escapes only inside a string. The same masks as the blocks' (BlockBits), for the last bytes of a
// chunk, for the scalar width, and for a block with a backslash outside a string (not JSON, but it
// splits as it always did).
BlockBits bytewise_block(const char* p, std::size_t len, BlockCarry& carry) {
  BlockBits out;
  bool in_string = carry.in_string, escape = carry.escaped;
  for (std::size_t k = 0; k < len; ++k) {
    const auto c = static_cast<unsigned char>(p[k]);
    const std::uint64_t bit = std::uint64_t{1} << k;
    if (in_string) {
      if (c < 0x20 || c >= 0x80) out.odd |= bit;
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c >= 0x80) out.odd |= bit;
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      out.brackets |= bit;
      out.open |= bit;
    } else if (c == '}' || c == ']') {
      out.brackets |= bit;
    }
  }
  carry = {in_string, escape};
  return out;
}

// Strings from the quotes that are not escaped, then the brackets outside them. The escapes are
// found whether in a string or not (as simdjson does: JSON has no backslash elsewhere); a block
// where one is outside a string is read again byte by byte.
// `parity` is prefix_xor, or a faster equal (the carry-less multiply of the AVX-512 width).
template <std::uint64_t (*parity)(std::uint64_t) = prefix_xor>
inline BlockBits finish_block(const BlockMasks& m, BlockCarry& carry, const char* p) {
  const BlockCarry before = carry;
  const std::uint64_t escaped = escaped_bytes(m.backslash, carry.escaped);
  const std::uint64_t strings = parity(m.quote & ~escaped) ^ (carry.in_string ? ~std::uint64_t{0} : 0);
  if ((m.backslash & ~strings) != 0) [[unlikely]] {
    carry = before;
    return bytewise_block(p, 64, carry);
  }
  carry.in_string = strings >> 63;
  return {(m.open | m.close) & ~strings, m.open, m.high | (m.control & strings)};
}

// Classifies `blocks` whole blocks from p into out[], carrying the string state from one to the next.
using ClassifyBlocks = void (*)(const char* p, std::size_t blocks, BlockBits* out, BlockCarry& carry);

void classify_scalar(const char* p, std::size_t blocks, BlockBits* out, BlockCarry& carry) {
  for (std::size_t k = 0; k < blocks; ++k) out[k] = bytewise_block(p + 64 * k, 64, carry);
}

// Eight bytes a word in plain C++ (SWAR), for CPUs without the x86 widths (aarch64: a GH200's
// Grace): each test leaves a byte's top bit set where it holds, exactly (no carry crosses from one
// byte to the next), and a multiplication gathers the eight top bits into a byte.
constexpr std::uint64_t kOnes = 0x0101010101010101ULL, kLow7 = 0x7F7F7F7F7F7F7F7FULL, kTop = 0x8080808080808080ULL;

// Top bit of each byte of w that is zero.
constexpr std::uint64_t zero_bytes(std::uint64_t w) {
  return ~(((w & kLow7) + kLow7) | w) & kTop;
}

// The eight top bits, as bits 0..7 (byte k's at bit k).
constexpr std::uint64_t gather_tops(std::uint64_t tops) {
  return ((tops >> 7) * 0x0102040810204080ULL) >> 56;
}

BlockMasks masks_swar(const char* p) {
  BlockMasks m;
  for (int k = 0; k < 8; ++k) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + std::ptrdiff_t{8} * k, 8);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);  // byte 0 lowest
    const std::uint64_t folded = w | (0x20 * kOnes);  // '{' and '[' alike, '}' and ']' alike
    // Bytes below 0x20: their low seven bits plus 0x60 stay under 0x80, and their own top bit is 0.
    const std::uint64_t below_20 = ~(((w & kLow7) + 0x60 * kOnes) | w) & kTop;
    const int at = 8 * k;
    m.quote |= gather_tops(zero_bytes(w ^ ('"' * kOnes))) << at;
    m.backslash |= gather_tops(zero_bytes(w ^ ('\\' * kOnes))) << at;
    m.open |= gather_tops(zero_bytes(folded ^ ('{' * kOnes))) << at;
    m.close |= gather_tops(zero_bytes(folded ^ ('}' * kOnes))) << at;
    // Most words of a trace hold neither (and a multiplication saved is an eighth of the word).
    if (const std::uint64_t high = w & kTop; high != 0) m.high |= gather_tops(high) << at;
    if (const std::uint64_t control = below_20 | (w & kTop); control != 0)
      m.control |= gather_tops(control) << at;  // as the x86 widths' signed compare
  }
  return m;
}

void classify_swar(const char* p, std::size_t blocks, BlockBits* out, BlockCarry& carry) {
  for (std::size_t k = 0; k < blocks; ++k) out[k] = finish_block(masks_swar(p + 64 * k), carry, p + 64 * k);
}

#if defined(__x86_64__) && defined(__SSE2__)
// '{' (0x7b) and '[' (0x5b) differ only in the bit 0x20, as do '}' (0x7d) and ']' (0x5d): with that
// bit set, one compare finds both of a pair (no other byte becomes 0x7b or 0x7d that way).
//
// Three widths, chosen at run time by what the CPU has (the build targets plain x86-64): each
// function carries its own target, and the generic code it calls is inlined into it.
// SSE2 is part of x86-64 itself.
inline BlockMasks masks_sse2(const char* p) {
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
  const __m128i bit20 = _mm_set1_epi8(0x20), open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
  const auto bits = [](__m128i eq, int k) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm_movemask_epi8(eq))) << (16 * k);
  };
  BlockMasks m;
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + std::ptrdiff_t{16} * k));
    const __m128i folded = _mm_or_si128(v, bit20);
    m.quote |= bits(_mm_cmpeq_epi8(v, quote), k);
    m.backslash |= bits(_mm_cmpeq_epi8(v, backslash), k);
    m.open |= bits(_mm_cmpeq_epi8(folded, open), k);
    m.close |= bits(_mm_cmpeq_epi8(folded, close), k);
    m.high |= bits(v, k);                            // the top bit of each byte
    m.control |= bits(_mm_cmplt_epi8(v, bit20), k);  // signed: below 0x20, or 0x80 and up
  }
  return m;
}

void classify_sse2(const char* p, std::size_t blocks, BlockBits* out, BlockCarry& carry) {
  for (std::size_t k = 0; k < blocks; ++k) out[k] = finish_block(masks_sse2(p + 64 * k), carry, p + 64 * k);
}

__attribute__((target("avx2"))) inline BlockMasks masks_avx2(const char* p) {
  const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\');
  const __m256i bit20 = _mm256_set1_epi8(0x20), open = _mm256_set1_epi8('{'), close = _mm256_set1_epi8('}');
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  const __m256i lo20 = _mm256_or_si256(lo, bit20), hi20 = _mm256_or_si256(hi, bit20);
  const auto bits = [](__m256i eq_lo, __m256i eq_hi) __attribute__((target("avx2"))) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm256_movemask_epi8(eq_lo))) |
           static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm256_movemask_epi8(eq_hi))) << 32;
  };
  BlockMasks m;
  m.quote = bits(_mm256_cmpeq_epi8(lo, quote), _mm256_cmpeq_epi8(hi, quote));
  m.backslash = bits(_mm256_cmpeq_epi8(lo, backslash), _mm256_cmpeq_epi8(hi, backslash));
  m.open = bits(_mm256_cmpeq_epi8(lo20, open), _mm256_cmpeq_epi8(hi20, open));
  m.close = bits(_mm256_cmpeq_epi8(lo20, close), _mm256_cmpeq_epi8(hi20, close));
  m.high = bits(lo, hi);
  m.control = bits(_mm256_cmpgt_epi8(bit20, lo), _mm256_cmpgt_epi8(bit20, hi));  // signed, as in SSE2
  return m;
}

__attribute__((target("avx2"))) void classify_avx2(const char* p, std::size_t blocks, BlockBits* out,
                                                   BlockCarry& carry) {
  for (std::size_t k = 0; k < blocks; ++k) out[k] = finish_block(masks_avx2(p + 64 * k), carry, p + 64 * k);
}

__attribute__((target("avx512bw"))) inline BlockMasks masks_avx512(const char* p) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i folded = _mm512_or_si512(v, _mm512_set1_epi8(0x20));
  BlockMasks m;
  m.quote = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('"'));
  m.backslash = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\'));
  m.open = _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('{'));
  m.close = _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('}'));
  m.high = _mm512_movepi8_mask(v);
  m.control = _mm512_cmplt_epi8_mask(v, _mm512_set1_epi8(0x20));  // signed, as in SSE2
  return m;
}

// prefix_xor in one instruction: the carry-less product with all ones (simdjson's way). Every CPU
// with AVX-512 has it. Of the AVX-512 width's target too, so that it is encoded as the rest of that
// function is (a call from AVX-512 code into plain SSE code costs a transition of the vector state).
__attribute__((target("avx512bw,pclmul"))) inline std::uint64_t prefix_xor_clmul(std::uint64_t x) {
  const __m128i all_ones = _mm_set1_epi8(static_cast<char>(0xFF));
  return static_cast<std::uint64_t>(
      _mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_set_epi64x(0, static_cast<long long>(x)), all_ones, 0)));
}

__attribute__((target("avx512bw,pclmul"))) void classify_avx512(const char* p, std::size_t blocks, BlockBits* out,
                                                                BlockCarry& carry) {
  for (std::size_t k = 0; k < blocks; ++k)
    out[k] = finish_block<prefix_xor_clmul>(masks_avx512(p + 64 * k), carry, p + 64 * k);
}

bool cpu_has(BlockScan scan) {
  __builtin_cpu_init();
  switch (scan) {
    case BlockScan::scalar:
    case BlockScan::swar:
    case BlockScan::sse2:
      return true;
    case BlockScan::avx2:
      return __builtin_cpu_supports("avx2");
    case BlockScan::avx512:
      return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("pclmul");
  }
  return false;
}

ClassifyBlocks classifier_of(BlockScan scan) {
  switch (scan) {
    case BlockScan::scalar:
      return classify_scalar;
    case BlockScan::swar:
      return classify_swar;
    case BlockScan::sse2:
      return classify_sse2;
    case BlockScan::avx2:
      return classify_avx2;
    case BlockScan::avx512:
      return classify_avx512;
  }
  return classify_sse2;
}
#else
bool cpu_has(BlockScan scan) {
  return scan == BlockScan::scalar || scan == BlockScan::swar;
}
ClassifyBlocks classifier_of(BlockScan scan) {
  return scan == BlockScan::swar ? classify_swar : classify_scalar;
}
#endif

BlockScan widest_scan() {
  for (const BlockScan scan : {BlockScan::avx512, BlockScan::avx2, BlockScan::sse2})
    if (cpu_has(scan)) return scan;
  return BlockScan::swar;
}

// The width in use, or -1 until it is first needed (constant-initialised, so that a static of
// another file may read it before this file's dynamic initialisation). Relaxed: the splitter reads
// it once a chunk, and a test sets it before it splits anything.
std::atomic<int> g_scan{-1};

}  // namespace

// The gzip decoders behind ChunkReader, one interface: input, inflate until the output is full, the
// input is used up or a member ends, and the next member. ISA-L's igzip (libisal, where the build
// found it) inflates three times as fast as zlib; zlib is the fallback, and the tests' check of it.
struct ChunkReader::Inflater {
  enum class Step { more, member_end };
  virtual ~Inflater() = default;
  virtual void input(char* data, std::size_t size) = 0;
  virtual std::size_t input_left() const = 0;
  virtual char* input_at() const = 0;  // the first byte of the input not used yet
  virtual bool zlib() const = 0;
  // Inflates into [out, out + capacity) from the input; `produced` grows by what it wrote.
  // InputError when the stream is corrupt.
  virtual Step inflate(char* out, std::size_t capacity, std::size_t& produced) = 0;
  virtual void next_member() = 0;
};

namespace {

// zlib: windowBits 15 + 32 reads gzip and zlib headers alike.
class ZlibInflater final : public ChunkReader::Inflater {
 public:
  ZlibInflater() {
    if (inflateInit2(&z_, 15 + 32) != Z_OK) throw SystemError("cannot start zlib's inflate");
  }
  ~ZlibInflater() override { inflateEnd(&z_); }
  ZlibInflater(const ZlibInflater&) = delete;
  ZlibInflater& operator=(const ZlibInflater&) = delete;
  void input(char* data, std::size_t size) override {
    z_.next_in = reinterpret_cast<Bytef*>(data);
    z_.avail_in = static_cast<uInt>(size);
  }
  std::size_t input_left() const override { return z_.avail_in; }
  char* input_at() const override { return reinterpret_cast<char*>(z_.next_in); }
  bool zlib() const override { return true; }
  Step inflate(char* out, std::size_t capacity, std::size_t& produced) override {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(capacity);
    const int rc = ::inflate(&z_, Z_NO_FLUSH);
    produced += capacity - z_.avail_out;
    if (rc == Z_STREAM_END) return Step::member_end;
    if (rc == Z_OK || rc == Z_BUF_ERROR) return Step::more;  // Z_BUF_ERROR: more input needed
    throw InputError(fmt::format("corrupt gzip stream ({})", z_.msg ? z_.msg : "inflate failed"));
  }
  void next_member() override {
    if (inflateReset(&z_) != Z_OK) throw SystemError("zlib's inflateReset failed");
  }

 private:
  z_stream z_{};
};

#if defined(TRAINFIT_HAVE_ISAL)
// ISA-L: the gzip header (name, comment, extra field, header CRC) and the trailer's CRC and size
// are read and checked, as zlib does.
class IsalInflater final : public ChunkReader::Inflater {
 public:
  IsalInflater() : state_(std::make_unique<inflate_state>()) { next_member(); }
  void input(char* data, std::size_t size) override {
    state_->next_in = reinterpret_cast<std::uint8_t*>(data);
    state_->avail_in = static_cast<std::uint32_t>(size);
  }
  std::size_t input_left() const override { return state_->avail_in; }
  char* input_at() const override { return reinterpret_cast<char*>(state_->next_in); }
  bool zlib() const override { return false; }
  Step inflate(char* out, std::size_t capacity, std::size_t& produced) override {
    state_->next_out = reinterpret_cast<std::uint8_t*>(out);
    state_->avail_out = static_cast<std::uint32_t>(capacity);
    const int rc = isal_inflate(state_.get());
    produced += capacity - state_->avail_out;
    if (rc < 0) throw InputError(fmt::format("corrupt gzip stream ({})", message(rc)));
    return state_->block_state == ISAL_BLOCK_FINISH ? Step::member_end : Step::more;
  }
  // The state made anew, but for the input (the next member's bytes), which the init forgets.
  void next_member() override {
    std::uint8_t* const next_in = state_->next_in;
    const std::uint32_t avail_in = state_->avail_in;
    isal_inflate_init(state_.get());
    state_->crc_flag = ISAL_GZIP;
    state_->next_in = next_in;
    state_->avail_in = avail_in;
  }

 private:
  std::unique_ptr<inflate_state> state_;  // 100 KiB: its history and buffers

  // zlib's words where they mean the same.
  static std::string_view message(int rc) {
    switch (rc) {
      case ISAL_INVALID_BLOCK:
        return "invalid block type";
      case ISAL_INVALID_SYMBOL:
        return "invalid code";
      case ISAL_INVALID_LOOKBACK:
        return "invalid distance too far back";
      case ISAL_INVALID_WRAPPER:
        return "incorrect header check";
      case ISAL_UNSUPPORTED_METHOD:
        return "unknown compression method";
      case ISAL_INCORRECT_CHECKSUM:
        return "incorrect data check";
      default:
        return "inflate failed";
    }
  }
};
#endif

bool have(Inflate inflate) {
#if defined(TRAINFIT_HAVE_ISAL)
  (void)inflate;
  return true;
#else
  return inflate == Inflate::zlib;
#endif
}

Inflate best_inflate() {
  return have(Inflate::isal) ? Inflate::isal : Inflate::zlib;
}

// The decoder in use, as g_scan is the width: -1 until first needed.
std::atomic<int> g_inflate{-1};

std::unique_ptr<ChunkReader::Inflater> make_inflater() {
#if defined(TRAINFIT_HAVE_ISAL)
  if (inflate_in_use() == Inflate::isal) return std::make_unique<IsalInflater>();
#endif
  return std::make_unique<ZlibInflater>();
}

}  // namespace

bool use_inflate(Inflate inflate) {
  if (!have(inflate)) return false;
  g_inflate.store(static_cast<int>(inflate), std::memory_order_relaxed);
  return true;
}

Inflate inflate_in_use() {
  int inflate = g_inflate.load(std::memory_order_relaxed);
  if (inflate < 0) {
    inflate = static_cast<int>(best_inflate());
    g_inflate.store(inflate, std::memory_order_relaxed);
  }
  return static_cast<Inflate>(inflate);
}

// errno's words, safely on any thread (strerror may share one buffer among threads, and files
// are read on several).
namespace {
std::string errno_text(int error) {
  return std::generic_category().message(error);
}
}  // namespace

// With one CPU, a second thread could only take turns with the first.
int usable_cpus() {
#if defined(__linux__)
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
  return CPU_COUNT(&allowed);
#else
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
#endif
}

// The file and its decoder. On the caller's thread, or on a ChunkPrefetcher's once the reader is
// made: nothing here is shared with the caller then, who sees only the chunks and their marks.
struct ChunkReader::Source {
  Source(const std::string& path, std::size_t chunk_bytes);
  ~Source() {
    if (fd >= 0) ::close(fd);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  // The next chunk into [out, out + capacity) (at least 2 bytes); empty at the end of the file.
  MadeChunk make(char* out, std::size_t capacity);

  std::string path;
  int fd = -1;
  bool regular = false;  // a regular file (not a pipe, a device, /proc)
  bool gzip = false, truncated = false, eof = false;
  bool member_ended = false;  // the last inflate ended a gzip member
  bool stream_ended = false;  // what follows the last member is not gzip
  bool trailing_bytes = false;
  std::uint64_t handed_out = 0;  // bytes of text made into chunks
  std::uint64_t skip = 0;        // bytes to inflate again without making them into chunks
  std::array<char, 2> head{};    // a plain file's first bytes, read to detect gzip
  std::size_t pending_head = 0;  // of them, not yet in a chunk
  std::uint64_t file_bytes = 0;
  std::string in;
  std::unique_ptr<Inflater> inflater;
  std::size_t read_raw(char* into, std::size_t capacity);
  std::size_t inflate_chunk(char* out, std::size_t capacity);
  bool member_follows();
};

ChunkReader::Source::Source(const std::string& path_in, std::size_t chunk_bytes) : path(path_in) {
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Missing: the user's to fix (exit 2). There but unreadable (permissions, I/O): the machine's
    // (exit 3, docs/trace.md).
    if (errno == ENOENT || errno == ENOTDIR)
      throw InputError(fmt::format("cannot read trace '{}': {}", path, errno_text(errno)));
    throw SystemError(fmt::format("cannot read trace '{}': {}", path, errno_text(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    regular = S_ISREG(st.st_mode);
    if (st.st_size > 0) file_bytes = static_cast<std::uint64_t>(st.st_size);
  }
  // The first two bytes: the text's, unless they are gzip's magic.
  const std::size_t got = read_raw(head.data(), head.size());
  gzip = got == 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b;
  if (gzip) {
    in.resize(chunk_bytes);  // a plain file needs no buffer of compressed bytes (its pages are never touched)
    std::memcpy(in.data(), head.data(), got);
    inflater = make_inflater();
    inflater->input(in.data(), got);
  } else {
    pending_head = got;
  }
}

std::size_t ChunkReader::Source::read_raw(char* into, std::size_t capacity) {
  std::size_t total = 0;
  while (total < capacity) {
    const ssize_t n = ::read(fd, into + total, capacity - total);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError(fmt::format("cannot read trace '{}': {}", path, errno_text(errno)));
    }
    if (n == 0) {
      eof = true;
      break;
    }
    total += static_cast<std::size_t>(n);
  }
  return total;
}

// Neither mark changes in a call that throws (both are set only on the way out), so the marks of a
// chunk before an exception are still the reader's after it.
MadeChunk ChunkReader::Source::make(char* out, std::size_t capacity) {
  if (!gzip) {
    const std::size_t head_bytes = pending_head;
    pending_head = 0;
    if (eof && head_bytes == 0) return {};
    std::memcpy(out, head.data(), head_bytes);
    const std::size_t got = eof ? 0 : read_raw(out + head_bytes, capacity - head_bytes);
    return {{out, head_bytes + got}, {}};
  }
  for (;;) {
    const std::size_t produced = inflate_chunk(out, capacity);
    if (produced == 0 && !stream_ended && eof && inflater->input_left() == 0 && !member_ended) {
      // Cut short. ISA-L may hold back the last bytes it could decode (a few literals waiting for
      // the bits of the next symbol), zlib hands out every one: the file is inflated again by
      // zlib, past what was handed out, so that a cut file reads the same whichever decoder runs.
      if (!inflater->zlib() && ::lseek(fd, 0, SEEK_SET) == 0) {
        inflater = std::make_unique<ZlibInflater>();
        eof = member_ended = false;
        skip = handed_out;
        continue;
      }
      truncated = true;
    }
    std::size_t skipped = std::min(skip, std::uint64_t{produced});
    skip -= skipped;
    if (produced > 0 && skipped == produced) continue;
    handed_out += produced - skipped;
    return {{out + skipped, produced - skipped}, {truncated, trailing_bytes}};
  }
}

std::size_t ChunkReader::Source::inflate_chunk(char* out, std::size_t capacity) {
  Inflater& decoder = *inflater;
  std::size_t produced = 0;
  while (produced < capacity && !stream_ended) {
    if (decoder.input_left() == 0) {
      if (eof) break;
      const std::size_t got = read_raw(in.data(), in.size());
      if (got == 0) break;
      decoder.input(in.data(), got);
    }
    member_ended = false;
    if (decoder.inflate(out + produced, capacity - produced, produced) == Inflater::Step::member_end) {
      member_ended = true;
      if (decoder.input_left() == 0 && eof) break;
      // gzip allows members one after another (cat a.gz b.gz): go on with the next. What follows
      // the last member and is not one (zeros a tool padded with, other bytes) ends the stream.
      if (!member_follows()) {
        stream_ended = trailing_bytes = true;
        break;
      }
      decoder.next_member();
    }
  }
  return produced;
}

bool ChunkReader::Source::member_follows() {
  Inflater& decoder = *inflater;
  if (decoder.input_left() < 2 && !eof) {  // its magic bytes may be in the next read
    const std::size_t left = decoder.input_left();
    std::memmove(in.data(), decoder.input_at(), left);
    const std::size_t got = read_raw(in.data() + left, in.size() - left);
    decoder.input(in.data(), left + got);
  }
  const char* const p = decoder.input_at();
  return decoder.input_left() >= 2 && static_cast<unsigned char>(p[0]) == 0x1f &&
         static_cast<unsigned char>(p[1]) == 0x8b;
}

ChunkReader::ChunkReader(const std::string& path, std::size_t chunk_bytes, Prefetch prefetch)
    : source_(std::make_unique<Source>(path, std::max<std::size_t>(chunk_bytes, 2))) {
  gzip_ = source_->gzip;
  file_bytes_ = source_->file_bytes;
  out_.resize(std::max<std::size_t>(chunk_bytes, 2));
  read_ahead_ = prefetch == Prefetch::on || (prefetch == Prefetch::automatic && gzip_ && source_->regular &&
                                             file_bytes_ >= kPrefetchFromGzipBytes && usable_cpus() >= 2);
}

ChunkReader::~ChunkReader() {
  prefetcher_.reset();  // its thread uses the source: joined first
}

std::string_view ChunkReader::next() {
  if (prefetcher_) {
    if (!out_.empty()) std::string().swap(out_);  // the first chunk's buffer: read, and not used again
    const MadeChunk chunk = prefetcher_->next();
    marks_ = chunk.marks;
    return chunk.text;
  }
  const bool start = std::exchange(read_ahead_, false);
  const MadeChunk chunk = source_->make(out_.data(), out_.size());
  marks_ = chunk.marks;
  // The first chunk is made here and the thread started after it, so that the thread's start and
  // its first chunk overlap the parsing of this one instead of being waited for.
  if (start && !chunk.text.empty()) {
    try {
      prefetcher_ = std::make_unique<ChunkPrefetcher>(
          [source = source_.get()](char* out, std::size_t capacity) { return source->make(out, capacity); },
          out_.size(), kPrefetchSlots);
    } catch (const std::system_error&) {
      // No thread to be had (a process at its limit): this thread reads on, as it does a small file.
    }
  }
  return chunk.text;
}

struct SharedChunks::State {
  struct Slot {
    std::unique_ptr<char[]> buffer;
    Chunk chunk;
  };
  std::size_t chunk_bytes = 0;
  std::unique_ptr<ChunkReader::Source> source;
  std::vector<std::string> buffers;  // a plain file's: one a thread

  // A gzip file's ring. Guarded by mutex, but for the buffer of the slot being made (by the one
  // thread making it) and the texts handed out (read by their threads, not written until dropped).
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Slot> slots;
  std::uint64_t made = 0;         // chunks made, the one that ends the stream not counted
  std::uint64_t next_offset = 0;  // in the text, of the next chunk
  bool making = false;
  bool ended = false;
  std::uint64_t end_at = UINT64_MAX;  // the index of the chunk that ended the stream, empty or an error
  Chunk end_chunk;
  std::exception_ptr end_error;
  std::vector<std::uint64_t> position;  // a thread's lowest chunk still to be asked for
  std::uint64_t unclaimed = 0;
  // The thread that inflates ahead of the readers (inflate_ahead), while there is room in the ring;
  // the readers then wait for their chunks instead of making them. It is started before any reader
  // and joined after them all, so they read whether it runs without the lock. stop: the
  // destructor's word.
  std::thread inflater;
  bool stop = false;

  void inflate_ahead() {
    std::unique_lock lock(mutex);
    while (!stop && !ended) {
      if (can_make())
        make_one(lock);
      else
        changed.wait(lock);
    }
  }

  std::uint64_t lowest() const {
    std::uint64_t low = unclaimed;
    for (const std::uint64_t p : position) low = std::min(low, p);
    return low;
  }
  bool can_make() const { return !ended && !making && made < lowest() + slots.size(); }
  // Makes the next chunk, the lock released meanwhile. can_make() held.
  void make_one(std::unique_lock<std::mutex>& lock) {
    making = true;
    Slot& slot = slots[made % slots.size()];
    lock.unlock();
    MadeChunk chunk;
    std::exception_ptr error;
    try {
      chunk = source->make(slot.buffer.get(), chunk_bytes);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    making = false;
    if (error || chunk.text.empty()) {
      ended = true;
      end_at = made;
      end_chunk = {{}, next_offset, chunk.marks};
      end_error = error;
    } else {
      slot.chunk = {chunk.text, next_offset, chunk.marks};
      next_offset += chunk.text.size();
      ++made;
    }
    changed.notify_all();
  }
};

SharedChunks::SharedChunks(const std::string& path, std::size_t chunk_bytes, std::size_t threads, std::size_t window)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.chunk_bytes = std::max<std::size_t>(chunk_bytes, 2);
  s.source = std::make_unique<ChunkReader::Source>(path, s.chunk_bytes);
  // Every thread at chunk 0 until its from() (or finished()): a thread that has claimed a segment
  // but not said so yet must find its chunks still in the ring, when another thread has claimed a
  // later one and moved `unclaimed` past it, and a thread inflating ahead runs as far as it may.
  s.position.assign(threads, 0);
  if (s.source->gzip) {
    s.slots.resize(std::max<std::size_t>(window, 2));
    for (State::Slot& slot : s.slots) slot.buffer = std::make_unique_for_overwrite<char[]>(s.chunk_bytes);
  } else {
    s.buffers.resize(threads);
  }
}

SharedChunks::~SharedChunks() {
  State& s = *state_;
  if (s.inflater.joinable()) {
    {
      const std::lock_guard lock(s.mutex);
      s.stop = true;
    }
    s.changed.notify_all();
    s.inflater.join();  // it writes the ring's slots: joined before they go
  }
}

bool SharedChunks::inflate_ahead() {
  State& s = *state_;
  if (s.source->gzip && !s.inflater.joinable()) {
    try {
      s.inflater = std::thread([&s] { s.inflate_ahead(); });
    } catch (const std::system_error&) {
      // No thread to be had: the readers inflate as they need chunks.
    }
  }
  return s.inflater.joinable();
}

bool SharedChunks::gzip() const {
  return state_->source->gzip;
}
bool SharedChunks::regular() const {
  return state_->source->regular;
}
std::uint64_t SharedChunks::file_bytes() const {
  return state_->source->file_bytes;
}

SharedChunks::Chunk SharedChunks::chunk(std::size_t t, std::size_t j) {
  State& s = *state_;
  if (!s.source->gzip) {
    // Where a ChunkReader's j-th read ends: chunk_bytes each, to the end of the file.
    std::string& buffer = s.buffers[t];
    buffer.resize(s.chunk_bytes);
    const std::uint64_t offset = std::uint64_t{j} * s.chunk_bytes;
    std::size_t got = 0;
    while (got < s.chunk_bytes) {
      const ssize_t n =
          ::pread(s.source->fd, buffer.data() + got, s.chunk_bytes - got, static_cast<off_t>(offset + got));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw SystemError(fmt::format("cannot read trace '{}': {}", s.source->path, errno_text(errno)));
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    return {{buffer.data(), got}, offset, {}};
  }
  std::unique_lock lock(s.mutex);
  if (s.position[t] != j) {
    s.position[t] = j;
    s.changed.notify_all();  // the chunks before it may be dropped now
  }
  for (;;) {
    if (s.ended && j >= s.end_at) {
      if (s.end_error) std::rethrow_exception(s.end_error);
      return s.end_chunk;
    }
    if (j < s.made) return s.slots[j % s.slots.size()].chunk;
    if (!s.inflater.joinable() && s.can_make())
      s.make_one(lock);
    else
      s.changed.wait(lock);
  }
}

void SharedChunks::from(std::size_t t, std::size_t j, std::size_t unclaimed, std::size_t through) {
  State& s = *state_;
  if (!s.source->gzip) return;
  std::unique_lock lock(s.mutex);
  s.position[t] = j;
  s.unclaimed = std::max<std::uint64_t>(s.unclaimed, unclaimed);
  s.changed.notify_all();
  // The thread's own chunks made by itself, so that it parses what is in its own cache, while the
  // others parse theirs; a chunk another thread is making is not waited for here. With a thread
  // inflating ahead, that thread makes them all.
  while (!s.inflater.joinable() && s.made <= through && s.can_make()) s.make_one(lock);
}

void SharedChunks::finished(std::size_t t) {
  State& s = *state_;
  if (!s.source->gzip) return;
  const std::lock_guard lock(s.mutex);
  s.position[t] = UINT64_MAX;
  s.changed.notify_all();
}

// The ring: `made` chunks were made into it, `released` of them were read and given back; the
// maker writes slot made % size while fewer than `size` are out, so never the one the caller
// reads (taken - 1, not yet released).
struct ChunkPrefetcher::Ring {
  struct Slot {
    std::unique_ptr<char[]> buffer;
    MadeChunk chunk;
    std::exception_ptr error;
  };
  Make make;
  std::size_t chunk_bytes = 0;
  std::vector<Slot> slots;
  // A full ring waits until this many slots are free, so that the caller, who frees one a chunk,
  // wakes the maker once every few chunks instead of at each (a futex call, and on a VM an interrupt
  // to the other CPU), with chunks still ready for it meanwhile.
  std::size_t refill_at = 1;

  std::mutex mutex;
  std::condition_variable made_one, freed;
  // Guarded by mutex.
  std::uint64_t made = 0, released = 0;
  bool stop = false, maker_waits = false, taker_waits = false;
  // The caller's alone.
  std::uint64_t taken = 0;
  bool done = false;
  std::thread thread;  // last: started once the rest is made

  void run();
};

ChunkPrefetcher::ChunkPrefetcher(Make make, std::size_t chunk_bytes, std::size_t slots)
    : ring_(std::make_unique<Ring>()) {
  Ring& r = *ring_;
  r.make = std::move(make);
  r.chunk_bytes = chunk_bytes;
  r.slots.resize(std::max<std::size_t>(slots, 2));
  // Not written here: the maker faults the pages in, on its own CPU.
  for (Ring::Slot& slot : r.slots) slot.buffer = std::make_unique_for_overwrite<char[]>(chunk_bytes);
  r.refill_at = r.slots.size() / 2;
  r.thread = std::thread([&r] { r.run(); });
}

ChunkPrefetcher::~ChunkPrefetcher() {
  {
    const std::lock_guard lock(ring_->mutex);
    ring_->stop = true;
  }
  ring_->freed.notify_one();
  // A chunk being made is finished first (one read or inflate of a chunk: well under a millisecond).
  ring_->thread.join();
}

void ChunkPrefetcher::Ring::run() {
  for (;;) {
    std::uint64_t at = 0;
    {
      std::unique_lock lock(mutex);
      if (made - released == slots.size()) {
        maker_waits = true;
        freed.wait(lock, [&] { return stop || slots.size() - (made - released) >= refill_at; });
        maker_waits = false;
      }
      if (stop) return;
      at = made;
    }
    Slot& slot = slots[at % slots.size()];
    bool last = false;
    try {
      slot.chunk = make(slot.buffer.get(), chunk_bytes);
      slot.error = nullptr;
      last = slot.chunk.text.empty();
    } catch (...) {
      slot.chunk = {};
      slot.error = std::current_exception();
      last = true;
    }
    {
      const std::lock_guard lock(mutex);
      ++made;
      if (taker_waits) made_one.notify_one();
    }
    if (last) return;  // the end, or an error: the source is not called again
  }
}

MadeChunk ChunkPrefetcher::next() {
  Ring& r = *ring_;
  if (r.done) return {};
  std::unique_lock lock(r.mutex);
  if (r.taken > 0) {
    ++r.released;  // the chunk handed out before is read: its slot is free
    if (r.maker_waits && r.slots.size() - (r.made - r.released) >= r.refill_at) r.freed.notify_one();
  }
  if (r.made == r.taken) {
    r.taker_waits = true;
    r.made_one.wait(lock, [&] { return r.made != r.taken; });
    r.taker_waits = false;
  }
  Ring::Slot& slot = r.slots[r.taken++ % r.slots.size()];
  lock.unlock();
  if (slot.error) {
    r.done = true;
    std::rethrow_exception(std::exchange(slot.error, nullptr));
  }
  if (slot.chunk.text.empty()) r.done = true;
  return slot.chunk;
}

bool use_block_scan(BlockScan scan) {
  if (!cpu_has(scan)) return false;
  g_scan.store(static_cast<int>(scan), std::memory_order_relaxed);
  return true;
}

BlockScan block_scan() {
  int scan = g_scan.load(std::memory_order_relaxed);
  if (scan < 0) {
    scan = static_cast<int>(widest_scan());
    g_scan.store(scan, std::memory_order_relaxed);
  }
  return static_cast<BlockScan>(scan);
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

void TraceSplitter::emit_event(std::string_view text, std::size_t begin, std::size_t end) {
  std::string_view event = text.substr(begin, end - begin);
  if (!pending_.empty()) {  // it began in an earlier chunk: begin is 0
    pending_.append(event);
    event = pending_;
  }
  max_event_bytes_ = std::max(max_event_bytes_, event.size());
  EventShape shape;
  if (nested_) {
    shape.last_nested_open = static_cast<std::size_t>(nested_open_at_ - event_at_);
    shape.last_nested_close = static_cast<std::size_t>(nested_close_at_ - event_at_);
  }
  shape.plain = plain_;
  on_event_(event, shape);
  pending_.clear();
}

namespace {

// The block [b, end) of a chunk as a splitter resumed at `at` (b <= at < end <= b + 64) classifies
// it: the bytes from `at` from a state outside strings, and of those before it only the non-ASCII
// ones (which count whatever the state). Its bits are the block's (bit k is byte b + k).
// `carry` becomes the state after the block.
BlockBits resumed_block(const char* b, std::size_t at, std::size_t end, BlockCarry& carry) {
  carry = {};
  BlockBits out = bytewise_block(b + at, end - at, carry);
  out.brackets <<= at;
  out.open <<= at;
  out.odd <<= at;
  for (std::size_t k = 0; k < at; ++k)
    if (static_cast<unsigned char>(b[k]) >= 0x80) out.odd |= std::uint64_t{1} << k;
  return out;
}

}  // namespace

std::size_t find_event_start(std::string_view chunk) {
  constexpr std::string_view kBetween = "},\n  {";
  for (std::size_t at = chunk.find(kBetween); at != std::string_view::npos; at = chunk.find(kBetween, at + 1)) {
    const std::string_view after = chunk.substr(at + kBetween.size());
    if (after.starts_with("\n    \"ph\": ") || after.starts_with("\"ph\": ")) return at + kBetween.size() - 1;
  }
  return std::string_view::npos;
}

void TraceSplitter::resume_between_events(std::string_view chunk, std::uint64_t offset, std::size_t at) {
  state_ = State::events_next;
  saw_events_ = true;
  in_string_ = escape_ = false;
  depth_ = 0;
  pending_.clear();
  offset_ = offset;
  feed_from(chunk, at, true);
}

std::size_t TraceSplitter::scan_events(std::string_view text, std::size_t i, bool resumed) {
  const ClassifyBlocks classify = classifier_of(block_scan());
  // The text is classified a piece at a time (16 KiB: the masks stay in the L1 cache), then walked.
  constexpr std::size_t kPieceBlocks = 256;
  std::array<BlockBits, kPieceBlocks> masks;
  const char* data = text.data();
  const std::size_t n = text.size();
  // Where the event in progress begins in this chunk: 0, with its head in pending_, when it began in
  // an earlier one (this is only entered in the middle of an event at a chunk's start).
  std::size_t event_begin = 0;
  std::size_t p = i;  // the next byte the states below have not seen
  BlockCarry carry{in_string_, escape_};
  // Resumed: the blocks from the chunk's start, the first one from i (resumed_block).
  const std::size_t origin = resumed ? i / 64 * 64 : i;
  for (std::size_t piece = origin; piece < n; piece += kPieceBlocks * 64) {
    const std::size_t piece_bytes = std::min(n - piece, kPieceBlocks * 64);
    const std::size_t whole = piece_bytes / 64, rest = piece_bytes % 64;
    if (piece < i) [[unlikely]] {
      const std::size_t first_end = std::min(piece + 64, n);
      masks[0] = resumed_block(data + piece, i - piece, first_end - piece, carry);
      if (first_end - piece == 64) {
        classify(data + piece + 64, whole - 1, masks.data() + 1, carry);
        if (rest > 0) masks[whole] = bytewise_block(data + piece + 64 * whole, rest, carry);
      }
    } else {
      classify(data + piece, whole, masks.data(), carry);
      if (rest > 0) masks[whole] = bytewise_block(data + piece + 64 * whole, rest, carry);  // the chunk's last bytes
    }
    in_string_ = carry.in_string;
    escape_ = carry.escaped;
    for (std::size_t block = 0; block * 64 < piece_bytes; ++block) {
      const std::size_t b = piece + 64 * block;
      const std::size_t block_end = std::min(b + 64, n);
      const BlockBits& m = masks[block];
      if (m.odd != 0 && state_ == State::event) plain_ = false;
      while (p < block_end) {
        if (state_ == State::events_next) {
          // Between events: commas and spaces only, byte by byte (a few bytes an event), but for
          // what Kineto writes there, checked at once. They hold no quote, so the block's string
          // mask stays right past them.
          if (block_end - p >= 5 && std::memcmp(data + p, ",\n  {", 5) == 0) p += 4;
          while (p < block_end && (is_space(data[p]) || data[p] == ',')) ++p;
          if (p == block_end) break;
          if (data[p] == ']') {
            state_ = bare_array_ ? State::done : State::object_key;
            in_string_ = escape_ = false;
            return p + 1;
          }
          if (data[p] != '{') fail("expected an event object in traceEvents", offset_ + p);
          if (offset_ + p >= stop_at_) [[unlikely]] {
            // The event another splitter resumed at (stop_at): this one stops there when its state
            // is the one that splitter assumed (its blocks on the chunk's grid; the block's bytes
            // before the event making it plain, or not, alike; traceEvents in an object, not a bare
            // array, whose end would end the text), and else goes on.
            BlockCarry guess;
            if (offset_ + p == stop_at_ && b % 64 == 0 && !bare_array_ &&
                (m.odd != 0) == (resumed_block(data + b, p - b, block_end - b, guess).odd != 0)) {
              state_ = State::stopped;
              return n;
            }
            stop_at_ = UINT64_MAX;
          }
          // An event always begins in the chunk that holds its first byte (and is carried over
          // whole when it goes on past the chunk).
          state_ = State::event;
          event_begin = p;
          event_at_ = offset_ + p;
          nested_ = false;
          plain_ = m.odd == 0;
          depth_ = 1;
          ++p;
          if (p == block_end) break;
        }
        // Inside an event: the brackets outside strings from p on, in order.
        std::uint64_t bits = m.brackets >> (p - b) << (p - b);  // p - b < 64
        bool closed = false;
        while (bits != 0) {
          const int k = __builtin_ctzll(bits);
          bits &= bits - 1;
          if ((m.open >> k) & 1) {
            if (++depth_ == 2) nested_open_at_ = offset_ + b + static_cast<std::size_t>(k);
          } else if (--depth_ == 1) {
            nested_close_at_ = offset_ + b + static_cast<std::size_t>(k);
            nested_ = true;
          } else if (depth_ == 0) {
            p = b + static_cast<std::size_t>(k) + 1;
            emit_event(text, event_begin, p);
            state_ = State::events_next;
            closed = true;
            break;
          }
        }
        if (!closed) break;
      }
      p = block_end;
    }
  }
  if (state_ == State::event) {
    pending_.append(data + event_begin, n - event_begin);
    if (pending_.size() > kMaxPieceBytes) fail("an event larger than 256 MiB", offset_ + n);
  }
  return n;
}

void TraceSplitter::feed(std::string_view text) {
  feed_from(text, 0, false);
}

void TraceSplitter::feed_from(std::string_view text, std::size_t i, bool resumed) {
  const std::size_t n = text.size();
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
          in_string_ = escape_ = false;
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
          in_string_ = escape_ = false;
          pending_.clear();
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
      case State::event:
        i = scan_events(text, i, std::exchange(resumed, false));
        break;
      case State::done:
      case State::stopped:
        i = n;  // what follows the top-level value is ignored
        break;
    }
  }
  offset_ += n;
}

}  // namespace trainfit::trace::detail
