// The pickle reader of `trainfit trace --snapshot`: the opcodes of plain data as Python writes them,
// the memo's shared values, and everything else refused with the opcode and its offset named.
#include <gtest/gtest.h>

#include <string>

#include "trace/pickle_reader.hpp"
#include "trainfit/error.hpp"

namespace {

using trainfit::trace::detail::looks_like_pickle;
using trainfit::trace::detail::PickleTree;
using trainfit::trace::detail::read_pickle;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (const int c : b) s += static_cast<char>(c);
  return s;
}

std::string error_of(const std::string& pickle) {
  try {
    (void)read_pickle(pickle, "p");
  } catch (const trainfit::InputError& e) {
    return e.what();
  }
  return "no error";
}

// pickle.dumps({"a": [1, -2, 300, 2**40, -(2**40), 1.5, True, None, "xy"], "b": (7,)}, protocol=4), by hand:
// PROTO 4, EMPTY_DICT, MEMOIZE, MARK, "a", MEMOIZE, EMPTY_LIST, MEMOIZE, MARK, BININT1 1, BININT -2,
// BININT2 300, LONG1 2**40, LONG1 -(2**40), BINFLOAT 1.5, NEWTRUE, NONE, "xy", MEMOIZE, APPENDS,
// "b", MEMOIZE, BININT1 7, TUPLE1, MEMOIZE, SETITEMS, STOP.
const std::string kPlain = bytes({0x80, 4, '}', 0x94, '(', 0x8c, 1, 'a', 0x94, ']', 0x94, '(', 'K', 1, 'J', 0xfe, 0xff,
                                  0xff, 0xff, 'M', 0x2c, 0x01, 0x8a, 6, 0, 0, 0, 0, 0, 1, 0x8a, 6, 0, 0, 0, 0, 0, 0xff,
                                  'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x88, 'N', 0x8c, 2, 'x', 'y', 0x94, 'e', 0x8c, 1,
                                  'b', 0x94, 'K', 7, 0x85, 0x94, 'u', '.'});

TEST(PickleReader, ReadsTheValuesOfPlainData) {
  ASSERT_TRUE(looks_like_pickle(kPlain));
  const PickleTree t = read_pickle(kPlain, "p");
  const PickleTree::Id a = t.get(t.root(), "a");
  ASSERT_NE(a, PickleTree::kNoNode);
  ASSERT_EQ(t.kind(a), PickleTree::Kind::list);
  const auto& items = t.items(a);
  ASSERT_EQ(items.size(), 9u);
  EXPECT_EQ(t.integer(items[0]), 1);
  EXPECT_EQ(t.integer(items[1]), -2);
  EXPECT_EQ(t.integer(items[2]), 300);
  EXPECT_EQ(t.integer(items[3]), std::int64_t{1} << 40);
  EXPECT_EQ(t.integer(items[4]), -(std::int64_t{1} << 40));
  EXPECT_EQ(t.real(items[5]), 1.5);
  EXPECT_EQ(t.kind(items[6]), PickleTree::Kind::boolean);
  EXPECT_EQ(t.integer(items[6]), 1);
  EXPECT_EQ(t.kind(items[7]), PickleTree::Kind::none);
  EXPECT_EQ(t.string(items[8]), "xy");
  const PickleTree::Id b = t.get(t.root(), "b");
  ASSERT_EQ(t.kind(b), PickleTree::Kind::tuple);
  EXPECT_EQ(t.integer(t.items(b).at(0)), 7);
  EXPECT_EQ(t.get(t.root(), "c"), PickleTree::kNoNode);
}

TEST(PickleReader, AValueTheMemoSharesIsOneNode) {
  // x = [1]; pickle.dumps([x, x], protocol=2): PROTO 2, EMPTY_LIST, BINPUT 0, MARK, EMPTY_LIST,
  // BINPUT 1, BININT1 1, APPEND, BINGET 1, APPENDS, STOP.
  const PickleTree t =
      read_pickle(bytes({0x80, 2, ']', 'q', 0, '(', ']', 'q', 1, 'K', 1, 'a', 'h', 1, 'e', '.'}), "p");
  const auto& outer = t.items(t.root());
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(outer[0], outer[1]);
  EXPECT_EQ(t.items(outer[0]).size(), 1u);
}

TEST(PickleReader, AnythingThatWouldImportOrCallIsRefusedByName) {
  // pickle.dumps(os.system) starts with STACK_GLOBAL after its two strings; REDUCE calls.
  const std::string global = bytes({0x80, 4, 0x8c, 2, 'o', 's', 0x8c, 6, 's', 'y', 's', 't', 'e', 'm', 0x93, '.'});
  EXPECT_NE(error_of(global).find("STACK_GLOBAL"), std::string::npos) << error_of(global);
  EXPECT_NE(error_of(global).find("at byte 14"), std::string::npos) << error_of(global);
  EXPECT_NE(error_of(bytes({0x80, 2, 'c', 'o', 's', '\n'})).find("GLOBAL"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, ')', ')', 'R', '.'})).find("REDUCE"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, ')', 0x81, '.'})).find("NEWOBJ"), std::string::npos);
}

TEST(PickleReader, MalformedPicklesAreErrorsThatSayWhy) {
  EXPECT_NE(error_of(kPlain.substr(0, 30)).find("ends"), std::string::npos);                 // cut short
  EXPECT_NE(error_of(bytes({0x80, 2, 'N'})).find("before its STOP"), std::string::npos);    // no STOP
  EXPECT_NE(error_of(bytes({0x80, 9, 'N', '.'})).find("protocol 9"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, 'h', 3, '.'})).find("memo index 3"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, 'N', 'r', 0xff, 0xff, 0xff, 0x7f, '.'})).find("memo index"),
            std::string::npos);  // a memo index past the input: no 2-billion-entry vector
  EXPECT_NE(error_of(bytes({0x80, 2, 'a', '.'})).find("needs a value"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, 'N', 'K', 1, 'a', '.'})).find("not a list"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, 'e', '.'})).find("MARK"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 2, 'N', 'N', '.'})).find("STOP with other than one"), std::string::npos);
  // A string longer than the file, an 8-byte length near 2^64: refused, no allocation attempted.
  EXPECT_NE(error_of(bytes({0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'})).find("ends inside"),
            std::string::npos);
  // Values below a MARK belong to it: TUPLE1 cannot reach them.
  EXPECT_NE(error_of(bytes({0x80, 2, 'N', '(', 0x85, '.'})).find("tuple"), std::string::npos);
  EXPECT_FALSE(looks_like_pickle("{\"schema\": 1}"));
  EXPECT_FALSE(looks_like_pickle(bytes({0x80})));
}

TEST(PickleReader, IntegersPastSixtyFourBitsAreMarkedNotWrapped) {
  // LONG1 of 9 bytes: 2**64.
  const PickleTree t = read_pickle(bytes({0x80, 2, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.'}), "p");
  EXPECT_EQ(t.kind(t.root()), PickleTree::Kind::big_integer);
}

}  // namespace
