"""``python -m gen asm IN.s -o OUT.hex``: assemble a coprocessor program."""
from __future__ import annotations

from pathlib import Path

from hw.isa import WORD_BITS
from model.errors import InputError

NAME = "asm"
HELP = "assemble a reshard-coprocessor program (.s) into a $readmemh image (.hex)"
ORDER = 40


def add_arguments(parser):
    parser.add_argument("input", metavar="IN.s", help="assembly source (syntax: docs/isa.md)")
    parser.add_argument("-o", "--output", metavar="OUT.hex",
                        help="output image (default: IN with suffix .hex)")
    parser.add_argument("--allow-version-mismatch", action="store_true",
                        help="assemble a program whose 'version N' is not this ISA's version "
                             "(to test that the hardware refuses it)")


def run(args) -> int:
    from gen.asm import assemble
    from gen.hexfile import write_hex

    src = Path(args.input)
    try:
        text = src.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{src}: no such file") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{src}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(f"{src}: cannot read ({e.strerror})") from None
    words = assemble(text, str(src), allow_version_mismatch=args.allow_version_mismatch)
    out = Path(args.output) if args.output else src.with_suffix(".hex")
    write_hex(out, words, WORD_BITS, comment=f"assembled from {src.name}: {len(words)} words")
    print(f"{out}: {len(words)} instruction words")
    return 0
