"""``python -m gen disasm IN.hex [-o OUT.s]``: disassemble a program image."""
from __future__ import annotations

import sys
from pathlib import Path

from hw.isa import WORD_BITS

NAME = "disasm"
HELP = "disassemble a reshard-coprocessor $readmemh program image into canonical assembly"
ORDER = 41


def add_arguments(parser):
    parser.add_argument("input", metavar="IN.hex", help="program image (256-bit words)")
    parser.add_argument("-o", "--output", metavar="OUT.s", help="output file (default: stdout)")


def run(args) -> int:
    from gen.asm import disassemble
    from gen.hexfile import atomic_write_text, read_hex

    base, words = read_hex(args.input, WORD_BITS)
    header = f"; disassembled from {Path(args.input).name}\n"
    if base:
        # words before the image's base are zero; keep word indices = pc
        words = [0] * base + words
    text = header + disassemble(words)
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
