#pragma once
// Streaming pieces of `trainfit trace` (docs/trace.md, "How a trace is read"): a reader that hands
// out the uncompressed bytes of a file in chunks (gzip detected by its magic bytes and inflated by
// ISA-L's igzip, or zlib, as it goes), and a splitter that cuts a Chrome trace's top-level object into the complete
// objects of its traceEvents array and its other members, tracking strings, escapes and depth. No
// DOM of the whole file is ever built: each piece is parsed on its own (simdjson), so resident
// memory is the chunk (a ring of a few when a thread reads ahead), one batch of events and what the
// analysis keeps of them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace trainfit::trace::detail {

// What a chunk's source says of itself once the chunk is made: a gzip stream that ended early (no
// more chunks follow), bytes after its last member that are not another.
struct SourceMarks {
  bool truncated = false, trailing_bytes = false;
};

// One chunk as a source makes it: its text (in the buffer it was given; empty at the end) and the
// source's marks after it.
struct MadeChunk {
  std::string_view text;
  SourceMarks marks;
};

// Runs a source of chunks on a thread of its own, ahead of the caller, into a ring of buffers, so
// that making the next chunks (a gzip file's inflate) takes place on another CPU while the caller
// parses the current one (docs/trace.md, "Speed").
// next() hands out exactly what `make` made, chunk after chunk in the order made; an exception
// `make` threw is thrown by next() in its place, after the chunks before it were handed out, and
// the source is not called again after it nor after the empty chunk that ends it. The destructor
// stops the thread and joins it, wherever the caller is in the stream.
class ChunkPrefetcher {
 public:
  // Makes the next chunk into [out, out + capacity). Called on the prefetcher's thread only.
  using Make = std::function<MadeChunk(char* out, std::size_t capacity)>;
  // `slots` buffers of `chunk_bytes`, at least 2: the one the caller reads, and one being made.
  // std::system_error when the thread cannot be started.
  ChunkPrefetcher(Make make, std::size_t chunk_bytes, std::size_t slots);
  ~ChunkPrefetcher();
  ChunkPrefetcher(const ChunkPrefetcher&) = delete;
  ChunkPrefetcher& operator=(const ChunkPrefetcher&) = delete;
  // The next chunk; empty at the end (and from then on). Valid until the next call.
  MadeChunk next();

 private:
  struct Ring;  // the buffers, the thread and what they share (json_stream.cpp)
  std::unique_ptr<Ring> ring_;
};

// A file's bytes, uncompressed, in chunks. SystemError when the file cannot be opened or read;
// InputError when a gzip stream is corrupt. A gzip stream that ends early is not an error here:
// truncated() says so after the last chunk; nor are bytes after its last member that are not
// another (trailing_bytes()). Either says what the reader knew when it made the last chunk handed
// out, whether or not it read ahead.
//
// A large gzip file is read ahead by a ChunkPrefetcher (Prefetch::automatic): the same chunks, of
// the same size, and the same errors at the same place in the stream, but inflated on a second CPU.
// Plain files, small ones and other kinds (pipes, /proc) are read on the caller's thread: there a
// thread costs more than it saves, or could wait on a writer after the caller has stopped.
class ChunkReader {
 public:
  struct Inflater;  // the gzip decoder (json_stream.cpp)
  struct Source;    // the file and its decoder: what makes the chunks (json_stream.cpp)
  enum class Prefetch { automatic, off, on };
  // Prefetch::automatic reads ahead a regular gzip file of at least this many bytes on disk
  // (compressed; some 6 MB of text), when the process may use two CPUs or more. Measured in
  // docs/trace.md, "Speed": below it the thread costs what it saves, and for a plain file the copy
  // that read(2) would move off the caller's CPU saves less than the caller then loses reading
  // chunks that another CPU wrote. Prefetch::on reads ahead any file (the tests, the benchmark).
  static constexpr std::uint64_t kPrefetchFromGzipBytes = std::uint64_t{512} << 10;
  static constexpr std::size_t kPrefetchSlots = 4;
  explicit ChunkReader(const std::string& path, std::size_t chunk_bytes = 256 << 10,
                       Prefetch prefetch = Prefetch::automatic);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  // The next chunk; empty at the end of the file. Valid until the next call.
  std::string_view next();
  bool gzip() const { return gzip_; }
  // The file's size on disk (compressed, for gzip), as it was when opened.
  std::uint64_t file_bytes() const { return file_bytes_; }
  bool truncated() const { return marks_.truncated; }
  bool trailing_bytes() const { return marks_.trailing_bytes; }
  // Whether a thread reads ahead: from the second chunk on (the first is made on the caller's).
  bool prefetching() const { return read_ahead_ || prefetcher_ != nullptr; }

