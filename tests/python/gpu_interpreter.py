"""An SPMD interpreter of the CUDA target's kernel source (model.ir("gpu")), for checking the
kernels' arithmetic on a machine with no GPU.

Every thread of every block of a launch runs in lockstep, vectorized with numpy: an SSA value is
an array over threads ([P] or [P, n] for vector<n>), divergent control flow runs under masks
(scf.if both ways, scf.for until no thread is left), `gpu.shuffle xor` permutes within warps,
workgroup memory is one array per block, and `gpu.barrier` needs nothing more (lockstep already
orders every store before every later load). It reads the subset of MLIR the kernel generators
write (cc/codegen/gpu/GpuKernels*.cpp) and refuses anything else by name, so a kernel that uses a
new op fails here loudly rather than silently.

What it does not model: the PTX backend (contraction into fma, approximate math), alignment, and
races between threads writing one address (the last writer wins)."""

import re

import numpy as np

WARP = 32
_NAME = r"%[\w]+(?:#\d+)?"


class KernelError(Exception):
    pass


def _dtype(element: str):
    return {
        "f32": np.float32,
        "f64": np.float64,
        "i64": np.int64,
        "i16": np.uint16,
        "i32": np.uint32,
        "index": np.int64,
    }[element]


def _memref(type_text: str) -> tuple[list[int], str, bool]:
    """(shape, element type, workgroup?) of `memref<16x64xf32, #gpu.address_space<workgroup>>`."""
    match = re.match(r"memref<([\dx]+)x(\w+)(.*)>", type_text.strip())
    if not match:
        raise KernelError(f"unknown memref type {type_text!r}")
    return [int(d) for d in match.group(1).split("x")], match.group(2), "workgroup" in match.group(3)


