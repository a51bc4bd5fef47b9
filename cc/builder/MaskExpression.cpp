// The s-expression form of attention mask expressions, parsed into arith ops (see MaskExpression.h).
#include "cc/builder/MaskExpression.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <map>
#include <stdexcept>

namespace gpt {

using namespace mlir;

namespace {

const std::map<std::string, arith::CmpIPredicate> &comparisons() {
  static const std::map<std::string, arith::CmpIPredicate> table = {
      {"eq", arith::CmpIPredicate::eq},  {"ne", arith::CmpIPredicate::ne},  {"lt", arith::CmpIPredicate::slt},
      {"le", arith::CmpIPredicate::sle}, {"gt", arith::CmpIPredicate::sgt}, {"ge", arith::CmpIPredicate::sge},
  };
  return table;
}

/// Emits the ops of `node`; `i` and `j` are the block's arguments.
Value emit(OpBuilder &b, Location loc, const MaskNode &node, Value i, Value j) {
  if (node.name == "i") return i;
  if (node.name == "j") return j;
  if (node.isLiteral) return b.create<arith::ConstantIndexOp>(loc, node.literal);
  std::vector<Value> args;
  for (const MaskNode &argument : node.arguments) args.push_back(emit(b, loc, argument, i, j));
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

void buildMaskExpression(OpBuilder &b, Location loc, Region &region, const std::string &text) {
  MaskNode root = parseMaskExpression(text);
  OpBuilder::InsertionGuard guard(b);
  Type index = b.getIndexType();
  Block *block = b.createBlock(&region, {}, {index, index}, {loc, loc});
  Value seen = emit(b, loc, root, block->getArgument(0), block->getArgument(1));
  b.create<transformer::YieldOp>(loc, seen);
}

} // namespace gpt
