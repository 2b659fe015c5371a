"""Faces and engine, told apart by the folder: a module is a face iff its dotted path is one
of Hugging Face Accelerate 1.15's top-level modules or lies under one of its packages
(``utils/``, ``commands/``, ``test_utils/``; ``tracking/`` is Accelerate's ``tracking``), or
under ``compat/``, the Accelerate semantics the faces share. Faces hold Accelerate's public
names and adapt them; engine modules (every other module, all in packages) never import them
(at import time or inside a function), so the arrows run one way, face -> engine. The
composition roots may import both: the package's ``__init__`` (its lazy table of
Accelerate's top-level names) and ``__main__``, ``accelerator`` (the engine's loop with
Accelerate's adaptation mixed into its ``Accelerator``), ``run`` (``python -m
overdrive.run``); no engine module imports them, by ``import overdrive`` or ``from overdrive
import X`` any more than by the module's own path. ``sanity_check``, the script ``overdrive
test`` launches, and ``simulate.plan_script``, the step ``overdrive plan`` simulates, are
training scripts of the house's own: like a user's, they import the ``Accelerator``, and no
module of the package imports them. The top level holds only faces, roots, engine packages
and overdrive's own two public modules (``errors``, ``version``). Faces import the engine,
and each other only where Hugging Face Accelerate's own module imports that sibling
(``FACE_TO_FACE``, each pair with its reason)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "overdrive"
# Hugging Face Accelerate 1.15's package layout: the modules and packages at the top of
# ``accelerate`` (``tracking`` is one module there, a package here). A module is a face iff
# its dotted path is one of these or lies under one of them: the folder says which it is.
ACCELERATE_MODULES = (
    "accelerator",
    "big_modeling",
    "checkpointing",
    "data_loader",
    "hooks",
    "inference",
    "launchers",
    "local_sgd",
    "logging",
    "memory_utils",
    "optimizer",
    "parallelism_config",
    "scheduler",
    "state",
    "tracking",
)
ACCELERATE_PACKAGES = ("commands", "test_utils", "utils")
# the modules of those packages (test_utils/scripts/external_deps left out: its scripts need
# packages overdrive's tests do not install)
ACCELERATE_SUBMODULES = {
    "commands": "accelerate_cli config config.cluster config.config config.config_args "
    "config.config_utils config.default config.sagemaker config.update env estimate launch "
    "menu menu.cursor menu.helpers menu.input menu.keymap menu.selection_menu merge test "
    "to_fsdp2 tpu utils",
    "test_utils": "examples scripts scripts.test_cli scripts.test_ddp_comm_hook "
    "scripts.test_distributed_data_loop scripts.test_merge_weights scripts.test_notebook "
    "scripts.test_ops scripts.test_script scripts.test_sync testing training",
    "utils": "ao bnb constants dataclasses deepspeed environment fsdp_utils imports launch "
    "megatron_lm memory modeling offload operations other random rich torch_xla tqdm "
    "transformer_engine versions",
}
ACCELERATE_PATHS = {
    *ACCELERATE_MODULES,
    *ACCELERATE_PACKAGES,
    *(
        f"{package}.{name}"
        for package, names in ACCELERATE_SUBMODULES.items()
        for name in names.split()
    ),
}
# Accelerate's semantics the faces share (the ``Accelerator``'s mixin, its plugin views,
# Accelerate-layout checkpoint files): no path of Accelerate's, a face by its folder.
ADAPTATION = "compat"
# the package's __init__ and ``python -m overdrive``, the Accelerator, ``python -m
# overdrive.run``, and the scripts `overdrive test` launches and `overdrive plan` simulates
COMPOSITION_ROOTS = ("", "__main__", "accelerator", "run", "sanity_check", "simulate.plan_script")
# overdrive's own public modules that stay at the top: the errors a user catches
# (``overdrive.errors.ConfigError``) and ``overdrive.version``; both import nothing.
OWN_PUBLIC = ("errors", "version")


def is_face(dotted: str) -> bool:
    """Whether ``overdrive.<dotted>`` is a face."""
    first = dotted.split(".")[0]
    return first in ACCELERATE_MODULES or first in ACCELERATE_PACKAGES or first == ADAPTATION


def _is_module(dotted: str) -> bool:
    """Whether ``overdrive.<dotted>`` is a module or package of the source tree."""
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path, package: str = "") -> set[str]:
    """Every overdrive module ``path`` imports, anywhere in the file (inside functions too), as
    ``a.b`` under ``overdrive``: ``from overdrive.a import b`` is ``a.b`` when ``b`` is a
    module, else ``a``; a relative import is read from ``package`` (the file's own, under
    ``overdrive``); the package's ``__init__`` is ``""`` (``import overdrive``, and ``from
    overdrive import X`` where ``X`` is a name it defines, not a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            elif node.module == "overdrive" or (node.module or "").startswith("overdrive."):
                base = (node.module or "").removeprefix("overdrive").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}".lstrip(".")
                found.add(sub if _is_module(sub) else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "overdrive":
                    found.add("")
                elif alias.name.startswith("overdrive."):
                    found.add(alias.name.removeprefix("overdrive."))
    return found


def dotted_name(path: Path) -> str:
    """``overdrive/a/b.py`` -> ``a.b``; a package's ``__init__`` is the package's name."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package a relative import in ``path`` starts from, under ``overdrive``."""
    name = dotted_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def engine_modules() -> list[Path]:
    """Every module that is neither a face nor a composition root."""
    return [
        path
        for path in sorted(SRC.rglob("*.py"))
        if not is_face(dotted_name(path)) and dotted_name(path) not in COMPOSITION_ROOTS
    ]


def test_engine_modules_import_no_face_and_no_composition_root() -> None:
    crossings = []
    for path in engine_modules():
        for target in sorted(imported(path, package_of(path))):
            if is_face(target) or target in COMPOSITION_ROOTS:
                crossings.append(f"{path.relative_to(SRC)} imports overdrive.{target}".rstrip("."))
    assert crossings == []


def test_every_part_of_the_house_is_classified() -> None:
    engine = {dotted_name(p).split(".")[0] for p in engine_modules()}
    # the engine holds the packages that do the work
    assert {"checkpoint", "parallel", "strategies", "cli", "training", "arguments"} <= engine
    assert not engine & {*ACCELERATE_MODULES, *ACCELERATE_PACKAGES, ADAPTATION}


def test_the_top_level_holds_faces_roots_and_engine_packages() -> None:
    """A newcomer tells a face from the engine by its folder: every module at the top of
    ``overdrive`` is one of Accelerate's, a composition root or overdrive's own public
    module; the engine lives in packages."""
    loose = [
        path.stem
        for path in sorted(SRC.glob("*.py"))
        if path.stem != "__init__"
        and not is_face(path.stem)
        and path.stem not in COMPOSITION_ROOTS
        and path.stem not in OWN_PUBLIC
    ]
    assert loose == []
    for name in OWN_PUBLIC:  # they stay at the top because nothing they hold needs more
        assert imported(SRC / f"{name}.py") == set()


def test_the_rule_sees_a_crossing(tmp_path: Path) -> None:
    module = tmp_path / "engine.py"
    module.write_text("def f():\n    from overdrive.utils.operations import send_to_device\n")
    assert any(is_face(t) for t in imported(module))


def test_the_rule_sees_the_package_root_in_both_forms(tmp_path: Path) -> None:
    module = tmp_path / "engine.py"
    module.write_text("import overdrive\n")
    assert imported(module) == {""}
    module.write_text("from overdrive import Accelerator, errors\n")
    assert imported(module) == {"", "errors"}


# --- faces import the engine, not each other -----------------------------------------------
# overdrive's own files in a face folder, each a piece of the Accelerate module it was split
# from (Accelerate's ``tracking.py`` is a package here; its ``testing.py`` is six files): an
# import between two pieces of one Accelerate module is that module's inside, not face -> face.
PIECES = {
    **dict.fromkeys(
        (
            "compat",
            "compat.accelerator_compat",
            "compat.checkpoint_args",
            "compat.hooks",
            "compat.plugin_views",
            "compat.process_control",
            "compat.properties",
            "compat.triggers",
        ),
        "accelerator",
    ),  # the Accelerator's methods and properties, mixed into overdrive's Accelerator
    "compat.gradient_state": "state",  # GradientState
    "compat.megatron_dummies": "utils.megatron_lm",  # MegatronLMDummyScheduler
    "compat.dynamo": "utils.dataclasses",  # TorchDynamoPlugin
    "compat.fp8_recipes": "utils.dataclasses",  # FP8RecipeKwargs and its kin
    **dict.fromkeys(
        (
            "tracking.available",
            "tracking.base",
            "tracking.jsonl",
            "tracking.known",
            "tracking.mlflow",
            "tracking.registry",
            "tracking.tensorboard",
            "tracking.wandb",
        ),
        "tracking",
    ),
    **dict.fromkeys(
        (
            "test_utils.cases",
            "test_utils.devices",
            "test_utils.launching",
            "test_utils.probes",
            "test_utils.requires",
            "test_utils.subprocesses",
        ),
        "test_utils.testing",
    ),
    "test_utils.mocked": "test_utils.training",  # mocked_dataloaders
}


def accelerate_module(dotted: str) -> str:
    """The Accelerate module a face is, or is a piece of."""
    return PIECES.get(dotted, dotted)


def face_to_face() -> set[tuple[str, str]]:
    """(importer, imported) for every face that imports another face (composition roots
    aside: they import faces by design), anywhere in the file, relative imports included."""
    pairs = set()
    for path in sorted(SRC.rglob("*.py")):
        name = dotted_name(path)
        if not is_face(name) or name in COMPOSITION_ROOTS:
            continue
        for target in imported(path, package_of(path)):
            if target and is_face(target) and accelerate_module(target) != accelerate_module(name):
                pairs.add((name, target))
    return pairs


# Every face -> face import left, each one an import Hugging Face Accelerate 1.15's own module
# makes (the comment names it; ``accelerate.utils`` re-exports what ``utils/<x>.py`` defines, so
# ``from .utils import X`` there is ``utils.<x>`` here). Everything else a face needs it takes
# from the engine module that holds it.
FACE_TO_FACE = {
    # commands/accelerate_cli.py imports every command module
    ("commands.accelerate_cli", "commands.config"),
    ("commands.accelerate_cli", "commands.env"),
    ("commands.accelerate_cli", "commands.estimate"),
    ("commands.accelerate_cli", "commands.launch"),
    ("commands.accelerate_cli", "commands.merge"),
    ("commands.accelerate_cli", "commands.test"),
    ("commands.accelerate_cli", "commands.to_fsdp2"),
    ("commands.accelerate_cli", "commands.utils"),
    # commands/config/__init__.py imports its subcommands
    ("commands.config", "commands.config.config"),
    ("commands.config", "commands.config.config_args"),
    ("commands.config", "commands.config.default"),
    ("commands.config", "commands.config.update"),
    # commands/config/{config,default,update}.py and commands/tpu.py import config_args
    ("commands.config.config", "commands.config.config_args"),
    ("commands.config.default", "commands.config.config_args"),
    ("commands.config.update", "commands.config.config_args"),
    ("commands.tpu", "commands.config.config_args"),
    ("commands.estimate", "utils"),  # commands/estimate.py: from accelerate.utils import ...
    ("compat.accelerator_compat", "tracking"),  # accelerator.py: from .tracking import ...
    # accelerator.py imports HfDeepSpeedConfig's package (.utils), and DeepSpeedPlugin
    # (utils/dataclasses.py) imports .deepspeed for it
    ("compat.plugin_views", "utils.deepspeed"),
    # utils/dataclasses.py (FP8RecipeKwargs' home there): from .environment, from .imports
    ("compat.fp8_recipes", "utils.environment"),
    ("compat.fp8_recipes", "utils.imports"),
    ("data_loader", "state"),  # data_loader.py: from .state import GradientState, ...
    ("inference", "utils.modeling"),  # inference.py: from .utils import ... (modeling's)
    # test_utils/__init__.py imports testing and training
    ("test_utils", "test_utils.testing"),
    ("test_utils", "test_utils.training"),
    # test_utils/testing.py (these are its pieces): from ..utils import ...
    ("test_utils.devices", "utils.imports"),
    ("test_utils.probes", "utils.imports"),
    ("test_utils.probes", "utils.versions"),
    ("test_utils.requires", "utils.constants"),
    ("test_utils.requires", "utils.imports"),
    ("test_utils.requires", "utils.versions"),
    ("test_utils.testing", "utils.imports"),
    ("test_utils.testing", "utils.operations"),
    # test_utils/scripts/test_{ops,script,sync}.py: from accelerate.utils import ..., and
    # from accelerate.test_utils import ... (RegressionModel & co. are training.py's); the
    # assertion helpers the three share sit in their package's __init__ (Accelerate writes
    # them inline in each script)
    ("test_utils.scripts.test_ops", "test_utils.scripts"),
    ("test_utils.scripts.test_ops", "utils"),
    ("test_utils.scripts.test_script", "test_utils.scripts"),
    ("test_utils.scripts.test_script", "test_utils.training"),
    ("test_utils.scripts.test_script", "utils"),
    ("test_utils.scripts.test_sync", "test_utils.scripts"),
    ("test_utils.scripts.test_sync", "test_utils.training"),
    ("test_utils.scripts.test_sync", "utils"),
    # utils/__init__.py imports its modules
    ("utils", "utils.dataclasses"),
    ("utils", "utils.environment"),
    ("utils", "utils.imports"),
    ("utils.ao", "utils.imports"),  # utils/ao.py: from .imports import ...
    ("utils.imports", "utils.environment"),  # utils/imports.py: from .environment import ...
    ("utils.imports", "utils.versions"),  # utils/imports.py: from .versions import ...
    ("utils.modeling", "state"),  # utils/modeling.py: from ..state import AcceleratorState
    ("utils.operations", "utils.dataclasses"),  # utils/operations.py: from .dataclasses import
    ("utils.rich", "utils.imports"),  # utils/rich.py: from .imports import is_rich_available
    ("utils.versions", "utils.constants"),  # utils/versions.py: from .constants import ...
}


def test_faces_import_each_other_only_where_accelerate_does() -> None:
    """A new face -> face import fails here: take the thing from the engine module that holds
    it, or, where Accelerate's own module imports that sibling, add the pair with a comment
    naming it. One that goes away is taken off the list."""
    assert sorted(face_to_face() - FACE_TO_FACE) == []
    assert sorted(FACE_TO_FACE - face_to_face()) == []


def test_every_module_of_a_face_folder_is_accelerates_or_a_named_piece() -> None:
    """Work of overdrive's own does not hide in a face folder under a new name: a face module
    with no path of Accelerate's is a piece of the Accelerate module ``PIECES`` names."""
    own = sorted(
        name
        for name in map(dotted_name, SRC.rglob("*.py"))
        if is_face(name) and name not in ACCELERATE_PATHS and name not in PIECES
    )
    assert own == []


def test_the_face_rule_sees_relative_and_deferred_imports(tmp_path: Path) -> None:
    module = tmp_path / "face.py"
    module.write_text(
        "from . import operations\n"
        "def f():\n    from .imports import is_rich_available\n    from ..state import PartialState\n"
    )
    assert imported(module, "utils") == {"utils.operations", "utils.imports", "state"}
