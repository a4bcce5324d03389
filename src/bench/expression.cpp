// The criteria language: a small recursive-descent parser and a tree-walking evaluator. It reads
// outside input (plan files), so it is bounded (length, nesting) and every error is an InputError
// with the column; nothing in it can execute anything but arithmetic and comparisons.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace trainfit::bench {

// A chain is a run of one precedence level's binary operators, kept flat: `1 + 2 - 3 + ...` is one
// node with its operands and operators in order (evaluated left to right, as ((1 + 2) - 3) + ...),
// not a left-leaning tree as deep as the chain is long. So the tree's depth is bounded by the
// nesting (parentheses, `not`, unary minus: kMaxDepth), whatever the expression's length, and
// parsing, evaluation and destruction recurse only that deep.
struct Expression::Node {
  enum class Kind { literal, field, unary, chain, call } kind = Kind::literal;
  struct Op {
    std::string name;
    std::size_t column = 0;
  };
  Value value;              // literal
  std::string name;         // field name, unary operator or function
  std::vector<std::shared_ptr<const Node>> args;
  std::vector<Op> ops;      // chain: ops[i] stands between args[i] and args[i + 1]
  std::size_t column = 0;
};

namespace {

using Node = Expression::Node;
using NodePtr = std::shared_ptr<const Node>;

constexpr std::size_t kMaxLength = 4096;
constexpr int kMaxDepth = 64;

[[noreturn]] void fail(std::size_t column, const std::string& what) {
  throw InputError(fmt::format("column {}: {}", column + 1, what));
}

struct Token {
  enum class Kind { end, number, string, ident, op, lparen, rparen, comma } kind = Kind::end;
  std::string text;
  double number = 0;
  std::size_t column = 0;
};

// Byte units on numbers, converted to MiB: every memory field is in MiB.
std::optional<double> unit_in_mib(std::string_view u) {
  static const std::pair<std::string_view, double> units[] = {
      {"B", 1.0 / 1048576}, {"KiB", 1.0 / 1024}, {"MiB", 1}, {"GiB", 1024}, {"TiB", 1048576},
      {"KB", 1e3 / 1048576}, {"MB", 1e6 / 1048576}, {"GB", 1e9 / 1048576}, {"TB", 1e12 / 1048576}};
  for (const auto& [name, scale] : units)
    if (u == name) return scale;
  return std::nullopt;
}

std::vector<Token> tokenize(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.column = i;
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      const auto [end, ec] = std::from_chars(s.data() + i, s.data() + j, t.number);
      if (ec != std::errc{} || end != s.data() + j || !std::isfinite(t.number))
        fail(i, fmt::format("bad number '{}'", s.substr(i, j - i)));
      std::size_t k = j;
      while (k < s.size() && std::isalpha(static_cast<unsigned char>(s[k]))) ++k;
      if (k > j) {
        const auto scale = unit_in_mib(s.substr(j, k - j));
        if (!scale) fail(j, fmt::format("unknown unit '{}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s.substr(j, k - j)));
        t.number *= *scale;
      }
      t.kind = Token::Kind::number;
      i = k;
    } else if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) ++j;
        t.text += s[j++];
      }
      if (j >= s.size()) fail(i, "unterminated string");
      t.kind = Token::Kind::string;
      i = j + 1;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && ident_char(s[j])) ++j;
      t.text = std::string(s.substr(i, j - i));
      t.kind = Token::Kind::ident;
      i = j;
    } else if (c == '(' || c == ')' || c == ',') {
      t.kind = c == '(' ? Token::Kind::lparen : c == ')' ? Token::Kind::rparen : Token::Kind::comma;
      t.text = std::string(1, c);
      ++i;
    } else {
      static const std::string_view ops[] = {"==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/"};
      bool matched = false;
      for (std::string_view op : ops) {
        if (s.substr(i, op.size()) == op) {
          t.kind = Token::Kind::op;
          t.text = std::string(op);
          i += op.size();
          matched = true;
          break;
        }
      }
      if (!matched) {
        if (c == '=') fail(i, "'=' is not a comparison; use '=='");
        if (c == '&' || c == '|' || c == '!') fail(i, "use 'and', 'or', 'not'");
        fail(i, fmt::format("unexpected character '{}'", c));
      }
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.column = s.size();
  out.push_back(end);
  return out;
}

