"""Read the upstream prompts from the pinned ``prompts.py`` and ``utils.py`` with ``ast``.

The files are third-party text without a licence, so the project never restates them: the
critic template and the four dimension rubrics (prompts.py), and the actor, environment and
next-speaker prompt skeletons of each protocol version (its utils.py), are read at run time from
the verified files. They are parsed, never imported or executed: from prompts.py only a literal
assignment ``critic_prompts = {...}`` is accepted, evaluated with ``ast.literal_eval``; from
utils.py the f-strings and literals of three functions, read as templates (``PromptSkeletons``);
from agent.py what ``Agent.__init__`` appends to a system prompt (``AgentAdditions``).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from charactereval_lib.coser.data import UPSTREAM_AGENT, UPSTREAM_PROMPTS, UPSTREAM_UTILS, locate_data_dir, read_verified
from charactereval_lib.engine.storage.pinned import DataError

DIMENSIONS = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
_TEMPLATE_KEY = "self-play-deduct-template"
_DETAILS_KEY = "dimension_details"


@dataclass(frozen=True)
class CriticPrompts:
    """The critic template and, per dimension, its ``dimension_brief`` and ``dimension_criteria``."""

    template: str
    details: dict[str, dict[str, str]]


def parse_critic_prompts(source: bytes, path: Path) -> CriticPrompts:
    """Upstream step: the ``critic_prompts`` literal of prompts.py (ast only, never executed)."""
    try:
        tree = ast.parse(source.decode("utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not parseable Python ({exc})") from None
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "critic_prompts" for t in node.targets):
            value = node.value
    if value is None:
        raise DataError(f"{path}: no `critic_prompts = ...` assignment")
    try:
        prompts = ast.literal_eval(value)
    except ValueError:
        raise DataError(f"{path}: `critic_prompts` is not a literal") from None
    if not isinstance(prompts, dict) or not isinstance(prompts.get(_TEMPLATE_KEY), str):
        raise DataError(f"{path}: `critic_prompts` lacks the string {_TEMPLATE_KEY!r}")
    details = prompts.get(_DETAILS_KEY)
    if not isinstance(details, dict) or set(details) != set(DIMENSIONS):
        raise DataError(f"{path}: `critic_prompts[{_DETAILS_KEY!r}]` must name exactly the 4 dimensions")
    for dim, entry in details.items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("dimension_brief", "dimension_criteria")):
            raise DataError(f"{path}: dimension {dim!r} lacks dimension_brief/dimension_criteria strings")
    return CriticPrompts(template=prompts[_TEMPLATE_KEY], details={d: dict(details[d]) for d in DIMENSIONS})


@lru_cache(maxsize=4)
def _load(root: str) -> CriticPrompts:
    path = Path(root) / UPSTREAM_PROMPTS
    return parse_critic_prompts(read_verified(Path(root), UPSTREAM_PROMPTS), path)


def load_critic_prompts(data_dir: str | os.PathLike[str] | None = None) -> CriticPrompts:
    """The verified critic prompts of the data directory (cached per directory)."""
    return _load(str(locate_data_dir(data_dir).resolve()))


# --- the prompt skeletons of utils.py ----------------------------------------------------------
# get_character_prompt / get_environment_prompt / get_nsp_prompt build their prompts from
# f-strings. Each f-string is read as a Template (its literal text and the source of each
# placeholder), never evaluated; the platform substitutes the values itself.


@dataclass(frozen=True)
class Template:
    """An upstream f-string: literal parts and placeholders (the placeholder's source text)."""

    parts: tuple[str | tuple[str], ...]

    def placeholders(self) -> set[str]:
        return {p[0] for p in self.parts if isinstance(p, tuple)}

    def render(self, values: dict[str, object]) -> str:
        """The f-string's value for these placeholder values (``format(value, "")``, as an
        f-string formats a placeholder without conversion or spec)."""
        missing = self.placeholders() - set(values)
        if missing:
            raise KeyError(f"no value for placeholder(s) {sorted(missing)}")
        return "".join(p if isinstance(p, str) else format(values[p[0]], "") for p in self.parts)


@dataclass(frozen=True)
class PromptSkeletons:
    """What the platform reads from one version's utils.py to build the three agents' prompts."""

    # get_character_prompt (its fixed_template branch, the one the evaluation uses)
    output_thoughtless: str
    output_thought: str
    output_thought_example: str
    profile_decorators: tuple[str, ...]
    other_profile_line: Template  # one other character's profile, behind the decorator
    thought_param: str  # the parameter holding the inner thoughts (paper "thought", HEAD "motivation")
    thought_section: Template
    others_section: Template
    character_head: Template
    requirements: Template
    # get_environment_prompt
    environment_roles: tuple[str, ...]
    environment: Template
    # get_nsp_prompt
    nsp: Template
    nsp_constants: dict[str, object]


class _Reader:
    """The few statement shapes the three functions use, read from their ``ast`` (never run)."""

    def __init__(self, path: Path, tree: ast.Module) -> None:
        self.path = path
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def fail(self, what: str) -> DataError:
        return DataError(f"{self.path}: {what} (not the pinned upstream utils.py?)")

    def function(self, name: str) -> ast.FunctionDef:
        if name not in self.functions:
            raise self.fail(f"no function {name}")
        return self.functions[name]

    def template(self, node: ast.AST, what: str) -> Template:
        if not isinstance(node, ast.JoinedStr):
            raise self.fail(f"{what} is not an f-string")
        parts: list[str | tuple[str]] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue) and value.conversion == -1 and value.format_spec is None:
                parts.append((ast.unparse(value.value),))
            else:
                raise self.fail(f"{what} has a placeholder with a conversion or format spec")
        return Template(tuple(parts))

    def constant(self, node: ast.AST, what: str) -> object:
        """A literal, where ``+`` and ``*`` of literals count as literals ('*' * 30 + '\\n\\n')."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = self.constant(node.left, what), self.constant(node.right, what)
            return left + right if isinstance(node.op, ast.Add) else left * right
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.constant(e, what) for e in node.elts]
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise self.fail(f"{what} is not a literal") from None

    @staticmethod
    def assigned(body: list[ast.stmt], target: str, augmented: bool = False) -> list[ast.AST]:
        """Values assigned (or, with ``augmented``, added with ``+=``) to ``target`` directly in ``body``."""
        found = []
        for node in body:
            if augmented and isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                    and isinstance(node.target, ast.Name) and node.target.id == target:
                found.append(node.value)
            elif not augmented and isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == target for t in node.targets):
                found.append(node.value)
        return found

    def one(self, values: list[ast.AST], what: str) -> ast.AST:
        if len(values) != 1:
            raise self.fail(f"expected one {what}, found {len(values)}")
        return values[0]

    @staticmethod
    def branch(body: list[ast.stmt], test_name: str) -> ast.If | None:
        return next((n for n in body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                     and n.test.id == test_name), None)

    def required_branch(self, body: list[ast.stmt], test_name: str, where: str) -> ast.If:
        node = self.branch(body, test_name)
        if node is None:
            raise self.fail(f"{where} has no `if {test_name}:`")
        return node

    def literals(self, function: ast.FunctionDef) -> dict[str, object]:
        """The function's plain literal assignments (e.g. ``ENVIRONMENT = "Environment"``)."""
        found = {}
        for node in function.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    found[node.targets[0].id] = self.constant(node.value, node.targets[0].id)
                except DataError:
                    continue
        return found


