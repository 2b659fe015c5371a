"""What ``overdrive launch`` started, printed by each process: a launch smoke test.

``python test_cli.py`` runs it as one process; it exits 0 whenever a process state can be
built from the settings in force.
"""

from __future__ import annotations

import torch

from overdrive import PartialState


def main() -> None:
    state = PartialState()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(
        f"process {state.process_index} of {state.num_processes} "
        f"(local {state.local_process_index}, main: {state.is_main_process}) "
        f"on {state.device}, {state.distributed_type.value}, backend {state.backend}, "
        f"{gpus} GPU(s) visible"
    )
    state.wait_for_everyone()
    state.print(f"Successfully ran on {state.num_processes} process(es)")


if __name__ == "__main__":
    main()
