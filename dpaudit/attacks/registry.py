"""The attack registry: the entry-point group ``dpaudit.attacks``, the run's options, and how names are resolved.

An attack is a class registered under the entry-point group ``dpaudit.attacks`` (pyproject
``[project.entry-points."dpaudit.attacks"]`` lists the built-in ones), imported only when it is asked for, so a
third-party attack plugs in as a third-party trainer does (``dpaudit.trainers``). Everything the registry, ``dpaudit
attack`` and the run know about an attack they read from its class (:class:`dpaudit.attacks.base.BaseAttack`): the
model kinds it runs on, its ``Config`` of options, whether it is a membership attack or the blind baseline, what it
is replaced by on another model kind, whether it joins the defaults on coin-flip canaries. ``"all"`` expands to every
registered attack that supports the model's kind; any membership attack brings the blind baseline (Das et al. 2024)
along, last, unless ``blind=False``.

The options of a run (:class:`AttackOptions`) are :class:`~dpaudit.attacks.options.RunOptions` and every registered
attack's Config; an option means one thing whichever attacks take it (a field shared through a mixin Config), and
an option of an attack that the run does not include is refused (:func:`check_options`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dpaudit.attacks.base import Attack, BaseAttack
from dpaudit.attacks.options import RunOptions
from dpaudit.common.errors import UserInputError

ENTRY_POINT_GROUP = "dpaudit.attacks"
DEFAULT_ATTACKS: tuple[str, ...] = ("exposure", "reconstruction")
#: The model kinds (:mod:`dpaudit.scoring.source`) in words, for messages.
_KIND_WORDS = {"masked-lm": "masked LM", "causal-lm": "causal LM", "classifier": "classifier"}


def prop(cls: type, attribute: str) -> Any:
    """An attack class's property (a :class:`~dpaudit.attacks.base.BaseAttack` attribute), with BaseAttack's value
    for a plug-in that does not define it."""
    return getattr(cls, attribute, getattr(BaseAttack, attribute))


@lru_cache(maxsize=8)
def _entry_points(path: tuple[str, ...]) -> dict[str, EntryPoint]:
    del path  # the cache key: a distribution added to sys.path is found
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_attacks() -> dict[str, EntryPoint]:
    """Registered attacks by name, without importing any of them."""
    return dict(_entry_points(tuple(sys.path)))


def attack_class(name: str) -> type[Attack]:
    """Import the attack registered as ``name``.

    Raises:
        UserInputError: no attack of that name, one that cannot be imported, or one that does not follow the
            :class:`~dpaudit.attacks.base.Attack` protocol.
    """
    registry = available_attacks()
    if name not in registry:
        known = ", ".join(sorted(registry)) or "none (is dpaudit installed with `pip install -e .`?)"
        raise UserInputError(f"--attacks {name!r} is not an attack; choose from: {known}, all.")
    return _load(registry[name])


@lru_cache(maxsize=None)
def _load(entry: EntryPoint) -> type[Attack]:
    try:
        cls = entry.load()
    except ImportError as err:
        raise UserInputError(
            f"--attacks {entry.name}: cannot import {entry.value} ({err}); install the package it needs."
        ) from None
    attack = cls() if isinstance(cls, type) else None  # the protocol is checked on an instance; read from its class
    problem = (
        None
        if isinstance(attack, Attack)
        and dataclasses.is_dataclass(type(attack).Config)
        and getattr(type(attack), "name", None) == entry.name
        and type(attack).model_kinds
        else f"a class with name = {entry.name!r}, model_kinds, a Config dataclass and run(context)"
    )
    if problem:
        raise UserInputError(
            f"--attacks {entry.name}: entry point {entry.value} does not follow the Attack protocol ({problem})."
        )
    return cls


def registered_classes() -> list[type[Attack]]:
    """Every registered attack class, in the order of ``--attacks all`` (their ``order``, then their names)."""
    return sorted((attack_class(name) for name in available_attacks()), key=lambda c: (prop(c, "order"), c.name))


def _split(names: Iterable[str] | str) -> list[str]:
    names = [names] if isinstance(names, str) else list(names)
    return [n.strip() for name in names for n in str(name).split(",") if n.strip()]


def default_attacks(
    names: Sequence[str],
    *,
    coin_flip: bool,
    model_kind: str,
    able: Callable[[type[Attack]], bool] | None = None,
) -> list[str]:
    """``names``; when they are :data:`DEFAULT_ATTACKS`, each replaced by its counterpart for ``model_kind`` (a causal
    LM gets extraction in place of reconstruction), the attacks that join the defaults on coin-flip canaries
    (``one_run_default``: the canary attack's one-run audit) added when the run can be audited in one run, and those
    that join them when able (``default_when_able``: the attacks against the target's base) added when ``able`` says
    they can run on this target (their check passes); those of the defaults that cannot run on ``model_kind`` (the
    canary attacks on a classifier) are then left out."""
    names = _split(names)
    if tuple(names) != DEFAULT_ATTACKS:
        return names
    out = [prop(attack_class(n), "counterparts").get(model_kind, (n,))[0] for n in names]
    if coin_flip:
        out += [
            c.name
            for c in registered_classes()
            if prop(c, "one_run_default") and model_kind in c.model_kinds and c.name not in out
        ]
    if able is not None:
        joining = [
            c.name
            for c in registered_classes()
            if prop(c, "default_when_able") and model_kind in c.model_kinds and c.name not in out and able(c)
        ]
        if joining:  # a classifier has no canary attack: the defaults are then the ones that joined
            out = [n for n in out if model_kind in attack_class(n).model_kinds] + joining
    return out


def resolve_attacks(
    names: Iterable[str], model_kind: str, *, model: str = "the model", blind: bool = True
) -> list[type[Attack]]:
    """Attack classes for ``names`` (``"all"`` = every attack supporting ``model_kind``), in order; with ``blind``,
    the baseline last when a membership attack is among them (and it is not already).

    Raises:
        UserInputError: an unknown name, or an attack that does not support the model's kind.
    """
    names = _split(names)
    if not names:
        raise UserInputError("--attacks is empty; name at least one attack, e.g. --attacks exposure,reconstruction.")
    out: list[type[Attack]] = []
    for name in names:
        if name == "all":
            out.extend(c for c in registered_classes() if model_kind in c.model_kinds and c not in out)
            continue
        cls = attack_class(name)
        counterpart = prop(cls, "counterparts").get(model_kind)
        if counterpart is not None:
            raise UserInputError(counterpart[1].format(model=model))
        if model_kind not in cls.model_kinds:
            needs = " or ".join(_KIND_WORDS.get(kind, kind) for kind in sorted(cls.model_kinds))
            fitting = [c.name for c in registered_classes() if not prop(c, "baseline") and model_kind in c.model_kinds]
            raise UserInputError(
                f"--attacks {name} needs a {needs}, but {model} is a "
                f"{_KIND_WORDS.get(model_kind, model_kind)}; pass a {needs}, or choose an attack for "
                f"it: {', '.join(fitting)}."
            )
        if cls not in out:
            out.append(cls)
    if not out:
        raise UserInputError(f"--attacks all: no registered attack supports a {model_kind} model.")
    if blind and any(prop(c, "membership") for c in out) and not any(prop(c, "baseline") for c in out):
        out.extend(c for c in registered_classes() if prop(c, "baseline") and model_kind in c.model_kinds)
    return out


# -- options --------------------------------------------------------------------------------------


def option_attacks(names: Iterable[str] | str) -> list[type[Attack]]:
    """The attacks whose options a run of ``--attacks NAMES`` takes, before the model's kind is known: the named ones
    (``all``: every registered attack); for :data:`DEFAULT_ATTACKS`, also what they may become (their counterparts
    for another model kind, the attacks that join them on coin-flip canaries or when able); the baseline beside a membership
    attack.

    Raises:
        UserInputError: no name, or one that is not a registered attack.
    """
    names = _split(names)
    if not names:
        raise UserInputError("--attacks is empty; name at least one attack, e.g. --attacks exposure,reconstruction.")
    if "all" in names:
        return registered_classes()
    classes = [attack_class(n) for n in names]
    if tuple(names) == DEFAULT_ATTACKS:
        classes += [attack_class(other) for c in list(classes) for other, _ in prop(c, "counterparts").values()]
        classes += [c for c in registered_classes() if prop(c, "one_run_default") or prop(c, "default_when_able")]
    if any(prop(c, "membership") for c in classes):
        classes += [c for c in registered_classes() if prop(c, "baseline")]
    return list(dict.fromkeys(classes))


def declared_by(config_cls: type, name: str) -> type:
    """The class of ``config_cls``'s MRO that declares the field ``name`` (a shared mixin for a shared option)."""
    for base in config_cls.__mro__:
        if name in base.__dict__.get("__annotations__", {}):
            return base
    return config_cls


def option_sections(classes: Sequence[type[Attack]]) -> list[tuple[type, tuple[str, ...], tuple[str, ...]]]:
    """The options of these attacks and of every run, grouped by the Config class that declares them: (class, its
    field names, the attacks that take them; empty for every run's), the run's first, then in the attacks' order.

    Raises:
        UserInputError: two classes declaring one field name (an attack whose option would mean another thing than
            the same option of another attack, or of every run), naming both.
    """
    sections: dict[type, list[str]] = {}
    users: dict[type, list[str]] = {}
    owner: dict[str, tuple[type, str]] = {}
    for attack in (None, *classes):
        config_cls = RunOptions if attack is None else attack.Config
        for f in dataclasses.fields(config_cls):
            declaring = declared_by(config_cls, f.name)
            seen = owner.setdefault(f.name, (declaring, "every run" if attack is None else f"--attacks {attack.name}"))
            if seen[0] is not declaring:
                where = "every run" if attack is None else f"--attacks {attack.name}"
                raise UserInputError(
                    f"{where}: its option {f.name} ({declaring.__qualname__}) is already an option of "
                    f"{seen[1]} ({seen[0].__qualname__}) with another meaning; rename it, or share "
                    f"{seen[0].__qualname__}."
                )
            if f.name not in sections.setdefault(declaring, []):
                sections[declaring].append(f.name)
            if (
                attack is not None
                and declaring not in _run_classes()
                and attack.name not in users.setdefault(declaring, [])
            ):
                users[declaring].append(attack.name)
    ordered = sorted(sections, key=lambda cls: cls is not RunOptions)  # every run's own options first
    return [(cls, tuple(sections[cls]), tuple(users.get(cls, ()))) for cls in ordered]


def _run_classes() -> frozenset[type]:
    return frozenset(c for c in RunOptions.__mro__ if dataclasses.is_dataclass(c))


def accepted_options(names: Iterable[str] | str) -> set[str]:
    """The option fields a run of ``--attacks NAMES`` takes (:func:`option_attacks`, and every run's)."""
    return {name for _, fields, _ in option_sections(option_attacks(names)) for name in fields}


def option_flag(name: str) -> str:
    """The command-line spelling of an option field (its ``flag`` metadata, else ``--field-name``)."""
    for cls in (RunOptions, *(c.Config for c in registered_classes())):
        for f in dataclasses.fields(cls):
            if f.name == name:
                return f.metadata.get("flag") or "--" + name.replace("_", "-")
    return "--" + name.replace("_", "-")


def check_options(given: Iterable[str], names: Iterable[str] | str) -> None:
    """Refuse, in one line, an option that is no attack's, or one of an attack that ``--attacks NAMES`` does not
    run (it would change nothing: a misplaced ``--min-k`` was silently ignored).

    Raises:
        UserInputError: naming the option, the attacks that take it and what to do.
    """
    given = list(given)
    if not given:
        return
    accepted = accepted_options(names)
    every = option_sections(registered_classes())
    known = {name for _, fields, _ in every for name in fields}
    for name in given:
        if name in accepted:
            continue
        flag = option_flag(name)
        if name not in known:
            raise UserInputError(
                f"{name}: not an option of dpaudit attack; the options are {', '.join(sorted(known))}."
            )
        owners = [a for _, fields, users in every if name in fields for a in users]
        shown = ",".join(_split(names))
        default = " (the default)" if tuple(_split(names)) == DEFAULT_ATTACKS else ""
        raise UserInputError(
            f"{flag} is an option of --attacks {', '.join(owners)}, which --attacks {shown}{default} "
            f"does not run; add {owners[0]} to --attacks, or remove {flag}."
        )


class AttackOptions:
    """The options of one attack run: :class:`~dpaudit.attacks.options.RunOptions` and every registered attack's
    Config, each built (and so validated) from the values given.

    ``AttackOptions(**values)`` hands each value to every Config that has the field (a shared option to each attack
    that takes it); ``options.NAME`` reads a field whichever Config declares it (``context.options.min_k``,
    ``options.claimed_epsilon``); ``options.of(attack)`` is an attack's own Config; :meth:`to_dict` is the flat
    record of every option that the manifest keeps.

    Raises:
        TypeError: an unknown option.
        ValueError: a value a Config refuses (``--shadow-models must be >= 1, got 0.``).
    """

    __slots__ = ("_configs", "_by_name")

    def __init__(self, **values: Any) -> None:
        classes = [RunOptions, *dict.fromkeys(c.Config for c in registered_classes())]
        known = {f.name for cls in classes for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(
                f"unknown attack option(s) {', '.join(unknown)}; the options are {', '.join(sorted(known))}."
            )
        option_sections(registered_classes())  # one meaning per option name
        configs = {}
        for cls in classes:
            names = {f.name for f in dataclasses.fields(cls)}
            configs[cls] = cls(**{k: v for k, v in values.items() if k in names})
        by_name: dict[str, Any] = {}
        for config in configs.values():
            for f in dataclasses.fields(config):
                by_name.setdefault(f.name, config)
        object.__setattr__(self, "_configs", configs)
        object.__setattr__(self, "_by_name", by_name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return getattr(self._by_name[name], name)
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to option {name!r}: options are frozen")

    def of(self, attack: type[Attack] | type[RunOptions]) -> Any:
        """The attack's own Config instance (``RunOptions`` for ``RunOptions``)."""
        return self._configs[attack if issubclass(attack, RunOptions) else attack.Config]

    def to_dict(self) -> dict[str, Any]:
        """Every option by name (the attacks' that did not run at their defaults), as the manifest records them."""
        out: dict[str, Any] = {}
        for config in self._configs.values():
            for name, value in dataclasses.asdict(config).items():
                out.setdefault(name, value)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttackOptions) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(sorted(self.to_dict().items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"AttackOptions({given})"