def _split_top(text: str) -> list[str]:
    """`text` split at commas outside <>, (), []."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "<([" and 1 or 0
        depth -= char in ">)]" and 1 or 0
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


class Function:
    """One `gpu.func` parsed into nested blocks of lines."""

    def __init__(self, text: str, name: str, globals_: dict[str, np.ndarray]):
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if f"gpu.func @{name}(" in line), None)
        if start is None:
            raise KernelError(f"no kernel {name}")
        header = lines[start]
        match = re.search(r"gpu\.func @\w+\((.*?)\)(?: workgroup\((.*?)\))? kernel \{", header)
        self.arguments = [tuple(p.split(": ", 1)) for p in _split_top(match.group(1))]
        self.workgroup = [tuple(p.split(": ", 1)) for p in _split_top(match.group(2) or "")]
        self.globals = globals_
        self.body, end = self._block(lines, start + 1)

    def _block(self, lines, index):
        ops = []
        while index < len(lines):
            line = lines[index].strip()
            if line in ("}", "} else {") or line == "gpu.return":
                return ops, index
            if line.endswith("{"):
                body, index = self._block(lines, index + 1)
                op = {"line": line, "body": body}
                if lines[index].strip() == "} else {":
                    op["else"], index = self._block(lines, index + 1)
                ops.append(op)
            else:
                ops.append({"line": line})
            index += 1
        raise KernelError("unterminated block")


def parse_globals(module_text: str) -> dict[str, np.ndarray]:
    out = {}
    for match in re.finditer(
        r'memref\.global "private" constant @(\w+) : memref<\d+x(\w+)> = dense<\[(.*?)\]>', module_text
    ):
        out[match.group(1)] = np.array([float(v) for v in match.group(3).split(",")], dtype=_dtype(match.group(2)))
    return out


class Launch:
    """Runs `function` over `grid` x `block` threads with `arguments` (flat numpy arrays, one per
    pointer argument, viewed in the argument's element type)."""

    def __init__(self, function: Function, grid, block, arguments: list[np.ndarray]):
        self.f = function
        self.threads_per_block = block[0] * block[1] * block[2]
        if block[1] != 1 or block[2] != 1:
            raise KernelError("only 1-D blocks")
        self.blocks = grid[0] * grid[1] * grid[2]
        self.P = self.blocks * self.threads_per_block
        p = np.arange(self.P)
        self.block_index = p // self.threads_per_block
        self.env = {
            "thread x": p % self.threads_per_block,
            "block x": self.block_index % grid[0],
            "block y": (self.block_index // grid[0]) % grid[1],
            "block z": self.block_index // (grid[0] * grid[1]),
        }
        self.values = {}
        self.memory = {}
        for (name, type_text), array in zip(function.arguments, arguments, strict=True):
            shape, element, _ = _memref(type_text)
            self.memory[name] = array
        for name, type_text in function.workgroup:
            shape, element, _ = _memref(type_text)
            self.memory[name] = np.zeros([self.blocks, *shape], dtype=_dtype(element))

    def run(self) -> None:
        self._block(self.f.body, np.ones(self.P, bool))

    # -- values -------------------------------------------------------------------------------------

    def _get(self, name: str):
        if name not in self.values:
            raise KernelError(f"undefined value {name}")
        return self.values[name]

    def _full(self, value) -> np.ndarray:
        value = np.asarray(value)
        if value.ndim == 0:
            return np.full(self.P, value, dtype=value.dtype)
        if value.ndim == 1 and value.shape[0] != self.P:  # a vector constant
            return np.broadcast_to(value, (self.P, value.shape[0])).copy()
        return value

    def _index(self, memref_name: str, indices: list[str], mask: np.ndarray, lanes: int = 0):
        """The numpy index of a load/store of each thread (inactive threads read element 0)."""
        idx = [np.where(mask, self._full(self._get(i)), 0) for i in indices]
        array = self.memory[memref_name]
        workgroup = array.ndim == len(indices) + 1
        if lanes:
            idx[-1] = idx[-1][:, None] + np.arange(lanes)[None, :]
            prefix = [self.block_index[:, None]] if workgroup else []
            idx = [i[:, None] if i.ndim == 1 else i for i in idx[:-1]] + [idx[-1]]
        else:
            prefix = [self.block_index] if workgroup else []
        return array, tuple(prefix + idx)

    # -- execution ----------------------------------------------------------------------------------

    def _block(self, ops, mask):
        for op in ops:
            result = self._op(op, mask)
            if result is not None:  # scf.yield
                return result
        return None

    def _assign(self, names: str, values: list, mask: np.ndarray) -> None:
        targets = [n.strip() for n in names.split(",")]
        if len(targets) == 1 and ":" in targets[0]:  # %r:4
            base = targets[0].split(":")[0]
            targets = [f"{base}#{i}" for i in range(len(values))]
        for name, value in zip(targets, values, strict=True):
            self.values[name] = value

    def _op(self, op, mask):
        line = op["line"]
        if "body" in op:
            return self._region(op, mask)
        if line.startswith("scf.yield"):
            operands = line[len("scf.yield") :].split(":")[0]
            return [self._get(n.strip()) for n in operands.split(",") if n.strip()]
        if line.startswith(("memref.assume_alignment", "gpu.barrier")):
            return None
        if line.startswith("memref.store"):
            m = re.match(rf"memref\.store ({_NAME}), (%\w+)\[(.*?)\]", line)
            array, index = self._index(m.group(2), [i.strip() for i in m.group(3).split(",")], mask)
            value = self._full(self._get(m.group(1)))
            array[tuple(i[mask] for i in index)] = value[mask]
            return None
        m = re.match(rf"({_NAME}(?::\d+)?(?:, {_NAME})?) = (.*)", line)
        if not m:
            raise KernelError(f"cannot read {line!r}")
        names, rhs = m.group(1), m.group(2)
        global_ = re.match(r"memref\.get_global @(\w+)", rhs)
        if global_:  # a memref value: loads find it by its SSA name
            self.memory[names] = self.f.globals[global_.group(1)]
            return None
        self._assign(names, self._compute(rhs, mask), mask)
        return None

    def _region(self, op, mask):
        line = op["line"]
        loop = rf"scf\.for (%\w+) = ({_NAME}) to ({_NAME}) step ({_NAME})(?: iter_args\((.*?)\))?"
        m = re.match(rf"(?:({_NAME}(?::\d+)?) = )?{loop}", line)
        if m:
            results, iv_name, lb, ub, step, iter_args = m.groups()
            inits = [tuple(p.split(" = ")) for p in _split_top(iter_args or "")]
            iv = self._full(self._get(lb)).astype(np.int64)
            ub_v, step_v = self._full(self._get(ub)), self._full(self._get(step))
            state = [self._full(self._get(v)) for _, v in inits]
            active = mask & (iv < ub_v)
            while active.any():
                self.values[iv_name] = iv
                for (name, _), value in zip(inits, state, strict=True):
                    self.values[name] = value
                yields = self._block(op["body"], active) or []
                state = [
                    np.where(active[:, None] if s.ndim == 2 else active, self._full(y), s)
                    for s, y in zip(state, yields, strict=True)
                ]
                iv = np.where(active, iv + step_v, iv)
                active = active & (iv < ub_v)
            if results:
                self._assign(results, state, mask)
            return None
        m = re.match(rf"(?:({_NAME}(?::\d+)?) = )?scf\.if ({_NAME})", line)
        if m:
            results, cond_name = m.groups()
            cond = self._full(self._get(cond_name)).astype(bool)
            then_values = self._block(op["body"], mask & cond) if (mask & cond).any() else None
            else_values = None
            if "else" in op and (mask & ~cond).any():
                else_values = self._block(op["else"], mask & ~cond)
            if results:
                count = len(then_values or else_values or [])
                if count == 0:  # no thread took either branch
                    count = int(results.split(":")[1]) if ":" in results else 1
                    zero = np.zeros(self.P, np.float32)
                    then_values = else_values = [zero] * count
                then_values = [self._full(v) for v in (then_values or else_values)]
                else_values = [self._full(v) for v in (else_values or then_values)]
                merged = [
                    np.where(cond[:, None] if t.ndim == 2 else cond, t, e)
                    for t, e in zip(then_values, else_values, strict=True)
                ]
                self._assign(results, merged, mask)
            return None
        raise KernelError(f"unknown region op {line!r}")

    def _compute(self, rhs: str, mask):
        get = self._get
        if rhs.startswith("arith.constant"):
            m = re.match(r"arith\.constant (.*) : (.*)", rhs)
            value, type_text = m.groups()
            dense = re.match(r"dense<(.*)>", value)
            vec = re.match(r"vector<(\d+)x(\w+)>", type_text)
            if dense:
                return [np.full(int(vec.group(1)), float(dense.group(1)), dtype=_dtype(vec.group(2)))]
            return [_dtype(type_text.strip())(float(value) if "." in value or "e" in value else int(value))]
        m = re.match(r"gpu\.(thread|block)_id (\w)", rhs)
        if m:
            return [self.env[f"{m.group(1)} {m.group(2)}"]]
        m = re.match(rf"gpu\.shuffle xor ({_NAME}), ({_NAME}), ({_NAME}) : f32", rhs)
        if m:
            value = self._full(get(m.group(1)))
            offset = int(get(m.group(2)))
            return [value[np.arange(self.P) ^ offset], np.ones(self.P, bool)]
        m = re.match(r"memref\.load (%\w+)\[(.*?)\] : (.*)", rhs)
        if m:
            array, index = self._index(m.group(1), [i.strip() for i in m.group(2).split(",")], mask)
            return [array[index]]
        m = re.match(r"vector\.load (%\w+)\[(.*?)\] : .*, vector<(\d+)x\w+>", rhs)
        if m:
            array, index = self._index(m.group(1), [i.strip() for i in m.group(2).split(",")], mask, int(m.group(3)))
            return [array[index]]
        m = re.match(rf"vector\.splat ({_NAME}) : vector<(\d+)x\w+>", rhs)
        if m:
            return [np.repeat(self._full(get(m.group(1)))[:, None], int(m.group(2)), axis=1)]
        m = re.match(rf"vector\.extract ({_NAME})\[(\d+)\]", rhs)
        if m:
            return [self._full(get(m.group(1)))[:, int(m.group(2))]]
        m = re.match(rf"vector\.fma ({_NAME}), ({_NAME}), ({_NAME})", rhs)
        if m:
            a, b, c = (self._full(get(g)) for g in m.groups())
            return [(a * b + c).astype(np.float32)]
        m = re.match(rf"arith\.cmpi (\w+), ({_NAME}), ({_NAME})", rhs)
        if m:
            a, b = get(m.group(2)), get(m.group(3))
            return [{"ult": np.less, "eq": np.equal, "slt": np.less}[m.group(1)](a, b)]
        m = re.match(rf"arith\.select ({_NAME}), ({_NAME}), ({_NAME})", rhs)
        if m:
            c, a, b = (get(g) for g in m.groups())
            return [np.where(c, a, b)]
        m = re.match(rf"(arith|math)\.(\w+) ({_NAME})(?:, ({_NAME}))? : (.*)", rhs)
        if m:
            _, op, x_name, y_name, type_text = m.groups()
            x = get(x_name)
            y = get(y_name) if y_name else None
            binary = {
                "addi": np.add,
                "subi": np.subtract,
                "muli": np.multiply,
                "divui": np.floor_divide,
                "remui": np.remainder,
                "minui": np.minimum,
                "xori": np.bitwise_xor,
                "andi": np.logical_and,
                "addf": np.add,
                "subf": np.subtract,
                "mulf": np.multiply,
                "divf": np.divide,
                "maximumf": np.maximum,
            }
            if op in binary:
                return [binary[op](x, y)]
            if op == "shli":
                return [np.left_shift(np.asarray(x).astype(np.uint32), np.asarray(y).astype(np.uint32))]
            unary = {
                "negf": np.negative,
                "tanh": np.tanh,
                "exp": np.exp,
                "cos": np.cos,
                "sin": np.sin,
                "rsqrt": lambda v: (1.0 / np.sqrt(v)).astype(np.asarray(v).dtype),
            }
            if op in unary:
                return [unary[op](x)]
            casts = {
                "index_cast": lambda v: np.asarray(v).astype(np.int64),
                "extui": lambda v: np.asarray(v).astype(np.uint32),
                "bitcast": lambda v: np.asarray(v).astype(np.uint32).view(np.float32),
                "sitofp": lambda v: np.asarray(v).astype(np.float64),
                "truncf": lambda v: np.asarray(v).astype(np.float32),
            }
            if op in casts:
                return [casts[op](x)]
        raise KernelError(f"the interpreter does not know {rhs!r}")


def run_launch(module_text: str, globals_: dict, launch: dict, arrays: list[np.ndarray]) -> None:
    """Runs one manifest launch (kernel name, grid, block) on `arrays` (see Launch)."""
    function = Function(module_text, launch["kernel"], globals_)
    Launch(function, launch["grid"], launch["block"], arrays).run()


def argument_arrays(module_text: str, kernel: str, memory, args: list[dict]) -> list[np.ndarray]:
    """Flat views of the emulator's `memory` at each pointer argument, in its memref's element type."""
    function = Function(module_text, kernel, {})
    arrays = []
    for (_, type_text), arg in zip(function.arguments, args, strict=True):
        shape, element, _ = _memref(type_text)
        dtype = _dtype(element)
        data = memory.buffers[arg["buffer"]]
        start = arg["offset"]
        count = (len(data) - start) // np.dtype(dtype).itemsize
        arrays.append(data[start : start + count * np.dtype(dtype).itemsize].view(dtype))
    return arrays