 private:
  bool gzip_ = false;
  std::uint64_t file_bytes_ = 0;
  bool read_ahead_ = false;                      // a thread is to be started after the first chunk
  SourceMarks marks_;                            // as of the last chunk handed out
  std::string out_;                              // the chunk made on the caller's thread
  std::unique_ptr<Source> source_;               // used by the prefetcher's thread while there is one
  std::unique_ptr<ChunkPrefetcher> prefetcher_;  // declared after source_: stopped before it goes
};

// The chunks of a file for several threads at once (kineto_reader.cpp's reading on several
// threads): chunk j is, byte for byte and with the same marks, the j-th that a ChunkReader of the
// same chunk size hands out (Prefetch::off), at `offset` in the text. A plain file's chunks are
// read where they lie (pread), each thread into its own buffer. A gzip file is inflated in order,
// by whichever thread needs a chunk not made yet, into a ring of `window` chunks shared by all; a
// chunk is dropped once no thread can need it again (every thread has moved past it, and the
// chunks left to claim begin after it). Regular files only (a pipe cannot be read twice).
class SharedChunks {
 public:
  struct Chunk {
    std::string_view text;  // empty past the end
    std::uint64_t offset = 0;
    SourceMarks marks;
  };
  // SystemError when the file cannot be opened (InputError when it does not exist, as ChunkReader).
  SharedChunks(const std::string& path, std::size_t chunk_bytes, std::size_t threads, std::size_t window);
  ~SharedChunks();
  SharedChunks(const SharedChunks&) = delete;
  SharedChunks& operator=(const SharedChunks&) = delete;
  bool gzip() const;
  bool regular() const;
  std::uint64_t file_bytes() const;
  // Thread t's chunk j; valid until its next call. Thread t asks for chunks in increasing order from
  // where it said it begins (from). InputError for a corrupt gzip stream, SystemError for a failed
  // read: thrown for the chunk where a ChunkReader would have thrown it, and for every one after.
  Chunk chunk(std::size_t t, std::size_t j);
  // Thread t begins reading at chunk j (none before it will be asked for by t again; nor by any
  // thread, below `unclaimed`, where the chunks not claimed by any thread yet begin), and has chunks
  // up to `through` made now where the ring has room for them.
  void from(std::size_t t, std::size_t j, std::size_t unclaimed, std::size_t through);
  // Thread t asks for no more chunks.
  void finished(std::size_t t);
  // A gzip file: starts a thread of its own that inflates the chunks in order, as far ahead of the
  // readers as the ring has room, so that no reader waits for the decoder while another holds it;
  // the readers then only parse. False when it is not gzip, or no thread could be started (the
  // readers then inflate as they need chunks, as without it). The chunks are the same either way.
  // Called before any thread reads.
  bool inflate_ahead();

 private:
  struct State;  // the file, the decoder and the ring (json_stream.cpp)
  std::unique_ptr<State> state_;
};

// The CPUs this process may run on (taskset, cgroups' cpusets).
int usable_cpus();

// Which decoder inflates gzip: ISA-L's igzip where the build has it (libisal), else zlib. The tests
// and the benchmark pick each in turn; use_inflate is false when the build lacks the one asked for,
// and then changes nothing. The choice holds for the whole process.
enum class Inflate { zlib, isal };
bool use_inflate(Inflate inflate);
Inflate inflate_in_use();

// How wide the splitter classifies bytes: the widest the CPU has, chosen once at run time (the build
// targets plain x86-64): byte by byte, eight bytes a word in plain C++ (what other CPUs use), or
// SSE2, AVX2 and AVX-512 on x86-64. The tests and the benchmark pick each in turn; use_block_scan
// is false when this CPU (or build) lacks the one asked for, and then changes nothing. The choice
// holds for the whole process.
enum class BlockScan { scalar, swar, sse2, avx2, avx512 };
bool use_block_scan(BlockScan scan);
BlockScan block_scan();

// What the splitter learnt of an event on its way through, for the reader's fast path
// (kineto_reader.cpp), which then need not look for it again.
struct EventShape {
  static constexpr std::size_t npos = std::string_view::npos;
  // The last value nested in the event (its args, where Kineto writes them): the offsets in the
  // event of its opening and closing brackets; npos when there is none.
  std::size_t last_nested_open = npos, last_nested_close = npos;
  // No byte of the event is non-ASCII and none inside its strings is a control character (as far
  // as the splitter saw: it looks at whole 64-byte blocks, so a neighbour's byte may clear it too).
  // Only such events are read by the fast path; simdjson validates the others (UTF-8 included).
  bool plain = true;
};

// Where an event of traceEvents may begin in a chunk, to start a thread there: the '{' of the
// first `},\n  {` followed by `\n    "ph": ` (what libkineto writes between two events) or by
// `"ph": ` (the same on one line, as the synthetic traces write them), wholly in the chunk; npos
// when there is none. In JSON a raw line break cannot be inside a string: such bytes are between
// two values, and of the ones at that indent, nearly always between two events.
std::size_t find_event_start(std::string_view chunk);

