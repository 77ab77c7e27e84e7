"""The one adapter to the ``alfworld`` package: its constants, PDDL domain, grammar, layouts and game wrappers.

Everything here is imported lazily, so the pure modules (scene, tracker, responder, reward) load
without ``alfworld`` / ``textworld``; a missing package is an error that names the extra to install.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from textwm._optional import require

#: The six ALFWorld task types (movable-receptacle and slice tasks are not part of ALFWorld's text games).
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")


def _import(module: str) -> Any:
    return require(module, extra="envs", package=module.split(".")[0])


@functools.lru_cache(maxsize=1)
def constants() -> Any:
    """``alfworld.gen.constants`` (object classes, receptacle classes, what each receptacle can hold)."""
    return _import("alfworld.gen.constants")


@functools.lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    """The ``alfred`` PDDL domain and the TWL2 grammar (with its ``UNKNOWN GOAL`` placeholder)."""
    info = _import("alfworld.info")
    return Path(info.ALFRED_PDDL_PATH).read_text(), Path(info.ALFRED_TWL2_PATH).read_text()


def layouts_dir() -> Path:
    return Path(_import("alfworld.gen").__file__).parent / "layouts"


@functools.cache
def floor_plan(number: int) -> tuple[list[str], list[str]]:
    """A shipped floor plan: its receptacle ids (THOR form, ``Cabinet|+00.68|+00.50|-02.20``) and its object
    classes. Raises FileNotFoundError for a floor plan that alfworld does not ship."""
    base = layouts_dir() / f"FloorPlan{number}"
    receptacles = sorted(json.loads(Path(f"{base}-openable.json").read_text()))
    classes = json.loads(Path(f"{base}-objects.json").read_text())
    return receptacles, classes


def floor_plans() -> list[int]:
    """Numbers of every floor plan alfworld ships (kitchens 1-30, living rooms 201-230, bedrooms 301-330,
    bathrooms 401-430)."""
    names = {p.name.split("-", 1)[0] for p in layouts_dir().glob("FloorPlan*-openable.json")}
    return sorted(int(n.removeprefix("FloorPlan")) for n in names)


@functools.lru_cache(maxsize=1)
def class_names() -> dict[str, str]:
    """Lower-case ALFWorld name -> THOR class (``sinkbasin`` -> ``SinkBasin``), objects and receptacles."""
    c = constants()
    names = {obj.lower(): obj for obj in c.OBJECTS}
    names.update({r.lower(): r for r in c.RECEPTACLES})
    return names


@functools.lru_cache(maxsize=1)
def memoize_grammar_parser() -> None:
    """Parse each grammar string of textworld's text generation once per process.

    textworld's ``ContextSensitiveGrammar.derive`` re-parses the same template strings with a PEG parser
    for every admissible command at every step (~26 parses a step, most of a step's time). The parse is
    a pure function of the string; it is kept and a deep copy handed out (the caller mutates the
    symbols' contexts). Steps get ~1.4x faster; observations and admissible commands are unchanged
    (``tests/envs/alfworld/test_env.py`` compares a game played with and without it)."""
    textgen = _import("textworld.envs.pddl.textgen")
    parse = textgen._parse_and_convert

    @functools.lru_cache(maxsize=8192)
    def cached(text: str, rule_name: str) -> Any:
        return parse(text, rule_name=rule_name)

    def parse_once(text: str, rule_name: str = "symbols", trace: bool = False) -> Any:
        return copy.deepcopy(cached(text, rule_name)) if not trace else parse(text, rule_name=rule_name, trace=True)

    parse_once.original = parse  # type: ignore[attr-defined]
    textgen._parse_and_convert = parse_once


def make_env(*, expert: bool = True, fast_text: bool = True) -> Any:
    """textworld's ``PddlEnv`` wrapped the way ALFWorld plays it: demangled names, the game file in the infos,
    and the handcoded expert's next action (``extra.expert_plan``). ``fast_text``: :func:`memoize_grammar_parser`."""
    if fast_text:
        memoize_grammar_parser()
    textworld = _import("textworld")
    pddl = _import("textworld.envs.pddl")
    tw_env = _import("alfworld.agents.environment.alfred_tw_env")
    infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile", "expert_plan"],
                               facts=expert)
    env = tw_env.AlfredInfos(tw_env.AlfredDemangler(pddl.PddlEnv(infos)))
    if expert:
        env = _expert_class()(env, expert_type=tw_env.AlfredExpertType.HANDCODED)
    return env


@functools.lru_cache(maxsize=1)
def _expert_class() -> type:
    """ALFWorld's ``AlfredExpert`` with one fix. Its handcoded policies recognise a placement by the word
    "put" in the last command (``update_state_tracking``), but the games' grammar spells placing
    "move X to Y", so after the first placement the expert still believes it holds the object: it then
    never completes a pick-two task (1 of 8 won in our trials). The expert is told the command it issued
    in the wording it expects; the game itself receives the real command."""
    tw_env = _import("alfworld.agents.environment.alfred_tw_env")

    class FixedAlfredExpert(tw_env.AlfredExpert):
        def step(self, command: str) -> Any:
            state, reward, done = super(tw_env.AlfredExpert, self).step(command)
            self.state = state
            words = str(command).split(" to ", 1)
            self.prev_command = f"put {words[0][5:]} in {words[1]}" if command.startswith("move ") and len(words) == 2 \
                else str(command)
            self._gather_infos()
            return self.state, reward, done

    return FixedAlfredExpert


def goal_templates(task_type: str) -> list[str]:
    """ALFWorld's goal texts of a task type (``put a {obj} in {recep}``, ...)."""
    return list(_import("alfworld.gen.goal_library").gdict[task_type]["templates"])


def abilities_and_containers(object_classes: set[str], receptacle_classes: set[str]
                             ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """What each object class can do and which object classes each receptacle class can hold (ALFRED's
    tables, restricted to the classes given; all names lower case)."""
    c = constants()
    holdable = set().union(*c.VAL_RECEPTACLE_OBJECTS.values())
    actions = c.VAL_ACTION_OBJECTS
    upper = class_names()
    abilities = {}
    for cls in sorted(object_classes):
        thor = upper[cls]
        abilities[cls] = [a for a, ok in (("pickupable", thor in holdable), ("cleanable", thor in actions["Cleanable"]),
                                          ("heatable", thor in actions["Heatable"]), ("coolable", thor in actions["Coolable"]),
                                          ("toggleable", thor in actions["Toggleable"]), ("sliceable", thor in actions["Sliceable"]))
                          if ok]
    containers = {}
    for rcls in sorted(receptacle_classes):
        allowed = c.VAL_RECEPTACLE_OBJECTS.get(upper[rcls], set())
        containers[rcls] = sorted(o for o in object_classes if upper[o] in allowed)
    return abilities, containers
