// The pickle opcodes of plain data (Python's Lib/pickle.py and pickletools.py name and document
// each): protocol 2 to 5 as `pickle.dump` writes a dict of builtin values, plus the protocol 0/1
// container opcodes that cost nothing to accept. Anything that would import or call is refused.
#include "trace/pickle_reader.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "trainfit/error.hpp"

namespace trainfit::trace::detail {

PickleTree::Id PickleTree::get(Id n, std::string_view key) const {
  if (n >= nodes_.size() || nodes_[n].kind != Kind::dict) return kNoNode;
  const std::vector<Id>& kv = children_[nodes_[n].children];
  for (std::size_t k = 0; k + 1 < kv.size(); k += 2)
    if (nodes_[kv[k]].kind == Kind::string && string(kv[k]) == key) return kv[k + 1];
  return kNoNode;
}

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && static_cast<unsigned char>(bytes[1]) >= 2 &&
         static_cast<unsigned char>(bytes[1]) <= 5;
}

class PickleMachine {
 public:
  PickleMachine(std::string_view in, const std::string& source) : in_(in), source_(source) {
    // A snapshot's pickle spends some 6 bytes a value and 40 a container (measured on synthetic
    // and H200 snapshots): room for them up front spares the copies of growing one node at a time.
    tree_.input_ = in.data();
    tree_.nodes_.reserve(in.size() / 6);
    tree_.children_.reserve(in.size() / 40);
  }