const std::vector<std::string_view>& function_names() {
  static const std::vector<std::string_view> f = {"count", "any", "all", "max", "min", "sum", "mean"};
  return f;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::function<bool(std::string_view)>& known)
      : t_(std::move(tokens)), known_(known) {}

  NodePtr parse() {
    NodePtr n = disjunction();
    if (peek().kind != Token::Kind::end) fail(peek().column, fmt::format("unexpected '{}'", peek().text));
    return n;
  }

 private:
  const Token& peek() const { return t_[pos_]; }
  const Token& next() { return t_[pos_++]; }
  bool word(std::string_view w) const { return peek().kind == Token::Kind::ident && peek().text == w; }
  bool op(std::string_view o) const { return peek().kind == Token::Kind::op && peek().text == o; }

  void enter(std::size_t column) {
    if (++depth_ > kMaxDepth) fail(column, "expression nested too deeply");
  }

  static NodePtr make(Node::Kind kind, std::string name, std::vector<NodePtr> args, std::size_t column) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->name = std::move(name);
    n->args = std::move(args);
    n->column = column;
    return n;
  }

  // operand (op operand)*: one chain node, or the operand alone when no operator follows it.
  template <class Operand, class IsOp>
  NodePtr chain(Operand operand, IsOp is_op) {
    NodePtr first = operand();
    if (!is_op()) return first;
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::chain;
    n->args.push_back(std::move(first));
    while (is_op()) {
      const Token& t = next();
      n->ops.push_back({t.text, t.column});
      n->args.push_back(operand());
    }
    n->column = n->ops.back().column;  // the operator applied last, as the root of the left-leaning tree was
    return n;
  }

  NodePtr disjunction() {
    enter(peek().column);
    NodePtr n = chain([this] { return conjunction(); }, [this] { return word("or"); });
    --depth_;
    return n;
  }
  NodePtr conjunction() {
    return chain([this] { return negation(); }, [this] { return word("and"); });
  }
  NodePtr negation() {
    if (word("not")) {
      const std::size_t col = next().column;
      enter(col);
      NodePtr n = make(Node::Kind::unary, "not", {negation()}, col);
      --depth_;
      return n;
    }
    return comparison();
  }
  static bool is_comparison(const Token& t) {
    if (t.kind != Token::Kind::op) return false;
    for (std::string_view o : {"==", "!=", "<=", ">=", "<", ">"})
      if (t.text == o) return true;
    return false;
  }
  NodePtr comparison() {
    NodePtr left = sum();
    if (!is_comparison(peek())) return left;
    const Token& t = next();
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::chain;
    n->ops.push_back({t.text, t.column});
    n->column = t.column;
    n->args = {std::move(left), sum()};
    if (is_comparison(peek())) fail(peek().column, "comparisons do not chain; use 'and'");
    return n;
  }
  NodePtr sum() {
    return chain([this] { return product(); }, [this] { return op("+") || op("-"); });
  }
  NodePtr product() {
    return chain([this] { return unary(); }, [this] { return op("*") || op("/"); });
  }
  NodePtr unary() {
    if (op("-")) {
      const std::size_t col = next().column;
      enter(col);
      NodePtr n = make(Node::Kind::unary, "-", {unary()}, col);
      --depth_;
      return n;
    }
    return atom();
  }
  NodePtr atom() {
    const Token& t = next();
    auto lit = [&](Value v) {
      auto n = std::make_shared<Node>();
      n->value = std::move(v);
      n->column = t.column;
      return NodePtr(n);
    };
    switch (t.kind) {
      case Token::Kind::number: return lit(t.number);
      case Token::Kind::string: return lit(t.text);
      case Token::Kind::lparen: {
        NodePtr n = disjunction();
        if (peek().kind != Token::Kind::rparen) fail(peek().column, "expected ')'");
        next();
        return n;
      }
      case Token::Kind::ident: {
        if (t.text == "true") return lit(true);
        if (t.text == "false") return lit(false);
        if (t.text == "null") return lit(std::monostate{});
        if (t.text == "and" || t.text == "or" || t.text == "not") fail(t.column, fmt::format("'{}' needs an operand before it", t.text));
        if (peek().kind == Token::Kind::lparen) return call(t);
        if (known_ && !known_(t.text)) fail(t.column, fmt::format("unknown field '{}'", t.text));
        return make(Node::Kind::field, t.text, {}, t.column);
      }
      case Token::Kind::end: fail(t.column, "expression ends too early");
      default: fail(t.column, fmt::format("unexpected '{}'", t.text));
    }
  }
  NodePtr call(const Token& name) {
    const auto& fs = function_names();
    if (std::find(fs.begin(), fs.end(), name.text) == fs.end())
      fail(name.column, fmt::format("unknown function '{}' (count, any, all, max, min, sum, mean)", name.text));
    if (in_aggregate_) fail(name.column, "aggregates do not nest");
    next();  // (
    in_aggregate_ = true;
    std::vector<NodePtr> args;
    if (peek().kind != Token::Kind::rparen) {
      args.push_back(disjunction());
      while (peek().kind == Token::Kind::comma) {
        next();
        args.push_back(disjunction());
      }
    }
    in_aggregate_ = false;
    if (peek().kind != Token::Kind::rparen) fail(peek().column, "expected ')' or ','");
    next();
    const bool one = name.text == "count" || name.text == "any" || name.text == "all";
    if (one ? args.size() != 1 : (args.empty() || args.size() > 2))
      fail(name.column, one ? fmt::format("{}(condition) takes one argument", name.text)
                            : fmt::format("{}(value[, condition]) takes one or two arguments", name.text));
    return make(Node::Kind::call, name.text, std::move(args), name.column);
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  bool in_aggregate_ = false;
  const std::function<bool(std::string_view)>& known_;
};

