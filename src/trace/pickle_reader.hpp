#pragma once
// A bounded reader of Python pickles that hold plain data: the file torch.cuda.memory._dump_snapshot
// writes (`pickle.dump` of a dict of lists, dicts, ints, floats, strings, booleans and None,
// protocol 2 to 5). It runs the opcodes that build such values and refuses every other one (a
// global, a constructor call, a persistent id): nothing in the file is ever executed or imported,
// which is what makes reading a stranger's pickle safe here when Python's own unpickler is not.
//
// The values are nodes of one arena, referred to by index; the pickle's memo makes them a graph
// (a frame list the snapshot shares between a thousand events is one node, referred to a thousand
// times), which is also what lets a reader of the tree cache its work per node. Strings are views
// into the input, which must outlive the tree. Every structure grows by at most one entry per
// input byte, so the memory a pickle can claim is bounded by its size.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit::trace::detail {

class PickleTree {
 public:
  enum class Kind : std::uint8_t { none, boolean, integer, big_integer, real, string, list, tuple, dict };
  using Id = std::uint32_t;
  static constexpr Id kNoNode = UINT32_MAX;

  Id root() const { return root_; }
  Kind kind(Id n) const { return nodes_[n].kind; }
  // The value of an integer (or boolean) node; big_integer nodes (past 64 bits) have none.
  std::int64_t integer(Id n) const { return nodes_[n].integer; }
  double real(Id n) const { return nodes_[n].real; }
  std::string_view string(Id n) const { return {input_ + nodes_[n].offset, nodes_[n].length}; }
  // A list's or tuple's items; a dict's keys and values, interleaved (key, value, key, value...).
  const std::vector<Id>& items(Id n) const { return children_[nodes_[n].children]; }
  // The value a dict node holds under a string key, or kNoNode (also when `n` is not a dict).
  Id get(Id n, std::string_view key) const;
  std::size_t size() const { return nodes_.size(); }

 private:
  friend class PickleMachine;
  // 24 bytes: a snapshot is millions of them, and their pages are most of the time a read takes.
  struct Node {
    Kind kind = Kind::none;
    std::uint32_t children = 0;  // index into children_ (lists, tuples, dicts)
    union {
      std::int64_t integer = 0;
      double real;
      std::uint64_t offset;  // a string's, into the input
    };
    std::uint64_t length = 0;
  };
  const char* input_ = nullptr;
  std::vector<Node> nodes_;
  std::vector<std::vector<Id>> children_;
  Id root_ = kNoNode;
};

// The tree of a whole pickle (up to its STOP opcode). InputError, naming `source`, the opcode and
// its byte offset, for anything that is not a pickle of plain data or is cut short.
PickleTree read_pickle(std::string_view bytes, const std::string& source);

// Whether `bytes` begin the way a pickle of protocol 2 or later does (PROTO, then its version).
bool looks_like_pickle(std::string_view bytes);

}  // namespace trainfit::trace::detail