  PickleTree run() {
    while (true) {
      if (pos_ >= in_.size()) fail("the pickle ends before its STOP opcode (a file cut short?)");
      opcode_at_ = pos_;
      const auto op = static_cast<unsigned char>(in_[pos_++]);
      switch (op) {
        case 0x80: {  // PROTO
          const unsigned version = u8();
          if (version > 5) fail(fmt::format("pickle protocol {}; this reader knows 2 to 5", version));
          break;
        }
        case 0x95:  // FRAME: a length hint for buffered readers
          (void)take(8);
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("STOP with other than one value on the stack");
          tree_.root_ = stack_.back();
          return std::move(tree_);
        case 'N': push(leaf(PickleTree::Kind::none)); break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          const PickleTree::Id n = leaf(PickleTree::Kind::boolean);
          tree_.nodes_[n].integer = op == 0x88 ? 1 : 0;
          push(n);
          break;
        }
        case 'J': push(integer(static_cast<std::int32_t>(little(4)))); break;  // BININT
        case 'K': push(integer(static_cast<std::int64_t>(u8()))); break;      // BININT1
        case 'M': push(integer(static_cast<std::int64_t>(little(2)))); break; // BININT2
        case 0x8a: push(long_integer(u8())); break;                           // LONG1
        case 0x8b: push(long_integer(little(4))); break;                      // LONG4
        case 'G': {                                                           // BINFLOAT: big-endian double
          std::uint64_t bits = 0;
          for (const char c : take(8)) bits = bits << 8 | static_cast<unsigned char>(c);
          double d;
          std::memcpy(&d, &bits, sizeof d);
          const PickleTree::Id n = leaf(PickleTree::Kind::real);
          tree_.nodes_[n].real = d;
          push(n);
          break;
        }
        case 0x8c: push(text(u8())); break;        // SHORT_BINUNICODE
        case 'X': push(text(little(4))); break;    // BINUNICODE
        case 0x8d: push(text(little(8))); break;   // BINUNICODE8
        case 'C': push(text(u8())); break;         // SHORT_BINBYTES (kept as text: no snapshot field is bytes)
        case 'B': push(text(little(4))); break;    // BINBYTES
        case 0x8e: push(text(little(8))); break;   // BINBYTES8
        case ']': push(container(PickleTree::Kind::list)); break;   // EMPTY_LIST
        case '}': push(container(PickleTree::Kind::dict)); break;   // EMPTY_DICT
        case ')': push(container(PickleTree::Kind::tuple)); break;  // EMPTY_TUPLE
        case 0x8f: push(container(PickleTree::Kind::list)); break;  // EMPTY_SET: a list of its items
        case '(': marks_.push_back(stack_.size()); break;           // MARK
        case 'a': {                                                 // APPEND
          const PickleTree::Id v = pop();
          items_of(top(), PickleTree::Kind::list).push_back(v);
          break;
        }
        case 'e':           // APPENDS
        case 0x90: {        // ADDITEMS
          const std::size_t from = pop_mark();
          if (from == 0) fail("APPENDS without a list under its mark");
          std::vector<PickleTree::Id>& items = items_of(stack_[from - 1], PickleTree::Kind::list);
          items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
          stack_.resize(from);
          break;
        }
        case 's': {  // SETITEM
          const PickleTree::Id v = pop();
          const PickleTree::Id k = pop();
          std::vector<PickleTree::Id>& kv = items_of(top(), PickleTree::Kind::dict);
          kv.push_back(k);
          kv.push_back(v);
          break;
        }
        case 'u': {  // SETITEMS
          const std::size_t from = pop_mark();
          if (from == 0 || (stack_.size() - from) % 2 != 0) fail("SETITEMS without a dict, or with an odd count");
          std::vector<PickleTree::Id>& kv = items_of(stack_[from - 1], PickleTree::Kind::dict);
          kv.insert(kv.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
          stack_.resize(from);
          break;
        }
        case 'l':           // LIST
        case 't':           // TUPLE
        case 0x91:          // FROZENSET
        case 'd': {         // DICT
          const std::size_t from = pop_mark();
          const auto kind = op == 'd' ? PickleTree::Kind::dict
                                      : op == 't' ? PickleTree::Kind::tuple : PickleTree::Kind::list;
          if (kind == PickleTree::Kind::dict && (stack_.size() - from) % 2 != 0) fail("DICT with an odd count");
          const PickleTree::Id n = container(kind);
          tree_.children_[tree_.nodes_[n].children].assign(stack_.begin() + static_cast<std::ptrdiff_t>(from),
                                                           stack_.end());
          stack_.resize(from);
          push(n);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
          const std::size_t n_items = op - 0x84u;
          if (stack_.size() < n_items + floor()) fail("a tuple of more values than the stack holds");
          const PickleTree::Id n = container(PickleTree::Kind::tuple);
          tree_.children_[tree_.nodes_[n].children].assign(stack_.end() - static_cast<std::ptrdiff_t>(n_items),
                                                           stack_.end());
          stack_.resize(stack_.size() - n_items);
          push(n);
          break;
        }
        case 0x94: put(memo_.size()); break;       // MEMOIZE
        case 'q': put(u8()); break;                 // BINPUT
        case 'r': put(little(4)); break;            // LONG_BINPUT
        case 'h': push(get(u8())); break;           // BINGET
        case 'j': push(get(little(4))); break;      // LONG_BINGET
        case '0': (void)pop(); break;               // POP
        case '1': stack_.resize(pop_mark()); break; // POP_MARK
        case '2': push(top()); break;               // DUP
        default:
          fail(fmt::format("opcode 0x{:02x} ('{}'): the pickle holds something other than dicts, lists, numbers "
                           "and strings (an object, a global or a call), which is not a memory snapshot and is "
                           "not run here",
                           op, name_of(op)));
      }
    }
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw InputError(fmt::format("snapshot '{}': not a pickle of plain data at byte {}: {}", source_, opcode_at_, what));
  }