def parse_prompt_skeletons(source: bytes, path: Path) -> PromptSkeletons:
    """Upstream step: the prompt skeletons of utils.py (ast only, never imported or executed)."""
    from importlib.util import decode_source

    try:
        # decoded as `import` would read it (encoding cookie, universal newlines: the file has CRLF)
        tree = ast.parse(decode_source(source), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not parseable Python ({exc})") from None
    r = _Reader(path, tree)
    character = r.function("get_character_prompt")
    params = [a.arg for a in character.args.args]
    thought_param = next((p for p in ("thought", "motivation") if p in params), None)
    if thought_param is None:
        raise r.fail("get_character_prompt has no thought/motivation parameter")
    formats = r.required_branch(character.body, "thoughtless", "get_character_prompt")
    example = r.required_branch(formats.orelse, "add_output_example", "get_character_prompt")
    others = r.required_branch(character.body, "other_character_profiles", "get_character_prompt")
    decorator_call = r.one(r.assigned(others.body, "decorator"), "decorator choice")
    if not (isinstance(decorator_call, ast.Call) and len(decorator_call.args) == 1):
        raise r.fail("the profile decorator is not drawn with random.choice([...])")
    loop = next((n for n in others.body if isinstance(n, ast.For)), None)
    if loop is None or not loop.body or not isinstance(loop.body[0], ast.If):
        raise r.fail("get_character_prompt has no loop over the other characters' profiles")
    fixed = r.required_branch(character.body, "fixed_template", "get_character_prompt")
    thought_if = r.required_branch(fixed.body, thought_param, "the fixed template")
    others_if = r.required_branch(fixed.body, "other_character_profiles_str", "the fixed template")

    environment = r.function("get_environment_prompt")
    env_literals = r.literals(environment)
    nsp = r.function("get_nsp_prompt")
    return PromptSkeletons(
        output_thoughtless=str(r.constant(r.one(r.assigned(formats.body, "output_format"), "format"), "format")),
        output_thought=str(r.constant(r.one(r.assigned(formats.orelse, "output_format"), "format"), "format")),
        output_thought_example=str(r.constant(r.one(r.assigned(example.body, "output_format"), "format"), "format")),
        profile_decorators=tuple(r.constant(decorator_call.args[0], "the profile decorators")),
        other_profile_line=r.template(r.one(r.assigned(loop.body[0].body, "other_character_profiles_str", True),
                                            "profile line"), "the profile line"),
        thought_param=thought_param,
        thought_section=r.template(r.one(r.assigned(thought_if.body, thought_param), "thought section"),
                                   "the thought section"),
        others_section=r.template(r.one(r.assigned(others_if.body, "other_character_profiles_str"), "others section"),
                                  "the others section"),
        character_head=r.template(r.one(r.assigned(fixed.body, "system_prompt"), "prompt head"), "the prompt head"),
        requirements=r.template(r.one(r.assigned(fixed.body, "system_prompt", True), "requirements"),
                                "the requirements"),
        environment_roles=tuple(env_literals.get("model_roles") or ()),
        environment=r.template(r.one(r.assigned(environment.body, "prompt"), "environment prompt"),
                               "the environment prompt"),
        nsp=r.template(r.one(r.assigned(nsp.body, "prompt"), "NSP prompt"), "the NSP prompt"),
        nsp_constants=r.literals(nsp),
    )


@lru_cache(maxsize=8)
def _load_skeletons(root: str, name: str) -> PromptSkeletons:
    return parse_prompt_skeletons(read_verified(Path(root), name), Path(root) / name)


def load_prompt_skeletons(version_name: str, data_dir: str | os.PathLike[str] | None = None) -> PromptSkeletons:
    """The verified prompt skeletons of a protocol version's utils.py (cached per directory)."""
    if version_name not in UPSTREAM_UTILS:
        raise DataError(f"no upstream utils.py is pinned for protocol version {version_name!r}")
    return _load_skeletons(str(locate_data_dir(data_dir).resolve()), UPSTREAM_UTILS[version_name])


# --- what Agent adds, from agent.py ------------------------------------------------------------
# Agent.__init__ strips the given prompt, then appends, each under its own `if`: a literal for
# every agent but the Environment and NSP (the actors' length rule) and an f-string with the
# agent's name for some model names (the name suffix). Read as those two shapes, never run.


@dataclass(frozen=True)
class AgentAdditions:
    """What one version's ``Agent.__init__`` appends to an agent's system prompt."""

    actor_rule: str  # appended for every agent but the Environment and NSP
    name_suffix: Template  # appended where the model-name rule asks; its one placeholder is the name


def parse_agent_additions(source: bytes, path: Path) -> AgentAdditions:
    """Upstream step: the two appends of ``Agent.__init__`` (ast only, never imported or executed)."""
    from importlib.util import decode_source

    try:
        tree = ast.parse(decode_source(source), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not parseable Python ({exc})") from None
    r = _Reader(path, tree)
    agent = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Agent"), None)
    init = next((n for n in (agent.body if agent else ()) if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is None:
        raise DataError(f"{path}: no Agent.__init__ (not the pinned upstream agent.py?)")
    literals, fstrings = [], []
    for node in init.body:
        if not isinstance(node, ast.If) or len(node.body) != 1:
            continue
        appended = _appended_to_system_prompt(node.body[0])
        if isinstance(appended, ast.JoinedStr):
            fstrings.append(appended)
        elif appended is not None:
            literals.append(appended)
    suffix = r.template(r.one(fstrings, "f-string appended to the system prompt"), "the name suffix")
    if suffix.placeholders() != {"name"}:
        raise r.fail(f"the name suffix has placeholders {sorted(suffix.placeholders())}, expected ['name']")
    rule = r.constant(r.one(literals, "literal appended to the system prompt"), "the actors' rule")
    if not isinstance(rule, str):
        raise r.fail("the actors' rule is not a string")
    return AgentAdditions(actor_rule=rule, name_suffix=suffix)


def _appended_to_system_prompt(node: ast.stmt) -> ast.AST | None:
    """X of ``self.system_prompt = self.system_prompt + X``, else None."""
    def is_prompt(target: ast.AST) -> bool:
        return (isinstance(target, ast.Attribute) and target.attr == "system_prompt"
                and isinstance(target.value, ast.Name) and target.value.id == "self")

    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and is_prompt(node.targets[0])
            and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)
            and is_prompt(node.value.left)):
        return node.value.right
    return None


@lru_cache(maxsize=8)
def _load_additions(root: str, name: str) -> AgentAdditions:
    return parse_agent_additions(read_verified(Path(root), name), Path(root) / name)


def load_agent_additions(version_name: str, data_dir: str | os.PathLike[str] | None = None) -> AgentAdditions:
    """The verified additions of a protocol version's agent.py (cached per directory)."""
    if version_name not in UPSTREAM_AGENT:
        raise DataError(f"no upstream agent.py is pinned for protocol version {version_name!r}")
    return _load_additions(str(locate_data_dir(data_dir).resolve()), UPSTREAM_AGENT[version_name])