std::string_view type_of(const Value& v) {
  switch (v.index()) {
    case 0: return "null";
    case 1: return "a boolean";
    case 2: return "a number";
    default: return "a string";
  }
}

[[noreturn]] void type_error(const Node& n, const std::string& what) { fail(n.column, what); }

// Truth of a condition: null is false (a field not measured satisfies nothing). `column`: where an
// error points (the operator that needed a condition).
bool truth(std::size_t column, const Value& v) {
  if (std::holds_alternative<std::monostate>(v)) return false;
  if (const bool* b = std::get_if<bool>(&v)) return *b;
  fail(column, fmt::format("expected a condition, got {}", type_of(v)));
}
bool truth(const Node& n, const Value& v) { return truth(n.column, v); }

struct Evaluator {
  const Fields* row;
  const std::vector<Fields>* rows;
  std::vector<std::size_t>* picked;

  Value eval(const Node& n) {
    switch (n.kind) {
      case Node::Kind::literal: return n.value;
      case Node::Kind::field: {
        if (row == nullptr) type_error(n, fmt::format("field '{}' outside an aggregate: this criterion is judged once over all rows", n.name));
        const auto it = row->find(n.name);
        return it == row->end() ? Value{} : it->second;
      }
      case Node::Kind::unary: {
        const Value v = eval(*n.args[0]);
        if (n.name == "not") return std::holds_alternative<std::monostate>(v) ? Value{} : Value{!truth(n, v)};
        if (std::holds_alternative<std::monostate>(v)) return {};
        if (const double* d = std::get_if<double>(&v)) return -*d;
        type_error(n, fmt::format("cannot negate {}", type_of(v)));
      }
      case Node::Kind::chain: return chain(n);
      case Node::Kind::call: return aggregate(n);
    }
    return {};
  }

  // A chain, left to right: ((a op b) op c) ..., without recursing along it. `and` / `or` stop at
  // the first operand that decides them, as the nested form did (every operand's truth is checked
  // at the operator before it, the first's at the first operator).
  Value chain(const Node& n) {
    const std::string& first = n.ops.front().name;
    if (first == "and" || first == "or") {
      for (std::size_t i = 0; i < n.args.size(); ++i) {
        const Node::Op& o = n.ops[i == 0 ? 0 : i - 1];
        const bool v = truth(o.column, eval(*n.args[i]));
        if (o.name == "and" && !v) return false;
        if (o.name == "or" && v) return true;
      }
      return first == "and";
    }
    Value acc = eval(*n.args[0]);
    for (std::size_t i = 0; i < n.ops.size(); ++i) acc = binary(n.ops[i], acc, eval(*n.args[i + 1]));
    return acc;
  }

  static Value binary(const Node::Op& o, const Value& a, const Value& b) {
    const std::string& op = o.name;
    const bool arithmetic = op == "+" || op == "-" || op == "*" || op == "/";
    if (std::holds_alternative<std::monostate>(a) || std::holds_alternative<std::monostate>(b)) {
      if (arithmetic) return {};
      // null == null is the one comparison with null that holds: "error == null".
      if (op == "==") return a.index() == b.index();
      if (op == "!=") return a.index() != b.index();
      return false;
    }
    if (a.index() != b.index()) fail(o.column, fmt::format("cannot apply '{}' to {} and {}", op, type_of(a), type_of(b)));
    if (arithmetic) {
      const double* x = std::get_if<double>(&a);
      const double* y = std::get_if<double>(&b);
      if (x == nullptr) fail(o.column, fmt::format("cannot apply '{}' to {}", op, type_of(a)));
      if (op == "+") return *x + *y;
      if (op == "-") return *x - *y;
      if (op == "*") return *x * *y;
      return *y == 0 ? Value{} : Value{*x / *y};
    }
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (std::holds_alternative<bool>(a)) fail(o.column, fmt::format("cannot order booleans with '{}'", op));
    if (op == "<") return a < b;
    if (op == "<=") return a <= b;
    if (op == ">") return a > b;
    return a >= b;
  }