  static std::string_view name_of(unsigned char op) {
    switch (op) {
      case 'c': return "GLOBAL";
      case 0x93: return "STACK_GLOBAL";
      case 'R': return "REDUCE";
      case 'b': return "BUILD";
      case 0x81: return "NEWOBJ";
      case 0x92: return "NEWOBJ_EX";
      case 'i': return "INST";
      case 'o': return "OBJ";
      case 'P':
      case 'Q': return "PERSID";
      default: return "unknown here";
    }
  }

  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - pos_) fail("the pickle ends inside an opcode's argument (a file cut short?)");
    const std::string_view s = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  unsigned u8() { return static_cast<unsigned char>(take(1)[0]); }
  std::uint64_t little(std::size_t bytes) {
    const std::string_view s = take(bytes);
    std::uint64_t v = 0;
    for (std::size_t k = bytes; k-- > 0;) v = v << 8 | static_cast<unsigned char>(s[k]);
    return v;
  }

  PickleTree::Id leaf(PickleTree::Kind kind) {
    if (tree_.nodes_.size() >= std::numeric_limits<PickleTree::Id>::max() - 1) fail("more than 4 billion values");
    tree_.nodes_.push_back({});
    tree_.nodes_.back().kind = kind;
    return static_cast<PickleTree::Id>(tree_.nodes_.size() - 1);
  }
  PickleTree::Id integer(std::int64_t v) {
    const PickleTree::Id n = leaf(PickleTree::Kind::integer);
    tree_.nodes_[n].integer = v;
    return n;
  }
  // LONG1/LONG4: little-endian two's complement of n bytes; past 8 bytes a big_integer.
  PickleTree::Id long_integer(std::uint64_t n) {
    const std::string_view s = take(n);
    if (n > 8) return leaf(PickleTree::Kind::big_integer);
    std::uint64_t v = 0;
    for (std::size_t k = s.size(); k-- > 0;) v = v << 8 | static_cast<unsigned char>(s[k]);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(s.back()) & 0x80) != 0) v |= ~std::uint64_t{0} << (8 * n);
    return integer(static_cast<std::int64_t>(v));
  }
  PickleTree::Id text(std::uint64_t n) {
    const std::string_view s = take(n);
    const PickleTree::Id id = leaf(PickleTree::Kind::string);
    tree_.nodes_[id].offset = static_cast<std::uint64_t>(s.data() - in_.data());
    tree_.nodes_[id].length = s.size();
    return id;
  }
  PickleTree::Id container(PickleTree::Kind kind) {
    const PickleTree::Id n = leaf(kind);
    tree_.nodes_[n].children = static_cast<std::uint32_t>(tree_.children_.size());
    tree_.children_.emplace_back();
    return n;
  }
  std::vector<PickleTree::Id>& items_of(PickleTree::Id n, PickleTree::Kind kind) {
    if (tree_.nodes_[n].kind != kind)
      fail(kind == PickleTree::Kind::dict ? "items set on something that is not a dict"
                                          : "items appended to something that is not a list");
    return tree_.children_[tree_.nodes_[n].children];
  }

  // The stack above the innermost mark is what opcodes may pop; below it belongs to the mark.
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PickleTree::Id n) { stack_.push_back(n); }
  PickleTree::Id top() const {
    if (stack_.size() <= floor()) fail("an opcode needs a value and the stack has none");
    return stack_.back();
  }
  PickleTree::Id pop() {
    const PickleTree::Id n = top();
    stack_.pop_back();
    return n;
  }
  std::size_t pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK and there is none");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  void put(std::uint64_t index) {
    // Memo indices count the values memoised so far; one past every byte of the input cannot be.
    if (index > in_.size()) fail(fmt::format("memo index {} past anything this pickle could have stored", index));
    if (index >= memo_.size()) memo_.resize(static_cast<std::size_t>(index) + 1, PickleTree::kNoNode);
    memo_[static_cast<std::size_t>(index)] = top();
  }
  PickleTree::Id get(std::uint64_t index) const {
    if (index >= memo_.size() || memo_[static_cast<std::size_t>(index)] == PickleTree::kNoNode)
      fail(fmt::format("memo index {} read before it was stored", index));
    return memo_[static_cast<std::size_t>(index)];
  }

  std::string_view in_;
  const std::string& source_;
  std::size_t pos_ = 0, opcode_at_ = 0;
  std::vector<PickleTree::Id> stack_, memo_;
  std::vector<std::size_t> marks_;
  PickleTree tree_;
};

PickleTree read_pickle(std::string_view bytes, const std::string& source) { return PickleMachine(bytes, source).run(); }

}  // namespace trainfit::trace::detail