// Cuts {"traceEvents": [ {...}, {...} ], "deviceProperties": [...], ...} (or a bare array of
// events, which the Chrome trace format also allows) into pieces as bytes arrive.
class TraceSplitter {
 public:
  // on_event gets each complete object of traceEvents, with its shape; on_member each other
  // top-level member whose value is at most max_member_bytes (a larger one is skipped, and counted).
  using EventSink = std::function<void(std::string_view event, const EventShape& shape)>;
  using MemberSink = std::function<void(std::string_view key, std::string_view value)>;
  TraceSplitter(EventSink on_event, MemberSink on_member, std::size_t max_member_bytes = 64 << 20);

  // Feeds the next bytes. InputError when the text cannot be a trace (the message says where).
  void feed(std::string_view bytes);
  // After the last feed: whether the top-level value was closed. A file cut short leaves it open.
  bool complete() const { return state_ == State::done; }
  bool saw_events() const { return saw_events_; }
  std::uint64_t bytes() const { return offset_; }
  std::uint64_t skipped_members() const { return skipped_members_; }
  std::size_t max_event_bytes() const { return max_event_bytes_; }

  // For reading a trace on several threads (kineto_reader.cpp; docs/trace.md, "How a trace is
  // read"), where a thread begins in the middle of traceEvents on a guess of where an event begins
  // (find_event_start) and the thread reading the text before it checks the guess.
  //
  // Feeds a chunk that begins at byte `offset` of the text, from `at` on, as if the bytes before had
  // left the splitter between two events of traceEvents, outside any string. The 64-byte blocks fall
  // where they fall for one splitter fed the whole text in the same chunks (from the chunk's
  // start), so that events split, and are found plain or not (EventShape), as they would be there,
  // whenever the guess holds (stop_at says whether it does).
  void resume_between_events(std::string_view chunk, std::uint64_t offset, std::size_t at);
  // Stops before the event that begins at byte `at` of the text, if one does there and the splitter
  // is then in the state resume_between_events assumes (between events, its blocks on the chunk's
  // grid, and the block's bytes before `at` making the event plain or not alike): stopped() is then
  // true, and the rest of what is fed is ignored. Otherwise it goes on as before, and bytes() passes
  // `at` without stopped(): the guess of a thread that began at `at` was wrong.
  void stop_at(std::uint64_t at) { stop_at_ = at; }
  bool stopped() const { return state_ == State::stopped; }

 private:
  enum class State {
    start,         // before the top-level value
    object_key,    // inside the top-level object, expecting a key, a comma or '}'
    key,           // inside a key's string
    colon,         // after a key
    value_start,   // after the colon
    member_value,  // inside a member's value other than traceEvents
    events_next,   // inside traceEvents, between events
    event,         // inside an event object
    done,
    stopped,  // at stop_at's event: what follows is another splitter's
  };
  EventSink on_event_;
  MemberSink on_member_;
  std::size_t max_member_bytes_;
  State state_ = State::start;
  bool bare_array_ = false;
  bool saw_events_ = false;
  // The piece in progress (an event, a member's value) when it spans chunks.
  std::string pending_;
  bool pending_overflow_ = false;
  std::string key_;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  bool member_scalar_ = false;  // the member's value is a number, true, false or null
  std::uint64_t offset_ = 0;
  // The event in progress: where it, and its last nested value, begin and end in the whole text.
  std::uint64_t event_at_ = 0, nested_open_at_ = 0, nested_close_at_ = 0;
  bool nested_ = false, plain_ = true;
  std::uint64_t skipped_members_ = 0;
  std::size_t max_event_bytes_ = 0;
  std::uint64_t stop_at_ = UINT64_MAX;

  [[noreturn]] void fail(std::string_view what, std::uint64_t at) const;
  // Scans a JSON value's bytes from `i` (depth and strings), returning where the value ends (one
  // past its closing byte) or npos when it goes on past `text`. Byte by byte: for the top-level
  // members, which are small.
  std::size_t scan_value(std::string_view text, std::size_t i);
  // The traceEvents array from `i` (states events_next and event), 64 bytes at a time: each block
  // is classified into bit masks (quotes, backslashes, brackets), strings are found from the
  // quotes with the in-string state carried from block to block (in_string_, escape_), and only
  // the brackets outside strings are visited. Returns where the byte-wise states go on (after the
  // array's ']'), or text.size() when the array goes on past `text`.
  // `resumed`: i is where resume_between_events begins, and the blocks are on the chunk's grid.
  std::size_t scan_events(std::string_view text, std::size_t i, bool resumed = false);
  // The feed's byte-wise states from `i` on.
  void feed_from(std::string_view text, std::size_t i, bool resumed);
  void emit_event(std::string_view text, std::size_t begin, std::size_t end);
};

}  // namespace trainfit::trace::detail
