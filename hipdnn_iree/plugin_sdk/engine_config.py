"""Engine configs, knobs, heuristic modes and build policies (cuDNN's and hipDNN's model).

An *engine config* is an engine plus knob values. A plugin lists its knobs (``get_knobs``) and,
for a graph and a heuristic mode, the configs worth building (``get_engine_configs``); the
frontend keeps one execution plan per config.

Example:
    >>> k = Knob("SDPA_FORM", ("AUTO", "FUSED", "COMPOSED"), "AUTO")
    >>> check_knob_values([k], {"SDPA_FORM": "FUSED"}, "IREE_LINALG")
    {'SDPA_FORM': 'FUSED'}
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


class HeurMode(enum.IntEnum):
    """Which engine configs ``create_execution_plans`` asks for (cuDNN's ``heur_mode``)."""

    A = 0          # the engine's own choice: a stored autotune result, else its built-in heuristic
    B = 1          # more candidates worth timing
    FALLBACK = 2   # the most conservative forms

    def __str__(self) -> str:
        return f"HeurMode.{self.name}"


class BuildPlanPolicy(enum.IntEnum):
    """What ``build_plans`` builds (cuDNN's ``build_plan_policy``)."""

    HEURISTICS_CHOICE = 0   # plan 0 only
    ALL = 1                 # every plan

    def __str__(self) -> str:
        return f"BuildPlanPolicy.{self.name}"


@dataclass(frozen=True)
class Knob:
    """One engine choice: ``name`` (UPPER_CASE), its ``choices`` and the ``default`` (the engine's
    heuristic when that is a choice of its own, e.g. ``"AUTO"``)."""

    name: str
    choices: tuple
    default: object
    doc: str = ""

    def __repr__(self) -> str:
        return f"Knob({self.name!r}, choices={self.choices!r}, default={self.default!r})"


@dataclass
class EngineConfig:
    """An engine and its knob values: what a plan is built with, and what a restored plan says it
    was built with (``EXECUTION_PLAN_ENGINE_CONFIG``)."""

    engine_id: int
    engine_name: str
    knobs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"EngineConfig({self.engine_name}, knobs={self.knobs})"


def check_knob_values(knobs: list[Knob], values, engine: str) -> dict:
    """``values`` (a dict keyed by knob name) checked against ``knobs``: a dict in the knobs' order.

    Raises BAD_PARAM naming an unknown knob (with the engine's knobs) or a value outside a knob's
    choices (with its choices)."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise HipdnnError(Status.BAD_PARAM, f"knob values must be a dict of knob name -> value, got "
                                            f"{type(values).__name__}")
    by_name = {k.name: k for k in knobs}
    out = {}
    for name, value in values.items():
        key = name.upper() if isinstance(name, str) else name
        knob = by_name.get(key)
        if knob is None:
            raise HipdnnError(Status.BAD_PARAM, f"engine {engine} has no knob {name!r}; its knobs are: "
                              + (", ".join(f"{k.name} {list(k.choices)}" for k in knobs) or "none"))
        v = value.upper() if isinstance(value, str) else value
        if isinstance(v, bool) or v not in knob.choices:
            raise HipdnnError(Status.BAD_PARAM, f"knob {knob.name} of engine {engine}: value {value!r} is not "
                                                f"one of its choices {list(knob.choices)}")
        out[knob.name] = v
    return {k.name: out[k.name] for k in knobs if k.name in out}
