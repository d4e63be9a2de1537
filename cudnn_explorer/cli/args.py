"""What every verb's parser shares: a parser that reports a bad option as one line and
knows its own flags, the conflicts between flags as data, and the option groups and
readers that more than one verb takes."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..core.errors import UserError

__all__ = ["Parser", "Refuse", "Needs", "check_rules", "given_flags", "tf32"]


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as one line (exit 2), not usage + error, and
    keeps a table of its flags (``flags``: option string -> its action), which the
    conflict rules and the joining of negative values read."""

    def __init__(self, **kw):
        kw.setdefault("allow_abbrev", False)
        super().__init__(**kw)
        self.flags: Dict[str, argparse.Action] = {}

    def error(self, message):
        raise UserError(message)

    def add(self, *names, **kw) -> argparse.Action:
        """add_argument, with the flags kept in ``flags``."""
        return self._keep(self.add_argument(*names, **kw))

    def group(self, title: Optional[str] = None,
              description: Optional[str] = None) -> "Group":
        """An argument group: a short ``title`` (argparse prints it as it is, unwrapped)
        and the ``description`` below it (wrapped)."""
        return Group(self, self.add_argument_group(title, description))

    def _keep(self, action: argparse.Action) -> argparse.Action:
        self.flags.update({s: action for s in action.option_strings})
        return action

    def parse_given(self, argv: Sequence[str], nothing: str):
        """parse(), after the usage and UserError ``nothing`` when ``argv`` is empty."""
        if not argv:
            sys.stderr.write(self.format_usage())
            raise UserError(nothing)
        return self.parse(argv)

    def parse(self, argv: Sequence[str]):
        """(namespace, the long flags given) of ``argv``, a value that starts with '-'
        taken as the value it is (join_negative_values)."""
        argv = self.join_negative_values(list(argv))
        # intermixed: a positional after an option (plans write --cudnn X FILE) is taken as
        # the positional it is, not refused as "unrecognized arguments: FILE"
        a = self.parse_intermixed_args(argv)
        if getattr(a, "load", None) == "":  # else read as "no --load": another verb's error
            raise UserError("--load '': give a saved file's path")
        return a, given_flags(self, argv)

    def join_negative_values(self, argv: List[str]) -> List[str]:
        """``--shape -1,3,8,8`` as ``--shape=-1,3,8,8``: argparse takes a value that starts
        with '-' for a flag and reports the wrong thing ("expected one argument");
        joined, the value reaches validation, which names what is wrong with it."""
        out, i = [], 0
        while i < len(argv):
            t = argv[i]
            action = self.flags.get(t)
            if (action is not None and action.nargs is None and i + 1 < len(argv)
                    and argv[i + 1].startswith("-") and argv[i + 1] not in self.flags
                    and not argv[i + 1].startswith("--")):
                out.append(f"{t}={argv[i + 1]}")
                i += 2
                continue
            out.append(t)
            i += 1
        return out


class Group:
    """An argument group whose flags its parser keeps."""

    def __init__(self, parser: Parser, group):
        self.parser, self.group_ = parser, group

    def add(self, *names, **kw) -> argparse.Action:
        return self.parser._keep(self.group_.add_argument(*names, **kw))

    def exclusive(self) -> "Group":
        return Group(self.parser, self.group_.add_mutually_exclusive_group())


def given_flags(parser: Parser, argv: Sequence[str]) -> List[str]:
    """The flags on the command line, each by its long name (``--x=v`` too, and a short
    alias such as ``-o``, ``-o=v`` or ``-ov`` as its long form), so that the conflict
    rules check an alias as they check its long form."""
    out = []
    for t in argv:
        if t.startswith("--"):
            action = parser.flags.get(t.split("=", 1)[0])
        elif t.startswith("-") and len(t) > 1:
            action = parser.flags.get(t[:2])
        else:
            continue
        if action is not None:
            out.append(long_name(action))
    return out


def long_name(action: argparse.Action) -> str:
    """The flag's long option string (its first, where it has none)."""
    return next((s for s in action.option_strings if s.startswith("--")),
                action.option_strings[0])


@dataclass(frozen=True)
class Refuse:
    """With ``flag`` given, any of ``others`` would be ignored or contradict it: refused,
    "OTHER would be ignored: WHY; drop OTHER or FLAG" (``drop``: that last part, when
    another wording says it better). A positional argument is named in capitals (NAME)."""

    flag: str
    others: Sequence[str]
    why: str
    drop: str = ""
    text: str = ""  # the whole message instead, with {bad} and {flag}

    def message(self, bad: str) -> str:
        if self.text:
            return self.text.format(bad=bad, flag=self.flag)
        return f"{bad} would be ignored: {self.why}; {self.drop or f'drop {bad} or {self.flag}'}"


@dataclass(frozen=True)
class Needs:
    """``flag`` needs one of ``wants`` given with it, else UserError ``text``."""

    flag: str
    wants: Sequence[str]
    text: str


def check_rules(rules: Sequence, flags: Sequence[str]) -> None:
    """UserError for the first rule the given ``flags`` break (in the table's order)."""
    for rule in rules:
        if rule.flag not in flags:
            continue
        if isinstance(rule, Refuse):
            bad = next((f for f in flags if f in rule.others), None)
            if bad:
                raise UserError(rule.message(bad))
        elif not any(f in flags for f in rule.wants):
            raise UserError(rule.text)


def tf32(text: Optional[str]) -> Optional[bool]:
    """--tf32 on|off as a bool; None when not given."""
    if text is None:
        return None
    t = str(text).strip().lower()
    if t in ("on", "1", "true", "yes"):
        return True
    if t in ("off", "0", "false", "no"):
        return False
    raise UserError(f"--tf32 '{text}': valid: on, off")
