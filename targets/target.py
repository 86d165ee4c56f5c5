"""TVM targets for chiplet systems: the ``chiplet/<preset>`` tags and tvmc-style strings.

Importing this module registers one TVM target tag per bundled preset, ``chiplet/<preset>``: a
plain ``llvm`` target (the host code generator) with keys ``["chiplet", "cpu"]`` that
``tvm.compile`` accepts. The chiplet system itself travels beside the TVM target in a
:class:`ChipletTarget`, because an ``llvm`` target refuses custom attributes.

Accepted target forms (:func:`parse_target`)::

    "chiplet/mesh-4x4"                              a preset tag
    tvm.target.Target("chiplet/mesh-4x4")           the same, as a Target object
    "chiplet/mesh-4x4 -strategy=pipeline"           a preset plus options
    "chiplet -config=my.toml"                       a user system file
    "chiplet -config=my.toml -strategy=pipeline"
    "chiplet", options={"config": "my.toml"}        tvmc style (--target-chiplet-config my.toml)

Options (:data:`KNOWN_OPTIONS`): ``strategy`` (placement strategy name, a string), ``config``
(path to a system TOML file; not allowed together with a preset tag) and ``device-dtype`` (the
precision of the device model, e.g. ``"chiplet/simba-6x6 -device-dtype=fp16"``; default the
system's own).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import tvm

from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import PRESET_PREFIX, load_preset, preset_names

TARGET_KIND = "chiplet"
TARGET_KEYS = ("chiplet", "cpu")
KNOWN_OPTIONS: dict[str, str] = {
    "strategy": "placement strategy name, e.g. 'pipeline' (string)",
    "config": "path to a chiplet system TOML file (string)",
    "device-dtype": "precision of the device model: int8, fp16, bf16 or fp32 (default the "
                    "system's)",
    "objective": "what strategy 'auto' keeps: time, throughput, latency, energy or edp; "
                 "time, throughput or latency also set the inputs a strategy such as pipeline "
                 "or tensor-parallel plans for",
    "max-parts": "most clusters strategy tensor-parallel splits one op over (an integer, "
                 "default 64, and 256 for a conv2d's 2-D split into row bands by channel "
                 "slices): more lowers batch-1 latency on large systems, and planning takes "
                 "longer (a collective over k clusters is up to k^2 messages)",
}

_ACCEPTED = (
    "expected 'chiplet/<preset>' (presets: {presets}), 'chiplet -config=<file.toml>', either "
    "followed by '-<option>=<value>' options, or a tvm.target.Target with a 'chiplet/<preset>' tag"
)


class ChipletTargetError(ValueError):
    """A target string, Target object or option set is not a valid chiplet target."""


def _accepted() -> str:
    return _ACCEPTED.format(presets=", ".join(preset_names()))


def tag_config(tag: str) -> dict[str, object]:
    """The TVM tag configuration registered for ``tag`` (``"chiplet/<preset>"``)."""
    return {"kind": "llvm", "keys": list(TARGET_KEYS), "tag": tag}


def register_chiplet_tags() -> list[str]:
    """Register ``chiplet/<preset>`` for every bundled preset (idempotent); return the tags."""
    tags = [f"{PRESET_PREFIX}{name}" for name in preset_names()]
    for tag in tags:
        tvm.target.register_tag(tag, tag_config(tag), override=True)
    return tags


@dataclass(frozen=True)
class ChipletTarget:
    """A parsed chiplet target.

    Attributes
    ----------
    system : ChipletSystem
        The hardware to plan for.
    tvm_target : tvm.target.Target
        The host ``llvm`` target (tagged ``chiplet/<preset>`` for presets) to give to
        ``tvm.compile``.
    options : dict[str, str]
        The options given, e.g. ``{"strategy": "pipeline"}`` (``config`` included when given).
    preset : str or None
        The preset name, or None for a system read from a ``config`` file.
    """

    system: ChipletSystem
    tvm_target: tvm.target.Target
    options: dict[str, str] = field(default_factory=dict)
    preset: str | None = None

    @property
    def strategy(self) -> str | None:
        """The ``strategy`` option, if given."""
        return self.options.get("strategy")

    def target_string(self) -> str:
        """Canonical target string that :func:`parse_target` turns back into this target."""
        head = f"{PRESET_PREFIX}{self.preset}" if self.preset else TARGET_KIND
        opts = " ".join(f"-{k}={shlex.quote(v)}" for k, v in sorted(self.options.items()))
        return f"{head} {opts}".strip()


def _parse_string(text: str) -> tuple[str | None, dict[str, str]]:
    """Split a target string into (preset or None, options)."""
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise ChipletTargetError(f"cannot split target string {text!r}: {err}") from err
    if not tokens:
        raise ChipletTargetError(f"empty target string; {_accepted()}")
    head, rest = tokens[0], tokens[1:]
    if head == TARGET_KIND:
        preset = None
    elif head.startswith(PRESET_PREFIX) and len(head) > len(PRESET_PREFIX):
        preset = head.removeprefix(PRESET_PREFIX)
    else:
        raise ChipletTargetError(f"target {text!r} is not a chiplet target; {_accepted()}")
    options: dict[str, str] = {}
    for token in rest:
        key, sep, value = token.lstrip("-").partition("=")
        if not token.startswith("-") or not sep or not key:
            raise ChipletTargetError(
                f"target option {token!r} in {text!r} is malformed; expected -<option>=<value> "
                f"with options {', '.join(KNOWN_OPTIONS)}"
            )
        if key in options and options[key] != value:
            raise ChipletTargetError(f"target option {key!r} is given twice in {text!r}")
        options[key] = value
    return preset, options


def _merge_options(from_target: dict[str, str], given: dict[str, str] | None) -> dict[str, str]:
    options = dict(from_target)
    for key, value in (given or {}).items():
        if not isinstance(value, str):
            raise ChipletTargetError(
                f"target option {key!r} has value {value!r}; expected a string"
            )
        if key in options and options[key] != value:
            raise ChipletTargetError(
                f"target option {key!r} is {options[key]!r} in the target but {value!r} in the "
                f"options; give it once"
            )
        options[key] = value
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        known = "; ".join(f"{k}: {doc}" for k, doc in KNOWN_OPTIONS.items())
        raise ChipletTargetError(
            f"unknown chiplet target option(s) {', '.join(unknown)}; known options are {known}"
        )
    return options


def parse_target(
    target: str | tvm.target.Target, options: dict[str, str] | None = None
) -> ChipletTarget:
    """Turn a chiplet target (string or TVM Target) plus options into a :class:`ChipletTarget`.

    Parameters
    ----------
    target : str or tvm.target.Target
        One of the forms listed in the module docstring.
    options : dict[str, str], optional
        tvmc-style options (``--target-chiplet-strategy pipeline`` gives
        ``{"strategy": "pipeline"}``); merged with options in the string.

    Raises
    ------
    ChipletTargetError
        For a non-chiplet target, an unknown option, conflicting options, or a missing system.
    SystemConfigError
        For an unknown preset, an invalid system file, or a device dtype that a cluster does not
        compute in.
    """
    if isinstance(target, tvm.target.Target):
        tag = str(target.tag)
        if not tag.startswith(PRESET_PREFIX):
            raise ChipletTargetError(
                f"TVM target {target} has no 'chiplet/<preset>' tag; {_accepted()}"
            )
        preset, from_target = tag.removeprefix(PRESET_PREFIX), {}
    elif isinstance(target, str):
        preset, from_target = _parse_string(target)
    else:
        raise ChipletTargetError(
            f"target {target!r} has type {type(target).__name__}; {_accepted()}"
        )
    merged = _merge_options(from_target, options)
    if preset is not None and "config" in merged:
        raise ChipletTargetError(
            f"target names preset {preset!r} and config file {merged['config']!r}; expected one "
            f"of them: 'chiplet/{preset}' or 'chiplet -config={merged['config']}'"
        )
    if preset is not None:
        system = load_preset(preset)
        tvm_target = tvm.target.Target(f"{PRESET_PREFIX}{preset}")
    elif "config" in merged:
        system = ChipletSystem.from_toml(merged["config"])
        tvm_target = tvm.target.Target(
            {"kind": "llvm", "keys": list(TARGET_KEYS), "model": system.name}
        )
    else:
        raise ChipletTargetError(f"target {target!r} names no chiplet system; {_accepted()}")
    if "device-dtype" in merged:
        system = system.with_device_dtype(merged["device-dtype"])
    return ChipletTarget(system=system, tvm_target=tvm_target, options=merged, preset=preset)


register_chiplet_tags()

__all__ = [
    "KNOWN_OPTIONS",
    "ChipletTarget",
    "ChipletTargetError",
    "parse_target",
    "register_chiplet_tags",
    "tag_config",
]
