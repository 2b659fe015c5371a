"""The mechanical rename changes imports, module strings and the command name, nothing else."""

from __future__ import annotations

from tests.conformance.rename import rename


def test_imports_name_overdrive() -> None:
    source = (
        "import accelerate\nfrom accelerate.utils import set_seed\n    from accelerate import x\n"
    )
    assert rename(source) == (
        "import overdrive\nfrom overdrive.utils import set_seed\n    from overdrive import x\n"
    )


def test_module_strings_and_the_logger_name_overdrive() -> None:
    source = 'mock.patch("accelerate.utils.imports.x")\nself.assertLogs("accelerate", level="INFO")'
    assert rename(source) == (
        'mock.patch("overdrive.utils.imports.x")\nself.assertLogs("overdrive", level="INFO")'
    )


def test_the_command_is_renamed_where_a_test_runs_it() -> None:
    source = 'cmd = ["accelerate", "launch", script]\nos.system("accelerate config default")'
    assert rename(source) == (
        'cmd = ["overdrive", "launch", script]\nos.system("overdrive config default")'
    )


def test_everything_else_is_left_as_it_is() -> None:
    source = (
        'os.environ["ACCELERATE_USE_CPU"] = "1"\n'
        'path = "accelerate_config.yaml"\n'
        "# accelerate launch is Hugging Face Accelerate's command\n"
        'msg = "use accelerate to train"\n'
        "import accelerated_thing\n"
    )
    assert rename(source) == source
