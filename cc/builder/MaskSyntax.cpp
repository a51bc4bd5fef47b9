// Parsing and checking attention mask expressions (see MaskSyntax.h).
#include "cc/builder/MaskSyntax.h"

#include <cctype>
#include <stdexcept>

namespace gpt {

namespace {

bool isArithmetic(const std::string &name) {
  return name == "add" || name == "sub" || name == "mul" || name == "div" || name == "mod" || name == "min" ||
         name == "max";
}

/// Reads the text into a tree; throws std::invalid_argument naming the problem.
class Parser {
public:
  explicit Parser(const std::string &text) : text(text) {}

  MaskNode parseWhole() {
    MaskNode node = parse();
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

  MaskNode parse() {
    if (++depth > 64) fail("nested too deeply");
    skipSpace();
    if (at >= text.size()) fail("expected an expression");
    MaskNode node;
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
  void check(MaskNode &node) const {
    for (MaskNode &argument : node.arguments) check(argument);
    auto expect = [&](size_t count, bool boolean) {
      if (node.arguments.size() != count)
        fail("(" + node.name + " ...) takes " + std::to_string(count) + " arguments, got " +
             std::to_string(node.arguments.size()));
      for (const MaskNode &argument : node.arguments)
        if (argument.isBoolean != boolean) fail("(" + node.name + " ...) takes " + (boolean ? "booleans" : "integers"));
    };
    if (node.arguments.empty() && (node.isLiteral || node.name == "i" || node.name == "j")) return;
    if (isArithmetic(node.name)) {
      expect(2, false);
      if ((node.name == "div" || node.name == "mod") && (!node.arguments[1].isLiteral || node.arguments[1].literal < 1))
        fail("(" + node.name + " a n) needs a positive integer literal n");
    } else if (isMaskComparison(node.name)) {
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

} // namespace

bool isMaskComparison(const std::string &name) {
  return name == "eq" || name == "ne" || name == "lt" || name == "le" || name == "gt" || name == "ge";
}

MaskNode parseMaskExpression(const std::string &text) { return Parser(text).parseWhole(); }

std::string checkMaskExpression(const std::string &text) {
  try {
    parseMaskExpression(text);
  } catch (const std::invalid_argument &error) {
    return error.what();
  }
  return "";
}

} // namespace gpt