  Value aggregate(const Node& n) {
    if (rows == nullptr) type_error(n, fmt::format("{}() needs the rows of the run", n.name));
    const bool condition_only = n.name == "count" || n.name == "any" || n.name == "all";
    const Node* cond = condition_only ? n.args[0].get() : (n.args.size() > 1 ? n.args[1].get() : nullptr);
    std::size_t matched = 0;
    std::vector<std::pair<double, std::size_t>> values;
    std::vector<std::size_t> matching;
    for (std::size_t i = 0; i < rows->size(); ++i) {
      Evaluator inner{&(*rows)[i], nullptr, nullptr};
      const bool holds = cond == nullptr || truth(*cond, inner.eval(*cond));
      if (n.name == "all") {
        if (!holds) matching.push_back(i);  // the rows that break it decide it
        continue;
      }
      if (!holds) continue;
      ++matched;
      matching.push_back(i);
      if (!condition_only) {
        const Value v = inner.eval(*n.args[0]);
        if (std::holds_alternative<std::monostate>(v)) continue;
        const double* d = std::get_if<double>(&v);
        if (d == nullptr) type_error(*n.args[0], fmt::format("{}() needs numbers, got {}", n.name, type_of(v)));
        values.emplace_back(*d, i);
      }
    }
    auto pick = [&](const std::vector<std::size_t>& r) {
      if (picked != nullptr) picked->insert(picked->end(), r.begin(), r.end());
    };
    if (n.name == "count") {
      pick(matching);
      return static_cast<double>(matched);
    }
    if (n.name == "any") {
      pick(matching);
      return matched > 0;
    }
    if (n.name == "all") {
      pick(matching);
      return matching.empty();
    }
    if (values.empty()) return {};
    if (n.name == "max" || n.name == "min") {
      const auto it = n.name == "max" ? std::max_element(values.begin(), values.end())
                                      : std::min_element(values.begin(), values.end());
      pick({it->second});
      return it->first;
    }
    double total = 0;
    std::vector<std::size_t> used;
    for (const auto& [v, i] : values) {
      total += v;
      used.push_back(i);
    }
    pick(used);
    return n.name == "sum" ? total : total / static_cast<double>(values.size());
  }
};

bool any_node(const Node& n, const std::function<bool(const Node&, bool)>& pred, bool inside = false) {
  if (pred(n, inside)) return true;
  for (const auto& a : n.args)
    if (any_node(*a, pred, inside || n.kind == Node::Kind::call)) return true;
  return false;
}

}  // namespace

std::string to_string(const Value& v) {
  switch (v.index()) {
    case 0: return "null";
    case 1: return std::get<bool>(v) ? "true" : "false";
    case 2: {
      const double d = std::get<double>(v);
      if (d == std::floor(d) && std::abs(d) < 1e15) return fmt::format("{}", static_cast<long long>(d));
      return fmt::format("{:.4g}", d);
    }
    default: return fmt::format("\"{}\"", std::get<std::string>(v));
  }
}

Expression Expression::parse(std::string_view text, const std::function<bool(std::string_view)>& known_field) {
  if (text.size() > kMaxLength) throw InputError(fmt::format("expression longer than {} characters", kMaxLength));
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) throw InputError("empty expression");
  Parser p(tokenize(text), known_field);
  Expression e;
  e.root_ = p.parse();
  e.text_ = std::string(text);
  return e;
}

Evaluation Expression::evaluate(const Fields* row, const std::vector<Fields>* rows) const {
  Evaluation out;
  Evaluator ev{row, rows, &out.rows};
  out.value = ev.eval(*root_);
  std::sort(out.rows.begin(), out.rows.end());
  out.rows.erase(std::unique(out.rows.begin(), out.rows.end()), out.rows.end());
  return out;
}

bool Expression::has_aggregates() const {
  return any_node(*root_, [](const Node& n, bool) { return n.kind == Node::Kind::call; });
}

bool Expression::uses_row_fields() const {
  return any_node(*root_, [](const Node& n, bool inside) { return n.kind == Node::Kind::field && !inside; });
}

}  // namespace trainfit::bench
