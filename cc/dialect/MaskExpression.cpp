// Compile-time evaluation of causal_attention's mask expressions (see MaskExpression.h).
#include "cc/dialect/MaskExpression.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

namespace mlir::transformer {

namespace {

enum Opcode {
  Constant,
  Add,
  Sub,
  Mul,
  DivS,
  DivU,
  CeilDivS,
  FloorDivS,
  RemS,
  RemU,
  MinS,
  MaxS,
  MinU,
  MaxU,
  And,
  Or,
  Xor,
  Cmp,
  Select,
};

/// The opcode of a binary arith op on integers, or -1.
int binaryOpcode(Operation *op) {
  return llvm::TypeSwitch<Operation *, int>(op)
      .Case([](arith::AddIOp) { return Add; })
      .Case([](arith::SubIOp) { return Sub; })
      .Case([](arith::MulIOp) { return Mul; })
      .Case([](arith::DivSIOp) { return DivS; })
      .Case([](arith::DivUIOp) { return DivU; })
      .Case([](arith::CeilDivSIOp) { return CeilDivS; })
      .Case([](arith::FloorDivSIOp) { return FloorDivS; })
      .Case([](arith::RemSIOp) { return RemS; })
      .Case([](arith::RemUIOp) { return RemU; })
      .Case([](arith::MinSIOp) { return MinS; })
      .Case([](arith::MaxSIOp) { return MaxS; })
      .Case([](arith::MinUIOp) { return MinU; })
      .Case([](arith::MaxUIOp) { return MaxU; })
      .Case([](arith::AndIOp) { return And; })
      .Case([](arith::OrIOp) { return Or; })
      .Case([](arith::XOrIOp) { return Xor; })
      .Default([](Operation *) { return -1; });
}

bool isIndexOrBool(Type type) { return type.isIndex() || type.isInteger(1); }

// The quotient rounded toward -inf / +inf (b != 0, no overflow: checked by the caller).
int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t ceilDiv(int64_t a, int64_t b) { return a / b + ((a % b != 0) && ((a < 0) == (b < 0))); }

// The predicate on two index values, as arith.cmpi folds it (signed and unsigned alike).
bool compare(arith::CmpIPredicate predicate, int64_t a, int64_t b) {
  return arith::applyCmpPredicate(predicate, APInt(64, a, /*isSigned=*/true), APInt(64, b, /*isSigned=*/true));
}

/// A binary op of the program on its operands; std::nullopt where a division has no value (by zero,
/// or the overflowing INT64_MIN / -1).
std::optional<int64_t> binary(int opcode, int64_t a, int64_t b) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  bool signedDivision = opcode == DivS || opcode == CeilDivS || opcode == FloorDivS || opcode == RemS;
  if ((signedDivision || opcode == DivU || opcode == RemU) && b == 0) return std::nullopt;
  if (signedDivision && a == kMin && b == -1) return std::nullopt;
  switch (opcode) {
  case Add:
    return int64_t(ua + ub); // wrapping, as arith's index ops
  case Sub:
    return int64_t(ua - ub);
  case Mul:
    return int64_t(ua * ub);
  case DivS:
    return a / b;
  case DivU:
    return int64_t(ua / ub);
  case CeilDivS:
    return ceilDiv(a, b);
  case FloorDivS:
    return floorDiv(a, b);
  case RemS:
    return a % b;
  case RemU:
    return int64_t(ua % ub);
  case MinS:
    return std::min(a, b);
  case MaxS:
    return std::max(a, b);
  case MinU:
    return int64_t(std::min(ua, ub));
  case MaxU:
    return int64_t(std::max(ua, ub));
  case And:
    return a & b;
  case Or:
    return a | b;
  case Xor:
    return a ^ b;
  }
  return std::nullopt; // not a binary opcode
}

} // namespace

std::optional<MaskEvaluator> MaskEvaluator::compile(Region &expression) {
  if (!expression.hasOneBlock()) return std::nullopt;
  Block &body = expression.front();
  MaskEvaluator evaluator;
  llvm::DenseMap<Value, int> registerOf;
  registerOf[body.getArgument(0)] = 0;
  registerOf[body.getArgument(1)] = 1;
  auto operand = [&](Value v) { return registerOf.lookup(v); };
  int next = 2;
  for (Operation &op : body.without_terminator()) {
    if (op.getNumResults() != 1 || !isIndexOrBool(op.getResult(0).getType())) return std::nullopt;
    for (Value v : op.getOperands())
      if (!registerOf.count(v)) return std::nullopt; // defined above the region: not ours to read
    Instruction instruction{-1, 0, 0, 0, 0, 0};
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      auto value = dyn_cast<IntegerAttr>(constant.getValue());
      if (!value) return std::nullopt;
      // i1 true is 1, not -1: the booleans are 0 and 1 throughout.
      instruction = {
          Constant, 0, 0,
          0,        0, value.getType().isInteger(1) ? int64_t(value.getValue().getZExtValue()) : value.getInt()};
    } else if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      Type type = cmp.getLhs().getType();
      arith::CmpIPredicate predicate = cmp.getPredicate();
      bool signedPredicate = predicate == arith::CmpIPredicate::slt || predicate == arith::CmpIPredicate::sle ||
                             predicate == arith::CmpIPredicate::sgt || predicate == arith::CmpIPredicate::sge;
      // Booleans are 0 and 1 here, so a signed comparison of them (true is -1) is not ours.
      if (!type.isIndex() && !(type.isInteger(1) && !signedPredicate)) return std::nullopt;
      instruction = {Cmp, int(cmp.getPredicate()), operand(cmp.getLhs()), operand(cmp.getRhs()), 0, 0};
    } else if (auto select = dyn_cast<arith::SelectOp>(op)) {
      instruction = {
          Select, 0, operand(select.getCondition()), operand(select.getTrueValue()), operand(select.getFalseValue()),
          0};
    } else if (int opcode = binaryOpcode(&op); opcode >= 0) {
      // Booleans stay 0 or 1 through and, or, xor; arithmetic on them would not.
      if (op.getResult(0).getType().isInteger(1) && opcode != And && opcode != Or && opcode != Xor) return std::nullopt;
      instruction = {opcode, 0, operand(op.getOperand(0)), operand(op.getOperand(1)), 0, 0};
    } else {
      return std::nullopt;
    }
    evaluator.program.push_back(instruction);
    registerOf[op.getResult(0)] = next++;
  }
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield || !registerOf.count(yield.getValue())) return std::nullopt;
  evaluator.result = registerOf.lookup(yield.getValue());
  evaluator.registers.assign(next, 0);
  return evaluator;
}

std::optional<bool> MaskEvaluator::operator()(int64_t i, int64_t j) const {
  int64_t *r = registers.data();
  r[0] = i;
  r[1] = j;
  int target = 2;
  for (const Instruction &in : program) {
    int64_t a = r[in.a], b = r[in.b], value = 0;
    if (in.opcode == Constant) {
      value = in.constant;
    } else if (in.opcode == Cmp) {
      value = compare(arith::CmpIPredicate(in.predicate), a, b);
    } else if (in.opcode == Select) {
      value = a ? b : r[in.c];
    } else {
      std::optional<int64_t> computed = binary(in.opcode, a, b);
      if (!computed) return std::nullopt;
      value = *computed;
    }
    r[target++] = value;
  }
  return (r[result] & 1) != 0;
}

} // namespace mlir::transformer
