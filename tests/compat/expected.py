"""What the conformance suite expects, per ported script and test call.

``DESCRIBED`` is Hugging Face Accelerate's own result on a CPU host (accelerate 1.15.0, 2
processes under torchrun with ACCELERATE_USE_CPU=1; test_notebook under plain python with
ACCELERATE_NUM_PROCESSES=2), recorded with ``harness.py --launcher torchrun``.
``INTENTIONAL`` lists the calls that fail under overdrive on purpose, with the reason
(docs/migrating.md repeats them). ``CANNOT_RUN`` lists scripts that cannot run on this host
at all. Every other call Hugging Face Accelerate passes must pass under overdrive.
"""

from __future__ import annotations

# script -> (launcher for overdrive, extra environment)
SCRIPTS = {
    "test_ops.py": ("overdrive", {}),
    "test_script.py": ("overdrive", {}),
    "test_sync.py": ("overdrive", {}),
    "test_distributed_data_loop.py": ("overdrive", {}),
    "test_ddp_comm_hook.py": ("overdrive", {}),
    "test_merge_weights.py": ("overdrive", {}),
    "test_notebook.py": ("python", {"ACCELERATE_NUM_PROCESSES": "2"}),
}

CANNOT_RUN = {
    "external_deps/test_metrics.py": "needs the datasets and evaluate packages and downloads "
    "bert-base-cased, GLUE/MRPC and the glue metric from the Hub (no network here)",
}


def _passing(names: str) -> dict[str, str]:
    return {name: "pass" for name in names.split()}


DESCRIBED = {
    "test_ops.py": _passing(
        "test_gather#0 test_gather_object#0 test_gather_non_contiguous#0 test_broadcast#0 "
        "test_pad_across_processes#0 test_reduce_sum#0 test_reduce_mean#0 test_reduce_max#0 "
        "test_op_checker#0 test_copy_tensor_to_devices#0"
    ),
    "test_script.py": _passing(
        "init_state_check#0 process_execution_check#0 test_split_between_processes_list#0 "
        "test_split_between_processes_nested_dict#0 test_split_between_processes_tensor#0 "
        "test_split_between_processes_evenly#0 rng_sync_check#0 dl_preparation_check#0 "
        "central_dl_preparation_check#0 custom_sampler_check#0 check_seedable_sampler#0 "
        "check_seedable_sampler_with_data_seed#0 check_seedable_sampler_in_batch_sampler_shard#0 "
        "training_check#0 training_check#1 test_trigger#0 test_reinstantiated_state#0"
    ),
    "test_sync.py": _passing(
        "test_dataloader_break#0 test_distributed_sync#0 test_distributed_sync_multiple_fwd#0 "
        "test_gradient_accumulation_with_opt_and_scheduler#0"
    ),
    "test_distributed_data_loop.py": {
        **_passing(
            "create_accelerator#0 test_default_ensures_even_batch_sizes#0 "
            "test_can_disable_even_batches#0 test_join_raises_warning_for_non_ddp_distributed#0 "
            "test_pickle_accelerator#0 test_data_loader#0 test_data_loader#1 test_data_loader#2 "
            "test_data_loader#3"
        ),
        "test_can_join_uneven_inputs#0": "hang",
        "test_join_can_override_even_batches#0": "fail",
        "test_join_can_override_for_mixed_type_dataloaders#0": "fail",
        "test_join_raises_warning_for_iterable_when_overriding_even_batches#0": "fail",
        "test_stateful_dataloader#0": "fail",
        "test_stateful_dataloader_save_state#0": "fail",
    },
    "test_ddp_comm_hook.py": {f"test_ddp_comm_hook#{i}": "fail" for i in range(10)},
    "test_merge_weights.py": {"setup#0": "pass", "mock_training#0": "pass", "<main>": "fail"},
    "test_notebook.py": {
        **_passing(
            "test_can_initialize#0 test_clean_cuda_fork#0 test_static_rdzv_backend#0 "
            "test_c10d_rdzv_backend#0"
        ),
        "test_fault_tolerant#0": "fail",
        "test_monitoring#0": "fail",
    },
}

# (script, call) -> why overdrive fails it on purpose.
INTENTIONAL: dict[tuple[str, str], str] = {}

# (script, call) -> why overdrive does not pass it yet (the issue stays open for these).
NOT_YET: dict[tuple[str, str], str] = {}


# The same scripts under plain `python` (one process, no launcher), as a user runs them while
# porting: Hugging Face Accelerate's calls and outcomes (recorded with harness.py --launcher
# python --nprocs 1). test_notebook is left out: it always runs under plain python above.
DESCRIBED_PYTHON = {
    "test_ops.py": _passing(
        "test_gather#0 test_gather_object#0 test_gather_non_contiguous#0 test_broadcast#0 "
        "test_pad_across_processes#0 test_reduce_sum#0 test_reduce_mean#0 "
        "test_reduce_max#0 test_op_checker#0 test_copy_tensor_to_devices#0"
    ),
    "test_script.py": _passing(
        "init_state_check#0 process_execution_check#0 test_split_between_processes_list#0 "
        "test_split_between_processes_nested_dict#0 test_split_between_processes_tensor#0 "
        "test_split_between_processes_evenly#0 rng_sync_check#0 dl_preparation_check#0 "
        "central_dl_preparation_check#0 custom_sampler_check#0 check_seedable_sampler#0 "
        "check_seedable_sampler_with_data_seed#0 training_check#0 training_check#1 "
        "test_trigger#0 test_reinstantiated_state#0"
    ),
    "test_sync.py": _passing(
        "test_dataloader_break#0 test_noop_sync#0 "
        "test_gradient_accumulation_with_opt_and_scheduler#0"
    ),
    "test_distributed_data_loop.py": {"create_accelerator#0": "fail", "<main>": "fail"},
    "test_ddp_comm_hook.py": {f"test_ddp_comm_hook#{i}": "fail" for i in range(10)},
    "test_merge_weights.py": _passing("setup#0"),
}
