"""The ``python -m gen`` command line.

Each subcommand lives in its own module ``gen/cmd_<name>.py`` that defines
``NAME``, ``HELP``, ``ORDER``, ``add_arguments(parser)`` and ``run(args) -> int``.
Subcommands are discovered, so ``--help`` lists exactly the ones that exist.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import gen
from model.errors import InputError


def _commands():
    mods = []
    for info in pkgutil.iter_modules(gen.__path__):
        if info.name.startswith("cmd_"):
            mods.append(importlib.import_module(f"gen.{info.name}"))
    return sorted(mods, key=lambda m: (m.ORDER, m.NAME))


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m gen",
        description="ReshardIP: capture verl reshard traffic, plan it, compile it, run it on the "
                    "golden model and the RTL. With no subcommand, runs the main job.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = {}
    for mod in _commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        commands[mod.NAME] = mod
    return parser, commands


class _ArgParseExit(Exception):
    pass


def main(argv=None) -> int:
    parser, commands = build_parser()
    args = parser.parse_args(argv)
    name = args.command or "main"
    mod = commands[name] if args.command else importlib.import_module("gen.mainjob")
    try:
        return int(mod.run(args) or 0)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
