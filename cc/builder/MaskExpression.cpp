// The s-expression form of attention mask expressions, parsed into arith ops (see MaskExpression.h).
#include "cc/builder/MaskExpression.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cctype>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

namespace gpt {

using namespace mlir;

namespace {

/// One parsed node: a leaf (`i`, `j`, a literal) or an operator applied to its arguments.
struct Node {
  std::string name; ///< "i", "j", a literal's digits, or the operator
  int64_t literal = 0;
  bool isLiteral = false;
  std::vector<Node> arguments;
  bool isBoolean = false; ///< set by the type check
};

const std::map<std::string, arith::CmpIPredicate> &comparisons() {
  static const std::map<std::string, arith::CmpIPredicate> table = {
      {"eq", arith::CmpIPredicate::eq},  {"ne", arith::CmpIPredicate::ne},  {"lt", arith::CmpIPredicate::slt},
      {"le", arith::CmpIPredicate::sle}, {"gt", arith::CmpIPredicate::sgt}, {"ge", arith::CmpIPredicate::sge},
  };
  return table;
}

bool isArithmetic(const std::string &name) {
  return name == "add" || name == "sub" || name == "mul" || name == "div" || name == "mod" || name == "min" ||
         name == "max";
}

/// Reads the text into a tree; throws std::invalid_argument naming the problem.
class Parser {
public:
  explicit Parser(const std::string &text) : text(text) {}

  Node parseWhole() {
    Node node = parse();
    skipSpace();
    if (at < text.size()) fail("unexpected text after the expression");
    check(node);
    if (!node.isBoolean) fail("the expression must be a boolean (a comparison, and, or, not), not an integer");
    return node;
  }

private:
  [[noreturn]] void fail(const std::string &what) const {
    throw std::invalid_argument("attention mask expression: " + what + " at character " + std::to_string(at) + " of '" +
                                text + "'");
  }

  void skipSpace() {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  }

  std::string word() {
    size_t start = at;
    while (at < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[at])) || text[at] == '-' || text[at] == '_'))
      ++at;
    return text.substr(start, at - start);
  }

  Node parse() {
    if (++depth > 64) fail("nested too deeply");
    skipSpace();
    if (at >= text.size()) fail("expected an expression");
    Node node;
    if (text[at] == '(') {
      ++at;
      skipSpace();
      node.name = word();
      if (node.name.empty()) fail("expected an operator after '('");
      for (skipSpace(); at < text.size() && text[at] != ')'; skipSpace()) node.arguments.push_back(parse());
      if (at >= text.size()) fail("missing ')'");
      ++at;
    } else {
      node.name = word();
      if (node.name.empty()) fail("unexpected character '" + std::string(1, text[at]) + "'");
      if (node.name != "i" && node.name != "j") {
        size_t digits = 0;
        try {
          node.literal = std::stoll(node.name, &digits);
        } catch (const std::exception &) {
        }
        if (digits == 0 || digits != node.name.size()) fail("unknown name '" + node.name + "' (only i and j)");
        node.isLiteral = true;
      }
    }
    --depth;
    return node;
  }

  /// Sets isBoolean through the tree and checks every operator's arguments.
  void check(Node &node) const {
    for (Node &argument : node.arguments) check(argument);
    auto expect = [&](size_t count, bool boolean) {
      if (node.arguments.size() != count)
        fail("(" + node.name + " ...) takes " + std::to_string(count) + " arguments, got " +
             std::to_string(node.arguments.size()));
      for (const Node &argument : node.arguments)
        if (argument.isBoolean != boolean) fail("(" + node.name + " ...) takes " + (boolean ? "booleans" : "integers"));
    };
    if (node.arguments.empty() && (node.isLiteral || node.name == "i" || node.name == "j")) return;
    if (isArithmetic(node.name)) {
      expect(2, false);
      if ((node.name == "div" || node.name == "mod") && (!node.arguments[1].isLiteral || node.arguments[1].literal < 1))
        fail("(" + node.name + " a n) needs a positive integer literal n");
    } else if (comparisons().count(node.name)) {
      expect(2, false);
      node.isBoolean = true;
    } else if (node.name == "not") {
      expect(1, true);
      node.isBoolean = true;
    } else if (node.name == "and" || node.name == "or") {
      if (node.arguments.size() < 2) fail("(" + node.name + " ...) takes at least 2 arguments");
      expect(node.arguments.size(), true);
      node.isBoolean = true;
    } else {
      fail("unknown operator '" + node.name + "'");
    }
  }

  const std::string &text;
  size_t at = 0;
  int depth = 0;
};

/// Emits the ops of `node`; `i` and `j` are the block's arguments.
Value emit(OpBuilder &b, Location loc, const Node &node, Value i, Value j) {
  if (node.name == "i") return i;
  if (node.name == "j") return j;
  if (node.isLiteral) return b.create<arith::ConstantIndexOp>(loc, node.literal);
  std::vector<Value> args;
  for (const Node &argument : node.arguments) args.push_back(emit(b, loc, argument, i, j));
  const std::string &name = node.name;
  if (name == "add") return b.create<arith::AddIOp>(loc, args[0], args[1]);
  if (name == "sub") return b.create<arith::SubIOp>(loc, args[0], args[1]);
  if (name == "mul") return b.create<arith::MulIOp>(loc, args[0], args[1]);
  if (name == "div") return b.create<arith::FloorDivSIOp>(loc, args[0], args[1]);
  if (name == "min") return b.create<arith::MinSIOp>(loc, args[0], args[1]);
  if (name == "max") return b.create<arith::MaxSIOp>(loc, args[0], args[1]);
  if (name == "mod") {
    // Python's a % n for n > 0: the remainder moved into [0, n).
    Value remainder = b.create<arith::RemSIOp>(loc, args[0], args[1]);
    Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
    Value negative = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, remainder, zero);
    Value wrapped = b.create<arith::AddIOp>(loc, remainder, args[1]);
    return b.create<arith::SelectOp>(loc, negative, wrapped, remainder);
  }
  if (auto comparison = comparisons().find(name); comparison != comparisons().end())
    return b.create<arith::CmpIOp>(loc, comparison->second, args[0], args[1]);
  if (name == "not") {
    Value one = b.create<arith::ConstantIntOp>(loc, 1, 1);
    return b.create<arith::XOrIOp>(loc, args[0], one);
  }
  Value result = args[0];
  for (size_t k = 1; k < args.size(); ++k)
    result = name == "and" ? b.create<arith::AndIOp>(loc, result, args[k]).getResult()
                           : b.create<arith::OrIOp>(loc, result, args[k]).getResult();
  return result;
}

} // namespace

std::string checkMaskExpression(const std::string &text) {
  try {
    Parser(text).parseWhole();
  } catch (const std::invalid_argument &error) {
    return error.what();
  }
  return "";
}

void buildMaskExpression(OpBuilder &b, Location loc, Region &region, const std::string &text) {
  Node root = Parser(text).parseWhole();
  OpBuilder::InsertionGuard guard(b);
  Type index = b.getIndexType();
  Block *block = b.createBlock(&region, {}, {index, index}, {loc, loc});
  Value seen = emit(b, loc, root, block->getArgument(0), block->getArgument(1));
  b.create<transformer::YieldOp>(loc, seen);
}

} // namespace gpt
