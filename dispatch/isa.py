"""Rows of the ahead-of-time ISA report (`tools/isa_report`): one per (kernel variant, target).

Each backend provides `isa_rows()` in its `isa` module; the tool prints them as one matrix and fails CI
when a (kernel, target) that the backend's support predicates declare supported did not compile.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class IsaRow:
    backend: str  # "triton" | "cuda" | "hip"
    kernel: str  # e.g. "w8a16_splitk[rowscale]"
    target: str  # "sm_80" | "sm_89" | "sm_90" | "gfx1201" | "gfx942"
    supported: bool  # what the backend's support predicate declares for this target
    compiled: bool
    error: str = ""  # first lines of the compiler error when not compiled
    mma: str = ""  # matrix instruction family seen: "mma.sync fp8", "wgmma bf16", "v_wmma fp8", "none"
    fp8_cvt: str = ""  # "hw" | "sw" | "none"
    widest_load_bits: int = 0
    spills: int = 0  # bytes of local/scratch spill (0 is the goal)
    note: str = ""
    wgmma_hazards: int = 0  # writes to registers an unfinished wgmma still reads (wgmma_register_hazards)
    loop_barriers: int = -1  # barriers in the largest loop body (main_loop_barriers / gcn_...); -1: not read
    wgmma_serialized: str = ""  # ptxas's reason when it serialized the kernel's wgmmas (info C7515), else ""

    @property
    def failed_supported(self) -> bool:
        return self.supported and not self.compiled

    @property
    def unsafe_supported(self) -> bool:
        return self.supported and self.compiled and self.wgmma_hazards > 0


# --- barriers in the main loop ---------------------------------------------------------------------------
# A CTA barrier in a kernel's K loop is either its software pipeline's (cp.async stages, a wgmma operand in shared
# memory: expected) or a layout conversion that Triton routes through shared memory, which stalls every warp of
# the CTA once per K step. The Triton decode GEMV's CUDA-core path has 4-8 per K step on sm_90 (found in session 14):
# its x tile and weight tile take different register layouts, and the whole weight tile is converted.
# A loop's back edge is a predicated branch; an unconditional backward BRA is the return from an out-of-line block
# (an mbarrier wait's retry path, placed after the epilogue), whose span is not a loop body.
_SASS_BACK_BRANCH = re.compile(r"/\*([0-9a-f]{4,})\*/\s+@!?U?P\w+\s+BRA(?:\.\w+)*\s+(?:`?\(?)0x([0-9a-f]+)")
_SASS_BAR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BAR\.(?:SYNC|RED|ARV)")


def main_loop_span(sass: str) -> tuple[int, int] | None:
    """(first, last) address of the largest loop body (the widest predicated backward branch) of `cuobjdump -sass`
    text of one kernel, or None when the code has no loop."""
    loops = [(int(t, 16), int(a, 16)) for a, t in _SASS_BACK_BRANCH.findall(sass) if int(t, 16) < int(a, 16)]
    return max(loops, key=lambda r: r[1] - r[0]) if loops else None


def main_loop_instructions(sass: str) -> list[str]:
    """The instructions (text without the predicate and ';') of the largest loop body, in address order."""
    span = main_loop_span(sass)
    if span is None:
        return []
    return [re.sub(r"^@!?U?P\w+\s+", "", text) for addr, text in _SASS_INSTR.findall(sass)
            if span[0] <= int(addr, 16) <= span[1]]


def main_loop_barriers(sass: str) -> int:
    """CTA barriers (BAR.SYNC / RED / ARV) inside the largest loop body of `cuobjdump -sass` text of one kernel;
    0 when the code has no loop."""
    span = main_loop_span(sass)
    return 0 if span is None else sum(span[0] <= int(a, 16) <= span[1] for a in _SASS_BAR.findall(sass))


# LLVM's AMDGPU assembly names each block's loop in the label's comment: "; =>This Inner Loop Header: Depth=1" or
# "; =>This Loop Header: ..." on a header, "in Loop: Header=BB0_3 Depth=2" on the blocks of its body.
_GCN_LABEL = re.compile(r"^(\.LBB\d+_\d+):\s*(?:;\s*(.*))?$")
_GCN_IN_LOOP = re.compile(r"in Loop: Header=(BB\d+_\d+)")


def gcn_main_loop_barriers(asm: str) -> int:
    """Workgroup barriers (s_barrier, or gfx12's s_barrier_wait) in the loop body with the most instructions, of LLVM
    AMDGPU assembly (a block counts toward the innermost loop its label names); 0 when there is no loop."""
    header, count, bars = None, {}, {}
    for line in asm.splitlines():
        m = _GCN_LABEL.match(line.strip())
        if m:
            note = m.group(2) or ""
            inside = _GCN_IN_LOOP.search(note)
            header = inside.group(1) if inside else (m.group(1)[2:] if "Loop Header" in note else None)
            continue
        op = line.strip().split(None, 1)[0] if line.strip() else ""
        if header is None or not op or op.startswith((";", ".")):
            continue
        count[header] = count.get(header, 0) + 1
        if op in ("s_barrier", "s_barrier_wait"):
            bars[header] = bars.get(header, 0) + 1
    return bars.get(max(count, key=count.get), 0) if count else 0


# --- wgmma register hazards in SASS -------------------------------------------------------------------
# An HGMMA (sm_90 wgmma) reads its register operands asynchronously: the A fragment (4 registers per thread
# when A comes from registers) and the accumulators, until a WARPGROUP.DEPBAR.LE gsb0, N leaves at most N
# of the newer groups in flight. A write to those registers before the wait (in the PTX itself, see
# ptx_wgmma_register_hazards, or by a ptxas that re-allocates them early: triton-lang/triton PR 11781) makes the
# tensor core read whatever was written, nondeterministically. Observed on the H200 (2026-11-29, session 8) as
# non-finite outputs from the Triton W8A16 GEMM at 2 CTAs per SM. The check below finds every such write in the
# disassembly, statically.

_SASS_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_SASS_REG = re.compile(r"^R(\d+)$")
# Opcodes (before the first '.') whose first operand is not a general register they write.
_NO_REG_DEST = frozenset((
    "ST", "STS", "STG", "STL", "STSM", "RED", "BAR", "BRA", "BRX", "JMP", "CALL", "RET", "EXIT", "NOP", "DEPBAR",
    "LDGDEPBAR", "WARPGROUP", "ARRIVES", "SYNCS", "MEMBAR", "FENCE", "ERRBAR", "CCTL", "BSSY", "BSYNC", "WARPSYNC",
    "YIELD", "BPT", "LDGSTS", "ISETP", "FSETP", "HSETP2", "DSETP", "PLOP3", "R2UR", "PREEXIT", "ACQBULK", "UTMALDG",
    "UTMASTG", "UTMACMDFLUSH", "UTMAPF", "UBLKCP", "ELECT",
))


@dataclasses.dataclass(frozen=True)
class WgmmaHazard:
    at: int  # address of the instruction that writes
    instruction: str
    registers: tuple[int, ...]  # general registers written while an HGMMA may still read them
    hgmma_at: int  # address of that HGMMA

    def __str__(self) -> str:
        regs = ",".join(f"R{r}" for r in self.registers)
        return f"{self.at:#06x} {self.instruction}: writes {regs}, read by the HGMMA at {self.hgmma_at:#06x} before its wait"


def _dest_width(op: str) -> int:
    """General registers an instruction writes from its first operand on (conservative for wide forms)."""
    if op.startswith(("IMAD.WIDE", "CS2R", "DADD", "DFMA", "DMUL", "MOV.64")):
        return 2
    m = re.search(r"\.(64|128)(?:\.|$)", op)
    if m:
        return int(m.group(1)) // 32
    if op.startswith("LDSM"):
        m = re.search(r"\.(\d)$", op)
        return int(m.group(1)) if m else 4
    return 1


def _hgmma_operands(op: str, operands: list[str]) -> tuple[set[int], bool]:
    """(registers the HGMMA reads asynchronously: accumulators and a register A fragment, commits a group)."""
    regs: set[int] = set()
    m = re.match(r"HGMMA\.64x(\d+)x\d+", op)
    acc = _SASS_REG.match(operands[0]) if operands else None
    if m and acc:  # 64 x N fp32 accumulators over 128 threads: N / 2 registers each
        regs |= set(range(int(acc.group(1)), int(acc.group(1)) + int(m.group(1)) // 2))
    a = _SASS_REG.match(operands[1]) if len(operands) > 1 else None
    if a:  # A from registers: a 64 x (32 bytes) fragment, 4 registers per thread for every input type
        regs |= set(range(int(a.group(1)), int(a.group(1)) + 4))
    return regs, bool(operands) and "gsb0" in operands[-1]


_MAX_PENDING_GROUPS = 32  # more committed groups than any wait keeps; only a loop with no wait at all reaches it


def _retire(groups: tuple, keep: int) -> tuple:
    """The committed groups still in flight after a wait that leaves at most `keep` of the newest."""
    return groups[len(groups) - keep:] if len(groups) > keep else groups


def _flow(i: int, count: int, branch: bool, target: "int | None", ends: bool, predicated: bool) -> list[int]:
    """Successors of instruction i of `count`: a branch goes to `target` (None: out of the listing) and, predicated,
    also falls through; an instruction that `ends` its path (exit, return, indirect jump) falls through only when
    predicated; anything else falls through."""
    nxt = [i + 1] if i + 1 < count else []
    if branch:
        taken = [target] if target is not None else []
        return taken + nxt if predicated else taken
    if ends:
        return nxt if predicated else []
    return nxt


def _walk(count: int, successors, step) -> None:
    """Visit instruction 0.. with every in-flight state that can reach it (state: (committed groups oldest first,
    the open group's registers, its first instruction)), until nothing new arrives; `step` records hazards."""
    seen: list[set] = [set() for _ in range(count)]
    work = [(0, ((), frozenset(), None))] if count else []
    while work:
        i, state = work.pop()
        if state in seen[i]:
            continue
        seen[i].add(state)
        out = step(i, state)
        work.extend((j, out) for j in successors(i))


def wgmma_register_hazards(sass: str) -> list[WgmmaHazard]:
    """Writes to registers that an issued HGMMA may still read, in `cuobjdump -sass` text.

    A dataflow over the control flow: each instruction is visited with every state of in-flight HGMMA groups that
    can reach it (through fallthrough, predicated and unconditional branches, loop back edges), until nothing new
    arrives; an unconditional BRA does not fall through, so code laid out after a branch's jump (the other arm of
    an if, a second loop) is judged by the paths that reach it. HGMMAs accumulate into a group until one carries
    gsb0 (the commit); WARPGROUP.DEPBAR.LE gsb0, N retires all but the N newest groups. Chaining one HGMMA's
    accumulators into the next is not a write. Conservative: a predicated write counts, a predicated branch may go
    either way, and so does every general register a wide form may write. An indirect branch (BRX, JMP) ends the
    walk of its path (Triton's kernels have none)."""
    instrs = []
    for m in _SASS_INSTR.finditer(sass):
        text = m.group(2)
        predicated = text.startswith("@") and not text.startswith("@PT ")
        body = text.split(None, 1)[1] if text.startswith("@") else text
        op, _, rest = body.partition(" ")
        instrs.append((int(m.group(1), 16), op, [o.strip() for o in rest.split(",")] if rest else [], text,
                       predicated))
    index = {addr: i for i, (addr, *_) in enumerate(instrs)}
    found: dict[tuple[int, int], WgmmaHazard] = {}

    def successors(i: int) -> list[int]:
        _, op, operands, _, predicated = instrs[i]
        base = op.split(".")[0]
        branch = base == "BRA" and bool(operands) and operands[-1].startswith("0x")
        return _flow(i, len(instrs), branch, index.get(int(operands[-1], 16)) if branch else None,
                     base in ("EXIT", "RET", "BRX", "JMP", "JMX"), predicated)

    def step(i: int, state: tuple) -> tuple:
        """The state after instruction i: (committed groups oldest first, the open group's registers and address)."""
        groups, open_regs, open_at = state
        addr, op, operands, text, _ = instrs[i]
        if op.startswith("HGMMA"):
            regs, commit = _hgmma_operands(op, operands)
            open_regs, open_at = open_regs | regs, addr if open_at is None else open_at
            if commit:
                groups = (groups + ((open_regs, open_at),))[-_MAX_PENDING_GROUPS:]
                open_regs, open_at = frozenset(), None
            return groups, open_regs, open_at
        if op.startswith("WARPGROUP.DEPBAR"):
            return _retire(groups, int(operands[-1], 0)), open_regs, open_at
        base = op.split(".")[0]
        dest = _SASS_REG.match(operands[0]) if operands else None
        if base in _NO_REG_DEST or base.startswith("U") or not dest:
            return state
        written = set(range(int(dest.group(1)), int(dest.group(1)) + _dest_width(op)))
        pending = list(groups) + ([(open_regs, open_at)] if open_at is not None else [])
        for regs, hgmma_at in pending:
            hit = written & regs
            if hit:
                found.setdefault((addr, hgmma_at), WgmmaHazard(addr, text, tuple(sorted(hit)), hgmma_at))
        return state

    _walk(len(instrs), successors, step)
    return sorted(found.values(), key=lambda h: (h.at, h.hgmma_at))


# The same question one level up, in the PTX a compiler hands to ptxas: does the program itself write a register
# that an issued wgmma.mma_async may still read? If it does, no assembler can keep the tensor core's operands
# intact (PTX's wgmma contract: its register operands must not be modified before the wgmma.wait_group that
# retires it), whatever ptxas version runs. Triton 3.6's W8A16 GEMM without WGMMA_DRAIN is such a program: it
# decodes a whole K tile before the tile's k16 wgmmas and keeps three of the previous step's wgmmas in flight
# across the loop's back edge (wait_group 3), so the next tile's decode rewrites their A fragments (PTX virtual
# registers are the same each iteration).

@dataclasses.dataclass(frozen=True)
class PtxWgmmaHazard:
    at: int  # index of the writing statement among the kernel's PTX statements
    statement: str
    registers: tuple[str, ...]  # PTX registers written while a wgmma.mma_async may still read them
    wgmma_at: int  # index of that wgmma.mma_async

    def __str__(self) -> str:
        return (f"#{self.at} {self.statement}: writes {','.join(self.registers)}, read by the wgmma.mma_async "
                f"#{self.wgmma_at} before its wait_group")


_PTX_REG = re.compile(r"%[A-Za-z_$][\w$]*")
_PTX_LABEL = re.compile(r"^([$\w]+):\s*(.*)$", re.S)
# Statements whose first operand is read, not written (st/red/cp.async.bulk start with an address anyway).
_PTX_NO_DEST = ("bra", "ret", "exit", "wgmma.", "bar.", "barrier.", "fence.", "membar.", "griddepcontrol.",
                "setmaxnreg.", "prefetch", "trap", "call")


def _ptx_operands(rest: str) -> list[str]:
    """Top-level comma-separated operands (commas inside {...} and [...] belong to one operand)."""
    out, depth, cur = [], 0, []
    for ch in rest:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _ptx_statements(ptx: str) -> list[tuple[str | None, str, str, list[str], bool]]:
    """(label or None, opcode, text, operands, predicated) for each statement of the PTX text's function bodies;
    a label is a statement of its own (opcode ""). Directives (.reg, .loc, ...) and inline-asm braces are dropped.

    A label declared inside a `{ }` block is visible only there, and inline asm repeats them (each mbarrier wait of a
    Triton kernel is a block with its own `waitLoop:`): such labels are renamed `name#block`, and a branch goes to the
    declaration of its innermost enclosing block (session 24: resolved by name alone, a wait loop's branch jumped
    to the last `waitLoop` of the function and skipped the wgmma.wait_group between them, a false hazard)."""
    # comments out; directive lines (.loc, .reg, .param, ...) out: .loc carries no ';' and would swallow the next
    # statement
    text = "\n".join(ln for ln in re.sub(r"//[^\n]*", "", ptx).splitlines() if not ln.lstrip().startswith("."))
    out: list[tuple[str | None, str, str, list[str], bool, tuple[int, ...]]] = []
    blocks, opened = [0], 0  # the enclosing blocks, innermost last (0: the function body)

    def braces(st: str) -> str:  # and the ")" that closes an entry's parameter list before its body's "{"
        nonlocal opened
        while st[:1] in ("{", "}", ")"):
            if st[0] == "{":
                opened += 1
                blocks.append(opened)
            elif len(blocks) > 1:
                blocks.pop()
            st = st[1:].strip()
        return st

    for raw in text.split(";"):
        st = raw.strip()
        while True:  # labels and the braces of inline-asm scopes before the statement
            st = braces(st)
            m = _PTX_LABEL.match(st)
            if not m or m.group(1).startswith("%"):
                break
            out.append((m.group(1), "", m.group(1) + ":", [], False, tuple(blocks)))
            st = m.group(2).strip()
        closing = 0
        if not st.endswith("}}") and st.count("{") < st.count("}"):
            closing = len(st) - len(st.rstrip("}"))
            st = st.rstrip("}").strip()
        if st and not st.startswith((".", "}", ")", "(")) and "{" != st:
            predicated = st.startswith("@")
            body = st.split(None, 1)[1] if predicated and len(st.split(None, 1)) > 1 else st
            op, _, rest = body.partition(" ")
            out.append((None, op.strip(), st, _ptx_operands(rest.replace("\n", " ").replace("\t", " ")), predicated,
                        tuple(blocks)))
        for _ in range(closing):
            if len(blocks) > 1:
                blocks.pop()

    declared: dict[str, list[tuple[int, ...]]] = {}
    for lab, *_, where in out:
        if lab:
            declared.setdefault(lab, []).append(where)

    def unique(name: str, block: tuple[int, ...]) -> str:
        return name if len(block) == 1 else f"{name}#{block[-1]}"

    stmts: list[tuple[str | None, str, str, list[str], bool]] = []
    for lab, op, st, operands, predicated, where in out:
        if lab:
            lab = unique(lab, where)
        elif op.split(".")[0] == "bra" and operands:
            name = operands[-1].strip()
            seen = [b for b in declared.get(name, []) if where[:len(b)] == b]
            if seen:
                operands = operands[:-1] + [unique(name, max(seen, key=len))]
        stmts.append((lab, op, st, operands, predicated))
    return stmts


def ptx_wgmma_register_hazards(ptx: str) -> list[PtxWgmmaHazard]:
    """Writes, in PTX text, to registers that an issued wgmma.mma_async may still read (its register A fragment
    and its accumulators), before the wgmma.wait_group that retires its commit group: the dataflow of
    `wgmma_register_hazards` over PTX statements and labels (a bra goes to its label; a predicated bra may go
    either way). Chaining one wgmma's accumulators into the next is not a write."""
    stmts = _ptx_statements(ptx)
    labels = {lab: i for i, (lab, *_) in enumerate(stmts) if lab}
    found: dict[tuple[int, int], PtxWgmmaHazard] = {}

    def successors(i: int) -> list[int]:
        _, op, _, operands, predicated = stmts[i]
        base = op.split(".")[0]
        branch = base == "bra" and bool(operands)
        return _flow(i, len(stmts), branch, labels.get(operands[-1].strip()) if branch else None,
                     base in ("ret", "exit"), predicated)

    def step(i: int, state: tuple) -> tuple:
        groups, open_regs, open_at = state
        _, op, text, operands, _ = stmts[i]
        if op.startswith("wgmma.mma_async"):
            regs = set(_PTX_REG.findall(operands[0])) if operands else set()
            if len(operands) > 1 and operands[1].startswith("{"):
                regs |= set(_PTX_REG.findall(operands[1]))  # A from registers
            return groups, open_regs | regs, i if open_at is None else open_at
        if op.startswith("wgmma.commit_group"):
            if open_at is not None:
                groups = (groups + ((open_regs, open_at),))[-_MAX_PENDING_GROUPS:]
            return groups, frozenset(), None
        if op.startswith("wgmma.wait_group"):
            return _retire(groups, int(operands[-1], 0)), open_regs, open_at
        if not op or op.startswith(_PTX_NO_DEST) or not operands or not operands[0].startswith(("%", "{")):
            return state
        written = set(_PTX_REG.findall(operands[0]))
        pending = list(groups) + ([(open_regs, open_at)] if open_at is not None else [])
        for regs, at in pending:
            hit = written & regs
            if hit:
                found.setdefault((i, at), PtxWgmmaHazard(i, " ".join(text.split()), tuple(sorted(hit)), at))
        return state

    _walk(len(stmts), successors, step)
    return sorted(found.values(), key=lambda h: (h.at, h.wgmma_at))
